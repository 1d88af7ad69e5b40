"""The report of a benchmark suite: tables, figures and flags from a ``marl benchmark run`` folder.

:func:`write_report` reads the run folder (``results.json`` in marl-eval's format, the resolved
suite and ``provenance.json``) and writes a Markdown report, ``report.json`` with the number of
every table, and PNG figures beside them. Per env: an aggregate
over tasks of min-max normalised scores (IQM, mean, median with 95% stratified-bootstrap CIs),
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

from marl.benchmarks import stats
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
        suite: the resolved suite (``name``, ``references``); provenance: as written by the runner.
        out: folder for the PNG figures (``None``: no figures).
        reps, seed: bootstrap resamples and numpy seed (every CI is reproducible from them).

    Returns:
        ``{"suite", "reps", "seed", "confidence", "provenance": [lines], "envs": {env: section}}``;
        a section is ``{"metric", "tasks": {task: {"algos": {algo: row}, "skipped", "curves",
        "figure"}}, "normalisation": {task: [min, max]}, "aggregate", "probability_of_improvement",
        "figures", "references", "notes"}``.
    """
    refs = [r for r in suite.get("references") or [] if isinstance(r, dict)]
    report = {
        "suite": str(suite.get("name") or (out.name if out else "benchmark")),
        "reps": reps,
        "seed": seed,
        "confidence": stats.CONFIDENCE,
        "provenance": _provenance_lines(provenance),
        "envs": {},
    }
    for env in sorted(data):
        env_refs = [r for r in refs if str(r.get("env", "")).lower() == env]
        report["envs"][env] = _env_section(env, data[env], env_refs, out, reps, seed)
    known = set(data)
    report["unmatched_references"] = [_ref_fields(r) for r in refs if str(r.get("env", "")).lower() not in known]
    report["targets"] = time_to_target(data, [t for t in suite.get("targets") or [] if isinstance(t, dict)])
    return report


def _env_section(
    env: str, tasks: Mapping[str, Any], refs: List[Dict[str, Any]], out: Optional[Path], reps: int, seed: int
) -> Dict[str, Any]:
    metric = stats.env_metric(tasks)
    section: Dict[str, Any] = {"metric": metric, "tasks": {}, "figures": {}, "notes": [], "references": []}
    # one colour per algorithm in every figure of the env
    colors = {a: f"C{i % 10}" for i, a in enumerate(sorted({a for algos in tasks.values() for a in algos}))}
    raw = {}
    for task in sorted(tasks):
        scores = stats.task_scores(env, task, tasks[task], metric)
        raw[task] = scores.scores
        section["tasks"][task] = _task_section(scores, reps, seed, out, colors)
    normalised, bounds = stats.min_max_normalise({t: s for t, s in raw.items() if s})
    section["normalisation"] = {t: list(b) for t, b in bounds.items()}
    matrices, used, _ = stats.score_matrices(normalised)
    left_out = [t for t in sorted(tasks) if t not in used]  # tasks with no scored run at all are left out too
    section["aggregate"] = {
        "tasks": used,
        "left_out": left_out,
        "algos": stats.aggregate_statistics(matrices, reps, seed),
    }
    section["probability_of_improvement"] = stats.probability_of_improvement(matrices, reps, seed)
    if not matrices:
        section["notes"].append("No aggregate: no task has a scored run of every algorithm.")
    if out is not None and matrices:
        section["figures"] = _env_figures(env, matrices, section, out, reps, seed, colors)
    _attach_references(env, tasks, refs, section, reps, seed)
    return section


