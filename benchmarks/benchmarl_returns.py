"""The BenchMARL anchor for returns: BenchMARL's own off-policy actor-critics on a VMAS task, one run per
call, and the side-by-side table with a ``marl benchmark run`` suite.

BenchMARL (Bettini et al. 2024, "BenchMARL: Benchmarking Multi-Agent Reinforcement Learning", JMLR,
arXiv:2312.01472; https://github.com/facebookresearch/BenchMARL) is not a dependency of marl: it pins its
own torchrl and tensordict, so it runs in its own Python environment as a child process
(``benchmarks/benchmarl_train_child.py``, which imports BenchMARL and never marl). The environment is made
once with (``docs/benchmarks.md``, "BenchMARL side by side: off-policy returns")::

    python -m venv --system-site-packages ~/.venvs/benchmarl
    ~/.venvs/benchmarl/bin/pip install benchmarl==1.5.2 torch==2.13.0

One run (``--algo maddpg --task balance --seed 0 --frames 300000``) writes a JSON in marl-eval's layout
(the layout of marl's ``results.json``), so the same statistics read both libraries' runs:
``{"vmas": {task: {"benchmarl_<algo>": {"seed_<k>": {"step_<i>": {"step_count", "return"}}}}}}`` plus
``"run"``: the child's settings and wall-clock. BenchMARL's ``return`` of an episode is the mean over its
agents of each agent's summed reward; marl's (``marl.env.contract.EpisodeStats``) is the sum over the
agents, so the anchor multiplies BenchMARL's by the task's number of agents.

``--table`` then prints the markdown side-by-side of a suite's ``results.json`` and the anchor's runs:
per algorithm, the IQM and 95% CI over seeds of the last evaluation and of the mean over the
evaluations both sides share (the area under the curve divided by its width), and the wall-clock per run.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Sequence

import numpy as np

from marl.benchmarks.benchmarl_anchor import ENV_VAR, SETUP_HINT, benchmarl_python
from marl.errors import MarlError

__all__ = ["ALGOS", "TASKS", "child_command", "to_marl_eval", "run_benchmarl", "side_by_side", "main"]

ALGOS = ("maddpg", "iddpg", "masac", "isac")  # BenchMARL's off-policy actor-critics marl also has
TASKS = ("balance", "navigation", "sampling")  # the VMAS tasks of BenchMARL's benchmark
PREFIX = "benchmarl_"  # the anchor's algorithm labels: benchmarl_maddpg, ... (marl's are maddpg, ...)
_CHILD = Path(__file__).with_name("benchmarl_train_child.py")


def child_command(
    python: str, algo: str, task: str, seed: int, frames: int, eval_interval: int, eval_episodes: int
) -> List[str]:
    """The argv of one BenchMARL run (see ``benchmarks/benchmarl_train_child.py``).

    Raises:
        MarlError: ``algo`` or ``task`` is not one of :data:`ALGOS` / :data:`TASKS`, or ``eval_interval`` does
            not divide ``frames`` into BenchMARL's iterations of 6000 frames.
    """
    if algo not in ALGOS:
        raise MarlError(f"--algo {algo!r} is not one of {', '.join(ALGOS)}.")
    if task not in TASKS:
        raise MarlError(f"--task {task!r} is not one of {', '.join(TASKS)}.")
    if eval_interval <= 0 or eval_interval % 6000 or frames % eval_interval:
        raise MarlError(
            f"--eval-interval {eval_interval} must be a positive multiple of BenchMARL's 6000 frames per iteration "
            f"that divides --frames {frames} (BenchMARL evaluates after the iterations that reach a multiple of it)."
        )
    args = dict(
        algo=algo, task=task, seed=seed, frames=frames, eval_interval=eval_interval, eval_episodes=eval_episodes
    )
    return [python, str(_CHILD), *[x for k, v in args.items() for x in (f"--{k.replace('_', '-')}", str(v))]]


def to_marl_eval(child: Mapping[str, Any]) -> Dict[str, Any]:
    """The child's output (``{"settings", "evaluations", "wall_s", "cpu_s"}``) in marl-eval's layout, each
    episode's return multiplied by the number of agents (marl's team sum; see the module docstring).

    Raises:
        MarlError: the settings lack ``n_agents`` or there is no evaluation.
    """
    s = child["settings"]
    n = s.get("n_agents")
    if not n or not child.get("evaluations"):
        raise MarlError(f"the BenchMARL run has no n_agents or no evaluation: {json.dumps(child)[:300]}")
    steps = {
        f"step_{i + 1}": {"step_count": int(e["frames"]), "return": [float(r) * n for r in e["returns"]]}
        for i, e in enumerate(child["evaluations"])
    }
    return {
        "vmas": {s["task"]: {PREFIX + s["algo"]: {f"seed_{s['seed']}": steps}}},
        "run": {"settings": s, "wall_s": child["wall_s"], "cpu_s": child["cpu_s"], "return_scale": n},
    }


def run_benchmarl(python: str, argv: List[str], log: Path) -> Dict[str, Any]:
    """Run the child ``argv`` (one torch thread, ``OMP_NUM_THREADS=1``), its stderr to ``log``; its last
    stdout line parsed.

    Raises:
        MarlError: the child fails (the message carries the tail of ``log`` and the setup hint).
    """
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
    with open(log, "w") as err:
        proc = subprocess.run(argv, stdout=subprocess.PIPE, stderr=err, text=True, env=env)
    lines = [x for x in proc.stdout.splitlines() if x.startswith("{")]
    if proc.returncode or not lines:
        tail = log.read_text()[-2000:]
        raise MarlError(
            f"the BenchMARL run exited with code {proc.returncode}; {SETUP_HINT}. Its stderr ends with:\n{tail}"
        )
    return json.loads(lines[-1])


# ============================================================ the side-by-side table
def _runs(results: Mapping[str, Any], task: str) -> Dict[str, Dict[str, Any]]:
    """``{algo: {seed: run}}`` of ``task`` in a marl-eval ``results`` (``{env: {task: ...}}``)."""
    return {a: runs for env in results.values() if isinstance(env, dict) for a, runs in env.get(task, {}).items()}


def _points(run: Mapping[str, Any]) -> List[Mapping[str, Any]]:
    """A marl-eval run's evaluations (its ``step_<i>`` entries; not ``absolute_metrics``)."""
    return [p for k, p in run.items() if k.startswith("step_")]


