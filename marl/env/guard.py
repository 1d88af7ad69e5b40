"""The per-step guard of a user env: what every :class:`~marl.env.Step` must be before marl uses it.

An env written by hand (a :class:`~marl.env.MultiAgentEnv` subclass) hands its
steps straight to the sampler; a wrong one used to fail far from its cause
(``RuntimeError: mixed dtype`` inside torch for float64 observations, a matmul
shape error for an observation that grew mid-episode, NaN logits for an agent
with no legal action). :class:`EnvGuard` checks each step where it enters
marl (the env runners, :func:`marl.env.check_env`), at reset and at step
alike:

* ``obs``, ``reward``, ``alive``, ``avail_actions`` hold every group
  (rule ``groups``);
* a structured observation (an image ``Box``, a ``Dict`` of Boxes; :func:`~marl.env.contract.is_structured`)
  holds exactly its space's keys, each ``[B, N_g, *shape_k]`` in the key's dtype (uint8 stays uint8;
  other real dtypes are cast to float32, noted once); the error names the key (``obs['image']``);
* observations, state and rewards of another real dtype (float64, float16,
  integers, bool) are cast to float32, and the cast is said once per env and
  key (:class:`~marl.env.rules.EnvCastWarning`); ``alive`` / ``avail_actions``
  / ``terminated`` / ``truncated`` of an integer dtype are read as bool (0 is
  False). Complex values, or finite values beyond float32's range, are an
  error (rule ``obs_dtype``);
* every shape is the one ``env.info`` declares (rules ``obs_shape``,
  ``state_shape``, ``reward_shape``, ``alive_shape``, ``flags``,
  ``avail_shape``);
* every alive agent of a discrete group has a legal action (rule ``no_legal_action``).

Each failure is an :class:`~marl.env.rules.EnvRuleError` naming the env, the
step, the env copy, the agent and the key. Cost per step: a dtype and a shape
comparison per tensor and one ``any`` over each action mask.

This module imports nothing of marl but :mod:`marl.env.contract`, :mod:`marl.env.obs` and :mod:`marl.env.rules`.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Dict, List, Optional, Set, Tuple

import gymnasium as gym
import torch

from marl.env.contract import EnvInfo, Step
from marl.env.obs import obs_dtypes, obs_leaves
from marl.env.rules import EnvRuleError, agents_of, note_cast

_FLOAT_FIELDS = ("obs", "final_obs", "reward")  # group -> float32 tensors
_BOOL_FIELDS = ("alive", "avail_actions", "final_avail_actions")  # group -> bool tensors (None: continuous)
_FLOAT32_MAX = float(torch.finfo(torch.float32).max)


class EnvGuard:
    """Checks (and casts) the :class:`Step` objects of one env; see the module docstring.

    Args:
        info: the env's :class:`~marl.env.EnvInfo` (shapes: ``obs[g]`` ``[B, N_g, obs_dim_g]``,
            ``reward[g]`` / ``alive[g]`` ``[B, N_g]``, ``avail_actions[g]`` ``[B, N_g, n_actions_g]``,
            ``state`` ``[B, state_dim]``, ``terminated`` / ``truncated`` ``[B]``).
        where: how messages name the caller, e.g. ``"env runner 1"`` (``""``: nothing).

    Attributes:
        steps: env steps since the guard was built (the reset is step 0).
        casts: the lines said about casts (one per key), in order.
    """

    def __init__(self, info: EnvInfo, where: str = ""):
        self.info, self.where = info, where
        self.name = f"{info.family}:{info.scenario}" + (f" ({where})" if where else "")
        self.steps = 0
        self.casts: List[str] = []
        self._cast_keys: Set[str] = set()
        # structured groups: key -> torch dtype of their observation tensors (flat groups: float32, not listed)
        self._obs_dtypes = {g: obs_dtypes(gi.obs_space) for g, gi in info.groups.items() if gi.structured}
        self._shapes = self._want()  # info is fixed for the env's life: the expected shapes once

    def __call__(self, step: Step, reset: bool = False) -> Step:
        """``step`` checked, with values of another dtype cast (a copy; the env's tensors stay).

        Raises:
            EnvRuleError: a missing group, a wrong shape, a dtype that cannot be cast, an alive
                agent with no legal action (env, step, env copy, agent and key named).
        """
        if not reset:
            self.steps += 1
        if not isinstance(step, Step):
            raise self.error("step_type", f"expected a marl Step, got {type(step).__name__}", None, None)
        fields = self._cast(step)
        if fields:
            step = dataclasses.replace(step, **fields)
        self._check_shapes(step)
        self._check_legal(step)
        return step

    @property
    def at(self) -> str:
        """The step as messages name it: ``"reset"`` (step 0) or ``"step t"``."""
        return "reset" if self.steps == 0 else f"step {self.steps}"

    def error(
        self,
        rule: str,
        detail: str,
        key: Optional[str],
        group: Optional[str],
        index: Optional[int] = None,
        copy: Optional[int] = None,
    ) -> EnvRuleError:
        """An :class:`EnvRuleError` of this env at the current step."""
        return EnvRuleError(
            rule, self.name, detail, agent=agents_of(self.info, group, index), key=key, step=self.at, copy=copy
        )

    # ------------------------------------------------------------------ dtypes
    def _cast(self, step: Step) -> Dict[str, Any]:
        """The Step fields whose tensors had to be cast (field -> new value); ``{}`` in the common case."""
        out: Dict[str, Any] = {}
        seen: Dict[int, torch.Tensor] = {}  # id of an env tensor -> its cast (final_* often alias the current)
        for field in ("obs", "reward", "alive", "avail_actions", "final_obs", "final_avail_actions"):
            per_group = getattr(step, field)
            if per_group is None:
                continue
            if not isinstance(per_group, dict):
                raise self.error(
                    "groups", f"{field} must be a dict over the groups, got {type(per_group).__name__}", field, None
                )
            for g in self.info.groups:
                if g not in per_group and not field.startswith("final_"):
                    raise self.error(
                        "groups",
                        f"{field} lacks group '{g}': expected the groups {list(self.info.groups)}, got "
                        f"{list(per_group)}",
                        field,
                        g,
                    )
                t = per_group.get(g)
                if g in self._obs_dtypes and field in ("obs", "final_obs"):
                    new = self._cast_obs(t, field, g, seen)
                else:
                    new = self._cast_one(t, field, g, seen)
                if new is not t:
                    out.setdefault(field, dict(per_group))[g] = new
        for field in ("state", "final_state", "terminated", "truncated"):
            t = getattr(step, field)
            new = self._cast_one(t, field, None, seen)
            if new is not t:
                out[field] = new
        return out

    def _cast_obs(self, t: Any, field: str, group: str, seen: Dict[int, torch.Tensor]) -> Any:
        """A structured observation (a tensor for a Box, key -> tensor for a Dict) with each key in its
        space's dtype (:func:`~marl.env.contract.obs_dtypes`); a Dict's keys must be exactly the space's."""
        if t is None or id(t) in seen:
            return seen.get(id(t), t)
        want = self._obs_dtypes[group]
        is_dict = isinstance(self.info.groups[group].obs_space, gym.spaces.Dict)
        if not is_dict:
            return self._cast_one(t, field, group, seen, want["obs"])
        if not isinstance(t, dict) or list(t) != list(want):
            got = list(t) if isinstance(t, dict) else type(t).__name__
            raise self.error(
                "obs_space",
                f"a Dict observation must be a dict with the keys {list(want)} (in this order), got {got}",
                field,
                group,
            )
        new = {k: self._cast_one(v, f"{field}['{k}']", group, seen, want[k]) for k, v in t.items()}
        out: Any = t if all(new[k] is t[k] for k in t) else new
        seen[id(t)] = out
        return out

    def _cast_one(
        self,
        t: Any,
        field: str,
        group: Optional[str],
        seen: Dict[int, torch.Tensor],
        want: Optional[torch.dtype] = None,
    ) -> Any:
        if t is None:
            return t
        if id(t) in seen:
            return seen[id(t)]
        if not isinstance(t, torch.Tensor):
            raise self.error("step_type", f"expected a torch tensor, got {type(t).__name__}", field, group)
        if want is None:
            want = torch.bool if field in _BOOL_FIELDS or field in ("terminated", "truncated") else torch.float32
        if t.dtype == want:
            return t
        if t.is_complex() or (want is torch.bool and t.is_floating_point()):
            rule = "obs_dtype" if want is torch.float32 else "bool_dtype"
            raise self.error(rule, f"dtype {t.dtype} cannot be read as {want}", field, group)
        if want is torch.bool:
            new = t != 0
        elif want is torch.uint8:
            if t.is_floating_point() or t.dtype == torch.bool or int(t.min()) < 0 or int(t.max()) > 255:
                raise self.error(
                    "obs_dtype", f"dtype {t.dtype} cannot be read as the space's uint8 (0..255 integers)", field, group
                )
            new = t.to(torch.uint8)
        else:
            new = t.float()
            if t.is_floating_point() and not bool(torch.isfinite(new).all()) and bool(torch.isfinite(t).all()):
                big = float(t.abs().max())
                raise self.error(
                    "obs_dtype",
                    f"value {big:g} lies beyond float32's range (±{_FLOAT32_MAX:.3g}); scale it down",
                    field,
                    group,
                )
        key = field.removeprefix("final_") + (f"[{group}]" if group else "")
        if key not in self._cast_keys:
            self._cast_keys.add(key)
            self.casts.append(note_cast(self.name, key, t.dtype, str(want), agents_of(self.info, group)))
        seen[id(t)] = new
        return new

    # ------------------------------------------------------------------ shapes
    def _want(self) -> List[Tuple[str, Optional[str], Tuple[int, ...], str, Optional[str]]]:
        """(field, group, shape, rule, key of a Dict observation or None) of every tensor a Step carries."""
        info, B = self.info, self.info.num_envs
        out: List[Tuple[str, Optional[str], Tuple[int, ...], str, Optional[str]]] = [
            ("state", None, (B, info.state_dim), "state_shape", None),
            ("final_state", None, (B, info.state_dim), "state_shape", None),
            ("terminated", None, (B,), "flags", None),
            ("truncated", None, (B,), "flags", None),
        ]
        for g, gi in info.groups.items():
            dict_obs = isinstance(gi.obs_space, gym.spaces.Dict)
            for field in ("obs", "final_obs"):
                if not gi.structured:
                    out.append((field, g, (B, gi.n_agents, gi.obs_dim), "obs_shape", None))
                    continue
                for k, box in obs_leaves(gi.obs_space).items():
                    out.append((field, g, (B, gi.n_agents, *box.shape), "obs_shape", k if dict_obs else None))
            out += [
                ("reward", g, (B, gi.n_agents), "reward_shape", None),
                ("alive", g, (B, gi.n_agents), "alive_shape", None),
            ]
            if gi.discrete:
                out += [
                    ("avail_actions", g, (B, gi.n_agents, gi.n_actions), "avail_shape", None),
                    ("final_avail_actions", g, (B, gi.n_agents, gi.n_actions), "avail_shape", None),
                ]
        return out

    def _check_shapes(self, step: Step) -> None:
        for field, group, want, rule, key in self._shapes:
            value = getattr(step, field)
            t = value.get(group) if group is not None and isinstance(value, dict) else value
            if t is None and (field.startswith("final_") or field == "avail_actions"):
                continue  # final_*: None means "as the current"; avail_actions None: every action legal
            if key is not None and isinstance(t, dict):  # a Dict observation (keys checked in _cast_obs)
                t, field = t[key], f"{field}['{key}']"
            if not isinstance(t, torch.Tensor):
                raise self.error(
                    "step_type", f"expected a torch tensor of shape {want}, got {type(t).__name__}", field, group
                )
            if tuple(t.shape) != want:
                raise self.error(
                    rule,
                    f"shape {tuple(t.shape)} differs from {want} ({_DIMS.get(field.removeprefix('final_'), '[B, N_g, *shape]')} "
                    f"from env.info); an env keeps the shapes its EnvInfo declares for the whole run",
                    field,
                    group,
                )

    def _check_legal(self, step: Step) -> None:
        for g, gi in self.info.groups.items():
            av = step.avail_actions.get(g) if gi.discrete else None
            if av is None:
                continue
            none = (~av.any(-1)) & step.alive[g]
            if bool(none.any()):
                b, i = (int(x) for x in none.nonzero()[0])
                raise self.error(
                    "no_legal_action",
                    "this alive agent has no legal action (avail_actions all False); give it at "
                    "least one (a waiting agent: a no-op)",
                    "avail_actions",
                    g,
                    i,
                    copy=b,
                )


_DIMS = {
    "obs": "[B, N_g, obs_dim]",
    "state": "[B, state_dim]",
    "reward": "[B, N_g]",
    "alive": "[B, N_g]",
    "avail_actions": "[B, N_g, n_actions]",
    "terminated": "[B]",
    "truncated": "[B]",
}
