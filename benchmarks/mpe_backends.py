"""MPE backends: ``marl bench speed --sections mpe_backends``.

Two measures of each backend of ``make_env("mpe", ...)`` (``envs/mpe``:
``mpe2``, mpe2's own code per copy; ``torch``, all copies as tensors), on
simple_spread (N=3, 25-step episodes, discrete actions), one torch thread:

* **raw**: env steps/s of ``env.step`` with random actions (drawn beforehand,
  so only the env is timed; ended copies reset inside ``step``), for each ``B``
  in ``num_envs``; the backends alternate in rounds of about ``seconds`` each;
* **iteration**: whole MAPPO training iterations (:mod:`marl.benchmarks.common`'s
  method) at ``B = iteration_envs``, T=25, MAPPO's MPE defaults, one backend
  after the other.

1 env step = 1 step of 1 copy (all agents acting once).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, ClassVar, Dict, List, Sequence

from marl.benchmarks.common import SideResult, ray_for_bench, side_header, side_row
from marl.benchmarks.marl_side import bench_ours

__all__ = ["BACKENDS", "MpeBackendsResult", "raw_steps_per_s", "run"]

BACKENDS = ("mpe2", "torch")


@dataclass
class MpeBackendsResult:
    """Result of :func:`run`.

    Attributes:
        raw: ``{B: {backend: env steps/s}}`` of ``env.step`` alone.
        iterations: one :class:`SideResult` per backend (whole MAPPO iterations).
        settings: what ran.
    """

    benchmark: ClassVar[str] = "mpe_backends"
    raw: Dict[int, Dict[str, float]]
    iterations: List[SideResult] = field(default_factory=list)
    settings: Dict[str, Any] = field(default_factory=dict)

    def speedups(self) -> Dict[str, float]:
        """torch / mpe2 ratios: ``raw_B<B>`` for each ``B`` both ran, and ``iteration``."""
        out = {f"raw_B{b}": r["torch"] / r["mpe2"] for b, r in self.raw.items() if "mpe2" in r and "torch" in r}
        sides = {s.name: s for s in self.iterations}
        if {"torch", "mpe2"} <= set(sides):
            out["iteration"] = sides["torch"].steps_per_s / sides["mpe2"].steps_per_s
        return out

    def report(self) -> str:
        """The raw table, the iteration table and the speedups."""
        lines = [
            "MPE backends, simple_spread N=3, 1 torch thread",
            f"raw env.step env steps/s: {'B':>6} " + " ".join(f"{b:>10}" for b in BACKENDS),
        ]
        for B, r in self.raw.items():
            lines.append(f"{'':>26}{B:>6} " + " ".join(f"{r[b]:>10,.0f}" if b in r else f"{'-':>10}" for b in BACKENDS))
        if self.iterations:
            lines += [
                f"whole MAPPO iterations, B={self.settings.get('iteration_envs')}:",
                side_header("backend", f"{'env_steps':>10}"),
            ]
            lines += [side_row(s, f"{s.env_steps:>10d}") for s in self.iterations]
        lines.append("torch / mpe2: " + ", ".join(f"{k} {v:.1f}x" for k, v in self.speedups().items()))
        return "\n".join(lines)

    def to_dict(self) -> Dict[str, Any]:
        """Raw figures, iteration sides, speedups and settings, for JSON."""
        return {
            "benchmark": self.benchmark,
            "raw": {str(b): r for b, r in self.raw.items()},
            "iterations": [s.to_dict() for s in self.iterations],
            "speedups": self.speedups(),
            "settings": dict(self.settings),
        }


def raw_steps_per_s(backend: str, num_envs: int, seconds: float, scenario: str = "simple_spread") -> float:
    """Env steps/s of ``env.step`` with pre-drawn random actions, timed for about ``seconds``."""
    import torch

    import marl

    env = marl.make_env("mpe", scenario, num_envs=num_envs, backend=backend)
    step = env.reset(seed=0)
    gen = torch.Generator().manual_seed(0)
    actions = [env.random_actions(step, generator=gen) for _ in range(50)]
    for a in actions[:5]:  # warm-up
        step = env.step(a)
    n, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        for a in actions:
            env.step(a)
        n += len(actions)
    rate = n * num_envs / (time.perf_counter() - t0)
    env.close()
    return rate


def run(
    iters: int = 10,
    num_envs: Sequence[int] = (32, 128, 1024),
    seconds: float = 2.0,
    rounds: int = 2,
    iteration_envs: int = 128,
    mpe2_max_envs: int = 128,
) -> MpeBackendsResult:
    """Measure both backends (module docstring).

    Args:
        iters: MAPPO iterations per backend (the first is warm-up); 0 skips the iteration measure.
        num_envs: ``B`` values of the raw measure; mpe2 runs only up to ``mpe2_max_envs``.
        seconds, rounds: each raw figure is the mean of ``rounds`` alternating timings of ``seconds``.
        iteration_envs: ``B`` of the MAPPO iterations (MAPPO's MPE default is 128).
    """
    import torch

    torch.set_num_threads(1)
    raw: Dict[int, Dict[str, float]] = {}
    for B in num_envs:
        names = [b for b in BACKENDS if b != "mpe2" or B <= mpe2_max_envs]
        rates: Dict[str, List[float]] = {b: [] for b in names}
        for _ in range(rounds):
            for b in names:
                rates[b].append(raw_steps_per_s(b, B, seconds))
        raw[int(B)] = {b: sum(v) / len(v) for b, v in rates.items()}
    sides = []
    if iters:
        with ray_for_bench():
            for b in BACKENDS:
                sides.append(bench_ours(iteration_envs, 25, None, iters, env_kwargs={"backend": b}, name=b))
    return MpeBackendsResult(
        raw=raw,
        iterations=sides,
        settings={
            "scenario": "simple_spread",
            "num_envs": list(num_envs),
            "seconds": seconds,
            "rounds": rounds,
            "iteration_envs": iteration_envs,
            "iters": iters,
            "torch_threads": 1,
        },
    )
