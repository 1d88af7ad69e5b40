"""The report's aggregate normalised by reference bounds (ties keep their level, tasks without bounds are left
out with a note), random play's score, and the figures: titles, one style, distinguishable overlapping lines."""

import json

import numpy as np
import pytest

from marl.benchmarks import figures
from marl.benchmarks.bounds import random_play
from marl.benchmarks.report import build_report, write_report

REPS = 100


def _runs(score, seeds=3):
    """``{seed_k: run}`` whose absolute metric and last evaluation have mean return ``score``."""
    run = lambda: {  # noqa: E731 - a fresh dict per seed
        "step_0": {"step_count": 0, "elapsed_time": 0.0, "return": [score - 1.0]},
        "step_1": {"step_count": 100, "elapsed_time": 1.0, "return": [score - 0.5, score + 0.5]},
        "absolute_metrics": {"return": [score - 0.5, score + 0.5]},
    }
    return {f"seed_{k}": run() for k in range(seeds)}


def _bound(task, random, best):
    return {
        "env": "matrix",
        "task": task,
        "metric": "return",
        "random": random,
        "best": best,
        "random_source": "hand",
        "best_source": "hand",
    }


# "tie": every algorithm scores 12; "apart": a scores 4, b scores 8
DATA = {"matrix": {"tie": {"a": _runs(12.0), "b": _runs(12.0)}, "apart": {"a": _runs(4.0), "b": _runs(8.0)}}}


def test_a_task_where_every_algorithm_ties_keeps_their_level():
    suite = {"name": "s", "bounds": [_bound("tie", 10.0, 14.0), _bound("apart", 0.0, 10.0)]}
    section = build_report(DATA, suite, {}, None, reps=REPS)["envs"]["matrix"]
    agg = section["aggregate"]
    assert agg["tasks"] == ["apart", "tie"] and agg["left_out"] == []
    # a: tie (12 - 10) / 4 = 0.5, apart 4 / 10 = 0.4 -> mean 0.45; b: 0.5 and 0.8 -> mean 0.65
    assert agg["algos"]["a"]["mean"] == pytest.approx(0.45) and agg["algos"]["b"]["mean"] == pytest.approx(0.65)
    # IQM over 3 seeds x 2 tasks cuts one score at each end: a 0.4, 0.4, 0.5, 0.5 -> 0.45
    assert agg["algos"]["a"]["iqm"] == pytest.approx(0.45)
    assert section["normalisation"]["tie"]["random"] == 10.0 and section["notes"] == []


def test_tasks_without_bounds_are_left_out_with_a_note(tmp_path):
    suite = {"name": "s", "bounds": [_bound("apart", 0.0, 10.0)]}
    report = build_report(DATA, suite, {}, None, reps=REPS)
    section = report["envs"]["matrix"]
    assert section["aggregate"]["tasks"] == ["apart"] and section["aggregate"]["left_out"] == ["tie"]
    assert section["aggregate"]["algos"]["b"]["iqm"] == pytest.approx(0.8)
    assert any("no reference bounds" in n and "tie" in n for n in section["notes"])
    none = build_report(DATA, {"name": "s"}, {}, None, reps=REPS)["envs"]["matrix"]
    assert none["aggregate"]["algos"] == {} and none["probability_of_improvement"] == []
    assert any("No aggregate" in n for n in none["notes"])
    wrong_metric = build_report(DATA, {"name": "s", "bounds": [{**_bound("tie", 0.0, 1.0), "metric": "win_rate"}]}, {})
    assert any("are for 'win_rate'" in n for n in wrong_metric["envs"]["matrix"]["notes"])


def test_markdown_names_the_bounds_and_the_left_out_task(tmp_path):
    out = tmp_path / "r"
    out.mkdir()
    (out / "results.json").write_text(json.dumps(DATA))
    (out / "suite.yaml").write_text(json.dumps({"name": "s", "bounds": [_bound("apart", 0.0, 10.0)]}))
    md = write_report(out, reps=REPS).read_text()
    assert "apart: random 0.000 (hand), best 10.000 (hand)" in md
    assert "Left out of the aggregate, no reference bounds (random play and best known score) in the suite: tie." in md
    assert (out / "aggregate_matrix.png").read_bytes()[:4] == b"\x89PNG"


