"""Off-beat actions: every action takes a pre-set number of steps (``docs/offbeat.md``).

After Qiu et al. 2022, "Off-Beat Multi-Agent Reinforcement Learning"
(arXiv 2205.13718). The paper's abstract fixes the idea (pre-set execution
durations, effects not synchronised with the decision); the mechanics below
(CONTINUE action, effect timing, records) are our reconstruction::

    env = make_env("stag_hunter", offbeat={"catch": 3})            # via make_env
    env = OffBeatWrapper(inner, {"catch": 3}, effect="spread")     # by hand
    env = OffBeatWrapper(smax_env, {"ally": {1: 2}, "enemy": {}})  # per group

Semantics, per env copy and agent:

* a *free* agent chooses an action ``a`` at step ``t_s`` (a *decision*); the
  action then runs for ``d(a)`` env steps ``t_s .. t_s + d(a) - 1`` and the agent
  is free again at step ``t_s + d(a)``;
* while busy, the agent's ``avail_actions`` are one-hot on a reserved
  ``CONTINUE`` action appended to its group's action space (index
  ``n_actions`` of the inner env); whatever it submits is ignored;
* what the inner env receives: ``effect="on_completion"`` (default) — the
  ``noop_action`` (default: the env's no-op, else 0) on every step but the last, the real action on
  step ``t_s + d - 1``; ``effect="spread"`` — the real action on every step of
  the duration. If the action to send at a non-decision step is not available
  in the inner env at that step (e.g. its target died), the wrapper sends
  ``noop_action`` if available, else the first available action;
* an agent that dies (``alive`` False) or whose episode ends is no longer busy;
  its unfinished action is recorded with ``completed=False``;
* with every duration 1 the wrapper is the identity, except for the extra
  CONTINUE column of ``avail_actions``, which is then never available.

Bookkeeping (for LeGEM-style reward redistribution):

* ``wrapper.records[b]``: the :class:`ActionRecord` s ``(agent, start, end,
  action, completed)`` of the episode in progress in copy ``b`` (steps counted
  from 0 within the episode, ``end`` inclusive); ``wrapper.last_records[b]``:
  those of the last finished episode of copy ``b``. Per agent the records of an
  episode cover its steps exactly once (no gaps while alive, no overlaps);
* ``step.info["offbeat"]``: ``decision`` (group -> ``[B, N_g]`` bool, the agent
  chose the action of the step just taken), ``free`` (group -> ``[B, N_g]``
  bool, the agent chooses at the next step, i.e. the returned observation is a
  decision point), ``executed`` (group -> ``[B, N_g]`` the actions the inner env
  received) and ``remaining`` (group -> ``[B, N_g]`` steps left of the running
  action, 0 when free). The same tensors are ``wrapper.last_decision``,
  ``wrapper.free``, ``wrapper.last_executed``, ``wrapper.remaining``;
  ``reset`` gives ``decision`` all False and ``free`` = alive.

Only discrete-action groups are supported. ``durations`` names actions by
index or, where the inner env has an ``action_names`` attribute (group ->
list of names, or one list for every group), by name; a name that is not an
action but a prefix of ``<name>_*`` actions covers all of them, e.g.
``make_env("smax", "3m", offbeat={"attack": 3})`` makes every ``attack_k`` take
3 steps (SMAX: ``move_0..3``, ``stop``, ``attack_k``; the busy no-op is stop).
"""

from __future__ import annotations

import copy
from typing import Any, Dict, List, Mapping, NamedTuple, Optional

import gymnasium as gym
import torch

from marl.env import EnvInfo, ExtraColumn, MarlError, MultiAgentEnv, Step, Wrapper, unknown_choice

EFFECTS = ("on_completion", "spread")
DECISION = ExtraColumn(
    torch.bool, False, "the agent chose a new action at this step (else its running action continued)"
)


class ActionRecord(NamedTuple):
    """One executed action: ``agent`` ran ``action`` on steps ``start..end`` (inclusive) of an episode.

    ``completed`` is False when the episode ended or the agent died before the
    duration was over (``end`` is then the last step it ran).
    """

    agent: str
    start: int
    end: int
    action: int
    completed: bool = True


