"""The report of a benchmark suite: tables, figures and flags from a ``marl benchmark run`` folder.

:func:`write_report` reads the run folder (``results.json`` in marl-eval's format, the resolved
suite and ``provenance.json``) and writes a Markdown report, ``report.json`` with the number of
every table, and PNG figures beside them (:mod:`marl.benchmarks.figures`, one style). Per env: an
aggregate over tasks of scores normalised by the suite's reference bounds (:mod:`marl.benchmarks.bounds`:
0 is random play, 1 the best known score; IQM, mean, median with 95% stratified-bootstrap CIs),
performance profiles and the probability of improvement of every ordered pair of algorithms; per
task: a table of raw scores with the published references beside ours and a flag where they
disagree, and sample-efficiency curves. The statistics are :mod:`marl.benchmarks.stats`
(Agarwal et al. 2021, arXiv:2108.13264, through rliable; the protocol is Gorsane et al. 2022,
arXiv:2209.10485). :func:`validate_marl_eval` (:mod:`marl.benchmarks.marl_eval_format`, re-exported here) checks the
results format; the runner calls it before writing ``results.json``.

rliable and matplotlib are imported inside the functions: the runner imports this module for
:func:`validate_marl_eval`, and both take seconds to import.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

import numpy as np
import yaml

from marl.benchmarks import figures as figures_mod
from marl.benchmarks import stats
from marl.benchmarks.bounds import bounds_of_env, check_bounds
from marl.benchmarks.marl_eval_format import is_number, validate_marl_eval
from marl.benchmarks.stats import ABSOLUTE, fmt
from marl.benchmarks.targets import target_lines, time_to_target
from marl.errors import MarlError

__all__ = ["validate_marl_eval", "write_report", "build_report", "render_markdown"]

_FILE_SAFE = re.compile(r"[^A-Za-z0-9_.-]")
_SCORE_SOURCE = {
    ABSOLUTE: "absolute metric (the best evaluation's policy re-evaluated over absolute_factor x the episodes)",
    "last_step": "last evaluation (runs not finished)",
}


# ------------------------------------------------------------------ reading the run folder
def _read_folder(out: Path) -> Tuple[Dict[str, Any], Dict[str, Any], Dict[str, Any]]:
    """``(results, suite, provenance)`` of a run folder; suite and provenance may be absent (``{}``)."""
    path = out / "results.json"
    if not path.is_file():
        raise MarlError(
            f"{path} not found: there are no benchmark results to report. "
            f"Run `marl benchmark run <suite> --out {out}` first."
        )
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise MarlError(
            f"{path} is not readable JSON ({e}). Run `marl benchmark run <suite> --out {out}` again to rewrite it."
        ) from e
    validate_marl_eval(data)
    suite, provenance = {}, {}
    if (out / "suite.yaml").is_file():
        suite = yaml.safe_load((out / "suite.yaml").read_text()) or {}
    if (out / "provenance.json").is_file():
        try:
            provenance = json.loads((out / "provenance.json").read_text())
        except ValueError:
            provenance = {"note": "provenance.json is not readable JSON"}
    return data, suite if isinstance(suite, dict) else {}, provenance if isinstance(provenance, dict) else {}


def _provenance_lines(prov: Mapping[str, Any]) -> List[str]:
    """A short provenance block: versions, commit, hardware, wall-clock, then other scalar keys."""
    lines = []
    versions = [
        f"{name} {prov[key]}"
        for key, name in (
            ("marl_version", "marl"),
            ("ray_version", "Ray"),
            ("torch_version", "torch"),
            ("python", "Python"),
        )
        if prov.get(key)
    ]
    if versions:
        lines.append("versions: " + ", ".join(versions))
    if prov.get("git_commit"):
        lines.append(f"git commit: {prov['git_commit']}")
    hw = prov.get("hardware")
    if isinstance(hw, dict):
        lines.append("hardware: " + ", ".join(f"{k} {_short(v)}" for k, v in hw.items() if v not in (None, "")))
    elif hw:
        lines.append(f"hardware: {hw}")
    wall = prov.get("wall_clock_s")
    if is_number(wall):
        lines.append(f"wall-clock: {float(wall):.0f} s ({float(wall) / 3600:.2f} h)")
    shown = {"marl_version", "ray_version", "torch_version", "python", "git_commit", "hardware", "wall_clock_s"}
    for key, value in prov.items():
        if key == "runs" and isinstance(value, dict):
            lines.append(f"runs: {len(value)} (status and full config of each in provenance.json)")
        elif key == "earlier_launches" and isinstance(value, list):
            lines.append(f"earlier launches merged in: {len(value)} (command and commit of each in provenance.json)")
        elif key not in shown and isinstance(value, (str, int, float)):
            lines.append(f"{key}: {value}")
    return lines


def _short(value: Any) -> str:
    if isinstance(value, list):
        return "[" + ", ".join(map(str, value)) + "]" if value else "none"
    return str(value)


# ------------------------------------------------------------------ computing the report
def build_report(
    data: Mapping[str, Any],
    suite: Mapping[str, Any],
    provenance: Mapping[str, Any],
    out: Optional[Path] = None,
    reps: int = 2000,
    seed: int = 0,
) -> Dict[str, Any]:
    """Every number of the report as a JSON-ready dict (what ``report.json`` holds).

    Args:
        data: results in marl-eval format (already checked by :func:`validate_marl_eval`).
        suite: the resolved suite (``name``, ``references``, ``targets``, ``bounds``); provenance: as
            written by the runner.
        out: folder for the PNG figures (``None``: no figures).
        reps, seed: bootstrap resamples and numpy seed (every CI is reproducible from them).

    Returns:
        ``{"suite", "reps", "seed", "confidence", "provenance": [lines], "envs": {env: section}}``;
        a section is ``{"metric", "tasks": {task: {"algos": {algo: row}, "skipped", "curves",
        "figure"}}, "normalisation": {task: bounds entry}, "aggregate", "probability_of_improvement",
        "figures", "references", "notes"}``.

    Raises:
        MarlError: a bad ``bounds`` entry (:func:`marl.benchmarks.bounds.check_bounds`), naming the
            suite, the task and the key.
    """
    name = str(suite.get("name") or (out.name if out else "benchmark"))
    bounds = check_bounds(suite.get("bounds"), name)
    refs = [r for r in suite.get("references") or [] if isinstance(r, dict)]
    report = {
        "suite": name,
        "reps": reps,
        "seed": seed,
        "confidence": stats.CONFIDENCE,
        "provenance": _provenance_lines(provenance),
        "envs": {},
    }
    for env in sorted(data):
        env_refs = [r for r in refs if str(r.get("env", "")).lower() == env]
        report["envs"][env] = _env_section(env, data[env], env_refs, bounds_of_env(bounds, env), out, reps, seed)
    known = set(data)
    report["unmatched_references"] = [_ref_fields(r) for r in refs if str(r.get("env", "")).lower() not in known]
    report["targets"] = time_to_target(data, [t for t in suite.get("targets") or [] if isinstance(t, dict)])
    return report


def _env_section(
    env: str,
    tasks: Mapping[str, Any],
    refs: List[Dict[str, Any]],
    bounds: Mapping[str, Mapping[str, Any]],
    out: Optional[Path],
    reps: int,
    seed: int,
) -> Dict[str, Any]:
    metric = stats.env_metric(tasks)
    section: Dict[str, Any] = {"metric": metric, "tasks": {}, "figures": {}, "notes": [], "references": []}
    # one colour, marker and dash per algorithm in every figure of the env
    look = figures_mod.looks({a for algos in tasks.values() for a in algos})
    usable = {t: b for t, b in bounds.items() if b["metric"] == metric}
    section["notes"] += [
        f"Bounds of {t} are for '{b['metric']}', the tables' metric is '{metric}': {t} is left out of the aggregate."
        for t, b in bounds.items()
        if t in tasks and t not in usable
    ]
    raw = {}
    for task in sorted(tasks):
        scores = stats.task_scores(env, task, tasks[task], metric)
        raw[task] = scores.scores
        b = usable.get(task)
        section["tasks"][task] = _task_section(scores, reps, seed, out, look, (b["random"], b["best"]) if b else None)
    matrices = _aggregate(section, raw, usable, reps, seed)
    if out is not None and matrices:
        section["figures"] = _env_figures(env, matrices, section, out, reps, seed, look)
    _attach_references(env, tasks, refs, section, reps, seed)
    return section


def _aggregate(
    section: Dict[str, Any],
    raw: Mapping[str, Mapping[str, np.ndarray]],
    bounds: Mapping[str, Mapping[str, Any]],
    reps: int,
    seed: int,
) -> Dict[str, np.ndarray]:
    """Fill the section's ``normalisation``, ``aggregate`` and ``probability_of_improvement`` over the
    tasks with reference bounds and a scored run of every algorithm; returns the score matrices."""
    normalised, missing = stats.reference_normalise(
        {t: s for t, s in raw.items() if s}, {t: (b["random"], b["best"]) for t, b in bounds.items()}
    )
    section["normalisation"] = {t: dict(bounds[t]) for t in normalised}
    if missing:
        section["notes"].append(
            f"Left out of the aggregate, no reference bounds (random play and best known score) in the suite: "
            f"{', '.join(missing)}."
        )
    matrices, used, _ = stats.score_matrices(normalised)
    section["aggregate"] = {
        "tasks": used,
        "left_out": [t for t in sorted(raw) if t not in used],  # without bounds or without a scored run
        "algos": stats.aggregate_statistics(matrices, reps, seed),
    }
    section["probability_of_improvement"] = stats.probability_of_improvement(matrices, reps, seed)
    if not matrices:
        section["notes"].append("No aggregate: no task has reference bounds and a scored run of every algorithm.")
    return matrices


def _task_section(
    scores: stats.TaskScores,
    reps: int,
    seed: int,
    out: Optional[Path],
    look: Mapping[str, Mapping[str, Any]],
    bounds: Optional[Tuple[float, float]],
) -> Dict[str, Any]:
    rows = stats.task_statistics(scores.scores, reps, seed)
    for algo, row in rows.items():
        row.update(
            seeds=scores.seeds[algo],
            scores=[float(s) for s in scores.scores[algo]],
            score_source=scores.source[algo],
            references=[],
        )
    curves = {}
    for algo, (x, y) in scores.curves.items():
        iqm, lo, hi = stats.curve_statistics(y, reps, seed)
        curves[algo] = {
            "step_count": x.tolist(),
            "runs": int(y.shape[0]),
            "iqm": iqm.tolist(),
            "ci_low": lo.tolist(),
            "ci_high": hi.tolist(),
        }
    figure = None
    if out is not None and curves:
        fig = figures_mod.curves_figure(scores.env, scores.task, scores.metric, curves, look, bounds)
        figure = figures_mod.save(fig, out / _file("curves", scores.env, scores.task))
    return {"algos": rows, "skipped": scores.skipped, "curves": curves, "figure": figure}


def _ref_fields(ref: Mapping[str, Any]) -> Dict[str, Any]:
    return {k: ref.get(k) for k in ("env", "task", "algo", "metric", "value", "ci", "source", "budget", "note")}


def _attach_references(
    env: str, tasks: Mapping[str, Any], refs: List[Dict[str, Any]], section: Dict[str, Any], reps: int, seed: int
) -> None:
    """Compare each reference of the env with our scores of its (task, algo, metric).

    A reference on the env's table metric goes into its task row; one on another metric (a
    return where the table shows win rates) is compared with scores of that metric, computed
    here, and listed in the env's reference notes with the unmatched ones.
    """
    for ref in refs:
        entry = _ref_fields(ref)
        task, algo, metric = (str(ref.get(k, "")).lower() for k in ("task", "algo", "metric"))
        row = section["tasks"].get(task, {}).get("algos", {}).get(algo)
        if task not in tasks or algo not in tasks[task]:
            entry.update(flag=None, why=f"no run of {algo} on {task} in these results")
        elif metric == section["metric"]:
            entry.update(stats.reference_check(ref, row))
            if row is not None:
                entry.update(ours_iqm=row["iqm"], ours_ci=row["iqm_ci"])
                row["references"].append(entry)
                continue
        else:
            other = stats.task_scores(env, task, {algo: tasks[task][algo]}, metric)
            ours = stats.task_statistics(other.scores, reps, seed).get(algo)
            if ours is None:
                entry.update(flag=None, why=f"our runs have no '{metric}'")
            else:
                entry.update(stats.reference_check(ref, ours), ours_iqm=ours["iqm"], ours_ci=ours["iqm_ci"])
        section["references"].append(entry)


# ------------------------------------------------------------------ figures
def _file(*parts: str) -> str:
    return "_".join(_FILE_SAFE.sub("_", p) for p in parts) + ".png"


def _env_figures(
    env: str,
    matrices: Mapping[str, np.ndarray],
    section: Mapping[str, Any],
    out: Path,
    reps: int,
    seed: int,
    look: Mapping[str, Mapping[str, Any]],
) -> Dict[str, str]:
    """Aggregate intervals, performance profiles and (two or more algorithms) probability of improvement."""
    tasks = section["aggregate"]["tasks"]
    figures = {
        "aggregate": figures_mod.save(
            figures_mod.aggregate_figure(env, section["aggregate"]["algos"], tasks, look), out / _file("aggregate", env)
        )
    }
    scores = np.concatenate([m.ravel() for m in matrices.values()])
    tau = np.linspace(min(0.0, float(scores.min())), max(1.0, float(scores.max())), 101)
    profiles, profile_cis = stats.performance_profiles(matrices, tau, reps, seed)
    fig = figures_mod.profile_figure(env, tau, profiles, profile_cis, tasks, look)
    figures["profile"] = figures_mod.save(fig, out / _file("profile", env))
    poi = section["probability_of_improvement"]
    if poi:
        fig = figures_mod.improvement_figure(env, poi, look)
        figures["probability_of_improvement"] = figures_mod.save(fig, out / _file("improvement", env))
    return figures


# ------------------------------------------------------------------ Markdown
def _ci(values: Optional[Sequence[float]]) -> str:
    return f"[{fmt(values[0])}, {fmt(values[1])}]" if values else ""


def _flag(flag: Optional[bool]) -> str:
    return {True: "**flag**", False: "ok", None: "n/a"}[flag]


def _ref_cell(ref: Mapping[str, Any]) -> str:
    ci = f" {_ci(ref['ci'])}" if ref.get("ci") else ""
    text = f"{fmt(ref.get('value'))}{ci} ({ref.get('source') or 'no source'}; {ref.get('budget') or 'budget n/a'})"
    return text.replace("|", "\\|")  # a '|' in a source would split the table cell


def _task_lines(env: str, task: str, t: Mapping[str, Any], metric: str) -> List[str]:
    lines = [f"### {env} / {task}", ""]
    by_source: Dict[str, List[str]] = {}
    for algo, row in t["algos"].items():
        by_source.setdefault(row["score_source"], []).append(algo)
    for source, algos in by_source.items():
        lines.append(f"Score of a run ({metric}, mean over episodes): {_SCORE_SOURCE[source]} for {', '.join(algos)}.")
    lines += [
        "",
        "| algo | runs | IQM [95% CI] | mean [95% CI] | median | reference (value, source, budget) | flag |",
        "|---|---|---|---|---|---|---|",
    ]
    for algo, row in t["algos"].items():
        refs = row["references"]
        cell = "; ".join(_ref_cell(r) for r in refs) or "n/a"
        flag = _flag(True if any(r["flag"] for r in refs) else (False if refs else None))
        lines.append(
            f"| {algo} | {row['runs']} | {fmt(row['iqm'])} {_ci(row['iqm_ci'])} | "
            f"{fmt(row['mean'])} {_ci(row['mean_ci'])} | {fmt(row['median'])} | {cell} | {flag} |"
        )
    if not t["algos"]:
        lines.append("| (no scored run) | 0 | | | | | |")
    lines.append("")
    for algo, row in t["algos"].items():
        for r in row["references"]:
            if r["flag"]:
                note = f" Note: {str(r['note']).rstrip('.')}." if r.get("note") else ""
                lines.append(f"- Flagged, {algo}: {r['why']} ({r.get('source')}, {r.get('budget')}).{note}")
    lines += [f"- Skipped run {s}." for s in t["skipped"]]
    if t["figure"]:
        lines += ["", f"![{env} / {task}: sample-efficiency curves]({t['figure']})"]
    return lines + [""]


def _bounds_line(t: str, b: Mapping[str, Any]) -> str:
    return f"{t}: random {fmt(b['random'])} ({b['random_source']}), best {fmt(b['best'])} ({b['best_source']})"


def _aggregate_lines(env: str, s: Mapping[str, Any]) -> List[str]:
    agg = s["aggregate"]
    lines = [f"### {env}: aggregate over tasks ({s['metric']} normalised by reference bounds)", ""]
    notes = [f"- {n}" for n in s["notes"]]
    if not agg["algos"]:
        return lines + notes + [""]
    lines += [
        f"- Tasks: {', '.join(agg['tasks'])}."
        + (f" Left out: {', '.join(agg['left_out'])}." if agg["left_out"] else ""),
        "- Normalised score: (score - random) / (best - random); 0 is random play, 1 the best known score. Bounds: "
        + "; ".join(_bounds_line(t, s["normalisation"][t]).replace("|", "\\|") for t in agg["tasks"])
        + ".",
        *notes,
        "",
        "| algo | runs x tasks | IQM [95% CI] | mean [95% CI] | median [95% CI] |",
        "|---|---|---|---|---|",
    ]
    for algo, r in agg["algos"].items():
        lines.append(
            f"| {algo} | {r['runs']} x {r['tasks']} | {fmt(r['iqm'])} {_ci(r['iqm_ci'])} | "
            f"{fmt(r['mean'])} {_ci(r['mean_ci'])} | {fmt(r['median'])} {_ci(r['median_ci'])} |"
        )
    figs = s["figures"]
    lines.append("")
    for key, caption in (
        ("aggregate", "aggregate IQM, mean and median with 95% CIs"),
        ("profile", "performance profiles"),
    ):
        if key in figs:
            lines.append(f"![{env}: {caption}]({figs[key]})")
    return lines + [""]


def _improvement_lines(env: str, s: Mapping[str, Any]) -> List[str]:
    lines = [f"### {env}: probability of improvement", ""]
    poi = s["probability_of_improvement"]
    if not poi:
        n = len(s["aggregate"]["algos"])
        why = "only one algorithm" if n == 1 else "no aggregate (see above)"
        return lines + [f"Not computed: {why}; it compares two algorithms.", ""]
    lines += ["| X | Y | P(X > Y) [95% CI] |", "|---|---|---|"]
    lines += [f"| {p['x']} | {p['y']} | {fmt(p['p'])} {_ci(p['ci'])} |" for p in poi]
    if "probability_of_improvement" in s["figures"]:
        lines += ["", f"![{env}: probability of improvement]({s['figures']['probability_of_improvement']})"]
    return lines + [""]


def _reference_lines(env: str, s: Mapping[str, Any]) -> List[str]:
    if not s["references"]:
        return []
    lines = [f"### {env}: other references", ""]
    for r in s["references"]:
        ours = f"ours {fmt(r.get('ours_iqm'))} {_ci(r.get('ours_ci'))}; " if r.get("ours_iqm") is not None else ""
        lines.append(
            f"- {r['task']} / {r['algo']} ({r['metric']}): published {_ref_cell(r)}; {ours}"
            f"{_flag(r['flag'])}: {r['why']}."
        )
    return lines + [""]


def render_markdown(report: Mapping[str, Any]) -> str:
    """The Markdown text of a report built by :func:`build_report` (figure links relative to its folder)."""
    lines = [f"# Benchmark report: {report['suite']}", "", "## Provenance", ""]
    lines += [f"- {line}" for line in report["provenance"]] or ["- (no provenance.json)"]
    lines += [
        "",
        "## Method",
        "",
        f"Score of a run: the mean over episodes of the env's metric (win rate where the env has one, else "
        f"team return) in its absolute metric (Gorsane et al. 2022, arXiv:2209.10485). IQM is the 25% trimmed "
        f"mean over runs (equal to the mean below 4 runs). 95% CIs: stratified percentile bootstrap, "
        f"{report['reps']} resamples, numpy seed {report['seed']} (Agarwal et al. 2021, arXiv:2108.13264, "
        f"rliable). Aggregates use scores normalised per task by the suite's reference bounds, "
        f"(score - random) / (best - random): 0 is random play, 1 the best known score; tasks without bounds "
        f"are left out of them. "
        f"Reference flag: with a published CI, our IQM outside it; without one, the published value outside "
        f"our IQM CI.",
        "",
    ]
    if not report["envs"]:
        lines += ["No run has reported an evaluation yet.", ""]
    for env, s in report["envs"].items():
        lines += [f"## {env} (metric: {s['metric']})", ""]
        lines += _aggregate_lines(env, s)
        for task, t in s["tasks"].items():
            lines += _task_lines(env, task, t, s["metric"])
        lines += _improvement_lines(env, s) + _reference_lines(env, s)
    lines += target_lines(report.get("targets", []))
    if report.get("unmatched_references"):
        lines += ["## References without results", ""]
    for r in report.get("unmatched_references", []):
        lines.append(
            f"- Reference not matched (no env '{r['env']}' in the results): {r['task']} / {r['algo']} {_ref_cell(r)}."
        )
    return "\n".join(lines).rstrip() + "\n"


def write_report(out_dir: Any, reps: int = 2000, seed: int = 0, bounds_from: Optional[str] = None) -> Path:
    """Write the report of a benchmark run folder; returns the path of the Markdown file.

    Reads ``results.json`` (marl-eval format), the resolved suite (its ``name``, ``references``,
    ``targets`` and ``bounds``) and ``provenance.json`` from ``out_dir``; writes there the Markdown
    report, ``report.json`` (every number of every table, see :func:`build_report`) and the PNG figures
    (``curves_<env>_<task>.png``, ``aggregate_<env>.png``, ``profile_<env>.png``,
    ``improvement_<env>.png``). Statistics: Agarwal et al. 2021 (arXiv:2108.13264) via rliable;
    protocol: Gorsane et al. 2022 (arXiv:2209.10485); normalisation: :mod:`marl.benchmarks.bounds`.

    Args:
        out_dir: the folder of ``marl benchmark run --out``.
        reps: bootstrap resamples per confidence interval (2000 takes seconds per env).
        seed: numpy seed of every bootstrap (the same inputs give the same report).
        bounds_from: a suite (bundled name or YAML path) whose ``bounds`` replace those of the folder's
            ``suite.yaml`` (a folder run before the suite had bounds); ``None``: the folder's.

    Raises:
        MarlError: ``reps`` below 1, or ``results.json`` is missing (run ``marl benchmark run`` first), unreadable, or
            not in the format :func:`validate_marl_eval` checks; a bad ``bounds`` entry or ``bounds_from`` suite.
    """
    if isinstance(reps, bool) or not isinstance(reps, int) or reps < 1:
        raise MarlError(f"reps (bootstrap resamples) must be an integer >= 1, got {reps!r}.")
    out = Path(out_dir)
    data, suite, provenance = _read_folder(out)
    if bounds_from is not None:
        from marl.benchmarks.suite import load_suite

        suite = {**suite, "bounds": load_suite(bounds_from).bounds}
    report = build_report(data, suite, provenance, out, reps, seed)
    (out / "report.json").write_text(json.dumps(report, indent=2) + "\n")
    path = out / "report.md"
    path.write_text(render_markdown(report))
    return path
