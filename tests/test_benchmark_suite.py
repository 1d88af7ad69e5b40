"""Benchmark suites: bundled suites load, bad suites fail before anything runs with the closest name."""

import pytest
import yaml

from marl.benchmarks.suite import bundled_suites, load_suite, parse_suite
from marl.errors import MarlError

BASE = {
    "name": "t",
    "seeds": 2,
    "budget": {"env_steps": 100},
    "evaluation": {"interval": 50, "episodes": 4},
    "envs": {"matrix": {"tasks": ["two_step"]}},
    "algos": {"qmix": {}},
}


def _with(**changes):
    raw = yaml.safe_load(yaml.safe_dump(BASE))
    raw.update(changes)
    return raw


def test_bundled_suites_load_and_expand():
    assert {"smoke", "mpe", "smax", "vmas", "matrix"} <= set(bundled_suites())
    mpe = load_suite("mpe")
    assert {"simple_spread", "simple_speaker_listener", "simple_reference", "simple_adversary"} == set(
        mpe.envs["mpe"]["tasks"]
    )
    assert set(mpe.algos) == {"mappo", "ippo", "qmix", "vdn"}
    assert len(mpe.runs()) == 4 * 4 * 5 and mpe.env_steps == 1_000_000
    smax = load_suite("smax")
    hpn = [r for r in smax.runs() if r.algo_label == "hpn_qmix"][0]
    assert hpn.algo == "qmix" and hpn.overrides["agent"] == "hpn" and "algo" not in hpn.overrides
    assert set(load_suite("vmas").envs["vmas"]["tasks"]) == {"balance", "navigation", "sampling", "transport"}
    assert set(load_suite("matrix").envs["matrix"]["tasks"]) == {"two_step", "penalty"}


def test_runs_carry_seed_env_overrides_and_keys():
    raw = _with(
        envs={
            "matrix": {"tasks": ["two_step", "penalty"], "kwargs": {"num_envs": 8}, "overrides": {"qmix": {"lr": 0.01}}}
        },
        algos={"qmix": {"lr": 0.001, "td_lambda": 0.0}, "vdn": {}},
    )
    runs = parse_suite(raw).runs()
    assert len(runs) == 2 * 2 * 2
    r = runs[0]
    assert r.key == "matrix/two_step/qmix/seed_0"
    assert r.overrides == {"lr": 0.01, "td_lambda": 0.0, "seed": 0}  # the env's override wins
    assert r.env_kwargs == {"num_envs": 8}
    assert [x.seed for x in runs[:2]] == [0, 1]
    assert parse_suite(raw).with_seeds([5, 7]).seeds == [5, 7]


def test_task_kwargs_override_the_env_kwargs_of_one_task():
    """VMAS balance, navigation and sampling take different make_env arguments: ``task_kwargs`` per task."""
    raw = _with(
        envs={
            "matrix": {
                "tasks": ["two_step", "penalty"],
                "kwargs": {"num_envs": 8},
                "task_kwargs": {"penalty": {"num_envs": 2, "k": -50}},
            }
        }
    )
    suite = parse_suite(raw)
    assert suite.env_kwargs("matrix", "two_step") == {"num_envs": 8}
    assert suite.env_kwargs("matrix", "penalty") == {"num_envs": 2, "k": -50}
    assert {r.task: r.env_kwargs for r in suite.runs()}["penalty"] == {"num_envs": 2, "k": -50}
    with pytest.raises(MarlError, match="Unknown key 'penalti' in envs.matrix.task_kwargs.*'penalty'"):
        parse_suite(_with(envs={"matrix": {"tasks": ["penalty"], "task_kwargs": {"penalti": {}}}}))
    with pytest.raises(MarlError, match="task_kwargs.penalty must map make_env arguments, got 3"):
        parse_suite(_with(envs={"matrix": {"tasks": ["penalty"], "task_kwargs": {"penalty": 3}}}))


def test_with_tasks_runs_only_the_named_tasks():
    """``marl benchmark run --tasks``: a task by name or as <env>/<task>; an env left without tasks goes."""
    raw = _with(
        envs={"matrix": {"tasks": ["two_step", "penalty"]}, "mpe": {"tasks": ["simple_spread"]}},
        algos={"qmix": {}},
    )
    suite = parse_suite(raw)
    one = suite.with_tasks(["penalty"])
    assert [r.key for r in one.runs()] == ["matrix/penalty/qmix/seed_0", "matrix/penalty/qmix/seed_1"]
    assert list(one.envs) == ["matrix"] and one.tasks_given == ["penalty"]
    assert len(suite.runs()) == 6  # the suite itself is unchanged
    assert {r.task for r in suite.with_tasks(["mpe/simple_spread", "two_step"]).runs()} == {"simple_spread", "two_step"}
    with pytest.raises(MarlError, match=r"--tasks 'penalti' is no task of this suite.*matrix/penalty"):
        suite.with_tasks(["penalti"])


def test_with_algos_runs_only_the_named_algorithms():
    """``marl benchmark run --algos``: labels of the suite's ``algos``, in the suite's order, with their settings."""
    raw = _with(
        envs={"matrix": {"tasks": ["two_step"]}},
        algos={"qmix": {}, "vdn": {}, "fast_qmix": {"algo": "qmix", "lr": 0.01}},
    )
    suite = parse_suite(raw)
    two = suite.with_algos(["fast_qmix", "vdn"])
    assert [r.key for r in two.runs() if r.seed == 0] == [
        "matrix/two_step/vdn/seed_0",
        "matrix/two_step/fast_qmix/seed_0",
    ]
    assert {r.algo: r.overrides["lr"] for r in two.runs() if r.algo_label == "fast_qmix"} == {"qmix": 0.01}
    assert two.algos_given == ["fast_qmix", "vdn"] and len(suite.runs()) == 6  # the suite itself is unchanged
    both = suite.with_tasks(["two_step"]).with_algos(["qmix"])
    assert [r.key for r in both.runs()] == ["matrix/two_step/qmix/seed_0", "matrix/two_step/qmix/seed_1"]
    with pytest.raises(MarlError, match=r"--algos 'qmx' is not an algorithm of suite .*it has: qmix, vdn, fast_qmix"):
        suite.with_algos(["qmix", "qmx"])


