"""Throughput benchmark: ``marl bench throughput`` / ``python -m marl.bench``.

What is measured
----------------
Training throughput in **env steps per second of whole training iterations**
(sampling + learning + everything else the training loop does per
iteration), on one machine, in one process. For each side::

    env steps/s = env steps of iterations 2..n / wall time of iterations 2..n

The first iteration of each side is warm-up and never counted. One *env
step* is one step of one env copy (all agents acting once), whatever the
number of agents. Wall time is ``time.perf_counter``; per iteration it runs
from the end of the previous iteration to the end of this one, so it includes
the framework's per-iteration overhead (RLlib's ``Algorithm.train``
bookkeeping; for marl, ``marl.fit``'s loop including its TensorBoard / CSV
logging). The CPU time of this process (``time.process_time``) over the same
iterations is reported too: everything runs in this process, so env steps per
CPU second is a cross-check that other processes' load cannot inflate.

Sides
-----
``ours``
    :func:`marl.fit` with MAPPO on ``mpe2`` simple_spread (``N=3``,
    ``max_cycles=25``, ``local_ratio=0.5``, discrete actions) through marl's
    batched path: ``B`` env copies, ``T`` steps per copy per iteration
    (``T*B`` env steps), ``E`` epochs over the whole batch as one minibatch,
    actor and critic MLPs with two hidden layers of 64, one torch thread.
``rllib``
    The anchor: RLlib's stock multi-agent PPO (new API stack) on the same
    task through ``ParallelPettingZooEnv``, one module shared by all agents,
    the same batch (``train_batch_size_per_learner = T*B`` env steps), the
    same ``E`` epochs with exactly one minibatch per epoch (the minibatch
    updates per iteration are counted and reported), the same network size,
    one torch thread, sampling in the driver (``num_env_runners=0``) and
    RLlib's fastest settings for this case (``num_envs_per_env_runner=8``,
    ``episodes_to_numpy=False``, ``vf_clip_param=1e4``, ``lr=7e-4``).
``vmas``
    :func:`marl.fit` with MAPPO on VMAS simple_spread (``B_vmas`` copies in
    one torch batch), marl's VMAS defaults (``configs/envs/vmas.yaml``).

By default ours and RLlib are *interleaved*: both are built, and one RLlib
iteration runs right after each marl iteration (each side's time excludes the
other's), so load from other processes hits both sides alike; ``--sequential``
runs them one after the other instead.

The report gives, per side, env steps/s, the mean sampling and learning time
per iteration (seconds), the iterations measured, then the ratio ours / rllib
(goal >= 2.5x) and the VMAS figure (goal >= 20,000 env steps/s), the exact
settings and ``os.getloadavg()`` at start and end.
"""
from __future__ import annotations

import argparse
import contextlib
import logging
import math
import os
import re
import sys
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from marl.api import start_ray

__all__ = ["SideResult", "RllibAnchor", "bench_ours", "bench_rllib", "bench_vmas", "run", "throughput",
           "format_report", "parse_report", "build_parser", "main"]

RATIO_GOAL = 2.5
VMAS_GOAL = 20_000.0
VMAS_MIN_ENVS = 256

# The task of both MPE sides (mpe2 simple_spread_v3).
MPE_KWARGS = {"N": 3, "max_cycles": 25, "local_ratio": 0.5, "continuous_actions": False}


@dataclass
class SideResult:
    """Throughput of one side over its measured iterations (2..n).

    Attributes:
        name: ``"ours"``, ``"rllib"`` or ``"vmas"``.
        env_steps: env steps of the measured iterations.
        wall_s: wall time of the measured iterations (seconds).
        iterations: number of measured iterations (the warm-up one excluded).
        sample_s: mean sampling time per measured iteration (seconds).
        learn_s: mean learning time per measured iteration (seconds; RLlib: the
            ``learner_group.update`` call; marl: the update plus weight sync).
        cpu_s: CPU time of this process (all its threads) in the measured iterations.
        settings: what ran (batch, epochs, minibatches, ...), for the report.
        notes: anything the reader must know (e.g. a check that failed).
    """

    name: str
    env_steps: int
    wall_s: float
    iterations: int
    sample_s: float
    learn_s: float
    cpu_s: float = float("nan")
    settings: Dict[str, Any] = field(default_factory=dict)
    notes: List[str] = field(default_factory=list)

    @property
    def steps_per_s(self) -> float:
        """Env steps per second of whole iterations (wall clock)."""
        return self.env_steps / self.wall_s if self.wall_s > 0 else float("nan")

    @property
    def steps_per_cpu_s(self) -> float:
        """Env steps per CPU second of this process."""
        return self.env_steps / self.cpu_s if self.cpu_s > 0 else float("nan")


