"""Helpers shared by the env adapters in ``marl.envs`` (siblings share through this module only).

Groups and teams from agent ids (:func:`build_groups`, :func:`default_teams`),
observation spaces (:func:`agent_obs_space`: structured or :func:`flat_box`; :func:`to_gymnasium`), the layout
of per-agent observations in a flat state buffer (:class:`AgentLayout`) and the buffers of the
adapters that step copies in Python (:class:`ObsRows`),
keyword checks (:func:`check_kwargs`, :func:`check_num_envs`), the
:class:`~marl.env.EnvInfo` of StarCraft-style tasks (:func:`ally_team_info`)
the mpe2 scenario scan (:func:`mpe2_modules`), env constructors named by a
string (:func:`named_env_constructor`). The raw-value checks and the step limit an env declares itself
are in :mod:`marl.envs.common_raw`. Only gymnasium, numpy, torch and marl
core are imported here (mpe2 inside :func:`mpe2_modules`).
"""

from __future__ import annotations

import copy
import functools
import importlib
import inspect
import pkgutil
import re
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple, Union

import gymnasium as gym
import numpy as np
import torch

from marl.env import (
    KINDS,
    OBS_KEY,
    EnvInfo,
    GroupInfo,
    MarlError,
    Observation,
    check_entity_layout,
    closest,
    obs_dtypes,
    obs_leaves,
    spaces_equal,
    unknown_choice,
)


def agent_prefix(agent: str) -> str:
    """Group prefix of an agent id: the text before the last ``_`` (``"agent_1"`` -> ``"agent"``)."""
    return agent.rsplit("_", 1)[0] if "_" in agent else agent


def flat_box(space: gym.spaces.Space) -> gym.spaces.Box:
    """The 1-D float32 ``Box`` an observation of ``space`` is flattened into."""
    flat = gym.spaces.flatten_space(space)
    return gym.spaces.Box(
        low=flat.low.astype(np.float32).reshape(-1),
        high=flat.high.astype(np.float32).reshape(-1),
        dtype=np.float32,
    )


def keeps_structure(space: gym.spaces.Space) -> bool:
    """An agent observation space the Python-loop adapters (PettingZoo, Gymnasium) pass through structured:
    a ``Box`` of rank >= 2 (an image ``[H, W, C]``, a board ``[8, 8, 111]``; any real dtype), or a non-empty
    ``Dict`` whose values are all Boxes of rank >= 1. Everything else (1-D and scalar Boxes, ``Discrete``,
    ``MultiDiscrete``, ``Tuple``, a ``Dict`` holding any of those or a nested ``Dict``) is flattened
    (:func:`flat_box`)."""
    if isinstance(space, gym.spaces.Box):
        return len(space.shape) >= 2
    return (
        isinstance(space, gym.spaces.Dict)
        and bool(space.spaces)
        and all(isinstance(b, gym.spaces.Box) and len(b.shape) >= 1 for b in space.spaces.values())
    )


def _tensor_box(box: gym.spaces.Box) -> gym.spaces.Box:
    """``box`` as its observation tensors are typed (:func:`~marl.env.obs_dtype`): uint8 stays uint8, every
    other dtype (float64, int8 boards, bool planes) becomes float32 with float32 bounds."""
    if box.dtype == np.uint8:
        return box
    return gym.spaces.Box(np.asarray(box.low, np.float32), np.asarray(box.high, np.float32), dtype=np.float32)


def agent_obs_space(space: gym.spaces.Space) -> gym.spaces.Space:
    """The observation space a Python-loop adapter declares for an agent whose env space is ``space``.

    Returns:
        ``space`` structured (:func:`keeps_structure`: a ``Box`` of rank >= 2, or a ``Dict`` of Boxes, in
        the env's key order), each Box uint8 or float32 (:func:`_tensor_box`); else :func:`flat_box`
        ``(space)``, the 1-D float32 Box of :func:`gymnasium.spaces.flatten`.
    """
    if not keeps_structure(space):
        return flat_box(space)
    if isinstance(space, gym.spaces.Box):
        return _tensor_box(space)
    leaves = obs_leaves(space)  # keeps_structure: a Dict of Boxes
    return gym.spaces.Dict([(k, _tensor_box(b)) for k, b in leaves.items()])  # a list keeps the key order


