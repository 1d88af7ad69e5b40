"""``marl benchmark tables``: the result tables of README.md and docs/ written from the runner's JSON.

Every result table in the docs sits between two marker comments and is written from the JSON
that ``marl benchmark run`` and ``marl benchmark report`` wrote, kept in the repository under
``docs/results/<suite>/``::

    docs/results/<suite>/results.json      marl-eval results of every run (the runner's own output)
    docs/results/<suite>/provenance.json   versions, commit, hardware, wall-clock of the launch and of each run
    docs/results/<suite>/suite.yaml        the suite as run
    docs/results/<suite>/report.json       every number of the report (marl.benchmarks.report.build_report)

A block is ``<!-- results:<suite>:<what> -->`` ... ``<!-- /results -->``; on one line it is
inline text, over several lines a Markdown block. ``<what>`` is one of:

- ``task:<env>/<task>``: the task table (algo, runs, IQM, mean, median, reference flag);
- ``final:<env>/<task>``: IQM over runs of the last evaluation of each algorithm, with its CI;
- ``aggregate:<env>``: the aggregate over tasks of scores normalised by the suite's reference bounds;
- ``targets``: the time-to-target table;
- ``provenance``: where the numbers come from (commit, versions, hardware, wall-clock of runs);
- ``wall_clock`` (inline): the wall-clock of the launch, e.g. ``4 min 32 s``;
- ``value:<env>/<task>/<algo>/<iqm|mean|median>`` (inline): one number of a task table.

    marl benchmark tables                      # rewrite every block of README.md and docs/**/*.md
    marl benchmark tables --check              # exit 1 if a block differs from its JSON (CI, tests)
    marl benchmark tables --import marl_benchmarks/matrix   # keep a run folder's JSON, then rewrite

``--check`` also rebuilds each ``report.json`` from its ``results.json`` (same bootstrap
resamples and seed), so a report edited by hand or left stale fails too. Statistics:
Agarwal et al. 2021 (arXiv:2108.13264); protocol: Gorsane et al. 2022 (arXiv:2209.10485).
"""

from __future__ import annotations

import argparse
import difflib
import json
import re
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Dict, List, Mapping, Optional, Tuple

from marl.benchmarks.report import _ci, _flag, build_report, write_report
from marl.benchmarks.stats import fmt
from marl.benchmarks.targets import target_lines
from marl.errors import MarlError
from marl.rundir import write_json

__all__ = [
    "SuiteResults",
    "load_suite",
    "render",
    "duration",
    "rewrite_text",
    "doc_files",
    "rewrite_docs",
    "check_docs",
    "check_reports",
    "import_run",
    "add_arguments",
    "run",
    "main",
]

RESULTS_DIR = Path("docs") / "results"
KEPT_FILES = ("results.json", "provenance.json", "suite.yaml", "report.json")
# a suite name as marl-eval keeps it; <what> is kind[:arg]. Text like `<!-- results:<suite>:... -->` is no marker.
BLOCK = re.compile(r"<!-- results:(?P<suite>[a-z0-9_-]+):(?P<what>[\w:/.-]+) -->(?P<body>.*?)<!-- /results -->", re.S)
OPEN = re.compile(r"<!-- results:[a-z0-9_-]+:[\w:/.-]+ -->")
TASK_STATS = ("iqm", "mean", "median")


@dataclass
class SuiteResults:
    """The kept JSON of one suite: ``report`` (report.json) and ``provenance`` (provenance.json, or ``{}``)."""

    name: str
    folder: Path
    report: Dict[str, Any]
    provenance: Dict[str, Any]


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise MarlError(f"{path} is not readable JSON ({e}).") from e


