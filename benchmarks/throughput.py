"""Throughput benchmark: ``marl bench throughput``.

Env steps per second of whole training iterations (method:
:mod:`marl.benchmarks.common`), iterations 2..n of each side.

Sides
-----
``ours``
    :func:`marl.fit`'s trainer with MAPPO (Yu et al., 2022, arXiv:2103.01955)
    on ``mpe2`` simple_spread (``N=3``, ``max_cycles=25``, ``local_ratio=0.5``,
    discrete actions; ``backend="mpe2"``, mpe2's own code, as RLlib's side) through marl's batched path: ``B`` env copies, ``T``
    steps per copy per iteration (``T*B`` env steps), ``E`` epochs over the
    whole batch as one minibatch, actor and critic MLPs with two hidden layers
    of 64, one torch thread.
``rllib``
    The anchor (:mod:`marl.benchmarks.rllib_anchor`): RLlib's stock
    multi-agent PPO on the same task, the same batch, epochs, minibatches,
    network size and torch threads.
``vmas``
    :func:`marl.fit`'s trainer with MAPPO on VMAS simple_spread (Bettini et
    al., 2022, arXiv:2207.03530; ``B_vmas`` copies in one torch batch), marl's
    VMAS defaults (``configs/envs/vmas.yaml``).

By default ours and RLlib are *interleaved*: both are built, and one RLlib
iteration runs right after each marl iteration (each side's time excludes the
other's), so load from other processes hits both sides alike; ``sequential``
runs them one after the other instead.

:func:`run` returns a :class:`ThroughputResult`: per side env steps/s, the
mean sampling and learning time per iteration (seconds), the iterations
measured; the ratio ours / rllib (goal >= 2.5x) and the VMAS figure (goal >=
20,000 env steps/s), the settings and ``os.getloadavg()`` at start and end.
Its :meth:`~ThroughputResult.report` is the text ``marl bench throughput``
prints, its :meth:`~ThroughputResult.to_dict` what ``--json`` writes.
"""

from __future__ import annotations

import os
import time
from dataclasses import asdict, dataclass, field
from typing import Any, ClassVar, Dict, List, Optional, Tuple

from marl.benchmarks.common import MPE_KWARGS, SideResult, fmt, fmt_load, ray_for_bench
from marl.benchmarks.marl_side import bench_ours
from marl.benchmarks.rllib_anchor import RllibAnchor, bench_rllib

__all__ = [
    "RATIO_GOAL",
    "VMAS_GOAL",
    "VMAS_MIN_ENVS",
    "ThroughputSettings",
    "ThroughputResult",
    "bench_vmas",
    "run",
    "format_report",
]

RATIO_GOAL = 2.5  # env steps/s ours / rllib
VMAS_GOAL = 20_000.0  # env steps/s
VMAS_MIN_ENVS = 256  # the VMAS goal needs at least this many batched copies
SIDES = ("ours", "rllib", "vmas")
LoadAvg = Tuple[float, float, float]


@dataclass
class ThroughputSettings:
    """What :func:`run` was asked for: ``B`` (``num_envs``), ``T`` (``rollout_length``),
    ``E`` (``epochs``) of the MPE sides, iterations per side (or about ``seconds`` each),
    the VMAS copies and ``mode`` (``"interleaved"`` or ``"sequential"``)."""

    num_envs: int = 32
    rollout_length: int = 25
    epochs: int = 10
    iters: int = 10
    seconds: Optional[float] = None
    vmas_num_envs: int = 512
    mode: str = "interleaved"


