"""Adapter: any PettingZoo ``ParallelEnv`` or ``AECEnv`` as a batched :class:`~marl.env.MultiAgentEnv`.

``B = num_envs`` independent copies of the PettingZoo env are stepped one after
the other in Python and their outputs stacked into the tensors described in
:mod:`marl.env`. Rules (also see :class:`PettingZooEnv`):

* **Agent order** is ``possible_agents`` of the first copy (fixed).
* **Groups**: agents with the same id prefix (text before the last ``_``:
  ``"adversary_0"`` -> ``"adversary"``), the same team and identical observation
  and action spaces. A prefix whose agents differ in spaces (or team) is split
  into several groups: a one-agent group is named after its agent, otherwise
  ``f"{prefix}_g{k}"`` (``k``: index among that prefix's groups).
* **Observations**: a ``Dict`` space with an ``"observation"`` key uses that
  part (and ``"action_mask"`` as the legal actions). A ``Box`` of rank >= 2 (an
  image ``[H, W, C]``, a board) or a ``Dict`` of Boxes stays structured
  (``envs/common.py``: ``agent_obs_space``): ``obs[g]`` ``[B, N_g, *shape]``, or
  key -> such, uint8 kept uint8 and other dtypes float32 (docs/observations.md).
  Every other space is flattened with :func:`gymnasium.spaces.flatten` (a 1-D
  Box as it is, Discrete -> one-hot, Tuple / MultiDiscrete / a Dict holding
  them -> one vector). The global state is the concatenation of all agents'
  observations, each flattened (images included), in agent order
  (``env.state()`` is never called: it is slow).
* **Action masks** come from ``obs["action_mask"]`` or ``info["action_mask"]``;
  without them every action is legal. An alive agent whose mask is all zero
  (turn-based games mask every action of the agent that is not to move) gets
  an all-True mask, and its action is checked when its turn comes (see AEC).
* **Agents leaving early** (PettingZoo drops them from ``env.agents``): from the
  step they leave on they have ``alive=False``, observation zeros and, after
  that step, reward 0; their actions are ignored.
* **Episode end**: a copy's episode ends when no agent is left. It counts as
  *truncated* if any agent that finished at that last step was truncated,
  otherwise as *terminated*; ``episode_limit=T`` also ends it after ``T``
  batched steps, as a truncation. The copy then resets itself (unseeded, continuing
  its RNG stream); ``final_obs`` / ``final_state`` hold the last observation.
* **AEC envs** (:mod:`marl.envs.pettingzoo.aec`): one batched step is one *turn*
  (the agent to move acts; the others wait with a mask that allows only action
  0, ignored) for turn-based games, whose observations carry an ``action_mask``,
  and one *cycle* (every live agent acts once, in turn order) otherwise;
  ``aec_mode=`` overrides. An action that is illegal at its turn is replaced by a
  uniformly random legal one (per-copy RNG seeded by :meth:`reset`) and counted
  in ``step.info["illegal_actions"]`` (``[B]`` int64).
* **Seeds**: ``reset(seed)`` resets copy ``b`` with ``seed + b``.
"""

from __future__ import annotations

import copy
import inspect
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence

import gymnasium as gym
import numpy as np
import torch

from marl.env import EnvInfo, MarlError, MultiAgentEnv, Observation, Step, check_entity_layout, unknown_choice
from marl.envs.pettingzoo.aec import AEC_MODES, AECStepping
from marl.envs.common import (
    AgentLayout,
    AgentObs,
    ObsRows,
    agent_obs_space,
    build_groups,
    check_kwargs,
    check_num_envs,
    default_teams,
    mpe2_modules,
    named_env_constructor,
)
from marl.envs.common_raw import check_episode_limit, RawChecks, own_step_limit

DEFAULT_NUM_ENVS = 8


# --------------------------------------------------------------------------- PettingZoo adapter


