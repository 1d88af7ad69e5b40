"""``marl bench vs-benchmarl`` and ``marl bench speed``: the speed table of the library in one run.

``vs-benchmarl``: marl's MAPPO against BenchMARL's (Bettini et al., 2024,
arXiv:2312.01472) on VMAS simple_spread (Bettini et al., 2022,
arXiv:2207.03530), or one of the off-policy actor-critics both libraries have
(``--algo maddpg|iddpg|masac|isac``) on VMAS balance with BenchMARL's off-policy
iteration, alternating one iteration of each
(:mod:`marl.benchmarks.benchmarl_anchor`), same settings.

``speed`` runs, one after the other in one process, each section with its own
anchor measured in the same run (the ratios are what to compare across
machines; absolute env steps/s move with load):

========================  ==============================================================  ===========
section                   what                                                            goal
========================  ==============================================================  ===========
``mpe_rllib``             marl MAPPO vs RLlib's stock multi-agent PPO, mpe2 simple_spread  >= 3x
``vmas_benchmarl``        marl MAPPO vs BenchMARL MAPPO, VMAS simple_spread B=512          >= 2x
``smax_qmix``             QMIX (and MAPPO) on SMAX 3m, B=64, sample / learn split          >= 4k/s
``mpe_backends``          MPE backends: raw env steps/s, and whole MAPPO iterations        (report)
``hpn``                   HPN-QMIX / plain QMIX env steps/s, SMAX 5m_vs_6m                 >= 0.7x
========================  ==============================================================  ===========

A section whose requirement is missing (BenchMARL's environment, jaxmarl for
SMAX) is skipped with the reason in the report and the JSON.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from typing import Any, Callable, ClassVar, Dict, List, Optional, Tuple

from marl.benchmarks.common import SideResult, fmt, fmt_load, ray_for_bench, side_header, side_row
from marl.benchmarks.marl_side import bench_ours
from marl.errors import MarlError

__all__ = ["GOALS", "VsBenchmarlResult", "SpeedResult", "run_vs_benchmarl", "run", "SECTIONS"]

SECTIONS = ("mpe_rllib", "vmas_benchmarl", "smax_qmix", "mpe_backends", "hpn")
# section -> (measure, how it is read off the section's JSON, goal): the speed goals
GOALS: Dict[str, Tuple[str, str, float]] = {
    "mpe_rllib": ("MAPPO mpe2 simple_spread, marl / RLlib stock", "ratio", 3.0),
    "vmas_benchmarl": ("MAPPO VMAS simple_spread B=512, marl / BenchMARL", "ratio", 2.0),
    "smax_qmix": ("QMIX SMAX 3m whole-iteration env steps/s, B=64", "qmix_env_steps_per_s", 4000.0),
    "hpn": ("HPN-QMIX / plain QMIX env steps/s, SMAX 5m_vs_6m", "hpn_ratio", 0.7),
}


@dataclass
class VsBenchmarlResult:
    """Result of :func:`run_vs_benchmarl`: the ``marl`` and ``benchmarl`` sides and the settings."""

    benchmark: ClassVar[str] = "vs_benchmarl"
    sides: Dict[str, SideResult]
    settings: Dict[str, Any]

    @property
    def ratio(self) -> float:
        """Env steps/s of marl / BenchMARL."""
        return self.sides["marl"].steps_per_s / self.sides["benchmarl"].steps_per_s

    @property
    def learn_ratio(self) -> float:
        """Learning seconds per iteration BenchMARL / marl (> 1: marl's learner is faster)."""
        return self.sides["benchmarl"].learn_s / self.sides["marl"].learn_s

    def report(self) -> str:
        """One row per side, the ratios and the settings."""
        lines = [
            f"marl bench vs-benchmarl: {self.settings.get('algo', 'mappo').upper()} on VMAS "
            f"{'simple_spread' if self.settings.get('algo', 'mappo') == 'mappo' else 'balance'}, env steps/s of "
            "whole iterations, "
            + (
                "all of marl's iterations, then BenchMARL's"
                if self.settings.get("mode") == "sequential"
                else "alternating one marl and one BenchMARL iteration"
            ),
            "settings: " + ", ".join(f"{k}={fmt(v)}" for k, v in self.settings.items()),
            side_header("side", f"{'steps/cpu_s':>12}"),
        ]
        lines += [side_row(s, f"{s.steps_per_cpu_s:>12.1f}") for s in self.sides.values()]
        lines.append(
            f"ratio marl/benchmarl: {self.ratio:.2f}x (goal >= {GOALS['vmas_benchmarl'][2]}x); "
            f"learner time benchmarl/marl: {self.learn_ratio:.2f}x"
        )
        for s in self.sides.values():
            lines += [f"{s.name} note: {n}" for n in s.notes]
        return "\n".join(lines)

    def to_dict(self) -> Dict[str, Any]:
        """Sides, settings and ratios, for JSON."""
        return {
            "benchmark": self.benchmark,
            "settings": dict(self.settings),
            "ratio": self.ratio,
            "learn_ratio": self.learn_ratio,
            "sides": {k: s.to_dict() for k, s in self.sides.items()},
        }


OFF_POLICY = ("maddpg", "iddpg", "masac", "isac")  # BenchMARL's off-policy actor-critics marl also has
# BenchMARL's vmas/balance task config (its max_steps is the episode length both sides get)
BALANCE = {"n_agents": 4, "random_package_pos_on_line": True, "package_mass": 5}


def _off_policy_settings(algo: str, B: int, max_steps: int):
    """``(B, T, hidden, child, ours, settings)`` of an off-policy :func:`run_vs_benchmarl`: BenchMARL's iteration
    (``6000 / B`` steps of ``B`` envs, 1000 gradient steps of 128), its child's arguments, marl's config (BenchMARL's
    critic form for the centralised algorithms) and the report's settings.

    Raises:
        MarlError: ``B`` does not divide 6000."""
    if 6000 % B:
        raise MarlError(f"num_envs={B} must divide BenchMARL's 6000 frames per off-policy iteration.")
    T, hidden = 6000 // B, 256
    child = dict(algo=algo, task="balance", optimizer_steps=1000, train_batch=128, activation="tanh")
    env_kwargs = {"max_steps": max_steps, "continuous_actions": True, **BALANCE}
    ours: Dict[str, Any] = dict(epochs=None, scenario="balance", env_kwargs=env_kwargs)
    settings = {"T": T, "gradient_steps": "1000 of 128 transitions", "hidden": "2x256 tanh", "actions": "continuous"}
    if algo in ("maddpg", "masac"):  # BenchMARL's shared centralised critic: one Q per sample, joint gradient
        ours.update(critic_agent_id=False, policy_gradient="joint")
        settings["critic"] = "shared, centralised, one Q per sample; joint policy gradient (both sides)"
    return B, T, hidden, child, ours, settings


def run_vs_benchmarl(
    python: str,
    num_envs: Optional[int] = None,
    rollout_length: int = 25,
    epochs: int = 3,
    minibatches: int = 2,
    iters: int = 10,
    seconds: Optional[float] = None,
    max_steps: int = 100,
    algo: str = "mappo",
    sequential: bool = False,
    **overrides: Any,
) -> VsBenchmarlResult:
    """marl vs BenchMARL, alternating iterations (or one side after the other): MAPPO on VMAS simple_spread, or an off-policy
    actor-critic (:data:`OFF_POLICY`) on VMAS balance.

    MAPPO: ``B`` copies (default 512), ``T`` steps, ``E`` epochs of ``K`` minibatches, 2x64 ReLU MLPs,
    discrete actions, a centralised critic. Off-policy: BenchMARL's iteration on both sides (its
    off-policy defaults, which marl's YAMLs hold): ``B`` copies (default 10) stepping ``6000 / B``
    steps, then 1000 gradient steps of 128 transitions; 2x256 Tanh MLPs; continuous actions; a shared
    policy and, for the centralised ones, a shared critic computing one Q per sample and the joint policy
    gradient (marl's ``critic_agent_id: false``, ``policy_gradient: joint``, as BenchMARL); BenchMARL's
    balance config (4 agents).

    Args:
        python: interpreter of BenchMARL's environment
            (:func:`marl.benchmarks.benchmarl_anchor.benchmarl_python`).
        num_envs, rollout_length, epochs, minibatches: ``B``, ``T``, ``E``, ``K`` of both sides (MAPPO;
            off-policy: ``B`` only).
        iters: iterations per side (the first is warm-up); ``seconds``: about this long instead.
        max_steps: VMAS episode length of both sides.
        algo: ``"mappo"`` or one of :data:`OFF_POLICY`.
        sequential: all of marl's iterations, then as many of BenchMARL's (after marl's Ray is shut down),
            instead of alternating: needed when marl samples during its gradient steps (``async_sampling``),
            whose remote runner would otherwise sample through BenchMARL's turn.
        **overrides: more config keys of marl's side only (e.g. ``torch_compile=True``); the settings say so.

    Raises:
        MarlError: an unknown ``algo`` (names the choices), ``B`` not dividing 6000 (off-policy), or
            BenchMARL's child process fails (the message says how to set it up).
    """
    from marl.benchmarks.benchmarl_anchor import BenchmarlAnchor
    from marl.errors import unknown_choice

    if algo == "mappo":
        B, T, hidden, child = num_envs or 512, rollout_length, 64, {}
        ours: Dict[str, Any] = dict(epochs=epochs, scenario="simple_spread", env_kwargs={"max_steps": max_steps})
        ours.update(hidden=64, num_minibatches=minibatches, critic="team")
        settings = {"T": T, "E": epochs, "K": minibatches, "hidden": "2x64 relu", "actions": "discrete"}
        settings["critic"] = "centralised, once per env step (marl critic=team, BenchMARL share_param_critic)"
    elif algo in OFF_POLICY:
        B, T, hidden, child, ours, settings = _off_policy_settings(algo, num_envs or 10, max_steps)
    else:
        raise unknown_choice("vs-benchmarl algorithm", algo, ("mappo",) + OFF_POLICY)
    anchor = BenchmarlAnchor(python, B, T, epochs, minibatches, hidden, max_steps, **child)
    try:
        with ray_for_bench():
            side = bench_ours(
                B,
                T,
                iters=iters,
                seconds=seconds,
                family="vmas",
                name="marl",
                between=None if sequential else anchor.train_one,
                algo=algo,
                **{**ours, **overrides},
            )
        while len(anchor.iterations) <= side.iterations:  # sequential: BenchMARL's warm-up and as many measured
            anchor.train_one()
        theirs = anchor.result()
    finally:
        anchor.stop()
    settings = {"algo": algo, "B": B, **settings, "max_steps": max_steps, "iters": iters, "seconds": seconds}
    settings["mode"] = "sequential" if sequential else "alternating"
    return VsBenchmarlResult(
        sides={"marl": side, "benchmarl": theirs}, settings={**settings, "marl_overrides": dict(overrides)}
    )


# ----------------------------------------------------------------------------- the whole table


@dataclass
class SpeedResult:
    """Result of :func:`run`: each section's result (or the reason it was skipped) and the goals.

    Attributes:
        sections: section name -> a result with ``report()`` / ``to_dict()``.
        skipped: section name -> why it did not run.
        load_start, load_end: ``os.getloadavg()`` before and after; total_s: wall seconds.
    """

    benchmark: ClassVar[str] = "speed"
    sections: Dict[str, Any]
    skipped: Dict[str, str]
    load_start: Tuple[float, float, float]
    load_end: Tuple[float, float, float]
    total_s: float
    cpus: int = field(default_factory=lambda: os.cpu_count() or 1)

    def goals(self) -> List[Dict[str, Any]]:
        """One row per goal of :data:`GOALS` whose section ran: measure, value, goal, met."""
        rows = []
        for name, (measure, getter, goal) in GOALS.items():
            if name in self.sections:
                value = _goal_value(getter, self.sections[name])
                rows.append(
                    {
                        "section": name,
                        "measure": measure,
                        "value": value,
                        "goal": goal,
                        "met": value is not None and value >= goal,
                    }
                )
        return rows

    def report(self) -> str:
        """Each section's report, then the goal table."""
        lines = [
            f"marl bench speed: {len(self.sections)} sections, loadavg start {fmt_load(self.load_start)} "
            f"(cpus: {self.cpus})",
            "",
        ]
        for name, res in self.sections.items():
            lines += [f"=== {name}", res.report(), ""]
        lines += [f"=== {name}: skipped ({why})" for name, why in self.skipped.items()]
        lines += ["", f"{'measure':<56} {'value':>10} {'goal':>8}  met"]
        for g in self.goals():
            lines.append(f"{g['measure']:<56} {fmt(g['value']):>10} {fmt(g['goal']):>8}  {'yes' if g['met'] else 'NO'}")
        lines.append(f"loadavg end: {fmt_load(self.load_end)}; total wall time {self.total_s:.1f} s")
        return "\n".join(lines)

    def to_dict(self) -> Dict[str, Any]:
        """Every section's JSON, the skipped ones with their reason, the goal rows, load and time."""
        return {
            "benchmark": self.benchmark,
            "sections": {k: v.to_dict() for k, v in self.sections.items()},
            "skipped": dict(self.skipped),
            "goals": self.goals(),
            "load_start": list(self.load_start),
            "load_end": list(self.load_end),
            "total_s": self.total_s,
            "cpus": self.cpus,
        }


def _goal_value(getter: str, result: Any) -> Optional[float]:
    """The figure a goal is checked on, read off a section result."""
    if getter == "ratio":
        return result.ratio
    if getter == "qmix_env_steps_per_s":
        return result.sides[0].steps_per_s
    if getter == "hpn_ratio":
        return result.ratios.get("hpn")
    raise KeyError(getter)


def _sections(iters: int, benchmarl: Optional[str]) -> Dict[str, Callable[[], Any]]:
    """Section name -> a call that runs it (imports stay inside: each section needs other packages)."""

    def mpe_rllib():
        from marl.benchmarks import throughput

        return throughput.run(iters=iters, skip_vmas=True)

    def smax_qmix():
        from marl.benchmarks import smax

        return smax.run(iters=max(iters, 4), num_envs=64, scenario="3m")

    def mpe_backends():
        from marl.benchmarks import mpe_backends as mb

        return mb.run(iters=iters)

    def hpn():
        from marl.benchmarks import agents

        return agents.run(iters=max(iters, 4), num_envs=64, scenario="5m_vs_6m", algo="qmix", kinds=["mlp", "hpn"])

    calls = {"mpe_rllib": mpe_rllib, "smax_qmix": smax_qmix, "mpe_backends": mpe_backends, "hpn": hpn}
    if benchmarl is not None:
        calls["vmas_benchmarl"] = lambda: run_vs_benchmarl(benchmarl, iters=iters)
    return {name: calls[name] for name in SECTIONS if name in calls}


def run(
    iters: int = 10,
    benchmarl_python: Optional[str] = None,
    only: Optional[List[str]] = None,
    progress: Callable[[str], None] = print,
) -> SpeedResult:
    """Run the sections of :data:`SECTIONS` (or ``only`` those) one after the other.

    Args:
        iters: iterations per side in each section (the warm-up ones included).
        benchmarl_python: BenchMARL's interpreter; ``None`` skips ``vmas_benchmarl`` with the setup hint.
        only: section names to run (default all).
        progress: called with a line as each section starts and ends.

    Raises:
        MarlError: ``only`` names an unknown section (the message lists them).
    """
    from marl.benchmarks.benchmarl_anchor import SETUP_HINT
    from marl.errors import unknown_choice

    for name in only or []:
        if name not in SECTIONS:
            raise unknown_choice("speed section", name, list(SECTIONS))
    wanted = list(only or SECTIONS)
    skipped = {} if benchmarl_python or "vmas_benchmarl" not in wanted else {"vmas_benchmarl": SETUP_HINT}
    load_start, t0 = os.getloadavg(), time.perf_counter()
    sections: Dict[str, Any] = {}
    for name, call in _sections(iters, benchmarl_python).items():
        if name not in wanted:
            continue
        progress(f"[speed] {name} ...")
        t = time.perf_counter()
        try:
            sections[name] = call()
        except ImportError as e:  # an optional dependency of that section (jaxmarl for SMAX)
            skipped[name] = f"missing package: {e}"
        progress(f"[speed] {name} done in {time.perf_counter() - t:.1f} s")
    return SpeedResult(
        sections=sections,
        skipped=skipped,
        load_start=load_start,
        load_end=os.getloadavg(),
        total_s=time.perf_counter() - t0,
    )
