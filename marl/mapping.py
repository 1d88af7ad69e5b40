"""Policy mapping: agents -> groups -> module ids (``docs/mapping.md``).

A *module* is one set of network parameters. Several agents may share a
module; their data are stacked along the agent axis, and when a module serves
more than one agent a one-hot of the agent's index inside the module is
appended to its observation so a shared network can still tell agents apart
(Yu et al. 2022, MAPPO, "agent id" input; Rashid et al. 2018, QMIX).
"""

from __future__ import annotations

import inspect
import re
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Sequence, Tuple, Union

import gymnasium as gym
import numpy as np
import torch

from marl.config.engine import SHARE_MODES  # the choices of the config key share
from marl.env import OBS_KEY, EnvInfo, GroupInfo, MarlError, obs_dtypes, obs_leaves, spaces_equal, unknown_choice

AGENT_ID_KEY = "agent_id"  # the key of the agent one-hot in a structured module observation

Share = Union[str, Callable[[str], str]]


@dataclass(frozen=True)
class ModuleSlot:
    """Where a module's agents live in the env's group tensors.

    ``rows`` are the positions (along the module's agent axis) filled from
    ``group``'s agent indices ``index``.
    """

    group: str
    index: Tuple[int, ...]
    rows: Tuple[int, ...]


# a module id names a checkpoint folder and prefixes metrics: no path separator or control character,
# not '.' or '..'; '__' starts RLlib's own ids ('__all_modules__')
MODULE_ID = re.compile(r"(?!__)(?!\.{1,2}$)[^/\\\x00-\x1f]+")
VALID_ID = "a non-empty string without '/', '\\' or control characters, not '.' or '..', not starting with '__'"


def fn_name(fn: Callable) -> str:
    """A mapping function as messages name it: its qualified name (``<lambda>``), else its repr."""
    name = getattr(fn, "__qualname__", None)
    return name if isinstance(name, str) else repr(fn)


def check_mapping_fn(fn: Callable, agents: Sequence[str]) -> Dict[str, str]:
    """``agent -> module id`` from a mapping function (``share=fn``), checked before anything uses it.

    ``fn`` is called with one argument, the agent id, twice per agent (in the env's agent order,
    then in reverse), and must give a valid module id (module ids name checkpoint folders and
    prefix metrics: a non-empty string without ``/``, ``\\`` or control characters, not ``.`` or
    ``..``, not starting with ``__`` as RLlib's own ids do), the same both times.

    Raises:
        MarlError: ``fn`` does not take exactly one positional argument, raises (chained, naming the
            agent), returns something else than such a string (names the agent and the value), or
            returns another module for the same agent on the second call (names both).
    """
    name = fn_name(fn)
    _check_arity(fn, name, agents[0] if agents else "agent_0")
    first = {a: _module_id(fn, name, a) for a in agents}
    for a in reversed(list(agents)):  # reversed: a function that counts its calls answers differently
        again = _module_id(fn, name, a)
        if again != first[a]:
            raise MarlError(
                f"share={name} is not deterministic: it mapped agent '{a}' to module '{first[a]}', then to "
                f"'{again}'. marl builds the mapping once per run (and again on resume, to check that it "
                f"matches): make it a pure function of the agent id (no random choice, no counter)."
            )
    return first


def _check_arity(fn: Callable, name: str, agent: str) -> None:
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):  # a builtin without a signature: calling it tells
        return
    try:
        sig.bind(agent)
    except TypeError as e:
        raise MarlError(
            f"share={name} has the signature {sig}, but a mapping function takes one argument, the agent id, "
            f"and returns its module id ({e}); e.g. share=lambda agent: 'red' if agent.startswith('red') "
            f"else 'blue'. marl calls it as fn(agent_id), without the other arguments of RLlib's policy_mapping_fn."
        ) from None


def _module_id(fn: Callable, name: str, agent: str) -> str:
    try:
        mid = fn(agent)
    except Exception as e:  # noqa: BLE001 - any error of the user's function, named with the agent
        raise MarlError(f"share={name} raised {type(e).__name__}: {e} for agent '{agent}'.") from e
    if not isinstance(mid, str) or not MODULE_ID.fullmatch(mid):
        kind = "a string" if isinstance(mid, str) else type(mid).__name__
        raise MarlError(
            f"share={name} returned {mid!r} ({kind}) for agent '{agent}'; a mapping function returns a module "
            f"id (e.g. 'shared', 'red'): {VALID_ID}."
        )
    return str(mid)  # a str subclass (numpy's str_) as a plain string: it goes into YAML and checkpoints


