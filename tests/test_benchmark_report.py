"""The benchmark report (marl.benchmarks.report, marl.benchmarks.stats): rliable's numbers against
hand computations, min-max normalisation, the report written from a synthetic run folder, the
results-format check, and marl-eval reading the same JSON.

Statistics: Agarwal et al. 2021 (arXiv:2108.13264); protocol and normalisation: Gorsane et al.
2022 (arXiv:2209.10485). Bootstraps use reps=200 to keep the file fast.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any, Dict, List

import numpy as np
import pytest
import yaml

from marl.benchmarks import stats
from marl.benchmarks.report import build_report, validate_marl_eval, write_report
from marl.errors import MarlError

REPS = 200
ENVS = {"mpe": ["simple_reference", "simple_spread"], "smax": ["2s3z", "3m"]}
ALGOS = ("mappo", "qmix")
STEPS = (0, 500, 1000)  # step_count of step_0..step_2 (env steps)


def _return(env: str, task: str, algo: str, seed: int, step: int) -> float:
    """The mean return of one evaluation: an algorithm-, task- and seed-dependent level that grows with training."""
    base = {"mappo": -20.0, "qmix": -30.0}[algo] + 5.0 * ENVS[env].index(task)
    return base + 2.0 * seed + 4.0 * step


def _wins(algo: str, seed: int, step: int) -> List[float]:
    """4 episodes: mappo wins 1 + step + (seed % 2) of them (capped), qmix one fewer."""
    k = min(4, max(0, 1 + step + seed % 2 - (algo == "qmix")))
    return [1.0] * k + [0.0] * (4 - k)


def _point(env: str, task: str, algo: str, seed: int, step: int, absolute: bool = False) -> Dict[str, Any]:
    r = _return(env, task, algo, seed, step)
    point: Dict[str, Any] = {} if absolute else {"step_count": STEPS[step], "elapsed_time": 1.5 * step}
    point["return"] = [r - 1.0, r + 1.0, r - 0.5, r + 0.5]  # mean r
    if env == "smax":
        point["win_rate"] = _wins(algo, seed, step)
    return point


def make_results(seeds: int = 3) -> Dict[str, Any]:
    """2 envs x 2 tasks x 2 algos x ``seeds`` seeds x 3 evaluations; the absolute metric repeats
    the last evaluation's scores (the best one: scores grow with training)."""
    data: Dict[str, Any] = {}
    for env, tasks in ENVS.items():
        for task in tasks:
            for algo in ALGOS:
                for seed in range(seeds):
                    run = {f"step_{i}": _point(env, task, algo, seed, i) for i in range(len(STEPS))}
                    run["absolute_metrics"] = _point(env, task, algo, seed, len(STEPS) - 1, absolute=True)
                    data.setdefault(env, {}).setdefault(task, {}).setdefault(algo, {})[f"seed_{seed}"] = run
    return data


REFERENCES = [
    # no published CI: flagged when the value is outside our IQM CI (ours: -20, -18, -16 + 8 at the last step)
    {
        "env": "mpe",
        "task": "simple_spread",
        "algo": "mappo",
        "metric": "return",
        "value": -50.0,
        "ci": None,
        "source": "Paper A 2020",
        "budget": "10M env steps",
        "note": "longer episodes",
    },
    # a published CI that contains our IQM: not flagged
    {
        "env": "mpe",
        "task": "simple_spread",
        "algo": "qmix",
        "metric": "return",
        "value": -18.0,
        "ci": [-30.0, 0.0],
        "source": "Paper B 2021",
        "budget": "2M env steps",
    },
    # a published CI [0.9, 1.0] that excludes our win rate IQM: flagged
    {
        "env": "smax",
        "task": "3m",
        "algo": "qmix",
        "metric": "win_rate",
        "value": 0.95,
        "ci": [0.9, 1.0],
        "source": "Paper C 2023",
        "budget": "10M env steps",
    },
    # a reference on a metric other than the table's (SMAX tables show win rates)
    {
        "env": "smax",
        "task": "3m",
        "algo": "mappo",
        "metric": "return",
        "value": 100.0,
        "ci": None,
        "source": "Paper D 2022",
        "budget": "1M env steps",
    },
]