def _action_names(env: MultiAgentEnv, group: str) -> Optional[List[str]]:
    names = getattr(env, "action_names", None)
    if isinstance(names, Mapping):
        names = names.get(group)
    return list(names) if names is not None else None


def _resolve_actions(key: Any, names: Optional[List[str]], n: int, group: str, what: str) -> List[int]:
    """Indices named by ``key``: an index, an action name, or a name prefix that covers
    ``<key>_*`` (``"attack"`` -> ``attack_0, attack_1, ..`` on SMAX)."""
    if isinstance(key, str) and names is not None and key not in names:
        family = [i for i, a in enumerate(names) if a.startswith(key + "_")]
        if family:
            return family
    return [_resolve_action(key, names, n, group, what)]


def _resolve_action(key: Any, names: Optional[List[str]], n: int, group: str, what: str) -> int:
    if isinstance(key, str):
        if names is None:
            raise MarlError(
                f"{what}: group '{group}' has no action names (the env sets no action_names); "
                f"give action indices 0..{n - 1} instead of '{key}'."
            )
        if key not in names:
            raise unknown_choice(f"action of group '{group}'", key, names)
        return names.index(key)
    if isinstance(key, bool) or not isinstance(key, int) or not 0 <= key < n:
        raise MarlError(f"{what}: action {key!r} of group '{group}' must be an index in 0..{n - 1} or a name.")
    return int(key)


