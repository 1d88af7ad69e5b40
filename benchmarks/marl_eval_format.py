"""marl-eval's results format (Gorsane et al. 2022, arXiv:2209.10485; the ``marl-eval`` package's
JSON: env -> task -> algorithm -> ``seed_<n>`` -> ``step_<k>`` / ``absolute_metrics``), checked
before the runner writes ``results.json`` and before a report reads it (:mod:`marl.benchmarks.report`).
"""

from __future__ import annotations

import math
import numbers
import re
from typing import Any, Dict, Set

from marl.benchmarks.stats import ABSOLUTE
from marl.errors import MarlError

__all__ = ["validate_marl_eval", "is_number"]

_STEP = re.compile(r"^step_(\d+)$")
_SEED = re.compile(r"^seed_\d+$")
_STEP_KEYS = ("step_count", "elapsed_time")


# ------------------------------------------------------------------ the results format
def validate_marl_eval(data: Any) -> None:
    """Check benchmark results in marl-eval's JSON format; raise on the first problem.

    The format (Gorsane et al. 2022, arXiv:2209.10485; read by InstaDeep's marl-eval)::

        {env: {task: {algo: {"seed_<k>": {"step_<i>": {"step_count": int, "elapsed_time": float,
                                                      "<metric>": [float per episode], ...},
                                         ...,
                                         "absolute_metrics": {"<metric>": [float per episode]}}}}}}

    Checked: the nesting; every key lower case (marl-eval lower-cases keys, which would merge
    ``MAPPO`` into ``mappo``) and no env called ``extra`` (marl-eval stores its own ``extra``
    key beside the envs); no comma in algorithm names; run keys ``seed_<k>``; steps numbered
    ``step_0..step_n`` without gaps, with ``step_count`` (int >= 0, env steps, non-decreasing)
    and ``elapsed_time`` (seconds >= 0); every metric a non-empty list of finite numbers, of one
    length within a step, ``return`` in every step, the same metric names in every step and in
    ``absolute_metrics`` (optional: an unfinished run has none).

    Raises:
        MarlError: naming the path (e.g. ``mpe/simple_spread/mappo/seed_0/step_3``) and the problem.
    """
    _check_mapping(data, "results", "{env: {task: {algo: {seed_k: {step_i: ...}}}}}", allow_empty=True)
    for env, tasks in data.items():
        _check_key(env, env)
        if env == "extra":
            raise MarlError("results: an env may not be called 'extra' (marl-eval keeps its own 'extra' key there).")
        _check_mapping(tasks, env, "{task: {algo: ...}}")
        for task, algos in tasks.items():
            _check_key(task, f"{env}/{task}")
            _check_mapping(algos, f"{env}/{task}", "{algo: {seed_k: ...}}")
            for algo, runs in algos.items():
                path = f"{env}/{task}/{algo}"
                _check_key(algo, path)
                if "," in algo:
                    raise MarlError(f"{path}: algorithm names may not contain commas (marl-eval splits on them).")
                _check_mapping(runs, path, "{seed_k: {step_i: ...}}")
                for seed, run in runs.items():
                    if not isinstance(seed, str) or not _SEED.match(seed):
                        raise MarlError(f"{path}/{seed}: a run key must be seed_<k> (k an integer), got {seed!r}.")
                    _check_run(run, f"{path}/{seed}")


def _check_mapping(value: Any, path: str, shape: str, allow_empty: bool = False) -> None:
    if not isinstance(value, dict):
        raise MarlError(f"{path}: expected a JSON object {shape}, got {type(value).__name__}.")
    if not value and not allow_empty:
        raise MarlError(f"{path}: is empty (expected {shape}).")


def _check_key(key: Any, path: str) -> None:
    if not isinstance(key, str) or not key:
        raise MarlError(f"{path}: keys must be non-empty strings, got {key!r}.")
    if key != key.lower():
        raise MarlError(f"{path}: '{key}' is not lower case (marl-eval lower-cases every key; use '{key.lower()}').")


def _check_run(run: Any, path: str) -> None:
    _check_mapping(run, path, "{step_i: {...}, absolute_metrics: {...}}")
    numbered: Dict[int, str] = {}
    for key in run:
        m = _STEP.match(key) if isinstance(key, str) else None
        if m:
            numbered[int(m.group(1))] = key
        elif key != ABSOLUTE:
            raise MarlError(f"{path}: unknown key {key!r} (expected step_<i> or {ABSOLUTE}).")
    if not numbered:
        raise MarlError(f"{path}: has no evaluation (step_0 is missing).")
    missing = [f"step_{i}" for i in range(max(numbered) + 1) if i not in numbered]
    if missing:
        raise MarlError(
            f"{path}: steps must be numbered step_0..step_{max(numbered)} without gaps; missing {', '.join(missing)}."
        )
    names, previous = None, -1
    for i in range(len(numbered)):
        step_path = f"{path}/step_{i}"
        metrics = _check_step(run[f"step_{i}"], step_path, evaluation=True)
        names = metrics if names is None else _same_metrics(names, metrics, step_path)
        count = run[f"step_{i}"]["step_count"]
        if count < previous:
            raise MarlError(
                f"{step_path}: step_count {count} is smaller than the previous step's {previous} "
                f"(env steps never go back)."
            )
        previous = count
    if ABSOLUTE in run:
        _same_metrics(
            names or set(), _check_step(run[ABSOLUTE], f"{path}/{ABSOLUTE}", evaluation=False), f"{path}/{ABSOLUTE}"
        )


def _same_metrics(expected: Set[str], got: Set[str], path: str) -> Set[str]:
    if got != expected:
        raise MarlError(f"{path}: metrics {sorted(got)} differ from step_0's {sorted(expected)}.")
    return expected


def is_number(x: Any) -> bool:
    return isinstance(x, numbers.Real) and not isinstance(x, bool) and math.isfinite(float(x))


def _check_step(step: Any, path: str, evaluation: bool) -> Set[str]:
    """Check one evaluation (or ``absolute_metrics``); returns its metric names."""
    _check_mapping(step, path, "{step_count, elapsed_time, <metric>: [...]}" if evaluation else "{<metric>: [...]}")
    if evaluation:
        count, elapsed = step.get("step_count"), step.get("elapsed_time")
        if not isinstance(count, numbers.Integral) or isinstance(count, bool) or count < 0:
            raise MarlError(f"{path}: step_count must be an integer >= 0 (env steps), got {count!r}.")
        if not is_number(elapsed) or elapsed < 0:
            raise MarlError(f"{path}: elapsed_time must be a number >= 0 (seconds), got {elapsed!r}.")
    lengths = {}
    for name, values in step.items():
        if evaluation and name in _STEP_KEYS:
            continue
        _check_key(name, path)
        if not isinstance(values, list) or not values or not all(is_number(v) for v in values):
            raise MarlError(
                f"{path}: metric '{name}' must be a non-empty list of finite numbers "
                f"(one per episode), got {str(values)[:80]}."
            )
        lengths[name] = len(values)
    if "return" not in lengths:
        raise MarlError(f"{path}: has no 'return' (a list of team returns, one per episode).")
    if len(set(lengths.values())) > 1:
        raise MarlError(f"{path}: metric lists differ in length (episodes): {lengths}.")
    return set(lengths)