# ----------------------------------------------------------------------------- helpers

Clock = Tuple[float, float]  # (time.perf_counter(), time.process_time())


def _now() -> Clock:
    return time.perf_counter(), time.process_time()


def _timed(fn: Callable, sink: List[float], on_result: Optional[Callable[[Any], None]] = None) -> Callable:
    """Wrap ``fn`` so that each call's duration is appended to ``sink``."""

    def wrapper(*args, **kwargs):
        t0 = time.perf_counter()
        out = fn(*args, **kwargs)
        sink.append(time.perf_counter() - t0)
        if on_result is not None:
            on_result(out)
        return out

    return wrapper


def _mean(xs: List[float]) -> float:
    return sum(xs) / len(xs) if xs else float("nan")


# ----------------------------------------------------------------------------- marl sides

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
        iters: iterations to run, the first of which is warm-up (at least 2).
        seconds: if given, train for about this many seconds (``marl.fit``'s
            ``time_s`` stop) instead of ``iters`` iterations.
        family, scenario, env_kwargs: the env, built with :func:`marl.make_env`.
        name: label of the side in the report.
        between: called after every iteration; its time is not counted (used to
            interleave the RLlib anchor).
        algo: the algorithm (``"mappo"``, ``"qmix"``, ...).
        warmup: leading iterations left out of the measurement (JIT compiles, a
            replay buffer that is not yet full enough to train on).
        **overrides: more ``marl.fit`` config keys (``num_minibatches=1``, ``hidden=64``, ...).

    Returns:
        A :class:`SideResult`. Each iteration is one ``trainer.train()`` call of
        the trainer :func:`marl.fit` uses (:func:`marl.api.build_trainer`),
        timed from call to return; ``between`` runs outside that time.
    """
    import torch

    import marl
    from marl.api import build_trainer

    torch.set_num_threads(1)
    env = marl.make_env(family, scenario, num_envs=num_envs, **dict(env_kwargs or {}))
    cfg: Dict[str, Any] = {"rollout_length": rollout_length, **overrides}
    if epochs is not None:
        cfg["epochs"] = epochs
    trainer, env, _, c = build_trainer(env, algo, progress=False, eval_episodes=0, checkpoint_every=0, **cfg)
    hist: List[Dict[str, Any]] = []
    walls: List[float] = []
    cpus: List[float] = []
    try:
        t_start = time.perf_counter()
        while True:
            (w0, c0) = _now()
            hist.append(trainer.train()["marl"])
            (w1, c1) = _now()
            walls.append(w1 - w0)
            cpus.append(c1 - c0)
            if between is not None:
                between()
            enough = time.perf_counter() - t_start >= float(seconds) if seconds else len(hist) >= int(iters)
            if enough and len(hist) > warmup:
                break
    finally:
        trainer.stop()
    measured = hist[warmup:]  # the first iterations are warm-up
    env_steps = int(hist[-1]["env_steps"] - hist[warmup - 1]["env_steps"])
    inner = float(hist[-1]["time_s"] - hist[warmup - 1]["time_s"])  # marl's own timing: training_step only
    wall, cpu = sum(walls[warmup:]), sum(cpus[warmup:])
    notes: List[str] = []
    settings = {
        "env": repr(env),
        "B": env.num_envs,
        "T": int(c["rollout_length"]),
        "algo": algo,
        "E": c.get("epochs"),
        "minibatches": c.get("num_minibatches"),
        "hidden": f"{c.get('layers', 1)}x{int(c['hidden'])}",
        "lr": float(c["lr"]),
        "torch_threads": torch.get_num_threads(),
        "training_step_only_steps_per_s": env_steps / inner if inner > 0 else float("nan"),
    }
    env.close()
    return SideResult(
        name=name,
        env_steps=env_steps,
        wall_s=wall,
        iterations=len(measured),
        sample_s=_mean([float(m["sample_time_s"]) for m in measured]),
        learn_s=_mean([float(m["learn_time_s"]) for m in measured]),
        cpu_s=cpu,
        settings=settings,
        notes=notes,
    )


def bench_vmas(
    num_envs: int = 512,
    rollout_length: int = 25,
    epochs: Optional[int] = None,
    iters: int = 10,
    seconds: Optional[float] = None,
    **overrides: Any,
) -> SideResult:
    """MAPPO with :func:`marl.fit` on VMAS simple_spread (``B = num_envs`` copies in one torch batch).

    ``epochs=None`` and no ``num_minibatches`` override keep marl's VMAS
    defaults (``configs/envs/vmas.yaml``); the report shows what ran. The
    VMAS goal applies to ``num_envs >= 256`` only.
    """
    res = bench_ours(num_envs, rollout_length, epochs, iters, seconds, family="vmas", scenario="simple_spread",
                     name="vmas", **{"hidden": 64, **overrides})
    if num_envs < VMAS_MIN_ENVS:
        res.notes.append(f"B={num_envs} < {VMAS_MIN_ENVS}: not a valid run for the VMAS goal")
    return res


# ----------------------------------------------------------------------------- RLlib anchor

def _envs_per_runner(steps_per_iter: int, episode_len: int, preferred: int = 8) -> int:
    """Envs per env runner: ``preferred`` (8) or fewer, so that each env's fragment
    (``T*B / n`` steps) is a whole number of episodes: then every iteration's batch
    has the same number of episode chunks and one minibatch covers it exactly."""
    cands = [n for n in range(preferred, 0, -1) if steps_per_iter % n == 0]
    for n in cands:
        if (steps_per_iter // n) % episode_len == 0:
            return n
    return cands[0]


class RllibAnchor:
    """RLlib's stock multi-agent PPO on mpe2 simple_spread, one timed iteration per :meth:`train_one`.

    Same batch as ours (``train_batch_size_per_learner = T*B`` env steps), same
    epochs with one minibatch per epoch, MLPs 2x64 with a separate value
    network, one module shared by the 3 agents, sampling in the driver.

    Minibatch size: RLlib slices each module's batch by *rows*. The shared
    module gets one row per agent step plus one artificial bootstrap row per
    agent and episode chunk (added for GAE, masked in the loss): with
    ``n`` envs per runner and fragments of whole episodes that is
    ``rows = N * (T*B + T*B/max_cycles)`` (2496 for B=32, T=25), so
    ``minibatch_size = rows``. RLlib's config validation rejects a minibatch
    larger than ``train_batch_size_per_learner`` (env steps, not rows), so its
    validation errors are turned into warnings (``_validate_config=False``).
    The minibatch updates per iteration are counted (``Learner._update``
    calls) and any mismatch with ``E`` goes into the notes.

    Env steps are counted from the episodes the env runner returns
    (``MultiAgentEpisode.env_steps()``), not from RLlib's EMA-smoothed
    ``timers`` or lifetime counters. Sampling / learning times are the
    durations of the env runner's ``sample`` and ``learner_group.update`` calls.
    """

    def __init__(self, num_envs: int = 32, rollout_length: int = 25, epochs: int = 10, *, lr: float = 7e-4,
                 num_envs_per_env_runner: Optional[int] = None, seed: int = 0):
        start_ray()
        import mpe2.simple_spread_v3 as simple_spread
        import torch
        from ray.rllib.algorithms.ppo import PPOConfig
        from ray.rllib.core.rl_module.default_model_config import DefaultModelConfig
        from ray.rllib.env.wrappers.pettingzoo_env import ParallelPettingZooEnv
        from ray.tune.registry import register_env

        torch.set_num_threads(1)
        kw = dict(MPE_KWARGS)
        n_agents, episode_len = int(kw["N"]), int(kw["max_cycles"])
        register_env("marl_bench_simple_spread",
                     lambda _cfg: ParallelPettingZooEnv(simple_spread.parallel_env(**kw)))
        self.epochs = int(epochs)
        batch = int(rollout_length) * int(num_envs)
        n_envs = num_envs_per_env_runner or _envs_per_runner(batch, episode_len)
        chunks = n_envs * math.ceil((batch // n_envs) / episode_len)  # exact for whole-episode fragments
        self.minibatch_size = n_agents * (batch + chunks)
        config = (
            PPOConfig()
            .environment("marl_bench_simple_spread")
            .framework("torch")
            .env_runners(num_env_runners=0, num_envs_per_env_runner=n_envs, episodes_to_numpy=False)
            .multi_agent(policies={"shared"}, policy_mapping_fn=lambda aid, *a, **k: "shared")
            .rl_module(model_config=DefaultModelConfig(fcnet_hiddens=[64, 64], fcnet_activation="relu",
                                                       vf_share_layers=False))
            .training(train_batch_size_per_learner=batch, minibatch_size=self.minibatch_size,
                      num_epochs=self.epochs, lr=lr, vf_clip_param=1e4)
            .experimental(_validate_config=False)
            .debugging(seed=seed, log_level="ERROR")
        )
        cfg_logger = logging.getLogger("ray.rllib.algorithms.algorithm_config")
        level = cfg_logger.level
        cfg_logger.setLevel(logging.ERROR)  # silence the expected "minibatch_size > train batch" warning
        try:
            self.algo = config.build_algo()
        finally:
            cfg_logger.setLevel(level)
        self.settings: Dict[str, Any] = {
            "B": int(num_envs), "T": int(rollout_length), "E": self.epochs,
            "train_batch_size_per_learner": batch, "minibatch_size": self.minibatch_size,
            "num_envs_per_env_runner": n_envs, "hidden": "2x64", "lr": lr,
        }
        self._sample_t: List[float] = []
        self._learn_t: List[float] = []
        self._steps: List[int] = []
        self._rows: List[int] = []
        self.iterations: List[Dict[str, float]] = []  # one dict per train() call, warm-up included
        self._hook()

    def _hook(self) -> None:
        def count(episodes):
            self._steps.append(sum(int(e.env_steps()) for e in episodes))

        runner = self.algo.env_runner_group.local_env_runner
        runner.sample = _timed(runner.sample, self._sample_t, count)
        group = self.algo.learner_group
        group.update = _timed(group.update, self._learn_t)
        self.learner = getattr(group, "_learner", None)  # the local learner (num_learners=0)
        if self.learner is not None:
            orig = self.learner._update

            def counted(batch, *a, **k):
                self._rows.append(sum(len(b) for b in batch.values()) if hasattr(batch, "values") else -1)
                return orig(batch, *a, **k)

            self.learner._update = counted

    def train_one(self) -> Dict[str, float]:
        """One ``algo.train()``, timed; returns (and keeps) this iteration's figures."""
        n_s, n_l, n_r, n_st = len(self._sample_t), len(self._learn_t), len(self._rows), len(self._steps)
        t0 = _now()
        result = self.algo.train()
        t1 = _now()
        steps = sum(self._steps[n_st:])
        if steps == 0:  # the sample hook missed: RLlib's own count of this iteration
            steps = int(result.get("env_runners", {}).get("num_env_steps_sampled", 0))
        it = {"env_steps": steps, "wall_s": t1[0] - t0[0], "cpu_s": t1[1] - t0[1],
              "sample_s": sum(self._sample_t[n_s:]), "learn_s": sum(self._learn_t[n_l:]),
              "minibatches": len(self._rows) - n_r}
        self.iterations.append(it)
        return it

    def result(self) -> SideResult:
        """Figures of iterations 2..n."""
        measured = self.iterations[1:]
        notes = []
        mbs = sorted({int(p["minibatches"]) for p in measured})
        if self.learner is None:
            notes.append("minibatch updates not counted (no local learner)")
        elif mbs != [self.epochs]:
            notes.append(f"minibatch updates per iteration {mbs} != E={self.epochs} (rows per minibatch "
                         f"{sorted(set(self._rows))}, minibatch_size {self.minibatch_size})")
        import torch

        return SideResult(
            name="rllib",
            env_steps=int(sum(p["env_steps"] for p in measured)),
            wall_s=sum(p["wall_s"] for p in measured),
            iterations=len(measured),
            sample_s=_mean([p["sample_s"] for p in measured]),
            learn_s=_mean([p["learn_s"] for p in measured]),
            cpu_s=sum(p["cpu_s"] for p in measured),
            settings={**self.settings, "minibatches_per_iter": mbs[0] if len(mbs) == 1 else mbs,
                      "torch_threads": torch.get_num_threads()},
            notes=notes,
        )

    def stop(self) -> None:
        self.algo.stop()


