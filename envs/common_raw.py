"""What the adapters that step a library's env copies in Python (PettingZoo, Gymnasium) share beyond
:mod:`marl.envs.common`: :class:`RawChecks`, the checks of what the library returns, and the episode
limits an env carries itself (:func:`own_step_limit`, :func:`check_episode_limit`, :func:`episode_limit_as`).
"""

from __future__ import annotations

import functools
from typing import Any, Callable, Dict, List, Mapping, Optional, Tuple

import gymnasium as gym
import numpy as np
import torch

from marl.env import (
    OBS_KEY,
    MarlError,
    is_structured,
    obs_dtypes,
    obs_leaves,
)
from marl.env.rules import EnvRuleError, note_cast
from marl.envs.common import AgentObs


class RawChecks:
    """Mixin of the adapters that step a library's env copies in Python (PettingZoo, Gymnasium): what
    the library returns is checked where it is read, and a wrong value is an
    :class:`~marl.env.rules.EnvRuleError` naming the env, the step (``reset`` or ``step t``: calls of
    ``step_env`` since ``reset``), the env copy, the agent and the key.

    Needs ``self.info``; the adapter sets ``self._t = 0`` in ``reset`` and adds 1 per ``step_env``.
    """

    _t: int = 0

    def raw_error(
        self, rule: str, detail: str, agent: Optional[str] = None, key: Optional[str] = None, copy: Optional[int] = None
    ) -> EnvRuleError:
        """The :class:`EnvRuleError` of ``rule`` at the current step."""
        at = "reset" if self._t == 0 else f"step {self._t}"
        name = f"{self.info.family}:{self.info.scenario}"  # type: ignore[attr-defined]
        return EnvRuleError(
            rule, name, detail, agent=None if agent is None else f"'{agent}'", key=key, step=at, copy=copy
        )

    def read_obs(self, space: gym.spaces.Space, obs: Any, size: int, agent: str, copy: int) -> np.ndarray:
        """One agent's observation as a flat float32 array of ``size`` values.

        A ``Box`` observation of another real dtype (float64, integers, bool) is cast to float32 and
        the cast noted once per env and key (:func:`~marl.env.rules.note_cast`); other spaces are
        flattened with :func:`gymnasium.spaces.flatten` (Discrete -> one-hot).

        Raises:
            EnvRuleError: rule ``obs_space`` (the observation does not have the declared space's
                size), ``obs_dtype`` (no real number, or finite values beyond float32's range).
        """
        try:
            if isinstance(space, gym.spaces.Box):
                arr = np.asarray(obs)
                if arr.dtype == np.float32:  # the common case: no cast (this runs per agent, copy and step)
                    out = arr.reshape(-1)
                elif arr.dtype.kind not in "fiub":
                    raise self.raw_error("obs_dtype", f"dtype {arr.dtype} is not a real number", agent, "obs", copy)
                else:
                    out = self._float32(arr, space, agent, copy).reshape(-1)
            else:
                out = np.asarray(gym.spaces.flatten(space, obs), np.float32)
        except EnvRuleError:
            raise
        except (ValueError, TypeError, KeyError, IndexError, AssertionError) as e:
            raise self.raw_error(
                "obs_space",
                f"{_show(obs)} does not fit the declared observation space {space}: {e}",
                agent,
                "obs",
                copy,
            ) from e
        if out.size != size:
            raise self.raw_error(
                "obs_space",
                f"{_show(obs)} has {out.size} values; the declared observation space {space} has {size}",
                agent,
                "obs",
                copy,
            )
        return out

    def read_agent(self, raw: gym.spaces.Space, space: gym.spaces.Space, obs: Any, agent: str, copy: int) -> AgentObs:
        """One agent's observation as :class:`ObsRows` stores it: key -> array for a structured ``space``
        (:meth:`read_structured`), else a flat float32 array (:meth:`read_obs`).

        Args:
            raw: the env's own observation space of the agent; space: :func:`agent_obs_space` ``(raw)``.
        """
        if is_structured(space):
            return self.read_structured(raw, space, obs, agent, copy)
        return self.read_obs(raw, obs, int(np.prod(space.shape or ())), agent, copy)

    def read_structured(
        self, raw: gym.spaces.Space, space: gym.spaces.Space, obs: Any, agent: str, copy: int
    ) -> Dict[str, np.ndarray]:
        """One agent's structured observation, key by key (:func:`~marl.env.obs_leaves` of ``space``: a Box
        is the key :data:`~marl.env.OBS_KEY`), each array of the key's shape in its tensor dtype: uint8 keys
        take uint8 (or integer / bool values within 0..255), other keys any real dtype, cast to float32
        (noted once per env, as :meth:`read_obs` does). Keys the env returns beyond the space are ignored.

        Raises:
            EnvRuleError: rule ``obs_space`` (no dict, or a missing key, for a ``Dict`` space; a shape other
                than the key's), ``obs_dtype`` (no real number; a float or out-of-range value for a uint8 key;
                finite values beyond float32's range).
        """
        leaves, raws, dtypes = obs_leaves(space), obs_leaves(raw), obs_dtypes(space)
        if isinstance(space, gym.spaces.Dict):
            missing = [k for k in leaves if not isinstance(obs, Mapping) or k not in obs]
            if missing:
                got = f"the keys {list(obs)}" if isinstance(obs, Mapping) else _show(obs)
                raise self.raw_error(
                    "obs_space", f"got {got}; the declared Dict space {space} needs {missing}", agent, "obs", copy
                )
            items = {k: obs[k] for k in leaves}
        else:
            items = {OBS_KEY: obs}
        out = {}
        for k, box in leaves.items():
            key = f"obs['{k}']" if isinstance(space, gym.spaces.Dict) else "obs"
            arr = np.asarray(items[k])
            if arr.dtype.kind not in "fiub":
                raise self.raw_error("obs_dtype", f"dtype {arr.dtype} is not a real number", agent, key, copy)
            if arr.shape != box.shape:
                raise self.raw_error(
                    "obs_space", f"shape {arr.shape}; the declared space {raws[k]} has {box.shape}", agent, key, copy
                )
            out[k] = (
                self._uint8(arr, agent, key, copy)
                if dtypes[k] == torch.uint8
                else self._float32(arr, raws[k], agent, copy)
            )
        return out

    def _uint8(self, arr: np.ndarray, agent: str, key: str, copy: int) -> np.ndarray:
        """``arr`` for a uint8 key: uint8 as it is, integers / bools within 0..255 cast (nothing is rounded or clipped)."""
        if arr.dtype == np.uint8:
            return arr
        if arr.dtype.kind == "f" or (arr.size and (arr.min() < 0 or arr.max() > 255)):
            what = f"dtype {arr.dtype}" if arr.dtype.kind == "f" else f"values in [{arr.min()}, {arr.max()}]"
            raise self.raw_error(
                "obs_dtype", f"{what} for a uint8 Box (expected uint8 values 0..255)", agent, key, copy
            )
        return arr.astype(np.uint8)

    def _float32(self, arr: np.ndarray, raw: gym.spaces.Box, agent: str, copy: int) -> np.ndarray:
        """``arr`` cast to float32 (a cast checked and noted: :meth:`_note_cast`)."""
        with np.errstate(over="ignore"):  # an overflow is reported by _note_cast, as an EnvRuleError
            out = arr.astype(np.float32, copy=False)
        if arr.dtype != np.float32:
            self._note_cast(arr, out, agent, copy, raw)
        return out

    def _note_cast(self, arr: np.ndarray, out: np.ndarray, agent: str, copy: int, space: gym.spaces.Box) -> None:
        """Check a cast observation and note the cast once per env (``self.cast_notes``; a warning only where the
        dtype is not the declared space's: an ``int8`` board game that declares ``int8`` is cast silently)."""
        if arr.dtype.kind == "f" and not np.isfinite(out).all() and np.isfinite(arr).all():
            raise self.raw_error(
                "obs_dtype", f"value {float(np.abs(arr).max()):g} lies beyond float32's range", agent, "obs", copy
            )
        casts = self.__dict__.setdefault("cast_notes", [])
        if not casts:
            name = f"{self.info.family}:{self.info.scenario}"  # type: ignore[attr-defined]
            casts.append(note_cast(name, "obs", arr.dtype, "float32", f"'{agent}'", warn=arr.dtype != space.dtype))

    def read_reward(self, r: Any, agent: str, copy: int) -> float:
        """One agent's reward as a float.

        Raises:
            EnvRuleError: rule ``reward_space``: not one real number (an array of several values, a string).
        """
        arr = np.asarray(r)
        if arr.size != 1 or arr.dtype.kind not in "fiub":
            raise self.raw_error(
                "reward_space",
                f"reward {r!r} is not one number (shape {arr.shape}, dtype {arr.dtype})",
                agent,
                "reward",
                copy,
            )
        return float(arr.reshape(()))

    def unpack(self, out: Any, n: int, what: str, copy: int) -> Tuple[Any, ...]:
        """The ``n``-tuple a library's ``reset`` (``n=2``: observations, infos) or ``step`` (``n=5``)
        returned, checked: a tuple of ``n`` whose last item (the infos) is a dict.

        Raises:
            EnvRuleError: rule ``reset_api`` / ``step_api`` (e.g. the old APIs: ``reset`` returning
                only observations, ``step`` returning four values with one ``done``).
        """
        if isinstance(out, tuple) and len(out) == n and isinstance(out[-1], Mapping):
            return out
        rule, want = (
            ("reset_api", "(observations, infos)")
            if n == 2
            else ("step_api", "(observations, rewards, terminations, truncations, infos)")
        )
        got = f"a tuple of {len(out)}" if isinstance(out, tuple) else type(out).__name__
        raise self.raw_error(
            rule,
            f"{what} returned {got}; expected {want} (the Gymnasium / PettingZoo API since 2022; the old API "
            f"returned {'only the observations' if n == 2 else 'four values with one done'})",
            key=what,
            copy=copy,
        )


