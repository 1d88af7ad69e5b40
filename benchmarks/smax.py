"""SMAX benchmark: ``marl bench smax``, QMIX's and MAPPO's training throughput on one SMAX map.

SMAX is JaxMARL's StarCraft-like env (Rutherford et al., 2023, arXiv:2311.10090).
QMIX (Rashid et al., 2018, arXiv:1803.11485) samples little and learns much per
iteration; MAPPO (Yu et al., 2022, arXiv:2103.01955) the other way round, so
the sample / learn split of the two shows where each spends its time
(``docs/algorithms/value_decomposition.md``, "Speed"). Method:
:mod:`marl.benchmarks.common`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar, Dict, List, Optional

from marl.benchmarks.common import SideResult, ray_for_bench, side_header, side_row
from marl.benchmarks.marl_side import bench_ours

__all__ = ["SmaxResult", "run"]


@dataclass
class SmaxResult:
    """Result of :func:`run`: the QMIX side, then the MAPPO side, on SMAX ``scenario``
    with ``num_envs`` batched copies."""

    benchmark: ClassVar[str] = "smax"
    scenario: str
    num_envs: int
    sides: List[SideResult]

    @property
    def ratio(self) -> float:
        """Env steps/s of QMIX / MAPPO."""
        return self.sides[0].steps_per_s / self.sides[1].steps_per_s

    def report(self) -> str:
        """The text ``marl bench smax`` prints: one row per algorithm and the ratio."""
        lines = [
            f"marl bench smax: SMAX {self.scenario}, B={self.num_envs} batched envs, "
            "env steps/s of whole training iterations",
            side_header("algo", f"{'env_steps':>10}"),
        ]
        lines += [side_row(r, f"{r.env_steps:>10d}") for r in self.sides]
        lines.append(f"ratio {self.sides[0].name}/{self.sides[1].name}: {self.ratio:.2f}x")
        return "\n".join(lines)

    def to_dict(self) -> Dict[str, Any]:
        """Fields plus the ratio, for JSON."""
        return {
            "benchmark": self.benchmark,
            "scenario": self.scenario,
            "num_envs": self.num_envs,
            "sides": [s.to_dict() for s in self.sides],
            "ratio": self.ratio,
        }

    @classmethod
    def from_dict(cls, data: Dict[str, Any]) -> "SmaxResult":
        """Inverse of :meth:`to_dict` (and of its JSON); the ratio is recomputed."""
        return cls(
            scenario=data["scenario"],
            num_envs=int(data["num_envs"]),
            sides=[SideResult.from_dict(s) for s in data["sides"]],
        )


def run(iters: int = 20, num_envs: int = 64, scenario: str = "3m", seconds: Optional[float] = None) -> SmaxResult:
    """QMIX and MAPPO training throughput on SMAX (env steps/s of whole iterations,
    QMIX first, then MAPPO, in one process; Ray started if none runs).

    QMIX's first 3 iterations are warm-up (JIT compile, replay buffer filling to one
    batch); MAPPO's first is. Each side uses its defaults for SMAX (``configs/envs/smax.yaml``).
    Needs ``marl[smax]`` (jaxmarl).
    """
    common = dict(num_envs=num_envs, epochs=None, iters=iters, seconds=seconds, family="smax", scenario=scenario)
    with ray_for_bench():
        sides = [
            bench_ours(rollout_length=25, name="qmix", algo="qmix", warmup=3, **common),
            bench_ours(rollout_length=50, name="mappo", algo="mappo", warmup=1, **common),
        ]
    return SmaxResult(scenario=scenario, num_envs=num_envs, sides=sides)