def bench_rllib(
    num_envs: int = 32,
    rollout_length: int = 25,
    epochs: int = 10,
    iters: int = 10,
    seconds: Optional[float] = None,
    **kwargs: Any,
) -> SideResult:
    """Run the :class:`RllibAnchor` alone for ``iters`` iterations (or about ``seconds`` of
    measured time, at least 2 iterations) and return its :class:`SideResult`."""
    anchor = RllibAnchor(num_envs, rollout_length, epochs, **kwargs)
    try:
        while True:
            anchor.train_one()
            n = len(anchor.iterations)
            if seconds:
                if n >= 2 and sum(p["wall_s"] for p in anchor.iterations[1:]) >= seconds:
                    break
            elif n >= max(2, int(iters)):
                break
        return anchor.result()
    finally:
        anchor.stop()


# ----------------------------------------------------------------------------- run + report

def run(
    iters: int = 10,
    num_envs: int = 32,
    rollout_length: int = 25,
    epochs: int = 10,
    vmas_num_envs: int = 512,
    skip_rllib: bool = False,
    skip_vmas: bool = False,
    seconds: Optional[float] = None,
    sequential: bool = False,
    skip_ours: bool = False,
) -> Dict[str, Any]:
    """Run the sides in this process and return ``{"sides": {name: SideResult}, "ratio", "report", ...}``.

    Args:
        iters: iterations per side (the first is warm-up; at least 2).
        num_envs, rollout_length, epochs: ``B``, ``T``, ``E`` of the two MPE sides.
        vmas_num_envs: env copies of the VMAS side (the goal needs >= 256).
        skip_rllib, skip_vmas, skip_ours: leave a side out.
        seconds: train each side about this long instead of ``iters`` iterations.
        sequential: run ours then RLlib instead of interleaving their iterations.
    """
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    load_start = os.getloadavg()
    t0 = time.perf_counter()
    started = start_ray()
    sides: Dict[str, SideResult] = {}
    interleave = not (sequential or skip_ours or skip_rllib)
    ours_kw = dict(env_kwargs=MPE_KWARGS, num_minibatches=1, hidden=64)
    try:
        if interleave:
            anchor = RllibAnchor(num_envs, rollout_length, epochs)
            try:
                sides["ours"] = bench_ours(num_envs, rollout_length, epochs, iters, seconds,
                                           between=anchor.train_one, **ours_kw)
                sides["rllib"] = anchor.result()
            finally:
                anchor.stop()
        else:
            if not skip_ours:
                sides["ours"] = bench_ours(num_envs, rollout_length, epochs, iters, seconds, **ours_kw)
            if not skip_rllib:
                sides["rllib"] = bench_rllib(num_envs, rollout_length, epochs, iters, seconds)
        if not skip_vmas:
            sides["vmas"] = bench_vmas(vmas_num_envs, rollout_length, None, iters, seconds)
    finally:
        if started:
            import ray

            ray.shutdown()
    data: Dict[str, Any] = {
        "sides": sides,
        "settings": {"num_envs": num_envs, "rollout_length": rollout_length, "epochs": epochs, "iters": iters,
                     "seconds": seconds, "vmas_num_envs": vmas_num_envs,
                     "mode": "interleaved" if interleave else "sequential"},
        "load_start": load_start,
        "load_end": os.getloadavg(),
        "total_s": time.perf_counter() - t0,
        "ratio": None,
    }
    if "ours" in sides and "rllib" in sides:
        data["ratio"] = sides["ours"].steps_per_s / sides["rllib"].steps_per_s
    data["report"] = format_report(data)
    return data