class OffBeatWrapper(Wrapper):
    """Give every action of a batched discrete-action env a duration (see the module docstring).

    Args:
        env: the inner :class:`~marl.env.MultiAgentEnv` (discrete groups only).
        durations: action -> steps (int >= 1) for every group, e.g. ``{"catch": 3}``
            or ``{5: 3}``; or group -> {action -> steps} (keys all group names),
            e.g. ``{"ally": {"attack": 2}}``. Actions not listed take 1 step.
        effect: ``"on_completion"`` (default) or ``"spread"``.
        noop_action: what the inner env receives while an ``on_completion``
            action has not completed: index or name, or group -> index/name (default:
            the env's ``noop_action`` attribute, e.g. SMAX 4 = stop, else 0).
        keep_records: keep :attr:`records` (default True: one log entry of tensors per
            group and step; the records are built when read).

    Raises:
        MarlError: continuous groups, unknown groups / actions, durations < 1,
            unknown effect.
    """

    def __init__(
        self,
        env: MultiAgentEnv,
        durations: Optional[Mapping[Any, Any]] = None,
        effect: str = "on_completion",
        noop_action: Any = None,
        keep_records: bool = True,
    ):
        super().__init__(env)
        if effect not in EFFECTS:
            raise unknown_choice("off-beat effect", effect, EFFECTS)
        self.effect, self.keep_records = effect, bool(keep_records)
        groups = env.info.groups
        for g in groups.values():
            if not g.discrete:
                raise MarlError(f"The off-beat wrapper needs discrete actions; group '{g.name}' has {g.action_space}.")
        durations = dict(durations or {})
        per_group = (
            bool(durations)
            and all(k in groups for k in durations)
            and all(isinstance(v, Mapping) for v in durations.values())
        )
        if not per_group and any(isinstance(v, Mapping) for v in durations.values()):
            bad = [k for k, v in durations.items() if isinstance(v, Mapping) and k not in groups]
            raise unknown_choice("group in off-beat durations", bad[0] if bad else next(iter(durations)), list(groups))
        self.durations: Dict[str, torch.Tensor] = {}
        self.noop: Dict[str, int] = {}
        self.action_names: Dict[str, List[str]] = {}
        for name, g in groups.items():
            n = g.n_actions
            names = _action_names(env, name)
            table = durations.get(name, {}) if per_group else durations
            d = torch.ones(n, dtype=torch.long)
            for k, v in table.items():
                idx = _resolve_actions(k, names, n, name, "durations")
                if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                    raise MarlError(f"durations: the duration of action {k!r} must be an int >= 1, got {v!r}.")
                d[idx] = v
            self.durations[name] = d
            noop = getattr(env, "noop_action", 0) if noop_action is None else noop_action  # SMAX: 4 (stop)
            nk = noop.get(name, 0) if isinstance(noop, Mapping) else noop
            self.noop[name] = _resolve_action(nk, names, n, name, "noop_action")
            self.action_names[name] = (names or [str(i) for i in range(n)]) + ["CONTINUE"]
        self.continue_action = {name: g.n_actions for name, g in groups.items()}
        self.info = self._wrap_info(env.info)
        self._dev = None
        self._reset_state()

    # ------------------------------------------------------------------ info

    def _wrap_info(self, inner: EnvInfo) -> EnvInfo:
        info = copy.copy(inner)
        info.groups = {}
        for name, g in inner.groups.items():
            g2 = copy.copy(g)
            g2.action_space = gym.spaces.Discrete(g.n_actions + 1)
            info.groups[name] = g2
        layout = inner.entity_layout
        if layout is not None:
            new = {}
            for name, gl in layout.items():
                if gl.get("action_targets"):
                    # CONTINUE would sit after the targeted actions, which the layout format cannot express
                    new = None
                    break
                gl = dict(gl)
                if "n_normal_actions" in gl:
                    gl["n_normal_actions"] = gl["n_normal_actions"] + 1
                new[name] = gl
            info.entity_layout = new
        info.extra_columns = {**inner.extra_columns, "decision": DECISION}
        return info

    # ------------------------------------------------------------------ state

    def _reset_state(self) -> None:
        B = self.num_envs
        dev = self._dev or torch.device("cpu")
        z = lambda n: torch.zeros(B, n, dtype=torch.long, device=dev)  # noqa: E731
        gs = self.info.groups
        self.current = {g: z(gi.n_agents) for g, gi in gs.items()}  # action running
        self.remaining = {g: z(gi.n_agents) for g, gi in gs.items()}  # steps left, 0 = free
        self.start = {g: z(gi.n_agents) for g, gi in gs.items()}  # step it started
        self.t = torch.zeros(B, dtype=torch.long, device=dev)  # step index within the episode
        self.last_decision = {g: z(gi.n_agents).bool() for g, gi in gs.items()}
        self.last_executed = {g: z(gi.n_agents) for g, gi in gs.items()}
        self.free = {g: torch.ones(B, gi.n_agents, dtype=torch.bool, device=dev) for g, gi in gs.items()}
        # Records are built on demand from a log of per-step tensors (one entry per group and
        # step), so stepping never loops over agents in Python. Copy b's running episode is log
        # positions [_begin[b], end), its last finished one _last_span[b]; _off = positions pruned.
        if "_log" not in self.__dict__:
            self._log: List[tuple] = []
            self._off = 0
            self._last_span = [(0, 0)] * B
        self._begin = [self._off + len(self._log)] * B
        self._alive: Dict[str, torch.Tensor] = {}
        self._inner_avail: Dict[str, Optional[torch.Tensor]] = {}

    # the attributes wrapper_state saves: busy state of every agent, clocks, the last step's
    # masks, and the action-record log (records of the running and last finished episodes)
    _STATE = (
        "current",
        "remaining",
        "start",
        "t",
        "last_decision",
        "last_executed",
        "free",
        "_alive",
        "_inner_avail",
        "_dev",
        "_log",
        "_off",
        "_last_span",
        "_begin",
    )

    def wrapper_state(self) -> Dict[str, Any]:
        """The busy state, clocks and record log (exact resume); the wrapper draws nothing at random."""
        return copy.deepcopy({k: getattr(self, k) for k in self._STATE})

    def load_wrapper_state(self, state: Dict[str, Any]) -> None:
        """Restore a :meth:`wrapper_state` dict."""
        state = copy.deepcopy(state)
        for k in self._STATE:
            setattr(self, k, state[k])
        if self._dev is not None:
            self.durations = {k: v.to(self._dev) for k, v in self.durations.items()}

    def _to(self, dev) -> None:
        if self._dev != dev:
            self._dev = dev
            for d in (self.current, self.remaining, self.start, self.last_decision, self.last_executed, self.free):
                for k in d:
                    d[k] = d[k].to(dev)
            self.t = self.t.to(dev)
            self.durations = {k: v.to(dev) for k, v in self.durations.items()}

    # ------------------------------------------------------------------ API

    def reset(self, seed: Optional[int] = None) -> Step:
        step = self.env.reset(seed=seed)
        self._to(step.state.device)
        self._reset_state()
        self.last_decision = {g: torch.zeros_like(a) for g, a in step.alive.items()}
        self.free = {g: a.clone() for g, a in step.alive.items()}
        return self._wrap(step, self.last_decision, step.done, None)

    def step(self, actions: Dict[str, torch.Tensor]) -> Step:
        """Start the free agents' actions, send the inner env what runs now, update the busy state.

        Args:
            actions: group -> ``[B, N_g]`` int in ``0..n_actions`` (``n_actions`` = CONTINUE, for busy agents).
        Raises:
            MarlError: bad actions, a free agent that sent CONTINUE, ``step`` before ``reset``.
        """
        if not self._alive:
            raise MarlError("Call reset() before step().")
        acts = {name: a.to(self._dev) for name, a in self.check_actions(actions).items()}
        for name, g in self.info.groups.items():
            cont = self.continue_action[name]
            bad = (self.remaining[name] == 0) & (acts[name] == cont)
            if bool(bad.any()):
                b, i = (int(x) for x in bad.nonzero()[0])
                raise MarlError(
                    f"Agent {g.agents[i]} (copy {b}) is free and sent CONTINUE ({cont}); CONTINUE is only "
                    f"available while an action is running (see avail_actions)."
                )
        sent, decision = {}, {}
        for name in self.info.groups:
            sent[name], decision[name] = self._send(name, acts[name])
        step = self.env.step(sent)
        done = step.done
        self.last_decision, self.last_executed = decision, sent
        for name in self.info.groups:
            self.remaining[name] = (self.remaining[name] - 1).clamp(min=0)
        final_busy = {n: self.remaining[n] > 0 for n in self.info.groups}
        if self.keep_records:
            self._log_step(step, done)
        # busy state is cleared for dead agents and ended copies
        for name in self.info.groups:
            cut = ~step.alive[name] | done[:, None]
            self.remaining[name] = torch.where(cut, 0, self.remaining[name])
        self.t = torch.where(done, 0, self.t + 1)
        if bool(done.any()):
            self._close_records(done.nonzero().flatten().tolist())
        self.free = {n: (self.remaining[n] == 0) & step.alive[n] for n in self.info.groups}
        return self._wrap(step, decision, done, final_busy)

    def _send(self, name: str, a: torch.Tensor):
        """``(sent, decision)`` of group ``name`` given its submitted actions ``a`` ``[B, N_g]``:
        free agents start ``a``; what the inner env receives follows ``effect``."""
        free = self.remaining[name] == 0
        cont = self.continue_action[name]
        d = self.durations[name]
        self.current[name] = torch.where(free, a, self.current[name])
        self.remaining[name] = torch.where(free, d[a.clamp(max=cont - 1)], self.remaining[name])
        self.start[name] = torch.where(free, self.t[:, None], self.start[name])
        cur, rem = self.current[name], self.remaining[name]
        real = rem == 1 if self.effect == "on_completion" else torch.ones_like(free)
        out = torch.where(real, cur, torch.full_like(cur, self.noop[name]))
        # actions decided earlier (or the no-op) may have become unavailable in the inner env
        avail = self._inner_avail.get(name)
        checked = ~(free & real)  # a decision sent at once was chosen from the current avail: pass it on
        if avail is not None and bool(checked.any()):
            ok = avail.gather(-1, out[..., None])[..., 0]
            noop_ok = avail[..., self.noop[name]]
            fallback = torch.where(noop_ok, torch.full_like(out, self.noop[name]), avail.long().argmax(-1))
            out = torch.where(checked & ~ok, fallback, out)
        # dead agents are not busy: they send what they submitted (the inner env's only legal action)
        dead = ~self._alive[name]
        out = torch.where(dead, a.clamp(max=cont - 1), out)
        return out, free & ~dead

    def _log_step(self, step: Step, done: torch.Tensor) -> None:
        """Log the actions that completed, or were cut by the episode end or a death, at this step."""
        for name, g in self.info.groups.items():
            ran = self._alive[name]  # agents alive before the step ran an action
            complete = self.remaining[name] == 0
            ends = ran & (complete | done[:, None] | ~step.alive[name])
            if bool(ends.any()):
                self._log.append(
                    (
                        g.agents,
                        ends.cpu(),
                        self.start[name].cpu(),
                        self.t.cpu(),
                        self.current[name].cpu(),
                        complete.cpu(),
                    )
                )

    # ------------------------------------------------------------------ records
    @property
    def records(self) -> List[List[ActionRecord]]:
        """Per copy, the :class:`ActionRecord` s of the running episode."""
        end = self._off + len(self._log)
        return [self._records_of(b, self._begin[b], end) for b in range(self.num_envs)]

    @property
    def last_records(self) -> List[List[ActionRecord]]:
        """Per copy, the :class:`ActionRecord` s of its last finished episode."""
        return [self._records_of(b, *self._last_span[b]) for b in range(self.num_envs)]

    def _records_of(self, b: int, lo: int, hi: int) -> List[ActionRecord]:
        out = []
        for agents, ends, start, t, cur, comp in self._log[lo - self._off : hi - self._off]:
            for i in ends[b].nonzero().flatten().tolist():
                out.append(ActionRecord(agents[i], int(start[b, i]), int(t[b]), int(cur[b, i]), bool(comp[b, i])))
        return out

    def _close_records(self, ended: List[int]) -> None:
        """Copies ``ended`` finished their episode: it becomes their last one; drop log entries nobody needs."""
        end = self._off + len(self._log)
        for b in ended:
            self._last_span[b] = (self._begin[b], end)
            self._begin[b] = end
        low = min(min(self._begin), min(lo for lo, _ in self._last_span))
        if low - self._off > 256:  # prune in chunks, not every step
            del self._log[: low - self._off]
            self._off = low

    # ------------------------------------------------------------------ internals

    def _avail(self, inner: torch.Tensor, busy: torch.Tensor) -> torch.Tensor:
        """Inner legal actions plus a CONTINUE column: False for free agents, the only legal action of busy ones."""
        out = torch.cat([inner, torch.zeros_like(inner[..., :1])], -1)
        onehot = torch.zeros_like(out)
        onehot[..., -1] = True
        return torch.where(busy[..., None], onehot, out)

    def _wrap(self, step: Step, decision, done, final_busy) -> Step:
        self._alive = {g: a.clone() for g, a in step.alive.items()}
        self._inner_avail = {}
        avail, final_avail = {}, {}
        for name, g in self.env.info.groups.items():
            inner = step.avail_actions.get(name)
            if inner is None:
                inner = torch.ones(self.num_envs, g.n_agents, g.n_actions, dtype=torch.bool, device=self._dev)
            self._inner_avail[name] = inner
            busy = self.remaining[name] > 0
            avail[name] = self._avail(inner, busy)
            fa = (step.final_avail_actions or {}).get(name)
            fa = inner if fa is None else fa
            fb = busy if final_busy is None else torch.where(done[:, None], final_busy[name], busy)
            final_avail[name] = self._avail(fa, fb)
        info = dict(step.info)
        info["offbeat"] = {
            "decision": decision,
            "free": self.free,
            "executed": self.last_executed,
            "remaining": {k: v.clone() for k, v in self.remaining.items()},
        }
        out = copy.copy(step)
        out.avail_actions, out.final_avail_actions, out.info = avail, final_avail, info
        out.extras = {**step.extras, "decision": decision}
        return out


def wrap_offbeat(env: MultiAgentEnv, offbeat: Any, seed: Optional[int] = None) -> OffBeatWrapper:
    """The ``offbeat=`` option of :func:`marl.env.make_env` (registered wrapper ``"offbeat"``): durations,
    or a dict of wrapper kwargs (``seed`` is not used: the wrapper draws nothing).

    ``{"catch": 3}`` -> ``OffBeatWrapper(env, {"catch": 3})``;
    ``{"durations": {...}, "effect": "spread", "noop_action": 0}`` -> those kwargs.
    """
    if isinstance(offbeat, OffBeatWrapper):
        raise MarlError("offbeat= takes the durations dict (or wrapper kwargs), not a wrapper.")
    if not isinstance(offbeat, Mapping):
        raise MarlError(f"offbeat= must be a dict of action -> duration (e.g. {{'catch': 3}}), got {offbeat!r}.")
    if "durations" in offbeat:
        kw = dict(offbeat)
        valid = ("durations", "effect", "noop_action", "keep_records")
        for k in kw:
            if k not in valid:
                raise unknown_choice("offbeat option", k, valid)
        return OffBeatWrapper(env, **kw)
    return OffBeatWrapper(env, offbeat)
