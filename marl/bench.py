"""Throughput benchmark: ``marl bench throughput`` / ``python -m marl.bench``.

What is measured
----------------
Training throughput in **env steps per second of whole training iterations**
(sampling + learning + everything else the training loop does per
iteration), on one machine, in one process, so machine noise hits all sides
alike. For each side::

    env steps/s = sum of env steps of iterations 2..n / wall time of iterations 2..n

The first iteration is warm-up and never counted. One *env step* is one step
of one env copy (all agents acting once), whatever the number of agents.
Wall time is ``time.perf_counter`` between the ends of consecutive iterations
of the training loop, so it includes the framework's per-iteration overhead
(RLlib's ``Algorithm.train`` bookkeeping; for marl also ``marl.fit``'s
TensorBoard / CSV logging).

Sides
-----
``ours``
    :func:`marl.fit` with MAPPO on ``mpe2`` simple_spread (``N=3``,
    ``max_cycles=25``, ``local_ratio=0.5``, discrete actions) through marl's
    batched path: ``B`` env copies, ``T`` steps per copy per iteration
    (``T*B`` env steps), ``E`` epochs over the whole batch as one minibatch,
    actor and critic MLPs with two hidden layers of 64.
``rllib``
    The anchor: RLlib's stock multi-agent PPO (new API stack) on the same
    task through ``ParallelPettingZooEnv``, one module shared by all agents,
    the same batch (``train_batch_size_per_learner = T*B`` env steps), the
    same ``E`` epochs with exactly one minibatch per epoch (checked: the
    number of minibatch updates per iteration is counted and reported), the
    same network size, one torch thread, sampling in the driver
    (``num_env_runners=0``) and RLlib's fastest settings for this case
    (``num_envs_per_env_runner=8``, ``episodes_to_numpy=False``).
``vmas``
    :func:`marl.fit` with MAPPO on VMAS simple_spread (``B_vmas`` copies in
    one torch batch) with marl's VMAS defaults (``configs/envs/vmas.yaml``).

The report gives, per side, env steps/s, the mean sampling and learning time
per iteration (seconds), the number of iterations measured, then the ratio
ours / rllib (goal >= 2.5x) and the VMAS figure (goal >= 20,000 env steps/s),
the exact settings and ``os.getloadavg()`` at start and end.
"""
from __future__ import annotations

import argparse
import contextlib
import math
import os
import re
import sys
import tempfile
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, Iterator, List, Optional

__all__ = ["SideResult", "bench_ours", "bench_rllib", "bench_vmas", "run", "throughput",
           "format_report", "parse_report", "main"]

RATIO_GOAL = 2.5
VMAS_GOAL = 20_000.0
VMAS_MIN_ENVS = 256

# The task of both MPE sides.
MPE_KWARGS = {"N": 3, "max_cycles": 25, "local_ratio": 0.5, "continuous_actions": False}