def _bound(env: str, task: str, metric: str, random: float, best: float) -> Dict[str, Any]:
    return {
        "env": env,
        "task": task,
        "metric": metric,
        "random": random,
        "best": best,
        "random_source": "synthetic",
        "best_source": "synthetic",
    }


# reference bounds of every synthetic task: mpe returns between -40 (random) and 0, smax win rates 0..1
BOUNDS = [_bound("mpe", t, "return", -40.0, 0.0) for t in ENVS["mpe"]] + [
    _bound("smax", t, "win_rate", 0.0, 1.0) for t in ENVS["smax"]
]


def write_folder(
    out: Path, data: Dict[str, Any], references: List[Dict[str, Any]] = (), bounds: List[Dict[str, Any]] = BOUNDS
) -> Path:
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps(data))
    suite = {"name": "synthetic", "references": list(references), "bounds": list(bounds)}
    (out / "suite.yaml").write_text(yaml.safe_dump(suite))
    (out / "provenance.json").write_text(
        json.dumps(
            {
                "marl_version": "0.0.test",
                "git_commit": "abc123",
                "hardware": {"cpu": "test cpu", "gpus": []},
                "wall_clock_s": 7200.0,
            }
        )
    )
    return out


@pytest.fixture(scope="module")
def report_dir(tmp_path_factory) -> Path:
    out = write_folder(tmp_path_factory.mktemp("bench"), make_results(), REFERENCES)
    write_report(out, reps=REPS, seed=0)
    return out


# ------------------------------------------------------------------ rliable against hand computations
def test_iqm_is_the_mean_of_the_middle_half():
    from rliable import metrics

    scores = np.array([[3.0], [100.0], [1.0], [6.0], [4.0], [2.0], [5.0], [-50.0]])  # 8 runs x 1 task
    # sorted: -50, 1, 2, 3, 4, 5, 6, 100; 25% of 8 = 2 cut at each end -> 2, 3, 4, 5 -> 14 / 4 = 3.5
    assert metrics.aggregate_iqm(scores) == pytest.approx(3.5)
    two_tasks = np.array([[0.1, 0.9], [0.2, 0.8], [0.3, 0.7], [1.0, 0.0]])  # 4 runs x 2 tasks
    # IQM over the 8 scores flattened: 0, .1, .2, .3, .7, .8, .9, 1 -> cut 2 each end -> .2, .3, .7, .8 -> 0.5
    assert metrics.aggregate_iqm(two_tasks) == pytest.approx(0.5)
    # mean of per-task means: (0.4 + 0.6) / 2; median of per-task means over 2 tasks: 0.5
    assert metrics.aggregate_mean(two_tasks) == pytest.approx(0.5)
    # fewer than 4 runs: floor(3 / 4) = 0 runs cut, the IQM is the mean
    assert metrics.aggregate_iqm(np.array([[1.0], [2.0], [9.0]])) == pytest.approx(4.0)


def test_numpy_estimators_equal_rliables():
    """stats.iqm and stats.improvement (fast inside a bootstrap) give rliable's numbers, ties included."""
    from rliable import metrics

    rng = np.random.default_rng(0)
    for runs_x, runs_y, tasks in [(1, 1, 1), (3, 5, 2), (8, 8, 4), (10, 7, 3)]:
        x = rng.integers(0, 4, size=(runs_x, tasks)).astype(float)  # few distinct values: many ties
        y = rng.integers(0, 4, size=(runs_y, tasks)).astype(float)
        assert stats.iqm(x) == pytest.approx(metrics.aggregate_iqm(x))
        np.testing.assert_allclose(stats.iqm(x, axis=0), [metrics.aggregate_iqm(x[:, [m]]) for m in range(tasks)])
        assert stats.improvement(x, y) == pytest.approx(metrics.probability_of_improvement(x, y))
        assert stats.improvement(x, x) == pytest.approx(0.5)


