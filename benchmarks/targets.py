"""Time to target: the env steps and wall-clock seconds each run took to first reach a score.

A suite may list ``targets`` (``configs/benchmarks/*.yaml``)::

    targets:
      - {env: mpe, task: simple_spread, metric: return, value: -40}        # every algorithm
      - {env: smax, task: 3m, algo: qmix, metric: win_rate, value: 0.9}

For each target and run, the first evaluation (in env-step order) whose mean
over episodes is at least ``value`` gives ``step_count`` (env steps) and
``elapsed_time`` (seconds since the run's training started, evaluations
included, as the protocol records them; :mod:`marl.benchmarks.protocol`). A run
that never reaches it counts as not reached; the medians are over the runs that
did, and the row says how many of the seeds that is.
"""

from __future__ import annotations

import statistics
from typing import Any, Dict, List, Mapping, Optional, Tuple

__all__ = ["first_reach", "time_to_target", "target_lines"]


def first_reach(run: Mapping[str, Any], metric: str, value: float) -> Optional[Tuple[int, float]]:
    """``(step_count, elapsed_time)`` of the first evaluation of ``run`` (marl-eval ``{step_i: {...}}``)
    whose mean ``metric`` is ``>= value``; ``None`` if none is."""
    steps = sorted((s for k, s in run.items() if k.startswith("step_") and metric in s), key=lambda s: s["step_count"])
    for s in steps:
        scores = s[metric]
        if scores and sum(scores) / len(scores) >= value:
            return int(s["step_count"]), float(s["elapsed_time"])
    return None


def time_to_target(data: Mapping[str, Any], targets: List[Mapping[str, Any]]) -> List[Dict[str, Any]]:
    """One row per (target, algorithm) present in ``data`` (marl-eval results).

    Returns:
        rows ``{"env", "task", "algo", "metric", "value", "runs", "reached", "median_steps",
        "median_seconds", "per_seed": {seed: [steps, seconds] or None}}``; medians are ``None``
        when no run reached the target.
    """
    rows = []
    for t in targets:
        env, task = str(t["env"]).lower(), str(t["task"]).lower()
        algos = data.get(env, {}).get(task, {})
        for algo in sorted(algos):
            if t.get("algo") and str(t["algo"]).lower() != algo:
                continue
            per_seed = {seed: first_reach(run, t["metric"], float(t["value"])) for seed, run in algos[algo].items()}
            hit = [v for v in per_seed.values() if v is not None]
            rows.append(
                {
                    "env": env,
                    "task": task,
                    "algo": algo,
                    "metric": t["metric"],
                    "value": float(t["value"]),
                    "runs": len(per_seed),
                    "reached": len(hit),
                    "median_steps": statistics.median(h[0] for h in hit) if hit else None,
                    "median_seconds": statistics.median(h[1] for h in hit) if hit else None,
                    "per_seed": {k: (list(v) if v else None) for k, v in sorted(per_seed.items())},
                }
            )
    return rows


def target_lines(rows: List[Dict[str, Any]]) -> List[str]:
    """The Markdown section of :func:`time_to_target`'s rows (nothing without rows)."""
    if not rows:
        return []
    lines = [
        "## Time to target",
        "",
        "First evaluation whose mean score reaches the target; seconds from the start of the run's "
        "training, evaluations included; medians over the runs that reached it.",
        "",
        "| env | task | algo | target | reached | median env steps | median seconds | per seed (steps, s) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        seeds = "; ".join(
            f"{k}: " + (f"{v[0]:,}, {v[1]:.0f}" if v else "not reached") for k, v in r["per_seed"].items()
        )
        steps = f"{r['median_steps']:,.0f}" if r["median_steps"] is not None else "-"
        secs = f"{r['median_seconds']:.0f}" if r["median_seconds"] is not None else "-"
        lines.append(
            f"| {r['env']} | {r['task']} | {r['algo']} | {r['metric']} >= {r['value']:g} | "
            f"{r['reached']}/{r['runs']} | {steps} | {secs} | {seeds} |"
        )
    return lines + [""]
