"""The batched multi-agent env contract: info, steps, the env base class and wrappers (docs/envs.md).

Every algorithm in marl sees one interface, :class:`MultiAgentEnv`. It steps
``B = num_envs`` copies of a task at once and speaks in torch tensors grouped
by agent *groups* (agents with equal spaces on the same side), so the sampler
never loops over agents or env copies in Python.

Shapes used throughout (``B`` env copies, ``N_g`` agents in group ``g``):

=================  ======================================  ==========================
field              shape                                   meaning
=================  ======================================  ==========================
``obs[g]``         ``[B, N_g, obs_dim_g]`` float32          per-agent observation (1-D
                                                           ``Box``; structured: below)
``state``          ``[B, state_dim]`` float32               global state
``avail_actions``  ``[B, N_g, n_actions_g]`` bool           legal actions (discrete);
                                                           ``None`` for continuous
``alive[g]``       ``[B, N_g]`` bool                        agent still acting
``reward[g]``      ``[B, N_g]`` float32                     reward of the last step
``terminated``     ``[B]`` bool                             episode ended (absorbing)
``truncated``      ``[B]`` bool                             episode cut (time limit);
                                                           never a termination
``extras[c][g]``   ``[B, N_g]`` (declared dtype)            extra per-agent column ``c``
=================  ======================================  ==========================

Structured observations (docs/observations.md): ``GroupInfo.obs_space`` may
be a ``Box`` of any rank (an image ``[H, W, C]``, uint8 or float) or a
``gym.spaces.Dict`` of such Boxes. ``obs[g]`` is then ``[B, N_g, *shape]`` in
the space's dtype (uint8 stays uint8, other dtypes are float32), or a dict
``key -> [B, N_g, *shape_k]`` for a ``Dict`` space (same for ``final_obs``).
:func:`obs_leaves`, :func:`obs_dtype` and :func:`map_obs` are the helpers every
layer uses for both forms (:mod:`marl.env.obs`).

Envs reset themselves: when copy ``b`` ends at a step, the returned ``obs`` and
``state`` of row ``b`` already belong to the next episode, and ``final_obs`` /
``final_state`` hold the last observation of the episode that ended (needed to
bootstrap values of truncated episodes).

:meth:`MultiAgentEnv.step` does the work every env shares, after JaxMARL's
``step`` / ``step_env`` split (Rutherford et al. 2023, "JaxMARL: Multi-Agent RL
Environments and Algorithms in JAX", arXiv 2311.10090, Section 4): it checks
the actions against :class:`EnvInfo`, calls the adapter's raw
:meth:`MultiAgentEnv.step_env`, resets the rows whose episode ended with the
adapter's :meth:`MultiAgentEnv.reset_rows` and builds the ``final_*`` fields.

This module imports nothing of marl but :mod:`marl.env.obs`, :mod:`marl.env.actions` and :mod:`marl.errors`.
"""

from __future__ import annotations

import abc
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, NamedTuple, Optional

import gymnasium as gym
import numpy as np
import torch

from marl.env.actions import check_actions, check_continuous_actions, check_discrete_actions  # noqa: F401
from marl.env.obs import is_structured, obs_leaves
from marl.errors import MarlError, unknown_choice

KINDS = ("cooperative", "competitive", "mixed")