def format_report(data: Dict[str, Any]) -> str:
    """The text report of :func:`run` (read back by :func:`parse_report`)."""
    sides: Dict[str, SideResult] = data["sides"]
    s = data["settings"]
    mode = ("interleaved (one RLlib iteration after each marl iteration)" if s["mode"] == "interleaved"
            else "sequential")
    lines = [
        "marl bench throughput: env steps/s of whole training iterations (sampling + learning + loop overhead),",
        "iterations 2..n of each side (the first is warm-up), one process; 1 env step = 1 step of 1 env copy.",
        f"settings: B={s['num_envs']} T={s['rollout_length']} E={s['epochs']} iters={s['iters']}"
        f" seconds={s['seconds']} B_vmas={s['vmas_num_envs']} mode={s['mode']}",
        f"MPE sides: mpe2 simple_spread N=3 max_cycles=25 local_ratio=0.5 discrete; {s['rollout_length']}x"
        f"{s['num_envs']} env steps/iteration, 1 minibatch/epoch, MLPs 2x64, 1 torch thread; {mode}",
        f"loadavg start: {_fmt_load(data['load_start'])}  (cpus: {os.cpu_count()})",
        "",
        f"{'side':<6} {'env_steps/s':>12} {'sample_s/it':>12} {'learn_s/it':>11} {'iters':>6} {'env_steps':>10}"
        f" {'wall_s':>8} {'steps/cpu_s':>12}",
    ]
    for name in ("ours", "rllib", "vmas"):
        r = sides.get(name)
        if r is None:
            lines.append(f"{name:<6} {'skipped':>12}")
            continue
        lines.append(f"{name:<6} {r.steps_per_s:>12.1f} {r.sample_s:>12.4f} {r.learn_s:>11.4f} {r.iterations:>6d}"
                     f" {r.env_steps:>10d} {r.wall_s:>8.4f} {r.steps_per_cpu_s:>12.1f}")
    lines.append("")
    if "ours" in sides and "rllib" in sides:
        ratio = sides["ours"].steps_per_s / sides["rllib"].steps_per_s
        verdict = "met" if ratio >= RATIO_GOAL else "NOT met"
        lines.append(f"ratio ours/rllib: {ratio:.2f}x (goal >= {RATIO_GOAL}x: {verdict})")
        cpu_ratio = sides["ours"].steps_per_cpu_s / sides["rllib"].steps_per_cpu_s
        lines.append(f"ratio ours/rllib per CPU second (cross-check): {cpu_ratio:.2f}x")
    else:
        lines.append("ratio ours/rllib: n/a (a side was skipped)")
    if "vmas" in sides:
        v = sides["vmas"]
        ok = v.steps_per_s >= VMAS_GOAL and v.settings.get("B", 0) >= VMAS_MIN_ENVS
        lines.append(f"vmas env_steps/s: {v.steps_per_s:.1f} (goal >= {VMAS_GOAL:,.0f} with B >= {VMAS_MIN_ENVS}:"
                     f" {'met' if ok else 'NOT met'})")
    else:
        lines.append("vmas env_steps/s: n/a (skipped)")
    lines.append("")
    for name, r in sides.items():
        lines.append(f"{name} settings: " + ", ".join(f"{k}={_fmt(v)}" for k, v in r.settings.items()))
        for n in r.notes:
            lines.append(f"{name} note: {n}")
    lines.append(f"loadavg end: {_fmt_load(data['load_end'])}")
    lines.append(f"total wall time: {data['total_s']:.1f} s")
    return "\n".join(lines)


