"""The standardized, batched multi-agent environment (DESIGN.md §3).

Every algorithm in marl sees one interface, :class:`MultiAgentEnv`. It steps
``B = num_envs`` copies of a task at once and speaks in torch tensors grouped
by agent *groups* (agents with equal spaces on the same side), so the sampler
never loops over agents or env copies in Python.

Shapes used throughout (``B`` env copies, ``N_g`` agents in group ``g``):

=================  ======================================  ==========================
field              shape                                   meaning
=================  ======================================  ==========================
``obs[g]``         ``[B, N_g, obs_dim_g]`` float32          per-agent observation
``state``          ``[B, state_dim]`` float32               global state
``avail_actions``  ``[B, N_g, n_actions_g]`` bool           legal actions (discrete);
                                                           ``None`` for continuous
``alive[g]``       ``[B, N_g]`` bool                        agent still acting
``reward[g]``      ``[B, N_g]`` float32                     reward of the last step
``terminated``     ``[B]`` bool                             episode ended (absorbing)
``truncated``      ``[B]`` bool                             episode cut (time limit);
                                                           never a termination
=================  ======================================  ==========================

Envs reset themselves: when copy ``b`` ends at a step, the returned ``obs`` and
``state`` of row ``b`` already belong to the next episode, and ``final_obs`` /
``final_state`` hold the last observation of the episode that ended (needed to
bootstrap values of truncated episodes).
"""
from __future__ import annotations

import abc
import copy
import importlib
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

import gymnasium as gym
import numpy as np
import torch

from marl.errors import MarlError, closest, unknown_choice  # noqa: F401  (re-exported)
from marl.plugins import load_plugins

KINDS = ("cooperative", "competitive", "mixed")


@dataclass
class GroupInfo:
    """A group: agents with identical spaces on the same side, stacked as one tensor.

    Attributes:
        name: group id, e.g. ``"agent"``, ``"adversary"``.
        agents: agent ids of the group in their fixed order (index ``i`` of dim ``N_g``).
        obs_space: per-agent observation space (a 1-D ``gym.spaces.Box``).
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
        return int(np.prod(self.obs_space.shape))

    @property
    def discrete(self) -> bool:
        return isinstance(self.action_space, gym.spaces.Discrete)

    @property
    def n_actions(self) -> int:
        """Number of discrete actions, or the dimension of a continuous action."""
        if self.discrete:
            return int(self.action_space.n)
        return int(np.prod(self.action_space.shape))


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
            checked by :func:`check_entity_layout`). Format, per group name::

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

    def __post_init__(self):
        if self.kind not in KINDS:
            raise unknown_choice("env kind", self.kind, KINDS)
        grouped = [a for g in self.groups.values() for a in g.agents]
        if sorted(grouped) != sorted(self.agents):
            raise MarlError(f"groups {grouped} do not partition the agents {self.agents}")

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
            spaces_equal(g.obs_space, gs[0].obs_space)
            and spaces_equal(g.action_space, gs[0].action_space)
            for g in gs
        )


def spaces_equal(a: gym.spaces.Space, b: gym.spaces.Space) -> bool:
    """Structural equality of two gymnasium spaces (type, shape, bounds, n)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, gym.spaces.Discrete):
        return int(a.n) == int(b.n) and int(a.start) == int(b.start)
    if isinstance(a, gym.spaces.Box):
        return (
            a.shape == b.shape
            and np.array_equal(a.low, b.low)
            and np.array_equal(a.high, b.high)
        )
    return a == b


# --------------------------------------------------------------------------- entity layouts

_GROUP_LAYOUT_KEYS = ("own", "entities", "n_normal_actions", "action_targets")
_ENTITY_KEYS = ("start", "count", "dim", "fields", "unit_type")
_Block = Tuple[int, int, str]  # (first index, end index, what uses it) of the observation