@dataclass
class GroupInfo:
    """A group: agents with identical spaces on the same side, stacked as one tensor.

    Attributes:
        name: group id, e.g. ``"agent"``, ``"adversary"``.
        agents: agent ids of the group in their fixed order (index ``i`` of dim ``N_g``).
        obs_space: per-agent observation space: a ``gym.spaces.Box`` (1-D: a flat
            vector; any other rank, e.g. an image ``[H, W, C]``, is structured) or a
            ``gym.spaces.Dict`` of Boxes (see the module docstring).
        action_space: per-agent action space (``Discrete`` or 1-D ``Box``).
        team: the side the group plays for; value decomposition mixes within a team.
    """

    name: str
    agents: List[str]
    obs_space: gym.spaces.Box
    action_space: gym.spaces.Space
    team: str = "team"

    @property
    def n_agents(self) -> int:
        return len(self.agents)

    @property
    def obs_dim(self) -> int:
        """Values in one agent's observation: the vector size of a 1-D ``Box`` (the flattened size,
        summed over keys, of a structured space)."""
        return sum(int(np.prod(b.shape)) for b in obs_leaves(self.obs_space).values())

    @property
    def structured(self) -> bool:
        """The observation is not a 1-D ``Box`` (see :func:`is_structured`)."""
        return is_structured(self.obs_space)

    @property
    def obs_shape(self) -> Any:
        """Per-agent observation shape: a tuple for a ``Box``, key -> tuple for a ``Dict``."""
        if isinstance(self.obs_space, gym.spaces.Dict):
            return {k: tuple(b.shape) for k, b in obs_leaves(self.obs_space).items()}
        return tuple(self.obs_space.shape)

    @property
    def discrete(self) -> bool:
        return isinstance(self.action_space, gym.spaces.Discrete)

    @property
    def n_actions(self) -> int:
        """Number of discrete actions, or the dimension of a continuous action."""
        space = self.action_space
        if isinstance(space, gym.spaces.Discrete):
            return int(space.n)
        return int(np.prod(space.shape or ()))


@dataclass(frozen=True)
class ExtraColumn:
    """A per-agent column an env emits on every :class:`Step` besides the standard fields.

    Attributes:
        dtype: torch dtype of the column's ``[B, N_g]`` tensors.
        fill: the value a consumer uses for rows / agents that have none (padding,
            a buffer slot written before the column existed).
        doc: one line saying what the column holds.
    """

    dtype: torch.dtype
    fill: Any
    doc: str = ""


@dataclass
class EnvInfo:
    """Static description of a task, shared by all algorithms and the policy mapping.

    Attributes:
        family: env family name (``"mpe"``, ``"vmas"``, ``"pettingzoo"``, ...).
        scenario: scenario / task name inside the family.
        agents: all agent ids in a fixed order.
        groups: group name -> :class:`GroupInfo` (insertion order is fixed).
        state_dim: size of the global state vector.
        episode_limit: maximum steps per episode (truncation), 0 if unbounded.
        kind: ``"cooperative"`` (one team, shared goal), ``"competitive"`` (teams
            with opposed rewards) or ``"mixed"``.
        shared_reward: all agents of a team receive the same reward.
        num_envs: number of batched env copies ``B``.
        entity_layout: optional description of the entity slices of each group's
            observation, for entity-aware networks (HPN, ASN); ``None`` where the
            env gives none (declare one with ``make_env(..., entity_layout=...)``,
            checked by :func:`marl.env.layout.check_entity_layout`). Format, per group name::

                {"own": [(start, end), ...],          # own-feature index ranges
                 "entities": {type: {"start": s, "count": m, "dim": d,
                                     "unit_type": (a, b)}},   # unit_type optional
                                                      # obs[s:s+m*d] viewed [m, d]
                 "n_normal_actions": k,               # actions 0..k-1 target nobody
                 "action_targets": {type: (first_action, m)}}
                                                      # action first+i targets entity i

            An entity type whose features sit in several blocks gives
            ``"fields": [(start, dim), ...]`` instead of ``start`` / ``dim``:
            entity ``i`` is the concatenation over fields of
            ``obs[start + i*dim : start + (i+1)*dim]`` (its size is the sum of
            the field dims). ``"unit_type": (a, b)``: features ``a..b-1`` of one
            entity's feature vector are a one-hot unit type (ASN's per-type
            modules). ``n_normal_actions`` and ``action_targets`` exist exactly
            for discrete groups and tile ``0..n_actions-1``. Observation
            features that are neither own nor entity features are ignored.
        extra_columns: column name -> :class:`ExtraColumn`: the per-agent columns
            every :class:`Step` of this env carries in ``step.extras`` (e.g. the
            off-beat wrapper's ``"decision"``).
    """

    family: str
    scenario: str
    agents: List[str]
    groups: Dict[str, GroupInfo]
    state_dim: int
    episode_limit: int
    kind: str = "cooperative"
    shared_reward: bool = False
    num_envs: int = 1
    entity_layout: Optional[Dict[str, Any]] = None
    extra_columns: Dict[str, ExtraColumn] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise unknown_choice("env kind", self.kind, KINDS)
        grouped = [a for g in self.groups.values() for a in g.agents]
        if sorted(grouped) != sorted(self.agents):
            raise MarlError(f"groups {grouped} do not partition the agents {self.agents}")

    def __setstate__(self, state: Dict[str, Any]) -> None:
        # infos pickled before a field existed (old checkpoints) get its default
        self.__dict__.update(state)
        self.__dict__.setdefault("extra_columns", {})

    def locate(self, agent: str) -> tuple:
        """Return ``(group_name, index_in_group)`` of ``agent``.

        Raises:
            MarlError: ``agent`` is not an agent of this env.
        """
        for g in self.groups.values():
            if agent in g.agents:
                return g.name, g.agents.index(agent)
        raise unknown_choice("agent", agent, self.agents)

    def group_of(self, agent: str) -> GroupInfo:
        return self.groups[self.locate(agent)[0]]

    @property
    def teams(self) -> Dict[str, List[str]]:
        """Team name -> group names playing for it."""
        out: Dict[str, List[str]] = {}
        for g in self.groups.values():
            out.setdefault(g.team, []).append(g.name)
        return out

    @property
    def homogeneous(self) -> bool:
        """All agents share one observation and action space."""
        gs = list(self.groups.values())
        return all(
            spaces_equal(g.obs_space, gs[0].obs_space) and spaces_equal(g.action_space, gs[0].action_space) for g in gs
        )


