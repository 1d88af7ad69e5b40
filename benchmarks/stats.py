"""The statistics of a benchmark report: run scores, normalisation by reference bounds, IQM / mean / median with
stratified-bootstrap confidence intervals, sample-efficiency curves, performance profiles,
probability of improvement and the reference flags.

Methods: Agarwal et al. 2021, "Deep Reinforcement Learning at the Edge of the Statistical Precipice"
(arXiv:2108.13264), through their library rliable (interquartile mean, stratified bootstrap
percentile CIs, performance profiles, probability of improvement); the protocol (absolute metric)
is Gorsane et al. 2022, "Towards a standardised performance
evaluation protocol for cooperative MARL" (arXiv:2209.10485). :mod:`marl.benchmarks.report` turns
these numbers into the report; rliable is imported inside the functions (it imports pandas, arch
and seaborn, seconds of start-up that ``marl benchmark run`` should not pay before training).

Shapes: a *score array* is ``[runs]`` (one score per seed); a *score matrix* is ``[runs x tasks]``
(rliable's layout); curve arrays are ``[runs x steps]``.
"""

from __future__ import annotations

import contextlib
import re
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, Iterator, List, Mapping, Optional, Sequence, Tuple

import numpy as np

CONFIDENCE = 0.95
ABSOLUTE = "absolute_metrics"
_STEP = re.compile(r"^step_(\d+)$")
_SEED = re.compile(r"^seed_(\d+)$")


# ------------------------------------------------------------------ scores of runs
@dataclass
class TaskScores:
    """The scores of every algorithm on one task.

    Attributes:
        env, task, metric: where the scores come from; ``metric`` is ``"win_rate"`` or ``"return"``.
        scores: ``{algo: [runs]}``, each run's mean over episodes of its absolute metric (or of its
            last evaluation, see ``source``); runs ordered by seed number.
        seeds: ``{algo: ["seed_0", ...]}``, the runs behind ``scores``.
        source: ``{algo: "absolute_metrics" | "last_step"}``: the absolute metric when every run of
            that algorithm on the task has one, otherwise each run's own last evaluation.
        curves: ``{algo: (x [steps], y [runs x steps])}``: env steps (mean ``step_count`` over runs)
            and each run's mean metric at every evaluation of the steps all its runs share.
        skipped: ``["algo/seed_k: why", ...]``, runs with no value of ``metric``.
    """

    env: str
    task: str
    metric: str
    scores: Dict[str, np.ndarray] = field(default_factory=dict)
    seeds: Dict[str, List[str]] = field(default_factory=dict)
    source: Dict[str, str] = field(default_factory=dict)
    curves: Dict[str, Tuple[np.ndarray, np.ndarray]] = field(default_factory=dict)
    skipped: List[str] = field(default_factory=list)


def _steps(run: Mapping[str, Any]) -> List[Mapping[str, Any]]:
    """The evaluations of a run in order (``step_0``, ``step_1``, ...)."""
    numbered = sorted((int(m.group(1)), k) for k in run if (m := _STEP.match(k)))
    return [run[k] for _, k in numbered]


def _seed_order(name: str) -> Tuple[int, str]:
    m = _SEED.match(name)
    return (int(m.group(1)) if m else 10**9, name)


def env_metric(tasks: Mapping[str, Any]) -> str:
    """``"win_rate"`` if any run of the env (``{task: {algo: {seed: run}}}``) reports it, else ``"return"``."""
    for algos in tasks.values():
        for runs in algos.values():
            for run in runs.values():
                if any("win_rate" in point for point in run.values() if isinstance(point, dict)):
                    return "win_rate"
    return "return"


