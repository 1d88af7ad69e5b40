"""The evaluation protocol of a benchmark run, as a training callback.

Gorsane et al. 2022, "Towards a standardised performance evaluation protocol for
cooperative MARL" (arXiv:2209.10485), Section 4: evaluate the greedy policy every
``interval`` env steps over ``episodes`` episodes and keep every episode's score; at
the end, re-evaluate the policy of the best evaluation over ``absolute_factor``
(10) times as many episodes, the *absolute metric*. The metric is the win rate
where the env reports one (``episode_metrics["win_rate"]``, SMAX) and the team
return otherwise; both are kept when both exist.

:class:`EvaluationProtocol` plugs into :func:`marl.fit` (``callbacks=[...]``). Its
state (the series so far, the best evaluation and its weights, the elapsed time)
travels in every checkpoint, so a run resumed from a checkpoint continues the same
series. Evaluation episodes use their own env copies and fixed seeds; greedy actions draw no
random numbers, and sampled ones (``actions="sample"``, EPyMARL's test protocol for its
policy-gradient methods) draw them from a generator seeded for the evaluation, so neither
changes the training run.
"""

from __future__ import annotations

import copy
import random
import time
from contextlib import contextmanager
from typing import Any, Dict, Iterator, List, Optional

import numpy as np
import torch

from marl.benchmarks.suite import EVAL_ACTIONS
from marl.callbacks import Callback
from marl.errors import unknown_choice
from marl.engine.runner import MappingFn
from marl.mapping import PolicyMapping
from marl.policy import run_episodes

_EVAL_SEED = 10_000  # evaluation episodes: seed + run seed; absolute metric: 2 * seed + run seed