def _fmt(v: Any) -> str:
    return f"{v:.4g}" if isinstance(v, float) else str(v)


def _fmt_load(load) -> str:
    return " ".join(f"{x:.2f}" for x in load)


_NUM = r"([0-9.]+|nan)"
_ROW = re.compile(rf"^(ours|rllib|vmas)\s+{_NUM}\s+{_NUM}\s+{_NUM}\s+(\d+)\s+(\d+)\s+{_NUM}\s+{_NUM}\s*$")


def parse_report(text: str) -> Dict[str, Any]:
    """Numbers of a report.

    Returns ``{"sides": {name: {"env_steps_per_s", "sample_s", "learn_s",
    "iterations", "env_steps", "wall_s", "env_steps_per_cpu_s"}}, "ratio",
    "cpu_ratio", "vmas", "settings", "loadavg_start", "loadavg_end"}``
    (``None`` for what the report does not have).
    """
    out: Dict[str, Any] = {"sides": {}, "ratio": None, "cpu_ratio": None, "vmas": None, "settings": {}}
    for line in text.splitlines():
        m = _ROW.match(line)
        if m:
            out["sides"][m.group(1)] = {
                "env_steps_per_s": float(m.group(2)), "sample_s": float(m.group(3)), "learn_s": float(m.group(4)),
                "iterations": int(m.group(5)), "env_steps": int(m.group(6)), "wall_s": float(m.group(7)),
                "env_steps_per_cpu_s": float(m.group(8)),
            }
        elif line.startswith("ratio ours/rllib:") and "n/a" not in line:
            out["ratio"] = float(re.search(r"([0-9.]+)x", line).group(1))
        elif line.startswith("ratio ours/rllib per CPU second"):
            out["cpu_ratio"] = float(re.search(r"([0-9.]+)x", line).group(1))
        elif line.startswith("vmas env_steps/s:") and "n/a" not in line:
            out["vmas"] = float(line.split()[2])
        elif line.startswith("settings:"):
            out["settings"] = dict(re.findall(r"(\w+)=(\S+)", line))
        elif line.startswith("loadavg "):
            key, _, vals = line.partition(":")
            out[key.replace(" ", "_")] = [float(x) for x in vals.split("(")[0].split()]
    return out


