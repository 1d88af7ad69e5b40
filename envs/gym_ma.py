"""Adapter: Gymnasium multi-agent envs (tuple spaces, per-agent reward lists) as a batched
:class:`~marl.env.MultiAgentEnv`: ``make_env("gymnasium", "lbforaging:Foraging-8x8-2p-2f-v3")``.

The convention is the one of EPyMARL's ``gymma`` wrapper (Papoudakis et al.,
2021, "Benchmarking Multi-Agent Deep Reinforcement Learning Algorithms in
Cooperative Tasks", arXiv:2006.07869), which runs Level-Based Foraging
(``lbforaging``) and the Multi-Robot Warehouse (``rware``): a Gymnasium env whose
``observation_space`` and ``action_space`` are ``Tuple`` spaces with one entry
per agent, whose ``step`` takes a tuple of actions and returns a list of
rewards (or one shared number), and ``terminated`` / ``truncated`` as bools or
lists. Rules:

* **Agents** ``agent_0 .. agent_{n-1}`` in tuple order; agents with identical
  spaces form one group (``envs/common.py``: ``build_groups``), others their own.
* **Observations**: an agent's ``Box`` of rank >= 2 (an image ``[H, W, C]``) or ``Dict``
  of Boxes stays structured (``envs/common.py``: ``agent_obs_space``): ``obs[g]``
  ``[B, N_g, *shape]``, or key -> such, uint8 kept uint8 and other dtypes float32
  (docs/observations.md). Every other space is flattened per agent
  (``gymnasium.spaces.flatten``: a 1-D Box as it is, Discrete -> one-hot, Tuple /
  MultiDiscrete -> one vector). The state is all agents' observations, each flattened
  (images included), concatenated in agent order.
* **Rewards**: each agent its own (``common_reward=False``, default), or the sum
  (``reward_scalarisation="sum"``) / mean of all agents' rewards for every agent
  (``common_reward=True``: EPyMARL's ``common_reward``).
* **Episode limit**: ``episode_limit`` (steps) or, without it, the env's own limit:
  the smallest of a ``TimeLimit`` wrapper (``gymnasium.make`` adds one for a
  registered ``max_episode_steps``), ``spec.max_episode_steps`` and a documented
  constructor argument kept on the unwrapped env (LBF's ``max_episode_steps``,
  50 by default; RWARE's ``max_steps``, 500; ``envs/common.py``:
  ``OWN_LIMIT_ATTRIBUTES``). A larger ``episode_limit`` than the env's own is cut
  to the env's (the env ends its episodes there anyway). ``time_limit`` is the
  deprecated old name of ``episode_limit``.
* **Episode end**: a copy ends when the env says so (``all`` of a list). Because
  LBF and RWARE report their own step limit as ``terminated``, the episode limit
  (EPyMARL: 50 for LBF, 500 for RWARE) counts steps here: reaching it is a
  truncation (the value bootstraps), even if the env also ends then; an env's
  own ``truncated`` is one too; everything else is a termination.
* **Action masks** from ``info["action_mask"]`` (one row per agent) or the env's
  ``get_avail_actions()`` method (EPyMARL's name) where it has one; otherwise
  every action is available.
* **Seeds**: ``reset(seed)`` resets copy ``b`` with ``seed + b``; ended copies
  reset themselves unseeded, continuing their own RNG streams.
"""

from __future__ import annotations

import importlib
from typing import Any, Callable, Dict, List, Optional, Sequence

import gymnasium as gym
import numpy as np
import torch

from marl.env import EnvInfo, MarlError, MultiAgentEnv, Observation, Step, unknown_choice
from marl.errors import closest, renamed_keyword
from marl.envs.common import AgentLayout, ObsRows, agent_obs_space, build_groups, check_num_envs
from marl.envs.common_raw import RawChecks, check_episode_limit, own_step_limit

__all__ = ["GymMultiAgentEnv", "make", "from_object", "scenarios"]

DEFAULT_NUM_ENVS = 8
_ADAPTER_KWARGS = ("common_reward", "reward_scalarisation", "episode_limit", "seed")
SCALARISATIONS = ("sum", "mean")


