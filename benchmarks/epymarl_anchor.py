"""The EPyMARL anchor: EPyMARL's own code on the task of suite ``epymarl_lbf``, one run per call.

EPyMARL (Papoudakis et al., 2021, "Benchmarking Multi-Agent Deep Reinforcement Learning Algorithms
in Cooperative Tasks", arXiv:2006.07869; https://github.com/uoe-agents/epymarl) is not a dependency
of marl: it is a source tree (not a package) with its own Python environment, and runs here as a
child process: its main script (github.com/uoe-agents/epymarl/blob/cbc38c0/src/main.py) with
``--config=ALGO --env-config=gymma with ...``. The environment is
made once with (``docs/benchmarks.md``, "EPyMARL side by side")::

    git clone https://github.com/uoe-agents/epymarl ~/epymarl
    python -m venv ~/.venvs/epymarl
    ~/.venvs/epymarl/bin/pip install torch==2.13.0
    ~/.venvs/epymarl/bin/pip install numpy==2.4.6 gymnasium==1.2.2 lbforaging==2.0.0 sacred pyyaml \\
        einops cloudpickle "setuptools>=77.0.3,<81" scikit-learn pygame rtree \\
        git+https://github.com/uoe-agents/smaclite.git

(sacred needs ``pkg_resources``, gone from setuptools 81; EPyMARL's github.com/uoe-agents/epymarl/blob/cbc38c0/src/envs/__init__.py
imports smaclite whatever the env, and smaclite imports scikit-learn, pygame and rtree.)

Each run uses EPyMARL's own algorithm config (github.com/uoe-agents/epymarl/blob/cbc38c0/src/config/algs/, one YAML per algorithm: parameter sharing,
10 parallel envs) and its ``gymma`` env config (a test of 100 episodes every 50k env steps) with
three changes: the task key, ``time_limit`` (the episode limit) and ``t_max``; plus ``seed`` and
``use_cuda=False``. EPyMARL's main script (github.com/uoe-agents/epymarl/blob/cbc38c0/src/main.py) already sets one torch thread; the child also gets
``OMP_NUM_THREADS=1``. Sacred writes the run to ``--file_storage`` (``config.json``,
``metrics.json``, ``run.json``), which :func:`parse_run` reads:

- ``test_return_mean`` at each test: EPyMARL's defaults (``common_reward: True``,
  ``reward_scalarisation: "sum"``) make the return the team's, the sum of the agents' rewards,
  as marl's metric ``return``; it is the mean over ``test_nepisode`` episodes, which for the
  actor-critic algorithms sample their policy (EPyMARL's ``soft_policies`` action selector
  samples in test mode too), where marl's evaluation is greedy.
- wall-clock: sacred's ``stop_time - start_time`` (seconds), and env steps per second: the last
  test's ``t_env`` (training steps; the test episodes are not counted) over that wall-clock.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from datetime import datetime
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence

from marl.errors import MarlError

__all__ = ["TASK_KEY", "ALGOS", "check_paths", "epymarl_command", "find_run_dir", "parse_run", "run_epymarl"]

TASK_KEY = "lbforaging:Foraging-8x8-2p-2f-coop-v3"
TIME_LIMIT = 50
ALGOS = ("ia2c", "maa2c", "coma", "ippo", "mappo")
TEST_INTERVAL = 50_000
BATCH_SIZE_RUN = 10  # the parallel envs of the five algorithms' configs
ABSOLUTE_SEED_OFFSET = 1000  # the replay of the best checkpoint plays other env seeds than training
SETUP_HINT = "see the setup commands in docs/benchmarks.md, section 'EPyMARL side by side'"


def check_paths(src: str, python: str, algo: str) -> None:
    """Check EPyMARL's source tree, its interpreter and the algorithm before starting a child.

    Raises:
        MarlError: ``src`` has no main script (src, main, .py), ``python`` is no file, or ``algo`` is not one
            of :data:`ALGOS`.
    """
    if not (Path(src) / "src" / "main.py").is_file():
        raise MarlError(f"--epymarl-src {src!r} holds no src/main.py (a clone of uoe-agents/epymarl); {SETUP_HINT}.")
    if not Path(python).is_file():
        raise MarlError(f"--epymarl-python {python!r} does not exist; {SETUP_HINT}.")
    if algo not in ALGOS:
        raise MarlError(f"--algo {algo!r} is not one of {', '.join(ALGOS)}.")


def epymarl_command(
    src: str, python: str, algo: str, seed: int, t_max: int, storage: str, extra: Sequence[str] = ()
) -> List[str]:
    """The argv of one EPyMARL run of ``algo`` on :data:`TASK_KEY`, sacred writing under ``storage``.

    ``extra`` are more of sacred's ``with`` updates (``key=value``), e.g. :func:`train_updates`.
    """
    return [
        python,
        str(Path(src) / "src" / "main.py"),
        f"--config={algo}",
        "--env-config=gymma",
        "with",
        f"env_args.time_limit={TIME_LIMIT}",
        f"env_args.key={TASK_KEY}",
        f"t_max={t_max}",
        f"seed={seed}",
        "use_cuda=False",
        *extra,
        f"--file_storage={storage}",
    ]


def train_updates(storage: str) -> List[str]:
    """Updates of a training run: a checkpoint at each test, so the best test's policy can be replayed.

    EPyMARL tests when ``test_interval`` env steps have passed since the last test and saves when
    ``save_model_interval`` have passed since the last save (github.com/uoe-agents/epymarl/blob/cbc38c0/src/run.py); both start at the
    first iteration, so equal intervals save the tested policy at each test. 50000 is the test interval of github.com/uoe-agents/epymarl/blob/cbc38c0/src/config/envs/gymma.yaml, that is
    ``test_interval``, restated so the two stay equal.
    """
    return [
        f"test_interval={TEST_INTERVAL}",
        "save_model=True",
        f"save_model_interval={TEST_INTERVAL}",
        f"local_results_path={Path(storage) / 'local'}",
    ]


def absolute_updates(checkpoint_dir: Path, step: int, episodes: int) -> List[str]:
    """Updates of EPyMARL's ``evaluate`` mode: load the checkpoint nearest ``step``, play ``episodes``.

    Its ``evaluate_sequential`` calls the parallel runner ``test_nepisode`` times, each call playing
    ``batch_size_run`` (10) episodes, and logs ``test_return_mean`` every ``test_nepisode`` episodes.
    """
    return [
        "evaluate=True",
        f"checkpoint_path={checkpoint_dir}",
        f"load_step={step}",
        f"test_nepisode={episodes // BATCH_SIZE_RUN}",
    ]


def find_run_dir(storage: Path) -> Path:
    """The one sacred run folder (a number, as sacred names them) under ``storage``.

    Raises:
        MarlError: none or several runs there.
    """
    runs = [p for p in Path(storage).iterdir() if p.is_dir() and p.name.isdigit()]
    if len(runs) != 1:
        raise MarlError(f"expected one sacred run under {str(storage)!r}, found {sorted(p.name for p in runs)}.")
    return runs[0]


def _read_json(path: Path) -> Dict[str, Any]:
    if not path.is_file():
        raise MarlError(f"sacred file {str(path)!r} is missing (did the EPyMARL run start?).")
    return json.loads(path.read_text())


def _test_returns(metrics: Dict[str, Any], where: Path) -> Dict[str, List]:
    if "test_return_mean" not in metrics:
        raise MarlError(f"{str(where)!r} logged no test_return_mean (logged: {sorted(metrics)}).")
    return metrics["test_return_mean"]


def _wall_s(run: Dict[str, Any]) -> Optional[float]:
    """Sacred's ``stop_time - start_time`` in seconds; ``None`` while the run has not stopped."""
    if not run.get("stop_time"):
        return None
    return (datetime.fromisoformat(run["stop_time"]) - datetime.fromisoformat(run["start_time"])).total_seconds()