def test_performance_profile_is_rliables_score_distribution():
    from rliable import library as rly

    scores = {"a": np.array([[0.0, 0.5], [1.0, 0.25], [0.75, 0.75]])}  # 3 runs x 2 tasks
    tau = np.linspace(0.0, 1.0, 11)
    ours, _ = stats.performance_profiles(scores, tau, reps=REPS)
    theirs, _ = rly.create_performance_profile(scores, tau, reps=10)
    np.testing.assert_allclose(ours["a"], theirs["a"])
    assert ours["a"][0] == pytest.approx(5 / 6) and ours["a"][5] == pytest.approx(3 / 6)  # > 0: 5 of 6; > 0.5: 3


def test_task_statistics_and_reproducible_cis():
    scores = {"a": np.array([3.0, 100.0, 1.0, 6.0, 4.0, 2.0, 5.0, -50.0]), "b": np.array([7.0])}
    first = stats.task_statistics(scores, reps=REPS, seed=3)
    assert first["a"]["iqm"] == pytest.approx(3.5) and first["a"]["mean"] == pytest.approx(71 / 8)
    assert first["a"]["median"] == pytest.approx(3.5)  # median over runs: (3 + 4) / 2
    lo, hi = first["a"]["iqm_ci"]
    assert lo <= 3.5 <= hi and lo < hi
    assert first["b"]["iqm_ci"] == [7.0, 7.0] and first["b"]["runs"] == 1  # one run: the CI is the point
    np.random.seed(123)  # the bootstrap reseeds and restores numpy's global generator
    again = stats.task_statistics(scores, reps=REPS, seed=3)
    assert again == first and np.random.randint(10**6) == np.random.RandomState(123).randint(10**6)


def test_reference_normalisation_by_hand():
    tasks = {
        "t1": {"a": np.array([0.0, 10.0]), "b": np.array([5.0])},
        "t2": {"a": np.array([-4.0, -2.0]), "b": np.array([-1.0, -3.0])},
        "flat": {"a": np.array([2.0]), "b": np.array([2.0])},
        "no_bounds": {"a": np.array([1.0]), "b": np.array([2.0])},
    }
    bounds = {"t1": (0.0, 20.0), "t2": (-5.0, -1.0), "flat": (1.0, 3.0)}
    norm, missing = stats.reference_normalise(tasks, bounds)
    # t1: (s - 0) / 20 -> a: 0, 0.5; b: 0.25.  t2: (s + 5) / 4 -> a: 0.25, 0.75; b: 1, 0.5
    np.testing.assert_allclose(norm["t1"]["a"], [0.0, 0.5])
    np.testing.assert_allclose(norm["t1"]["b"], [0.25])
    np.testing.assert_allclose(norm["t2"]["a"], [0.25, 0.75])
    np.testing.assert_allclose(norm["t2"]["b"], [1.0, 0.5])
    # every algorithm ties at 2 on "flat": both keep (2 - 1) / (3 - 1) = 0.5 (min-max over them gave 0)
    np.testing.assert_allclose(norm["flat"]["a"], [0.5])
    np.testing.assert_allclose(norm["flat"]["b"], [0.5])
    assert missing == ["no_bounds"] and "no_bounds" not in norm
    below, _ = stats.reference_normalise({"t": {"a": np.array([-10.0, 30.0])}}, {"t": (0.0, 20.0)})
    np.testing.assert_allclose(below["t"]["a"], [-0.5, 1.5])  # below random play and above the best stay so
    matrices, used, left_out = stats.score_matrices({t: norm[t] for t in ("t1", "t2")})
    # b has 1 run on t1, so it keeps its first run on every task: [runs=1 x tasks=2]
    np.testing.assert_allclose(matrices["b"], [[0.25, 1.0]])
    np.testing.assert_allclose(matrices["a"], [[0.0, 0.25], [0.5, 0.75]])
    assert used == ["t1", "t2"] and left_out == []


