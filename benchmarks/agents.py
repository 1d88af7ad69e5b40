"""Agent-network benchmark: ``marl bench agents``, the cost of the entity-aware agent networks.

HPN and DPN (Hao et al., 2023, arXiv:2203.05285) and ASN (Wang et al., 2020,
arXiv:1907.11461) against each algorithm's plain network, on a SMAX map
(``docs/algorithms/entity_networks.md``, "Speed"). Method:
:mod:`marl.benchmarks.common`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar, Dict, List, Optional, Sequence

from marl.benchmarks.common import SideResult, ray_for_bench, side_header, side_row
from marl.benchmarks.marl_side import bench_ours
from marl.errors import MarlError

__all__ = ["AgentsResult", "run"]

PPO_ALGOS = ("mappo", "ippo")  # one warm-up iteration; value decomposition needs 3 (JIT, buffer)


@dataclass
class AgentsResult:
    """Result of :func:`run`: one side per agent network (named after it), the anchor first.

    Attributes:
        algo, scenario, num_envs: what trained where (SMAX ``scenario``, ``num_envs`` copies).
        sides: the measured sides, ``sides[0]`` the anchor (the plain network by default).
        overrides: the extra config keys every side used (e.g. ``{"batch_size": 32}``).
    """

    benchmark: ClassVar[str] = "agents"
    algo: str
    scenario: str
    num_envs: int
    sides: List[SideResult]
    overrides: Dict[str, Any] = field(default_factory=dict)

    @property
    def ratios(self) -> Dict[str, float]:
        """Each side's env steps/s over the anchor's (the anchor's is 1.0)."""
        anchor = self.sides[0].steps_per_s
        return {s.name: s.steps_per_s / anchor for s in self.sides}

    def report(self) -> str:
        """The text ``marl bench agents`` prints: one row per network with its ratio to the anchor."""
        extra = "".join(f", {k}={v}" for k, v in self.overrides.items())
        lines = [
            f"marl bench agents: {self.algo} on SMAX {self.scenario}, B={self.num_envs}{extra}; "
            "env steps/s of whole training iterations",
            side_header("agent", f"{'vs ' + self.sides[0].name:>8}"),
        ]
        lines += [side_row(r, f"{r.steps_per_s / self.sides[0].steps_per_s:>7.2f}x") for r in self.sides]
        return "\n".join(lines)

    def to_dict(self) -> Dict[str, Any]:
        """Fields plus the ratios, for JSON."""
        return {
            "benchmark": self.benchmark,
            "algo": self.algo,
            "scenario": self.scenario,
            "num_envs": self.num_envs,
            "overrides": dict(self.overrides),
            "sides": [s.to_dict() for s in self.sides],
            "ratios": self.ratios,
        }

    @classmethod
    def from_dict(cls, data: Dict[str, Any]) -> "AgentsResult":
        """Inverse of :meth:`to_dict` (and of its JSON); the ratios are recomputed."""
        return cls(
            algo=data["algo"],
            scenario=data["scenario"],
            num_envs=int(data["num_envs"]),
            sides=[SideResult.from_dict(s) for s in data["sides"]],
            overrides=dict(data["overrides"]),
        )


def run(
    iters: int = 10,
    num_envs: int = 64,
    scenario: str = "5m_vs_6m",
    seconds: Optional[float] = None,
    algo: str = "qmix",
    kinds: Sequence[str] = ("mlp", "hpn", "dpn", "asn"),
    **overrides: Any,
) -> AgentsResult:
    """Whole-iteration env steps/s of ``algo`` on a SMAX map with each agent network
    (``agent=<kind>``), one after the other in one process, the anchor ``kinds[0]`` first.

    The first 3 iterations of value-decomposition runs (JIT compile, buffer filling) and
    the first of PPO runs are warm-up. ``overrides`` are more config keys (e.g. ``batch_size=32``).
    Needs ``marl[smax]`` (jaxmarl).

    Raises:
        MarlError: no agent network in ``kinds``.
    """
    if not kinds or not all(kinds):
        raise MarlError(
            f"marl bench agents: agent networks {list(kinds)!r}; give at least one, anchor first, e.g. mlp,hpn,dpn,asn."
        )
    warmup = 1 if algo in PPO_ALGOS else 3
    with ray_for_bench():
        sides = [
            bench_ours(
                num_envs=num_envs,
                epochs=None,
                iters=iters,
                seconds=seconds,
                family="smax",
                scenario=scenario,
                rollout_length=25,
                name=kind,
                algo=algo,
                warmup=warmup,
                agent=kind,
                **overrides,
            )
            for kind in kinds
        ]
    return AgentsResult(algo=algo, scenario=scenario, num_envs=num_envs, sides=sides, overrides=dict(overrides))