def load_suite(root: Path, suite: str) -> SuiteResults:
    """The kept results of ``suite`` under ``<root>/docs/results/<suite>/``.

    Raises:
        MarlError: no such folder (naming the suites that have one) or no readable report.json.
    """
    folder = Path(root) / RESULTS_DIR / suite
    if not (folder / "report.json").is_file():
        kept = sorted(p.parent.name for p in (Path(root) / RESULTS_DIR).glob("*/report.json"))
        raise MarlError(
            f"No kept results of suite '{suite}': {folder / 'report.json'} is missing. Suites with "
            f"results: {', '.join(kept) or 'none'}. Keep a run folder's JSON with "
            f"`marl benchmark tables --import <run folder>`."
        )
    prov = folder / "provenance.json"
    return SuiteResults(suite, folder, _read_json(folder / "report.json"), _read_json(prov) if prov.is_file() else {})


# ------------------------------------------------------------------ what a block shows
def _choose(options: Mapping[str, Any], key: str, what: str, where: str = "") -> Any:
    if key not in options:
        where = f" in {where}" if where else ""
        raise MarlError(f"Unknown {what} '{key}'{where}; valid: {', '.join(sorted(options)) or 'none'}.")
    return options[key]


def _task(res: SuiteResults, arg: str) -> Tuple[str, Dict[str, Any]]:
    env, _, task = arg.partition("/")
    section = _choose(res.report["envs"], env, "env", f"suite '{res.name}'")
    return section["metric"], _choose(section["tasks"], task, "task", f"{res.name}/{env}")


def _task_table(res: SuiteResults, arg: str) -> str:
    """``| algo | runs | IQM [95% CI] | mean [95% CI] | median | flag |`` of one task, in the metric's units."""
    _, t = _task(res, arg)
    lines = ["| algo | runs | IQM [95% CI] | mean [95% CI] | median | flag |", "|---|---|---|---|---|---|"]
    for algo, row in t["algos"].items():
        refs = row["references"]
        flag = _flag(True if any(r["flag"] for r in refs) else (False if refs else None))
        lines.append(
            f"| {algo} | {row['runs']} | {fmt(row['iqm'])} {_ci(row['iqm_ci'])} | "
            f"{fmt(row['mean'])} {_ci(row['mean_ci'])} | {fmt(row['median'])} | {flag} |"
        )
    return "\n".join(lines)


def _final_table(res: SuiteResults, arg: str) -> str:
    """The last point of each sample-efficiency curve: env steps and IQM over runs with its 95% CI."""
    metric, t = _task(res, arg)
    lines = [f"| algo | runs | env steps | IQM {metric} of the last evaluation [95% CI] |", "|---|---|---|---|"]
    for algo, c in t["curves"].items():
        lines.append(
            f"| {algo} | {c['runs']} | {int(c['step_count'][-1]):,} | "
            f"{fmt(c['iqm'][-1])} {_ci([c['ci_low'][-1], c['ci_high'][-1]])} |"
        )
    return "\n".join(lines)


def _aggregate_table(res: SuiteResults, arg: str) -> str:
    """The aggregate over the env's tasks (scores normalised by reference bounds), with the tasks it used."""
    s = _choose(res.report["envs"], arg, "env", f"suite '{res.name}'")
    agg = s["aggregate"]
    if not agg["algos"]:
        return "No aggregate: " + "; ".join(s["notes"])
    lines = [
        f"Tasks: {', '.join(agg['tasks'])} ({s['metric']} normalised by reference bounds: 0 random play, 1 best known).",
        "",
        "| algo | runs x tasks | IQM [95% CI] | mean [95% CI] | median [95% CI] |",
        "|---|---|---|---|---|",
    ]
    for algo, r in agg["algos"].items():
        lines.append(
            f"| {algo} | {r['runs']} x {r['tasks']} | {fmt(r['iqm'])} {_ci(r['iqm_ci'])} | "
            f"{fmt(r['mean'])} {_ci(r['mean_ci'])} | {fmt(r['median'])} {_ci(r['median_ci'])} |"
        )
    return "\n".join(lines)


def _targets_table(res: SuiteResults, arg: str) -> str:
    """The report's time-to-target table (its rows only, without the section heading)."""
    lines = target_lines(res.report.get("targets", []))
    if not lines:
        raise MarlError(f"Suite '{res.name}' has no targets (its suite.yaml lists none).")
    return "\n".join(line for line in lines if line.startswith("|"))