def test_probability_of_improvement_by_hand():
    x, y = np.array([[1.0], [3.0]]), np.array([[2.0], [0.0]])
    # pairs (x > y): 1>2 no, 1>0 yes, 3>2 yes, 3>0 yes -> 3 / 4
    out = {(p["x"], p["y"]): p for p in stats.probability_of_improvement({"x": x, "y": y}, reps=REPS)}
    assert out["x", "y"]["p"] == pytest.approx(0.75) and out["y", "x"]["p"] == pytest.approx(0.25)
    assert stats.probability_of_improvement({"x": x}, reps=REPS) == []


def test_reference_rule():
    ours = {"iqm": 0.5, "iqm_ci": [0.4, 0.6], "runs": 5}
    assert stats.reference_check({"value": 0.9, "ci": [0.8, 1.0]}, ours)["flag"] is True  # our IQM outside theirs
    assert stats.reference_check({"value": 0.9, "ci": [0.45, 1.0]}, ours)["flag"] is False
    assert stats.reference_check({"value": 0.55, "ci": None}, ours)["flag"] is False  # value inside our CI
    assert stats.reference_check({"value": 0.7, "ci": None}, ours)["flag"] is True
    assert stats.reference_check({"value": 0.7, "ci": None}, None)["flag"] is None


# ------------------------------------------------------------------ the report of a run folder
def test_report_files_tables_and_figures(report_dir):
    md = (report_dir / "report.md").read_text()
    assert md.startswith("# Benchmark report: synthetic")
    assert "abc123" in md and "0.0.test" in md  # provenance block
    for env, tasks in ENVS.items():
        for task in tasks:
            assert f"### {env} / {task}" in md
            png = report_dir / f"curves_{env}_{task}.png"
            assert png.read_bytes()[:4] == b"\x89PNG"
            assert f"]({png.name})" in md  # a relative link
        for kind in ("aggregate", "profile", "improvement"):
            assert (report_dir / f"{kind}_{env}.png").read_bytes()[:4] == b"\x89PNG"
    assert md.count("| algo | runs | IQM [95% CI] |") == 4
    assert "## smax (metric: win_rate)" in md and "## mpe (metric: return)" in md


def test_report_json_numbers_match_a_hand_computation(report_dir):
    report = json.loads((report_dir / "report.json").read_text())
    row = report["envs"]["mpe"]["tasks"]["simple_spread"]["algos"]["mappo"]
    # absolute metric of seeds 0, 1, 2 on simple_spread (task index 1): -20 + 5 + 2 * seed + 4 * 2 = -7, -5, -3;
    # 3 runs: floor(3 / 4) = 0 cut, IQM = mean = -5; median -5
    assert row["scores"] == [-7.0, -5.0, -3.0] and row["score_source"] == "absolute_metrics"
    assert row["iqm"] == pytest.approx(-5.0) and row["median"] == pytest.approx(-5.0)
    assert -7.0 <= row["iqm_ci"][0] <= -5.0 <= row["iqm_ci"][1] <= -3.0
    smax = report["envs"]["smax"]["tasks"]["3m"]["algos"]["qmix"]
    # qmix wins min(4, 2 + seed % 2) of 4 at the last step: 2/4, 3/4, 2/4 -> mean 7/12
    assert smax["scores"] == [0.5, 0.75, 0.5] and smax["iqm"] == pytest.approx(7 / 12)
    curve = report["envs"]["mpe"]["tasks"]["simple_spread"]["curves"]["mappo"]
    assert curve["step_count"] == [0, 500, 1000] and curve["iqm"] == pytest.approx([-13.0, -9.0, -5.0])
    agg = report["envs"]["mpe"]["aggregate"]
    # mappo's scores: simple_reference -12, -10, -8, simple_spread -7, -5, -3; bounds -40 and 0: (s + 40) / 40 ->
    # 0.7, 0.75, 0.8, 0.825, 0.875, 0.925; IQM over 6 cuts one at each end: mean(0.75, 0.8, 0.825, 0.875) = 0.8125
    assert agg["tasks"] == ["simple_reference", "simple_spread"]
    assert agg["algos"]["mappo"]["iqm"] == pytest.approx(0.8125)
    assert report["envs"]["mpe"]["normalisation"]["simple_spread"]["random"] == -40.0
    poi = {(p["x"], p["y"]): p["p"] for p in report["envs"]["mpe"]["probability_of_improvement"]}
    assert poi["mappo", "qmix"] == pytest.approx(1.0)  # every mappo run beats every qmix run


