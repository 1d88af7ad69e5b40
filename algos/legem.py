"""LeGEM-style reward redistribution for off-beat actions (reconstructed).

Off-beat MARL (Qiu et al. 2022, arXiv 2205.13718) redistributes delayed rewards
with a graph-based episodic memory built from agents' individual experiences.
The paper's exact graph and formula were not available
(``reference/algorithms.md`` §6.3); this module implements the reconstruction
given there, and says so wherever it is used:

* :func:`causal_shift` — move each reward that arrives when actions complete
  back to the decision step(s) where those actions started (split equally);
  the episode's undiscounted return is unchanged;
* :class:`EpisodicMemoryGraph` — per-agent memory: nodes are keys of
  observations at decision points (fixed random projection, rounded), edges
  go from one decision to the agent's next one with the reward collected in
  between and the duration; node values by value propagation
  ``V(n) = max_{n -> n'} [R + gamma^d V(n')]``, ``V = 0`` at episode ends;
* :func:`memory_shaping` — potential-based shaping with the memory values,
  ``r_hat = r + beta (gamma^d V(n_next) - V(n))`` at decision steps.
"""
from __future__ import annotations

from collections import defaultdict
from typing import Dict, Iterable, List, Optional, Sequence, Tuple

import torch

Record = Tuple[int, int, int, int]  # (agent, start step, end step, action)


def causal_shift(rewards: torch.Tensor, records: Iterable[Record]) -> torch.Tensor:
    """Move the team reward of every step where actions complete to those actions' start steps.

    Args:
        rewards: ``[T]`` team reward of one episode.
        records: ``(agent, start, end, action)`` of the episode's actions (inclusive steps).
    Returns:
        ``[T]`` redistributed rewards; a step's reward is split equally over the
        actions ending at it and added at their start steps; rewards at steps
        where no action ends stay. ``sum`` is conserved exactly.
    """
    out = rewards.clone()
    ending: Dict[int, List[int]] = defaultdict(list)
    for _, start, end, _ in records:
        ending[int(end)].append(int(start))
    for end, starts in ending.items():
        if end >= rewards.shape[0]:
            continue
        r = rewards[end]
        out[end] -= r
        for s in starts:
            out[s] += r / len(starts)
    return out


def decision_records(decisions: torch.Tensor) -> List[Record]:
    """Action records ``(agent, start, end, -1)`` of one episode from its decision mask.

    Args:
        decisions: ``[L, n]`` bool, agent ``i`` chose a new action at step ``t``
            (step 0 always counts); an action lasts until the agent's next decision
            or the episode's last step.
    """
    L, n = decisions.shape
    out: List[Record] = []
    for i in range(n):
        starts = sorted({0} | {int(t) for t in torch.nonzero(decisions[:, i]).flatten()})
        ends = [s - 1 for s in starts[1:]] + [L - 1]
        out.extend((i, s, e, -1) for s, e in zip(starts, ends))
    return out


def redistribute_team_reward(rewards: torch.Tensor, decisions: torch.Tensor, team_reward: str = "mean") -> torch.Tensor:
    """Causal shift of one episode's team reward for value decomposition.

    Args:
        rewards: ``[L, n]`` per-agent rewards (the team reward repeated in cooperative envs).
        decisions: ``[L, n]`` bool decision mask (:func:`decision_records`).
        team_reward: how the learner aggregates agents (``"mean"`` or ``"sum"``).
    Returns:
        ``[L, n]`` per-agent rewards whose aggregate is the shifted team reward
        (:func:`causal_shift`); identical to ``rewards``' aggregate when every
        agent decides at every step (no off-beat actions).
    """
    n = rewards.shape[1]
    team = rewards.mean(1) if team_reward == "mean" else rewards.sum(1)
    shifted = causal_shift(team, decision_records(decisions))
    per_agent = shifted if team_reward == "mean" else shifted / n
    return per_agent.unsqueeze(1).expand(-1, n).clone()