class GymMultiAgentEnv(RawChecks, MultiAgentEnv):
    """``B`` copies of a Gymnasium multi-agent env stepped one after the other (rules: module docstring).

    Args:
        copies: ``B`` independent env instances (same spaces).
        name: the scenario name shown in :class:`~marl.env.EnvInfo`.
        common_reward: every agent gets the scalarised team reward (else its own).
        reward_scalarisation: ``"sum"`` or ``"mean"`` of the agents' rewards (the team reward).
        episode_limit: steps after which an episode is truncated (``None``: the env's own limit, if it
            declares one; a larger value is cut to the env's own). ``make_env`` also takes its
            deprecated old name ``time_limit``.
        seed: seed of ``reset()`` without one.

    Shapes: ``obs[g]`` ``[B, N_g, obs_dim_g]`` float32 (structured: ``[B, N_g, *shape]`` or key -> such, see
    the module docstring), ``state`` ``[B, sum of obs dims]`` float32,
    ``reward[g]`` ``[B, N_g]`` float32, ``avail_actions[g]`` ``[B, N_g, n_g]`` bool (discrete groups).

    Raises:
        MarlError: spaces that are not ``Tuple`` spaces of one entry per agent, an action space
            other than ``Discrete`` / 1-D ``Box``, a bad option (named with the valid ones), a
            reward list of the wrong length, ``step`` before ``reset``.
    """

    def __init__(
        self,
        copies: Sequence[Any],
        name: str,
        common_reward: bool = False,
        reward_scalarisation: str = "sum",
        episode_limit: Optional[int] = None,
        seed: Optional[int] = None,
    ):
        if reward_scalarisation not in SCALARISATIONS:
            raise unknown_choice("reward_scalarisation", reward_scalarisation, list(SCALARISATIONS))
        self._envs = list(copies)
        self.episode_limit, self.episode_limit_source = _episode_limit(self._envs[0], episode_limit, name)
        obs_spaces, act_spaces = _agent_spaces(self._envs[0], name)
        agents = [f"agent_{i}" for i in range(len(obs_spaces))]
        self._declared = [agent_obs_space(s) for s in obs_spaces]
        groups = build_groups(
            agents,
            dict(zip(agents, self._declared)),
            dict(zip(agents, act_spaces)),
            {a: "team" for a in agents},
        )
        self._spaces = obs_spaces
        self.layout = AgentLayout(agents, groups)
        self.info = EnvInfo(
            family="gymnasium",
            scenario=name,
            agents=agents,
            groups=groups,
            state_dim=self.layout.state_dim,
            episode_limit=self.episode_limit,
            kind="cooperative",
            shared_reward=bool(common_reward),
            num_envs=len(self._envs),
        )
        self.common_reward, self.scalarisation = bool(common_reward), reward_scalarisation
        self._default_seed = seed
        B, N = len(self._envs), len(agents)
        self._rows = ObsRows(self.layout, B)
        self._masks = [np.ones((B, g.n_actions), bool) if g.discrete else None for g in _per_agent(groups, agents)]
        self._steps = np.zeros(B, np.int64)
        self._n = N
        self._started = False

    # ------------------------------------------------------------------ API
    def reset(self, seed: Optional[int] = None) -> Step:
        """Reset copy ``b`` with ``seed + b`` and return the first :class:`Step`."""
        seed = self._default_seed if seed is None else seed
        self._t = 0
        for b in range(self.num_envs):
            self._reset_copy(b, None if seed is None else int(seed) + b)
        self._started = True
        return Step.at_reset(self._observation())

    def step_env(self, actions: Dict[str, torch.Tensor]) -> Step:
        """One step of every copy (:meth:`MultiAgentEnv.step_env`)."""
        if not self._started:
            raise MarlError("Call reset() before step().")
        # per agent: a list of Python ints (discrete) or the [B, act_dim] array, indexed by copy below
        per_agent = [a.tolist() if a.ndim == 1 else a for a in self.layout.split_actions(actions)]
        B = self.num_envs
        self._t += 1
        rewards = np.zeros((B, self._n), np.float32)
        terminated, truncated = np.zeros(B, bool), np.zeros(B, bool)
        for b, env in enumerate(self._envs):
            out = env.step(tuple(a[b] for a in per_agent))
            obs, rew, term, trunc, info = self.unpack(out, 5, "step", b)
            rewards[b] = self._rewards(rew, b)
            self._steps[b] += 1
            if self.episode_limit and self._steps[b] >= self.episode_limit or _all(trunc):
                truncated[b] = True
            elif _all(term):
                terminated[b] = True
            self._write(b, env, obs, info)
        return self._make_step(rewards, torch.from_numpy(terminated), torch.from_numpy(truncated))

    def reset_rows(self, rows: torch.Tensor) -> Observation:
        """Reset the copies in ``rows`` unseeded (each continues its RNG stream)."""
        for b in rows.nonzero().flatten().tolist():
            self._reset_copy(b, None)
        return self._observation()

    def close(self) -> None:
        for env in self._envs:
            env.close()

    # ------------------------------------------------------------------ internals
    def _reset_copy(self, b: int, seed: Optional[int]) -> None:
        obs, info = self.unpack(self._envs[b].reset(seed=seed), 2, "reset", b)
        self._steps[b] = 0
        self._write(b, self._envs[b], obs, info)

    def _write(self, b: int, env: Any, obs: Sequence[Any], info: Any) -> None:
        """Store the copy's observations (:class:`~marl.envs.common.ObsRows`) and read its action masks."""
        if not isinstance(obs, (tuple, list)) or len(obs) != self._n:
            got = f"{len(obs)} observations" if isinstance(obs, (tuple, list)) else type(obs).__name__
            raise self.raw_error(
                "obs_space", f"expected a tuple of {self._n} observations (one per agent), got {got}", key="obs", copy=b
            )
        for agent, raw, space, o in zip(self.info.agents, self._spaces, self._declared, obs):
            self._rows.write(b, agent, self.read_agent(raw, space, o, agent, b))
        masks = _masks(env, info, self._n)
        for i, m in enumerate(self._masks):
            if m is not None:
                m[b] = True if masks is None else np.asarray(masks[i], bool)

    def _rewards(self, rew: Any, b: int) -> np.ndarray:
        """The env's reward (a list per agent, or one number for all) -> ``[N]`` per the reward mode."""
        try:
            r = np.asarray(rew, np.float64).reshape(-1)
        except (TypeError, ValueError) as e:
            raise self.raw_error("reward_space", f"reward {rew!r} is not numbers: {e}", key="reward", copy=b) from e
        if r.size == 1:
            r = np.full(self._n, float(r[0]))
        if r.size != self._n:
            raise self.raw_error(
                "reward_space",
                f"{r.size} rewards for {self._n} agents (expected one per agent, or one for all)",
                key="reward",
                copy=b,
            )
        if self.common_reward:
            team = r.sum() if self.scalarisation == "sum" else r.mean()
            r = np.full(self._n, team)
        return r.astype(np.float32)

    def _observation(self) -> Observation:
        """Every copy's current observation (the action masks of :attr:`_masks`; every agent alive)."""
        avail: Dict[str, Optional[torch.Tensor]] = {}
        for name, g in self.info.groups.items():
            idx = [self.layout.index[a] for a in g.agents]
            avail[name] = torch.from_numpy(np.stack([self._masks[i] for i in idx], 1)) if g.discrete else None
        return self.layout.observation(self._rows, avail)

    def _make_step(self, rewards: np.ndarray, terminated: torch.Tensor, truncated: torch.Tensor) -> Step:
        ob = self._observation()
        return Step(*ob, reward=self.layout.per_group(rewards), terminated=terminated, truncated=truncated)