def _scores(run: Mapping[str, Any], frames: Sequence[int]) -> Dict[str, float]:
    """``last`` (the evaluation at the largest of ``frames``) and ``curve`` (the mean over ``frames``) of one
    run's mean episode returns."""
    at = {p["step_count"]: float(np.mean(p["return"])) for p in _points(run) if "return" in p}
    missing = [f for f in frames if f not in at]
    if missing:
        raise MarlError(f"a run has no evaluation at env steps {missing}; it has {sorted(at)}.")
    return {"last": at[max(frames)], "curve": float(np.mean([at[f] for f in frames]))}


def side_by_side(marl_results: Mapping[str, Any], anchor_runs: Sequence[Mapping[str, Any]], task: str) -> str:
    """The markdown table of marl's suite runs and the anchor's on ``task``: per BenchMARL algorithm, marl's row,
    the rows of marl's variants of it in the suite (labels ``<algo>_<variant>``, e.g. ``maddpg_async``), BenchMARL's.

    ``marl_results``: a suite's ``results.json``; ``anchor_runs``: :func:`to_marl_eval` outputs. The scores
    are at the evaluations both sides share, above 0 env steps (BenchMARL does not evaluate before training).
    Wall-clock per run: the anchor's child from the experiment's start to its end; marl's last evaluation's
    ``elapsed_time``.

    Raises:
        MarlError: no BenchMARL run of ``task``, or a run misses a shared evaluation.
    """
    from marl.benchmarks.stats import fmt, task_statistics

    bm: Dict[str, Dict[str, Any]] = {}
    wall: Dict[str, List[float]] = {}
    for r in anchor_runs:
        for a, seeds in _runs(r, task).items():
            bm.setdefault(a, {}).update(seeds)
            wall.setdefault(a, []).append(float(r["run"]["wall_s"]))
    if not bm:
        raise MarlError(f"no BenchMARL run of task {task!r} among the {len(anchor_runs)} given.")
    ours = _runs(marl_results, task)
    for a, seeds in ours.items():
        wall[a] = [max(p["elapsed_time"] for p in _points(run) if "elapsed_time" in p) for run in seeds.values()]
    both = {**ours, **bm}
    shared = set.intersection(*[{p["step_count"] for p in _points(run)} for s in both.values() for run in s.values()])
    frames = sorted(f for f in shared if f > 0)
    rows = [
        "| algo | library | seeds | last evaluation, IQM [95% CI] | mean over evaluations, IQM [95% CI] | wall-clock per run, mean (s) |",
        "|---|---|---|---|---|---|",
    ]
    for algo in sorted(a[len(PREFIX) :] for a in bm):
        variants = sorted(a for a in ours if a.startswith(algo + "_"))  # a suite's other settings of it: maddpg_async
        for label, lib in [(algo, "marl"), *((v, "marl") for v in variants), (PREFIX + algo, "BenchMARL")]:
            if label not in both:
                continue
            per_run = [_scores(run, frames) for run in both[label].values()]
            stats = {k: task_statistics({label: np.array([s[k] for s in per_run])})[label] for k in ("last", "curve")}
            cell = {k: f"{fmt(v['iqm'])} [{fmt(v['iqm_ci'][0])}, {fmt(v['iqm_ci'][1])}]" for k, v in stats.items()}
            rows.append(
                f"| {label if lib == 'marl' else algo} | {lib} | {len(per_run)} | {cell['last']} | {cell['curve']} | {np.mean(wall[label]):.0f} |"
            )
    return f"Evaluations at env steps {frames}.\n\n" + "\n".join(rows)


