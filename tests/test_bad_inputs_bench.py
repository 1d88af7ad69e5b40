"""Bad reference bounds (a suite's ``bounds``, marl.benchmarks.bounds) and bad report/random-play inputs: each
ends in a MarlError naming the suite, the task and the key (or the bad value), before anything is written.

One table; every case gives the MarlError fragments its message must hold. Cases that touch a run folder
check that its files are unchanged afterwards (no user data lost) and that no report was written.
"""

import copy
import json

import pytest
import yaml

from marl.benchmarks.bounds import random_play
from marl.benchmarks.report import write_report
from marl.benchmarks.suite import load_suite, parse_suite
from marl.errors import MarlError

SUITE = {
    "name": "tiny",
    "seeds": 1,
    "budget": {"env_steps": 1024},
    "evaluation": {"interval": 512, "episodes": 4},
    "envs": {"matrix": {"tasks": ["two_step", "penalty"]}},
    "algos": {"mappo": {}},
}
GOOD = {
    "env": "matrix",
    "task": "two_step",
    "metric": "return",
    "random": 9.5,
    "best": 16.0,
    "random_source": "exact expectation",
    "best_source": "QMIX paper",
}


def _bounds(**change):
    """A one-entry bounds list: GOOD with ``change`` (a value ``...`` drops the key)."""
    entry = {k: v for k, v in {**GOOD, **change}.items() if v is not ...}
    return [entry]


CASES = [
    # (id, bounds value, fragments of the message)
    (
        "random equal to best",
        _bounds(random=16.0),
        ["'tiny'", "matrix/two_step", "key random (16.0)", "below key best"],
    ),
    ("random above best", _bounds(random=20, best=8), ["'tiny'", "matrix/two_step", "random (20)", "best (8)"]),
    ("random a string", _bounds(random="low"), ["'tiny'", "matrix/two_step", "key random", "'low'", "finite number"]),
    ("best a boolean", _bounds(best=True), ["'tiny'", "matrix/two_step", "key best", "True"]),
    ("best infinite", _bounds(best=float("inf")), ["'tiny'", "matrix/two_step", "key best", "inf"]),
    ("random NaN", _bounds(random=float("nan")), ["'tiny'", "matrix/two_step", "key random", "nan"]),
    ("best missing", _bounds(best=...), ["'tiny'", "matrix/two_step", "lacks ['best']"]),
    ("source missing", _bounds(best_source=...), ["'tiny'", "matrix/two_step", "lacks ['best_source']"]),
    ("source empty", _bounds(random_source="  "), ["'tiny'", "matrix/two_step", "key random_source", "where"]),
    ("unknown key, a typo", _bounds(optimun=16), ["'tiny'", "matrix/two_step", "unknown key 'optimun'"]),
    ("task not in the suite", _bounds(task="climbing"), ["'tiny'", "matrix/climbing", "not a task of this suite"]),
    ("env not in the suite", _bounds(env="smax", task="3m"), ["'tiny'", "smax/3m", "not a task"]),
    ("metric unknown", _bounds(metric="score"), ["'tiny'", "matrix/two_step", "key metric 'score'"]),
    ("two entries for one task", _bounds() + _bounds(), ["'tiny'", "bounds[1]", "second entry", "matrix/two_step"]),
    ("entry not a mapping", [[9.5, 16.0]], ["'tiny'", "bounds[0]", "must be a mapping", "[9.5, 16.0]"]),
    ("bounds a mapping", {"two_step": [9.5, 16]}, ["'tiny'", "bounds must be a list", "two_step"]),
]


@pytest.mark.parametrize("bounds, fragments", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_bad_bounds_in_a_suite_file(tmp_path, bounds, fragments):
    path = tmp_path / "tiny.yaml"
    path.write_text(yaml.safe_dump({**SUITE, "bounds": bounds}))
    text = path.read_text()
    with pytest.raises(MarlError) as err:
        load_suite(str(path))
    for fragment in fragments:
        assert fragment in str(err.value), (fragment, str(err.value))
    assert path.read_text() == text  # the user's file is untouched


@pytest.mark.parametrize("bounds, fragments", [c[1:] for c in CASES[:6]], ids=[c[0] for c in CASES[:6]])
def test_bad_bounds_in_a_run_folder_stop_the_report_and_lose_nothing(tmp_path, bounds, fragments):
    # a run folder whose suite.yaml was edited by hand: the report refuses before writing anything
    point = {"step_count": 0, "elapsed_time": 0.0, "return": [10.0]}
    data = {"matrix": {"two_step": {"mappo": {"seed_0": {"step_0": point, "absolute_metrics": {"return": [10.0]}}}}}}
    (tmp_path / "results.json").write_text(json.dumps(data))
    (tmp_path / "suite.yaml").write_text(yaml.safe_dump({"name": "tiny", "bounds": bounds}))
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    with pytest.raises(MarlError) as err:
        write_report(tmp_path, reps=10)
    for fragment in [f for f in fragments if f != "not a task of this suite"]:
        assert fragment in str(err.value), (fragment, str(err.value))
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == before  # no report, nothing changed


OTHER = [
    ("report --bounds names no suite", lambda tmp: _report_from(tmp, "smokee"), ["'smokee'", "Did you mean 'smoke'"]),
    (
        "report --bounds of a suite with bad bounds",
        lambda tmp: _report_from(tmp, _bad_suite_file(tmp)),
        ["'tiny'", "key random"],
    ),
    (
        "random play of 0 episodes",
        lambda tmp: random_play("matrix", "two_step", {}, episodes=0),
        ["episodes", "0", ">= 1"],
    ),
    (
        "random play of 2.5 episodes",
        lambda tmp: random_play("matrix", "two_step", {}, episodes=2.5),
        ["episodes", "2.5"],
    ),
    ("random play of an unknown task", lambda tmp: random_play("matrix", "two_stepp", {}, episodes=4), ["two_stepp"]),
    (
        "a suite task not in lower case (caught at load, not after the runs)",
        lambda tmp: parse_suite({**SUITE, "envs": {"matrix": {"tasks": ["Two_Step"]}}}),
        ["'Two_Step'", "lower case", "use 'two_step'"],
    ),
]


def _report_from(tmp, suite):
    (tmp / "results.json").write_text(json.dumps({}))
    (tmp / "suite.yaml").write_text("name: old\n")
    write_report(tmp, reps=10, bounds_from=suite)


def _bad_suite_file(tmp):
    path = tmp / "bad_suite.yaml"
    path.write_text(yaml.safe_dump({**SUITE, "bounds": _bounds(random=99.0)}))
    return str(path)


@pytest.mark.parametrize("call, fragments", [c[1:] for c in OTHER], ids=[c[0] for c in OTHER])
def test_bad_report_and_random_play_inputs(tmp_path, call, fragments):
    with pytest.raises(MarlError) as err:
        call(tmp_path)
    for fragment in fragments:
        assert fragment in str(err.value), (fragment, str(err.value))
    assert not (tmp_path / "report.md").exists()


def test_good_bounds_pass_and_reach_the_suite():
    suite = parse_suite(copy.deepcopy({**SUITE, "bounds": _bounds()}))
    assert suite.bounds == [GOOD]