@dataclass
class ThroughputResult:
    """Result of :func:`run`.

    Attributes:
        sides: measured sides by name (``"ours"``, ``"rllib"``, ``"vmas"``; a skipped side is absent).
        settings: what was asked for.
        load_start, load_end: ``os.getloadavg()`` (1, 5, 15 minutes) before and after.
        total_s: wall time of the whole benchmark (seconds).
        cpus: ``os.cpu_count()`` of the machine.
    """

    benchmark: ClassVar[str] = "throughput"
    sides: Dict[str, SideResult]
    settings: ThroughputSettings
    load_start: LoadAvg
    load_end: LoadAvg
    total_s: float
    cpus: int = field(default_factory=lambda: os.cpu_count() or 1)

    @property
    def ratio(self) -> Optional[float]:
        """Env steps/s ours / rllib, ``None`` if a side was skipped."""
        if "ours" not in self.sides or "rllib" not in self.sides:
            return None
        return self.sides["ours"].steps_per_s / self.sides["rllib"].steps_per_s

    @property
    def cpu_ratio(self) -> Optional[float]:
        """Env steps per CPU second ours / rllib (cross-check), ``None`` if a side was skipped."""
        if "ours" not in self.sides or "rllib" not in self.sides:
            return None
        return self.sides["ours"].steps_per_cpu_s / self.sides["rllib"].steps_per_cpu_s

    @property
    def ratio_goal_met(self) -> Optional[bool]:
        """``ratio >= RATIO_GOAL``; ``None`` without a ratio."""
        return None if self.ratio is None else self.ratio >= RATIO_GOAL

    @property
    def vmas_steps_per_s(self) -> Optional[float]:
        """Env steps/s of the VMAS side, ``None`` if skipped."""
        return self.sides["vmas"].steps_per_s if "vmas" in self.sides else None

    @property
    def vmas_goal_met(self) -> Optional[bool]:
        """VMAS env steps/s >= ``VMAS_GOAL`` with ``B >= VMAS_MIN_ENVS``; ``None`` if skipped."""
        if "vmas" not in self.sides:
            return None
        v = self.sides["vmas"]
        return v.steps_per_s >= VMAS_GOAL and v.settings.get("B", 0) >= VMAS_MIN_ENVS

    def report(self) -> str:
        """The text report (:func:`format_report`)."""
        return format_report(self)

    def to_dict(self) -> Dict[str, Any]:
        """Fields plus the derived figures (ratios, goals), for JSON."""
        return {
            "benchmark": self.benchmark,
            "settings": asdict(self.settings),
            "sides": {name: side.to_dict() for name, side in self.sides.items()},
            "ratio": self.ratio,
            "cpu_ratio": self.cpu_ratio,
            "ratio_goal": RATIO_GOAL,
            "ratio_goal_met": self.ratio_goal_met,
            "vmas_env_steps_per_s": self.vmas_steps_per_s,
            "vmas_goal": VMAS_GOAL,
            "vmas_min_envs": VMAS_MIN_ENVS,
            "vmas_goal_met": self.vmas_goal_met,
            "load_start": list(self.load_start),
            "load_end": list(self.load_end),
            "total_s": self.total_s,
            "cpus": self.cpus,
        }

    @classmethod
    def from_dict(cls, data: Dict[str, Any]) -> "ThroughputResult":
        """Inverse of :meth:`to_dict` (and of its JSON); derived figures are recomputed."""
        return cls(
            sides={k: SideResult.from_dict(v) for k, v in data["sides"].items()},
            settings=ThroughputSettings(**data["settings"]),
            load_start=tuple(data["load_start"]),
            load_end=tuple(data["load_end"]),
            total_s=float(data["total_s"]),
            cpus=int(data["cpus"]),
        )


def bench_vmas(
    num_envs: int = 512,
    rollout_length: int = 25,
    epochs: Optional[int] = None,
    iters: int = 10,
    seconds: Optional[float] = None,
    **overrides: Any,
) -> SideResult:
    """MAPPO with :func:`marl.fit`'s trainer on VMAS simple_spread (``B = num_envs`` copies in one torch batch).

    ``epochs=None`` and no ``num_minibatches`` override keep marl's VMAS
    defaults (``configs/envs/vmas.yaml``); the settings show what ran. The
    VMAS goal applies to ``num_envs >= 256`` only (a note says so otherwise).
    """
    res = bench_ours(
        num_envs,
        rollout_length,
        epochs,
        iters,
        seconds,
        family="vmas",
        scenario="simple_spread",
        name="vmas",
        **{"hidden": 64, **overrides},
    )
    if num_envs < VMAS_MIN_ENVS:
        res.notes.append(f"B={num_envs} < {VMAS_MIN_ENVS}: not a valid run for the VMAS goal")
    return res


def run(
    iters: int = 10,
    num_envs: int = 32,
    rollout_length: int = 25,
    epochs: int = 10,
    vmas_num_envs: int = 512,
    skip_rllib: bool = False,
    skip_vmas: bool = False,
    seconds: Optional[float] = None,
    sequential: bool = False,
    skip_ours: bool = False,
) -> ThroughputResult:
    """Run the sides in this process (starting Ray if none runs, stopping it after).

    Args:
        iters: iterations per side (the first is warm-up; at least 2).
        num_envs, rollout_length, epochs: ``B``, ``T``, ``E`` of the two MPE sides.
        vmas_num_envs: env copies of the VMAS side (the goal needs >= 256).
        skip_rllib, skip_vmas, skip_ours: leave a side out.
        seconds: train each side about this long instead of ``iters`` iterations.
        sequential: run ours then RLlib instead of interleaving their iterations.

    Returns:
        A :class:`ThroughputResult`.
    """
    load_start = os.getloadavg()
    t0 = time.perf_counter()
    interleave = not (sequential or skip_ours or skip_rllib)
    settings = ThroughputSettings(
        num_envs, rollout_length, epochs, iters, seconds, vmas_num_envs, "interleaved" if interleave else "sequential"
    )
    with ray_for_bench():
        sides = _mpe_sides(settings, skip_ours, skip_rllib)
        if not skip_vmas:
            sides["vmas"] = bench_vmas(vmas_num_envs, rollout_length, None, iters, seconds)
    return ThroughputResult(
        sides=sides,
        settings=settings,
        load_start=load_start,
        load_end=os.getloadavg(),
        total_s=time.perf_counter() - t0,
    )