def parse_run(run_dir: Path) -> Dict[str, Any]:
    """Read one sacred training run of EPyMARL: its test returns, wall-clock and env steps per second.

    Returns:
        ``algo``, ``seed``, ``task``, ``t_max``, ``status`` (sacred's), ``common_reward``,
        ``reward_scalarisation``, ``test_nepisode``, ``intervals`` (``[{"env_steps",
        "test_return_mean"}]``, one per test), ``final_test_return`` and ``final_test_env_steps``
        (the last test: EPyMARL tests every 50k steps from the first iteration, so the last test
        can fall up to 50k steps before ``t_max``), ``best_test_return`` and ``best_test_env_steps``
        (the best test, the first of ties), ``mean_test_return`` (over the tests), ``env_steps``
        (training steps: ``t_max`` once the run completed, as EPyMARL trains until ``t_env > t_max``,
        else the last step it logged), ``wall_s`` and ``env_steps_per_s``.

    Raises:
        MarlError: a sacred file is missing, or the run logged no ``test_return_mean``.
    """
    run_dir = Path(run_dir)
    config = _read_json(run_dir / "config.json")
    run = _read_json(run_dir / "run.json")
    metrics = _read_json(run_dir / "metrics.json")
    tests = _test_returns(metrics, run_dir)
    steps, values = tests["steps"], tests["values"]
    best = max(range(len(values)), key=lambda i: (values[i], -i))
    logged = max(max(m["steps"]) for m in metrics.values())
    env_steps = config["t_max"] if run["status"] == "COMPLETED" else logged
    wall_s = _wall_s(run)
    return {
        "algo": config["name"],
        "seed": config["seed"],
        "task": config["env_args"]["key"],
        "t_max": config["t_max"],
        "status": run["status"],
        "common_reward": config["common_reward"],
        "reward_scalarisation": config["reward_scalarisation"],
        "test_nepisode": config["test_nepisode"],
        "intervals": [{"env_steps": s, "test_return_mean": v} for s, v in zip(steps, values)],
        "final_test_env_steps": steps[-1],
        "final_test_return": values[-1],
        "best_test_env_steps": steps[best],
        "best_test_return": values[best],
        "mean_test_return": sum(values) / len(values),
        "env_steps": env_steps,
        "wall_s": wall_s,
        "env_steps_per_s": None if not wall_s else env_steps / wall_s,
    }