def to_gymnasium(space: Any) -> gym.spaces.Space:
    """Convert an (old ``gym`` or gymnasium) Box / Discrete space to gymnasium.

    Raises:
        MarlError: the space is neither Box nor Discrete.
    """
    if isinstance(space, (gym.spaces.Box, gym.spaces.Discrete)):
        return space
    name = type(space).__name__
    if name == "Discrete":
        return gym.spaces.Discrete(int(space.n), start=int(getattr(space, "start", 0)))
    if name == "Box":
        return gym.spaces.Box(
            low=np.asarray(space.low, np.float32), high=np.asarray(space.high, np.float32), dtype=np.float32
        )
    raise MarlError(f"Unsupported space {space!r}: only Box and Discrete are supported.")


def build_groups(
    agents: Sequence[str],
    obs_spaces: Mapping[str, gym.spaces.Box],
    act_spaces: Mapping[str, gym.spaces.Space],
    team_of: Mapping[str, str],
) -> Dict[str, GroupInfo]:
    """Partition ``agents`` into groups (same prefix, team and spaces), in agent order.

    Args:
        agents: agent ids in their fixed order.
        obs_spaces / act_spaces: agent -> observation space (1-D, or structured: :func:`agent_obs_space`) /
            action space. Agents of one group have equal spaces and equal observation tensor dtypes.
        team_of: agent -> team name.
    Returns:
        group name -> :class:`GroupInfo`; insertion order follows the first agent of each group.
    """
    buckets: List[Tuple[str, str, List[str]]] = []  # (prefix, team, agents)
    for a in agents:
        p, t = agent_prefix(a), team_of[a]
        for bp, bt, members in buckets:
            ref = members[0]
            if (
                bp == p
                and bt == t
                and spaces_equal(obs_spaces[ref], obs_spaces[a])
                and obs_dtypes(obs_spaces[ref]) == obs_dtypes(obs_spaces[a])
                and spaces_equal(act_spaces[ref], act_spaces[a])
            ):
                members.append(a)
                break
        else:
            buckets.append((p, t, [a]))
    per_prefix: Dict[str, int] = {}
    for p, _, _ in buckets:
        per_prefix[p] = per_prefix.get(p, 0) + 1
    groups: Dict[str, GroupInfo] = {}
    seen: Dict[str, int] = {}
    for p, t, members in buckets:
        if per_prefix[p] == 1:
            name = p
        elif len(members) == 1:
            name = members[0]
        else:
            name = f"{p}_g{seen.get(p, 0)}"
        seen[p] = seen.get(p, 0) + 1
        while name in groups:  # pathological ids; keep names unique
            name += "_"
        ref = members[0]
        groups[name] = GroupInfo(name, list(members), obs_spaces[ref], act_spaces[ref], team=t)
    return groups