def test_reference_flags_in_report(report_dir):
    report = json.loads((report_dir / "report.json").read_text())
    mpe = report["envs"]["mpe"]["tasks"]["simple_spread"]["algos"]
    assert mpe["mappo"]["references"][0]["flag"] is True  # -50 outside our CI
    assert mpe["qmix"]["references"][0]["flag"] is False  # our IQM inside [-30, 0]
    assert report["envs"]["smax"]["tasks"]["3m"]["algos"]["qmix"]["references"][0]["flag"] is True
    other = report["envs"]["smax"]["references"]
    assert [(r["algo"], r["metric"], r["flag"]) for r in other] == [("mappo", "return", True)]
    md = (report_dir / "report.md").read_text()
    assert "- Flagged, mappo: the published value -50.000 is outside our 95% IQM CI" in md
    assert "Note: longer episodes" in md
    assert "| n/a | n/a |" in md  # an algorithm with no reference


def test_build_report_is_reproducible_and_trims_with_five_seeds():
    data = {"mpe": {"simple_spread": make_results(seeds=5)["mpe"]["simple_spread"]}}
    data["mpe"]["simple_spread"]["mappo"]["seed_4"]["absolute_metrics"]["return"] = [90.0, 110.0]  # an outlier: 100
    first = build_report(data, {"name": "five"}, {}, None, reps=REPS, seed=1)
    row = first["envs"]["mpe"]["tasks"]["simple_spread"]["algos"]["mappo"]
    # scores -7, -5, -3, -1, 100; floor(5 / 4) = 1 cut at each end -> -5, -3, -1 -> IQM -3 (the mean is 16.8)
    assert row["iqm"] == pytest.approx(-3.0) and row["mean"] == pytest.approx(16.8)
    assert build_report(data, {"name": "five"}, {}, None, reps=REPS, seed=1) == first


def test_degenerate_folders_do_not_crash(tmp_path):
    data = make_results(seeds=1)
    data["mpe"]["simple_spread"] = {"mappo": data["mpe"]["simple_spread"]["mappo"]}  # one algo on one task
    for algo in ALGOS:  # smax: unfinished runs, different lengths, all-equal win rates
        for task in ENVS["smax"]:
            run = data["smax"][task][algo]["seed_0"]
            del run["absolute_metrics"], run["step_2"]
            run["step_1"]["win_rate"] = [1.0, 1.0, 1.0, 1.0]
    del data["smax"]["3m"]["qmix"]["seed_0"]["step_1"]
    out = write_folder(tmp_path / "deg", data)
    md = write_report(out, reps=REPS).read_text()
    report = json.loads((out / "report.json").read_text())
    row = report["envs"]["smax"]["tasks"]["2s3z"]["algos"]["mappo"]
    assert row["score_source"] == "last_step" and row["iqm_ci"] == [1.0, 1.0]
    assert report["envs"]["smax"]["tasks"]["3m"]["curves"]["qmix"]["step_count"] == [0]
    assert "last evaluation (runs not finished)" in md
    assert report["envs"]["mpe"]["aggregate"]["left_out"] == ["simple_spread"]
    single = write_folder(tmp_path / "one", {"mpe": {"simple_spread": data["mpe"]["simple_spread"]}})
    assert "Not computed: only one algorithm" in write_report(single, reps=REPS).read_text()
    empty = write_folder(tmp_path / "empty", {})
    assert "No run has reported an evaluation yet." in write_report(empty, reps=REPS).read_text()


