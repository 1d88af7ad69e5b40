"""The EPyMARL anchor's parsing of sacred's output and its bad-input errors (no EPyMARL needed)."""

import json

import pytest

from marl.benchmarks.epymarl_anchor import (
    TASK_KEY,
    absolute_updates,
    check_paths,
    checkpoint_dir,
    epymarl_command,
    find_run_dir,
    main,
    parse_absolute,
    parse_run,
    train_updates,
)
from marl.errors import MarlError

# A hand-written sacred run as EPyMARL's main script writes it (FileStorageObserver: config.json,
# run.json, metrics.json), trimmed to the keys the anchor reads plus one it ignores.
CONFIG = {
    "name": "mappo",
    "seed": 1,
    "t_max": 100000,
    "common_reward": True,
    "reward_scalarisation": "sum",
    "test_nepisode": 100,
    "batch_size_run": 10,
    "env_args": {"key": TASK_KEY, "time_limit": 50, "pretrained_wrapper": None},
}
RUN = {"status": "COMPLETED", "start_time": "2026-11-27T01:54:47.000000", "stop_time": "2026-11-27T01:56:27.000000"}
METRICS = {
    "test_return_mean": {
        "steps": [500, 50500, 100500],
        "timestamps": ["2026-11-27T01:55:00", "2026-11-27T01:55:40", "2026-11-27T01:56:20"],
        "values": [0.02, 0.61, 0.45],
    },
    "return_mean": {"steps": [500], "timestamps": ["2026-11-27T01:55:00"], "values": [0.0]},
}


def _write_run(folder, config=CONFIG, run=RUN, metrics=METRICS):
    folder.mkdir(parents=True)
    for name, content in (("config.json", config), ("run.json", run), ("metrics.json", metrics)):
        (folder / name).write_text(json.dumps(content))
    return folder


def test_parse_run_reads_test_returns_wall_clock_and_speed(tmp_path):
    out = parse_run(_write_run(tmp_path / "3"))
    assert out["algo"] == "mappo" and out["seed"] == 1 and out["status"] == "COMPLETED"
    assert (out["common_reward"], out["reward_scalarisation"]) == (True, "sum")
    assert [i["env_steps"] for i in out["intervals"]] == [500, 50500, 100500]
    assert (out["final_test_env_steps"], out["final_test_return"]) == (100500, 0.45)  # the last test
    assert (out["best_test_env_steps"], out["best_test_return"]) == (50500, 0.61)
    assert out["mean_test_return"] == pytest.approx((0.02 + 0.61 + 0.45) / 3)
    assert out["env_steps"] == 100000  # a completed run trained t_max steps
    assert out["wall_s"] == pytest.approx(100.0)  # 01:54:47 -> 01:56:27
    assert out["env_steps_per_s"] == pytest.approx(1000.0)


def test_unfinished_run_counts_logged_steps_and_has_no_wall_clock(tmp_path):
    out = parse_run(_write_run(tmp_path / "1", run={"status": "RUNNING", "start_time": RUN["start_time"]}))
    assert out["env_steps"] == 100500 and out["wall_s"] is None and out["env_steps_per_s"] is None


def test_ties_pick_the_first_best_test(tmp_path):
    tied = {"test_return_mean": {"steps": [500, 50500, 100500], "values": [0.3, 0.9, 0.9]}}
    assert parse_run(_write_run(tmp_path / "1", metrics=tied))["best_test_env_steps"] == 50500


def test_parse_absolute_averages_every_logged_block(tmp_path):
    # evaluate mode: test_nepisode=100 calls of 10 envs, a log every 100 episodes, all at the checkpoint's step
    replay = {"test_return_mean": {"steps": [50500, 50500, 50500], "values": [0.5, 0.7, 0.9]}}
    out = parse_absolute(_write_run(tmp_path / "1", metrics=replay))
    assert out["absolute_test_return"] == pytest.approx(0.7)
    assert (out["absolute_episodes"], out["absolute_env_steps"], out["absolute_wall_s"]) == (300, 50500, 100.0)


def test_main_from_sacred_finds_the_run_and_writes_json(tmp_path, capsys):
    _write_run(tmp_path / "storage" / "7")
    (tmp_path / "storage" / "_sources").mkdir()  # sacred's copy of the sources: not a run
    result = main(["--from-sacred", str(tmp_path / "storage"), "--out", str(tmp_path / "r.json")])
    assert json.loads((tmp_path / "r.json").read_text()) == result
    assert json.loads(capsys.readouterr().out)["final_test_return"] == 0.45


def test_command_names_task_budget_and_storage():
    argv = epymarl_command("/e", "/py", "ia2c", 2, 400000, "/s")
    assert argv[:4] == ["/py", "/e/src/main.py", "--config=ia2c", "--env-config=gymma"]
    assert {f"env_args.key={TASK_KEY}", "env_args.time_limit=50", "t_max=400000", "seed=2"} <= set(argv)
    assert argv[-1] == "--file_storage=/s"


def test_training_saves_at_each_test_and_replay_loads_the_best():
    train = train_updates("/s")
    assert "save_model=True" in train and "test_interval=50000" in train and "save_model_interval=50000" in train
    assert "local_results_path=/s/local" in train
    assert absolute_updates("/s/local/models/x", 50500, 1000) == [
        "evaluate=True",
        "checkpoint_path=/s/local/models/x",
        "load_step=50500",
        "test_nepisode=100",  # 100 calls x 10 envs = 1000 episodes
    ]


def _two_runs(tmp_path):
    _write_run(tmp_path / "1")
    _write_run(tmp_path / "2")
    return tmp_path


@pytest.mark.parametrize(
    "call, fragment",
    [
        (lambda p: check_paths(str(p / "nowhere"), __file__, "ia2c"), "holds no src/main.py"),
        (lambda p: check_paths(str(_fake_src(p)), str(p / "no_python"), "ia2c"), "--epymarl-python"),
        (lambda p: check_paths(str(_fake_src(p)), __file__, "qmixx"), "is not one of ia2c, maa2c, coma, ippo, mappo"),
        (lambda p: find_run_dir(_two_runs(p)), "expected one sacred run"),
        (lambda p: parse_run(p), "config.json"),
        (
            lambda p: parse_run(_write_run(p / "1", metrics={"return_mean": METRICS["return_mean"]})),
            "no test_return_mean",
        ),
        (lambda p: main(["--algo", "ia2c"]), "--epymarl-src and --epymarl-python"),
        (lambda p: checkpoint_dir(p), "expected one EPyMARL model folder"),
    ],
)
def test_bad_input_raises_marl_error(tmp_path, call, fragment):
    with pytest.raises(MarlError, match=fragment.replace(".", r"\.")):
        call(tmp_path)


def _fake_src(tmp_path):
    (tmp_path / "src").mkdir(exist_ok=True)
    (tmp_path / "src" / "main.py").write_text("")
    return tmp_path