def duration(seconds: float) -> str:
    """``52 s``, ``4 min 32 s`` or ``1 h 05 min`` (seconds rounded to whole ones)."""
    s = int(round(seconds))
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} min {s % 60} s"
    return f"{s // 3600} h {s % 3600 // 60:02d} min"


def _wall_clock(res: SuiteResults, arg: str) -> str:
    wall = res.provenance.get("wall_clock_s")
    if wall is None:
        raise MarlError(f"{res.folder / 'provenance.json'} has no wall_clock_s (the launch's wall-clock).")
    return duration(float(wall))


def _run_times(res: SuiteResults) -> List[str]:
    """``<env>/<task> <algo> <min>-<max> s`` per (task, algo), from the wall-clock in provenance.json of each run that
    finished (``status: done``; an interrupted or failed run's time says nothing about a run's length)."""
    times: Dict[Tuple[str, str], List[float]] = {}
    for key, run in res.provenance.get("runs", {}).items():
        parts = key.split("/")
        if len(parts) != 4:
            raise MarlError(f"{res.folder / 'provenance.json'}: run key {key!r} is not <env>/<task>/<algo>/seed_<k>.")
        env, task, algo, _seed = parts
        if run.get("wall_clock_s") is not None and run.get("status", "done") == "done":
            times.setdefault((f"{env}/{task}", algo), []).append(float(run["wall_clock_s"]))
    return [f"{task} {algo} {min(v):.0f}-{max(v):.0f} s" for (task, algo), v in sorted(times.items())]


def _provenance(res: SuiteResults, arg: str) -> str:
    """Where the block's numbers come from: the kept files, commit, versions, hardware and wall-clocks."""
    prov, rep = res.provenance, res.report
    folder = f"{RESULTS_DIR.as_posix()}/{res.name}/"
    lines = [
        f"- Source: `{folder}` (`results.json` and `provenance.json` as `marl benchmark run {res.name}` wrote "
        f"them, `report.json` from its report: {rep['reps']} bootstrap resamples, seed {rep['seed']})."
    ]
    lines += [f"- {line}" for line in rep["provenance"] if line.split(":")[0] in ("versions", "git commit", "time")]
    hw = prov.get("hardware") or {}
    if hw:
        lines.append(
            f"- hardware: {hw.get('cpu')}, {hw.get('cpus')} CPUs, {hw.get('memory_gib')} GiB, "
            f"{', '.join(hw.get('gpus') or []) or 'no GPU'}"
        )
    if prov.get("wall_clock_s") is not None:
        launches = 1 + len(prov.get("earlier_launches", []))
        what = "the launch" if launches == 1 else f"the {launches} launches (`--import --merge`), summed"
        runs_of = prov.get("runs", {})
        done = sum(r.get("status", "done") == "done" for r in runs_of.values())
        count = f"{len(runs_of)} runs" + (f", {done} finished" if done < len(runs_of) else "")
        lines.append(f"- wall-clock of {what}: {_wall_clock(res, '')} ({count})")
    runs = _run_times(res)
    if runs:
        lines.append("- wall-clock of a run (min-max over seeds): " + "; ".join(runs))
    return "\n".join(lines)


def _value(res: SuiteResults, arg: str) -> str:
    """One number of a task table: ``<env>/<task>/<algo>/<iqm|mean|median>``."""
    parts = arg.split("/")
    if len(parts) != 4:
        raise MarlError(f"value:{arg}: expected value:<env>/<task>/<algo>/<{'|'.join(TASK_STATS)}>.")
    _, t = _task(res, "/".join(parts[:2]))
    row = _choose(t["algos"], parts[2], "algo", f"{res.name}/{parts[0]}/{parts[1]}")
    return fmt(row[_choose({k: k for k in TASK_STATS}, parts[3], "statistic")])