def task_scores(env: str, task: str, algos: Mapping[str, Any], metric: str) -> TaskScores:
    """Scores and curves of one task from its part of results.json (``{algo: {seed_k: run}}``).

    The score of a run is the mean over episodes of ``metric`` in its ``absolute_metrics`` when
    every run of that algorithm has them (Gorsane et al. 2022, arXiv:2209.10485, Section 4: the
    best policy re-evaluated over 10x the episodes), otherwise in each run's last evaluation (an
    unfinished suite). Runs without ``metric`` are listed in ``skipped``.
    """
    out = TaskScores(env, task, metric)
    for algo in sorted(algos):
        runs = {s: algos[algo][s] for s in sorted(algos[algo], key=_seed_order)}
        absolute = all(metric in run.get(ABSOLUTE, {}) for run in runs.values())
        scores, seeds, curve_runs = [], [], []
        for seed, run in runs.items():
            steps = [p for p in _steps(run) if metric in p]
            point = run[ABSOLUTE] if absolute else (steps[-1] if steps else None)
            if point is None:
                out.skipped.append(f"{algo}/{seed}: no evaluation with '{metric}'")
                continue
            scores.append(float(np.mean(point[metric])))
            seeds.append(seed)
            if steps:
                curve_runs.append(steps)
        if scores:
            out.scores[algo], out.seeds[algo] = np.asarray(scores), seeds
            out.source[algo] = ABSOLUTE if absolute else "last_step"
        if curve_runs:
            out.curves[algo] = _curve(curve_runs, metric)
    return out


def _curve(runs: Sequence[Sequence[Mapping[str, Any]]], metric: str) -> Tuple[np.ndarray, np.ndarray]:
    """``(x [steps], y [runs x steps])`` over the evaluations every run has (the common prefix)."""
    n = min(len(steps) for steps in runs)
    x = np.mean([[float(p["step_count"]) for p in steps[:n]] for steps in runs], axis=0)
    y = np.asarray([[float(np.mean(p[metric])) for p in steps[:n]] for steps in runs]).reshape(len(runs), n)
    return x.reshape(n), y


# ------------------------------------------------------------------ normalisation
def reference_normalise(
    tasks: Mapping[str, Mapping[str, np.ndarray]], bounds: Mapping[str, Tuple[float, float]]
) -> Tuple[Dict[str, Dict[str, np.ndarray]], List[str]]:
    """Normalise the scores of each task by its reference bounds: ``(s - random) / (best - random)``.

    Args:
        tasks: ``{task: {algo: scores [runs]}}`` (raw scores: return or win rate).
        bounds: ``{task: (random, best)}``, random play's score and the best known one, ``random < best``
            (:mod:`marl.benchmarks.bounds` checks them).

    Returns:
        ``({task: {algo: normalised [runs]}}, [tasks without bounds])``: random play scores 0 and the
        best known score 1 on every task; a score below random play is negative, one above the best
        known score above 1. The anchors do not depend on the algorithms compared, so a task on which
        every algorithm scores the same keeps their common level (min-max normalisation over the
        algorithms mapped it to 0). Mnih et al. 2015 (Nature 518, "Methods", human-normalised score);
        aggregated as in Agarwal et al. 2021 (arXiv:2108.13264).
    """
    normalised: Dict[str, Dict[str, np.ndarray]] = {}
    missing = []
    for task, algos in tasks.items():
        if task not in bounds:
            missing.append(task)
            continue
        lo, hi = (float(v) for v in bounds[task])
        normalised[task] = {a: (np.asarray(s, dtype=float) - lo) / (hi - lo) for a, s in algos.items()}
    return normalised, missing


def score_matrices(
    normalised: Mapping[str, Mapping[str, np.ndarray]],
) -> Tuple[Dict[str, np.ndarray], List[str], List[str]]:
    """rliable's ``[runs x tasks]`` matrix per algorithm, over the tasks every algorithm has run.

    Returns:
        ``({algo: [runs x tasks]}, tasks used, tasks left out)``. A task is left out when some
        algorithm of the env has no scored run on it (the aggregates would compare different task
        sets otherwise). An algorithm with fewer runs on some task keeps its first ``n`` runs (by
        seed) on every task, ``n`` its smallest run count: rliable needs a full matrix.
    """
    algos = sorted({a for per_algo in normalised.values() for a in per_algo})
    used = [t for t in normalised if all(a in normalised[t] for a in algos)]
    left_out = [t for t in normalised if t not in used]
    matrices = {}
    for algo in algos if used else []:
        n = min(len(normalised[t][algo]) for t in used)
        matrices[algo] = np.stack([np.asarray(normalised[t][algo][:n]) for t in used], axis=1)
    return matrices, used, left_out