@contextlib.contextmanager
def _ray_for_bench():
    """Start Ray for a benchmark (no auth, 2 CPUs; see :func:`marl.api.start_ray`) and stop it
    afterwards if this call started it."""
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    started = start_ray()
    try:
        yield
    finally:
        if started:
            import ray

            ray.shutdown()


def _side_header(label: str, last: str) -> str:
    return f"{label:<6} {'env_steps/s':>12} {'sample_s/it':>12} {'learn_s/it':>11} {'iters':>6} {last}"


def _side_row(r: SideResult, last: str) -> str:
    return f"{r.name:<6} {r.steps_per_s:>12.1f} {r.sample_s:>12.4f} {r.learn_s:>11.4f} {r.iterations:>6d} {last}"


def smax(iters: int = 20, num_envs: int = 64, scenario: str = "3m", seconds: Optional[float] = None) -> str:
    """QMIX and MAPPO training throughput on SMAX (env steps/s of whole iterations,
    QMIX first, then MAPPO, in one process); returns the report text.

    QMIX's first 3 iterations are warm-up (JIT compile, replay buffer filling to one
    batch); MAPPO's first is. Each side uses its defaults for SMAX (``configs/envs/smax.yaml``).
    """
    common = dict(num_envs=num_envs, epochs=None, iters=iters, seconds=seconds, family="smax", scenario=scenario)
    with _ray_for_bench():
        sides = [
            bench_ours(rollout_length=25, name="qmix", algo="qmix", warmup=3, **common),
            bench_ours(rollout_length=50, name="mappo", algo="mappo", warmup=1, **common),
        ]
    lines = [f"marl bench smax: SMAX {scenario}, B={num_envs} batched envs, env steps/s of whole training iterations",
             _side_header("algo", f"{'env_steps':>10}")]
    lines += [_side_row(r, f"{r.env_steps:>10d}") for r in sides]
    lines.append(f"ratio qmix/mappo: {sides[0].steps_per_s / sides[1].steps_per_s:.2f}x")
    return "\n".join(lines)