RENDERERS: Dict[str, Callable[[SuiteResults, str], str]] = {
    "task": _task_table,
    "final": _final_table,
    "aggregate": _aggregate_table,
    "targets": _targets_table,
    "provenance": _provenance,
    "wall_clock": _wall_clock,
    "value": _value,
}


def render(res: SuiteResults, what: str) -> str:
    """The text of block ``what`` (``kind`` or ``kind:arg``) from the suite's kept JSON.

    Raises:
        MarlError: an unknown kind (naming the valid ones), env, task, algorithm or statistic.
    """
    kind, _, arg = what.partition(":")
    return _choose(RENDERERS, kind, "results block kind")(res, arg)


# ------------------------------------------------------------------ rewriting the docs
def _line(text: str, pos: int) -> int:
    return text.count("\n", 0, pos) + 1


def rewrite_text(text: str, load: Callable[[str], SuiteResults], where: str = "text") -> str:
    """``text`` with every results block rewritten (everything outside the blocks unchanged).

    Args:
        load: suite name -> its :class:`SuiteResults` (e.g. ``lambda s: load_suite(root, s)``).
        where: the file name used in error messages.

    Raises:
        MarlError: a marker without its ``<!-- /results -->``, or a block that cannot be rendered
            (naming the file and line).
    """
    out, pos = [], 0
    for m in BLOCK.finditer(text):
        stray = OPEN.search(text, pos, m.start()) or OPEN.search(text, m.start("body"), m.end("body"))
        if stray:
            raise MarlError(f"{where}:{_line(text, stray.start())}: a results marker without its <!-- /results -->.")
        try:
            body = render(load(m.group("suite")), m.group("what"))
        except MarlError as e:
            raise MarlError(f"{where}:{_line(text, m.start())}: {e}") from e
        block = "\n" in m.group("body")
        out += [text[pos : m.start("body")], f"\n{body}\n" if block else body]
        pos = m.end("body")
    stray = OPEN.search(text, pos)
    if stray:
        raise MarlError(f"{where}:{_line(text, stray.start())}: a results marker without its <!-- /results -->.")
    return "".join(out) + text[pos:]


def doc_files(root: Path) -> List[Path]:
    """README.md and every Markdown file under docs/ (the files that may hold results blocks)."""
    root = Path(root)
    return [p for p in [root / "README.md", *sorted((root / "docs").rglob("*.md"))] if p.is_file()]


def _rewritten(root: Path) -> Dict[Path, Tuple[str, str]]:
    """``{file: (current text, text with its blocks rewritten)}`` of every doc file with a block."""
    root = Path(root)
    if not (root / RESULTS_DIR).is_dir():
        raise MarlError(f"{root / RESULTS_DIR} not found: run from the repository root or pass --root.")
    cache: Dict[str, SuiteResults] = {}

    def load(suite: str) -> SuiteResults:
        if suite not in cache:
            cache[suite] = load_suite(root, suite)
        return cache[suite]

    out = {}
    for path in doc_files(root):
        text = path.read_text()
        if BLOCK.search(text) or OPEN.search(text):
            out[path] = (text, rewrite_text(text, load, str(path.relative_to(root))))
    return out


def rewrite_docs(root: Path) -> List[Path]:
    """Rewrite the results blocks of README.md and docs/**/*.md under ``root``; returns the changed files."""
    changed = []
    for path, (old, new) in _rewritten(root).items():
        if new != old:
            path.write_text(new)
            changed.append(path)
    return changed


def check_docs(root: Path) -> List[str]:
    """Unified diffs (one per file) of every block that differs from its JSON; empty when all agree."""
    diffs = []
    for path, (old, new) in _rewritten(root).items():
        if new != old:
            name = str(path.relative_to(root))
            diffs.append(
                "".join(
                    difflib.unified_diff(
                        old.splitlines(True), new.splitlines(True), f"{name} (now)", f"{name} (from docs/results)"
                    )
                )
            )
    return diffs


