"""Crash-prone envs: agents that fail during an episode (Coach-assisted MARL).

Source: Zhao, Zhao, Wang, Yang, Hu, Zhou, Hao, Li, "Coach-assisted Multi-Agent
Reinforcement Learning Framework for Unexpected Crashed Agents", arXiv
2203.08454 (2022). From the paper (abstract level): each agent has a crash
probability ``p``; at the start of every episode each agent gets a crash flag,
fixed for the episode; a re-sampling rule limits the number of crashed agents.
Everything else below is **reconstructed** (docs/envs.md, "Reconstructed details") and
configurable: *when* a flagged agent crashes, *what* it does afterwards, how its
data enter training and the rejection-sampling form of the cap.

:class:`CrashWrapper` wraps any batched :class:`~marl.env.MultiAgentEnv` with
discrete actions. Per env copy and per episode:

* flags ``c_i ~ Bernoulli(rate)`` for every agent, drawn from the wrapper's own
  seeded ``torch.Generator`` (never torch's global RNG, so the learner's random
  stream is untouched and crash draws are reproducible from ``seed``);
* re-sampling (``max_crashed=m``): while a copy has more than ``m`` flags, its
  whole flag vector is drawn again (rejection sampling). This changes the
  distribution, so the *effective* crash rate is logged;
* crash step ``t_c`` of a flagged agent (0-based step index of the episode):
  ``"uniform"`` over ``0 .. episode_limit-1`` (an episode that ends first has
  no crash), ``"start"`` (``t_c = 0``) or ``("hazard", q)`` (geometric:
  ``P(t_c = k) = (1-q)^k q``);
* from ``t_c`` on the agent's action is replaced by the forced action
  (``behaviour="noop"``: ``noop_action``; ``"random"``: uniform over the
  agent's legal actions, drawn when the observation is produced); its
  ``avail_actions`` row is one-hot on that action (so Q-learning targets and
  masked policies agree with what is executed) and its ``alive`` is False (so
  policy-gradient losses and per-agent TD losses mask it, like a dead agent).
  The unit stays in the env; its observation is still produced.

Ended copies (auto-reset, see :class:`~marl.env.Step`) draw new flags at once.
Per finished episode, ``step.info["episode_metrics"]`` gets
``crash_rate_flagged`` (flags / agents) and ``crash_rate`` (agents whose crash
step was reached / agents), collected by :class:`~marl.env.EpisodeStats`;
:meth:`CrashWrapper.pop_stats` gives the same totals.

With ``rate=0`` the wrapper is the identity: same Step tensors as the raw env.
"""

from __future__ import annotations

import copy
import math
from typing import Any, Dict, Optional, Tuple, Union

import torch

from marl.env import MarlError, MultiAgentEnv, Step, Wrapper, unknown_choice

BEHAVIOURS = ("noop", "random")
CRASH_TIMES = ("uniform", "start", "hazard")
STRATEGIES = ("fixed", "curriculum", "adaptive")
FIXED_DEFAULT_RATE = 0.2  # rate of crash="fixed" (docs/envs.md, Crash-prone envs: fixed p = 0.2)
MAX_REDRAWS = 10_000
ADAPTIVE_REFERENCE_SHARE = 0.125  # copies kept at p = 0 for the adaptive coach's P_ref (our choice, docs/envs.md)


def default_max_crashed(n_agents: int) -> int:
    """Our reconstructed cap (docs/envs.md): 1 for teams of up to 5, ``n // 3`` otherwise."""
    return 1 if n_agents <= 5 else n_agents // 3


def parse_crash_time(crash_time: Any) -> Tuple[str, float]:
    """``"uniform"`` / ``"start"`` / ``("hazard", q)`` / ``"hazard(q)"`` -> ``(kind, q)``.

    Raises:
        MarlError: unknown kind or ``q`` outside ``(0, 1]``.
    """
    q = 0.0
    kind = crash_time
    if isinstance(crash_time, (tuple, list)):
        if len(crash_time) != 2 or crash_time[0] != "hazard":
            raise MarlError(f"crash_time as a pair must be ('hazard', q), got {crash_time!r}.")
        kind, q = crash_time
    elif isinstance(crash_time, str) and crash_time.startswith("hazard(") and crash_time.endswith(")"):
        kind, q = "hazard", crash_time[len("hazard(") : -1]
    elif crash_time == "hazard":
        raise MarlError("crash_time='hazard' needs a rate: ('hazard', q) or 'hazard(q)' with 0 < q <= 1.")
    if kind not in CRASH_TIMES:
        raise unknown_choice("crash_time", kind, ["uniform", "start", "('hazard', q)"])
    if kind == "hazard":
        try:
            q = float(q)
        except (TypeError, ValueError):
            raise MarlError(f"hazard rate q must be a number in (0, 1], got {q!r}.") from None
        if not 0.0 < q <= 1.0:
            raise MarlError(f"hazard rate q must be in (0, 1], got {q}.")
    return kind, q