def spaces_equal(a: gym.spaces.Space, b: gym.spaces.Space) -> bool:
    """Structural equality of two gymnasium spaces (type, shape, bounds, n)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, gym.spaces.Discrete) and isinstance(b, gym.spaces.Discrete):
        return int(a.n) == int(b.n) and int(a.start) == int(b.start)
    if isinstance(a, gym.spaces.Box) and isinstance(b, gym.spaces.Box):
        return a.shape == b.shape and np.array_equal(a.low, b.low) and np.array_equal(a.high, b.high)
    if isinstance(a, gym.spaces.Dict) and isinstance(b, gym.spaces.Dict):
        return list(a.spaces) == list(b.spaces) and all(spaces_equal(a[k], b[k]) for k in a.spaces)
    return a == b


@dataclass
class Step:
    """One batched transition (see the module docstring for shapes).

    ``reward``, ``terminated`` and ``truncated`` describe the step just taken
    (all zero / False after :meth:`MultiAgentEnv.reset`). ``final_obs`` and
    ``final_state`` equal ``obs`` / ``state`` except in rows whose episode ended
    at this step, where they hold that episode's last observation;
    ``final_avail_actions`` (optional, same rule) holds the legal actions at that
    last observation, used by Q-learning targets of truncated episodes
    (``None``: take ``avail_actions``, or all actions legal). ``extras``: column
    -> group -> ``[B, N_g]`` tensor, one entry per column the env declares in
    :attr:`EnvInfo.extra_columns`.
    """

    obs: Dict[str, torch.Tensor]
    state: torch.Tensor
    avail_actions: Dict[str, Optional[torch.Tensor]]
    alive: Dict[str, torch.Tensor]
    reward: Dict[str, torch.Tensor]
    terminated: torch.Tensor
    truncated: torch.Tensor
    final_obs: Optional[Dict[str, torch.Tensor]] = None
    final_state: Optional[torch.Tensor] = None
    info: Dict[str, Any] = field(default_factory=dict)
    final_avail_actions: Optional[Dict[str, Optional[torch.Tensor]]] = None
    extras: Dict[str, Dict[str, torch.Tensor]] = field(default_factory=dict)

    @property
    def done(self) -> torch.Tensor:
        """``terminated | truncated``: ``[B]`` bool."""
        return self.terminated | self.truncated

    @classmethod
    def at_reset(
        cls,
        observation: "Observation",
        info: Optional[Dict[str, Any]] = None,
        extras: Optional[Dict[str, Dict[str, torch.Tensor]]] = None,
    ) -> "Step":
        """The :class:`Step` that :meth:`MultiAgentEnv.reset` returns: the first observation of every copy.

        Nothing has happened yet, so ``reward[g]`` is ``[B, N_g]`` float32 zeros and
        ``terminated`` / ``truncated`` are ``[B]`` bool False (two tensors: a wrapper
        may write one in place), on the device of ``alive[g]`` / ``state``; no episode
        ended, so ``final_obs`` / ``final_state`` / ``final_avail_actions`` hold the
        current fields (new dicts, the same tensors). The observation fields are taken as
        given (``obs[g]`` ``[B, N_g, *shape]``, ``state`` ``[B, state_dim]``,
        ``avail_actions[g]`` ``[B, N_g, n_actions_g]`` bool or ``None``, ``alive[g]``
        ``[B, N_g]`` bool; ``B`` is ``state.shape[0]``).

        Args:
            observation: the reset :class:`Observation` (what :meth:`MultiAgentEnv.reset_rows`
                returns for all rows).
            info: the step's ``info`` (e.g. zero ``episode_metrics`` ``[B]``, so every step of the
                env carries the same keys); ``None``: empty.
            extras: column -> group -> ``[B, N_g]`` (:attr:`EnvInfo.extra_columns`); ``None``: empty.
        """
        obs, state, avail, alive = observation
        B, device = state.shape[0], state.device
        return cls(
            obs=obs,
            state=state,
            avail_actions=avail,
            alive=alive,
            reward={g: torch.zeros(a.shape, dtype=torch.float32, device=a.device) for g, a in alive.items()},
            terminated=torch.zeros(B, dtype=torch.bool, device=device),
            truncated=torch.zeros(B, dtype=torch.bool, device=device),
            final_obs=dict(obs),
            final_state=state,
            final_avail_actions=dict(avail),
            info={} if info is None else info,
            extras={} if extras is None else extras,
        )


class Observation(NamedTuple):
    """What :meth:`MultiAgentEnv.reset_rows` returns: the observation fields of a :class:`Step`.

    ``obs[g]`` ``[B, N_g, obs_dim_g]``, ``state`` ``[B, state_dim]``,
    ``avail_actions[g]`` ``[B, N_g, n_actions_g]`` bool (``None`` for continuous
    groups), ``alive[g]`` ``[B, N_g]`` bool.
    """

    obs: Dict[str, torch.Tensor]
    state: torch.Tensor
    avail_actions: Dict[str, Optional[torch.Tensor]]
    alive: Dict[str, torch.Tensor]


# --------------------------------------------------------------------------- episode statistics


class EpisodeStats:
    """Running per-copy episode statistics of a batched env, collected as episodes end.

    :meth:`update` takes each :class:`Step`; for copies whose episode ended it
    appends to :attr:`done` (lists): ``episode_return`` (sum of all agents'
    rewards), ``episode_length``, ``return_<group>`` and any env-provided
    ``step.info["episode_metrics"]`` (``[B]`` tensors, e.g. win rate).
    """

    def __init__(self, info: EnvInfo):
        B = info.num_envs
        self.ret, self.length = torch.zeros(B), torch.zeros(B)
        self.group_ret = {g: torch.zeros(B) for g in info.groups}
        self.done: Dict[str, List[float]] = {"episode_return": [], "episode_length": []}

    def update(self, step: Step) -> None:
        for g, r in step.reward.items():
            s = r.sum(-1)
            self.group_ret[g] += s
            self.ret += s
        self.length += 1
        d = step.done
        if not d.any():
            return
        self.done["episode_return"] += self.ret[d].tolist()
        self.done["episode_length"] += self.length[d].tolist()
        for g, r in self.group_ret.items():
            self.done.setdefault(f"return_{g}", []).extend(r[d].tolist())
            r[d] = 0
        for k, v in step.info.get("episode_metrics", {}).items():
            self.done.setdefault(k, []).extend(v[d].tolist())
        self.ret[d], self.length[d] = 0, 0

    def pop(self) -> Dict[str, List[float]]:
        """The statistics gathered since the last call (episodes in progress keep running)."""
        out = self.done
        self.done = {"episode_return": [], "episode_length": []}
        return out


# --------------------------------------------------------------------------- training entry

_fit_entry: Optional[Callable[..., Any]] = None


def set_fit_entry(fn: Optional[Callable[..., Any]]) -> None:
    """Install the training entry ``fn(env, algo, **overrides)`` behind :meth:`MultiAgentEnv.fit`.

    ``marl.api`` installs :func:`marl.fit` when it is imported; the env layer imports
    the training code only by name, in :func:`fit_env`, when nothing is installed.
    """
    global _fit_entry
    _fit_entry = fn


def fit_env(env: Any, algo: str, **overrides: Any) -> Any:
    """Train ``algo`` on ``env`` through the installed training entry (see :func:`set_fit_entry`).

    Raises:
        MarlError: no training entry is installed, even after importing ``marl.api``
            (which installs :func:`marl.fit`; it is imported by name here, not before).
    """
    if _fit_entry is None:
        import importlib

        importlib.import_module("marl.api")  # installs marl.fit (set_fit_entry) unless something else was
    if _fit_entry is None:
        raise MarlError("No training entry is installed: import marl (it installs marl.fit) before env.fit(...).")
    return _fit_entry(env, algo, **overrides)


# --------------------------------------------------------------------------- the env base class


class MultiAgentEnv(abc.ABC):
    """Batched multi-agent environment: ``B`` copies stepped as one.

    Subclasses set :attr:`info` (an :class:`EnvInfo`) and implement
    :meth:`reset` plus either

    * :meth:`step_env` (the raw transition) and :meth:`reset_rows` (reset the
      rows whose episode ended): :meth:`step` then checks the actions, calls
      them and builds the auto-reset :class:`Step` (JaxMARL's split, see the
      module docstring); an env with rules on actions beyond
      :func:`check_actions` (e.g. legal-only actions) extends
      :meth:`check_actions`; or
    * :meth:`step` itself, doing all of that (``tests/toy_envs.py``).

    Copies reset themselves when their episode ends (see :class:`Step`).
    """

    info: EnvInfo
    spec: Optional[Any] = None  # an EnvSpec (marl.env.registry) that rebuilds the env, or None

    @property
    def num_envs(self) -> int:
        return self.info.num_envs

    @property
    def eval_kwargs(self) -> Dict[str, Any]:
        """``make_env`` kwargs of evaluation copies over the training ones; ``{}`` (default): none (docs/envs.md)."""
        return {}

    @abc.abstractmethod
    def reset(self, seed: Optional[int] = None) -> Step:
        """Reset all ``B`` copies (copy ``b`` seeded with ``seed + b``) and return the first :class:`Step`."""

    def step(self, actions: Dict[str, torch.Tensor]) -> Step:
        """Apply one joint action per copy.

        Checks the actions (:meth:`check_actions`), takes the raw step
        (:meth:`step_env`), resets the rows whose episode ended
        (:meth:`reset_rows`) and fills ``final_obs`` / ``final_state`` /
        ``final_avail_actions`` with the raw step's observation. When no row
        ended, the ``final_*`` fields hold the same tensors as the current ones
        (no copy).

        Args:
            actions: group -> ``[B, N_g]`` int64 (discrete) or ``[B, N_g, act_dim]``
                float32 (continuous, clipped to the action space by the env).
        Returns:
            The next :class:`Step`; ended copies are already reset.
        Raises:
            MarlError: bad actions (missing group, shape, dtype, range), or
                ``step`` before ``reset``.
        """
        raw = self.step_env(self.check_actions(actions))
        raw.final_obs, raw.final_state = dict(raw.obs), raw.state
        raw.final_avail_actions = dict(raw.avail_actions)
        done = raw.terminated | raw.truncated
        if bool(done.any()):
            fresh = self.reset_rows(done)
            raw.obs, raw.state = dict(fresh.obs), fresh.state
            raw.avail_actions, raw.alive = dict(fresh.avail_actions), dict(fresh.alive)
        return raw

    def check_actions(self, actions: Dict[str, Any]) -> Dict[str, torch.Tensor]:
        """Validate a joint action (:func:`check_actions`); returns group -> int64 / float32 tensors."""
        return check_actions(actions, self.info)

    def step_env(self, actions: Dict[str, torch.Tensor]) -> Step:
        """The raw transition, without auto-reset (implemented by adapters that use :meth:`step`).

        Args:
            actions: checked actions (group -> ``[B, N_g]`` int64 or ``[B, N_g, act_dim]`` float32).
        Returns:
            A :class:`Step` whose ``obs`` / ``state`` / ``avail_actions`` /
            ``alive`` are the observation the step reached in every row; in rows
            that ended (``terminated | truncated``) that is the episode's last
            observation. Its ``final_*`` fields are ignored: :meth:`step` fills them.
        Raises:
            MarlError: ``step`` before ``reset``.
        """
        raise NotImplementedError(f"{type(self).__name__} implements neither step() nor step_env() / reset_rows().")

    def reset_rows(self, rows: torch.Tensor) -> Observation:
        """Start a new episode in the copies where ``rows`` (``[B]`` bool) is True.

        Returns:
            The :class:`Observation` of every row afterwards: the first
            observation of the new episode in ``rows``, the current one elsewhere."""
        raise NotImplementedError(f"{type(self).__name__} implements step_env() but not reset_rows().")

    def close(self) -> None:
        """Release simulator resources."""

    def get_state(self) -> Optional[Dict[str, Any]]:
        """Everything the next steps depend on (episode states of all ``B`` copies, step
        counters, random generator states), for exact resume from a checkpoint; ``None``
        (the default) when the env cannot save its state: a resumed run then restarts its
        episodes (docs/envs.md, "Saving the env state").

        Called after :meth:`reset`, only when a checkpoint is written (never per step). The
        dict must pickle and must not share mutable objects with the env (copy them)."""
        return None

    def set_state(self, state: Dict[str, Any]) -> None:
        """Restore a :meth:`get_state` dict of an env built with the same arguments: the
        next :meth:`step` then equals the one the saved env would have taken.

        Raises:
            MarlError: the env cannot restore a state (its :meth:`get_state` is ``None``).
        """
        raise MarlError(f"{type(self).__name__} cannot restore a saved state (its get_state() returns None).")

    def callbacks(self) -> List[Any]:
        """Run callbacks (:class:`marl.callbacks.Callback`) this env contributes to every ``fit`` on it,
        e.g. the crash wrapper's coach; none by default (a :class:`Wrapper` passes the inner env's on)."""
        return []

    def random_actions(self, step: Step, generator: Optional[torch.Generator] = None) -> Dict[str, torch.Tensor]:
        """Uniformly random legal actions for every agent (for baselines and tests)."""
        out = {}
        for name, g in self.info.groups.items():
            B, N = self.num_envs, g.n_agents
            if g.discrete:
                avail = step.avail_actions.get(name)
                logits = torch.zeros(B, N, g.n_actions)
                if avail is not None:
                    logits = logits.masked_fill(~avail, float("-inf"))
                probs = torch.softmax(logits, -1).reshape(B * N, -1)
                out[name] = torch.multinomial(probs, 1, generator=generator).reshape(B, N)
            else:
                box = g.action_space
                assert isinstance(box, gym.spaces.Box)  # GroupInfo: Discrete or Box
                low = torch.as_tensor(box.low, dtype=torch.float32)
                high = torch.as_tensor(box.high, dtype=torch.float32)
                u = torch.rand(B, N, g.n_actions, generator=generator)
                out[name] = low + u * (high - low)
        return out

    def fit(self, algo: str, **overrides: Any) -> Any:
        """Train ``algo`` on this env; see :func:`marl.fit` for the arguments."""
        return fit_env(self, algo, **overrides)

    def __repr__(self) -> str:
        i = self.info
        groups = ", ".join(f"{g.name}x{g.n_agents}" for g in i.groups.values())
        return f"<{type(self).__name__} {i.family}:{i.scenario} B={i.num_envs} [{groups}] {i.kind}>"