class EvaluationProtocol(Callback):
    """Evaluations every ``interval`` env steps and the absolute metric at the end.

    Args:
        interval: env steps between evaluations (the first is at step 0, before training).
        episodes: episodes per evaluation.
        absolute_factor: the absolute metric plays ``absolute_factor * episodes`` episodes.
        seed: the run's seed (evaluation env seeds derive from it).
        num_envs: env copies of the evaluation env (default ``min(episodes, 32)``).
        actions: ``"greedy"`` (the policy's most likely action) or ``"sample"`` (drawn from the
            policy; torch's generator is seeded with the evaluation's seed, so a resumed run
            repeats the same draws).

    Raises:
        MarlError: ``actions`` is neither.

    Attributes:
        series: one dict per evaluation: ``step_count`` (env steps), ``elapsed_time`` (s of
            training wall-clock, summed over resumes), ``return`` (list, one team return per
            episode) and, where the env has it, ``win_rate`` (list of 0/1).
        absolute: after :meth:`on_fit_end`, ``{"return": [...], "win_rate": [...]}`` over the
            absolute metric's episodes and ``best_step`` (env steps of the best evaluation).
    """

    def __init__(
        self,
        interval: int,
        episodes: int,
        absolute_factor: int = 10,
        seed: int = 0,
        num_envs: Optional[int] = None,
        actions: str = "greedy",
    ):
        if actions not in EVAL_ACTIONS:
            raise unknown_choice("evaluation actions", actions, EVAL_ACTIONS)
        self.explore = actions == "sample"
        self.interval, self.episodes, self.absolute_factor, self.seed = interval, episodes, absolute_factor, seed
        self.num_envs = num_envs or min(episodes, 32)
        self.series: List[Dict[str, Any]] = []
        self.absolute: Dict[str, Any] = {}
        self._best: Optional[Dict[str, Any]] = None  # score, step_count and module weights of the best evaluation
        self._elapsed = 0.0
        self._clock = time.perf_counter()
        self._env = None
        self._mapping = None

    # ------------------------------------------------------------------ hooks
    def on_fit_start(self, trainer) -> None:
        self._clock = time.perf_counter()
        if not self.series:  # a fresh run: the untrained policy is the curve's first point
            self._evaluate(trainer, trainer.progress["env_steps"])

    def on_iteration_end(self, trainer, metrics: Dict[str, Any]) -> Optional[Dict[str, float]]:
        steps = int(metrics["env_steps"])
        if steps >= self._next_step():
            return self._evaluate(trainer, steps)
        return None

    def on_fit_end(self, trainer, result) -> None:
        steps = int(trainer.progress["env_steps"])
        if self.series[-1]["step_count"] < steps:  # the budget is not a multiple of the interval
            self._evaluate(trainer, steps)
        seed = 2 * _EVAL_SEED + self.seed
        with _rng_untouched():
            policy = self._policy(trainer, seed)
            for mid, module in policy.modules.items():
                module.load_state_dict(self._best["weights"][mid])
            stats = run_episodes(self._eval_env(trainer), policy, self.episodes * self.absolute_factor, seed=seed)
        self.absolute = {**_scores(stats), "best_step": self._best["step_count"]}

    def state_dict(self) -> Dict[str, Any]:
        return {"series": copy.deepcopy(self.series), "best": copy.deepcopy(self._best), "elapsed": self._elapsed_now()}

    def load_state_dict(self, state: Dict[str, Any]) -> None:
        self.series, self._best, self._elapsed = state["series"], state["best"], state["elapsed"]
        self._clock = time.perf_counter()

    # ------------------------------------------------------------------ evaluation
    def _next_step(self) -> int:
        last = self.series[-1]["step_count"] if self.series else -self.interval
        return (last // self.interval + 1) * self.interval

    def _elapsed_now(self) -> float:
        return self._elapsed + time.perf_counter() - self._clock

    def _evaluate(self, trainer, steps: int) -> Dict[str, float]:
        """One evaluation at ``steps`` env steps; keeps the weights when it is the best so far."""
        with _rng_untouched():
            policy = self._policy(trainer, _EVAL_SEED + self.seed)
            stats = run_episodes(self._eval_env(trainer), policy, self.episodes, seed=_EVAL_SEED + self.seed)
        point = {"step_count": steps, "elapsed_time": round(self._elapsed_now(), 3), **_scores(stats)}
        self.series.append(point)
        score = float(np.mean(point["win_rate"] if "win_rate" in point else point["return"]))
        if self._best is None or score > self._best["score"]:  # ties keep the earlier policy
            weights = {
                mid: {k: v.detach().clone() for k, v in m.state_dict().items()} for mid, m in policy.modules.items()
            }
            self._best = {"score": score, "step_count": steps, "weights": weights}
        out = {"eval_return_mean": float(np.mean(point["return"]))}
        if "win_rate" in point:
            out["eval_win_rate"] = float(np.mean(point["win_rate"]))
        return out

    def _policy(self, trainer, seed: int):
        """The learners' current policy, acting greedily or sampling (``actions``); torch's generator then
        starts from ``seed``, for the draws of sampled actions (call inside :func:`_rng_untouched`)."""
        policy = trainer.make_policy(self._policy_mapping(trainer))
        policy.explore = self.explore
        torch.manual_seed(seed)
        return policy

    def _eval_env(self, trainer):
        if self._env is None:
            self._env = trainer.run.make_eval_env(num_envs=self.num_envs)
        return self._env

    def _policy_mapping(self, trainer) -> PolicyMapping:
        """The training run's agent -> module table, on the evaluation env's agents."""
        if self._mapping is None:
            self._mapping = PolicyMapping(
                self._eval_env(trainer).info,
                share=MappingFn(trainer.run.agent_to_module),
                agent_id=trainer.cfg.agent_id,
            )
        return self._mapping


@contextmanager
def _rng_untouched() -> Iterator[None]:
    """Run an evaluation without moving the training run's torch, numpy or Python random streams
    (building the policy's modules draws initial weights from torch's generator)."""
    np_state, py_state = np.random.get_state(), random.getstate()
    with torch.random.fork_rng(devices=[]):
        yield
    np.random.set_state(np_state)
    random.setstate(py_state)


def _scores(stats: Dict[str, List[float]]) -> Dict[str, List[float]]:
    """marl-eval metric lists of one evaluation: ``return`` and, where present, ``win_rate``."""
    out = {"return": [float(x) for x in stats["episode_return"]]}
    if stats.get("win_rate"):
        out["win_rate"] = [float(x) for x in stats["win_rate"]]
    return out