def _is_aec(env: Any) -> bool:
    from pettingzoo import AECEnv, ParallelEnv

    if isinstance(env, ParallelEnv):
        return False
    if isinstance(env, AECEnv):
        return True
    return hasattr(env, "last") and hasattr(env, "agent_selection")


def _aec_mode(mode: Optional[str], aec: bool, io: Sequence["_AgentIO"]) -> str:
    if mode is None:
        return "turn" if aec and any(x.mask_in_obs for x in io) else "cycle"
    if mode not in AEC_MODES:
        raise unknown_choice("aec_mode", mode, list(AEC_MODES))
    return mode


def _is_instance(obj: Any) -> bool:
    return not isinstance(obj, type) and hasattr(obj, "possible_agents") and hasattr(obj, "step")


class _AgentIO:
    """How to read one agent's observation / mask and write its action."""

    def __init__(self, obs_space: gym.spaces.Space, act_space: gym.spaces.Space, agent: str):
        self.mask_in_obs = isinstance(obs_space, gym.spaces.Dict) and "action_mask" in obs_space.spaces
        if isinstance(obs_space, gym.spaces.Dict) and "observation" in obs_space.spaces:
            self.raw_space = obs_space.spaces["observation"]
            self.key = "observation"
        else:
            self.raw_space = obs_space
            self.key = None
        self.obs_space = agent_obs_space(self.raw_space)
        if isinstance(act_space, gym.spaces.Discrete):
            self.start = int(act_space.start)
            self.n = int(act_space.n)
            self.action_space: gym.spaces.Space = gym.spaces.Discrete(self.n)
        elif isinstance(act_space, gym.spaces.Box):
            self.n = 0
            self.shape, self.dtype = act_space.shape, act_space.dtype
            self.action_space = gym.spaces.Box(
                low=act_space.low.astype(np.float32).reshape(-1),
                high=act_space.high.astype(np.float32).reshape(-1),
                dtype=np.float32,
            )
        else:
            raise MarlError(f"Agent '{agent}' has action space {act_space!r}; only Discrete and Box are supported.")

    def mask(self, obs: Any, info: Optional[Mapping]) -> Optional[np.ndarray]:
        if not self.n:
            return None
        m = None
        if self.mask_in_obs and obs is not None:
            m = obs["action_mask"]
        elif info and "action_mask" in info:
            m = info["action_mask"]
        return None if m is None else np.asarray(m).reshape(-1).astype(bool)

    def to_env(self, a: Any) -> Any:
        if self.n:
            return int(a) + self.start
        return np.asarray(a, dtype=self.dtype).reshape(self.shape)


