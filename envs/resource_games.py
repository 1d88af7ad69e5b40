"""Quarry and Afforestation: batched grid resource games with delayed, coordination-dependent payoffs.

Off-beat test beds (``docs/offbeat.md``) next to :mod:`marl.envs.stag_hunter`.
Qiu et al. 2022 ("Off-Beat Multi-Agent Reinforcement Learning", arXiv
2205.13718) name a quarry game and an afforestation game but give no rules, so
**every rule below is our own design**, written "in the spirit of" the paper:
working actions (``mine``, ``plant``) that take several steps under the
off-beat wrapper, and team rewards that arrive later than the actions that
earn them and grow when agents work together. Usage::

    make_env("quarry", num_envs=64, seed=0)
    make_env("quarry", offbeat={"mine": 3})                 # mining takes 3 steps
    make_env("afforestation", offbeat={"plant": 3}, grow_steps=4)

Common rules (``B`` copies stepped as one: tensors only, no Python loop over
copies; one ``torch.Generator`` seeded with ``seed`` or the seed given to
``reset``, shared by all copies):

* a ``size x size`` grid (default 7), ``N`` agents in one group, placed
  uniformly at random at the start of an episode (agents may share a cell);
* actions (``action_names``): ``0 stay``, ``1 up`` (y+1), ``2 down`` (y-1),
  ``3 left`` (x-1), ``4 right`` (x+1), ``5`` the game's work action (``mine`` /
  ``plant``); moves are clipped at the walls; every action is always available
  (working where there is nothing to work on does nothing);
* order within a step: agents move, then the game's rules below resolve on the
  positions after the moves;
* kind ``cooperative``, ``shared_reward=True``: every agent receives the team
  reward of the step; episodes are cut after ``episode_limit`` steps (default
  50, ``truncated``; nothing terminates) and the copy restarts;
* observations are entity-free vectors ``[B, N, D]`` in ``[-1, 1]`` starting
  with the agent's own position ``(x, y) / (size-1)`` and the positions of the
  other agents relative to it ``(dx, dy) / (size-1)`` (in agent order), then the
  game's features; the global state ``[B, S]`` starts with every agent's
  absolute normalised position and ends with ``t / episode_limit``;
* ``step.info["episode_metrics"]`` holds the game's counts ``[B]`` (float) of
  the episode that ended at this step (read by :class:`~marl.env.EpisodeStats`
  for ended copies); the running counts of the episodes in progress are
  attributes of the env of the same names.

Quarry (``make_env("quarry")``, group ``"miner"``, ``miner_0`` ..):

* ``n_miners`` miners (default 3), a depot at ``depot`` (default the centre
  cell), ``n_stones`` small stones (default 2) and ``n_boulders`` boulders
  (default 1) at random cells other than the depot (deposits may share a cell);
* a miner carries at most one load (``carry`` > 0); a miner is *near* a deposit
  at Chebyshev distance <= 1 (same or one of the 8 neighbouring cells);
* after the moves, **delivery**: every miner on the depot with a load delivers
  it; the team reward of the step is the ore delivered (the delayed payoff:
  ore mined at step ``t`` pays at step ``t + 1`` at the earliest);
* then **mining** by the empty-handed miners executing ``mine`` (a miner that
  delivered this step is empty-handed; a loaded miner's ``mine`` does nothing);
  each such miner works on the first boulder near it, else the first stone:
  a **boulder** breaks when at least ``boulder_miners`` (default 2) miners work
  on it at the same step; each of them picks up a load of ``boulder_ore``
  (default 5). A **stone** yields one load of ``stone_ore`` (default 1) per
  step, to the lowest-index miner working on it (miners whose boulder did not
  break work on their first near stone instead). Mined deposits respawn at a
  random non-depot cell;
* observation ``[B, N, 2 + 2(N-1) + 1 + 2 + 2 n_stones + 2 n_boulders]``: own
  position, other miners (relative), own load ``carry / max(stone_ore,
  boulder_ore)``, then the depot, the stones and the boulders relative to the
  miner. State ``[B, 2N + N + 2 n_stones + 2 n_boulders + 1]``: miner positions,
  loads (normalised), stone and boulder positions, ``t / episode_limit``;
* metrics: ``ore_delivered`` (the episode's team return), ``stones_mined``,
  ``boulders_mined``.

Afforestation (``make_env("afforestation")``, group ``"planter"``):

* ``n_planters`` planters (default 2) on an empty grid; a cell holds nothing,
  a sapling or a tree; trees stay for the rest of the episode;
* after the moves, **growth**: every sapling ages by one step; a sapling
  planted at step ``t`` becomes a tree at step ``t + grow_steps`` (default 5)
  and pays the team ``tree_reward + neighbour_reward * k`` (defaults 1 and 1)
  at that step, ``k`` being the number of its 4 neighbouring cells holding a
  sapling or a tree then (so clustered planting pays up to 5 per tree, a lone
  tree 1); saplings still growing when the episode ends pay nothing;
* then **planting**: a planter executing ``plant`` on an empty cell puts a
  sapling there (several planters on one cell: one sapling); planting on a
  sapling or a tree does nothing;
* observation ``[B, N, 2 + 2(N-1) + 2 (2 view + 1)^2]``: own position, other
  planters (relative), then a ``(2 view + 1)^2`` window (default ``view=1``:
  3x3) centred on the planter, ``x``-major, in two channels: saplings
  (``(age + 1) / grow_steps``, 0 where none) then trees (1 / 0); cells off the
  grid read -1 in both. State ``[B, 2N + 2 size^2 + 1]``: planter positions, the
  sapling and tree channels of the whole grid (``x``-major), ``t / episode_limit``;
* metrics: ``trees_grown``, ``saplings_planted``.

Errors: :class:`~marl.env.MarlError` naming the bad value for a scenario other
than ``"default"``, non-int or too small counts / sizes, ``boulder_miners >
n_miners``, negative rewards, a depot off the grid, unknown kwargs (via
``make_env``), bad actions, and ``step`` before ``reset``.
"""

