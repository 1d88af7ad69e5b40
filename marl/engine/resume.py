"""Exact resume: the random generator and sampler states a trainer's checkpoint keeps.

RLlib saves the module weights and optimiser states. For ``N`` iterations in one
``fit`` and ``N/2`` + ``fit(resume=...)`` for the rest to give identical weights,
a checkpoint also needs everything random or stateful on the sampling and
learning path (docs/index.md, "Resume"):

* the global generators of the driver process (torch, numpy, Python ``random``):
  the local env runner's action draws, PPO's minibatch permutations and
  epsilon-greedy draws all use them (the local runner and a local learner run in
  the driver);
* per sampling env runner (:meth:`~marl.engine.runner.BatchedEnvRunner.get_sampling_state`):
  the env's own state (:meth:`marl.env.MultiAgentEnv.get_state`), the last step the
  runner will act on, recurrent states, episode starts, running episode statistics
  and, on a remote runner, its process's global generators.

State is captured only when a checkpoint is written: nothing runs per step.
"""

from __future__ import annotations

import random
from typing import Any, Dict, List

import numpy as np
import torch

from marl.errors import EnvRunnersLost

SAMPLING_KEY = "marl_sampling"  # the trainer-state entry written by sampling_state


def rng_state() -> Dict[str, Any]:
    """This process's global generator states: torch (CPU, and CUDA once initialised), numpy,
    Python ``random``."""
    state = {"torch": torch.get_rng_state(), "numpy": np.random.get_state(), "python": random.getstate()}
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: Dict[str, Any]) -> None:
    """Restore what :func:`rng_state` returned (the CUDA states only where CUDA is available)."""
    torch.set_rng_state(state["torch"])
    np.random.set_state(state["numpy"])
    random.setstate(state["python"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def sampling_state(trainer: Any) -> Dict[str, Any]:
    """The driver's generator states and the sampling state of every sampling env runner
    (``trainer.foreach_runner``), for the trainer's checkpoint. With every remote runner lost
    the checkpoint is still written, without runner states (a resume restarts the episodes):
    the learners' state is what the checkpoint must keep."""
    try:
        runners = trainer.foreach_runner(lambda r: r.get_sampling_state())
    except EnvRunnersLost:
        runners = []
    return {"rng": rng_state(), "runners": runners}


def restore_sampling(trainer: Any, state: Dict[str, Any]) -> List[str]:
    """Give every sampling env runner its saved state (matched by worker index), then restore
    the driver's generators, last, so that nothing drawn while restoring shifts them.

    Prints one line when some runners cannot continue exactly (an env that cannot save its
    state restarts its episodes; another ``num_envs``; a runner the checkpoint did not have).

    Returns:
        The reasons, one per runner that does not continue exactly (empty: all do).
    """
    saved = {int(s["worker_index"]): s for s in state["runners"]}
    reasons = [
        r for r in trainer.foreach_runner(lambda r: r.set_sampling_state(saved.get(int(r.worker_index or 0)))) if r
    ]
    if reasons:
        print(
            f"[marl] resume is not exact on {len(reasons)} env runner(s): {reasons[0]}; weights, optimiser, "
            f"replay buffer, counters and random generators are restored (docs/index.md, Resume).",
            flush=True,
        )
    set_rng_state(state["rng"])
    return reasons