def check_entity_layout(layout: Mapping[str, Any], info: EnvInfo) -> Dict[str, Dict[str, Any]]:
    """Validate an entity layout (format: :class:`EnvInfo`) against ``info``; return it normalised.

    Checks, per group: the group exists; ``own`` ranges ``(start, end)`` and every
    entity block lie inside ``[0, obs_dim)`` of the group's observation; no
    feature index is used twice (own and entities together); ``count >= 0``,
    ``dim >= 1``; each entity type has either ``start`` + ``dim`` or ``fields``;
    ``unit_type`` ``(a, b)`` lies inside one entity's features; for a discrete
    group ``0..n_normal_actions-1`` and the ``action_targets`` ranges tile
    ``0..n_actions-1`` exactly, each target type being an entity type of the
    same count; a continuous group has neither key. Observation features that
    are neither own nor entity features are allowed: entity-aware networks
    ignore them.

    Args:
        layout: group name -> group layout; groups left out have no layout.
        info: the env the layout describes.
    Returns:
        A new dict: ints and tuples (lists given for pairs become tuples),
        ``own`` and ``entities`` always present; for discrete groups
        ``n_normal_actions`` (default: ``n_actions`` minus the targeted actions)
        and ``action_targets`` (default ``{}``); continuous groups have neither.
    Raises:
        MarlError: the first problem found, naming the group, the bad value and
            what is valid.
    """
    if not isinstance(layout, Mapping):
        raise MarlError(f"entity_layout must be a dict of group name -> layout, got {type(layout).__name__}.")
    out = {}
    for name, group_layout in layout.items():
        if name not in info.groups:
            raise unknown_choice("entity_layout group", name, list(info.groups))
        out[name] = _check_group_layout(group_layout, info.groups[name])
    return out


def _check_group_layout(layout: Any, g: GroupInfo) -> Dict[str, Any]:
    """Validate and normalise one group's layout (see :func:`check_entity_layout`)."""
    where = f"entity_layout of group '{g.name}'"
    _check_keys(layout, _GROUP_LAYOUT_KEYS, where)
    blocks: List[_Block] = []
    own = []
    for r in _as_list(layout.get("own", []), f"{where}: own"):
        lo, hi = _as_pair(r, f"{where}: own range")
        _check_span(lo, hi, g.obs_dim, f"{where}: own range {(lo, hi)}")
        own.append((lo, hi))
        blocks.append((lo, hi, f"own range {(lo, hi)}"))
    entities = layout.get("entities", {})
    if not isinstance(entities, Mapping):
        raise MarlError(f"{where}: entities must be a dict of entity type -> spec, got {type(entities).__name__}.")
    ents = {}
    for t, spec in entities.items():
        ents[t], ent_blocks = _check_entity(t, spec, g.obs_dim, where)
        blocks += ent_blocks
    _check_no_overlap(blocks, where)
    return {"own": own, "entities": ents, **_check_actions(layout, ents, g, where)}


def _check_entity(t: Any, spec: Any, obs_dim: int, where: str) -> Tuple[Dict[str, Any], List[_Block]]:
    """One entity type -> (normalised spec, the observation blocks it uses)."""
    if not isinstance(t, str) or not t:
        raise MarlError(f"{where}: entity types must be non-empty strings, got {t!r}.")
    what = f"{where}: entity '{t}'"
    _check_keys(spec, _ENTITY_KEYS, what)
    if "count" not in spec:
        raise MarlError(f"{what} needs 'count' (the number of entities of this type).")
    count = _as_int(spec["count"], f"{what}: count")
    if count < 0:
        raise MarlError(f"{what}: count must be >= 0, got {count}.")
    has_block = "start" in spec or "dim" in spec
    if has_block == ("fields" in spec) or (has_block and not ("start" in spec and "dim" in spec)):
        raise MarlError(
            f"{what} needs either 'start' and 'dim' or 'fields' (a list of (start, dim)), got keys {sorted(spec)}."
        )
    if has_block:
        fields = [(spec["start"], spec["dim"])]
    else:
        fields = _as_list(spec["fields"], f"{what}: fields")
        if not fields:
            raise MarlError(f"{what}: fields must list at least one (start, dim).")
    fields = [_as_pair(f, f"{what}: field (start, dim)") for f in fields]
    blocks = []
    for start, dim in fields:
        if dim < 1:
            raise MarlError(f"{what}: dim must be >= 1, got {dim}.")
        end = start + count * dim
        _check_span(start, end, obs_dim, f"{what}: features {start}..{end - 1} (start {start} + count {count} x dim {dim})")
        blocks.append((start, end, f"entity '{t}' ({start}..{end - 1})"))
    if has_block:
        out: Dict[str, Any] = {"start": fields[0][0], "count": count, "dim": fields[0][1]}
    else:
        out = {"fields": fields, "count": count}
    if "unit_type" in spec:
        dim = sum(d for _, d in fields)
        a, b = _as_pair(spec["unit_type"], f"{what}: unit_type")
        if not 0 <= a < b <= dim:
            raise MarlError(
                f"{what}: unit_type {(a, b)} must lie inside one entity's {dim} features: 0 <= a < b <= {dim}."
            )
        out["unit_type"] = (a, b)
    return out, blocks


