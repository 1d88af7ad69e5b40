"""The BenchMARL returns anchor: its child's JSON parsing, the scaling to marl's team return, the side-by-side
table and its bad-input errors (no BenchMARL needed: a fake child stands in for it)."""

import json
import sys

import pytest

import marl.benchmarks.benchmarl_returns as anchor
from marl.benchmarks.benchmarl_returns import child_command, main, side_by_side, to_marl_eval
from marl.benchmarks.benchmarl_train_child import _evaluations
from marl.errors import MarlError

SETTINGS = {"algo": "maddpg", "task": "balance", "seed": 1, "frames": 12000, "n_agents": 4}
CHILD_OUT = {
    "settings": SETTINGS,
    "evaluations": [{"frames": 6000, "returns": [-2.0, -4.0]}, {"frames": 12000, "returns": [1.0, 0.5]}],
    "wall_s": 30.0,
    "cpu_s": 29.0,
}


def test_child_reads_benchmarls_marl_eval_json(tmp_path):
    # BenchMARL's JsonWriter layout: env -> task -> algo -> seed -> absolute_metrics and step_<i>, steps in any order
    run = {
        "absolute_metrics": {"return": [3.0]},
        "step_2": {"step_count": 12000, "return": [1.0], "agent_return": [1.0]},
        "step_1": {"step_count": 6000, "return": [-2.0], "agent_return": [-2.0]},
    }
    sub = tmp_path / "exp"
    sub.mkdir()
    (sub / "exp.json").write_text(json.dumps({"vmas": {"balance": {"maddpg": {"seed_0": run}}}}))
    (sub / "config.json").write_text(json.dumps({"not": "an evaluation"}))
    assert _evaluations(str(tmp_path)) == [{"frames": 6000, "returns": [-2.0]}, {"frames": 12000, "returns": [1.0]}]


def test_to_marl_eval_scales_to_the_team_sum():
    out = to_marl_eval(CHILD_OUT)
    run = out["vmas"]["balance"]["benchmarl_maddpg"]["seed_1"]
    assert run["step_1"] == {"step_count": 6000, "return": [-8.0, -16.0]}  # 4 agents x the mean over agents
    assert run["step_2"]["return"] == [4.0, 2.0]
    assert out["run"]["wall_s"] == 30.0 and out["run"]["return_scale"] == 4


def test_to_marl_eval_refuses_a_run_without_evaluations():
    with pytest.raises(MarlError, match="no evaluation"):
        to_marl_eval({**CHILD_OUT, "evaluations": []})


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(algo="mappo"), "'mappo' is not one of maddpg, iddpg, masac, isac"),
        (dict(task="transport"), "'transport' is not one of balance, navigation, sampling"),
        (dict(eval_interval=5000), "multiple of BenchMARL's 6000"),
        (dict(frames=100_000), "divides --frames 100000"),
    ],
)
def test_child_command_refuses_bad_input(kwargs, match):
    args = dict(
        python="py", algo="masac", task="balance", seed=0, frames=120_000, eval_interval=60_000, eval_episodes=10
    )
    with pytest.raises(MarlError, match=match):
        child_command(**{**args, **kwargs})


def _marl_run(points):
    """A marl-eval run with evaluations ``[(step, [returns], elapsed)]`` and the absolute metric marl's runner adds."""
    steps = {f"step_{i}": {"step_count": s, "return": r, "elapsed_time": t} for i, (s, r, t) in enumerate(points)}
    return {"absolute_metrics": {"return": [123.0]}, **steps}