def default_teams(
    agents: Sequence[str],
    kind: Optional[str] = None,
    teams: Optional[Mapping[str, Sequence[str]]] = None,
) -> Tuple[str, Dict[str, str]]:
    """Resolve the env kind and each agent's team.

    Args:
        agents: all agent ids.
        kind: ``"cooperative"``, ``"competitive"``, ``"mixed"`` or ``None`` (infer).
        teams: optional team -> list of agent ids or agent prefixes. Agents not
            listed keep their default team.
    Defaults without ``teams``: ``kind=None`` -> one prefix: ``"cooperative"``,
    one team ``"team"``; several prefixes: ``"mixed"``, one team per prefix.
    ``kind="cooperative"`` -> one team. ``kind="competitive"``/``"mixed"`` -> one
    team per prefix, or per agent if all agents share one prefix (e.g. the two
    players of a board game). With ``teams``: one team -> cooperative, several -> mixed.

    Raises:
        MarlError: unknown kind, or a team member that is neither an agent nor a prefix.
    """
    if kind is not None and kind not in KINDS:
        raise unknown_choice("env kind", kind, KINDS)
    prefixes = list(dict.fromkeys(agent_prefix(a) for a in agents))
    if teams:
        team_of = {}
        for team, members in teams.items():
            for m in [members] if isinstance(members, str) else members:
                hit = [a for a in agents if a == m or agent_prefix(a) == m]
                if not hit:
                    raise unknown_choice(f"member of team '{team}' (agent or prefix)", m, list(agents) + prefixes)
                team_of.update({a: str(team) for a in hit})
        for a in agents:
            team_of.setdefault(a, agent_prefix(a))
    elif kind == "cooperative" or (kind is None and len(prefixes) == 1):
        team_of = {a: "team" for a in agents}
    elif len(prefixes) > 1:
        team_of = {a: agent_prefix(a) for a in agents}
    else:
        team_of = {a: a for a in agents}
    if kind is None:
        kind = "cooperative" if len(set(team_of.values())) == 1 else "mixed"
    return kind, team_of


class AgentLayout:
    """Where each agent lives in the flat ``[B, state_dim]`` buffer and in the group tensors.

    The global state is the concatenation of per-agent observations (structured ones flattened: each
    key row-major, in key order) in agent order; the observations of flat groups are gathered from it
    with one fancy index per group (structured groups keep their own buffers: :class:`ObsRows`).
    """

    def __init__(self, agents: Sequence[str], groups: Mapping[str, GroupInfo]):
        self.agents = list(agents)
        self.index = {a: i for i, a in enumerate(self.agents)}
        self.groups = dict(groups)
        dims = {a: g.obs_dim for g in groups.values() for a in g.agents}
        self.obs_dims = [dims[a] for a in self.agents]
        self.offsets = np.concatenate([[0], np.cumsum(self.obs_dims)]).astype(int)
        self.state_dim = int(self.offsets[-1])
        self.slices = [slice(int(self.offsets[i]), int(self.offsets[i + 1])) for i in range(len(self.agents))]
        self.cols = {
            name: np.concatenate(
                [np.arange(self.offsets[self.index[a]], self.offsets[self.index[a] + 1]) for a in g.agents]
            )
            for name, g in groups.items()
        }
        self.pos = {name: np.array([self.index[a] for a in g.agents], dtype=np.int64) for name, g in groups.items()}

    def obs(self, state: np.ndarray) -> Dict[str, torch.Tensor]:
        """``[B, state_dim]`` float32 -> flat group -> fresh ``[B, N_g, obs_dim_g]`` tensors (structured
        groups are left out)."""
        B = state.shape[0]
        return {
            name: torch.from_numpy(state[:, self.cols[name]].reshape(B, g.n_agents, g.obs_dim))
            for name, g in self.groups.items()
            if not g.structured
        }

    def observe(self, state: np.ndarray) -> Tuple[Dict[str, torch.Tensor], torch.Tensor]:
        """``(obs, state)``: fresh group observation tensors and a copy of the state buffer."""
        return self.obs(state), torch.from_numpy(state.copy())

    def per_group(self, arr: np.ndarray) -> Dict[str, torch.Tensor]:
        """``[B, N]`` per-agent array -> group -> fresh ``[B, N_g]`` tensors."""
        return {name: torch.from_numpy(arr[:, self.pos[name]]) for name in self.groups}

    def observation(
        self,
        state: Union[np.ndarray, "ObsRows"],
        avail: Optional[Dict[str, Optional[torch.Tensor]]] = None,
        alive: Optional[Dict[str, torch.Tensor]] = None,
    ) -> Observation:
        """The :class:`~marl.env.Observation` of the ``[B, state_dim]`` buffer :meth:`observe` reads, or of
        an :class:`ObsRows` (its structured groups as :meth:`ObsRows.observe` gives them).

        ``avail`` (group -> ``[B, N_g, n_actions_g]`` bool) defaults to every action legal for
        discrete groups (``None`` for continuous ones), ``alive`` (group -> ``[B, N_g]`` bool)
        to every agent alive.
        """
        obs, st = state.observe() if isinstance(state, ObsRows) else self.observe(state)
        B = st.shape[0]
        if avail is None:
            avail = {
                n: (torch.ones(B, g.n_agents, g.n_actions, dtype=torch.bool) if g.discrete else None)
                for n, g in self.groups.items()
            }
        if alive is None:
            alive = {n: torch.ones(B, g.n_agents, dtype=torch.bool) for n, g in self.groups.items()}
        return Observation(obs, st, avail, alive)

    def split_actions(self, actions: Mapping[str, torch.Tensor]) -> List[np.ndarray]:
        """Checked group action tensors (:func:`marl.env.check_actions`) -> per-agent numpy arrays in agent order.

        Discrete agents get ``[B]`` int64, continuous agents ``[B, act_dim]``
        float32 clipped to the action space bounds.
        """
        out: List[Optional[np.ndarray]] = [None] * len(self.agents)
        for name, g in self.groups.items():
            a = actions[name].detach().cpu().numpy()
            if g.discrete:
                a = a.astype(np.int64, copy=False)
            else:
                # a fresh clipped array: mpe2 keeps views of it (comm state) after the step
                a = np.clip(a.astype(np.float32), g.action_space.low, g.action_space.high).astype(np.float32)
            for j, agent in enumerate(g.agents):
                out[self.index[agent]] = a[:, j]
        return out  # type: ignore[return-value]