from __future__ import annotations

import inspect
from typing import Any, Dict, List, Optional, Tuple

import gymnasium as gym
import numpy as np
import torch
import torch.nn.functional as F

from marl.env import EnvInfo, GroupInfo, MarlError, MultiAgentEnv, Observation, Step
from marl.envs.common import check_kwargs
from marl.envs.grid import (
    MOVE_ACTIONS,
    MOVES,
    WORK,
    check_ints,
    first_near,
    grid_state,
    load_grid_state,
    other_index,
    relative_others,
    scenarios,
    team_observation,
    team_step,
)

__all__ = [
    "Quarry",
    "Afforestation",
    "QUARRY_ACTIONS",
    "AFFORESTATION_ACTIONS",
    "WORK",
    "scenarios",
    "make_quarry",
    "make_afforestation",
]

QUARRY_ACTIONS = MOVE_ACTIONS + ["mine"]  # MOVES row 5 (the work action) does not move
AFFORESTATION_ACTIONS = MOVE_ACTIONS + ["plant"]


def _check_rewards(*specs) -> None:
    for name, v in specs:
        if isinstance(v, bool) or not isinstance(v, (int, float, np.integer, np.floating)) or v < 0:
            raise MarlError(f"{name} must be a number >= 0, got {v!r}.")


