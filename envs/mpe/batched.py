"""The batched MPE backend: mpe2's physics and scenarios as torch tensors over all ``B`` copies.

``make_env("mpe", scenario, backend="torch")`` (the default for the scenarios
in :data:`SCENARIOS`). Every copy's world is a row of ``[B, ...]`` tensors and
one step is a few dozen tensor operations for all copies, where mpe2 (and
:class:`~marl.envs.mpe.MPEEnv`) loops over copies, agents and entity pairs in
Python.

What it reproduces, from mpe2 1.1 (PettingZoo's MPE; Lowe et al., 2017,
arXiv:1706.02275): ``World.step`` (action forces with sensitivity 5 or the
agent's ``accel``, soft contact forces ``contact_force * delta / dist *
logaddexp(0, -(dist - dist_min) / contact_margin) * contact_margin`` between
colliding entities, damping, ``dt``, mass, ``max_speed``; communication state
of non-silent agents), mpe2's action decoding (discrete ``0..4`` = no-op, -x,
+x, -y, +y, movement + comm products; continuous ``Box(0, 1)`` differences), the
scenarios' observations, rewards and ``local_ratio`` blend, and ``max_cycles``
truncation. Physics runs in float64 as mpe2's numpy code does and in the same
order of additions, so observations and rewards (float32) match mpe2 step for
step from the same state and actions (``tests/test_mpe_backends.py``: 0.0
difference measured; the test allows 1e-5, since ``logaddexp`` could differ in
its last bits between numpy and torch builds).

What differs: the random draws. Initial positions (uniform in ``[-1, 1]^2``)
and simple_speaker_listener's goal come from one ``torch.Generator`` for all
copies, seeded by ``reset(seed)``; mpe2 seeds each copy's numpy generator. The
distributions are mpe2's; the streams are not. Options outside what the
scenarios' defaults use (simple_spread's ``curriculum``,
``terminate_on_success``, ``num_agent_neighbors``, ``num_landmark_neighbors``;
simple_adversary's neighbour options; action or communication noise) are
refused here, and the default backend falls back to mpe2 for them. Scenarios:
:data:`SCENARIOS` (simple_spread, simple_speaker_listener, simple_reference,
simple_adversary: the mpe benchmark suite's four).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Dict, List, Optional

import numpy as np
import torch

from marl.env import MarlError, MultiAgentEnv, Observation, Step
from marl.envs.mpe.torch_scenarios import SCENARIOS, TorchWorld

__all__ = ["SCENARIOS", "TorchMPEEnv", "unsupported_options"]

# mpe2 options that change neither observations, rewards nor dynamics (rendering, mpe2's info dicts)
_NO_EFFECT = ("dynamic_rescaling", "benchmark_data")


def unsupported_options(scenario: str, kwargs: Dict[str, Any]) -> List[str]:
    """The kwargs (``name=value``) of ``scenario`` the torch backend does not implement (empty: supported).
    A scenario outside :data:`SCENARIOS` returns ``["scenario=<name>"]``."""
    if scenario not in SCENARIOS:
        return [f"scenario={scenario}"]
    allowed = SCENARIOS[scenario].options + _NO_EFFECT
    return [f"{k}={v!r}" for k, v in kwargs.items() if k not in allowed and v not in (None, False)]


class TorchMPEEnv(MultiAgentEnv):
    """``B`` copies of an MPE scenario as torch tensors (the module docstring says what matches mpe2).

    Args:
        reference: a one-copy :class:`~marl.envs.mpe.MPEEnv` of the same scenario and options;
            its mpe2 world gives the entities' constants and its ``info`` the groups and spaces.
        num_envs: ``B``; continuous_actions, max_cycles: as :class:`~marl.envs.mpe.MPEEnv`.
        seed: seed of ``reset()`` without one.

    Shapes: as :class:`~marl.envs.mpe.MPEEnv` (``obs[g]`` ``[B, N_g, obs_dim_g]`` float32,
    ``state`` ``[B, sum of obs dims]``, ``reward[g]`` ``[B, N_g]`` float32).

    Raises:
        MarlError: ``step`` before ``reset``; a state of another ``num_envs`` in :meth:`set_state`.
    """

    def __init__(
        self, reference: Any, num_envs: int, continuous_actions: bool, max_cycles: int, seed: Optional[int] = None
    ):
        raw = reference._envs[0]
        self.layout = reference.layout
        self.info = dataclasses.replace(reference.info, num_envs=int(num_envs))
        self.scenario = SCENARIOS[reference.info.scenario](raw)
        self.world = TorchWorld(raw.world, int(num_envs))
        self.local_ratio = raw.local_ratio
        self.max_cycles, self.continuous_actions = int(max_cycles), bool(continuous_actions)
        self.steps = torch.zeros(int(num_envs), dtype=torch.long)
        self.generator = torch.Generator()
        self._default_seed = seed
        self._started = False
        self._state = torch.zeros(int(num_envs), self.layout.state_dim, dtype=torch.float32)

    # ------------------------------------------------------------------ API
    def reset(self, seed: Optional[int] = None) -> Step:
        """Reset all copies from ``seed`` (one generator for all copies) and return the first :class:`Step`."""
        seed = self._default_seed if seed is None else seed
        if seed is None:
            self.generator.seed()
        else:
            self.generator.manual_seed(int(seed))
        rows = torch.ones(self.num_envs, dtype=torch.bool)
        self._reset(rows)
        self._started = True
        return Step.at_reset(self.layout.observation(self._state.numpy()))

    def step_env(self, actions: Dict[str, torch.Tensor]) -> Step:
        """One step of every copy (:meth:`MultiAgentEnv.step_env`): decode, physics, rewards, observations."""
        if not self._started:
            raise MarlError("Call reset() before step().")
        u, c = self._decode(actions)
        self.world.step(u, c)
        rewards = self._rewards()
        self.steps += 1
        truncated = self.steps >= self.max_cycles
        terminated = torch.zeros_like(truncated)
        self._observe()
        return self._make_step(rewards, terminated, truncated)

    def reset_rows(self, rows: torch.Tensor) -> Observation:
        """New episodes in ``rows`` (``[B]`` bool), drawn from the env's generator."""
        self._reset(rows.to(torch.bool))
        return self.layout.observation(self._state.numpy())

    def get_state(self) -> Dict[str, Any]:
        """Entity positions, velocities, communication, scenario draws, step counters, the
        generator state and the observation buffer (exact resume)."""
        return {
            "world": self.world.get_state(),
            "scenario": self.scenario.get_state(),
            "steps": self.steps.clone(),
            "generator": self.generator.get_state(),
            "obs_buffer": self._state.clone(),
            "started": self._started,
        }

    def set_state(self, state: Dict[str, Any]) -> None:
        """Restore a :meth:`get_state` dict of an env of the same scenario, options and ``num_envs``."""
        if state["steps"].shape[0] != self.num_envs:
            raise MarlError(
                f"MPE state of {state['steps'].shape[0]} copies cannot be loaded into num_envs={self.num_envs}."
            )
        self.world.set_state(state["world"])
        self.scenario.set_state(state["scenario"])
        self.steps = state["steps"].clone()
        self.generator.set_state(state["generator"])
        self._state, self._started = state["obs_buffer"].clone(), bool(state["started"])

    # ------------------------------------------------------------------ internals
    def _reset(self, rows: torch.Tensor) -> None:
        self.scenario.reset(self.world, rows, self.generator)
        self.steps[rows] = 0
        self._observe()

    def _decode(self, actions: Dict[str, torch.Tensor]):
        """Checked group actions -> movement force ``u [B, A, dim_p]`` and comm ``c [B, A, dim_c]`` (float64)."""
        per_agent = [None] * len(self.info.agents)
        for name, g in self.info.groups.items():
            a = actions[name]
            if not g.discrete:  # clipped to Box(0, 1) in float32, as mpe2 gets it (AgentLayout.split_actions)
                a = torch.clamp(a.to(torch.float32), float(g.action_space.low.min()), float(g.action_space.high.max()))
            for j, agent in enumerate(g.agents):
                per_agent[self.layout.index[agent]] = a[:, j]
        return self.world.decode(per_agent, self.continuous_actions)

    def _rewards(self) -> torch.Tensor:
        agent_r = self.scenario.reward(self.world)  # [B, A] float64
        if self.local_ratio is None:
            return agent_r.to(torch.float32)
        glob = self.scenario.global_reward(self.world)[:, None]
        return (glob * (1 - self.local_ratio) + agent_r * self.local_ratio).to(torch.float32)

    def _observe(self) -> None:
        self._state = self.scenario.observation(self.world).to(torch.float32)

    def _make_step(self, rewards: torch.Tensor, terminated: torch.Tensor, truncated: torch.Tensor) -> Step:
        ob = self.layout.observation(self._state.numpy())
        reward = self.layout.per_group(np.ascontiguousarray(rewards.numpy()))
        return Step(*ob, reward=reward, terminated=terminated, truncated=truncated)
