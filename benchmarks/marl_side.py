"""One marl side of a benchmark: train with the trainer :func:`marl.fit` uses and time whole iterations.

The method is the one of :mod:`marl.benchmarks.common` (warm-up iterations
excluded, wall and CPU time of each ``trainer.train()`` call). marl is used
through its public API only: :func:`marl.make_env` and
:func:`marl.api.build_trainer`, whose ``trainer.train()["marl"]`` metrics
(``env_steps``, ``time_s``, ``sample_time_s``, ``learn_time_s``) are the
figures :func:`marl.fit` logs (``marl/logging.py``).
"""

from __future__ import annotations

import time
from typing import Any, Callable, Dict, List, Optional, Tuple

from marl.benchmarks.common import SideResult, mean, now
from marl.errors import MarlError

__all__ = ["bench_ours"]


def bench_ours(
    num_envs: int = 32,
    rollout_length: int = 25,
    epochs: Optional[int] = 10,
    iters: int = 10,
    seconds: Optional[float] = None,
    *,
    family: str = "mpe",
    scenario: str = "simple_spread",
    env_kwargs: Optional[Dict[str, Any]] = None,
    name: str = "ours",
    between: Optional[Callable[[], Any]] = None,
    algo: str = "mappo",
    warmup: int = 1,
    **overrides: Any,
) -> SideResult:
    """Train ``algo`` (MAPPO by default) with :func:`marl.fit`'s trainer and measure
    whole-iteration throughput.

    Args:
        num_envs: batched env copies ``B``.
        rollout_length: steps per copy per iteration ``T`` (one iteration = ``T*B`` env steps).
        epochs: PPO epochs ``E`` (``None``: the family's default).
        iters: iterations to run, the first ``warmup`` of which are not measured.
        seconds: if given, train for about this many seconds instead of ``iters`` iterations.
        family, scenario, env_kwargs: the env, built with :func:`marl.make_env`.
        name: label of the side in the report.
        between: called after every iteration; its time is not counted (used to
            interleave the RLlib anchor).
        algo: the algorithm (``"mappo"``, ``"qmix"``, ...).
        warmup: leading iterations left out of the measurement (JIT compiles, a
            replay buffer that is not yet full enough to train on); at least 1.
        **overrides: more ``marl.fit`` config keys (``num_minibatches=1``, ``hidden=64``, ...).

    Returns:
        A :class:`~marl.benchmarks.common.SideResult`. Each iteration is one
        ``trainer.train()`` call of the trainer :func:`marl.fit` uses
        (:func:`marl.api.build_trainer`), timed from call to return; ``between``
        runs outside that time.

    Raises:
        MarlError: ``warmup`` < 1, or what :func:`marl.make_env` / ``build_trainer`` raise.
    """
    import torch

    import marl
    from marl.api import build_trainer

    if int(warmup) < 1:
        raise MarlError(f"bench_ours: warmup={warmup!r}; it must be >= 1 (the first iteration is never measured).")
    torch.set_num_threads(1)
    env = marl.make_env(family, scenario, num_envs=num_envs, **dict(env_kwargs or {}))
    cfg: Dict[str, Any] = {"rollout_length": rollout_length, **overrides}
    if epochs is not None:
        cfg["epochs"] = epochs
    trainer, env, _, c = build_trainer(env, algo, progress=False, eval_episodes=0, checkpoint_every=0, **cfg)
    try:
        hist, walls, cpus = _train(trainer, iters, seconds, warmup, between)
    finally:
        trainer.stop()
    result = _side_result(name, algo, env, c, (hist, walls, cpus), warmup)
    env.close()
    return result


def _train(
    trainer, iters: int, seconds: Optional[float], warmup: int, between: Optional[Callable[[], Any]]
) -> Tuple[List[Dict[str, Any]], List[float], List[float]]:
    """Call ``trainer.train()`` until ``iters`` iterations (or ``seconds``) and more than
    ``warmup`` are done. Returns each iteration's marl metrics, wall and CPU seconds."""
    hist: List[Dict[str, Any]] = []
    walls: List[float] = []
    cpus: List[float] = []
    t_start = time.perf_counter()
    while True:
        (w0, c0) = now()
        hist.append(trainer.train()["marl"])
        (w1, c1) = now()
        walls.append(w1 - w0)
        cpus.append(c1 - c0)
        if between is not None:
            between()
        enough = time.perf_counter() - t_start >= float(seconds) if seconds else len(hist) >= int(iters)
        if enough and len(hist) > warmup:
            return hist, walls, cpus


def _side_result(
    name: str, algo: str, env, c, runs: Tuple[List[Dict[str, Any]], List[float], List[float]], warmup: int
) -> SideResult:
    """The :class:`SideResult` of iterations ``warmup+1..n`` (``runs``: metrics, wall and CPU seconds)."""
    import torch

    hist, walls, cpus = runs
    measured = hist[warmup:]
    env_steps = int(hist[-1]["env_steps"] - hist[warmup - 1]["env_steps"])
    inner = float(hist[-1]["time_s"] - hist[warmup - 1]["time_s"])  # marl's own timing: training_step only
    settings = {
        "env": repr(env),
        "B": env.num_envs,
        "T": c.rollout_length,
        "algo": algo,
        "E": getattr(c, "epochs", None),  # PPO keys: value decomposition has none of the three
        "minibatches": getattr(c, "num_minibatches", None),
        "hidden": f"{getattr(c, 'layers', 1)}x{c.hidden}",
        "lr": c.lr,
        "torch_threads": torch.get_num_threads(),
        "training_step_only_steps_per_s": env_steps / inner if inner > 0 else float("nan"),
    }
    return SideResult(
        name=name,
        env_steps=env_steps,
        wall_s=sum(walls[warmup:]),
        iterations=len(measured),
        sample_s=mean([float(m["sample_time_s"]) for m in measured]),
        learn_s=mean([float(m["learn_time_s"]) for m in measured]),
        cpu_s=sum(cpus[warmup:]),
        settings=settings,
    )
