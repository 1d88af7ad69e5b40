"""Raw env steps/s of MaMuJoCo through marl: ``python -m marl.benchmarks.mamujoco_speed``.

Times :meth:`MultiAgentEnv.step` with uniformly random actions (auto-reset included, no learning) of
``make_env("mamujoco", scenario, agent_conf=..., num_envs=B, vector=mode)`` for each batching mode
(``"loop"``: the ``B`` copies one after the other in this process; ``"subprocess"``: spread over worker
processes) and each ``B``. Env steps/s = ``B * steps / seconds``; each cell is the median of
``repeats`` timed runs after a warm-up. Which mode is faster decides ``envs/mamujoco.py``'s default.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from typing import Dict, List, Optional, Sequence

import torch

__all__ = ["measure", "run", "main"]


def measure(env, steps: int, repeats: int, warmup: int = 20) -> List[float]:
    """Env steps/s of ``repeats`` timed runs of ``steps`` batched steps each (``B * steps`` env steps).

    Raises:
        MarlError: what the env raises.
    """
    gen = torch.Generator().manual_seed(0)
    s = env.reset(seed=0)
    for _ in range(warmup):
        s = env.step(env.random_actions(s, gen))
    rates = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(steps):
            s = env.step(env.random_actions(s, gen))
        rates.append(env.num_envs * steps / (time.perf_counter() - t0))
    return rates


def run(
    scenario: str = "HalfCheetah",
    agent_conf: str = "2x3",
    batches: Sequence[int] = (1, 8, 32),
    modes: Sequence[str] = ("loop", "subprocess"),
    repeats: int = 5,
    env_steps: int = 2000,
    num_workers: Optional[int] = None,
) -> Dict[str, Dict[int, float]]:
    """``{mode: {B: median env steps/s}}``; each timed run takes ``max(20, env_steps // B)`` batched steps."""
    import marl

    out: Dict[str, Dict[int, float]] = {}
    for mode in modes:
        for B in batches:
            extra = {"num_workers": num_workers} if mode == "subprocess" and num_workers else {}
            env = marl.make_env("mamujoco", scenario, agent_conf=agent_conf, num_envs=B, vector=mode, **extra)
            try:
                rates = measure(env, max(20, env_steps // B), repeats)
            finally:
                env.close()
            out.setdefault(mode, {})[B] = statistics.median(rates)
            print(
                f"{scenario} {agent_conf} vector={mode:<10} B={B:<3} median {statistics.median(rates):8.0f} env steps/s "
                f"(runs: {', '.join(f'{r:.0f}' for r in rates)})",
                flush=True,
            )
    return out


def main(argv: Optional[List[str]] = None) -> int:
    p = argparse.ArgumentParser(prog="python -m marl.benchmarks.mamujoco_speed", description=__doc__.split("\n")[0])
    p.add_argument("--scenario", default="HalfCheetah")
    p.add_argument("--agent-conf", default="2x3")
    p.add_argument("--batches", type=int, nargs="+", default=[1, 8, 32])
    p.add_argument("--modes", nargs="+", default=["loop", "subprocess"])
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--env-steps", type=int, default=2000, help="env steps per timed run (B * batched steps)")
    p.add_argument("--num-workers", type=int, default=None, help="subprocess workers (default: min(B, cpu count))")
    ns = p.parse_args(argv)
    print(f"cpus {os.cpu_count()}, load average {os.getloadavg()}", flush=True)
    run(ns.scenario, ns.agent_conf, ns.batches, ns.modes, ns.repeats, ns.env_steps, ns.num_workers)
    print(f"load average at the end {os.getloadavg()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