def _check_actions(layout: Mapping[str, Any], ents: Dict[str, Dict[str, Any]], g: GroupInfo, where: str) -> Dict[str, Any]:
    """``n_normal_actions`` / ``action_targets`` of one group, normalised (``{}`` for continuous groups)."""
    given = [k for k in ("n_normal_actions", "action_targets") if k in layout]
    if not g.discrete:
        if given:
            raise MarlError(
                f"{where}: '{given[0]}' is only for discrete actions; group '{g.name}' has continuous "
                f"actions {g.action_space}. Leave out n_normal_actions and action_targets."
            )
        return {}
    raw_targets = layout.get("action_targets", {}) or {}
    if not isinstance(raw_targets, Mapping):
        raise MarlError(f"{where}: action_targets must be a dict of entity type -> (first_action, count).")
    targets = {}
    for t, r in raw_targets.items():
        if t not in ents:
            raise MarlError(
                f"{where}: action_targets names '{t}', which is not an entity type of the group."
                f"{closest(t, list(ents))} Valid entity types: {', '.join(map(str, ents)) or '(none)'}."
            )
        first, m = _as_pair(r, f"{where}: action_targets['{t}']")
        if first < 0:
            raise MarlError(f"{where}: action_targets['{t}'] = {(first, m)} must start at an action >= 0.")
        if m != ents[t]["count"]:
            raise MarlError(
                f"{where}: action_targets['{t}'] = {(first, m)} targets {m} entities, but entity '{t}' has "
                f"count {ents[t]['count']}; one action per entity is needed."
            )
        targets[t] = (first, m)
    n = g.n_actions
    k = _as_int(layout.get("n_normal_actions", n - sum(m for _, m in targets.values())), f"{where}: n_normal_actions")
    if k < 0:
        raise MarlError(f"{where}: n_normal_actions must be >= 0, got {k} (group '{g.name}' has {n} actions).")
    _check_action_tiling(k, targets, n, where)
    return {"n_normal_actions": k, "action_targets": targets}


def _check_action_tiling(k: int, targets: Dict[str, Tuple[int, int]], n: int, where: str) -> None:
    """Raise unless actions ``0..k-1`` and the target ranges ``(first, m)`` cover ``0..n-1`` once each."""
    spans = [(0, k, f"n_normal_actions ({k})")]
    spans += [(f, f + m, f"action_targets['{t}'] {(f, m)}") for t, (f, m) in targets.items()]
    nxt, problem = 0, None
    for lo, hi, what in sorted(s for s in spans if s[1] > s[0]):
        if lo != nxt:
            problem = (f"{what} overlaps the actions before it" if lo < nxt
                       else f"actions {nxt}..{lo - 1} are neither normal nor targeted")
            break
        nxt = hi
    if problem is None and nxt != n:
        problem = f"they cover actions 0..{nxt - 1}"
    if problem:
        raise MarlError(
            f"{where}: actions 0..n_normal_actions-1 and the action_targets ranges must cover the group's "
            f"{n} actions 0..{n - 1} exactly once; {problem}."
        )