# ============================================================ command line
def main(argv: Optional[Sequence[str]] = None) -> Any:
    p = argparse.ArgumentParser(prog="python -m marl.benchmarks.benchmarl_returns", description=__doc__.splitlines()[0])
    p.add_argument("--benchmarl-python", help=f"BenchMARL's interpreter (default ${ENV_VAR})")
    p.add_argument("--algo", choices=ALGOS)
    p.add_argument("--task", choices=TASKS, default="balance")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--frames", type=int, default=300_000)
    p.add_argument("--eval-interval", type=int, default=60_000)
    p.add_argument("--eval-episodes", type=int, default=10)
    p.add_argument("--out", help="the run's JSON (a new file: an existing one is refused)")
    p.add_argument(
        "--table", nargs="+", metavar="RUN_JSON", help="print the side-by-side of these runs and --marl-results"
    )
    p.add_argument("--marl-results", help="a suite's results.json (marl benchmark run --out DIR: DIR/results.json)")
    a = p.parse_args(argv)
    if a.table:
        if not a.marl_results:
            raise MarlError("--table needs --marl-results (the suite's results.json).")
        missing = [f for f in [a.marl_results, *a.table] if not Path(f).is_file()]
        if missing:
            raise MarlError(
                f"no such file: {', '.join(missing)} (--marl-results: the results.json that 'marl benchmark run' "
                f"writes when its runs end or are interrupted; --table: runs of this script's --out)."
            )
        runs = [json.loads(Path(f).read_text()) for f in a.table]
        print(side_by_side(json.loads(Path(a.marl_results).read_text()), runs, a.task))
        return None
    if not a.algo or not a.out:
        raise MarlError("a run needs --algo and --out (or print a table with --table ... --marl-results ...).")
    out = Path(a.out)
    if out.exists():
        raise MarlError(f"--out {out} exists; a run never overwrites one (give a new path).")
    python = benchmarl_python(a.benchmarl_python)
    if python is None:
        raise MarlError(f"no BenchMARL interpreter: {SETUP_HINT}.")
    argv_child = child_command(python, a.algo, a.task, a.seed, a.frames, a.eval_interval, a.eval_episodes)
    out.parent.mkdir(parents=True, exist_ok=True)
    result = to_marl_eval(run_benchmarl(python, argv_child, out.with_suffix(".stderr.log")))
    out.write_text(json.dumps(result, indent=1))
    print(json.dumps(result["run"]))
    return result


if __name__ == "__main__":
    try:
        main()
    except MarlError as e:
        sys.exit(f"error: {e}")