class PettingZooEnv(AECStepping, RawChecks, MultiAgentEnv):
    """``B`` copies of a PettingZoo env (Parallel or AEC) as one batched env.

    Build it with :meth:`from_object` (an env instance, a constructor, or a
    module exposing ``parallel_env`` / ``env``), :meth:`from_name` (a dotted
    module path such as ``"mpe2.simple_tag_v3"`` or a PettingZoo registry id
    such as ``"classic/tictactoe-v3"``) or :func:`make` (what
    ``make_env("pettingzoo", name)`` calls). See the module docstring for the
    rules on groups, masks, early leavers, episode ends and AEC cycles.

    Args:
        envs: the ``B`` PettingZoo env copies (all Parallel or all AEC).
        scenario: name recorded in :attr:`info`.
        kind: ``"cooperative"`` / ``"competitive"`` / ``"mixed"``; ``None`` infers
            it (one prefix -> cooperative, several -> mixed).
        teams: optional team -> agent ids or prefixes (see :func:`default_teams`).
        shared_reward: recorded in :attr:`info` (default ``False``).
        episode_limit: steps (batched steps: moves in AEC ``"turn"`` mode) after which an
            episode is truncated, recorded in :attr:`info` (a whole number >= 1); ``None``
            records the env's own (``max_cycles`` of the unwrapped env, or another attribute of
            ``envs/common_raw.py``: ``own_step_limit``), which the env enforces itself, else 0.
        seed: seed used by ``reset()`` when called without one (``None``: unseeded).
        family: family name recorded in :attr:`info`.
        entity_layout: optional group -> entity layout (format:
            :class:`~marl.env.EnvInfo`), checked by
            :func:`~marl.env.check_entity_layout` and set as ``info.entity_layout``.
        aec_mode: AEC envs only: ``"turn"`` or ``"cycle"`` (:mod:`marl.envs.pettingzoo.aec`);
            ``None``: ``"turn"`` when the observations carry an ``action_mask``.

    Shapes: ``obs[g]`` ``[B, N_g, obs_dim_g]`` float32 (structured: ``[B, N_g, *shape]`` or key -> such,
    see the module docstring), ``state`` ``[B, sum obs_dim]`` float32,
    ``reward[g]`` ``[B, N_g]`` float32, ``avail_actions[g]`` ``[B, N_g, n_g]`` bool
    (``None`` for continuous groups), ``alive[g]`` ``[B, N_g]`` bool.

    Raises:
        MarlError: no env given, an unsupported action space, copies that
            disagree on agents, an invalid ``entity_layout``, bad actions, or
            ``step`` before ``reset``.
    """

    def __init__(
        self,
        envs: Sequence[Any],
        *,
        scenario: str = "custom",
        kind: Optional[str] = None,
        teams: Optional[Mapping[str, Sequence[str]]] = None,
        shared_reward: bool = False,
        episode_limit: Optional[int] = None,
        seed: Optional[int] = None,
        family: str = "pettingzoo",
        entity_layout: Optional[Mapping[str, Any]] = None,
        aec_mode: Optional[str] = None,
    ):
        if not envs:
            raise MarlError("PettingZooEnv needs at least one env copy (num_envs >= 1).")
        self._envs = list(envs)
        first = self._envs[0]
        self._aec = _is_aec(first)
        agents = list(first.possible_agents)
        for e in self._envs[1:]:
            if list(e.possible_agents) != agents:
                raise MarlError(f"Env copies disagree on possible_agents: {agents} vs {list(e.possible_agents)}.")
        self._io = [_AgentIO(first.observation_space(a), first.action_space(a), a) for a in agents]
        self.aec_mode = _aec_mode(aec_mode, self._aec, self._io)
        if kind is None and not teams:  # a known zero-sum game: one team per player (names.ZERO_SUM)
            from marl.envs.pettingzoo.names import known_kind

            kind = known_kind(_env_name(first))
        kind, team_of = default_teams(agents, kind, teams)
        groups = build_groups(
            agents,
            {a: io.obs_space for a, io in zip(agents, self._io)},
            {a: io.action_space for a, io in zip(agents, self._io)},
            team_of,
        )
        episode_limit = check_episode_limit(episode_limit, f"PettingZoo env {scenario!r}")
        self._cut = episode_limit or 0  # a limit given here is enforced (truncation); the env's own, the env ends
        if episode_limit is None:  # the env's own: max_cycles of MPE / SISL / Butterfly envs, a TimeLimit, ...
            episode_limit = own_step_limit(first)[0]
        self.layout = AgentLayout(agents, groups)
        self.info = EnvInfo(
            family=family,
            scenario=scenario,
            agents=agents,
            groups=groups,
            state_dim=self.layout.state_dim,
            episode_limit=episode_limit,
            kind=kind,
            shared_reward=bool(shared_reward),
            num_envs=len(self._envs),
        )
        if entity_layout is not None:
            self.info.entity_layout = check_entity_layout(entity_layout, self.info)
        self._default_seed = seed
        self._init_buffers()

    def _init_buffers(self) -> None:
        """Per-copy RNGs and the observation / alive / mask arrays the copies write into."""
        self._rngs = [np.random.default_rng(self._default_seed) for _ in self._envs]
        self._started = False
        groups = self.info.groups
        B, N = len(self._envs), len(self.info.agents)
        self._rows = ObsRows(self.layout, B)
        self._alive = np.zeros((B, N), bool)
        self._steps = np.zeros(B, np.int64)  # batched steps of each copy's episode (for episode_limit=)
        self._masks = {name: np.ones((B, g.n_agents, g.n_actions), bool) for name, g in groups.items() if g.discrete}
        self._mask_slot = {a: (name, j) for name, g in groups.items() for j, a in enumerate(g.agents)}

    # ------------------------------------------------------------------ construction

    @classmethod
    def from_object(cls, obj: Any, num_envs: int = DEFAULT_NUM_ENVS, **kwargs) -> "PettingZooEnv":
        """Build from an env instance, a constructor / callable, or a module.

        Copy rule: with an *instance*, copy 0 is the instance itself and copies
        ``1..B-1`` are ``copy.deepcopy(instance)`` (PettingZoo envs built on
        ``EzPickle`` re-run their constructor with the original arguments when
        deep-copied). With a *callable* it is called ``B`` times with no
        arguments. A *module* uses its ``parallel_env`` (else ``env``).

        Args:
            obj: the env, constructor or module.
            num_envs: ``B``.
            **kwargs: :class:`PettingZooEnv` options (``kind``, ``teams``, ``seed``,
                ``entity_layout``, ...).
        Raises:
            MarlError: ``obj`` is none of these, or the instance cannot be deep-copied.
        """
        num_envs = check_num_envs(num_envs)
        check_kwargs("PettingZooEnv.from_object", kwargs, _ADAPTER_KWARGS + ("scenario", "family"))
        if inspect.ismodule(obj):
            ctor = getattr(obj, "parallel_env", None) or getattr(obj, "env", None)
            if ctor is None:
                raise MarlError(f"Module {obj.__name__} has neither parallel_env nor env.")
            kwargs.setdefault("scenario", obj.__name__)
            return cls([ctor() for _ in range(num_envs)], **kwargs)
        if _is_instance(obj):
            copies = [obj]
            for _ in range(num_envs - 1):
                try:
                    copies.append(copy.deepcopy(obj))
                except Exception as e:  # noqa: BLE001 - any failure means "cannot copy"
                    raise MarlError(
                        f"Cannot deep-copy {type(obj).__name__} to make {num_envs} copies ({e}). "
                        "Pass a constructor (e.g. lambda: my_env()) instead of an instance."
                    ) from e
            kwargs.setdefault("scenario", _env_name(obj))
            return cls(copies, **kwargs)
        if callable(obj):
            copies = [obj() for _ in range(num_envs)]
            if not _is_instance(copies[0]):
                raise MarlError(f"{obj!r} did not return a PettingZoo env (got {type(copies[0]).__name__}).")
            kwargs.setdefault("scenario", _env_name(copies[0]))
            return cls(copies, **kwargs)
        raise MarlError(
            f"Cannot build a PettingZoo env from {type(obj).__name__}: pass an env instance, a constructor or a module."
        )

    @classmethod
    def from_name(
        cls, name: str, num_envs: int = DEFAULT_NUM_ENVS, adapter_kwargs: Optional[dict] = None, **env_kwargs
    ):
        """Build from ``"pkg.module"`` / ``"pkg.module:EnvClass"`` or a PettingZoo registry id.

        A module path imports the module and calls its ``parallel_env(**env_kwargs)``
        (``env(...)``, ``raw_env(...)`` for AEC-only modules); ``"pkg.module:attr"`` names a
        PettingZoo env class, or one of those functions. An id such as ``"classic/tictactoe-v3"``
        goes through ``pettingzoo.make`` (parallel registry first, then AEC). Nothing else
        is called from a name (``"os:system"`` is an error): other constructors are passed
        as objects (:meth:`from_object`).

        Raises:
            MarlError: the module / id does not exist (the message lists close matches), the
                attribute is not an env constructor, or the constructor returns no PettingZoo env.
        """
        num_envs = check_num_envs(num_envs)
        ctor = _resolve_ctor(name)
        try:
            copies = [ctor(**env_kwargs) for _ in range(num_envs)]
        except TypeError as e:
            raise MarlError(f"Bad keyword arguments for PettingZoo env '{name}': {e}") from e
        if not _is_instance(copies[0]):
            raise MarlError(f"PettingZoo env '{name}' returned {type(copies[0]).__name__}, not a PettingZoo env.")
        return cls(copies, scenario=name, **(adapter_kwargs or {}))

    # ------------------------------------------------------------------ stepping

    def reset(self, seed: Optional[int] = None) -> Step:
        """Reset all copies (copy ``b`` with ``seed + b``) and return the first :class:`Step`."""
        if seed is None:
            seed = self._default_seed
        B = self.num_envs
        self._t = 0
        for b, env in enumerate(self._envs):
            s = None if seed is None else int(seed) + b
            self._rngs[b] = np.random.default_rng(s)
            self._reset_copy(b, env, s)
        self._started = True
        return Step.at_reset(self._observation(), info=self._info(np.zeros(B, np.int64)))

    def step_env(self, actions: Dict[str, torch.Tensor]) -> Step:
        """Step every copy in turn (see :meth:`MultiAgentEnv.step_env`); an ended copy's row holds its
        episode's last observation (agents that left earlier: zeros) until :meth:`reset_rows`."""
        if not self._started:
            raise MarlError("Call reset() before step().")
        B, N = self.num_envs, len(self.info.agents)
        self._t += 1
        per_agent = self.layout.split_actions(actions)
        rewards = np.zeros((B, N), np.float32)
        terminated = np.zeros(B, bool)
        truncated = np.zeros(B, bool)
        illegal = np.zeros(B, np.int64)
        for b, env in enumerate(self._envs):
            acts = [a[b] for a in per_agent]
            if self._aec:
                ended, trunc, last = self._step_aec(b, env, acts, rewards[b], illegal)
            else:
                ended, trunc, last = self._step_parallel(b, env, acts, rewards[b])
            self._steps[b] += 1
            if not ended and self._cut and self._steps[b] >= self._cut:  # episode_limit= reached: a truncation
                ended, trunc, last = True, True, self._rows.row(b)
            if ended:
                self._rows.set_row(b, last)
                terminated[b], truncated[b] = not trunc, trunc
        return self._make_step(rewards, torch.from_numpy(terminated), torch.from_numpy(truncated), illegal)

    def reset_rows(self, rows: torch.Tensor) -> Observation:
        """Reset the copies in ``rows`` (unseeded: each continues its own RNG stream)."""
        for b in rows.nonzero().flatten().tolist():
            self._reset_copy(b, self._envs[b], None)
        return self._observation()

    def close(self) -> None:
        for env in self._envs:
            try:
                env.close()
            except Exception:  # noqa: BLE001 - closing is best effort
                pass

    # ------------------------------------------------------------------ internals

    def _observation(self) -> Observation:
        """Every copy's current observation, action masks and alive flags (fresh tensors)."""
        avail = {
            name: (torch.from_numpy(self._masks[name].copy()) if g.discrete else None)
            for name, g in self.info.groups.items()
        }
        return self.layout.observation(self._rows, avail, self.layout.per_group(self._alive))

    def _info(self, illegal: np.ndarray) -> Dict[str, Any]:
        """A step's ``info``: ``illegal_actions`` ``[B]`` int64 in AEC mode, else nothing."""
        return {"illegal_actions": torch.from_numpy(illegal)} if self._aec else {}

    def _make_step(self, rewards, terminated, truncated, illegal) -> Step:
        reward = self.layout.per_group(rewards)
        return Step(
            *self._observation(), reward=reward, terminated=terminated, truncated=truncated, info=self._info(illegal)
        )

    def _write(self, b: int, agent: str, obs: Any, info: Optional[Mapping], alive: bool) -> None:
        """Store one agent's observation, mask and alive flag in row ``b``."""
        i = self.layout.index[agent]
        io = self._io[i]
        self._alive[b, i] = alive
        self._rows.write(b, agent, None if not alive or obs is None else self.read(agent, obs, b))
        if io.n:
            name, j = self._mask_slot[agent]
            m = io.mask(obs, info) if alive else None
            if m is not None and not m.any() and not self._aec:  # AEC: not its turn (checked at its turn)
                raise self.raw_error(
                    "no_legal_action",
                    "this live agent's action mask is all zero; give it at least one legal action",
                    agent,
                    "avail_actions",
                    b,
                )
            self._masks[name][b, j] = True if m is None else self.waiting_mask(io.n) if not m.any() else m

    def read(self, agent: str, obs: Any, b: int) -> AgentObs:
        """Agent ``agent``'s observation in copy ``b`` as :class:`~marl.envs.common.ObsRows` stores it
        (checked: :meth:`~marl.envs.common_raw.RawChecks.read_agent`)."""
        io = self._io[self.layout.index[agent]]
        if io.key is not None:
            if not isinstance(obs, Mapping) or io.key not in obs:
                raise self.raw_error(
                    "obs_space",
                    f"expected a dict with '{io.key}' (its declared Dict space), got {type(obs).__name__}",
                    agent,
                    "obs",
                    b,
                )
            obs = obs[io.key]
        return self.read_agent(io.raw_space, io.obs_space, obs, agent, b)

    def _reset_copy(self, b: int, env: Any, seed: Optional[int]) -> None:
        self._steps[b] = 0
        if self._aec:
            env.reset(seed=seed)
            infos = env.infos
            present = set(env.agents)
            for a in self.info.agents:
                alive = a in present
                self._write(b, a, env.observe(a) if alive else None, infos.get(a), alive)
        else:
            obs, infos = self.unpack(env.reset(seed=seed), 2, "reset", b)
            infos = infos or {}
            present = set(env.agents)
            for a in self.info.agents:
                alive = a in present
                self._write(b, a, obs.get(a), infos.get(a), alive)

    def _step_parallel(self, b: int, env: Any, acts: List[Any], rew_row: np.ndarray):
        idx = self.layout.index
        live = list(env.agents)
        out = env.step({a: self._io[idx[a]].to_env(acts[idx[a]]) for a in live})
        obs, rew, term, trunc, infos = self.unpack(out, 5, "step", b)
        for a, r in rew.items():
            if a in idx:
                rew_row[idx[a]] = self.read_reward(r, a, b)
        done_now = [a for a in live if term.get(a, False) or trunc.get(a, False)]
        present = set(env.agents) - set(done_now)
        ended = not present
        last = None
        if ended:
            # the episode's last observation (agents that left earlier stay zero)
            last = self._rows.row(b)
            for a in done_now:
                if a in obs:
                    last.write(0, a, self.read(a, obs[a], b))
        for a in self.info.agents:
            self._write(b, a, obs.get(a), infos.get(a) if infos else None, a in present)
        truncd = any(trunc.get(a, False) for a in done_now)
        return ended, truncd, last


