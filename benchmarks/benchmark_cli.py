"""``marl benchmark run|report|tables|list``: the command line of the benchmark runner.

marl benchmark run smoke                          # a bundled suite (configs/benchmarks/)
marl benchmark run my_suite.yaml --seeds 0 1 2 --out results/mine
marl benchmark run epymarl_lbf --tasks lbforaging:foraging-10x10-3p-3f-v3   # one task of a suite
marl benchmark run benchmarl_vmas --tasks navigation --algos maddpg masac    # two of its algorithms there
marl benchmark run mpe --address auto             # on a running Ray cluster
marl benchmark report results/mine                # report.md, tables and figures
marl benchmark random matrix --episodes 10000      # random play's score per task (a suite's bounds)
marl benchmark tables --import results/mine       # keep its JSON in docs/results/, rewrite the doc tables
marl benchmark tables --check                     # exit 1 if a doc table differs from docs/results/
marl benchmark list                               # bundled suites
"""

from __future__ import annotations

import argparse
from typing import List, Optional

from marl.errors import MarlError


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of ``marl benchmark``."""
    p = argparse.ArgumentParser(
        prog="marl benchmark", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = p.add_subparsers(dest="what", required=True)
    run = sub.add_parser("run", help="run a suite (finished runs of an earlier launch are skipped)")
    run.add_argument("suite", help="a bundled suite name or a YAML file")
    run.add_argument("--seeds", nargs="+", type=int, default=None, help="run these seeds instead of the suite's")
    run.add_argument(
        "--tasks",
        nargs="+",
        default=None,
        help="run only these of the suite's tasks (<task> or <env>/<task>); keep them beside earlier results "
        "with 'marl benchmark tables --import <out> --merge'",
    )
    run.add_argument(
        "--algos",
        nargs="+",
        default=None,
        help="run only these of the suite's algorithms (their labels under 'algos'); merge as with --tasks",
    )
    run.add_argument("--out", default=None, help="output folder (default marl_benchmarks/<suite name>)")
    run.add_argument("--address", default=None, help="Ray cluster address ('auto', 'host:6379'); default: local Ray")
    run.add_argument("--no-retry-failed", action="store_true", help="leave runs that failed earlier as they are")
    run.add_argument("--no-report", action="store_true", help="do not write report.md at the end")
    run.add_argument("--quiet", action="store_true", help="no progress bar (a line per finished run only)")
    rep = sub.add_parser("report", help="write report.md (tables, curves, profiles) of an output folder")
    rep.add_argument("out", help="the output folder of 'marl benchmark run'")
    rep.add_argument("--reps", type=int, default=2000, help="bootstrap repetitions of the 95%% CIs (default 2000)")
    rep.add_argument(
        "--bounds",
        default=None,
        metavar="SUITE",
        help="take the aggregate's reference bounds from this suite (name or YAML) instead of <out>/suite.yaml",
    )
    rnd = sub.add_parser(
        "random", help="score of uniformly random play on every task of a suite (its bounds' 'random')"
    )
    rnd.add_argument("suite", help="a bundled suite name or a YAML file")
    rnd.add_argument("--episodes", type=int, default=1000, help="episodes per task (default 1000)")
    rnd.add_argument("--seed", type=int, default=0, help="seed of the env and the actions (default 0)")
    from marl.benchmarks.tables import add_arguments

    add_arguments(sub.add_parser("tables", help="write the result tables of README.md and docs/ from docs/results/"))
    sub.add_parser("list", help="list the bundled suites")
    return p


def _random(ns: argparse.Namespace) -> int:
    """``marl benchmark random <suite>``: one line per task, random play's mean return (and win rate)."""
    from marl.benchmarks.bounds import random_play
    from marl.benchmarks.suite import load_suite

    suite = load_suite(ns.suite)
    for family, e in suite.envs.items():
        for task in e["tasks"]:
            r = random_play(family, task, suite.env_kwargs(family, task), ns.episodes, ns.seed)
            win = f", win_rate {r['win_rate']:.4f}" if "win_rate" in r else ""
            print(
                f"{family}/{task}: random play over {r['episodes']} episodes (seed {ns.seed}): return {r['return']:.4f}{win}"
            )
    return 0


def main(argv: Optional[List[str]] = None) -> int:
    """Exit codes: 0 done, 1 some runs failed (tables: a block differs, with --check), 2 bad input (MarlError, via ``marl``), 130 Ctrl-C."""
    ns = build_parser().parse_args(argv)
    if ns.what == "list":
        from marl.benchmarks.suite import bundled_suites, load_suite

        for name in bundled_suites():
            print(f"{name:10s} {load_suite(name).description}")
        return 0
    if ns.what == "tables":
        from marl.benchmarks.tables import run

        return run(ns)
    if ns.what == "report":
        from marl.benchmarks.report import write_report

        if ns.reps < 1:
            raise MarlError(f"--reps must be >= 1, got {ns.reps}.")
        print(f"report written to {write_report(ns.out, reps=ns.reps, bounds_from=ns.bounds)}")
        return 0
    if ns.what == "random":
        return _random(ns)
    from marl.benchmarks.driver import benchmark
    from marl.errors import RunInterrupted

    try:
        summary = benchmark(
            ns.suite,
            ns.out,
            seeds=ns.seeds,
            tasks=ns.tasks,
            algos=ns.algos,
            address=ns.address,
            retry_failed=not ns.no_retry_failed,
            progress=not ns.quiet,
            report=not ns.no_report,
        )
    except RunInterrupted as e:
        print(f"[benchmark] {e}", flush=True)
        return 130
    print(
        f"[benchmark] {summary['done']}/{summary['runs']} runs done, {len(summary['failed'])} failed; "
        f"results: {summary['results']}" + (f"; report: {summary['report']}" if summary.get("report") else "")
    )
    for key, err in summary["failed"].items():
        print(f"[benchmark] failed {key}: {err}")
    return 1 if summary["failed"] else 0
