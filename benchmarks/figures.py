"""The figures of a benchmark report, all drawn in one style (:func:`style`).

Each ``*_figure`` function returns a matplotlib ``Figure`` (tests read its artists); :func:`save`
writes it as PNG and closes it. Every figure has a title naming the env (and task), every line
of one algorithm has the algorithm's colour, marker and dash in every figure of the env
(:func:`looks`), so lines that lie on top of each other (two algorithms with the same score
distribution) stay distinguishable. The statistics behind them are :mod:`marl.benchmarks.stats`
(Agarwal et al. 2021, arXiv:2108.13264: IQM, stratified-bootstrap CIs, performance profiles,
probability of improvement). matplotlib is imported inside the functions (seconds of start-up).
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any, Dict, Iterator, List, Mapping, Optional, Sequence, Tuple

import numpy as np

STYLE: Dict[str, Any] = {  # the one style of every report figure (matplotlib rcParams)
    "figure.dpi": 110,
    "savefig.dpi": 110,
    "savefig.bbox": "tight",
    "figure.facecolor": "white",
    "font.size": 10,
    "axes.titlesize": 11,
    "axes.titleweight": "bold",
    "axes.labelsize": 10,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "axes.grid": True,
    "grid.alpha": 0.3,
    "grid.linestyle": "-",
    "legend.fontsize": 9,
    "legend.frameon": False,
    "lines.linewidth": 1.8,
    "lines.markersize": 5,
    "errorbar.capsize": 4,
}
_MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*")
_DASHES = ("-", "--", "-.", ":")


def _pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")  # files only: no display, and no GUI backend in a headless run
    import matplotlib.pyplot as plt

    return plt


@contextlib.contextmanager
def style() -> Iterator[Any]:
    """The report's rcParams (:data:`STYLE`) for the figures drawn inside; yields ``pyplot``."""
    plt = _pyplot()
    with plt.rc_context(STYLE):
        yield plt


def looks(algos: Sequence[str]) -> Dict[str, Dict[str, Any]]:
    """``{algo: {"color", "marker", "linestyle"}}``, one look per algorithm (sorted names, so every
    figure of an env gives an algorithm the same look)."""
    return {
        a: {"color": f"C{i % 10}", "marker": _MARKERS[i % len(_MARKERS)], "linestyle": _DASHES[i % len(_DASHES)]}
        for i, a in enumerate(sorted(algos))
    }


def save(fig: Any, path: Path) -> str:
    """Write ``fig`` to ``path`` (PNG, the style's dpi) and close it; returns the file name."""
    plt = _pyplot()
    try:
        with style():
            fig.savefig(path)
    finally:
        plt.close(fig)
    return path.name


def _bound_lines(ax: Any, bounds: Optional[Tuple[float, float]]) -> None:
    """Dotted lines at a task's reference bounds (random play, best known score), named in the legend."""
    if bounds is None:
        return
    for value, label, dots in zip(bounds, ("random play", "best known"), ((0, (1, 2)), (0, (1, 1)))):
        ax.axhline(value, color="0.4", linestyle=dots, linewidth=1.2, label=f"{label}: {value:g}")