def _check_no_overlap(blocks: List[_Block], where: str) -> None:
    """Raise if two blocks ``(start, end, what)`` share an observation feature."""
    prev_end, prev_what = 0, ""
    for lo, hi, what in sorted(b for b in blocks if b[1] > b[0]):
        if lo < prev_end:
            raise MarlError(
                f"{where}: features {lo}..{min(hi, prev_end) - 1} are used by both {prev_what} and {what}; "
                f"each observation feature may belong to one own range or entity only."
            )
        if hi > prev_end:
            prev_end, prev_what = hi, what


def _check_span(lo: int, hi: int, obs_dim: int, what: str) -> None:
    if not 0 <= lo <= hi <= obs_dim:
        raise MarlError(f"{what} must lie inside the observation, features 0..{obs_dim - 1} (obs_dim {obs_dim}).")


def _check_keys(d: Any, valid: Sequence[str], where: str) -> None:
    if not isinstance(d, Mapping):
        raise MarlError(f"{where} must be a dict with keys among {', '.join(valid)}, got {type(d).__name__}.")
    for k in d:
        if k not in valid:
            raise MarlError(f"{where}: unknown key '{k}'.{closest(k, valid)} Valid keys: {', '.join(valid)}.")


def _as_int(v: Any, what: str) -> int:
    if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
        raise MarlError(f"{what} must be an int, got {v!r}.")
    return int(v)


def _as_list(v: Any, what: str) -> list:
    v = v.tolist() if isinstance(v, np.ndarray) else v
    if isinstance(v, (str, bytes, Mapping)) or not isinstance(v, Sequence):
        raise MarlError(f"{what} must be a list, got {v!r}.")
    return list(v)


def _as_pair(v: Any, what: str) -> Tuple[int, int]:
    v = v.tolist() if isinstance(v, np.ndarray) else v
    if isinstance(v, (str, bytes, Mapping)) or not isinstance(v, Sequence) or len(v) != 2:
        raise MarlError(f"{what} must be a pair of ints, got {v!r}.")
    return _as_int(v[0], what), _as_int(v[1], what)


