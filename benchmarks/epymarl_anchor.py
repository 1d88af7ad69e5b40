"""The EPyMARL anchor: EPyMARL's own code on the task of suite ``epymarl_lbf``, one run per call.

EPyMARL (Papoudakis et al., 2021, "Benchmarking Multi-Agent Deep Reinforcement Learning Algorithms
in Cooperative Tasks", arXiv:2006.07869; https://github.com/uoe-agents/epymarl) is not a dependency
of marl: it is a source tree (not a package) with its own Python environment, and runs here as a
child process, ``PY SRC/src/main.py --config=ALGO --env-config=gymma with ...``. The environment is
made once with (``docs/benchmarks.md``, "EPyMARL side by side")::

    git clone https://github.com/uoe-agents/epymarl ~/epymarl
    python -m venv ~/.venvs/epymarl
    ~/.venvs/epymarl/bin/pip install torch==2.13.0
    ~/.venvs/epymarl/bin/pip install numpy==2.4.6 gymnasium==1.2.2 lbforaging==2.0.0 sacred pyyaml \\
        einops cloudpickle "setuptools>=77.0.3,<81" scikit-learn pygame rtree \\
        git+https://github.com/uoe-agents/smaclite.git

(sacred needs ``pkg_resources``, gone from setuptools 81; EPyMARL's ``src/envs/__init__.py``
imports smaclite whatever the env, and smaclite imports scikit-learn, pygame and rtree.)

Each run uses EPyMARL's own algorithm config (``src/config/algs/ALGO.yaml``: parameter sharing,
10 parallel envs) and its ``gymma`` env config (a test of 100 episodes every 50k env steps) with
three changes: the task key, ``time_limit`` (the episode limit) and ``t_max``; plus ``seed`` and
``use_cuda=False``. EPyMARL's ``main.py`` already sets one torch thread; the child also gets
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
SETUP_HINT = "see the setup commands in docs/benchmarks.md, section 'EPyMARL side by side'"


def check_paths(src: str, python: str, algo: str) -> None:
    """Check EPyMARL's source tree, its interpreter and the algorithm before starting a child.

    Raises:
        MarlError: ``src`` has no ``src/main.py``, ``python`` is no file, or ``algo`` is not one
            of :data:`ALGOS`.
    """
    if not (Path(src) / "src" / "main.py").is_file():
        raise MarlError(f"--epymarl-src {src!r} holds no src/main.py (a clone of uoe-agents/epymarl); {SETUP_HINT}.")
    if not Path(python).is_file():
        raise MarlError(f"--epymarl-python {python!r} does not exist; {SETUP_HINT}.")
    if algo not in ALGOS:
        raise MarlError(f"--algo {algo!r} is not one of {', '.join(ALGOS)}.")


def epymarl_command(src: str, python: str, algo: str, seed: int, t_max: int, storage: str) -> List[str]:
    """The argv of one EPyMARL run of ``algo`` on :data:`TASK_KEY`, sacred writing under ``storage``."""
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
        f"--file_storage={storage}",
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


def parse_run(run_dir: Path) -> Dict[str, Any]:
    """Read one sacred run of EPyMARL: its test returns, wall-clock and env steps per second.

    Returns:
        ``algo``, ``seed``, ``t_max``, ``status`` (sacred's), ``common_reward``,
        ``reward_scalarisation``, ``test_nepisode``, ``intervals`` (``[{"env_steps",
        "test_return_mean"}]``, one per test), ``final_env_steps``, ``final_test_return`` (the last
        test), ``max_test_return`` (the best test, EPyMARL's table's "maximum returns" per run),
        ``mean_test_return`` (over the tests, its "average returns"), ``wall_s`` and
        ``env_steps_per_s``.

    Raises:
        MarlError: a sacred file is missing, or the run logged no ``test_return_mean``.
    """
    run_dir = Path(run_dir)
    config = _read_json(run_dir / "config.json")
    run = _read_json(run_dir / "run.json")
    metrics = _read_json(run_dir / "metrics.json")
    if "test_return_mean" not in metrics:
        raise MarlError(f"{str(run_dir)!r} logged no test_return_mean (logged: {sorted(metrics)}).")
    steps, values = metrics["test_return_mean"]["steps"], metrics["test_return_mean"]["values"]
    wall_s = None
    if run.get("stop_time"):
        wall_s = (datetime.fromisoformat(run["stop_time"]) - datetime.fromisoformat(run["start_time"])).total_seconds()
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
        "final_env_steps": steps[-1],
        "final_test_return": values[-1],
        "max_test_return": max(values),
        "mean_test_return": sum(values) / len(values),
        "wall_s": wall_s,
        "env_steps_per_s": None if not wall_s else steps[-1] / wall_s,
    }


def run_epymarl(src: str, python: str, algo: str, seed: int, t_max: int, storage: Optional[str] = None) -> Dict[str, Any]:
    """Run EPyMARL once as a child (``nice``-friendly: it inherits this process's priority); parse it.

    Raises:
        MarlError: bad paths or algorithm (:func:`check_paths`), or the child exits non-zero (the
            message carries the tail of its output).
    """
    check_paths(src, python, algo)
    storage = storage or tempfile.mkdtemp(prefix=f"epymarl_{algo}_s{seed}_")
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
    log = Path(storage) / "child.log"
    Path(storage).mkdir(parents=True, exist_ok=True)
    with open(log, "w") as out:
        proc = subprocess.run(
            epymarl_command(src, python, algo, seed, t_max, storage), cwd=src, env=env, stdout=out, stderr=subprocess.STDOUT
        )
    if proc.returncode != 0:
        raise MarlError(f"EPyMARL exited with code {proc.returncode}; its log {str(log)!r} ends with:\n{log.read_text()[-2000:]}")
    return parse_run(find_run_dir(Path(storage)))


def main(argv: Optional[Sequence[str]] = None) -> Dict[str, Any]:
    """Command line: run EPyMARL (or, with ``--from-sacred DIR``, only read a finished run); print JSON."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--epymarl-src", help="clone of uoe-agents/epymarl")
    p.add_argument("--epymarl-python", help="interpreter of EPyMARL's environment")
    p.add_argument("--algo", default="ia2c", help=f"one of {', '.join(ALGOS)}")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--t-max", type=int, default=400_000, help="training env steps (EPyMARL's t_max)")
    p.add_argument("--storage", help="sacred's folder for this run (default: a new temporary folder)")
    p.add_argument("--from-sacred", help="read this sacred storage folder (or run folder) instead of running")
    p.add_argument("--out", help="also write the JSON here")
    a = p.parse_args(argv)
    if a.from_sacred:
        path = Path(a.from_sacred)
        result = parse_run(path if (path / "run.json").is_file() else find_run_dir(path))
    else:
        if not a.epymarl_src or not a.epymarl_python:
            raise MarlError("--epymarl-src and --epymarl-python are both needed to run EPyMARL (or pass --from-sacred).")
        result = run_epymarl(a.epymarl_src, a.epymarl_python, a.algo, a.seed, a.t_max, a.storage)
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