def _show(obs: Any) -> str:
    shape = getattr(obs, "shape", None)
    return f"an observation of shape {tuple(shape)}" if shape is not None else f"an observation {type(obs).__name__}"


# Documented constructor arguments that cap an episode, as the unwrapped env stores them:
# attribute -> where it comes from (the message of an env without a limit lists them).
OWN_LIMIT_ATTRIBUTES = {
    "max_cycles": "PettingZoo MPE / SISL / Butterfly envs, max_cycles=",
    "max_steps": "RWARE's Warehouse(max_steps=500)",
    "_max_episode_steps": "Level-Based Foraging's ForagingEnv(max_episode_steps=50) stores it here",
    "max_episode_steps": "envs that store Gymnasium's name as an attribute",
    "episode_limit": "SMAC / EPyMARL envs",
}


def _positive_int(v: Any) -> int:
    """``v`` as an int if it is a whole number >= 1 (numpy ints included), else 0 (no limit)."""
    if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
        return 0
    return int(v) if v >= 1 else 0


def own_step_limit(env: Any) -> Tuple[int, str]:
    """The step limit an env declares itself: the smallest of a Gymnasium ``TimeLimit`` in its wrapper
    chain (which ``gymnasium.make`` adds for a registered ``max_episode_steps``), its
    ``spec.max_episode_steps`` and the constructor arguments of :data:`OWN_LIMIT_ATTRIBUTES` kept on the
    unwrapped env.

    Returns:
        ``(steps, where)``: the limit (``0``: none found) and where it was read, e.g.
        ``"ForagingEnv._max_episode_steps"`` or ``"TimeLimit wrapper"``.
    """
    found: List[Tuple[int, str]] = []
    layer, seen = env, 0
    while layer is not None and seen < 64:  # the wrapper chain (Gymnasium wrappers and PettingZoo's keep .env)
        if type(layer).__name__ == "TimeLimit":
            found.append((_positive_int(getattr(layer, "_max_episode_steps", None)), "TimeLimit wrapper"))
        layer, seen = getattr(layer, "env", None), seen + 1
    spec = getattr(env, "spec", None)
    found.append((_positive_int(getattr(spec, "max_episode_steps", None)), "spec.max_episode_steps"))
    base = getattr(env, "unwrapped", env)
    for attr in OWN_LIMIT_ATTRIBUTES:
        own = vars(base).get(attr) if hasattr(base, "__dict__") else None  # the attribute itself, no wrapper lookup
        found.append((_positive_int(own), f"{type(base).__name__}.{attr}"))
    found = [f for f in found if f[0] > 0]
    return min(found) if found else (0, "")


