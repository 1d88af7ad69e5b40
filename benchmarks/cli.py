"""``marl bench [throughput|smax|agents|vs-benchmarl|speed] [--json PATH] ...``: run a benchmark, print its report.

The benchmarks return result dataclasses (:mod:`marl.benchmarks.throughput`,
:mod:`~marl.benchmarks.smax`, :mod:`~marl.benchmarks.agents`,
:mod:`~marl.benchmarks.speed`); this module
parses the command line, prints each result's text report and, with
``--json PATH``, writes its figures as JSON (:func:`marl.benchmarks.common.write_json`).
"""

from __future__ import annotations

import argparse
import sys
from typing import Any, List, Optional

from marl.benchmarks.common import write_json

__all__ = ["build_parser", "run_command", "main"]

_POSITIVE = ("iters", "num_envs", "rollout_length", "epochs", "vmas_num_envs")
_NOT_THROUGHPUT = (
    "what",
    "map",
    "algo",
    "agents",
    "set",
    "json",
    "benchmarl_python",
    "sections",
)  # options of the other benchmarks


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of ``marl bench``."""
    p = argparse.ArgumentParser(
        prog="marl bench",
        description="Training throughput (env steps/s of whole iterations): marl MAPPO vs RLlib's stock "
        "multi-agent PPO on mpe2 simple_spread, and marl MAPPO on VMAS simple_spread.",
    )
    p.add_argument(
        "what",
        nargs="?",
        default="throughput",
        choices=["throughput", "smax", "agents", "vs-benchmarl", "speed"],
        help="throughput: marl vs RLlib on MPE (and VMAS); smax: QMIX and MAPPO on SMAX; "
        "agents: the plain agent network vs HPN, DPN and ASN on SMAX; vs-benchmarl: marl vs "
        "BenchMARL on VMAS (MAPPO, or --algo maddpg|iddpg|masac|isac); speed: all of these and the MPE backends, with the speed goals",
    )
    p.add_argument(
        "--benchmarl-python",
        default=None,
        metavar="PATH",
        help="python of BenchMARL's own environment (vs-benchmarl, speed; default $MARL_BENCHMARL_PYTHON)",
    )
    p.add_argument(
        "--sections",
        default=None,
        metavar="A,B",
        help="speed: only these sections (mpe_rllib, vmas_benchmarl, smax_qmix, mpe_backends, hpn)",
    )
    p.add_argument(
        "--json",
        default=None,
        metavar="PATH",
        help="also write the figures (every side, ratios, settings, load) to PATH as JSON",
    )
    p.add_argument("--algo", default=None, help="agents: default qmix; vs-benchmarl: mappo, maddpg, iddpg, masac, isac")
    p.add_argument("--agents", default="mlp,hpn,dpn,asn", help="agent networks of the agents benchmark, anchor first")
    p.add_argument(
        "--set",
        nargs="*",
        default=[],
        metavar="KEY=VALUE",
        help="config overrides of marl's side (agents, vs-benchmarl)",
    )
    p.add_argument("--map", default="3m", help="SMAX scenario of the smax benchmark (default 3m)")
    p.add_argument("--iters", type=int, default=10, help="iterations per side, the first is warm-up (default 10)")
    p.add_argument("--num-envs", type=int, default=32, help="env copies B of the MPE sides (default 32)")
    p.add_argument("--rollout-length", type=int, default=25, help="steps T per copy per iteration (default 25)")
    p.add_argument("--epochs", type=int, default=10, help="PPO epochs E of the MPE sides (default 10)")
    p.add_argument("--vmas-num-envs", type=int, default=None, help="VMAS env copies (default MAPPO 512, off-policy 10)")
    p.add_argument("--seconds", type=float, default=None, help="train each side about this long instead of --iters")
    p.add_argument("--skip-rllib", action="store_true", help="leave out the RLlib anchor")
    p.add_argument("--skip-vmas", action="store_true", help="leave out the VMAS side")
    p.add_argument(
        "--sequential",
        action="store_true",
        help="run ours, then the anchor (RLlib; vs-benchmarl: BenchMARL) instead of interleaving their iterations",
    )
    return p


def run_command(ns: argparse.Namespace) -> Any:
    """Run the benchmark ``ns.what`` with the parsed options; returns its result dataclass.
    The SMAX benchmarks run at least 4 iterations (3 are warm-up for QMIX)."""
    if ns.what in ("vs-benchmarl", "speed"):
        return _speed(ns)
    if ns.what == "agents":
        from marl.benchmarks import agents
        from marl.config import parse_cli_overrides

        return agents.run(
            iters=max(ns.iters, 4),
            num_envs=ns.num_envs,
            scenario=ns.map,
            seconds=ns.seconds,
            algo=ns.algo or "qmix",
            kinds=ns.agents.split(","),
            **parse_cli_overrides(ns.set),
        )
    if ns.what == "smax":
        from marl.benchmarks import smax

        return smax.run(iters=max(ns.iters, 4), num_envs=ns.num_envs, scenario=ns.map, seconds=ns.seconds)
    from marl.benchmarks import throughput

    kwargs = {k: v for k, v in vars(ns).items() if k not in _NOT_THROUGHPUT}
    if kwargs.get("vmas_num_envs") is None:  # the option's default depends on the command (vs-benchmarl: per algo)
        kwargs.pop("vmas_num_envs", None)  # throughput.run's own default, 512
    return throughput.run(**kwargs)


def _speed(ns: argparse.Namespace) -> Any:
    """``vs-benchmarl`` (needs BenchMARL's python) or the whole ``speed`` table."""
    from marl.benchmarks import speed
    from marl.benchmarks.benchmarl_anchor import SETUP_HINT, benchmarl_python
    from marl.errors import MarlError

    python = benchmarl_python(ns.benchmarl_python)
    if ns.what == "speed":
        only = ns.sections.split(",") if ns.sections else None
        return speed.run(iters=ns.iters, benchmarl_python=python, only=only)
    if python is None:
        raise MarlError(f"marl bench vs-benchmarl needs BenchMARL's python: {SETUP_HINT}.")
    from marl.config import parse_cli_overrides

    return speed.run_vs_benchmarl(
        python,
        num_envs=ns.vmas_num_envs,
        iters=ns.iters,
        seconds=ns.seconds,
        algo=ns.algo or "mappo",
        sequential=ns.sequential,
        **parse_cli_overrides(ns.set),
    )


def main(argv: Optional[List[str]] = None) -> int:
    """``marl bench [throughput] [--iters N] [--json PATH] ...``: print the report (and write
    the JSON); exit code 0. Bad options exit with argparse's usage error (code 2)."""
    parser = build_parser()
    ns = parser.parse_args(argv)
    for key in _POSITIVE:
        if getattr(ns, key) is not None and getattr(ns, key) < 1:
            parser.error(f"--{key.replace('_', '-')} must be >= 1")
    result = run_command(ns)
    print(result.report(), flush=True)
    if ns.json:
        print(f"figures written to {write_json(result, ns.json)}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