# ------------------------------------------------------------------ the estimators
def iqm(scores: np.ndarray, axis: Optional[int] = None) -> Any:
    """Interquartile mean: the 25% trimmed mean, ``floor(n / 4)`` values cut at each end.

    ``axis=None`` pools every value (rliable's ``aggregate_iqm`` over ``[runs x tasks]``);
    ``axis=0`` gives one IQM per column (per evaluation step of a curve). The same numbers as
    rliable's ``aggregate_iqm`` (``scipy.stats.trim_mean(x, 0.25)``, the test suite checks it),
    in plain numpy because a bootstrap calls it thousands of times and scipy's wrapper costs
    ~0.3 ms a call. Agarwal et al. 2021 (arXiv:2108.13264).
    """
    x = np.sort(np.asarray(scores, dtype=float).ravel() if axis is None else np.asarray(scores, dtype=float), axis=0)
    cut = int(0.25 * x.shape[0])
    return np.mean(x[cut : x.shape[0] - cut], axis=0)


def improvement(scores_x: np.ndarray, scores_y: np.ndarray) -> float:
    """P(X > Y) averaged over tasks: per task the fraction of (run of X, run of Y) pairs where X's
    score is higher, ties counting 1/2 (the Mann-Whitney U statistic over ``runs_x * runs_y``).

    ``scores_x``: ``[runs_x x tasks]``; ``scores_y``: ``[runs_y x tasks]``. The same numbers as
    rliable's ``probability_of_improvement`` (the test suite checks it), in numpy: scipy's
    ``mannwhitneyu`` costs ~0.6 ms per task inside a bootstrap. Agarwal et al. 2021 (arXiv:2108.13264).
    """
    x, y = np.asarray(scores_x, dtype=float)[:, None, :], np.asarray(scores_y, dtype=float)[None, :, :]
    per_task = np.mean(x > y, axis=(0, 1)) + 0.5 * np.mean(x == y, axis=(0, 1))
    return float(np.mean(per_task))


# ------------------------------------------------------------------ bootstrap
@contextlib.contextmanager
def _seeded(seed: int) -> Iterator[None]:
    """Seed numpy's global generator for one bootstrap and restore it afterwards.

    rliable's stratified bootstrap draws its resamples with ``np.random.choice`` (its
    ``random_state`` argument does not reach those draws), so the global seed is what makes a
    report reproducible; every call reseeds, so a number does not depend on what ran before it.
    """
    state = np.random.get_state()
    np.random.seed(seed)
    try:
        yield
    finally:
        np.random.set_state(state)


def interval_estimates(
    score_dict: Mapping[str, Any], func: Callable[..., Any], reps: int, seed: int
) -> Tuple[Dict[str, np.ndarray], Dict[str, np.ndarray]]:
    """rliable's ``get_interval_estimates`` (stratified bootstrap, percentile 95% CIs), seeded.

    Returns ``({key: point estimates}, {key: [2 x ...] lower and upper bounds})``.
    """
    from rliable import library as rly

    with _seeded(seed):
        return rly.get_interval_estimates(dict(score_dict), func, reps=reps, confidence_interval_size=CONFIDENCE)


def _ci(values: np.ndarray, i: int) -> List[float]:
    return [float(values[0][i]), float(values[1][i])]


