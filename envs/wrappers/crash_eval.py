"""Crash evaluation: a trained team played at a range of test crash rates (``marl eval --crash-rates``).

Zhao et al. 2022 (arXiv 2203.08454) evaluate a team trained with or without a
coach by its return and win rate as the crash rate of its agents grows. Every
rate plays the trained scenario wrapped in a
:class:`~marl.envs.wrappers.crash.CrashWrapper` with the trained greedy policy.
"""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence

import numpy as np

from marl.errors import MarlError
from marl.policy import run_episodes
from marl.results import Result


def evaluate_crashes(
    result: Result,
    rates: Sequence[float] = (0.0, 0.1, 0.2, 0.3, 0.5),
    episodes: int = 100,
    out_dir: Optional[str] = None,
    **crash_options: Any,
) -> List[Dict[str, float]]:
    """Greedy evaluation of the team at each test crash rate (the evaluation of Zhao et al. 2022, arXiv 2203.08454).

    Every rate plays ``episodes`` episodes of the trained scenario wrapped in a
    :class:`~marl.envs.wrappers.crash.CrashWrapper` (``crash_options``:
    ``crash_time``, ``behaviour``, ``max_crashed``, ``seed``; the training
    run's own crash options are the defaults, without its coach).

    Writes ``crash_eval.csv``, ``crash_eval.md`` and ``crash_eval.png`` (return,
    and win rate where the env reports one, against the crash rate) to
    ``out_dir`` (default: the run folder). Returns one row per rate.

    Raises:
        MarlError: no env spec to rebuild the scenario, or a rate outside [0, 1].
    """
    if result.env_spec is None:
        raise MarlError("evaluate_crashes needs a run made with marl.make_env (its env spec rebuilds the scenario).")
    base = dict(result.env_spec.kwargs.get("crash") or {})
    base.pop("strategy", None)
    base.pop("coach", None)
    base.pop("reference_share", None)  # every copy plays at the test rate
    base.update(crash_options)
    rows = []
    for p in rates:
        env = result.env_spec.make(num_envs=min(episodes, 32), crash={**base, "rate": float(p)})
        stats = run_episodes(env, result.policy, episodes)
        env.close()
        row = {"crash_rate": float(p)}
        row.update({f"{k}_mean": float(np.mean(v)) for k, v in stats.items() if v})
        rows.append(row)
    _write_crash_table(rows, Path(out_dir or result.log_dir or "."))
    return rows


def _write_crash_table(rows: List[Dict[str, float]], folder: Path) -> None:
    """``crash_eval.csv`` / ``.md`` / ``.png`` of :func:`evaluate_crashes`."""
    folder.mkdir(parents=True, exist_ok=True)
    keys = ["crash_rate"] + [k for k in ("episode_return_mean", "win_rate_mean", "crash_rate_mean") if k in rows[0]]
    with open(folder / "crash_eval.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=keys, extrasaction="ignore")
        w.writeheader()
        w.writerows(rows)
    lines = ["| " + " | ".join(keys) + " |", "|" + "---|" * len(keys)]
    lines += ["| " + " | ".join(f"{r.get(k, float('nan')):.3f}" for k in keys) + " |" for r in rows]
    (folder / "crash_eval.md").write_text("\n".join(lines) + "\n")
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    metric = "win_rate_mean" if "win_rate_mean" in rows[0] else "episode_return_mean"
    fig, ax = plt.subplots(figsize=(4.5, 3.2))
    ax.plot([r["crash_rate"] for r in rows], [r[metric] for r in rows], marker="o")
    ax.set_xlabel("test crash rate p")
    ax.set_ylabel(metric.replace("_mean", "").replace("_", " "))
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(folder / "crash_eval.png", dpi=120)
    plt.close(fig)


def cli_crash_rates(result: Result, rates: Any, episodes: int) -> Dict[str, Any]:
    """``marl eval <run> crash_rates=[...]`` (or ``--crash-rates 0 0.5``; one rate is a list of one)."""
    rows = evaluate_crashes(result, rates=list(rates) if isinstance(rates, list) else [rates], episodes=episodes)
    return {"checkpoint": result.checkpoint, "crash_eval": rows, "written": f"{result.log_dir}/crash_eval.*"}
