"""The anchor of the throughput benchmark: RLlib's stock multi-agent PPO on mpe2 simple_spread.

RLlib (Liang et al., 2018, arXiv:1712.09381), new API stack, PPO (Schulman et
al., 2017, arXiv:1707.06347) through ``ParallelPettingZooEnv``, with RLlib's
fastest settings for this case. The measurement method is the one of
:mod:`marl.benchmarks.common`; the settings are chosen to match marl's side
(``docs/engine.md``, "Throughput").
"""

from __future__ import annotations

import logging
import math
from typing import Any, Dict, List, Optional

from marl.benchmarks.common import MPE_KWARGS, SideResult, mean, now, timed

__all__ = ["RllibAnchor", "bench_rllib"]


def _envs_per_runner(steps_per_iter: int, episode_len: int, preferred: int = 8) -> int:
    """Envs per env runner: ``preferred`` (8) or fewer, so that each env's fragment
    (``T*B / n`` steps) is a whole number of episodes: then every iteration's batch
    has the same number of episode chunks and one minibatch covers it exactly."""
    cands = [n for n in range(preferred, 0, -1) if steps_per_iter % n == 0]
    for n in cands:
        if (steps_per_iter // n) % episode_len == 0:
            return n
    return cands[0]


def _ppo_config(batch: int, minibatch_size: int, epochs: int, n_envs: int, lr: float, seed: int):
    """RLlib ``PPOConfig`` of the anchor: one module shared by all agents, MLPs 2x64 with a
    separate value network, sampling in the driver, ``vf_clip_param=1e4``."""
    from ray.rllib.algorithms.ppo import PPOConfig
    from ray.rllib.core.rl_module.default_model_config import DefaultModelConfig

    return (
        PPOConfig()
        .environment("marl_bench_simple_spread")
        .framework("torch")
        .env_runners(num_env_runners=0, num_envs_per_env_runner=n_envs, episodes_to_numpy=False)
        .multi_agent(policies={"shared"}, policy_mapping_fn=lambda aid, *a, **k: "shared")
        .rl_module(
            model_config=DefaultModelConfig(fcnet_hiddens=[64, 64], fcnet_activation="relu", vf_share_layers=False)
        )
        .training(
            train_batch_size_per_learner=batch,
            minibatch_size=minibatch_size,
            num_epochs=epochs,
            lr=lr,
            vf_clip_param=1e4,
        )
        .experimental(_validate_config=False)
        .debugging(seed=seed, log_level="ERROR")
    )


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
    durations (seconds) of the env runner's ``sample`` and ``learner_group.update`` calls.
    """

    def __init__(
        self,
        num_envs: int = 32,
        rollout_length: int = 25,
        epochs: int = 10,
        *,
        lr: float = 7e-4,
        num_envs_per_env_runner: Optional[int] = None,
        seed: int = 0,
    ):
        from marl.api import start_ray

        start_ray()
        import mpe2.simple_spread_v3 as simple_spread
        import torch
        from ray.rllib.env.wrappers.pettingzoo_env import ParallelPettingZooEnv
        from ray.tune.registry import register_env

        torch.set_num_threads(1)
        kw = dict(MPE_KWARGS)
        n_agents, episode_len = int(kw["N"]), int(kw["max_cycles"])
        register_env("marl_bench_simple_spread", lambda _cfg: ParallelPettingZooEnv(simple_spread.parallel_env(**kw)))
        self.epochs = int(epochs)
        batch = int(rollout_length) * int(num_envs)
        n_envs = num_envs_per_env_runner or _envs_per_runner(batch, episode_len)
        chunks = n_envs * math.ceil((batch // n_envs) / episode_len)  # exact for whole-episode fragments
        self.minibatch_size = n_agents * (batch + chunks)
        config = _ppo_config(batch, self.minibatch_size, self.epochs, n_envs, lr, seed)
        cfg_logger = logging.getLogger("ray.rllib.algorithms.algorithm_config")
        level = cfg_logger.level
        cfg_logger.setLevel(logging.ERROR)  # silence the expected "minibatch_size > train batch" warning
        try:
            self.algo = config.build_algo()
        finally:
            cfg_logger.setLevel(level)
        self.settings: Dict[str, Any] = {
            "B": int(num_envs),
            "T": int(rollout_length),
            "E": self.epochs,
            "train_batch_size_per_learner": batch,
            "minibatch_size": self.minibatch_size,
            "num_envs_per_env_runner": n_envs,
            "hidden": "2x64",
            "lr": lr,
        }
        self._sample_t: List[float] = []
        self._learn_t: List[float] = []
        self._steps: List[int] = []
        self._rows: List[int] = []
        self.iterations: List[Dict[str, float]] = []  # one dict per train() call, warm-up included
        self._hook()

    def _hook(self) -> None:
        from marl.engine.rllib_seam import count_gradient_steps, local_learner

        def count(episodes):
            self._steps.append(sum(int(e.env_steps()) for e in episodes))

        runner = self.algo.env_runner_group.local_env_runner
        runner.sample = timed(runner.sample, self._sample_t, count)
        group = self.algo.learner_group
        group.update = timed(group.update, self._learn_t)
        self.learner = local_learner(group)  # the local learner (num_learners=0), or None
        if self.learner is not None:
            count_gradient_steps(
                self.learner,
                lambda batch: self._rows.append(
                    sum(len(b) for b in batch.values()) if hasattr(batch, "values") else -1
                ),
            )

    def train_one(self) -> Dict[str, float]:
        """One ``algo.train()``, timed; returns (and keeps) this iteration's figures
        (``env_steps``, ``wall_s``, ``cpu_s``, ``sample_s``, ``learn_s`` in seconds, ``minibatches``)."""
        n_s, n_l, n_r, n_st = len(self._sample_t), len(self._learn_t), len(self._rows), len(self._steps)
        t0 = now()
        result = self.algo.train()
        t1 = now()
        steps = sum(self._steps[n_st:])
        if steps == 0:  # the sample hook missed: RLlib's own count of this iteration
            steps = int(result.get("env_runners", {}).get("num_env_steps_sampled", 0))
        it = {
            "env_steps": steps,
            "wall_s": t1[0] - t0[0],
            "cpu_s": t1[1] - t0[1],
            "sample_s": sum(self._sample_t[n_s:]),
            "learn_s": sum(self._learn_t[n_l:]),
            "minibatches": len(self._rows) - n_r,
        }
        self.iterations.append(it)
        return it

    def result(self) -> SideResult:
        """Figures of iterations 2..n (the first is warm-up)."""
        import torch

        measured = self.iterations[1:]
        notes = []
        mbs = sorted({int(p["minibatches"]) for p in measured})
        if self.learner is None:
            notes.append("minibatch updates not counted (no local learner)")
        elif mbs != [self.epochs]:
            notes.append(
                f"minibatch updates per iteration {mbs} != E={self.epochs} (rows per minibatch "
                f"{sorted(set(self._rows))}, minibatch_size {self.minibatch_size})"
            )
        return SideResult(
            name="rllib",
            env_steps=int(sum(p["env_steps"] for p in measured)),
            wall_s=sum(p["wall_s"] for p in measured),
            iterations=len(measured),
            sample_s=mean([p["sample_s"] for p in measured]),
            learn_s=mean([p["learn_s"] for p in measured]),
            cpu_s=sum(p["cpu_s"] for p in measured),
            settings={
                **self.settings,
                "minibatches_per_iter": mbs[0] if len(mbs) == 1 else mbs,
                "torch_threads": torch.get_num_threads(),
            },
            notes=notes,
        )

    def stop(self) -> None:
        """Stop the RLlib algorithm (its env runner and learner)."""
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
    measured time, at least 2 iterations) and return its :class:`SideResult`.
    ``kwargs`` go to :class:`RllibAnchor` (``lr``, ``num_envs_per_env_runner``, ``seed``)."""
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