def task_statistics(scores: Mapping[str, np.ndarray], reps: int = 2000, seed: int = 0) -> Dict[str, Dict[str, Any]]:
    """IQM and mean with 95% CIs, and the median, of each algorithm's scores on one task.

    Args:
        scores: ``{algo: [runs]}`` raw scores (units of the metric: return or win rate).
        reps: bootstrap resamples; seed: numpy seed of the bootstrap.

    Returns:
        ``{algo: {"runs", "iqm", "iqm_ci", "mean", "mean_ci", "median"}}``. IQM is rliable's
        ``aggregate_iqm``, the 25% trimmed mean (``floor(runs / 4)`` runs cut at each end, so with
        fewer than 4 runs it equals the mean); the median is over runs (rliable's
        ``aggregate_median`` is a median over tasks, which one task would reduce to the mean).
        With one run every CI is the point itself. Agarwal et al. 2021 (arXiv:2108.13264).
    """
    from rliable import metrics

    def func(x: np.ndarray) -> np.ndarray:
        return np.array([iqm(x), metrics.aggregate_mean(x)])

    arrays = {a: np.asarray(s, dtype=float).reshape(-1, 1) for a, s in scores.items() if len(s)}
    points, cis = interval_estimates(arrays, func, reps, seed) if arrays else ({}, {})
    return {
        a: {
            "runs": int(x.shape[0]),
            "iqm": float(points[a][0]),
            "iqm_ci": _ci(cis[a], 0),
            "mean": float(points[a][1]),
            "mean_ci": _ci(cis[a], 1),
            "median": float(np.median(x)),
        }
        for a, x in arrays.items()
    }


def aggregate_statistics(
    matrices: Mapping[str, np.ndarray], reps: int = 2000, seed: int = 0
) -> Dict[str, Dict[str, Any]]:
    """IQM, mean and median with 95% CIs of normalised ``[runs x tasks]`` matrices.

    IQM is over all ``runs x tasks`` scores together, mean is the mean of the per-task means and
    median the median of the per-task means (rliable's ``aggregate_iqm / aggregate_mean /
    aggregate_median``); the bootstrap resamples runs within each task (stratified), Agarwal et
    al. 2021 (arXiv:2108.13264). Returns ``{algo: {"runs", "tasks", "iqm", "iqm_ci", "mean",
    "mean_ci", "median", "median_ci"}}``.
    """
    from rliable import metrics

    def func(x: np.ndarray) -> np.ndarray:
        return np.array([iqm(x), metrics.aggregate_mean(x), metrics.aggregate_median(x)])

    points, cis = interval_estimates(matrices, func, reps, seed) if matrices else ({}, {})
    out = {}
    for algo, x in matrices.items():
        row: Dict[str, Any] = {"runs": int(x.shape[0]), "tasks": int(x.shape[1])}
        for i, name in enumerate(("iqm", "mean", "median")):
            row[name], row[f"{name}_ci"] = float(points[algo][i]), _ci(cis[algo], i)
        out[algo] = row
    return out


def curve_statistics(y: np.ndarray, reps: int = 2000, seed: int = 0) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
    """IQM over runs at each evaluation with pointwise 95% CIs: ``(iqm, lo, hi)``, each ``[steps]``.

    ``y`` is ``[runs x steps]``; it goes to rliable as ``[runs x 1 x steps]`` (one task), whose
    stratified bootstrap resamples runs at every step, as rliable's sample-efficiency curves do
    (Agarwal et al. 2021, arXiv:2108.13264). The IQM per step is the 25% trimmed mean over runs,
    the same number ``aggregate_iqm`` gives on that step's ``[runs x 1]`` slice.
    """

    def func(x: np.ndarray) -> np.ndarray:
        return iqm(x[:, 0, :], axis=0)  # one IQM over runs per step, all steps at once

    y = np.asarray(y, dtype=float)
    points, cis = interval_estimates({"y": y[:, None, :]}, func, reps, seed)
    return np.asarray(points["y"]), np.asarray(cis["y"][0]), np.asarray(cis["y"][1])