def _check_max_crashed(max_crashed: Any, n_agents: int) -> Optional[int]:
    """``None``, an int >= 0, or ``"auto"`` (:func:`default_max_crashed`) -> the cap."""
    if max_crashed == "auto":
        return default_max_crashed(n_agents)
    if max_crashed is not None and (
        isinstance(max_crashed, bool) or not isinstance(max_crashed, int) or max_crashed < 0
    ):
        raise MarlError(f"max_crashed must be None, 'auto' or an int >= 0, got {max_crashed!r}.")
    return max_crashed


def _check_reference_share(share: Any, strategy: Optional[str]) -> float:
    """The share of copies kept at ``p = 0`` (default: 0.125 with the adaptive coach, else 0)."""
    if share is None:
        share = ADAPTIVE_REFERENCE_SHARE if strategy == "adaptive" else 0.0
    if isinstance(share, bool) or not isinstance(share, (int, float)) or not 0.0 <= share < 1.0:
        raise MarlError(f"reference_share must be a number in [0, 1), got {share!r}.")
    return float(share)


def _check_rate(p: Any) -> float:
    if isinstance(p, bool) or not isinstance(p, (int, float)) or not 0.0 <= float(p) <= 1.0:
        raise MarlError(f"crash rate must be a number in [0, 1], got {p!r}.")
    return float(p)