def _env_name(env: Any) -> str:
    meta = getattr(env, "metadata", None) or {}
    return str(meta.get("name") or type(getattr(env, "unwrapped", env)).__module__)


def _registry_ids() -> List[str]:
    try:
        from pettingzoo.env_registry.registration import aec_registry, parallel_registry
    except ImportError:  # older PettingZoo without a registry
        return []
    return sorted(set(aec_registry) | set(parallel_registry))


def _resolve_ctor(name: str) -> Callable[..., Any]:
    """Turn a module path / registry id into a constructor taking env kwargs (``from_name``).

    A module path resolves only to a PettingZoo env class or a ``parallel_env`` / ``env`` /
    ``raw_env`` function (:func:`~marl.envs.common.named_env_constructor`), never to an
    arbitrary callable such as ``os:system``.

    Raises:
        MarlError: unknown module / id / attribute, or an attribute that is no env constructor.
    """
    if not isinstance(name, str) or not name:
        raise MarlError(f"PettingZoo env name must be a non-empty string, got {name!r}.")
    if "/" in name:  # registry id, e.g. "classic/tictactoe-v3"
        import pettingzoo
        from pettingzoo.env_registry.registration import aec_registry, parallel_registry

        kind = "parallel" if name in parallel_registry else "aec" if name in aec_registry else None
        if kind is None:
            raise unknown_choice("PettingZoo env id", name, _registry_ids())
        return lambda **kw: pettingzoo.make(kind, name, **kw)
    from pettingzoo import AECEnv, ParallelEnv

    from marl.envs.pettingzoo.names import resolve_name

    return named_env_constructor(resolve_name(name), (ParallelEnv, AECEnv), "PettingZoo", scenarios)