class _GridResourceGame(MultiAgentEnv):
    """Shared mechanics of the resource games: agents on a grid, moves, episode clock, metrics, steps.

    Subclasses set :attr:`family`, :attr:`group`, :attr:`metrics`, :attr:`action_names`, call
    :meth:`_setup` then :meth:`_set_info`, and implement :meth:`_resolve` (the rules after the moves),
    :meth:`_respawn_world` and :meth:`_world_features`.
    """

    family: str = ""
    group: str = ""
    metrics: Tuple[str, ...] = ()
    world_fields: Tuple[str, ...] = ()  # the game's own state tensors (saved by get_state)
    action_names: Dict[str, List[str]] = {}

    def _setup(self, scenario, num_envs, size, n_agents: Tuple[str, int], episode_limit, seed, device) -> None:
        if scenario not in (None, "default"):
            raise MarlError(f"{self.family} has one scenario, 'default' (set the game with kwargs), got '{scenario}'.")
        check_ints(("num_envs", num_envs, 1), ("size", size, 2), (*n_agents, 1), ("episode_limit", episode_limit, 1))
        self.device = torch.device(device)
        self.size, self.N, self._B, self._limit = int(size), int(n_agents[1]), int(num_envs), int(episode_limit)
        self._gen = torch.Generator(device=self.device)
        self._gen.manual_seed(0 if seed is None else int(seed))
        self._moves = MOVES.to(self.device)
        self._others = other_index(self.N, self.device)
        self.pos = self._zeros(self.N, 2, dtype=torch.long)
        self.t = self._zeros(dtype=torch.long)
        for m in self.metrics:
            setattr(self, m, self._zeros())
        self._started = False

    def _set_info(self, extra_obs: int, extra_state: int) -> None:
        N = self.N
        agents = [f"{self.group}_{i}" for i in range(N)]
        obs_dim = 2 * N + extra_obs
        space = gym.spaces.Box(-1.0, 1.0, (obs_dim,), np.float32)
        group = GroupInfo(self.group, agents, space, gym.spaces.Discrete(len(self.action_names[self.group])))
        self.state_dim = 2 * N + extra_state + 1
        self.info = EnvInfo(
            family=self.family,
            scenario="default",
            agents=agents,
            groups={self.group: group},
            state_dim=self.state_dim,
            episode_limit=self._limit,
            kind="cooperative",
            shared_reward=True,
            num_envs=self._B,
        )

    # ------------------------------------------------------------------ API

    def reset(self, seed: Optional[int] = None) -> Step:
        """Reset every copy; ``seed`` (if given) reseeds the shared generator."""
        if seed is not None:
            self._gen.manual_seed(int(seed))
        self._respawn(torch.ones(self._B, dtype=torch.bool, device=self.device))
        self._started = True
        return self.observe()

    def step_env(self, actions: Dict[str, torch.Tensor]) -> Step:
        """Move, apply the game's rules (see the module docstring); ended rows keep their last observation.

        Args:
            actions: ``{group: [B, N] int}`` with values in ``0..5`` (checked by :meth:`step`).
        """
        if not self._started:
            raise MarlError("Call reset() before step().")
        a = actions[self.group].to(self.device)
        self.pos = (self.pos + self._moves[a]).clamp(0, self.size - 1)
        reward = self._resolve(a)
        self.t += 1
        truncated = self.t >= self._limit
        obs, state = self._observe()
        return team_step(
            self.group,
            len(self.action_names[self.group]),
            obs,
            state,
            reward,
            torch.zeros_like(truncated),
            truncated,
            self._metrics(),
        )

    def reset_rows(self, rows: torch.Tensor) -> Observation:
        """Restart the copies in ``rows`` (``[B]`` bool): new positions, empty world, clock and counts at 0."""
        self._respawn(rows.to(self.device))
        obs, state = self._observe()
        return team_observation(self.group, len(self.action_names[self.group]), obs, state)

    def get_state(self) -> Dict[str, Any]:
        """Positions, clocks, metrics, the game's world tensors and the generator state (exact resume)."""
        return grid_state(self, self._state_names())

    def set_state(self, state: Dict[str, Any]) -> None:
        """Restore a :meth:`get_state` dict."""
        load_grid_state(self, self._state_names(), state)

    def _state_names(self) -> Tuple[str, ...]:
        return ("pos", "t", "_started", *self.metrics, *self.world_fields)

    def observe(self) -> Step:
        """The current observation as a :class:`Step` with zero reward (after ``set_positions``)."""
        obs, state = self._observe()
        no = torch.zeros(self._B, dtype=torch.bool, device=self.device)
        return team_step(
            self.group,
            len(self.action_names[self.group]),
            obs,
            state,
            torch.zeros(self._B, device=self.device),
            no,
            no,
            self._metrics(),
        )

    # ------------------------------------------------------------------ internals

    def _zeros(self, *shape, dtype=torch.float32) -> torch.Tensor:
        return torch.zeros(self._B, *shape, dtype=dtype, device=self.device)

    def _put(self, cur: torch.Tensor, v) -> torch.Tensor:
        return torch.as_tensor(v, dtype=cur.dtype, device=self.device).expand_as(cur).clone()

    def _cells(self, *shape) -> torch.Tensor:
        return torch.randint(0, self.size, (*shape, 2), generator=self._gen, device=self.device)

    def _metrics(self) -> Dict[str, torch.Tensor]:
        return {m: getattr(self, m).clone() for m in self.metrics}

    def _respawn(self, rows: torch.Tensor) -> None:
        self.pos = torch.where(rows[:, None, None], self._cells(self._B, self.N), self.pos)
        self.t = torch.where(rows, 0, self.t)
        for m in self.metrics:
            setattr(self, m, torch.where(rows, 0.0, getattr(self, m)))
        self._respawn_world(rows)

    def _observe(self):
        B, N = self._B, self.N
        n = float(self.size - 1)
        rel = relative_others(self.pos, self._others).reshape(B, N, -1).float() / n
        world_obs, world_state = self._world_features()
        obs = torch.cat([self.pos.float() / n, rel, world_obs], -1)
        state = torch.cat(
            [self.pos.reshape(B, -1).float() / n, world_state, (self.t.float() / self._limit)[:, None]], -1
        )
        return obs, state

    def _resolve(self, a: torch.Tensor) -> torch.Tensor:
        """Apply the rules after the moves (``a`` ``[B, N]``), update the metrics; return the team reward ``[B]``."""
        raise NotImplementedError

    def _respawn_world(self, rows: torch.Tensor) -> None:
        raise NotImplementedError

    def _world_features(self) -> Tuple[torch.Tensor, torch.Tensor]:
        """The game's observation features ``[B, N, k]`` and state features ``[B, m]``."""
        raise NotImplementedError


