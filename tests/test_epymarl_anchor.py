"""The EPyMARL anchor's parsing of sacred's output and its bad-input errors (no EPyMARL needed)."""

import json

import pytest

from marl.benchmarks.epymarl_anchor import TASK_KEY, check_paths, epymarl_command, find_run_dir, main, parse_run
from marl.errors import MarlError

# A hand-written sacred run as EPyMARL's main.py writes it (FileStorageObserver: config.json,
# run.json, metrics.json), trimmed to the keys the anchor reads plus one it ignores.
CONFIG = {
    "name": "mappo",
    "seed": 1,
    "t_max": 100000,
    "common_reward": True,
    "reward_scalarisation": "sum",
    "test_nepisode": 100,
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
    assert out["final_env_steps"] == 100500
    assert out["final_test_return"] == 0.45  # the last test, not the best
    assert out["max_test_return"] == 0.61
    assert out["mean_test_return"] == pytest.approx((0.02 + 0.61 + 0.45) / 3)
    assert out["wall_s"] == pytest.approx(100.0)  # 01:54:47 -> 01:56:27
    assert out["env_steps_per_s"] == pytest.approx(1005.0)


def test_unfinished_run_has_no_wall_clock(tmp_path):
    out = parse_run(_write_run(tmp_path / "1", run={"status": "RUNNING", "start_time": RUN["start_time"]}))
    assert out["wall_s"] is None and out["env_steps_per_s"] is None and out["final_test_return"] == 0.45


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
        (lambda p: parse_run(_write_run(p / "1", metrics={"return_mean": METRICS["return_mean"]})), "no test_return_mean"),
        (lambda p: main(["--algo", "ia2c"]), "--epymarl-src and --epymarl-python"),
    ],
)
def test_bad_input_raises_marl_error(tmp_path, call, fragment):
    with pytest.raises(MarlError, match=fragment.replace(".", r"\.")):
        call(tmp_path)


def _fake_src(tmp_path):
    (tmp_path / "src").mkdir(exist_ok=True)
    (tmp_path / "src" / "main.py").write_text("")
    return tmp_path
