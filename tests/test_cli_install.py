"""Command line and packaging: `marl list|train|eval|bench`, and `pip install .` / `-e .` both import
marl.envs, marl.algos and marl.benchmarks."""

import importlib.metadata
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from marl.cli import main

REPO = Path(__file__).resolve().parents[1]


def test_list(capsys):
    assert main(["list"]) == 0
    out = capsys.readouterr().out
    assert "mpe" in out and "mappo" in out and "vmas" in out and "simple_spread" not in out  # families only
    assert main(["list", "envs"]) == 0
    out = capsys.readouterr().out
    assert "mpe: " in out and "simple_spread" in out and "vmas: " in out and "navigation" in out


def test_train_then_eval(ray_session, run_dir, capsys, monkeypatch):
    code = main(
        [
            "train",
            "env=mpe:simple_spread",
            "algo=ippo",
            "env.num_envs=4",
            "stop.iterations=1",
            f"log_dir={run_dir}",
            "progress=false",
            "eval_episodes=0",
            "epochs=1",
        ]
    )
    assert code == 0
    summary = capsys.readouterr().out
    assert '"checkpoint"' in summary and '"env_steps": 100' in summary
    ckpts = list(Path(run_dir).glob("*/checkpoints/checkpoint_*"))
    assert len(ckpts) == 1
    assert main(["eval", str(ckpts[0]), "episodes=4"]) == 0
    stats = json.loads(capsys.readouterr().out)
    assert stats["episode_length_mean"] == 25.0 and "episode_return_mean" in stats
    monkeypatch.chdir(Path(run_dir))  # a relative path works too (RLlib alone would read it as a URI)
    assert main(["eval", str(ckpts[0].relative_to(Path(run_dir).resolve())), "episodes=4"]) == 0


def test_cli_errors_name_choices(capsys):
    assert main(["train", "env=mpe:simple_sprad", "algo=mappo"]) == 2
    err = capsys.readouterr().err
    assert "simple_sprad" in err and "simple_spread" in err
    assert main(["train", "env=mpe:simple_spread"]) == 2


def test_bench_command_comes_from_the_benchmarks_plugin(capsys):
    plugins = {ep.name: ep.value for ep in importlib.metadata.entry_points(group="marl.plugins")}
    assert plugins.get("benchmarks") == "marl.benchmarks"
    with pytest.raises(SystemExit) as exit_:
        main(["bench", "--help"])
    assert exit_.value.code == 0
    out = capsys.readouterr().out
    assert "usage: marl bench" in out and "--json PATH" in out


def test_editable_install_maps_envs_and_algos_to_repo_folders():
    import marl.algos
    import marl.benchmarks
    import marl.envs

    # CI installs with `pip install -e .`: the packages must resolve to the top-level folders.
    assert Path(marl.envs.__file__).resolve().parent == REPO / "envs"
    assert Path(marl.algos.__file__).resolve().parent == REPO / "algos"
    assert Path(marl.benchmarks.__file__).resolve().parent == REPO / "benchmarks"


def test_regular_install_imports_envs_and_algos(tmp_path):
    target = tmp_path / "site"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "-q",
            "--no-deps",
            "--no-build-isolation",
            "--target",
            str(target),
            str(REPO),
        ],
        check=True,
        capture_output=True,
    )
    code = (
        "import marl, marl.envs, marl.algos, marl.algos.ppo, marl.configs, pathlib;"
        "import marl.benchmarks.cli, marl.benchmarks.throughput, marl.benchmarks.smax, marl.benchmarks.agents;"
        "from marl.config import list_algos;"
        f"assert pathlib.Path(marl.envs.__file__).is_relative_to({str(target)!r}), marl.envs.__file__;"
        f"assert pathlib.Path(marl.benchmarks.__file__).is_relative_to({str(target)!r}), marl.benchmarks.__file__;"
        "assert 'mappo' in list_algos();"
        "assert not (pathlib.Path(marl.__file__).parent.parent / 'envs').exists();"  # no top-level envs package
        "assert not (pathlib.Path(marl.__file__).parent.parent / 'benchmarks').exists()"
    )
    env = {**os.environ, "PYTHONPATH": str(target)}
    r = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    # `marl bench` is found through the installed entry point and runs from the installed package
    r = subprocess.run(
        [sys.executable, "-m", "marl.cli", "bench", "--help"], cwd=tmp_path, env=env, capture_output=True, text=True
    )
    assert r.returncode == 0 and "usage: marl bench" in r.stdout, r.stderr