def _episode_limit(env: Any, given: Optional[int], name: str):
    """``(steps, where)``: the episode limit (``0``: none) from ``episode_limit=`` and the env's own
    (:func:`~marl.envs.common_raw.own_step_limit`); the smaller one wins."""
    given = check_episode_limit(given, f"make_env('gymnasium', {name!r})")
    own, where = own_step_limit(env)
    if given is not None and (not own or given <= own):
        return given, "episode_limit="
    return own, where


def _per_agent(groups, agents):
    """The :class:`~marl.env.GroupInfo` of each agent, in agent order."""
    of = {a: g for g in groups.values() for a in g.agents}
    return [of[a] for a in agents]


def _agent_spaces(env: Any, name: str):
    """Per-agent observation and action spaces of a tuple-space env (checked)."""
    obs, act = env.observation_space, env.action_space
    if not isinstance(obs, gym.spaces.Tuple) or not isinstance(act, gym.spaces.Tuple) or len(obs) != len(act):
        raise MarlError(
            f"Gymnasium env {name!r} has observation_space {obs} and action_space {act}; a multi-agent "
            f"Gymnasium env needs Tuple spaces with one entry per agent (as lbforaging and rware). "
            f"A single-agent env is not a multi-agent env; a PettingZoo env goes to "
            f"make_env('pettingzoo', ...)."
        )
    for i, a in enumerate(act.spaces):
        if not (isinstance(a, gym.spaces.Discrete) or (isinstance(a, gym.spaces.Box) and len(a.shape) == 1)):
            raise MarlError(
                f"Gymnasium env {name!r}: agent {i}'s action space {a} is not supported (supported: Discrete, 1-D Box)."
            )
    return list(obs.spaces), list(act.spaces)


def _all(flag: Any) -> bool:
    # a plain bool (LBF, RWARE) skips numpy: this runs twice per copy and step
    return flag if isinstance(flag, bool) else bool(np.all(flag))


def _masks(env: Any, info: Any, n: int) -> Optional[List[Any]]:
    """Action masks (one per agent) from ``info["action_mask"]`` or ``get_avail_actions()``; ``None``: all legal."""
    if isinstance(info, dict) and info.get("action_mask") is not None:
        return list(info["action_mask"])
    getter = getattr(env.unwrapped, "get_avail_actions", None)
    return list(getter()) if callable(getter) else None