def probability_of_improvement(
    matrices: Mapping[str, np.ndarray], reps: int = 2000, seed: int = 0
) -> List[Dict[str, Any]]:
    """P(X > Y) with a 95% CI for every ordered pair of algorithms.

    ``matrices``: ``{algo: [runs x tasks]}`` (same tasks, run counts may differ). P(X > Y) is
    rliable's ``probability_of_improvement``: per task the Mann-Whitney U statistic over
    ``runs_x x runs_y`` pairs (ties count 1/2), averaged over tasks; the CI resamples the runs of X
    and Y independently within each task (Agarwal et al. 2021, arXiv:2108.13264). Returns
    ``[{"x", "y", "p", "ci": [lo, hi]}]``, empty with fewer than two algorithms.
    """
    algos = sorted(matrices)
    pairs = {f"{x},{y}": [matrices[x], matrices[y]] for x in algos for y in algos if x != y}
    if not pairs:
        return []
    points, cis = interval_estimates(pairs, improvement, reps, seed)
    out = []
    for key in pairs:
        x, y = key.split(",")
        lo, hi = np.asarray(cis[key]).reshape(2)
        out.append({"x": x, "y": y, "p": float(points[key]), "ci": [float(lo), float(hi)]})
    return out


def performance_profiles(
    matrices: Mapping[str, np.ndarray], tau: np.ndarray, reps: int = 2000, seed: int = 0
) -> Tuple[Dict[str, np.ndarray], Dict[str, np.ndarray]]:
    """Score distributions: the fraction of ``runs x tasks`` normalised scores above each ``tau``,
    with 95% CIs (rliable's ``create_performance_profile``, Agarwal et al. 2021, arXiv:2108.13264).

    The profile function is rliable's default (``use_score_distribution``: ``mean(scores > tau)``)
    written for all thresholds at once; rliable's own loops over ``tau`` in Python per resample.
    Returns ``({algo: [len(tau)]}, {algo: [2 x len(tau)]})``.
    """
    from rliable import library as rly

    def fraction_above(scores: np.ndarray, taus: np.ndarray) -> np.ndarray:
        return np.mean(np.asarray(scores).reshape(-1, 1) > np.asarray(taus).reshape(1, -1), axis=0)

    with _seeded(seed):
        return rly.create_performance_profile(
            dict(matrices), tau, custom_profile_func=fraction_above, reps=reps, confidence_interval_size=CONFIDENCE
        )


# ------------------------------------------------------------------ references
def reference_check(ref: Mapping[str, Any], ours: Optional[Mapping[str, Any]]) -> Dict[str, Any]:
    """Compare a published number with ours; returns ``{"flag": bool | None, "why": str}``.

    Rule: with a published CI ``[lo, hi]``, flag when our IQM is outside it; without one, flag
    when the published value is outside our 95% IQM CI. ``ours`` is a row of
    :func:`task_statistics` (``None``: we have no scored run, the flag is ``None``). A flag says the
    numbers disagree beyond the stated uncertainty, not which is right: budgets, versions of the
    env and evaluation protocols differ between papers (Gorsane et al. 2022, arXiv:2209.10485).
    """
    value, ci = ref.get("value"), ref.get("ci")
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        return {"flag": None, "why": f"the reference has no numeric value ({value!r})"}
    if ours is None:
        return {"flag": None, "why": "we have no scored run"}
    ci = ci if isinstance(ci, (list, tuple)) and len(ci) == 2 else None
    iqm, (lo, hi) = ours["iqm"], ours["iqm_ci"]
    if ci:
        plo, phi = float(ci[0]), float(ci[1])
        out = not plo <= iqm <= phi
        rel = "outside" if out else "inside"
        return {"flag": out, "why": f"our IQM {fmt(iqm)} is {rel} the published 95% CI [{fmt(plo)}, {fmt(phi)}]"}
    out = not lo <= value <= hi
    rel = "outside" if out else "inside"
    point = " (one run: the CI is the point)" if ours.get("runs") == 1 else ""
    return {
        "flag": out,
        "why": f"the published value {fmt(value)} is {rel} our 95% IQM CI [{fmt(lo)}, {fmt(hi)}]{point}",
    }


def fmt(x: Optional[float]) -> str:
    """A number for a table: 3 decimals below 100 in magnitude (win rates, small returns), 1 above."""
    if x is None or not np.isfinite(x):
        return "n/a"
    return f"{x:.1f}" if abs(x) >= 100 else f"{x:.3f}"