@pytest.mark.parametrize(
    "changes, words",
    [
        ({"budjet": {"env_steps": 1}}, ["budjet", "'budget'"]),
        ({"envs": {"mpee": {"tasks": ["simple_spread"]}}}, ["mpee", "'mpe'"]),
        ({"envs": {"mpe": {"tasks": ["simple_sprad"]}}}, ["simple_sprad", "'simple_spread'"]),
        ({"envs": {"matrix": {"task": ["two_step"]}}}, ["task", "'tasks'"]),
        ({"algos": {"qmixx": {}}}, ["qmixx", "'qmix'"]),
        ({"algos": {"qmix": {"lrr": 0.1}}}, ["lrr", "'lr'"]),
        ({"algos": {"qmix": {"gamma": 2.0}}}, ["gamma", "2.0"]),
        ({"envs": {"matrix": {"tasks": ["two_step"], "overrides": {"vdn": {}}}}}, ["vdn", "qmix"]),
        ({"algos": {"qmix": {"seed": 3}}}, ["'seed'", "the suite's seeds"]),
        ({"algos": {"qmix": {"checkpoint_every": 3}}}, ["'checkpoint_every'", "runner"]),
        ({"seeds": 0}, ["seeds", "0"]),
        ({"seeds": [1, 1]}, ["repeat"]),
        ({"budget": {"env_steps": -5}}, ["budget.env_steps", "-5"]),
        ({"evaluation": {"interval": 0, "episodes": 4}}, ["evaluation.interval"]),
        ({"evaluation": {"interval": 10, "episods": 4}}, ["episods", "'episodes'"]),
        ({"evaluation": {"interval": 10, "actions": "sampled"}}, ["sampled", "'sample'", "greedy"]),
        ({"name": "My,Suite"}, ["My,Suite", "commas"]),
        (
            {
                "references": [
                    {"env": "matrix", "task": "two_step", "algo": "qmix", "metric": "retrun", "value": 1, "source": "x"}
                ]
            },
            ["retrun", "'return'"],
        ),
        (
            {"references": [{"env": "matrix", "task": "two_step", "algo": "qmix", "metric": "return", "value": 1}]},
            ["source"],
        ),
    ],
)
def test_bad_suites_name_the_bad_value_and_the_closest_choice(changes, words):
    with pytest.raises(MarlError) as e:
        parse_suite(_with(**changes))
    for w in words:
        assert w in str(e.value), (w, str(e.value))


def test_unknown_suite_names_and_files(tmp_path, monkeypatch):
    with pytest.raises(MarlError, match="'smoke'"):
        load_suite("smok")
    with pytest.raises(MarlError, match="does not exist"):
        load_suite(str(tmp_path / "nope.yaml"))
    bad = tmp_path / "bad.yaml"
    bad.write_text("envs: [unclosed")
    with pytest.raises(MarlError, match="not valid YAML"):
        load_suite(str(bad))
    (tmp_path / "smoke").mkdir()  # an output folder named like a bundled suite, in the working directory
    monkeypatch.chdir(tmp_path)
    assert load_suite("smoke").name == "smoke"
    user = tmp_path / "mine.yaml"
    user.write_text(yaml.safe_dump(BASE))
    assert load_suite(str(user)).name == "t"


def test_command_line_lists_suites_and_refuses_a_bad_one_with_exit_2(capsys):
    from marl.cli import main

    assert main(["benchmark", "list"]) == 0
    assert "smoke" in capsys.readouterr().out
    assert main(["benchmark", "run", "smok"]) == 2
    assert "Did you mean 'smoke'?" in capsys.readouterr().err
    assert main(["benchmark", "report", "/nonexistent/folder"]) == 2
    assert "marl benchmark run" in capsys.readouterr().err


@pytest.mark.parametrize(
    "target, words",
    [
        (
            {"env": "mpe", "task": "simple_sprad", "metric": "return", "value": -40},
            "not a task of this suite.*simple_spread",
        ),
        ({"env": "mpe", "task": "simple_spread", "algo": "mapo", "metric": "return", "value": -40}, "mapo.*mappo"),
        ({"env": "mpe", "task": "simple_spread", "metric": "reward", "value": -40}, "reward.*return"),
        ({"env": "mpe", "task": "simple_spread", "metric": "return", "value": "high"}, "must be a number"),
        ({"env": "mpe", "task": "simple_spread", "metric": "return"}, r"lacks \['value'\]"),
        ({"env": "mpe", "task": "simple_spread", "metric": "return", "value": -40, "seeds": 3}, "seeds"),
    ],
)
def test_bad_targets_are_named(target, words):
    from marl.benchmarks.suite import parse_suite

    raw = {
        "name": "t",
        "budget": {"env_steps": 1000},
        "evaluation": {"interval": 500},
        "envs": {"mpe": {"tasks": ["simple_spread"]}},
        "algos": {"mappo": {}},
        "targets": [target],
    }
    with pytest.raises(MarlError, match=words):
        parse_suite(raw)
    raw["targets"] = [{"env": "mpe", "task": "simple_spread", "metric": "return", "value": -40}]
    assert parse_suite(raw).targets == raw["targets"]