class Quarry(_GridResourceGame):
    """Batched quarry (rules in the module docstring): stones for one miner, boulders for two, pay on delivery.

    Args:
        scenario: ``None`` or ``"default"`` (the game is set by the kwargs).
        num_envs: ``B`` (default 32).
        size: grid side (>= 2, default 7).
        n_miners: miners (>= 1, default 3).
        n_stones, n_boulders: deposits (>= 0; defaults 2 and 1).
        boulder_miners: miners needed to break a boulder (default 2, <= n_miners).
        stone_ore, boulder_ore: ore in one load, paid to the team on delivery (1, 5).
        depot: ``(x, y)`` of the depot (default the centre cell).
        episode_limit: steps per episode (default 50).
        seed: seed of the generator (``reset(seed)`` reseeds).
        device: torch device.

    Attributes:
        action_names: ``{"miner": QUARRY_ACTIONS}``; read by the off-beat wrapper (``{"mine": 3}``).
        miners / carry / stones / boulders: ``[B, N, 2]`` / ``[B, N]`` / ``[B, n_stones, 2]`` /
            ``[B, n_boulders, 2]``; ``ore_delivered``, ``stones_mined``, ``boulders_mined``: ``[B]``
            counts of the episodes in progress.
    """

    family, group = "quarry", "miner"
    metrics = ("ore_delivered", "stones_mined", "boulders_mined")
    world_fields = ("carry", "stones", "boulders")
    action_names = {"miner": list(QUARRY_ACTIONS)}

    def __init__(
        self,
        scenario: Optional[str] = None,
        num_envs: int = 32,
        size: int = 7,
        n_miners: int = 3,
        n_stones: int = 2,
        n_boulders: int = 1,
        boulder_miners: int = 2,
        stone_ore: float = 1.0,
        boulder_ore: float = 5.0,
        depot: Optional[Tuple[int, int]] = None,
        episode_limit: int = 50,
        seed: Optional[int] = 0,
        device: str = "cpu",
    ):
        self._setup(scenario, num_envs, size, ("n_miners", n_miners), episode_limit, seed, device)
        check_ints(("n_stones", n_stones, 0), ("n_boulders", n_boulders, 0), ("boulder_miners", boulder_miners, 1))
        if boulder_miners > n_miners:
            raise MarlError(f"boulder_miners ({boulder_miners}) cannot exceed n_miners ({n_miners}).")
        _check_rewards(("stone_ore", stone_ore), ("boulder_ore", boulder_ore))
        S = self.size
        depot = (S // 2, S // 2) if depot is None else depot
        ok = (
            isinstance(depot, (tuple, list))
            and len(depot) == 2
            and all(isinstance(v, (int, np.integer)) and not isinstance(v, bool) and 0 <= v < S for v in depot)
        )
        if not ok:
            raise MarlError(f"depot must be a cell (x, y) with 0 <= x, y < size ({S}), got {depot!r}.")
        self.depot = torch.tensor([int(depot[0]), int(depot[1])], device=self.device)
        self._depot_index = int(depot[0]) * S + int(depot[1])
        self.Ks, self.Kb, self.boulder_miners = int(n_stones), int(n_boulders), int(boulder_miners)
        self.stone_ore, self.boulder_ore = float(stone_ore), float(boulder_ore)
        self._load_scale = max(self.stone_ore, self.boulder_ore) or 1.0
        N = self.N
        self._set_info(extra_obs=1 + 2 + 2 * self.Ks + 2 * self.Kb, extra_state=N + 2 * self.Ks + 2 * self.Kb)
        self.carry = self._zeros(N)
        self.stones = self._zeros(self.Ks, 2, dtype=torch.long)
        self.boulders = self._zeros(self.Kb, 2, dtype=torch.long)

    @property
    def miners(self) -> torch.Tensor:
        return self.pos

    def set_positions(self, miners=None, stones=None, boulders=None, carry=None) -> None:
        """Place entities by hand (tests, demos): ``[B, N, 2]`` / ``[B, n_stones, 2]`` /
        ``[B, n_boulders, 2]`` or broadcastable ``(x, y)``; ``carry`` ``[B, N]`` loads (broadcastable)."""
        if miners is not None:
            self.pos = self._put(self.pos, miners)
        if stones is not None:
            self.stones = self._put(self.stones, stones)
        if boulders is not None:
            self.boulders = self._put(self.boulders, boulders)
        if carry is not None:
            self.carry = self._put(self.carry, carry)

    def _deposit_cells(self, K: int) -> torch.Tensor:
        """``[B, K, 2]`` uniform random cells other than the depot."""
        S = self.size
        idx = torch.randint(0, S * S - 1, (self._B, K), generator=self._gen, device=self.device)
        idx = idx + (idx >= self._depot_index).long()
        return torch.stack([idx // S, idx % S], -1)

    def _resolve(self, a: torch.Tensor) -> torch.Tensor:
        deliver = (self.pos == self.depot).all(-1) & (self.carry > 0)  # [B, N]
        reward = (self.carry * deliver).sum(-1)
        self.carry = torch.where(deliver, 0.0, self.carry)
        self.ore_delivered += reward
        mining = (a == WORK) & (self.carry == 0)
        used = torch.zeros_like(mining)
        if self.Kb:
            on_b = first_near(self.pos, self.boulders) & mining[..., None]  # [B, N, Kb]
            hit = on_b.sum(1) >= self.boulder_miners  # [B, Kb]
            used = (on_b & hit[:, None]).any(-1)
            self.carry = torch.where(used, self.boulder_ore, self.carry)
            self.boulders_mined += hit.sum(-1)
            self.boulders = torch.where(hit[..., None], self._deposit_cells(self.Kb), self.boulders)
        if self.Ks:
            on_s = first_near(self.pos, self.stones) & (mining & ~used)[..., None]  # [B, N, Ks]
            win = on_s & (on_s.long().cumsum(1) == 1)  # the lowest-index miner on each stone
            hit = win.any(1)  # [B, Ks]
            self.carry = torch.where(win.any(-1), self.stone_ore, self.carry)
            self.stones_mined += hit.sum(-1)
            self.stones = torch.where(hit[..., None], self._deposit_cells(self.Ks), self.stones)
        return reward

    def _respawn_world(self, rows: torch.Tensor) -> None:
        self.carry = torch.where(rows[:, None], 0.0, self.carry)
        self.stones = torch.where(rows[:, None, None], self._deposit_cells(self.Ks), self.stones)
        self.boulders = torch.where(rows[:, None, None], self._deposit_cells(self.Kb), self.boulders)

    def _world_features(self):
        B, N = self._B, self.N
        n = float(self.size - 1)
        things = torch.cat([self.depot.expand(B, 1, 2), self.stones, self.boulders], 1)  # [B, 1+Ks+Kb, 2]
        rel = (things[:, None] - self.pos[:, :, None]).reshape(B, N, -1).float() / n
        load = self.carry / self._load_scale
        obs = torch.cat([load[..., None], rel], -1)
        state = torch.cat([load, self.stones.reshape(B, -1).float() / n, self.boulders.reshape(B, -1).float() / n], -1)
        return obs, state


class Afforestation(_GridResourceGame):
    """Batched afforestation (rules in the module docstring): saplings pay when they mature, more in clusters.

    Args:
        scenario: ``None`` or ``"default"`` (the game is set by the kwargs).
        num_envs: ``B`` (default 32).
        size: grid side (>= 2, default 7).
        n_planters: planters (>= 1, default 2).
        grow_steps: steps from planting to the tree and its reward (>= 1, default 5).
        tree_reward: reward of a maturing tree (default 1).
        neighbour_reward: extra reward per sapling / tree on its 4 neighbouring cells (default 1).
        view: radius of the observed window (>= 0, default 1: 3x3).
        episode_limit: steps per episode (default 50).
        seed: seed of the generator (``reset(seed)`` reseeds).
        device: torch device.

    Attributes:
        action_names: ``{"planter": AFFORESTATION_ACTIONS}``; read by the off-beat wrapper (``{"plant": 3}``).
        planters / sapling / age / tree: ``[B, N, 2]`` / ``[B, size, size]`` bool / long (steps since
            planting) / bool, indexed ``[b, x, y]``; ``trees_grown``, ``saplings_planted``: ``[B]``
            counts of the episodes in progress.
    """

    family, group = "afforestation", "planter"
    metrics = ("trees_grown", "saplings_planted")
    world_fields = ("sapling", "tree", "age")
    action_names = {"planter": list(AFFORESTATION_ACTIONS)}

    def __init__(
        self,
        scenario: Optional[str] = None,
        num_envs: int = 32,
        size: int = 7,
        n_planters: int = 2,
        grow_steps: int = 5,
        tree_reward: float = 1.0,
        neighbour_reward: float = 1.0,
        view: int = 1,
        episode_limit: int = 50,
        seed: Optional[int] = 0,
        device: str = "cpu",
    ):
        self._setup(scenario, num_envs, size, ("n_planters", n_planters), episode_limit, seed, device)
        check_ints(("grow_steps", grow_steps, 1), ("view", view, 0))
        _check_rewards(("tree_reward", tree_reward), ("neighbour_reward", neighbour_reward))
        self.grow_steps, self.view = int(grow_steps), int(view)
        self.tree_reward, self.neighbour_reward = float(tree_reward), float(neighbour_reward)
        S, R = self.size, self.view
        r = torch.arange(-R, R + 1, device=self.device)
        self._window = torch.stack(torch.meshgrid(r, r, indexing="ij"), -1).reshape(-1, 2)  # [K, 2], x-major
        self._set_info(extra_obs=2 * len(self._window), extra_state=2 * S * S)
        self.sapling = self._zeros(S, S, dtype=torch.bool)
        self.tree = self._zeros(S, S, dtype=torch.bool)
        self.age = self._zeros(S, S, dtype=torch.long)

    @property
    def planters(self) -> torch.Tensor:
        return self.pos

    def set_positions(self, planters=None, saplings=None, trees=None, sapling_age: int = 0) -> None:
        """Place things by hand (tests, demos), the same in every copy where cells are given.

        Args:
            planters: ``[B, N, 2]`` or broadcastable ``(x, y)``.
            saplings, trees: lists of cells ``(x, y)`` replacing all saplings / trees (a tree
                wins over a sapling on the same cell); saplings get age ``sapling_age``.
        """
        if planters is not None:
            self.pos = self._put(self.pos, planters)
        if trees is not None:
            self.tree = self._grid_of(trees)
        if saplings is not None:
            self.sapling = self._grid_of(saplings)
            self.age = torch.where(self.sapling, int(sapling_age), 0)
        self.sapling &= ~self.tree

    def _grid_of(self, cells) -> torch.Tensor:
        grid = self._zeros(self.size, self.size, dtype=torch.bool)
        for x, y in cells:
            grid[:, x, y] = True
        return grid

    def _resolve(self, a: torch.Tensor) -> torch.Tensor:
        B, S = self._B, self.size
        self.age = self.age + self.sapling.long()
        mature = self.sapling & (self.age >= self.grow_steps)
        self.tree = self.tree | mature
        self.sapling = self.sapling & ~mature
        self.age = torch.where(mature, 0, self.age)
        occupied = self.tree | self.sapling
        p = F.pad(occupied.float(), (1, 1, 1, 1))
        neighbours = p[:, 2:, 1:-1] + p[:, :-2, 1:-1] + p[:, 1:-1, 2:] + p[:, 1:-1, :-2]  # [B, S, S]
        reward = (mature.float() * (self.tree_reward + self.neighbour_reward * neighbours)).sum((1, 2))
        self.trees_grown += mature.sum((1, 2))
        cell = self.pos[..., 0] * S + self.pos[..., 1]  # [B, N]
        want = (a == WORK) & ~occupied.reshape(B, -1).gather(1, cell)
        new = self._zeros(S * S).scatter_add_(1, cell, want.float()).reshape(B, S, S) > 0
        self.sapling = self.sapling | new
        self.saplings_planted += new.sum((1, 2))
        return reward

    def _respawn_world(self, rows: torch.Tensor) -> None:
        r = rows[:, None, None]
        self.sapling = self.sapling & ~r
        self.tree = self.tree & ~r
        self.age = torch.where(r, 0, self.age)

    def _world_features(self):
        B, N, S, R = self._B, self.N, self.size, self.view
        sap = torch.where(self.sapling, (self.age + 1).float() / self.grow_steps, 0.0)
        tree = self.tree.float()
        P = S + 2 * R
        c = self.pos[:, :, None] + self._window + R  # [B, N, K, 2] in the padded grid
        idx = (c[..., 0] * P + c[..., 1]).reshape(B, -1)
        views = [
            F.pad(g, (R, R, R, R), value=-1.0).reshape(B, -1).gather(1, idx).reshape(B, N, -1) for g in (sap, tree)
        ]
        return torch.cat(views, -1), torch.cat([sap.reshape(B, -1), tree.reshape(B, -1)], -1)


def _factory(cls):
    valid = [p for p in inspect.signature(cls.__init__).parameters if p not in ("self", "scenario")]

    def make(scenario: Optional[str] = None, **kwargs):
        check_kwargs(f"the {cls.family} family", kwargs, valid)
        return cls(scenario, **kwargs)

    make.__doc__ = f"Registry factory of the ``{cls.family!r}`` family; see :class:`{cls.__name__}`."
    return make


make_quarry = _factory(Quarry)
make_afforestation = _factory(Afforestation)