@dataclass
class SideResult:
    """Throughput of one side, over the measured iterations (2..n).

    Attributes:
        name: ``"ours"``, ``"rllib"`` or ``"vmas"``.
        env_steps: env steps of the measured iterations.
        wall_s: wall time of the measured iterations (seconds).
        iterations: number of measured iterations (the warm-up one excluded).
        sample_s: mean sampling time per measured iteration (seconds).
        learn_s: mean learning time per measured iteration (seconds; for RLlib the
            ``learner_group.update`` call, for marl the update plus weight sync).
        cpu_s: CPU time (``time.process_time``: all threads of this process) of
            the measured iterations; everything runs in this process, so
            ``env_steps / cpu_s`` is a cross-check that other processes' load
            cannot inflate.
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
        """Env steps per CPU second of this process (less sensitive to other processes' load)."""
        return self.env_steps / self.cpu_s if self.cpu_s > 0 else float("nan")


# ----------------------------------------------------------------------------- helpers

def _init_ray() -> bool:
    """Start Ray the way marl does (all CPUs, no dashboard); True if this call started it."""
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    os.environ.setdefault("RAY_DEDUP_LOGS", "0")
    import ray

    if ray.is_initialized():
        return False
    ray.init(num_cpus=os.cpu_count() or 1, include_dashboard=False, log_to_driver=False, configure_logging=False)
    return True


@contextlib.contextmanager
def _stamps(cls: Any, method: str) -> Iterator[List[tuple]]:
    """Record ``(time.perf_counter(), time.process_time())`` at every call of ``cls.method`` (patched for the block's duration)."""
    stamps: List[tuple] = []
    orig = getattr(cls, method)

    def wrapper(self, *args, **kwargs):
        stamps.append((time.perf_counter(), time.process_time()))
        return orig(self, *args, **kwargs)

    setattr(cls, method, wrapper)
    try:
        yield stamps
    finally:
        setattr(cls, method, orig)


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
    **overrides: Any,
) -> SideResult:
    """Train MAPPO with :func:`marl.fit` and measure whole-iteration throughput.

    Args:
        num_envs: batched env copies ``B``.
        rollout_length: steps per copy per iteration ``T`` (one iteration = ``T*B`` env steps).
        epochs: PPO epochs ``E`` (``None``: the family's default).
        iters: iterations to run, the first of which is warm-up (at least 2).
        seconds: if given, train for about this many seconds instead of ``iters``
            iterations (``marl.fit``'s ``time_s`` stop).
        family, scenario, env_kwargs: the env, built with :func:`marl.make_env`.
        name: label of the side in the report.
        **overrides: more ``marl.fit`` config keys (``num_minibatches=1``, ``hidden=64``, ...).

    Returns:
        A :class:`SideResult`. Wall time runs between the ends of consecutive
        ``trainer.train()`` calls inside ``marl.fit`` (taken when ``fit`` hands each
        iteration's metrics to its logger), so it covers the whole loop iteration.
    """
    import torch

    import marl
    from marl.logging import RunLogger

    torch.set_num_threads(1)
    env_kwargs = dict(env_kwargs or {})
    env = marl.make_env(family, scenario, num_envs=num_envs, **env_kwargs)
    cfg: Dict[str, Any] = {"rollout_length": rollout_length, **overrides}
    if epochs is not None:
        cfg["epochs"] = epochs
    stop = {"time_s": float(seconds)} if seconds else {"iterations": max(2, int(iters))}
    notes: List[str] = []
    with tempfile.TemporaryDirectory(prefix="marl-bench-") as tmp, _stamps(RunLogger, "log") as stamps:
        res = marl.fit(env, "mappo", stop=stop, progress=False, eval_episodes=0, checkpoint_every=0,
                       log_dir=tmp, **cfg)
    hist = res.history
    if len(hist) < 2:
        raise RuntimeError(f"{name}: only {len(hist)} iteration(s) ran; need at least 2 (one is warm-up).")
    measured = hist[1:]
    env_steps = int(hist[-1]["env_steps"] - hist[0]["env_steps"])
    if len(stamps) == len(hist):
        wall = stamps[-1][0] - stamps[0][0]
        cpu = stamps[-1][1] - stamps[0][1]
    else:  # the logger hook did not fire once per iteration: fall back to fit's own timing
        wall = float(hist[-1]["time_s"] - hist[0]["time_s"])
        cpu = float("nan")
        notes.append("wall time from marl's per-iteration time_s (logger hook unavailable)")
    inner = float(hist[-1]["time_s"] - hist[0]["time_s"])
    c = res.config
    settings = {
        "env": repr(env),
        "B": env.num_envs,
        "T": int(c["rollout_length"]),
        "E": int(c["epochs"]),
        "minibatches": int(c["num_minibatches"]),
        "hidden": f"{int(c['layers'])}x{int(c['hidden'])}",
        "lr": float(c["lr"]),
        "torch_threads": torch.get_num_threads(),
        "training_step_steps_per_s": env_steps / inner if inner > 0 else float("nan"),
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
    defaults (``configs/envs/vmas.yaml``); the report shows what ran.
    """
    res = bench_ours(num_envs, rollout_length, epochs, iters, seconds, family="vmas", scenario="simple_spread",
                     name="vmas", hidden=64, **overrides)
    if num_envs < VMAS_MIN_ENVS:
        res.notes.append(f"B={num_envs} < {VMAS_MIN_ENVS}: not a valid run for the VMAS goal")
    return res


# ----------------------------------------------------------------------------- RLlib anchor

def _envs_per_runner(steps_per_iter: int, episode_len: int, preferred: int = 8) -> int:
    """Envs per env runner: ``preferred`` (8) or smaller, so that each env's fragment
    (``T*B / n`` steps) is a whole number of episodes (then every iteration's batch
    has the same number of episode chunks, and one minibatch can cover it exactly)."""
    cands = [n for n in range(preferred, 0, -1) if steps_per_iter % n == 0]
    for n in cands:
        if (steps_per_iter // n) % episode_len == 0:
            return n
    return cands[0]


def bench_rllib(
    num_envs: int = 32,
    rollout_length: int = 25,
    epochs: int = 10,
    iters: int = 10,
    seconds: Optional[float] = None,
    *,
    lr: float = 7e-4,
    num_envs_per_env_runner: Optional[int] = None,
    seed: int = 0,
) -> SideResult:
    """RLlib's stock multi-agent PPO on mpe2 simple_spread: the anchor.

    Same batch as ours (``train_batch_size_per_learner = T*B`` env steps), same
    epochs, one minibatch per epoch, MLPs 2x64 (separate value network), one
    shared module for the 3 agents, sampling in the driver.

    Minibatch size: RLlib slices each module's batch by *rows*; the shared
    module gets one row per agent step plus one artificial bootstrap row per
    agent and episode chunk (added for GAE, masked in the loss), so
    ``minibatch_size = N * (T*B + chunks)``. That is larger than
    ``train_batch_size_per_learner`` (counted in env steps), which RLlib's
    config validation rejects, so validation errors are turned into warnings
    (``experimental(_validate_config=False)``). The number of minibatch updates
    per iteration is counted (``Learner._update`` calls) and reported; a
    mismatch with ``E`` is added to the notes.

    Env steps are counted from the episodes the env runner returns
    (``MultiAgentEpisode.env_steps()``); RLlib's ``timers`` (EMA-smoothed) and
    lifetime counters are not used. Sampling and learning times are the
    durations of the env runner's ``sample`` and ``learner_group.update`` calls.
    """
    _init_ray()
    import torch
    import mpe2.simple_spread_v3 as simple_spread
    from ray.rllib.algorithms.ppo import PPOConfig
    from ray.rllib.core.rl_module.default_model_config import DefaultModelConfig
    from ray.rllib.env.wrappers.pettingzoo_env import ParallelPettingZooEnv
    from ray.tune.registry import register_env

    torch.set_num_threads(1)
    kw = dict(MPE_KWARGS)
    n_agents, episode_len = int(kw["N"]), int(kw["max_cycles"])
    register_env("marl_bench_simple_spread", lambda _cfg: ParallelPettingZooEnv(simple_spread.parallel_env(**kw)))
    batch = int(rollout_length) * int(num_envs)
    n_envs = num_envs_per_env_runner or _envs_per_runner(batch, episode_len)
    fragment = batch // n_envs
    chunks = n_envs * math.ceil(fragment / episode_len)  # exact when fragment % episode_len == 0
    minibatch = n_agents * (batch + chunks)
    config = (
        PPOConfig()
        .environment("marl_bench_simple_spread")
        .framework("torch")
        .env_runners(num_env_runners=0, num_envs_per_env_runner=n_envs, episodes_to_numpy=False)
        .multi_agent(policies={"shared"}, policy_mapping_fn=lambda aid, *a, **k: "shared")
        .rl_module(model_config=DefaultModelConfig(fcnet_hiddens=[64, 64], fcnet_activation="relu",
                                                   vf_share_layers=False))
        .training(train_batch_size_per_learner=batch, minibatch_size=minibatch, num_epochs=int(epochs),
                  lr=lr, vf_clip_param=1e4)
        .experimental(_validate_config=False)
        .debugging(seed=seed, log_level="ERROR")
    )
    import logging

    cfg_logger = logging.getLogger("ray.rllib.algorithms.algorithm_config")
    level = cfg_logger.level
    cfg_logger.setLevel(logging.ERROR)  # the (expected) minibatch > train batch warning
    try:
        algo = config.build_algo()
    finally:
        cfg_logger.setLevel(level)
    try:
        sample_t: List[float] = []
        learn_t: List[float] = []
        steps: List[int] = []
        rows: List[int] = []

        def count(episodes):
            steps.append(sum(int(e.env_steps()) for e in episodes))

        runner = algo.env_runner_group.local_env_runner
        runner.sample = _timed(runner.sample, sample_t, count)
        group = algo.learner_group
        group.update = _timed(group.update, learn_t)
        learner = getattr(group, "_learner", None)
        if learner is not None:
            orig_update = learner._update

            def counted(batch_, *a, **k):
                rows.append(sum(len(b) for b in batch_.values()) if hasattr(batch_, "values") else -1)
                return orig_update(batch_, *a, **k)

            learner._update = counted

        per_iter = []  # (env_steps, wall, sample, learn, minibatches, cpu)
        t_prev = c_prev = None
        t_measured = 0.0
        i = 0
        while True:
            n_s, n_l, n_r, n_steps = len(sample_t), len(learn_t), len(rows), len(steps)
            result = algo.train()
            t, c = time.perf_counter(), time.process_time()
            it_steps = sum(steps[n_steps:])
            if it_steps == 0:  # hook missed: RLlib's own count of this iteration
                it_steps = int(result.get("env_runners", {}).get("num_env_steps_sampled", 0))
            if t_prev is not None:
                per_iter.append((it_steps, t - t_prev, sum(sample_t[n_s:]), sum(learn_t[n_l:]), len(rows) - n_r,
                                 c - c_prev))
                t_measured += t - t_prev
            t_prev, c_prev = t, c
            i += 1
            if seconds:
                if t_measured >= seconds and len(per_iter) >= 1:
                    break
            elif i >= max(2, int(iters)):
                break
    finally:
        algo.stop()

    notes = []
    mbs = sorted({p[4] for p in per_iter})
    if learner is None:
        notes.append("minibatch count not checked (no local learner)")
    elif mbs != [int(epochs)]:
        notes.append(f"minibatch updates per iteration {mbs} != E={epochs} (module rows per minibatch "
                     f"{sorted(set(rows))}, minibatch_size {minibatch})")
    return SideResult(
        name="rllib",
        env_steps=sum(p[0] for p in per_iter),
        wall_s=sum(p[1] for p in per_iter),
        iterations=len(per_iter),
        sample_s=_mean([p[2] for p in per_iter]),
        learn_s=_mean([p[3] for p in per_iter]),
        cpu_s=sum(p[5] for p in per_iter),
        settings={
            "B": int(num_envs), "T": int(rollout_length), "E": int(epochs),
            "train_batch_size_per_learner": batch, "minibatch_size": minibatch,
            "minibatches_per_iter": mbs[0] if len(mbs) == 1 else mbs,
            "num_envs_per_env_runner": n_envs, "hidden": "2x64", "lr": lr,
            "torch_threads": torch.get_num_threads(),
        },
        notes=notes,
    )


# ----------------------------------------------------------------------------- report

def format_report(data: Dict[str, Any]) -> str:
    """The text report of :func:`run` (parsed back by :func:`parse_report`)."""
    sides: Dict[str, SideResult] = data["sides"]
    s = data["settings"]
    lines = [
        "marl bench throughput: env steps/s of whole training iterations (sampling + learning),",
        "iterations 2..n (the first is warm-up), one process; one env step = one step of one env copy.",
        f"settings: B={s['num_envs']} T={s['rollout_length']} E={s['epochs']} iters={s['iters']}"
        f" seconds={s['seconds']} B_vmas={s['vmas_num_envs']} (1 minibatch/epoch, MLP 2x64, 1 torch thread)",
        f"loadavg start: {_fmt_load(data['load_start'])}",
        "",
        f"{'side':<6} {'env_steps/s':>12} {'sample_s/it':>12} {'learn_s/it':>11} {'iters':>6} {'env_steps':>10} {'wall_s':>8}",
    ]
    for name in ("ours", "rllib", "vmas"):
        r = sides.get(name)
        if r is None:
            lines.append(f"{name:<6} {'skipped':>12}")
            continue
        lines.append(f"{name:<6} {r.steps_per_s:>12.1f} {r.sample_s:>12.4f} {r.learn_s:>11.4f} {r.iterations:>6d}"
                     f" {r.env_steps:>10d} {r.wall_s:>8.3f}")
    lines.append("")
    if "ours" in sides and "rllib" in sides:
        ratio = sides["ours"].steps_per_s / sides["rllib"].steps_per_s
        verdict = "met" if ratio >= RATIO_GOAL else "NOT met"
        lines.append(f"ratio ours/rllib: {ratio:.2f}x (goal >= {RATIO_GOAL}x: {verdict})")
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


_ROW = re.compile(r"^(ours|rllib|vmas)\s+([0-9.]+)\s+([0-9.]+)\s+([0-9.]+)\s+(\d+)\s+(\d+)\s+([0-9.]+)\s*$")


def parse_report(text: str) -> Dict[str, Any]:
    """Numbers of a report: ``{"sides": {name: {...}}, "ratio": float|None, "vmas": float|None, ...}``."""
    out: Dict[str, Any] = {"sides": {}, "ratio": None, "vmas": None}
    for line in text.splitlines():
        m = _ROW.match(line)
        if m:
            out["sides"][m.group(1)] = {
                "env_steps_per_s": float(m.group(2)), "sample_s": float(m.group(3)), "learn_s": float(m.group(4)),
                "iterations": int(m.group(5)), "env_steps": int(m.group(6)), "wall_s": float(m.group(7)),
            }
        elif line.startswith("ratio ours/rllib:") and "n/a" not in line:
            out["ratio"] = float(re.search(r"([0-9.]+)x", line).group(1))
        elif line.startswith("vmas env_steps/s:") and "n/a" not in line:
            out["vmas"] = float(line.split()[2])
        elif line.startswith("settings:"):
            out["settings"] = dict(re.findall(r"(\w+)=(\S+)", line))
        elif line.startswith("loadavg "):
            key, _, vals = line.partition(":")
            out[key.replace(" ", "_")] = [float(x) for x in vals.split()]
    return out


def run(
    iters: int = 10,
    num_envs: int = 32,
    rollout_length: int = 25,
    epochs: int = 10,
    vmas_num_envs: int = 512,
    skip_rllib: bool = False,
    skip_vmas: bool = False,
    seconds: Optional[float] = None,
    skip_ours: bool = False,
) -> Dict[str, Any]:
    """Run the sides and return ``{"sides": {name: SideResult}, "report": str, ...}``.

    Order: ours, RLlib, VMAS, all in this process (Ray started once, with all CPUs).
    """
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    load_start = os.getloadavg()
    t0 = time.perf_counter()
    started = _init_ray()
    sides: Dict[str, SideResult] = {}
    try:
        if not skip_ours:
            sides["ours"] = bench_ours(num_envs, rollout_length, epochs, iters, seconds,
                                       env_kwargs=MPE_KWARGS, num_minibatches=1, hidden=64)
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
                     "seconds": seconds, "vmas_num_envs": vmas_num_envs},
        "load_start": load_start,
        "load_end": os.getloadavg(),
        "total_s": time.perf_counter() - t0,
    }
    if "ours" in sides and "rllib" in sides:
        data["ratio"] = sides["ours"].steps_per_s / sides["rllib"].steps_per_s
    data["report"] = format_report(data)
    return data


def throughput(**kwargs: Any) -> str:
    """Run the throughput benchmark (keyword arguments of :func:`run`) and return the report text."""
    return run(**kwargs)["report"]


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="marl bench",
        description="Training throughput (env steps/s of whole iterations): marl MAPPO vs RLlib's stock "
                    "multi-agent PPO on mpe2 simple_spread, and marl MAPPO on VMAS simple_spread.",
    )
    p.add_argument("what", nargs="?", default="throughput", choices=["throughput"], help="benchmark to run")
    p.add_argument("--iters", type=int, default=10, help="iterations per side, the first is warm-up (default 10)")
    p.add_argument("--num-envs", type=int, default=32, help="env copies B of the MPE sides (default 32)")
    p.add_argument("--rollout-length", type=int, default=25, help="steps T per copy per iteration (default 25)")
    p.add_argument("--epochs", type=int, default=10, help="PPO epochs E of the MPE sides (default 10)")
    p.add_argument("--vmas-num-envs", type=int, default=512, help="VMAS env copies (default 512; goal needs >= 256)")
    p.add_argument("--seconds", type=float, default=None, help="train each side about this long instead of --iters")
    p.add_argument("--skip-rllib", action="store_true", help="do not run the RLlib anchor")
    p.add_argument("--skip-vmas", action="store_true", help="do not run the VMAS side")
    return p


def main(argv: Optional[List[str]] = None) -> int:
    """``python -m marl.bench [throughput] [--iters N] ...``: print the report; exit code 0."""
    ns = build_parser().parse_args(argv)
    kwargs = {k: v for k, v in vars(ns).items() if k != "what"}
    print(throughput(**kwargs), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