def agents(iters: int = 10, num_envs: int = 64, scenario: str = "5m_vs_6m", seconds: Optional[float] = None,
           algo: str = "qmix", kinds: Sequence[str] = ("mlp", "hpn", "dpn", "asn"), **overrides: Any) -> str:
    """Cost of the entity-aware agent networks: whole-iteration env steps/s of ``algo`` on a SMAX
    map with each agent network, one after the other in one process, as a ratio to the plain
    network (the anchor, measured first). Returns the report text.

    The first 3 iterations of value-decomposition runs (JIT compile, buffer filling) and
    the first of PPO runs are warm-up. ``overrides`` are more config keys (e.g. ``batch_size=32``).
    """
    warmup = 1 if algo in ("mappo", "ippo") else 3
    with _ray_for_bench():
        sides = [bench_ours(num_envs=num_envs, epochs=None, iters=iters, seconds=seconds, family="smax", scenario=scenario,
                            rollout_length=25, name=kind, algo=algo, warmup=warmup, agent=kind, **overrides)
                 for kind in kinds]
    extra = "".join(f", {k}={v}" for k, v in overrides.items())
    lines = [f"marl bench agents: {algo} on SMAX {scenario}, B={num_envs}{extra}; env steps/s of whole training iterations",
             _side_header("agent", f"{'vs ' + kinds[0]:>8}")]
    lines += [_side_row(r, f"{r.steps_per_s / sides[0].steps_per_s:>7.2f}x") for r in sides]
    return "\n".join(lines)