AgentObs = Union[np.ndarray, Dict[str, np.ndarray], None]  # flat float32, key -> array (structured), None: zeros


class ObsRows:
    """The observation buffers of the adapters that step env copies in Python (PettingZoo, Gymnasium).

    ``state`` ``[B, state_dim]`` float32: every agent's observation flattened at its :class:`AgentLayout`
    slice (a structured one row-major, key by key in key order, uint8 values at their 0..255 scale:
    the values :func:`gymnasium.spaces.flatten` gives); it is the global state and holds the observations
    of flat groups. ``leaves[g][k]`` ``[B, N_g, *shape_k]`` in the key's tensor dtype
    (:func:`~marl.env.obs_dtypes`: uint8 or float32): the observations of each structured group ``g``
    (key :data:`~marl.env.OBS_KEY` for a ``Box`` space). :meth:`row` / :meth:`set_row` keep an episode's
    last observation while the copy's buffers already hold the next.
    """

    def __init__(self, layout: AgentLayout, num_envs: int):
        self.layout = layout
        self.state = np.zeros((num_envs, layout.state_dim), np.float32)
        self.leaves: Dict[str, Dict[str, np.ndarray]] = {}
        self.slot: Dict[str, Tuple[str, int]] = {}  # structured agent -> (group, index in the group)
        for name, g in layout.groups.items():
            if g.structured:
                dtypes = obs_dtypes(g.obs_space)
                self.leaves[name] = {
                    k: np.zeros(
                        (num_envs, g.n_agents, *box.shape), np.uint8 if dtypes[k] == torch.uint8 else np.float32
                    )
                    for k, box in obs_leaves(g.obs_space).items()
                }
                self.slot.update({a: (name, j) for j, a in enumerate(g.agents)})

    def write(self, b: int, agent: str, value: AgentObs) -> None:
        """Store ``agent``'s observation in copy ``b``: a flat ``[obs_dim]`` float32 array, key -> array
        (a structured agent, :meth:`marl.envs.common_raw.RawChecks.read_structured`), or ``None`` (zeros: an agent not alive)."""
        flat: Optional[np.ndarray] = None
        if isinstance(value, dict):
            name, j = self.slot[agent]
            for k, arr in self.leaves[name].items():
                arr[b, j] = value[k]
            flat = np.concatenate([np.asarray(v, np.float32).reshape(-1) for v in value.values()])
        else:
            if agent in self.slot:  # a structured agent that is not alive
                name, j = self.slot[agent]
                for arr in self.leaves[name].values():
                    arr[b, j] = 0
            flat = value
        self.state[b, self.layout.slices[self.layout.index[agent]]] = 0.0 if flat is None else flat

    def row(self, b: int) -> "ObsRows":
        """A copy of copy ``b``'s buffers, as a one-copy :class:`ObsRows` (written with ``b = 0``)."""
        out = copy.copy(self)
        out.state = self.state[b : b + 1].copy()
        out.leaves = {name: {k: a[b : b + 1].copy() for k, a in keys.items()} for name, keys in self.leaves.items()}
        return out

    def set_row(self, b: int, row: "ObsRows") -> None:
        """Copy ``b``'s buffers := a :meth:`row`."""
        self.state[b] = row.state[0]
        for name, keys in self.leaves.items():
            for k, a in keys.items():
                a[b] = row.leaves[name][k][0]

    def observe(self) -> Tuple[Dict[str, Any], torch.Tensor]:
        """``(obs, state)``: fresh group observation tensors (``[B, N_g, obs_dim_g]`` float32 of a flat group;
        ``[B, N_g, *shape]`` or key -> such of a structured one, in the group order) and a copy of the state."""
        flat, state = self.layout.observe(self.state)
        obs: Dict[str, Any] = {}
        for name, g in self.layout.groups.items():
            if name not in self.leaves:
                obs[name] = flat[name]
                continue
            keys = {k: torch.from_numpy(a.copy()) for k, a in self.leaves[name].items()}
            obs[name] = keys if isinstance(g.obs_space, gym.spaces.Dict) else keys[OBS_KEY]
        return obs, state


