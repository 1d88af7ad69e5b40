"""The coach: a training-time controller of the agents' crash rate.

Source: Zhao, Zhao, Wang, Yang, Hu, Zhou, Hao, Li, "Coach-assisted Multi-Agent
Reinforcement Learning Framework for Unexpected Crashed Agents", arXiv
2203.08454 (2022). The paper names three coach strategies (fixed crash rate,
curriculum learning, adaptive crash rate driven by performance); the formulas
below are **our reconstruction** (the paper was available at abstract level;
``docs/envs.md``, "Reconstructed details") and every constant is an option:

* ``fixed``: ``p = rate`` (default 0.2);
* ``curriculum``: ``p = p_max * min(1, env_steps / T_curr)`` (linear ramp);
* ``adaptive``: every ``K`` finished episodes, the recent team performance
  ``P`` (mean episode return, or the win rate when ``wins`` are given) is
  compared with two thresholds: ``P >= tau_hi`` -> ``p = min(p + delta, p_max)``;
  ``P < tau_lo`` -> ``p = max(p - delta, 0)``; otherwise ``p`` stays.
  Thresholds are absolute (``tau_hi=``, ``tau_lo=``) or relative to a reference
  performance ``P_ref`` measured at ``p = 0``: ``tau = P_ref - (1 - frac) * |P_ref|``,
  i.e. ``0.8 * P_ref`` / ``0.5 * P_ref`` for the default fractions when
  ``P_ref >= 0`` (the ``|P_ref|`` form, our extension, keeps the rule sensible
  for negative returns). ``P_ref`` is given (``p_ref=``), or taken from the
  windows the coach completes while ``p == 0``, or (the default with
  ``crash="adaptive"``) the latest ``K`` episodes of the env copies the crash
  wrapper keeps at ``p = 0`` (``reference_share``, 1/8 of the copies), fed
  through :meth:`Coach.observe_reference` so ``P_ref`` follows the team as it learns.

Defaults (ours, part of the reconstruction): ``K = 20``, ``delta = 0.05``,
``p_max = 0.5``, ``tau_hi = 0.8 P_ref``, ``tau_lo = 0.5 P_ref``, and
``T_curr = 500_000`` env steps (our CPU runs are 0.5-1M steps).

The coach does not touch the env. :class:`CrashCoach`, the run callback that a
crash wrapper with a ``strategy`` contributes to every ``fit``
(:meth:`~marl.envs.wrappers.crash.CrashWrapper.callbacks`), feeds it each
iteration's finished episodes and passes :attr:`Coach.rate` to
:meth:`~marl.envs.wrappers.crash.CrashWrapper.set_rate` of every sampling env.
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Sequence

import numpy as np

from marl.callbacks import Callback
from marl.errors import MarlError, unknown_choice

STRATEGIES = ("fixed", "curriculum", "adaptive")


def _num(v: Any, what: str, lo: float = -np.inf, hi: float = np.inf, lo_open: bool = False) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float, np.integer, np.floating)) or not np.isfinite(v):
        raise MarlError(f"{what} must be a finite number, got {v!r}.")
    v = float(v)
    if v < lo or v > hi or (lo_open and v == lo):
        raise MarlError(f"{what} must lie in {'(' if lo_open else '['}{lo}, {hi}], got {v}.")
    return v


class Coach:
    """Crash-rate controller (see the module docstring).

    Args:
        strategy: ``"fixed"``, ``"curriculum"`` or ``"adaptive"``.
        rate: the fixed rate (``fixed``; default 0.2) or the starting rate
            (``adaptive``; default 0).
        p_max: the largest rate (``curriculum`` end point, ``adaptive`` cap); default 0.5.
        T_curr: env steps of the curriculum ramp (default 500_000).
        K: episodes per adaptive decision (default 20).
        delta: adaptive step (default 0.05).
        tau_hi, tau_lo: absolute thresholds (both or neither).
        hi_frac, lo_frac: relative thresholds as fractions of ``P_ref`` (0.8, 0.5).
        p_ref: reference performance at ``p = 0`` (default: measured).
        warmup_steps: no adaptive change before this many env steps (default 0).

    Raises:
        MarlError: unknown strategy (lists the choices), an option the strategy
            does not take, or a value out of range.
    """

    _OPTIONS = {
        "fixed": ("rate",),
        "curriculum": ("p_max", "T_curr"),
        "adaptive": ("rate", "p_max", "K", "delta", "tau_hi", "tau_lo", "hi_frac", "lo_frac", "p_ref", "warmup_steps"),
    }

    def __init__(self, strategy: str, **opts):
        if strategy not in STRATEGIES:
            raise unknown_choice("coach strategy", strategy, STRATEGIES)
        for k in opts:
            if k not in self._OPTIONS[strategy]:
                raise MarlError(
                    f"Coach strategy '{strategy}' takes no option '{k}'. "
                    f"Valid options: {', '.join(self._OPTIONS[strategy])}."
                )
        self.strategy = strategy
        self.p_max = _num(opts.get("p_max", 0.5), "p_max", 0.0, 1.0)
        self.T_curr = _num(opts.get("T_curr", 500_000), "T_curr", 0.0, lo_open=True)
        default_rate = 0.2 if strategy == "fixed" else 0.0
        self._rate = _num(opts.get("rate", default_rate), "rate", 0.0, 1.0)
        if strategy == "adaptive" and self._rate > self.p_max:
            raise MarlError(f"the starting rate {self._rate} exceeds p_max {self.p_max}.")
        k = opts.get("K", 20)
        if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 1:
            raise MarlError(f"K must be an int >= 1 (episodes per decision), got {k!r}.")
        self.K = int(k)
        self.delta = _num(opts.get("delta", 0.05), "delta", 0.0, 1.0, lo_open=True)
        hi, lo = opts.get("tau_hi"), opts.get("tau_lo")
        if (hi is None) != (lo is None):
            raise MarlError("give both tau_hi and tau_lo (absolute thresholds) or neither (relative to P_ref).")
        self.tau_hi = None if hi is None else _num(hi, "tau_hi")
        self.tau_lo = None if lo is None else _num(lo, "tau_lo")
        if hi is not None and self.tau_lo > self.tau_hi:
            raise MarlError(f"tau_lo ({self.tau_lo}) must be <= tau_hi ({self.tau_hi}).")
        self.hi_frac = _num(opts.get("hi_frac", 0.8), "hi_frac", 0.0, 1.0)
        self.lo_frac = _num(opts.get("lo_frac", 0.5), "lo_frac", 0.0, 1.0)
        if self.lo_frac > self.hi_frac:
            raise MarlError(f"lo_frac ({self.lo_frac}) must be <= hi_frac ({self.hi_frac}).")
        self.p_ref: Optional[float] = None if opts.get("p_ref") is None else _num(opts["p_ref"], "p_ref")
        self._p_ref_given = self.p_ref is not None
        self.warmup_steps = _num(opts.get("warmup_steps", 0), "warmup_steps", 0.0)
        self._window: List[float] = []
        self._ref_window: List[float] = []  # latest p = 0 reference episodes (observe_reference)
        self.performance: Optional[float] = None  # P of the last completed window
        self.env_steps = 0
        self.history: List[Dict[str, float]] = []  # one entry per adaptive decision

    @property
    def rate(self) -> float:
        """The crash rate to use for the episodes that start next."""
        return self._rate

    def thresholds(self) -> Optional[tuple]:
        """``(tau_lo, tau_hi)`` in use, or ``None`` while ``P_ref`` is unknown."""
        if self.tau_hi is not None:
            return self.tau_lo, self.tau_hi
        if self.p_ref is None:
            return None
        a = abs(self.p_ref)
        return self.p_ref - (1.0 - self.lo_frac) * a, self.p_ref - (1.0 - self.hi_frac) * a

    def observe_reference(self, episode_returns: Sequence[float], wins: Optional[Sequence[float]] = None) -> None:
        """Feed episodes played at ``p = 0``; ``P_ref`` becomes the mean return (or win rate)
        of the latest ``K`` of them, so it follows the team as it learns."""
        if self._p_ref_given:
            return
        vals = list(map(float, wins if wins is not None else episode_returns))
        self._ref_window = (self._ref_window + vals)[-self.K :]
        if self._ref_window:
            self.p_ref = float(np.mean(self._ref_window))

    def observe(
        self, episode_returns: Sequence[float], env_steps: int, wins: Optional[Sequence[float]] = None
    ) -> float:
        """Feed finished episodes and the lifetime env-step count; return the new rate.

        Args:
            episode_returns: team returns of the episodes finished since the last call.
            env_steps: env steps sampled so far (drives ``curriculum``).
            wins: optional win indicators (0/1) of the same episodes; the adaptive
                rule then uses the win rate instead of the mean return.
        """
        self.env_steps = int(env_steps)
        if self.strategy == "curriculum":
            self._rate = self.p_max * min(1.0, self.env_steps / self.T_curr)
        elif self.strategy == "adaptive":
            vals = list(map(float, wins if wins is not None else episode_returns))
            if wins is not None and len(wins) != len(episode_returns):
                raise MarlError(f"wins ({len(wins)}) and episode_returns ({len(episode_returns)}) differ in length.")
            self._window += vals
            while len(self._window) >= self.K:
                chunk, self._window = self._window[: self.K], self._window[self.K :]
                self._decide(float(np.mean(chunk)))
        return self._rate

    def _decide(self, perf: float) -> None:
        """One adaptive decision from the performance of a full window."""
        self.performance = perf
        if self._rate == 0.0 and not self._p_ref_given and self.tau_hi is None and not self._ref_window:
            self.p_ref = perf  # performance at p = 0 (refreshed while p is 0; reference copies take over)
        th = self.thresholds()
        old = self._rate
        if th is not None and self.env_steps >= self.warmup_steps:
            lo, hi = th
            if perf >= hi:
                self._rate = min(self._rate + self.delta, self.p_max)
            elif perf < lo:
                self._rate = max(self._rate - self.delta, 0.0)
            self._rate = round(self._rate, 12)
        self.history.append({"env_steps": self.env_steps, "performance": perf, "rate_before": old, "rate": self._rate})

    def metrics(self) -> Dict[str, float]:
        """Scalars for logging: ``coach_rate`` and, when known, ``coach_performance``, ``coach_p_ref``."""
        out = {"coach_rate": self._rate}
        if self.performance is not None:
            out["coach_performance"] = self.performance
        if self.p_ref is not None:
            out["coach_p_ref"] = self.p_ref
        return out

    def __repr__(self) -> str:
        return f"<Coach {self.strategy} p={self._rate}>"


class CrashCoach(Callback):
    """Run callback that lets a :class:`Coach` set the crash rate of every sampling env.

    Each iteration it collects the finished episodes of the rollouts
    (``episode_return``, ``win_rate`` where the env reports it, and
    ``crash_reference``: episodes of copies kept at ``p = 0``, which feed
    :meth:`Coach.observe_reference`), asks the coach for the next rate, applies it
    with ``set_rate`` on the env of every runner and logs :meth:`Coach.metrics`
    (``coach_rate``, ``coach_performance``, ``coach_p_ref``). The coach's state is
    saved in checkpoints.

    Args:
        coach: the controller (built by the crash wrapper from its ``strategy``).
    """

    name = "crash_coach"

    def __init__(self, coach: Coach):
        self.coach = coach
        self._episodes: Dict[str, List[float]] = {}

    def on_fit_start(self, trainer) -> None:
        self._apply(trainer)

    def on_rollout(self, trainer, rollout) -> None:
        for key in ("episode_return", "win_rate", "crash_reference"):
            self._episodes.setdefault(key, []).extend(rollout["metrics"].get(key, []))

    def on_iteration_end(self, trainer, metrics) -> Dict[str, float]:
        eps, self._episodes = self._episodes, {}
        returns, wins, ref = eps.get("episode_return", []), eps.get("win_rate") or None, eps.get("crash_reference")
        if ref and len(ref) == len(returns):  # copies kept at p = 0 measure the coach's P_ref
            is_ref = [bool(x) for x in ref]
            pick = lambda xs, want: [x for x, r in zip(xs, is_ref) if r == want]  # noqa: E731
            self.coach.observe_reference(pick(returns, True), pick(wins, True) if wins else None)
            returns, wins = pick(returns, False), pick(wins, False) if wins else None
        self.coach.observe(returns, trainer.progress["env_steps"], wins=wins)
        self._apply(trainer)
        return {k: float(v) for k, v in self.coach.metrics().items()}

    def _apply(self, trainer) -> None:
        rate = self.coach.rate
        trainer.foreach_env(lambda env: env.set_rate(rate))

    def state_dict(self) -> Dict[str, Any]:
        return {"coach": self.coach.__dict__.copy()}

    def load_state_dict(self, state: Dict[str, Any]) -> None:
        self.coach.__dict__.update(state["coach"])