@dataclass
class Step:
    """One batched transition (see the module docstring for shapes).

    ``reward``, ``terminated`` and ``truncated`` describe the step just taken
    (all zero / False after :meth:`MultiAgentEnv.reset`). ``final_obs`` and
    ``final_state`` equal ``obs`` / ``state`` except in rows whose episode ended
    at this step, where they hold that episode's last observation;
    ``final_avail_actions`` (optional, same rule) holds the legal actions at that
    last observation, used by Q-learning targets of truncated episodes
    (``None``: take ``avail_actions``, or all actions legal).
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

    @property
    def done(self) -> torch.Tensor:
        """``terminated | truncated``: ``[B]`` bool."""
        return self.terminated | self.truncated


def check_discrete_actions(
    actions: Dict[str, Any], group: GroupInfo, num_envs: int, check_range: bool = True
) -> torch.Tensor:
    """Validate one discrete group's actions for :meth:`MultiAgentEnv.step`.

    Args:
        actions: group name -> ``[B, N_g]`` integer actions.
        group: the group to check (``actions[group.name]``).
        num_envs: ``B``.
        check_range: also require values in ``[0, group.n_actions)``.
    Returns:
        ``[B, N_g]`` int64 tensor (on the device it came on).
    Raises:
        MarlError: the group is missing, or the shape, dtype or range is wrong
            (the message names the group and what was expected).
    """
    name = group.name
    if not isinstance(actions, dict) or name not in actions:
        got = list(actions) if isinstance(actions, dict) else type(actions).__name__
        raise MarlError(f"Missing actions for group '{name}'. Expected groups: {name} (got {got}).")
    a = torch.as_tensor(actions[name])
    if tuple(a.shape) != (num_envs, group.n_agents):
        raise MarlError(f"Actions of group '{name}' must have shape {(num_envs, group.n_agents)}, got {tuple(a.shape)}.")
    if a.is_floating_point() or a.dtype == torch.bool:
        raise MarlError(f"Actions of group '{name}' must be integers, got {a.dtype}.")
    a = a.long()
    if check_range and a.numel() and (int(a.min()) < 0 or int(a.max()) >= group.n_actions):
        raise MarlError(
            f"Actions of group '{name}' must lie in [0, {group.n_actions}), got values in [{int(a.min())}, {int(a.max())}]."
        )
    return a


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


@dataclass
class EnvSpec:
    """How to rebuild an env in another process (remote env runners, checkpoints)."""

    family: str
    scenario: Optional[str]
    kwargs: Dict[str, Any]

    def make(self, **overrides) -> "MultiAgentEnv":
        kw = {**self.kwargs, **overrides}
        return make_env(self.family, self.scenario, **kw)


class MultiAgentEnv(abc.ABC):
    """Batched multi-agent environment: ``B`` copies stepped as one.

    Subclasses set :attr:`info` (an :class:`EnvInfo`) and implement
    :meth:`reset` and :meth:`step`. Copies reset themselves when their episode
    ends (see :class:`Step`).
    """

    info: EnvInfo
    spec: Optional[EnvSpec] = None

    @property
    def num_envs(self) -> int:
        return self.info.num_envs

    @abc.abstractmethod
    def reset(self, seed: Optional[int] = None) -> Step:
        """Reset all ``B`` copies (copy ``b`` seeded with ``seed + b``) and return the first :class:`Step`."""

    @abc.abstractmethod
    def step(self, actions: Dict[str, torch.Tensor]) -> Step:
        """Apply one joint action per copy.

        Args:
            actions: group -> ``[B, N_g]`` int64 (discrete) or ``[B, N_g, act_dim]``
                float32 (continuous, clipped to the action space by the env).
        Returns:
            The next :class:`Step`; ended copies are already reset.
        """

    def close(self) -> None:
        """Release simulator resources."""

    def callbacks(self) -> List[Any]:
        """Run callbacks (:class:`marl.callbacks.Callback`) this env contributes to every ``fit``
        on it, e.g. the crash wrapper's coach; none by default. Wrappers add theirs to the inner env's."""
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
                low = torch.as_tensor(g.action_space.low, dtype=torch.float32)
                high = torch.as_tensor(g.action_space.high, dtype=torch.float32)
                u = torch.rand(B, N, g.n_actions, generator=generator)
                out[name] = low + u * (high - low)
        return out

    def fit(self, algo: str, **overrides):
        """Train ``algo`` on this env; see :func:`marl.fit` for the arguments."""
        from marl.api import fit

        return fit(self, algo, **overrides)

    def __repr__(self) -> str:
        i = self.info
        groups = ", ".join(f"{g.name}x{g.n_agents}" for g in i.groups.values())
        return f"<{type(self).__name__} {i.family}:{i.scenario} B={i.num_envs} [{groups}] {i.kind}>"


# --------------------------------------------------------------------------- registry

@dataclass
class _Family:
    factory: str  # "module:callable", imported lazily so marl core never imports an env family
    description: str
    scenarios: Optional[str] = None  # "module:callable" returning the scenario names


_FAMILIES: Dict[str, _Family] = {}


def register_env(family: str, factory: str, description: str = "", scenarios: Optional[str] = None) -> None:
    """Register an env family.

    Args:
        family: the name users pass to :func:`make_env`.
        factory: ``"module:callable"``; the callable takes ``(scenario, **kwargs)``
            and returns a :class:`MultiAgentEnv`.
        description: one line shown by ``marl list``.
        scenarios: optional ``"module:callable"`` returning the list of scenario names.
    """
    _FAMILIES[family] = _Family(factory, description, scenarios)


def _load(path: str) -> Callable:
    module, _, attr = path.partition(":")
    return getattr(importlib.import_module(module), attr)


def _builtin_families() -> Dict[str, _Family]:
    load_plugins()  # the installed env packages register their families (marl.plugins)
    return _FAMILIES


def list_envs(with_scenarios: bool = False) -> Dict[str, Any]:
    """Registered env families -> description (or, with ``with_scenarios``, their scenario names)."""
    fams = _builtin_families()
    if not with_scenarios:
        return {k: f.description for k, f in fams.items()}
    out = {}
    for k, f in fams.items():
        try:
            out[k] = list(_load(f.scenarios)()) if f.scenarios else []
        except ImportError as e:  # an optional extra that is not installed
            out[k] = [f"<unavailable: {e}>"]
    return out


def scenarios_of(family: str) -> List[str]:
    fams = _builtin_families()
    f = fams[family]
    return list(_load(f.scenarios)()) if f.scenarios else []


def make_env(name: Any, scenario: Optional[str] = None, **kwargs) -> MultiAgentEnv:
    """Build a batched :class:`MultiAgentEnv`.

    Args:
        name: a family name (``"mpe"``, ``"vmas"``, ``"pettingzoo"``, see
            :func:`list_envs`), ``"family:scenario"``, a PettingZoo env instance,
            or a callable returning one.
        scenario: scenario name inside the family (e.g. ``"simple_spread"``);
            for ``"pettingzoo"`` a dotted path such as ``"mpe2.simple_tag_v3"``.
        **kwargs: ``num_envs`` (batch size ``B``), ``seed``, ``entity_layout``
            and family-specific options (e.g. ``N=3``, ``continuous_actions=True``).
            ``entity_layout`` (any family): group name -> layout (format:
            :class:`EnvInfo`), checked by :func:`check_entity_layout` against the
            built env and set as ``env.info.entity_layout``, replacing the
            env's own layout; ``env.spec`` keeps it, so ``env.spec.make()``
            rebuilds the env with the same layout.
            ``crash`` (any family with discrete actions): wrap the env in
            :class:`~marl.envs.wrappers.crash.CrashWrapper`; a rate in
            ``[0, 1]``, a dict of its options, or a coach strategy name
            (``"fixed"``, ``"curriculum"``, ``"adaptive"``); see
            :func:`~marl.envs.wrappers.crash.crash_options`. ``env.spec``
            keeps the options, so ``env.spec.make()`` rebuilds the wrapper.
            ``offbeat`` (discrete-action families): action -> duration in steps,
            e.g. ``{"catch": 3}``, or group -> {action -> duration}; wraps the
            env in :class:`~marl.envs.wrappers.offbeat.OffBeatWrapper` (a dict
            with a ``"durations"`` key also passes ``effect`` / ``noop_action``,
            e.g. ``{"durations": {"catch": 3}, "effect": "spread"}``); kept in
            ``env.spec`` (docs/offbeat.md).

    Raises:
        MarlError: unknown family or scenario (the message lists the valid
            choices), or an invalid ``entity_layout``.
    """
    if not isinstance(name, str):
        from marl.envs.pettingzoo import PettingZooEnv

        return PettingZooEnv.from_object(name, **kwargs)
    if ":" in name and scenario is None:
        name, scenario = name.split(":", 1)
    fams = _builtin_families()
    if name not in fams:
        raise unknown_choice("env", name, list(fams))
    layout = kwargs.pop("entity_layout", None)
    crash = kwargs.pop("crash", None)
    offbeat = kwargs.pop("offbeat", None)
    env = _load(fams[name].factory)(scenario, **kwargs)
    if env.spec is None:
        env.spec = EnvSpec(name, scenario, dict(kwargs))
    if layout is not None:
        env.info.entity_layout = check_entity_layout(layout, env.info)
        env.spec.kwargs = {**env.spec.kwargs, "entity_layout": copy.deepcopy(env.info.entity_layout)}
    if offbeat is not None:
        from marl.envs.wrappers.offbeat import wrap_offbeat

        inner_spec = env.spec
        env = wrap_offbeat(env, offbeat)
        env.spec = EnvSpec(inner_spec.family, inner_spec.scenario,
                           {**inner_spec.kwargs, "offbeat": copy.deepcopy(offbeat)})
    if crash is not None:
        from marl.envs.wrappers.crash import CrashWrapper, crash_options

        opts = crash_options(crash, seed=kwargs.get("seed"))
        env = CrashWrapper(env, **opts)  # its spec adds the normalised crash options
    return env