def parse_absolute(run_dir: Path) -> Dict[str, Any]:
    """Read one sacred run of EPyMARL's ``evaluate`` mode (:func:`absolute_updates`).

    Returns:
        ``absolute_test_return``: the mean return over all its episodes (the mean of its logged
        ``test_return_mean``, each over the same number of episodes), ``absolute_episodes``,
        ``absolute_env_steps`` (the checkpoint's step) and ``absolute_wall_s``.

    Raises:
        MarlError: a sacred file is missing, or the run logged no ``test_return_mean``.
    """
    run_dir = Path(run_dir)
    config = _read_json(run_dir / "config.json")
    tests = _test_returns(_read_json(run_dir / "metrics.json"), run_dir)
    per_log = max(1, config["test_nepisode"] // config["batch_size_run"]) * config["batch_size_run"]
    return {
        "absolute_test_return": sum(tests["values"]) / len(tests["values"]),
        "absolute_episodes": per_log * len(tests["values"]),
        "absolute_env_steps": tests["steps"][0],
        "absolute_wall_s": _wall_s(_read_json(run_dir / "run.json")),
    }


def checkpoint_dir(storage: Path) -> Path:
    """The folder of a training run's checkpoints (``<local_results_path>/models/<token>``).

    Raises:
        MarlError: none or several there (the run saved no model).
    """
    found = sorted((Path(storage) / "local" / "models").glob("*"))
    if len(found) != 1:
        raise MarlError(f"expected one EPyMARL model folder under {str(storage)!r}/local/models, found {len(found)}.")
    return found[0]


def _child(argv: List[str], src: str, log: Path) -> None:
    """Run one EPyMARL child with one torch thread; a non-zero exit raises :class:`MarlError`."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "w") as out:
        code = subprocess.run(argv, cwd=src, env=env, stdout=out, stderr=subprocess.STDOUT).returncode
    if code != 0:
        raise MarlError(f"EPyMARL exited with code {code}; its log {str(log)!r} ends with:\n{log.read_text()[-2000:]}")


def run_epymarl(
    src: str,
    python: str,
    algo: str,
    seed: int,
    t_max: int,
    storage: Optional[str] = None,
    absolute_episodes: int = 1000,
) -> Dict[str, Any]:
    """Train EPyMARL once as a child, then replay its best test's checkpoint over ``absolute_episodes``.

    The replay is marl's absolute metric (``docs/benchmarks.md``, "Evaluation protocol") done with
    EPyMARL's own ``evaluate`` mode, on env seeds ``seed + 1000``; ``absolute_episodes=0`` skips it.
    Children inherit this process's priority (run it under ``nice``).

    Raises:
        MarlError: bad paths or algorithm (:func:`check_paths`), or a child exits non-zero (the
            message carries the tail of its output).
    """
    check_paths(src, python, algo)
    train = Path(storage or tempfile.mkdtemp(prefix=f"epymarl_{algo}_s{seed}_"))
    _child(
        epymarl_command(src, python, algo, seed, t_max, str(train), train_updates(str(train))), src, train / "child.log"
    )
    result = parse_run(find_run_dir(train))
    if absolute_episodes:
        replay = train / "absolute"
        updates = absolute_updates(checkpoint_dir(train), result["best_test_env_steps"], absolute_episodes)
        seed2 = seed + ABSOLUTE_SEED_OFFSET
        _child(epymarl_command(src, python, algo, seed2, t_max, str(replay), updates), src, replay / "child.log")
        result.update(parse_absolute(find_run_dir(replay)))
    return result


def main(argv: Optional[Sequence[str]] = None) -> Dict[str, Any]:
    """Command line: run EPyMARL (or, with ``--from-sacred DIR``, only read a finished run); print JSON."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--epymarl-src", help="clone of uoe-agents/epymarl")
    p.add_argument("--epymarl-python", help="interpreter of EPyMARL's environment")
    p.add_argument("--algo", default="ia2c", help=f"one of {', '.join(ALGOS)}")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--t-max", type=int, default=400_000, help="training env steps (EPyMARL's t_max)")
    p.add_argument("--absolute-episodes", type=int, default=1000, help="replay of the best checkpoint (0: none)")
    p.add_argument("--storage", help="sacred's folder for this run (default: a new temporary folder)")
    p.add_argument("--from-sacred", help="read this sacred storage folder (or run folder) instead of running")
    p.add_argument("--out", help="also write the JSON here")
    a = p.parse_args(argv)
    if a.from_sacred:
        path = Path(a.from_sacred)
        result = parse_run(path if (path / "run.json").is_file() else find_run_dir(path))
        if (path / "absolute").is_dir():
            result.update(parse_absolute(find_run_dir(path / "absolute")))
    else:
        if not a.epymarl_src or not a.epymarl_python:
            raise MarlError(
                "--epymarl-src and --epymarl-python are both needed to run EPyMARL (or pass --from-sacred)."
            )
        result = run_epymarl(a.epymarl_src, a.epymarl_python, a.algo, a.seed, a.t_max, a.storage, a.absolute_episodes)
    text = json.dumps(result, indent=1)
    print(text)
    if a.out:
        Path(a.out).write_text(text + "\n")
    return result


if __name__ == "__main__":
    try:
        main()
    except MarlError as err:
        sys.exit(f"error: {err}")