def check_kwargs(what: str, given: Mapping[str, Any], valid: Sequence[str]) -> None:
    """Raise a :class:`MarlError` naming the valid kwargs if ``given`` holds one not in ``valid``."""
    bad = [k for k in given if k not in valid]
    if bad:
        same_case = [v for v in valid if v.lower() == str(bad[0]).lower()]
        hint = f" Did you mean '{same_case[0]}'?" if same_case else closest(bad[0], valid)
        raise MarlError(
            f"Unknown keyword argument '{bad[0]}' for {what}.{hint} "
            f"Valid kwargs: {', '.join(sorted(valid)) or '(none)'}."
        )


def check_num_envs(num_envs: Any) -> int:
    """``num_envs`` as an int; raises :class:`MarlError` unless it is a positive int."""
    if isinstance(num_envs, bool) or not isinstance(num_envs, (int, np.integer)) or num_envs < 1:
        raise MarlError(f"num_envs must be a positive int, got {num_envs!r}.")
    return int(num_envs)


def ally_team_info(
    family: str,
    scenario: str,
    agents: List[str],
    obs_space: gym.spaces.Box,
    n_actions: int,
    state_dim: int,
    episode_limit: int,
    num_envs: int,
    layout: Dict[str, Any],
) -> EnvInfo:
    """EnvInfo of a StarCraft-style task (SMAX, SMACv2): one cooperative group
    ``"ally"`` whose units all receive the team reward; ``layout`` is the ally
    observation's entity layout, keyed by the group name (see :class:`EnvInfo`).

    Raises:
        MarlError: ``layout`` does not fit the observation / actions (:func:`check_entity_layout`).
    """
    group = GroupInfo("ally", agents, obs_space, gym.spaces.Discrete(n_actions), team="team")
    info = EnvInfo(
        family=family,
        scenario=scenario,
        agents=agents,
        groups={"ally": group},
        state_dim=state_dim,
        episode_limit=episode_limit,
        kind="cooperative",
        shared_reward=True,
        num_envs=num_envs,
    )
    info.entity_layout = check_entity_layout(layout, info)
    return info