def test_missing_results_names_the_file_and_the_command(tmp_path):
    with pytest.raises(MarlError, match=r"results\.json not found.*marl benchmark run"):
        write_report(tmp_path)
    (tmp_path / "results.json").write_text("{not json")
    with pytest.raises(MarlError, match="not readable JSON"):
        write_report(tmp_path)


# ------------------------------------------------------------------ the results format
def test_validate_accepts_the_synthetic_results():
    validate_marl_eval(make_results())
    validate_marl_eval({})  # nothing finished yet
    unfinished = make_results(seeds=1)
    del unfinished["mpe"]["simple_spread"]["mappo"]["seed_0"]["absolute_metrics"]
    validate_marl_eval(unfinished)


def _broken(kind: str) -> Dict[str, Any]:
    data = make_results(seeds=1)
    run = data["mpe"]["simple_spread"]["mappo"]["seed_0"]
    if kind == "upper case algo":
        data["mpe"]["simple_spread"]["MAPPO"] = data["mpe"]["simple_spread"].pop("mappo")
    elif kind == "comma":
        data["mpe"]["simple_spread"]["mappo,rnn"] = data["mpe"]["simple_spread"].pop("mappo")
    elif kind == "gap":
        run["step_3"] = run.pop("step_1")
    elif kind == "decreasing":
        run["step_2"]["step_count"] = 10
    elif kind == "float step_count":
        run["step_1"]["step_count"] = 500.5
    elif kind == "negative time":
        run["step_1"]["elapsed_time"] = -1.0
    elif kind == "unequal lengths":
        run["step_1"]["return"] = [1.0]
        run["step_1"]["extra_metric"] = [1.0, 2.0]
    elif kind == "absolute names":
        run["absolute_metrics"]["win_rate"] = [1.0, 0.0, 1.0, 1.0]
    elif kind == "not numbers":
        run["step_1"]["return"] = ["a", "b", "c", "d"]
    elif kind == "run key":
        data["mpe"]["simple_spread"]["mappo"]["run_0"] = data["mpe"]["simple_spread"]["mappo"].pop("seed_0")
    elif kind == "no return":
        run["step_1"]["reward"] = run["step_1"].pop("return")
    return data


@pytest.mark.parametrize(
    "kind, path, words",
    [
        ("upper case algo", "mpe/simple_spread/MAPPO", "lower case"),
        ("comma", "mpe/simple_spread/mappo,rnn", "commas"),
        ("gap", "mpe/simple_spread/mappo/seed_0", "missing step_1."),
        ("decreasing", "mpe/simple_spread/mappo/seed_0/step_2", "step_count 10 is smaller"),
        ("float step_count", "mpe/simple_spread/mappo/seed_0/step_1", "step_count must be an integer"),
        ("negative time", "mpe/simple_spread/mappo/seed_0/step_1", "elapsed_time must be a number >= 0"),
        ("unequal lengths", "mpe/simple_spread/mappo/seed_0/step_1", "differ in length"),
        ("absolute names", "mpe/simple_spread/mappo/seed_0/absolute_metrics", "differ from step_0's"),
        ("not numbers", "mpe/simple_spread/mappo/seed_0/step_1", "list of finite numbers"),
        ("run key", "mpe/simple_spread/mappo/run_0", "seed_<k>"),
        ("no return", "mpe/simple_spread/mappo/seed_0/step_1", "has no 'return'"),
    ],
)
def test_validate_rejects_malformed_results(kind, path, words):
    with pytest.raises(MarlError) as err:
        validate_marl_eval(_broken(kind))
    assert str(err.value).startswith(path + ":") and words in str(err.value)