class PolicyMapping:
    """Map every agent of an env to a module id.

    Args:
        info: the env's :class:`~marl.env.EnvInfo`.
        share: ``"all"`` (one module ``"shared"`` for all agents; all spaces must
            be equal), ``"group"`` (one module per group, named after it),
            ``"individual"`` (one module per agent, named after it), a callable
            ``agent_id -> module_id``, or ``"auto"``: cooperative and
            homogeneous -> ``"all"``, otherwise ``"group"``.
        agent_id: append a one-hot agent index to observations of modules that
            serve more than one agent.

    Raises:
        MarlError: unknown ``share`` mode; a mapping function that is not a pure
            function of one agent id returning a module id (:func:`check_mapping_fn`);
            or two agents with different observation/action spaces mapped to one
            module (checked here, at build time, not in a matmul later).
    """

    def __init__(self, info: EnvInfo, share: Share = "auto", agent_id: bool = True):
        self.info = info
        self.share = share
        self.agent_id = agent_id
        self.mode = self._resolve_mode(info, share)
        if callable(share):
            self.agent_to_module: Dict[str, str] = check_mapping_fn(share, info.agents)
        else:
            self.agent_to_module = {a: self._module_of(a) for a in info.agents}
        self.modules: Dict[str, List[str]] = {}
        for a in info.agents:  # keeps the env's fixed agent order inside each module
            self.modules.setdefault(self.agent_to_module[a], []).append(a)
        self._check_spaces()
        self.slots: Dict[str, List[ModuleSlot]] = {m: self._slots(m) for m in self.modules}

    # ------------------------------------------------------------------ building
    @staticmethod
    def _resolve_mode(info: EnvInfo, share: Share) -> str:
        if callable(share):
            return "callable"
        if share not in SHARE_MODES:
            raise unknown_choice("share mode", share, SHARE_MODES)
        if share == "auto":
            return "all" if info.kind == "cooperative" and info.homogeneous else "group"
        return share

    def _module_of(self, agent: str) -> str:
        if self.mode == "all":
            return "shared"
        if self.mode == "group":
            return self.info.locate(agent)[0]
        return agent

    def _check_spaces(self) -> None:
        for mid, agents in self.modules.items():
            g0 = self.info.group_of(agents[0])
            for a in agents[1:]:
                g = self.info.group_of(a)
                if not (spaces_equal(g.obs_space, g0.obs_space) and spaces_equal(g.action_space, g0.action_space)):
                    who = f"'{agents[0]}' and '{a}'"
                    what = (
                        f"share={fn_name(self.share)} maps agents {who} to the same module '{mid}', but they have"
                        if callable(self.share)
                        else f"Agents {who} map to the same module '{mid}' but have"
                    )
                    raise MarlError(
                        f"{what} different spaces (obs {g0.obs_space.shape} vs {g.obs_space.shape}, actions {g0.action_space} vs "
                        f"{g.action_space}). Use share='group' or 'individual', or a mapping that keeps them apart."
                    )

    def _slots(self, mid: str) -> List[ModuleSlot]:
        by_group: Dict[str, Tuple[List[int], List[int]]] = {}
        for row, a in enumerate(self.modules[mid]):
            g, i = self.info.locate(a)
            idx, rows = by_group.setdefault(g, ([], []))
            idx.append(i)
            rows.append(row)
        return [ModuleSlot(g, tuple(i), tuple(r)) for g, (i, r) in by_group.items()]

    # ------------------------------------------------------------------ queries
    def group_info(self, mid: str) -> GroupInfo:
        """The :class:`GroupInfo` giving module ``mid``'s spaces."""
        return self.info.group_of(self.modules[mid][0])

    def n_agents(self, mid: str) -> int:
        return len(self.modules[mid])

    def uses_agent_id(self, mid: str) -> bool:
        return self.agent_id and self.n_agents(mid) > 1

    def obs_dim(self, mid: str) -> int:
        """Input size of module ``mid``: observation plus the agent one-hot if used."""
        return self.group_info(mid).obs_dim + (self.n_agents(mid) if self.uses_agent_id(mid) else 0)

    def structured(self, mid: str) -> bool:
        """Module ``mid``'s observation is structured (an image ``Box`` or a ``Dict``): its inputs are
        dicts key -> ``[B, N_m, *shape_k]`` (:meth:`module_obs`)."""
        return self.group_info(mid).structured

    def obs_space(self, mid: str) -> gym.spaces.Space:
        """The space of module ``mid``'s inputs: a 1-D float32 ``Box`` of :meth:`obs_dim` values (flat),
        or a ``Dict`` of the group's keys (a Box observation under ``"obs"``) plus the agent one-hot
        ``"agent_id"`` ``Box(N_m,)`` where it is used (structured)."""
        if not self.structured(mid):
            return gym.spaces.Box(-np.inf, np.inf, (self.obs_dim(mid),), np.float32)
        leaves: Dict[str, gym.spaces.Space] = dict(obs_leaves(self.group_info(mid).obs_space))
        if self.uses_agent_id(mid):
            leaves[AGENT_ID_KEY] = gym.spaces.Box(0.0, 1.0, (self.n_agents(mid),), np.float32)
        return gym.spaces.Dict(leaves)

    def obs_columns(self, mid: str) -> Dict[str, Tuple[Tuple[int, ...], Any]]:
        """What buffers store of module ``mid``'s observation per agent: column -> ``(shape, numpy dtype)``;
        ``{"obs": ((D,), float32)}`` for a flat one, ``{"obs/<key>": (shape_k, dtype_k)}`` for a structured
        one (uint8 images stay uint8; the agent one-hot is ``"obs/agent_id"``)."""
        if not self.structured(mid):
            return {"obs": ((self.obs_dim(mid),), np.float32)}
        space = self.obs_space(mid)
        assert isinstance(space, gym.spaces.Dict)  # obs_space of a structured module
        dtypes = obs_dtypes(self.group_info(mid).obs_space)
        return {
            f"obs/{k}": (tuple(b.shape or ()), np.uint8 if dtypes.get(k) == torch.uint8 else np.float32)
            for k, b in space.spaces.items()
        }

    def buffer_shapes(self) -> Dict[str, Dict[str, Any]]:
        """Per module, what a replay buffer allocates: ``{"n": agents, "obs_dim": D, "obs": obs_columns,
        "n_actions": A}`` (``A``: the action dimension of a continuous group); the ``shapes`` of
        :class:`marl.engine.replay.JointEpisodeBuffer`."""
        return {
            mid: {
                "n": self.n_agents(mid),
                "obs_dim": self.obs_dim(mid),
                "obs": self.obs_columns(mid),
                "n_actions": self.group_info(mid).n_actions,
            }
            for mid in self.modules
        }

    def module_obs(self, mid: str, per_group: Dict[str, Any]) -> Any:
        """Module ``mid``'s observation from the group observations of a :class:`~marl.env.Step`:
        ``[B, N_m, D (+ N_m)]`` (flat: :meth:`gather` then :meth:`add_agent_id`), or a dict
        key -> ``[B, N_m, *shape_k]`` (structured; a Box observation under ``"obs"``, the agent
        one-hot under ``"agent_id"`` where used; dtypes kept, uint8 images stay uint8)."""
        if not self.structured(mid):
            return self.add_agent_id(mid, self.gather(mid, per_group))
        keys = list(obs_leaves(self.group_info(mid).obs_space))
        as_dict = {g: v if isinstance(v, dict) else {OBS_KEY: v} for g, v in per_group.items()}
        out = {k: self.gather(mid, {g: d[k] for g, d in as_dict.items()}) for k in keys}
        if self.uses_agent_id(mid):
            first = out[keys[0]]
            n = self.n_agents(mid)
            out[AGENT_ID_KEY] = torch.eye(n, device=first.device).expand(first.shape[0], n, n)
        return out

    # ------------------------------------------------------------------ tensors
    def gather(self, mid: str, per_group: Dict[str, torch.Tensor]) -> torch.Tensor:
        """Stack module ``mid``'s agents from group tensors.

        Args:
            per_group: group -> ``[B, N_g, *F]`` (agent axis 1).
        Returns:
            ``[B, N_m, *F]`` in the module's agent order (the group tensor itself,
            without a copy, when the module is exactly one whole group).
        """
        slots = self.slots[mid]
        if len(slots) == 1 and slots[0].rows == tuple(range(len(slots[0].rows))):
            s = slots[0]
            t = per_group[s.group]
            if s.index == tuple(range(t.shape[1])):
                return t  # the common case: a module is exactly one group, no copy
            return t[:, list(s.index)]
        parts = [(s.rows, per_group[s.group][:, list(s.index)]) for s in slots]
        first = parts[0][1]
        out = first.new_zeros((first.shape[0], self.n_agents(mid)) + tuple(first.shape[2:]))
        for rows, t in parts:
            out[:, list(rows)] = t
        return out

    def scatter(self, per_module: Dict[str, torch.Tensor]) -> Dict[str, torch.Tensor]:
        """Inverse of :meth:`gather`: module tensors ``[B, N_m, *F]`` -> group tensors ``[B, N_g, *F]``."""
        out: Dict[str, torch.Tensor] = {}
        for mid, t in per_module.items():
            for s in self.slots[mid]:
                g = self.info.groups[s.group]
                if s.rows == tuple(range(t.shape[1])) and s.index == tuple(range(g.n_agents)):
                    out[s.group] = t
                    continue
                if s.group not in out:
                    out[s.group] = t.new_zeros((t.shape[0], g.n_agents) + tuple(t.shape[2:]))
                out[s.group][:, list(s.index)] = t[:, list(s.rows)]
        return out

    def add_agent_id(self, mid: str, obs: torch.Tensor) -> torch.Tensor:
        """Append the agent one-hot: ``[B, N_m, D] -> [B, N_m, D + N_m]`` (unchanged if unused)."""
        if not self.uses_agent_id(mid):
            return obs
        n = self.n_agents(mid)
        eye = torch.eye(n, dtype=obs.dtype, device=obs.device).expand(obs.shape[0], n, n)
        return torch.cat([obs, eye], dim=-1)

    def __repr__(self) -> str:
        mods = ", ".join(f"{m}: {a}" for m, a in self.modules.items())
        return f"PolicyMapping(mode={self.mode}, {{{mods}}})"