_ADAPTER_KWARGS = ("kind", "teams", "shared_reward", "episode_limit", "seed", "entity_layout", "aec_mode")


def from_object(obj: Any, **kwargs) -> Optional[PettingZooEnv]:
    """Object factory of the ``"pettingzoo"`` family: ``make_env(obj, **kwargs)`` for a PettingZoo env
    instance, a constructor (any callable) or a module with ``parallel_env`` / ``env``.

    Returns:
        :meth:`PettingZooEnv.from_object` ``(obj, **kwargs)``, or ``None`` for an object
        that is none of these (a non-callable, or a module without a constructor).
    Raises:
        MarlError: see :meth:`PettingZooEnv.from_object`.
    """
    if inspect.ismodule(obj):
        if getattr(obj, "parallel_env", None) is None and getattr(obj, "env", None) is None:
            return None
    elif not (_is_instance(obj) or callable(obj)):
        return None
    return PettingZooEnv.from_object(obj, **kwargs)


def make(scenario: Optional[str] = None, num_envs: int = DEFAULT_NUM_ENVS, **kwargs) -> PettingZooEnv:
    """Registry factory of the ``"pettingzoo"`` family: ``make_env("pettingzoo", name, **kw)``.

    Args:
        scenario: a module path (``"mpe2.simple_tag_v3"``, ``"pkg.mod:EnvClass"``) or a
            PettingZoo registry id (``"classic/tictactoe-v3"``); see :meth:`PettingZooEnv.from_name`.
        num_envs: ``B`` (default 8).
        **kwargs: adapter options ``kind``, ``teams``, ``shared_reward``,
            ``episode_limit``, ``seed``, ``entity_layout``, ``aec_mode``; everything else goes to the env constructor.
    Raises:
        MarlError: no / unknown name, or bad constructor kwargs.
    """
    if scenario is None:
        raise MarlError(
            "make_env('pettingzoo', name) needs a name: a module path such as 'mpe2.simple_tag_v3' "
            f"or a PettingZoo registry id such as 'classic/tictactoe-v3'. Known: {', '.join(scenarios())}."
        )
    adapter = {k: kwargs.pop(k) for k in _ADAPTER_KWARGS if k in kwargs}
    return PettingZooEnv.from_name(scenario, num_envs=num_envs, adapter_kwargs=adapter, **kwargs)


def scenarios() -> List[str]:
    """Known names: mpe2 modules (``"mpe2.simple_spread_v3"``, ...) and PettingZoo registry ids."""
    names: List[str] = []
    try:
        names += [f"mpe2.{m}" for m in mpe2_modules().values()]
    except ImportError:
        pass
    return sorted(names) + _registry_ids()