def throughput(**kwargs: Any) -> str:
    """Run the throughput benchmark (keyword arguments of :func:`run`) and return the report text."""
    return run(**kwargs)["report"]


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="marl bench",
        description="Training throughput (env steps/s of whole iterations): marl MAPPO vs RLlib's stock "
                    "multi-agent PPO on mpe2 simple_spread, and marl MAPPO on VMAS simple_spread.",
    )
    p.add_argument("what", nargs="?", default="throughput", choices=["throughput", "smax", "agents"],
                   help="throughput: marl vs RLlib on MPE (and VMAS); smax: QMIX and MAPPO on SMAX; "
                        "agents: the plain agent network vs HPN, DPN and ASN on SMAX")
    p.add_argument("--algo", default="qmix", help="algorithm of the agents benchmark (default qmix)")
    p.add_argument("--agents", default="mlp,hpn,dpn,asn", help="agent networks of the agents benchmark, anchor first")
    p.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE", help="config overrides of the agents benchmark")
    p.add_argument("--map", default="3m", help="SMAX scenario of the smax benchmark (default 3m)")
    p.add_argument("--iters", type=int, default=10, help="iterations per side, the first is warm-up (default 10)")
    p.add_argument("--num-envs", type=int, default=32, help="env copies B of the MPE sides (default 32)")
    p.add_argument("--rollout-length", type=int, default=25, help="steps T per copy per iteration (default 25)")
    p.add_argument("--epochs", type=int, default=10, help="PPO epochs E of the MPE sides (default 10)")
    p.add_argument("--vmas-num-envs", type=int, default=512,
                   help="VMAS env copies (default 512; the goal needs >= 256)")
    p.add_argument("--seconds", type=float, default=None, help="train each side about this long instead of --iters")
    p.add_argument("--skip-rllib", action="store_true", help="leave out the RLlib anchor")
    p.add_argument("--skip-vmas", action="store_true", help="leave out the VMAS side")
    p.add_argument("--sequential", action="store_true",
                   help="run ours, then RLlib (default: interleave their iterations)")
    return p


def main(argv: Optional[List[str]] = None) -> int:
    """``python -m marl.bench [throughput] [--iters N] ...``: print the report; exit code 0."""
    ns = build_parser().parse_args(argv)
    for key in ("iters", "num_envs", "rollout_length", "epochs", "vmas_num_envs"):
        if getattr(ns, key) < 1:
            build_parser().error(f"--{key.replace('_', '-')} must be >= 1")
    if ns.what == "agents":
        from marl.config import parse_cli_overrides

        print(agents(iters=max(ns.iters, 4), num_envs=ns.num_envs, scenario=ns.map, seconds=ns.seconds, algo=ns.algo,
                     kinds=ns.agents.split(","), **parse_cli_overrides(ns.set)), flush=True)
        return 0
    if ns.what == "smax":
        print(smax(iters=ns.iters if ns.iters > 3 else 4, num_envs=ns.num_envs, scenario=ns.map, seconds=ns.seconds), flush=True)
        return 0
    kwargs = {k: v for k, v in vars(ns).items() if k not in ("what", "map", "algo", "agents", "set")}
    print(throughput(**kwargs), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