def test_side_by_side_scores_the_shared_evaluations_above_zero():
    marl_results = {
        "vmas": {
            "balance": {
                "maddpg": {
                    "seed_0": _marl_run([(0, [-99.0], 1.0), (6000, [-4.0], 10.0), (12000, [2.0, 4.0], 20.0)]),
                    "seed_1": _marl_run([(0, [-99.0], 1.0), (6000, [0.0], 12.0), (12000, [5.0], 22.0)]),
                },
                "maddpg_async": {"seed_0": _marl_run([(6000, [1.0], 5.0), (12000, [7.0], 9.0)])},
            }
        }
    }
    bm = [to_marl_eval(CHILD_OUT), to_marl_eval({**CHILD_OUT, "settings": {**SETTINGS, "seed": 2}, "wall_s": 50.0})]
    table = side_by_side(marl_results, bm, "balance")
    assert "Evaluations at env steps [6000, 12000]" in table  # step 0 is marl's only: left out
    rows = {line.split(" | ")[1]: line for line in table.splitlines() if line.startswith("| maddpg |")}
    # the suite's variant of maddpg comes after marl's row and before BenchMARL's
    names = [line.split(" | ")[0][2:] for line in table.splitlines() if line.startswith("| maddpg")]
    assert names == ["maddpg", "maddpg_async", "maddpg"]
    assert "| maddpg_async | marl | 1 | 7.000 [7.000, 7.000] | 4.000 [4.000, 4.000] | 9 |" in table
    # marl: last = 3.0 and 5.0 (IQM of 2 runs = mean 4.0); curve = (-4 + 3) / 2 = -0.5 and (0 + 5) / 2 = 2.5 -> 1.0
    assert "| 2 | 4.000 [3.000, 5.000] | 1.000 [-0.500, 2.500] | 21 |" in rows["marl"]
    # BenchMARL, both seeds the same run: last 4 x 0.75 = 3.0, curve (-12 + 3) / 2 = -4.5; wall 30 and 50 s
    assert "| 2 | 3.000 [3.000, 3.000] | -4.500 [-4.500, -4.500] | 40 |" in rows["BenchMARL"]


def test_side_by_side_names_a_missing_evaluation():
    marl_results = {"vmas": {"balance": {"maddpg": {"seed_0": _marl_run([(0, [1.0], 1.0), (12000, [1.0], 2.0)])}}}}
    bm = [to_marl_eval({**CHILD_OUT, "evaluations": CHILD_OUT["evaluations"] + [{"frames": 18000, "returns": [0.0]}]})]
    table = side_by_side(marl_results, bm, "balance")  # only 12000 is shared: that is the one scored
    assert "Evaluations at env steps [12000]" in table
    with pytest.raises(MarlError, match="no BenchMARL run of task 'navigation'"):
        side_by_side(marl_results, bm, "navigation")


FAKE_CHILD = f"""
import json, sys
args = dict(zip(sys.argv[1::2], sys.argv[2::2]))
if args["--seed"] == "7":
    sys.stderr.write("ModuleNotFoundError: No module named 'benchmarl'")
    sys.exit(1)
print("a progress line")
print(json.dumps({json.dumps(CHILD_OUT)}))
"""


def test_main_runs_the_child_writes_the_run_and_never_overwrites(tmp_path, monkeypatch):
    fake = tmp_path / "child.py"
    fake.write_text(FAKE_CHILD)
    monkeypatch.setattr(anchor, "_CHILD", fake)
    out = tmp_path / "runs" / "maddpg_s1.json"
    argv = ["--benchmarl-python", sys.executable, "--algo", "maddpg", "--frames", "12000", "--eval-interval", "6000"]
    main([*argv, "--out", str(out)])
    assert json.loads(out.read_text())["vmas"]["balance"]["benchmarl_maddpg"]["seed_1"]["step_2"]["return"] == [
        4.0,
        2.0,
    ]
    with pytest.raises(MarlError, match="exists; a run never overwrites"):
        main([*argv, "--out", str(out)])
    with pytest.raises(MarlError, match="exited with code 1") as failed:
        main([*argv, "--seed", "7", "--out", str(tmp_path / "bad.json")])
    assert failed.value.args[0].endswith("No module named 'benchmarl'")  # the child's stderr tail
    assert not (tmp_path / "bad.json").exists()


def test_main_refuses_missing_arguments(tmp_path):
    with pytest.raises(MarlError, match="needs --algo and --out"):
        main(["--algo", "maddpg"])
    with pytest.raises(MarlError, match="needs --marl-results"):
        main(["--table", str(tmp_path / "x.json")])
    (tmp_path / "run.json").write_text("{}")
    with pytest.raises(MarlError, match=r"no such file: .*results.json \(--marl-results: the results.json"):
        main(["--table", str(tmp_path / "run.json"), "--marl-results", str(tmp_path / "results.json")])
    with pytest.raises(MarlError, match="does not exist"):
        main(["--benchmarl-python", str(tmp_path / "nope"), "--algo", "maddpg", "--out", str(tmp_path / "o.json")])