# --------------------------------------------------------------------------- registry
def _split_kwargs(kwargs: Dict[str, Any]):
    renamed_keyword(kwargs, "time_limit", "episode_limit", "make_env('gymnasium', ...)")
    adapter = {k: kwargs.pop(k) for k in _ADAPTER_KWARGS if k in kwargs}
    return adapter, kwargs


def make(scenario: Optional[str] = None, num_envs: int = DEFAULT_NUM_ENVS, **kwargs) -> GymMultiAgentEnv:
    """Registry factory of the ``"gymnasium"`` family: ``make_env("gymnasium", "<module>:<env id>", **kw)``.

    Args:
        scenario: ``"<module>:<env id>"`` (the module is imported first: it registers the id,
            e.g. ``"lbforaging:Foraging-8x8-2p-2f-v3"``, ``"rware:rware-tiny-2ag-v2"``) or an id
            already registered.
        num_envs: ``B`` (default 8).
        **kwargs: adapter options ``common_reward``, ``reward_scalarisation``, ``episode_limit``
            (``time_limit``: its deprecated old name), ``seed``; everything else goes to ``gymnasium.make``.
    Raises:
        MarlError: no name, a module that does not import, an unknown id (with the closest
            registered ones), or what :class:`GymMultiAgentEnv` raises.
    """
    if not scenario:
        raise MarlError(
            "make_env('gymnasium', name) needs '<module>:<env id>', e.g. "
            "'lbforaging:Foraging-8x8-2p-2f-v3' or 'rware:rware-tiny-2ag-v2'."
        )
    module, _, env_id = scenario.rpartition(":")
    if module:
        try:
            importlib.import_module(module)
        except ImportError as e:
            raise MarlError(
                f"Cannot import module {module!r} of Gymnasium env {scenario!r}: {e}. "
                f"Install it (e.g. pip install 'marl-rllib[gym-envs]' for lbforaging and rware)."
            ) from e
    env_id = _registered_id(env_id)
    if env_id not in gym.registry:
        ids = list(gym.registry)
        family = [k for k in ids if k.split("-")[0] == env_id.split("-")[0]]  # the same family's ids, if any
        raise MarlError(
            f"Unknown Gymnasium env id '{env_id}'.{closest(env_id, ids)} "
            + (
                f"Ids of that family: {', '.join(family[:20])}{' ...' if len(family) > 20 else ''}."
                if family
                else f"{len(ids)} ids are registered (gymnasium.registry); a third-party id "
                f"is registered by importing its module: '<module>:<env id>'."
            )
        )
    adapter, env_kwargs = _split_kwargs(dict(kwargs))
    copies = [gym.make(env_id, disable_env_checker=True, **env_kwargs) for _ in range(check_num_envs(num_envs))]
    return GymMultiAgentEnv(copies, env_id, **adapter)


def _registered_id(env_id: str) -> str:
    """``env_id`` as registered, matched case-insensitively when unambiguous: benchmark suites write tasks
    in lower case (marl-eval lower-cases results' keys), while Gymnasium ids are case-sensitive
    (``foraging-8x8-2p-2f-coop-v3`` is LBF's ``Foraging-8x8-2p-2f-coop-v3``)."""
    if env_id in gym.registry:
        return env_id
    same = [k for k in gym.registry if k.lower() == env_id.lower()]
    return same[0] if len(same) == 1 else env_id


def from_object(obj: Any, num_envs: int = DEFAULT_NUM_ENVS, **kwargs) -> Optional[GymMultiAgentEnv]:
    """Object factory: a ``gymnasium.Env`` subclass (built ``B`` times with ``kwargs``) or one instance
    (``num_envs`` must then be 1); ``None`` for anything else (asked next: other families)."""
    adapter, env_kwargs = _split_kwargs(dict(kwargs))
    if isinstance(obj, type) and issubclass(obj, gym.Env):
        ctor: Callable[[], Any] = lambda: obj(**env_kwargs)  # noqa: E731
        return GymMultiAgentEnv([ctor() for _ in range(check_num_envs(num_envs))], obj.__name__, **adapter)
    if isinstance(obj, gym.Env):
        if check_num_envs(num_envs) != 1 or env_kwargs:
            raise MarlError(
                f"make_env(<{type(obj).__name__} instance>) wraps that one instance (num_envs=1, no env "
                f"kwargs); pass the class, or make_env('gymnasium', '<module>:<env id>', num_envs=...) "
                f"for {num_envs} copies."
            )
        return GymMultiAgentEnv([obj], type(obj.unwrapped).__name__, **adapter)
    return None


def scenarios() -> List[str]:
    """The registered multi-agent ids of the packages installed (lbforaging, rware), as ``module:id``."""
    out = []
    for module, prefix in (("lbforaging", "Foraging"), ("rware", "rware")):
        try:
            importlib.import_module(module)
        except ImportError:
            continue
        out += [f"{module}:{k}" for k in gym.registry if k.startswith(prefix)]
    return out