def test_validate_rejects_other_shapes():
    with pytest.raises(MarlError, match="results: expected a JSON object"):
        validate_marl_eval([1, 2])
    with pytest.raises(MarlError, match="'extra'"):
        validate_marl_eval({"extra": make_results()["mpe"]})
    with pytest.raises(MarlError, match="mpe/simple_spread/mappo/seed_0: has no evaluation"):
        validate_marl_eval({"mpe": {"simple_spread": {"mappo": {"seed_0": {"absolute_metrics": {"return": [1.0]}}}}}})


# ------------------------------------------------------------------ marl-eval reads the same JSON
@pytest.mark.parametrize(
    "env, metrics", [("mpe", {"mean_norm_return"}), ("smax", {"mean_norm_return", "mean_win_rate"})]
)
def test_marl_eval_reads_the_results(env, metrics):
    utils = pytest.importorskip("marl_eval.utils.data_processing_utils")
    raw = json.loads(json.dumps(make_results()))  # exactly what results.json holds
    processed = utils.data_process_pipeline(copy.deepcopy(raw), metrics_to_normalize=["return"])
    assert "extra" in processed  # the pipeline returns its input unchanged (no "extra") when it fails to parse
    matrices, curves = utils.create_matrices_for_rliable(processed, env, metrics_to_normalize=["return"])
    assert set(matrices) == metrics
    for metric in metrics:
        for algo in ALGOS:
            assert matrices[metric][algo].shape == (3, 2)  # runs x tasks
            assert curves[metric][algo].shape == (3, 2, len(STEPS))  # runs x tasks x evaluations


def _series(points):
    """marl-eval run from ``[(step_count, elapsed_time, scores), ...]``."""
    return {f"step_{i}": {"step_count": s, "elapsed_time": t, "return": list(v)} for i, (s, t, v) in enumerate(points)}


def test_time_to_target_by_hand():
    from marl.benchmarks.targets import first_reach, target_lines, time_to_target

    # seed_0 reaches -40 at its third evaluation (mean -39), seed_1 at its second (mean -40 exactly: >=),
    # seed_2 never (its best mean is -41); the evaluations are listed out of order on purpose
    data = {
        "mpe": {
            "simple_spread": {
                "mappo": {
                    "seed_0": _series([(20_000, 30.0, [-45, -43]), (0, 0.0, [-80]), (40_000, 61.5, [-38, -40])]),
                    "seed_1": _series([(0, 0.0, [-79]), (20_000, 28.0, [-40, -40]), (40_000, 55.0, [-30])]),
                    "seed_2": _series([(0, 0.0, [-81]), (20_000, 29.0, [-41, -41])]),
                },
                "qmix": {"seed_0": _series([(0, 0.0, [-60]), (20_000, 40.0, [-39])])},
            }
        }
    }
    assert first_reach(data["mpe"]["simple_spread"]["mappo"]["seed_0"], "return", -40) == (40_000, 61.5)
    rows = time_to_target(data, [{"env": "mpe", "task": "simple_spread", "metric": "return", "value": -40}])
    mappo = next(r for r in rows if r["algo"] == "mappo")
    assert (mappo["runs"], mappo["reached"]) == (3, 2)
    assert mappo["median_steps"] == 30_000 and mappo["median_seconds"] == pytest.approx((61.5 + 28.0) / 2)
    assert mappo["per_seed"]["seed_2"] is None
    only_qmix = time_to_target(
        data, [{"env": "mpe", "task": "simple_spread", "algo": "qmix", "metric": "return", "value": -40}]
    )
    assert [r["algo"] for r in only_qmix] == ["qmix"] and only_qmix[0]["median_steps"] == 20_000
    text = "\n".join(target_lines(rows))
    assert "| mpe | simple_spread | mappo | return >= -40 | 2/3 | 30,000 | 45 |" in text and "not reached" in text