def _mpe_sides(s: ThroughputSettings, skip_ours: bool, skip_rllib: bool) -> Dict[str, SideResult]:
    """The ours and RLlib sides on MPE, interleaved or one after the other (``s.mode``)."""
    sides: Dict[str, SideResult] = {}
    # mpe2's own code on both sides (backend="mpe2"): the comparison is of the training paths over the
    # same env code; the batched torch backend's gain is measured by marl.benchmarks.mpe_backends
    ours_kw = dict(env_kwargs={**MPE_KWARGS, "backend": "mpe2"}, num_minibatches=1, hidden=64)
    args = (s.num_envs, s.rollout_length, s.epochs, s.iters, s.seconds)
    if s.mode == "interleaved":
        anchor = RllibAnchor(s.num_envs, s.rollout_length, s.epochs)
        try:
            sides["ours"] = bench_ours(*args, between=anchor.train_one, **ours_kw)
            sides["rllib"] = anchor.result()
        finally:
            anchor.stop()
        return sides
    if not skip_ours:
        sides["ours"] = bench_ours(*args, **ours_kw)
    if not skip_rllib:
        sides["rllib"] = bench_rllib(*args)
    return sides


# ----------------------------------------------------------------------------- report


def format_report(result: ThroughputResult) -> str:
    """The text report of a :class:`ThroughputResult`: settings, one row per side, the
    ratio and VMAS verdicts, each side's settings and notes, load averages."""
    return "\n".join(_header(result) + _table(result.sides) + [""] + _verdicts(result) + [""] + _details(result))


def _header(r: ThroughputResult) -> List[str]:
    s = r.settings
    mode = "interleaved (one RLlib iteration after each marl iteration)" if s.mode == "interleaved" else "sequential"
    task = (
        f"mpe2 simple_spread N={MPE_KWARGS['N']} max_cycles={MPE_KWARGS['max_cycles']} "
        f"local_ratio={MPE_KWARGS['local_ratio']} {'continuous' if MPE_KWARGS['continuous_actions'] else 'discrete'}"
    )
    return [
        "marl bench throughput: env steps/s of whole training iterations (sampling + learning + loop overhead),",
        "iterations 2..n of each side (the first is warm-up), one process; 1 env step = 1 step of 1 env copy.",
        f"settings: B={s.num_envs} T={s.rollout_length} E={s.epochs} iters={s.iters}"
        f" seconds={s.seconds} B_vmas={s.vmas_num_envs} mode={s.mode}",
        f"MPE sides: {task}; {s.rollout_length}x{s.num_envs} env steps/iteration, 1 minibatch/epoch, "
        f"MLPs 2x64, 1 torch thread; {mode}",
        f"loadavg start: {fmt_load(r.load_start)}  (cpus: {r.cpus})",
        "",
    ]


def _table(sides: Dict[str, SideResult]) -> List[str]:
    lines = [
        f"{'side':<6} {'env_steps/s':>12} {'sample_s/it':>12} {'learn_s/it':>11} {'iters':>6} {'env_steps':>10}"
        f" {'wall_s':>8} {'steps/cpu_s':>12}"
    ]
    for name in SIDES:
        r = sides.get(name)
        if r is None:
            lines.append(f"{name:<6} {'skipped':>12}")
            continue
        lines.append(
            f"{name:<6} {r.steps_per_s:>12.1f} {r.sample_s:>12.4f} {r.learn_s:>11.4f} {r.iterations:>6d}"
            f" {r.env_steps:>10d} {r.wall_s:>8.4f} {r.steps_per_cpu_s:>12.1f}"
        )
    return lines


def _verdicts(r: ThroughputResult) -> List[str]:
    lines = []
    if r.ratio is not None:
        verdict = "met" if r.ratio_goal_met else "NOT met"
        lines.append(f"ratio ours/rllib: {r.ratio:.2f}x (goal >= {RATIO_GOAL}x: {verdict})")
        lines.append(f"ratio ours/rllib per CPU second (cross-check): {r.cpu_ratio:.2f}x")
    else:
        lines.append("ratio ours/rllib: n/a (a side was skipped)")
    if r.vmas_steps_per_s is not None:
        lines.append(
            f"vmas env_steps/s: {r.vmas_steps_per_s:.1f} (goal >= {VMAS_GOAL:,.0f} with B >= {VMAS_MIN_ENVS}:"
            f" {'met' if r.vmas_goal_met else 'NOT met'})"
        )
    else:
        lines.append("vmas env_steps/s: n/a (skipped)")
    return lines


def _details(r: ThroughputResult) -> List[str]:
    lines = []
    for name, side in r.sides.items():
        lines.append(f"{name} settings: " + ", ".join(f"{k}={fmt(v)}" for k, v in side.settings.items()))
        lines.extend(f"{name} note: {n}" for n in side.notes)
    lines.append(f"loadavg end: {fmt_load(r.load_end)}")
    lines.append(f"total wall time: {r.total_s:.1f} s")
    return lines