def _task_section(
    scores: stats.TaskScores, reps: int, seed: int, out: Optional[Path], colors: Mapping[str, str]
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
        figure = _plot_curves(scores.env, scores.task, scores.metric, curves, out, colors)
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
def _pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")  # files only: no display, and no GUI backend in a headless run
    import matplotlib.pyplot as plt

    return plt


def _file(*parts: str) -> str:
    return "_".join(_FILE_SAFE.sub("_", p) for p in parts) + ".png"


def _save(fig: Any, path: Path) -> None:
    plt = _pyplot()
    try:
        fig.savefig(path, dpi=110, bbox_inches="tight")
    finally:
        plt.close(fig)


def _plot_curves(
    env: str, task: str, metric: str, curves: Mapping[str, Mapping[str, Any]], out: Path, colors: Mapping[str, str]
) -> str:
    """Sample-efficiency curves of one task: IQM over runs per evaluation with its 95% CI band."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(6, 4))
    for algo, c in curves.items():
        marker = "o" if len(c["step_count"]) < 3 else None  # one or two points draw no visible line
        ax.plot(
            c["step_count"],
            c["iqm"],
            label=f"{algo} ({c['runs']} run{'s' if c['runs'] != 1 else ''})",
            marker=marker,
            color=colors[algo],
        )
        ax.fill_between(c["step_count"], c["ci_low"], c["ci_high"], color=colors[algo], alpha=0.2)
    ax.set(xlabel="env steps", ylabel=f"{metric} (IQM over runs, 95% CI)", title=f"{env} / {task}")
    ax.grid(alpha=0.3)
    ax.legend()
    name = _file("curves", env, task)
    _save(fig, out / name)
    return name


def _env_figures(
    env: str,
    matrices: Mapping[str, np.ndarray],
    section: Mapping[str, Any],
    out: Path,
    reps: int,
    seed: int,
    colors: Mapping[str, str],
) -> Dict[str, str]:
    """Aggregate intervals, performance profiles and (two or more algorithms) probability of improvement."""
    from rliable import plot_utils

    plt = _pyplot()
    algos = sorted(matrices)
    agg = section["aggregate"]["algos"]
    fig, axes = plt.subplots(1, 3, figsize=(10, 0.45 * len(algos) + 1.5), sharey=True, constrained_layout=True)
    for ax, (key, title) in zip(axes, (("iqm", "IQM"), ("mean", "Mean"), ("median", "Median"))):
        for i, algo in enumerate(algos):
            point, (lo, hi) = agg[algo][key], agg[algo][f"{key}_ci"]
            ax.errorbar(point, i, xerr=[[point - lo], [hi - point]], fmt="o", capsize=5, color=colors[algo])
        ax.set(title=title, xlim=(-0.05, 1.05), xlabel="min-max normalised score")
        ax.grid(axis="x", alpha=0.3)
    axes[0].set(yticks=range(len(algos)), yticklabels=algos, ylim=(-0.6, len(algos) - 0.4))
    fig.suptitle(f"{env}: aggregate over {len(section['aggregate']['tasks'])} tasks, 95% CIs")
    figures = {"aggregate": _file("aggregate", env)}
    _save(fig, out / figures["aggregate"])

    tau = np.linspace(0.0, 1.0, 51)
    profiles, profile_cis = stats.performance_profiles(matrices, tau, reps, seed)
    fig, ax = plt.subplots(figsize=(6, 4))
    plot_utils.plot_performance_profiles(
        profiles,
        tau,
        performance_profile_cis=profile_cis,
        ax=ax,
        colors=colors,
        xlabel=r"min-max normalised score ($\tau$)",
    )
    ax.legend()
    figures["profile"] = _file("profile", env)
    _save(fig, out / figures["profile"])

    poi = section["probability_of_improvement"]
    if poi:
        fig, ax = plt.subplots(figsize=(4, 0.4 * len(poi) + 1))
        plot_utils.plot_probability_of_improvement(
            {f"{p['x']},{p['y']}": p["p"] for p in poi}, {f"{p['x']},{p['y']}": np.array(p["ci"]) for p in poi}, ax=ax
        )
        figures["probability_of_improvement"] = _file("improvement", env)
        _save(fig, out / figures["probability_of_improvement"])
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


def _aggregate_lines(env: str, s: Mapping[str, Any]) -> List[str]:
    agg = s["aggregate"]
    lines = [f"### {env}: aggregate over tasks (min-max normalised {s['metric']})", ""]
    if not agg["algos"]:
        return lines + [f"- {n}" for n in s["notes"]] + [""]
    lines += [
        f"- Tasks: {', '.join(agg['tasks'])}."
        + (f" Left out (some algorithm has no scored run): {', '.join(agg['left_out'])}." if agg["left_out"] else ""),
        "- Normalisation bounds [min, max] per task: "
        + "; ".join(
            f"{t} [{fmt(b[0])}, {fmt(b[1])}]" + (" (all equal: every score 0)" if b[0] == b[1] else "")
            for t, b in s["normalisation"].items()
            if t in agg["tasks"]
        )
        + ".",
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
        f"rliable). Aggregates use scores min-max normalised per task over every run of every algorithm. "
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


def write_report(out_dir: Any, reps: int = 2000, seed: int = 0) -> Path:
    """Write the report of a benchmark run folder; returns the path of the Markdown file.

    Reads ``results.json`` (marl-eval format), the resolved suite (its ``name`` and
    ``references``) and ``provenance.json`` from ``out_dir``; writes there the Markdown report,
    ``report.json`` (every number of every table, see :func:`build_report`) and the PNG figures
    (``curves_<env>_<task>.png``, ``aggregate_<env>.png``, ``profile_<env>.png``,
    ``improvement_<env>.png``). Statistics: Agarwal et al. 2021 (arXiv:2108.13264) via rliable;
    protocol and min-max normalisation: Gorsane et al. 2022 (arXiv:2209.10485).

    Args:
        out_dir: the folder of ``marl benchmark run --out``.
        reps: bootstrap resamples per confidence interval (2000 takes seconds per env).
        seed: numpy seed of every bootstrap (the same inputs give the same report).

    Raises:
        MarlError: ``reps`` below 1, or ``results.json`` is missing (run ``marl benchmark run`` first), unreadable, or
            not in the format :func:`validate_marl_eval` checks.
    """
    if isinstance(reps, bool) or not isinstance(reps, int) or reps < 1:
        raise MarlError(f"reps (bootstrap resamples) must be an integer >= 1, got {reps!r}.")
    out = Path(out_dir)
    data, suite, provenance = _read_folder(out)
    report = build_report(data, suite, provenance, out, reps, seed)
    (out / "report.json").write_text(json.dumps(report, indent=2) + "\n")
    path = out / "report.md"
    path.write_text(render_markdown(report))
    return path
