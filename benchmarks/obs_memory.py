"""Memory of image observations: one replayed episode and an on-policy rollout, uint8 against float32.

``python -m marl.benchmarks.obs_memory [--side 88] [--agents 2] [--steps 100] [--rollout-steps 10000]``
prints, for ``side x side x 3`` uint8 images (the ``image_cue`` env, ``envs/cue.py``, with its 4-value
vector key and the agent one-hot a shared module adds):

* the bytes one episode of ``steps`` steps takes in the value-decomposition replay buffer
  (:class:`~marl.engine.replay.JointEpisodeBuffer`, every column of the episode's slot: ``steps + 1``
  observations, actions, rewards, masks, state), measured on a real buffer's arrays;
* the bytes of the observation columns of an on-policy rollout of ``rollout_steps`` env steps
  (``obs`` ``[T+1, B, N, ...]`` and ``final_obs`` ``[T, B, N, ...]`` of
  :meth:`~marl.engine.runner.BatchedEnvRunner.sample`, ``T * B = rollout_steps``), from the columns'
  shapes and dtypes (:meth:`~marl.mapping.PolicyMapping.obs_columns`);

each with structured observations (images stored as uint8) and with ``flatten_obs=True`` (one float32
vector per agent), for comparison. docs/observations.md reports the numbers.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from typing import List, Optional

import numpy as np

import marl
from marl.engine.replay import JointEpisodeBuffer
from marl.mapping import PolicyMapping

MB = 1e6


@dataclass
class ObsMemory:
    """Bytes of one replayed episode and of a rollout's observation columns (see the module docstring)."""

    layout: str  # "uint8 (structured)" or "float32 (flatten_obs)"
    episode_bytes: int
    rollout_bytes: int


def _mapping(side: int, agents: int, steps: int, flatten: bool) -> PolicyMapping:
    env = marl.make_env("image_cue", num_envs=1, n_agents=agents, size=side, limit=steps, flatten_obs=flatten)
    return PolicyMapping(env.info, share="all", agent_id=True)


def replay_episode_bytes(mapping: PolicyMapping, steps: int) -> int:
    """Bytes of one episode slot of a :class:`JointEpisodeBuffer` for ``mapping``'s modules (measured: the
    arrays of a real buffer of 3 slots, divided by 3)."""
    shapes = mapping.buffer_shapes()
    buf = JointEpisodeBuffer(3, steps, 1, shapes, mapping.info.state_dim)
    total = sum(v.nbytes for v in buf.data.values()) + buf.lengths.nbytes + buf.committed.nbytes
    return total // 3


def rollout_obs_bytes(mapping: PolicyMapping, env_steps: int, num_envs: int) -> int:
    """Bytes of the ``obs`` (``T+1`` steps) and ``final_obs`` (``T``) columns of a rollout of ``env_steps =
    T * num_envs`` env steps, from the shapes and dtypes the runner stacks (per module and key)."""
    T = env_steps // num_envs
    total = 0
    for mid in mapping.modules:
        for shape, dtype in mapping.obs_columns(mid).values():
            per_step = num_envs * mapping.n_agents(mid) * int(np.prod(shape)) * np.dtype(dtype).itemsize
            total += (2 * T + 1) * per_step
    return total


def measure(
    side: int = 88, agents: int = 2, steps: int = 100, rollout_steps: int = 10_000, num_envs: int = 16
) -> List[ObsMemory]:
    """:class:`ObsMemory` of the structured (uint8) and the flattened (float32) layouts."""
    out = []
    for flatten, layout in ((False, "uint8 (structured)"), (True, "float32 (flatten_obs)")):
        m = _mapping(side, agents, steps, flatten)
        out.append(ObsMemory(layout, replay_episode_bytes(m, steps), rollout_obs_bytes(m, rollout_steps, num_envs)))
    return out


def report(rows: List[ObsMemory], side: int, agents: int, steps: int, rollout_steps: int) -> str:
    """The table :func:`main` prints."""
    lines = [
        f"{side}x{side}x3 image + 4-vector, {agents} agents (shared module, agent one-hot)",
        f"{'layout':<24}{'replayed episode (' + str(steps) + ' steps)':>30}{'rollout obs (' + str(rollout_steps) + ' env steps)':>36}",
    ]
    for r in rows:
        lines.append(f"{r.layout:<24}{r.episode_bytes / MB:>27.2f} MB{r.rollout_bytes / MB:>33.1f} MB")
    return "\n".join(lines)


def main(argv: Optional[List[str]] = None) -> None:
    p = argparse.ArgumentParser(prog="python -m marl.benchmarks.obs_memory", description=__doc__.splitlines()[0])
    p.add_argument("--side", type=int, default=88, help="image side in pixels")
    p.add_argument("--agents", type=int, default=2)
    p.add_argument("--steps", type=int, default=100, help="steps of the replayed episode")
    p.add_argument("--rollout-steps", type=int, default=10_000, help="env steps of the on-policy rollout")
    a = p.parse_args(argv)
    rows = measure(a.side, a.agents, a.steps, a.rollout_steps)
    print(report(rows, a.side, a.agents, a.steps, a.rollout_steps))


if __name__ == "__main__":
    main()
