"""LeGEM-style episodic memory for off-beat actions (reconstructed).

Off-beat MARL (Qiu et al. 2022, arXiv 2205.13718) redistributes delayed rewards
with a graph-based episodic memory built from agents' individual experiences.
The paper was available at abstract level only, so its exact graph and formula
are not known; this module implements our reconstruction (``docs/offbeat.md``,
"Reward redistribution"), and says so wherever it is used:

* :class:`EpisodicMemoryGraph` — one agent's memory: nodes are keys of
  observations at decision points (fixed random projection, rounded, plus the
  decision step), edges go from one decision to the agent's next one with the
  reward collected in between and the duration; node values by value
  propagation ``V(n) = max_{n -> n'} [R + gamma^d V(n')]``, ``V = 0`` at
  episode ends;
* :func:`memory_shaping` — potential-based shaping with the memory values,
  ``r_hat = r + beta (gamma^d V(n_next) - V(n))`` at decision steps, and
  :class:`LegemMemory`, the team's graphs with the same shaping spread over
  the steps of each action.

The causal shift and the batch transforms that apply both to training data
(``reward_redistribution="causal_shift"`` / ``"legem"``) are in
:mod:`marl.algos.redistribution`; ``docs/offbeat.md`` has the choices we made
and the measurements.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Dict, List, Optional, Sequence, Tuple

import torch


class EpisodicMemoryGraph:
    """One agent's episodic memory graph with value propagation (reconstruction, see the module docstring).

    Nodes are keys of observations at decision points: ``round(o P / resolution)``
    with a fixed random Gaussian projection ``P`` ``[obs_dim, key_dim]`` (as in
    EMDQN / ERLAM); observations with equal keys share a node. An edge
    ``n -> n'`` joins a decision to the agent's next one and keeps the best
    ``(R, d)`` seen: ``R`` the reward collected in between (discounted inside the
    interval), ``d`` the steps between them. A decision followed by the episode's
    end keeps its best reward-to-go as a *terminal* value.

    Args:
        obs_dim: observation size; key_dim: size of the projection (default 8);
        gamma: discount per step; resolution: rounding step of the keys;
        max_nodes: FIFO cap on the number of nodes (the oldest is evicted with
            its outgoing edges); seed: of the projection.
    """

    def __init__(
        self,
        obs_dim: int,
        key_dim: int = 8,
        gamma: float = 0.99,
        resolution: float = 0.1,
        max_nodes: int = 100_000,
        seed: int = 0,
    ):
        g = torch.Generator().manual_seed(seed)
        self.proj = torch.randn(obs_dim, key_dim, generator=g) / key_dim**0.5
        self.gamma, self.resolution, self.max_nodes = float(gamma), float(resolution), int(max_nodes)
        self.nodes: Dict[bytes, int] = {}  # key -> id, in insertion order (FIFO eviction)
        self.edges: Dict[int, Dict[int, Tuple[float, int]]] = defaultdict(dict)  # n -> n' -> (R, d)
        self.terminal: Dict[int, float] = {}  # n -> best reward-to-go when the episode ended after n
        self.values = torch.zeros(0)  # V by node id (after :meth:`propagate`)
        self._valued = torch.zeros(0, dtype=torch.bool)  # ids with a value (not evicted)
        self.node_step: Dict[int, int] = {}  # node id -> decision step (keys with steps)
        # value of an observation the memory has not valued: mean V of the valued nodes at
        # the same step (else over all). A default of 0 would make every new state look far
        # worse than familiar ones and the shaping would punish exploration.
        self.step_baseline: Dict[int, float] = {}
        self.baseline = 0.0
        self._next_id = 0

    def keys(self, obs: torch.Tensor, steps: Optional[torch.Tensor] = None) -> List[bytes]:
        """Node keys of observations ``[K, obs_dim]`` (one per row); with ``steps`` ``[K]``
        (the decision's step in the episode) the step is part of the key."""
        k = torch.round(obs.float() @ self.proj / self.resolution).to(torch.int32)
        if steps is not None:
            k = torch.cat([k, steps.to(torch.int32).reshape(-1, 1)], 1)
        return [row.tobytes() for row in k.numpy()]

    def key(self, obs: torch.Tensor) -> bytes:
        """The node key of one observation ``[obs_dim]``."""
        return self.keys(obs.reshape(1, -1))[0]

    def node(self, obs: torch.Tensor) -> int:
        """The node id of one observation ``[obs_dim]`` (created if new)."""
        return self._node(self.key(obs))

    def _node(self, k: bytes) -> int:
        if k not in self.nodes:
            if len(self.nodes) >= self.max_nodes:  # FIFO eviction of the oldest node
                old = self.nodes.pop(next(iter(self.nodes)))
                self.edges.pop(old, None)
                self.terminal.pop(old, None)
                self.node_step.pop(old, None)
            self.nodes[k] = self._next_id
            self._next_id += 1
        return self.nodes[k]

    def lookup(self, obs: torch.Tensor, steps: Optional[torch.Tensor] = None) -> torch.Tensor:
        """Memory values ``[K]`` of observations ``[K, obs_dim]``; keys the memory has not valued
        yet get the mean value of the valued nodes at the same step (:attr:`step_baseline`),
        or over all nodes (:attr:`baseline`)."""
        ids = torch.tensor([self.nodes.get(k, -1) for k in self.keys(obs, steps)], dtype=torch.long)
        known = (ids >= 0) & (ids < self.values.shape[0])
        known[known.clone()] = self._valued[ids[known]]
        st = steps.tolist() if steps is not None else [None] * len(ids)
        out = torch.tensor([self.step_baseline.get(s, self.baseline) for s in st], dtype=torch.float32)
        out[known] = self.values[ids[known]]
        return out

    def add_episode(
        self,
        obs: Sequence[torch.Tensor],
        rewards: Sequence[float],
        durations: Sequence[int],
        steps: Optional[torch.Tensor] = None,
    ) -> List[int]:
        """Add one agent's decisions of one episode.

        Args:
            obs: observations at the ``K`` decision points (a ``[K, obs_dim]`` tensor or a list).
            steps: optional ``[K]`` decision steps, made part of the node keys (see
                :class:`LegemMemory`: an acyclic graph keeps values bounded).
            rewards: reward collected from decision ``k`` until decision ``k+1``
                (or the episode's end), already discounted inside the interval.
            durations: steps from decision ``k`` to ``k+1`` (or to the end).
        Returns:
            The node ids of the decisions.
        """
        o = obs if isinstance(obs, torch.Tensor) else torch.stack(list(obs))
        ids = [self._node(k) for k in self.keys(o.reshape(len(o), -1), steps)]
        if steps is not None:
            self.node_step.update(zip(ids, steps.tolist()))
        for k, n in enumerate(ids):
            r, d = float(rewards[k]), int(durations[k])
            if k + 1 < len(ids):
                old = self.edges[n].get(ids[k + 1])
                if old is None or r > old[0]:
                    self.edges[n][ids[k + 1]] = (r, d)
            else:
                self.terminal[n] = max(r, self.terminal.get(n, float("-inf")))
        return ids

    def propagate(self, sweeps: int = 50) -> torch.Tensor:
        """Value propagation ``V(n) = max(terminal R, max_{n->n'} R + gamma^d V(n'))``.

        Runs up to ``sweeps`` synchronous sweeps over all edges (tensor ops), starting
        from the terminal values, and stops early at a fixed point.

        Returns:
            ``[num_ids]`` values by node id (also kept in :attr:`values`); evicted
            ids and nodes without any remembered continuation hold 0.
        """
        n = self._next_id
        src, dst, R, D = [], [], [], []
        for a, out in self.edges.items():
            for b, (r, d) in out.items():
                src.append(a), dst.append(b), R.append(r), D.append(d)
        src_t, dst_t = torch.tensor(src, dtype=torch.long), torch.tensor(dst, dtype=torch.long)
        R_t, disc = torch.tensor(R), self.gamma ** torch.tensor(D, dtype=torch.float64)
        base = torch.full((n,), float("-inf"), dtype=torch.float64)
        if self.terminal:
            base[torch.tensor(list(self.terminal))] = torch.tensor(list(self.terminal.values()), dtype=torch.float64)
        has_value = torch.zeros(n, dtype=torch.bool)
        has_value[src_t] = True
        has_value[base > float("-inf")] = True
        V = torch.where(base > float("-inf"), base, torch.zeros_like(base))
        for _ in range(sweeps):
            cand = base.clone().scatter_reduce(0, src_t, R_t.double() + disc * V[dst_t], reduce="amax")
            new = torch.where(has_value, cand, torch.zeros_like(cand))
            if torch.allclose(new, V, rtol=0.0, atol=1e-9):
                V = new
                break
            V = new
        self.values = V.float()
        self._valued = has_value
        self._update_baselines()
        return self.values

    def _update_baselines(self) -> None:
        """Mean value of the valued nodes, per decision step and over all (tensor ops)."""
        valued = self._valued.nonzero().flatten()
        self.baseline = float(self.values[valued].mean()) if len(valued) else 0.0
        if not self.node_step or not len(valued):
            self.step_baseline = {}
            return
        ids = torch.tensor(list(self.node_step), dtype=torch.long)
        steps = torch.tensor(list(self.node_step.values()), dtype=torch.long)
        keep = ids < len(self._valued)
        ids, steps = ids[keep], steps[keep]
        keep = self._valued[ids]
        ids, steps = ids[keep], steps[keep]
        uniq, inv = steps.unique(return_inverse=True)
        sums = torch.zeros(len(uniq)).index_add_(0, inv, self.values[ids])
        counts = torch.zeros(len(uniq)).index_add_(0, inv, torch.ones(len(ids)))
        self.step_baseline = dict(zip(uniq.tolist(), (sums / counts).tolist()))


def memory_shaping(
    rewards: torch.Tensor,
    values: torch.Tensor,
    next_values: torch.Tensor,
    durations: torch.Tensor,
    gamma: float,
    beta: float,
) -> torch.Tensor:
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


def decision_intervals(decisions: torch.Tensor) -> List[List[Tuple[int, int]]]:
    """Per agent, the ``(start, end_exclusive)`` step interval of each action of one episode.

    Args:
        decisions: ``[L, n]`` bool decision mask (step 0 always counts as a decision).
    """
    L, n = decisions.shape
    out = []
    for i in range(n):
        starts = sorted({0} | {int(t) for t in torch.nonzero(decisions[:, i]).flatten()})
        out.append(list(zip(starts, starts[1:] + [L])))
    return out


def interval_returns(team: torch.Tensor, intervals: Sequence[Tuple[int, int]], gamma: float) -> List[float]:
    """Reward collected in each interval ``[s, e)`` of ``team`` ``[L]``, discounted from ``s``."""
    out = []
    for s, e in intervals:
        disc = gamma ** torch.arange(e - s, dtype=torch.float64)
        out.append(float((team[s:e].double() * disc).sum()))
    return out


class LegemMemory:
    """A team's per-agent episodic memory graphs and the potential-based shaping built on them.

    LeGEM-style (our reconstruction, ``docs/offbeat.md``): agent ``i``'s graph is built from
    its own decision points; node values come from value propagation
    (:meth:`EpisodicMemoryGraph.propagate`), refreshed every ``refresh_episodes``
    added episodes. The agent's potential at step ``t`` is the memory value of
    its most recent decision node, ``Phi_i(t) = V_i(n_i(tau_i(t)))``, and the
    shaping term is ``F_i(t) = beta (gamma Phi_i(t+1) - Phi_i(t))``; summed with
    discounting over one action of duration ``d`` it equals the decision-step form
    ``beta (gamma^d V(n') - V(n))`` of :func:`memory_shaping`. ``Phi = 0`` after a
    terminal step; at a truncated episode end the last potential is kept, so no
    spurious penalty is added. Potential-based, so optimal policies are
    preserved (Ng et al. 1999); ``beta = 0`` leaves rewards unchanged.

    Args:
        n_agents: agents ``n`` of the team; obs_dim: their observation size.
        gamma: discount per step. beta: shaping weight (default 0.1; 1 hurt QMIX on the
            off-beat stag hunt, ``docs/offbeat.md``).
        key_dim, resolution, max_nodes, seed: of each :class:`EpisodicMemoryGraph`
            (agent ``i``'s projection uses ``seed + i``).
        refresh_episodes: value propagation after this many added episodes.
        time_key: make the decision's step part of the node key (default True).
            Observations that round alike merge into one node, which can close
            cycles; max-propagation around a cycle with positive reward climbs
            towards ``r / (1 - gamma^d)``, far above any real return. Keyed by
            step, every edge goes forward in time, the graph is acyclic and a
            node's value is the best return-to-go of the remembered (stitched)
            paths from it.
    """

    def __init__(
        self,
        n_agents: int,
        obs_dim: int,
        gamma: float = 0.99,
        beta: float = 0.1,
        key_dim: int = 4,
        resolution: float = 0.5,
        refresh_episodes: int = 20,
        max_nodes: int = 100_000,
        seed: int = 0,
        time_key: bool = True,
    ):
        self.n, self.gamma, self.beta, self.time_key = int(n_agents), float(gamma), float(beta), bool(time_key)
        self.refresh_episodes = max(1, int(refresh_episodes))
        self.graphs = [
            EpisodicMemoryGraph(obs_dim, key_dim, gamma, resolution, max_nodes, seed + i) for i in range(self.n)
        ]
        self.episodes = 0
        self._since_refresh = 0

    def add_episode(self, obs: torch.Tensor, team: torch.Tensor, decisions: torch.Tensor) -> None:
        """Add one episode: ``obs`` ``[L, n, D]`` (at steps ``0..L-1``), team reward ``[L]``
        (after any causal shift), decision mask ``[L, n]``."""
        for i, iv in enumerate(decision_intervals(decisions)):
            starts = torch.tensor([s for s, _ in iv])
            self.graphs[i].add_episode(
                obs[starts, i],
                interval_returns(team, iv, self.gamma),
                [e - s for s, e in iv],
                starts if self.time_key else None,
            )
        self.episodes += 1
        self._since_refresh += 1
        if self._since_refresh >= self.refresh_episodes:
            self.refresh()

    def refresh(self) -> None:
        """Value propagation on every agent's graph."""
        for g in self.graphs:
            g.propagate()
        self._since_refresh = 0

    def potentials(self, obs: torch.Tensor, decisions: torch.Tensor) -> torch.Tensor:
        """``Phi`` ``[L, n]``: memory value of each agent's latest decision node at every step."""
        L = obs.shape[0]
        out = torch.zeros(L, self.n)
        for i, iv in enumerate(decision_intervals(decisions)):
            starts = torch.tensor([s for s, _ in iv])
            vals = self.graphs[i].lookup(obs[starts, i], starts if self.time_key else None)
            for (s, e), v in zip(iv, vals):
                out[s:e, i] = v
        return out

    def shaping(self, obs: torch.Tensor, decisions: torch.Tensor, terminated: bool) -> torch.Tensor:
        """Shaping terms ``F`` ``[L, n]`` of one episode (see the class docstring)."""
        phi = self.potentials(obs, decisions)
        last = torch.zeros(1, self.n) if terminated else phi[-1:]
        nxt = torch.cat([phi[1:], last])
        return self.beta * (self.gamma * nxt - phi)

    def state_dict(self) -> Dict[str, object]:
        return {
            "graphs": [g.__dict__ for g in self.graphs],
            "episodes": self.episodes,
            "since_refresh": self._since_refresh,
        }

    def load_state_dict(self, state: Dict[str, object]) -> None:
        for g, d in zip(self.graphs, state["graphs"]):
            g.__dict__.update(d)
        self.episodes, self._since_refresh = int(state["episodes"]), int(state["since_refresh"])