def check_episode_limit(value: Any, where: str) -> Optional[int]:
    """``episode_limit=`` of an adapter: ``None`` (read the env's own) or a whole number >= 1.

    Raises:
        MarlError: anything else, naming the value and ``where``.
    """
    if value is None:
        return None
    if not _positive_int(value):
        raise MarlError(
            f"{where}: episode_limit must be a whole number >= 1 (steps per episode) or None (the env's own "
            f"limit), got {value!r}."
        )
    return int(value)


def episode_limit_as(native: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Decorator of a family's registry factory whose env calls its episode limit ``native`` (VMAS and
    SMAX ``max_steps``, MPE ``max_cycles``): ``make_env(family, scenario, episode_limit=T)``, marl's
    one name for it across families, passes ``native=T``.

    Raises:
        MarlError: both ``episode_limit`` and ``native`` given (the message names both values).
    """

    def wrap(factory: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(factory)
        def make(scenario: Optional[str] = None, **kwargs: Any) -> Any:
            if "episode_limit" in kwargs:
                if native in kwargs:
                    raise MarlError(
                        f"got both episode_limit={kwargs['episode_limit']!r} and {native}={kwargs[native]!r}: "
                        f"episode_limit is marl's name for this env's {native}. Pass one of them."
                    )
                kwargs[native] = kwargs.pop("episode_limit")
            return factory(scenario, **kwargs)

        return make

    return wrap