def _comparable(report: Mapping[str, Any]) -> Any:
    """A report without its figure file names (a rebuild without an output folder draws none)."""

    def strip(x: Any) -> Any:
        if isinstance(x, dict):
            return {k: strip(v) for k, v in x.items() if k not in ("figure", "figures")}
        return [strip(v) for v in x] if isinstance(x, list) else x

    return strip(json.loads(json.dumps(report)))


def check_reports(root: Path) -> List[str]:
    """Rebuild each kept report.json from its results.json, suite.yaml and provenance.json (the
    bootstrap resamples and seed it records); returns a line per suite whose report differs."""
    import yaml

    problems = []
    for folder in sorted(p.parent for p in (Path(root) / RESULTS_DIR).glob("*/report.json")):
        missing = [f for f in KEPT_FILES if not (folder / f).is_file()]
        if missing:
            problems.append(f"{folder}: missing {', '.join(missing)}")
            continue
        kept = _read_json(folder / "report.json")
        rebuilt = build_report(
            _read_json(folder / "results.json"),
            yaml.safe_load((folder / "suite.yaml").read_text()),
            _read_json(folder / "provenance.json"),
            None,
            kept["reps"],
            kept["seed"],
        )
        if _comparable(rebuilt) != _comparable(kept):
            problems.append(
                f"{folder}/report.json differs from the report of its results.json "
                f"(rewrite it: marl benchmark report <run folder>, then --import)"
            )
    return problems


def import_run(run_dir: Any, root: Path, merge: bool = False) -> Path:
    """Copy a ``marl benchmark run`` folder's JSON (results, provenance, suite, report) into
    ``<root>/docs/results/<suite>/``; writes the report first if the folder has none.

    With ``merge`` the folder's runs are added to the kept ones instead (:func:`merge_results`): a run of
    the same env, task, algorithm and seed replaces the kept one, the others stay, and the report is
    rebuilt from the merged results. That keeps a task run later (``marl benchmark run --tasks``) beside
    the tasks kept earlier.

    Raises:
        MarlError: the folder has no results.json or suite.yaml (not a finished run folder); with
            ``merge``, kept results of the suite that were made with another budget or protocol.
    """
    import yaml

    run = Path(run_dir)
    for name in ("results.json", "suite.yaml"):
        if not (run / name).is_file():
            raise MarlError(f"{run / name} not found: --import takes the output folder of `marl benchmark run`.")
    if not (run / "report.json").is_file():
        write_report(run)
    suite = str(yaml.safe_load((run / "suite.yaml").read_text())["name"])
    dest = Path(root) / RESULTS_DIR / suite
    if merge and (dest / "results.json").is_file():
        merge_results(run, dest)
        return dest
    dest.mkdir(parents=True, exist_ok=True)
    for name in KEPT_FILES:
        if (run / name).is_file():
            shutil.copyfile(run / name, dest / name)
    return dest


_PROTOCOL_KEYS = ("budget", "evaluation")  # suite.yaml keys that must agree for two launches to share a table