class CrashWrapper(Wrapper):
    """Make a batched env crash-prone (see the module docstring).

    Args:
        env: the env to wrap (discrete actions in every group).
        rate: per-agent crash probability ``p`` in ``[0, 1]`` (change it with :meth:`set_rate`).
        crash_time: ``"uniform"`` (default), ``"start"`` or ``("hazard", q)``.
        behaviour: ``"noop"`` (default) or ``"random"``.
        noop_action: the forced action of ``"noop"``: an int, or group -> int.
            Default: the env's ``noop_action`` attribute (SMAX 4 = stop, SMACv2
            1 = stop), else 0 (MPE, VMAS and most grid worlds: stay).
        max_crashed: re-sampling cap on flagged agents per copy (``None``: no cap;
            ``"auto"``: :func:`default_max_crashed`).
        seed: seed of the wrapper's own generator; ``reset(seed=s)`` re-seeds it
            from ``(seed, s)``.
        strategy: optional coach strategy name stored for the trainer
            (``fixed``, ``curriculum``, ``adaptive``); see :meth:`make_coach`.
        coach: options of that :class:`~marl.envs.wrappers.coach.Coach`.
        reference_share: share of the copies (the first ``ceil(share * B)``) that
            always play at ``p = 0``; their episodes carry ``crash_reference = 1``
            in the episode metrics, and the adaptive coach measures its reference
            performance ``P_ref`` on them (docs/envs.md). Default: 0.125 with
            ``strategy="adaptive"``, else 0.

    Raises:
        MarlError: a continuous group, bad rate / crash_time / behaviour /
            noop_action / max_crashed, ``crash_time="uniform"`` on an env without
            ``episode_limit``, or an impossible cap (re-sampling never succeeds).
    """

    def __init__(
        self,
        env: MultiAgentEnv,
        rate: float = 0.0,
        crash_time: Any = "uniform",
        behaviour: str = "noop",
        noop_action: Union[None, int, Dict[str, int]] = None,
        max_crashed: Union[None, int, str] = None,
        seed: int = 0,
        strategy: Optional[str] = None,
        coach: Optional[Dict[str, Any]] = None,
        reference_share: Optional[float] = None,
    ):
        super().__init__(env)
        for g in self.info.groups.values():
            if not g.discrete:
                raise MarlError(
                    f"CrashWrapper needs discrete actions; group '{g.name}' has {g.action_space}. "
                    f"Make the env with discrete actions (e.g. continuous_actions=False)."
                )
        self._rate = _check_rate(rate)
        self.crash_time, self.hazard_q = parse_crash_time(crash_time)
        if self.crash_time == "uniform" and int(self.info.episode_limit) <= 0:
            raise MarlError(
                "crash_time='uniform' draws the crash step over 0..episode_limit-1, but this env has no "
                "episode_limit. Use crash_time='start' or ('hazard', q)."
            )
        if behaviour not in BEHAVIOURS:
            raise unknown_choice("crash behaviour", behaviour, BEHAVIOURS)
        self.behaviour = behaviour
        self.noop_action = self._resolve_noop(noop_action)
        self.max_crashed = _check_max_crashed(max_crashed, len(self.info.agents))
        if strategy is not None and strategy not in STRATEGIES:
            raise unknown_choice("coach strategy", strategy, STRATEGIES)
        self.strategy = strategy
        self.coach_options = dict(coach or {})
        self.reference_share = _check_reference_share(reference_share, strategy)
        k_ref = math.ceil(self.reference_share * self.num_envs) if self.reference_share > 0 else 0
        self._reference = torch.arange(self.num_envs) < min(k_ref, self.num_envs - 1)  # [B] copies kept at p = 0
        self.seed = int(seed)
        self.gen = torch.Generator().manual_seed(self.seed)
        self._groups = list(self.info.groups)
        self._sizes = [self.info.groups[g].n_agents for g in self._groups]
        self._flags: Optional[torch.Tensor] = None  # [B, n] bool
        self._tc: Optional[torch.Tensor] = None  # [B, n] long
        self._t: Optional[torch.Tensor] = None  # [B] long, step index in the episode
        self._forced: Dict[str, torch.Tensor] = {}
        self._stats = {"episodes": 0, "agents": 0, "flagged": 0, "crashed": 0}

    # ------------------------------------------------------------------ options

    def _resolve_noop(self, noop: Any) -> Dict[str, int]:
        if noop is None:
            noop = getattr(self.env, "noop_action", None)
        if noop is None:
            noop = 0
        per = dict(noop) if isinstance(noop, dict) else {g: noop for g in self.info.groups}
        out = {}
        for g, grp in self.info.groups.items():
            a = per.get(g, 0)
            if isinstance(a, bool) or not isinstance(a, int) or not 0 <= a < grp.n_actions:
                raise MarlError(f"noop_action of group '{g}' must be an int in [0, {grp.n_actions}), got {a!r}.")
            out[g] = a
        return out

    def options(self) -> Dict[str, Any]:
        """The constructor options (the ``crash=`` dict of ``make_env`` that rebuilds this wrapper)."""
        ct = self.crash_time if self.crash_time != "hazard" else ["hazard", self.hazard_q]
        out = {
            "rate": self._rate,
            "crash_time": ct,
            "behaviour": self.behaviour,
            "noop_action": dict(self.noop_action),
            "max_crashed": self.max_crashed,
            "seed": self.seed,
        }
        if self.reference_share > 0:
            out["reference_share"] = self.reference_share
        if self.strategy is not None:
            out["strategy"] = self.strategy
        if self.coach_options:
            out["coach"] = copy.deepcopy(self.coach_options)
        return out

    @property
    def rate(self) -> float:
        """Current per-agent crash probability (used by episodes that start from now on)."""
        return self._rate

    def set_rate(self, p: float) -> None:
        """Set the crash rate for episodes that start from now on (running episodes keep their flags)."""
        self._rate = _check_rate(p)

    def make_coach(self):
        """A :class:`~marl.envs.wrappers.coach.Coach` for the stored ``strategy`` (``None`` without one)."""
        if self.strategy is None:
            return None
        from marl.envs.wrappers.coach import Coach

        opts = dict(self.coach_options)
        if self.strategy == "fixed":
            opts.setdefault("rate", self._rate)
        return Coach(self.strategy, **opts)

    def callbacks(self):
        """The inner env's callbacks, plus a :class:`~marl.envs.wrappers.coach.CrashCoach` run
        callback when a coach ``strategy`` is set: it sets the crash rate during training."""
        from marl.envs.wrappers.coach import CrashCoach

        coach = self.make_coach()
        return [*super().callbacks(), *([CrashCoach(coach)] if coach is not None else [])]

    # ------------------------------------------------------------------ draws

    def _draw(self, rows: torch.Tensor) -> None:
        """New flags and crash steps for the copies in ``rows`` (``[B]`` bool)."""
        k = int(rows.sum())
        if k == 0:
            return
        n = sum(self._sizes)
        p = torch.where(self._reference[rows], 0.0, self._rate).unsqueeze(-1)  # [k, 1]
        flags = torch.rand(k, n, generator=self.gen) < p
        if self.max_crashed is not None:
            for _ in range(MAX_REDRAWS):
                bad = flags.sum(-1) > self.max_crashed
                if not bad.any():
                    break
                flags[bad] = torch.rand(int(bad.sum()), n, generator=self.gen) < p[bad]
            else:
                raise MarlError(
                    f"re-sampling found no flag vector with at most {self.max_crashed} crashed agents out of {n} "
                    f"in {MAX_REDRAWS} draws at rate {self._rate}; lower the rate or raise max_crashed."
                )
        if self.crash_time == "start":
            tc = torch.zeros(k, n, dtype=torch.long)
        elif self.crash_time == "uniform":
            tc = torch.randint(0, int(self.info.episode_limit), (k, n), generator=self.gen)
        else:
            q = self.hazard_q
            if q >= 1.0:
                tc = torch.zeros(k, n, dtype=torch.long)
            else:
                u = torch.rand(k, n, generator=self.gen).clamp_min(1e-12)
                tc = torch.floor(torch.log(u) / math.log(1.0 - q)).clamp(max=2**40).long()
        self._flags[rows] = flags
        self._tc[rows] = tc

    def _split(self, x: torch.Tensor) -> Dict[str, torch.Tensor]:
        return dict(zip(self._groups, torch.split(x, self._sizes, dim=-1)))

    def crashed_now(self) -> Dict[str, torch.Tensor]:
        """group -> ``[B, N_g]`` bool: agents whose crash step has been reached in the running episode."""
        return self._split(self._flags & (self._tc <= self._t[:, None]))

    @property
    def flags(self) -> Dict[str, torch.Tensor]:
        """group -> ``[B, N_g]`` bool crash flags of the running episodes."""
        return self._split(self._flags.clone())

    @property
    def crash_steps(self) -> Dict[str, torch.Tensor]:
        """group -> ``[B, N_g]`` long crash step of every agent (meaningful where flagged)."""
        return self._split(self._tc.clone())

    def _forced_actions(self, avail: Dict[str, Optional[torch.Tensor]], mask: Dict[str, torch.Tensor]):
        """group -> ``[B, N_g]`` forced action for the agents in ``mask``, given their legal actions."""
        out = {}
        B = self.num_envs
        for g in mask:
            n_act = self.info.groups[g].n_actions
            noop = torch.full((B, mask[g].shape[1]), self.noop_action[g], dtype=torch.long)
            if self.behaviour == "random" and bool(mask[g].any()):
                av = avail.get(g)
                av = torch.ones(B, mask[g].shape[1], n_act, dtype=torch.bool) if av is None else av.cpu().bool()
                probs = av.float().reshape(-1, n_act)
                probs[probs.sum(-1) == 0] = 1.0
                draw = torch.multinomial(probs, 1, generator=self.gen).reshape(B, -1)
                noop = torch.where(mask[g], draw, noop)
            out[g] = noop
        return out

    def _one_hot(self, avail, forced, mask, g):
        """``avail`` of group ``g`` with the rows of ``mask`` one-hot on ``forced``."""
        grp = self.info.groups[g]
        B, N = mask.shape
        dev = avail.device if avail is not None else mask.device
        base = torch.ones(B, N, grp.n_actions, dtype=torch.bool, device=dev) if avail is None else avail.clone()
        hot = torch.nn.functional.one_hot(forced, grp.n_actions).bool().to(dev)
        return torch.where(mask.to(dev)[..., None], hot, base)

    # ------------------------------------------------------------------ API

    def reset(self, seed: Optional[int] = None) -> Step:
        """Reset the env and draw flags for every copy; ``seed`` also re-seeds the crash generator."""
        if seed is not None:
            self.gen.manual_seed(self.seed * 1_000_003 + int(seed))
        s = self.env.reset(seed=seed)
        B, n = self.num_envs, sum(self._sizes)
        self._flags = torch.zeros(B, n, dtype=torch.bool)
        self._tc = torch.zeros(B, n, dtype=torch.long)
        self._t = torch.zeros(B, dtype=torch.long)
        self._draw(torch.ones(B, dtype=torch.bool))
        return self._apply(s, None)

    def step(self, actions: Dict[str, torch.Tensor]) -> Step:
        """Override crashed agents' actions, step the env, draw new flags for copies that ended."""
        if self._t is None:
            raise MarlError("Call reset() before step().")
        cur = self.crashed_now()
        acts = dict(actions)
        for g in self._groups:
            if bool(cur[g].any()) and g in acts:
                a = torch.as_tensor(acts[g])
                m = cur[g].to(a.device)
                acts[g] = torch.where(m, self._forced[g].to(a.device, a.dtype), a)
        s = self.env.step(acts)
        done = s.done.cpu()
        # the observation reached at step t+1 of the episode that just ran (final_obs for ended copies)
        self._t += 1
        final_mask = self.crashed_now()
        ended = None
        if bool(done.any()):
            ended = self._end_episodes(done)
        self._t[done] = 0
        self._draw(done)
        return self._apply(s, (done, final_mask, ended))

    # ------------------------------------------------------------------ internals

    def _end_episodes(self, done: torch.Tensor) -> Dict[str, torch.Tensor]:
        """Crash statistics of the copies in ``done`` (before their new flags are drawn)."""
        n = sum(self._sizes)
        flagged = self._flags.sum(-1).float()
        # crashed: the crash step was reached by the last action of the episode (index t-1)
        crashed = (self._flags & (self._tc <= (self._t - 1)[:, None])).sum(-1).float()
        st = self._stats
        st["episodes"] += int(done.sum())
        st["agents"] += n * int(done.sum())
        st["flagged"] += int(flagged[done].sum())
        st["crashed"] += int(crashed[done].sum())
        out = {"crash_rate_flagged": flagged / n, "crash_rate": crashed / n}
        if self.reference_share > 0:
            out["crash_reference"] = self._reference.float()
        return out

    def _apply(self, s: Step, end: Optional[tuple]) -> Step:
        """Edit ``s`` for the running crashes (avail one-hot, alive False) and add episode metrics."""
        mask = self.crashed_now()
        raw_avail = dict(s.avail_actions)
        self._forced = self._forced_actions(raw_avail, mask)
        any_now = any(bool(m.any()) for m in mask.values())
        if any_now:
            s.avail_actions, s.alive = dict(s.avail_actions), dict(s.alive)
            for g in self._groups:
                if bool(mask[g].any()):
                    s.avail_actions[g] = self._one_hot(raw_avail.get(g), self._forced[g], mask[g], g)
                    s.alive[g] = s.alive[g] & ~mask[g].to(s.alive[g].device)
        if end is None:
            return s
        done, final_mask, ended = end
        fmask = {g: final_mask[g] & done[:, None] for g in self._groups}
        fin_any = any(bool(m.any()) for m in fmask.values())
        if any_now or fin_any:
            raw_final = s.final_avail_actions or {}
            final = {}
            for g in self._groups:
                # None means "take avail_actions", i.e. the raw avail of this step
                base = raw_final.get(g) if raw_final.get(g) is not None else raw_avail.get(g)
                cur = s.avail_actions.get(g)
                if base is None:
                    base = torch.ones_like(cur) if cur is not None else None
                fm = fmask[g]
                if bool(fm.any()):
                    forced = self._forced_actions({g: base}, {g: fm})[g]
                    base = self._one_hot(base, forced, fm, g)
                if cur is None:
                    final[g] = base
                else:
                    keep = (~done).to(cur.device)[:, None, None]
                    final[g] = torch.where(keep, cur, base.to(cur.device))
            s.final_avail_actions = final
        if ended is not None:
            dev = s.terminated.device
            info = dict(s.info)
            em = dict(info.get("episode_metrics", {}))
            em.update({k: v.to(dev) for k, v in ended.items()})
            info["episode_metrics"] = em
            s.info = info
        return s

    def wrapper_state(self) -> Dict[str, Any]:
        """Rate, generator state, the running episodes' flags, crash steps, clocks and forced
        actions, and the crash totals (exact resume)."""
        return copy.deepcopy(
            {
                "rate": self._rate,
                "gen": self.gen.get_state(),
                "flags": self._flags,
                "tc": self._tc,
                "t": self._t,
                "forced": self._forced,
                "stats": self._stats,
            }
        )

    def load_wrapper_state(self, state: Dict[str, Any]) -> None:
        """Restore a :meth:`wrapper_state` dict."""
        state = copy.deepcopy(state)
        self._rate, self._flags, self._tc, self._t = state["rate"], state["flags"], state["tc"], state["t"]
        self._forced, self._stats = state["forced"], state["stats"]
        self.gen.set_state(state["gen"])

    def pop_stats(self) -> Dict[str, float]:
        """Crash totals over the episodes finished since the last call, and reset them.

        Returns:
            ``episodes``, ``flagged`` and ``crashed`` agent counts, ``crash_rate_flagged``
            (flags / agents) and ``crash_rate`` (crashed / agents, the effective rate;
            ``nan`` when no episode finished).
        """
        st = self._stats
        a = st["agents"]
        out = {
            "episodes": st["episodes"],
            "flagged": st["flagged"],
            "crashed": st["crashed"],
            "crash_rate_flagged": st["flagged"] / a if a else float("nan"),
            "crash_rate": st["crashed"] / a if a else float("nan"),
        }
        self._stats = {"episodes": 0, "agents": 0, "flagged": 0, "crashed": 0}
        return out

    def __repr__(self) -> str:
        return f"<CrashWrapper p={self._rate} {self.crash_time} {self.behaviour} of {self.env!r}>"