class EpisodicMemoryGraph:
    """Per-agent episodic memory graph with value propagation (reconstruction, see the module docstring).

    Args:
        obs_dim: observation size; key_dim: size of the random projection;
        gamma: discount per step; resolution: rounding step of the keys
            (observations whose projected keys round alike share a node);
        max_nodes: FIFO cap on the number of nodes; seed: of the projection.
    """

    def __init__(self, obs_dim: int, key_dim: int = 8, gamma: float = 0.99, resolution: float = 0.1,
                 max_nodes: int = 100_000, seed: int = 0):
        g = torch.Generator().manual_seed(seed)
        self.proj = torch.randn(obs_dim, key_dim, generator=g) / key_dim ** 0.5
        self.gamma, self.resolution, self.max_nodes = float(gamma), float(resolution), int(max_nodes)
        self.nodes: Dict[tuple, int] = {}
        self.edges: Dict[int, Dict[int, Tuple[float, int]]] = defaultdict(dict)  # n -> n' -> (R, d)
        self.terminal_edges: Dict[int, float] = {}  # n -> best reward collected until the episode end
        self.value: Dict[int, float] = {}
        self._next_id = 0

    def key(self, obs: torch.Tensor) -> tuple:
        """The node key of one observation ``[obs_dim]``."""
        return tuple(torch.round(obs.float() @ self.proj / self.resolution).long().tolist())

    def node(self, obs: torch.Tensor) -> int:
        k = self.key(obs)
        if k not in self.nodes:
            if len(self.nodes) >= self.max_nodes:  # FIFO eviction of the oldest node
                old_key = next(iter(self.nodes))
                old = self.nodes.pop(old_key)
                self.edges.pop(old, None)
                self.terminal_edges.pop(old, None)
                self.value.pop(old, None)
            self.nodes[k] = self._next_id
            self._next_id += 1
        return self.nodes[k]

    def add_episode(self, obs: Sequence[torch.Tensor], rewards: Sequence[float], durations: Sequence[int]) -> List[int]:
        """Add one agent's decisions of one episode.

        Args:
            obs: observation at each decision point (``K`` of them).
            rewards: reward collected from decision ``k`` until decision ``k+1``
                (or the episode's end), already discounted inside the interval.
            durations: steps from decision ``k`` to ``k+1`` (or to the end).
        Returns:
            The node ids of the decisions.
        """
        ids = [self.node(o) for o in obs]
        for k, n in enumerate(ids):
            r, d = float(rewards[k]), int(durations[k])
            if k + 1 < len(ids):
                old = self.edges[n].get(ids[k + 1])
                if old is None or r > old[0]:
                    self.edges[n][ids[k + 1]] = (r, d)
            else:
                self.terminal_edges[n] = max(r, self.terminal_edges.get(n, float("-inf")))
        return ids

    def propagate(self, sweeps: int = 50) -> Dict[int, float]:
        """Value propagation ``V(n) = max(terminal R, max_{n->n'} R + gamma^d V(n'))`` (``sweeps`` passes)."""
        V = {n: self.terminal_edges.get(n, 0.0) for n in self.nodes.values()}
        for _ in range(sweeps):
            changed = False
            for n in V:
                best = self.terminal_edges.get(n, float("-inf"))
                for m, (r, d) in self.edges.get(n, {}).items():
                    best = max(best, r + self.gamma ** d * V.get(m, 0.0))
                if best != float("-inf") and abs(best - V[n]) > 1e-9:
                    V[n], changed = best, True
            if not changed:
                break
        self.value = V
        return V


def memory_shaping(rewards: torch.Tensor, values: torch.Tensor, next_values: torch.Tensor, durations: torch.Tensor,
                   gamma: float, beta: float) -> torch.Tensor:
    """Potential-based shaping at decision points: ``r + beta (gamma^d V(n_next) - V(n))``.

    Args:
        rewards, values, next_values, durations: ``[K]`` per decision (V 0 after the episode's end).
    Returns:
        ``[K]`` shaped rewards (``beta = 0``: unchanged). Potential-based, so
        optimal policies are preserved (Ng et al. 1999).
    """
    return rewards + beta * (gamma ** durations.float() * next_values - values)


def chain_values(rewards: Sequence[float], gamma: float, durations: Optional[Sequence[int]] = None) -> List[float]:
    """Discounted return from every decision of a chain (reference for tests and docs)."""
    d = list(durations or [1] * len(rewards))
    out, acc = [0.0] * len(rewards), 0.0
    for k in range(len(rewards) - 1, -1, -1):
        acc = rewards[k] + gamma ** d[k] * acc  # acc is 0 after the last decision
        out[k] = acc
    return out