def merge_results(run: Path, dest: Path) -> None:
    """Add the runs of the run folder ``run`` to the kept results in ``dest`` (``--import --merge``).

    results.json: the union of both, by env/task/algorithm/seed (``run``'s win). provenance.json: the
    newer launch's, with ``runs`` merged, ``wall_clock_s`` the sum of both launches and the earlier
    launches' command, commit, time and wall-clock under ``earlier_launches``. suite.yaml: the newer
    one. report.json: rebuilt with the kept report's bootstrap resamples and seed.

    Raises:
        MarlError: the two suite.yaml differ in budget or evaluation protocol (naming the key).
    """
    import yaml

    new_suite = yaml.safe_load((run / "suite.yaml").read_text()) or {}
    old_suite = (yaml.safe_load((dest / "suite.yaml").read_text()) or {}) if (dest / "suite.yaml").is_file() else {}
    for k in _PROTOCOL_KEYS:
        if k in old_suite and old_suite.get(k) != new_suite.get(k):
            raise MarlError(
                f"Cannot merge {run} into {dest}: suite key {k!r} is {new_suite.get(k)!r} there and "
                f"{old_suite.get(k)!r} in the kept results; their numbers could not share one table. "
                f"Import without --merge to replace the kept results."
            )
    data = _read_json(dest / "results.json")
    for env, tasks in _read_json(run / "results.json").items():
        for task, algos in tasks.items():
            for algo, seeds in algos.items():
                data.setdefault(env, {}).setdefault(task, {}).setdefault(algo, {}).update(seeds)
    old_prov = _read_json(dest / "provenance.json") if (dest / "provenance.json").is_file() else {}
    new_prov = _read_json(run / "provenance.json") if (run / "provenance.json").is_file() else {}
    launch = ("command", "git_commit", "time", "wall_clock_s")
    prov = {
        **new_prov,
        "runs": {**old_prov.get("runs", {}), **new_prov.get("runs", {})},
        "earlier_launches": list(old_prov.get("earlier_launches", []))
        + [{k: old_prov[k] for k in launch if k in old_prov}],
    }
    walls = [p.get("wall_clock_s") for p in (old_prov, new_prov)]
    if all(w is not None for w in walls):
        prov["wall_clock_s"] = round(sum(float(w) for w in walls), 1)
    kept = _read_json(dest / "report.json") if (dest / "report.json").is_file() else {"reps": 2000, "seed": 0}
    report = build_report(data, new_suite, prov, None, kept["reps"], kept["seed"])
    write_json(dest / "results.json", data)
    write_json(dest / "provenance.json", prov)
    write_json(dest / "report.json", report)
    shutil.copyfile(run / "suite.yaml", dest / "suite.yaml")


# ------------------------------------------------------------------ command line
def build_parser(prog: str = "marl benchmark tables") -> argparse.ArgumentParser:
    """The options of ``marl benchmark tables`` (also ``python -m marl.benchmarks.tables``)."""
    p = argparse.ArgumentParser(
        prog=prog, description="Rewrite the results blocks of README.md and docs/ from docs/results/<suite>/*.json."
    )
    add_arguments(p)
    return p


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--check",
        action="store_true",
        help="change nothing; exit 1 if a block or a kept report.json differs from what its JSON gives",
    )
    p.add_argument("--root", default=".", help="the repository root (default: the current folder)")
    p.add_argument(
        "--import",
        dest="run_dir",
        default=None,
        metavar="RUN_DIR",
        help="first keep this `marl benchmark run` folder's JSON in docs/results/<suite>/",
    )
    p.add_argument(
        "--merge",
        action="store_true",
        help="with --import: add the folder's runs to the kept ones (a run of the same task, algorithm and "
        "seed is replaced) instead of replacing them all; for a task run later with 'marl benchmark run --tasks'",
    )


def run(ns: argparse.Namespace) -> int:
    """Exit code 0: blocks written (or, with --check, all agree); 1: --check found differences."""
    root = Path(ns.root)
    if ns.run_dir:
        print(f"{'merged into' if ns.merge else 'kept'} {import_run(ns.run_dir, root, merge=ns.merge)}")
    elif ns.merge:
        raise MarlError("--merge goes with --import <run folder> (it adds that folder's runs to the kept ones).")
    if not ns.check:
        changed = rewrite_docs(root)
        print(f"rewrote {', '.join(str(p.relative_to(root)) for p in changed)}" if changed else "all blocks up to date")
        return 0
    problems = check_docs(root) + check_reports(root)
    for p in problems:
        print(p)
    print(f"{len(problems)} difference(s) from docs/results" if problems else "every block agrees with docs/results")
    return 1 if problems else 0


def main(argv: Optional[List[str]] = None) -> int:
    """``python -m marl.benchmarks.tables [--check] [--root DIR] [--import RUN_DIR]``; exit code 2 on
    bad input (a :class:`MarlError`, printed), as ``marl benchmark tables``."""
    ns = build_parser("python -m marl.benchmarks.tables").parse_args(argv)
    try:
        return run(ns)
    except MarlError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