def crash_options(crash: Any, seed: Optional[int] = None) -> Dict[str, Any]:
    """Normalise ``make_env(..., crash=...)`` into :class:`CrashWrapper` keyword options.

    ``crash`` may be a rate (float in [0, 1]), a dict of :class:`CrashWrapper` options
    (plus ``strategy`` and ``coach``), or a strategy name: ``"adaptive"`` and
    ``"curriculum"`` start at rate 0 (the coach raises it), ``"fixed"`` at
    :data:`FIXED_DEFAULT_RATE`. ``seed`` (the env's) seeds the crash generator
    unless the options give one.

    Raises:
        MarlError: anything else (the message lists the accepted forms).
    """
    if isinstance(crash, str):
        if crash not in STRATEGIES:
            raise unknown_choice("crash strategy", crash, STRATEGIES)
        opts: Dict[str, Any] = {"strategy": crash, "rate": FIXED_DEFAULT_RATE if crash == "fixed" else 0.0}
    elif isinstance(crash, dict):
        opts = copy.deepcopy(crash)
        if "strategy" in opts and "rate" not in opts:
            opts["rate"] = FIXED_DEFAULT_RATE if opts["strategy"] == "fixed" else 0.0
    elif isinstance(crash, (int, float)) and not isinstance(crash, bool):
        opts = {"rate": _check_rate(crash)}
    else:
        raise MarlError(
            f"crash= must be a rate in [0, 1], a dict of CrashWrapper options or one of "
            f"{', '.join(STRATEGIES)}; got {crash!r}."
        )
    valid = (
        "rate",
        "crash_time",
        "behaviour",
        "noop_action",
        "max_crashed",
        "seed",
        "strategy",
        "coach",
        "reference_share",
    )
    for k in opts:
        if k not in valid:
            raise unknown_choice("crash option", k, valid)
    if "seed" not in opts and seed is not None:
        opts["seed"] = int(seed)
    return opts


def wrap_crash(env: MultiAgentEnv, crash: Any, seed: Optional[int] = None) -> CrashWrapper:
    """The ``crash=`` option of :func:`marl.env.make_env` (registered wrapper ``"crash"``).

    ``crash``: see :func:`crash_options`; ``seed``: the env's seed, the crash
    generator's default seed.
    """
    return CrashWrapper(env, **crash_options(crash, seed=seed))