def curves_figure(
    env: str,
    task: str,
    metric: str,
    curves: Mapping[str, Mapping[str, Any]],
    look: Mapping[str, Mapping[str, Any]],
    bounds: Optional[Tuple[float, float]] = None,
) -> Any:
    """Sample-efficiency curves of one task: IQM over runs at each evaluation with its 95% CI band
    (hollow markers of decreasing size, so equal points of several algorithms all show), and the task's
    reference bounds (``(random, best)``) as dotted lines where the suite has them.

    ``curves``: ``{algo: {"step_count": [steps], "iqm", "ci_low", "ci_high": [steps], "runs": n}}``.
    """
    from matplotlib.ticker import EngFormatter

    with style() as plt:
        fig, ax = plt.subplots(figsize=(6, 4))
        for i, (algo, c) in enumerate(curves.items()):
            n = len(c["step_count"])
            ax.plot(
                c["step_count"],
                c["iqm"],
                label=f"{algo} ({c['runs']} run{'s' if c['runs'] != 1 else ''})",
                markevery=max(1, n // 8),
                markerfacecolor="none",  # hollow, the first algorithm's largest: points that coincide all show
                markersize=4 + 2.5 * (len(curves) - 1 - i),
                **look[algo],
            )
            ax.fill_between(
                c["step_count"], c["ci_low"], c["ci_high"], color=look[algo]["color"], alpha=0.15, linewidth=0
            )
        _bound_lines(ax, bounds)
        ax.xaxis.set_major_formatter(EngFormatter(sep=""))  # 50k, 1.5M: long step counts would overlap
        ax.set(
            xlabel="env steps",
            ylabel=f"{metric} (IQM over runs)",
            title=f"{env} / {task}: {metric} during training (95% CI bands)",
        )
        ax.legend(loc="best")
    return fig


def _score_limits(values: Sequence[float]) -> Tuple[float, float]:
    """The x range of a normalised score: [0, 1] widened to every value shown (below random, above best)."""
    return min(0.0, *values) - 0.05, max(1.0, *values) + 0.05


def aggregate_figure(
    env: str, agg: Mapping[str, Mapping[str, Any]], tasks: Sequence[str], look: Mapping[str, Mapping[str, Any]]
) -> Any:
    """IQM, mean and median of the normalised scores with 95% CIs, one row per algorithm.

    ``agg``: ``{algo: {"iqm", "iqm_ci", "mean", "mean_ci", "median", "median_ci"}}``
    (:func:`marl.benchmarks.stats.aggregate_statistics`); ``tasks``: the tasks aggregated.
    """
    algos = sorted(agg)
    limits = _score_limits([v for a in algos for k in ("iqm", "mean", "median") for v in agg[a][f"{k}_ci"]])
    with style() as plt:
        fig, axes = plt.subplots(1, 3, figsize=(10, 0.45 * len(algos) + 1.8), sharey=True, constrained_layout=True)
        for ax, (key, title) in zip(axes, (("iqm", "IQM"), ("mean", "Mean"), ("median", "Median"))):
            for i, algo in enumerate(algos):
                point, (lo, hi) = agg[algo][key], agg[algo][f"{key}_ci"]
                ax.errorbar(
                    point, i, xerr=[[point - lo], [hi - point]], fmt=look[algo]["marker"], color=look[algo]["color"]
                )
            for x in (0.0, 1.0):
                ax.axvline(x, color="0.45", linestyle=":", linewidth=1.2)
            ax.set(title=title, xlim=limits, xlabel="normalised score")
            ax.grid(axis="y", visible=False)
        axes[0].set(yticks=range(len(algos)), yticklabels=algos, ylim=(-0.6, len(algos) - 0.4))
        fig.suptitle(
            f"{env}: aggregate over {len(tasks)} task{'s' if len(tasks) != 1 else ''} ({', '.join(tasks)}), 95% CIs; 0 = random play, 1 = best known",
            fontsize=10,
        )
    return fig


def profile_figure(
    env: str,
    tau: np.ndarray,
    profiles: Mapping[str, np.ndarray],
    cis: Mapping[str, np.ndarray],
    tasks: Sequence[str],
    look: Mapping[str, Mapping[str, Any]],
) -> Any:
    """Performance profiles: the fraction of ``runs x tasks`` normalised scores above each ``tau``, with
    95% CI bands. Each algorithm has its own marker and dash, and its markers sit at other ``tau``
    than the others' (``markevery`` offset by its index), so profiles that coincide stay visible.

    ``profiles``: ``{algo: [len(tau)]}``; ``cis``: ``{algo: [2 x len(tau)]}``
    (:func:`marl.benchmarks.stats.performance_profiles`).
    """
    algos = sorted(profiles)
    every = max(len(algos), len(tau) // 8)  # at least one marker slot per algorithm
    with style() as plt:
        fig, ax = plt.subplots(figsize=(6, 4))
        for i, algo in enumerate(algos):
            ax.plot(tau, profiles[algo], label=algo, markevery=(i * every // len(algos), every), **look[algo])
            lo, hi = np.asarray(cis[algo]).reshape(2, -1)
            ax.fill_between(tau, lo, hi, color=look[algo]["color"], alpha=0.12, linewidth=0)
        ax.set(
            xlabel=r"normalised score $\tau$ (0 = random play, 1 = best known)",
            ylabel=r"fraction of runs with score > $\tau$",
            ylim=(-0.03, 1.03),
            title=f"{env}: performance profiles over {len(tasks)} task{'s' if len(tasks) != 1 else ''} (95% CI bands)",
        )
        ax.legend(loc="best")
    return fig


def improvement_figure(env: str, poi: List[Mapping[str, Any]], look: Mapping[str, Mapping[str, Any]]) -> Any:
    """P(X > Y) with its 95% CI for every ordered pair; a dotted line at 0.5 (no difference).

    ``poi``: ``[{"x", "y", "p", "ci": [lo, hi]}]`` (:func:`marl.benchmarks.stats.probability_of_improvement`).
    """
    with style() as plt:
        fig, ax = plt.subplots(figsize=(6, 0.4 * len(poi) + 1.4))
        for i, p in enumerate(poi):
            lo, hi = p["ci"]
            ax.errorbar(
                p["p"], i, xerr=[[p["p"] - lo], [hi - p["p"]]], fmt=look[p["x"]]["marker"], color=look[p["x"]]["color"]
            )
        ax.axvline(0.5, color="0.45", linestyle=":", linewidth=1.2)
        ax.set(
            yticks=range(len(poi)),
            yticklabels=[f"P({p['x']} > {p['y']})" for p in poi],
            ylim=(-0.6, len(poi) - 0.4),
            xlim=(-0.02, 1.02),
            xlabel="probability of improvement",
            title=f"{env}: probability of improvement (95% CIs)",
        )
        ax.grid(axis="y", visible=False)
        ax.invert_yaxis()  # the first pair on top, as in the report's table
    return fig