@functools.lru_cache(maxsize=None)
def mpe2_modules() -> Dict[str, str]:
    """Scenario name -> versioned mpe2 module name (``"simple_spread"`` -> ``"simple_spread_v3"``)."""
    import mpe2

    out = {}
    for m in pkgutil.iter_modules(mpe2.__path__):
        hit = re.fullmatch(r"(.+)_v(\d+)", m.name)
        if hit and not m.ispkg:
            out[hit.group(1)] = m.name
    return dict(sorted(out.items()))


ENV_FUNCTIONS = ("parallel_env", "env", "raw_env")  # PettingZoo's module convention for env constructors


def named_env_constructor(
    name: str, env_classes: Tuple[type, ...], kind: str, known: Callable[[], List[str]]
) -> Callable[..., Any]:
    """The env constructor that ``"pkg.module"`` or ``"pkg.module:attr"`` names, for names given as strings.

    A string (the command line, a config file) must never run an arbitrary callable such as
    ``os:system``. It resolves only to a subclass of one of ``env_classes``, or to a Python
    function named ``parallel_env`` / ``env`` / ``raw_env`` (``"pkg.module"`` alone: the first
    of these it has) defined in the named module's top-level package or in ``kind``'s own
    package (e.g. PettingZoo's ``parallel_wrapper_fn``). The caller checks what it returns.

    Args:
        name: ``"pkg.module"`` or ``"pkg.module:attr"``.
        env_classes: the env base classes a named class must derive from.
        kind: the env library, e.g. ``"PettingZoo"`` (messages; its package name in lower case).
        known: the known names, listed when the module does not exist.
    Raises:
        MarlError: an unknown module (with ``known``), a missing attribute, or an attribute
            that is none of the above (a builtin, ``subprocess:run``, ``builtins:eval``, ...).
    """
    module_name, _, attr = name.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as e:
        if e.name and module_name.startswith(e.name) or e.name == module_name:
            raise unknown_choice(f"{kind} env module", name, known()) from e
        raise MarlError(f"Importing {kind} env '{name}' failed: {e}") from e
    if not attr:
        attr = next((n for n in ENV_FUNCTIONS if getattr(module, n, None) is not None), "")
        if not attr:
            raise MarlError(
                f"Module '{module_name}' has none of {', '.join(ENV_FUNCTIONS)}; name an env class "
                f"as '{module_name}:EnvClass'."
            )
    elif not hasattr(module, attr):
        raise unknown_choice(f"callable in {module_name}", attr, [k for k in dir(module) if not k.startswith("_")])
    obj = getattr(module, attr)
    if isinstance(obj, type) and issubclass(obj, env_classes):
        return obj
    home = str(getattr(obj, "__module__", None) or "")
    if (
        attr in ENV_FUNCTIONS
        and inspect.isfunction(obj)
        and home.split(".")[0] in (module_name.split(".")[0], kind.lower())
    ):
        return obj
    raise MarlError(
        f"'{name}' is {type(obj).__name__} {getattr(obj, '__qualname__', '')!r} of module '{home or module_name}', "
        f"not a {kind} env constructor: a name resolves only to a {' / '.join(c.__name__ for c in env_classes)} "
        f"class or a function {' / '.join(ENV_FUNCTIONS)} of that package, so nothing else is called from a name. "
        f"Pass other constructors as objects: marl.make_env(my_constructor)."
    )


def per_copy(t: Any, shape: Tuple[int, ...], fail: Callable[[str], Exception]) -> torch.Tensor:
    """A library's per-copy tensor reshaped to ``shape`` (e.g. a VMAS reward ``[B, 1]`` -> ``[B]``):
    trailing (or leading) singleton dimensions are dropped; any other shape is ``fail(detail)``, raised."""
    t = torch.as_tensor(t)
    if tuple(t.shape) == tuple(shape):
        return t
    if t.numel() != int(np.prod(shape)) or tuple(d for d in t.shape if d != 1) != tuple(d for d in shape if d != 1):
        raise fail(f"shape {tuple(t.shape)} cannot be read as {tuple(shape)} (one value per env copy)")
    return t.reshape(shape)