def test_report_takes_bounds_from_another_suite(tmp_path):
    out = tmp_path / "r"
    out.mkdir()
    data = {"matrix": {"two_step": {"a": _runs(16.0), "b": _runs(9.5)}}}
    (out / "results.json").write_text(json.dumps(data))
    (out / "suite.yaml").write_text("name: old\n")  # a folder run before its suite had bounds
    write_report(out, reps=REPS, bounds_from="smoke")
    agg = json.loads((out / "report.json").read_text())["envs"]["matrix"]["aggregate"]["algos"]
    # smoke's two_step bounds: random play 9.5, optimum 16
    assert agg["a"]["iqm"] == pytest.approx(1.0) and agg["b"]["iqm"] == pytest.approx(0.0)


def test_random_play_matches_the_two_step_games_expectation():
    # uniform play: agent 0 picks 2A (7 for both) or 2B ([[0, 1], [1, 8]], mean 2.5); return sums 2 agents:
    # 2 x (7 + 2.5) / 2 = 9.5; per-episode std 6.4, so 2048 episodes give a standard error of 0.14
    r = random_play("matrix", "two_step", {"num_envs": 256}, episodes=2048, seed=1)
    assert r["episodes"] >= 2048 and "win_rate" not in r
    assert r["return"] == pytest.approx(9.5, abs=0.6)


# ------------------------------------------------------------------ the figures
LOOK = figures.looks(["a", "b", "c"])


def _all_figures():
    tau = np.linspace(0.0, 1.0, 21)
    same = np.clip(1.0 - tau, 0, 1)
    curves = {
        a: {"step_count": [0, 50, 100], "iqm": [0, 1, 2], "ci_low": [0, 0, 1], "ci_high": [1, 2, 3], "runs": 3}
        for a in "ab"
    }
    agg = {
        a: {k: 0.5 for k in ("iqm", "mean", "median")} | {f"{k}_ci": [0.4, 0.6] for k in ("iqm", "mean", "median")}
        for a in "ab"
    }
    poi = [{"x": "a", "y": "b", "p": 0.5, "ci": [0.4, 0.6]}, {"x": "b", "y": "a", "p": 0.5, "ci": [0.4, 0.6]}]
    cis = {a: np.stack([same, same]) for a in "abc"}
    return {
        "curves": figures.curves_figure("e", "t", "return", curves, LOOK, bounds=(0.0, 2.0)),
        "aggregate": figures.aggregate_figure("e", agg, ["t"], LOOK),
        "profile": figures.profile_figure("e", tau, {a: same for a in "abc"}, cis, ["t"], LOOK),
        "improvement": figures.improvement_figure("e", poi, LOOK),
    }


def test_every_figure_has_a_title_and_the_one_style():
    import matplotlib.pyplot as plt

    for name, fig in _all_figures().items():
        titles = [ax.get_title() for ax in fig.axes] + [fig._suptitle.get_text() if fig._suptitle else ""]
        assert any(t.startswith("e") for t in titles), (name, titles)  # names the env
        for ax in fig.axes:  # the style's marks: no top/right spines, bold titles
            assert not ax.spines["top"].get_visible() and not ax.spines["right"].get_visible(), name
            if ax.get_title():
                assert ax.title.get_fontweight() == "bold", name
        plt.close(fig)


def test_overlapping_profiles_stay_distinguishable():
    import matplotlib.pyplot as plt

    fig = _all_figures()["profile"]
    ax = fig.axes[0]
    lines = {line.get_label(): line for line in ax.get_lines()}
    assert set(lines) == {"a", "b", "c"}  # three identical profiles
    np.testing.assert_array_equal(lines["a"].get_ydata(), lines["b"].get_ydata())
    markers = {line.get_marker() for line in lines.values()}
    dashes = {line.get_linestyle() for line in lines.values()}
    starts = {line.get_markevery()[0] for line in lines.values()}
    assert len(markers) == 3 and "None" not in markers and len(dashes) == 3
    assert len(starts) == 3  # their markers sit at different thresholds, so none hides another's
    assert "performance profiles" in ax.get_title() and ax.get_legend() is not None
    plt.close("all")


def test_an_algorithm_looks_the_same_in_every_figure():
    assert figures.looks(["b", "a"]) == figures.looks(["a", "b"])
    figs = _all_figures()
    curve_a = next(line for line in figs["curves"].axes[0].get_lines() if line.get_label().startswith("a "))
    profile_a = next(line for line in figs["profile"].axes[0].get_lines() if line.get_label() == "a")
    assert curve_a.get_marker() == profile_a.get_marker() and curve_a.get_color() == profile_a.get_color()
    import matplotlib.pyplot as plt

    plt.close("all")
