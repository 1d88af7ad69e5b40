"""Stag-Hunter: a batched grid hunt where the big prize needs two hunters at once.

A test bed for off-beat actions (``docs/offbeat.md``; Qiu et al. 2022,
arXiv 2205.13718, name the game but give no rules, so every rule below is our
own design). Usage::

    make_env("stag_hunter", num_envs=64, seed=0)
    make_env("stag_hunter", offbeat={"catch": 3})        # catch takes 3 steps
    make_env("stag_hunter", size=5, n_hares=1, stag_move_prob=0.0)

Rules (``B`` copies, all tensors, no Python loop over copies):

* a ``size x size`` grid (default 7) with ``n_hunters`` hunters (default 2), one
  stag and ``n_hares`` hares (default 2), all placed uniformly at random at the
  start of an episode (entities may share a cell);
* hunter actions (:data:`ACTIONS`, also ``StagHunter.action_names``): ``0 stay``,
  ``1 up`` (y+1), ``2 down`` (y-1), ``3 left`` (x-1), ``4 right`` (x+1),
  ``5 catch``; moves are clipped at the walls, every action is always available;
* order within a step: hunters move; catches resolve on the positions after the
  moves; then the stag (probability ``stag_move_prob``, default 0.2) and each
  hare (probability ``hare_move_prob``, default 0) take a random step in one of
  the four directions (clipped at the walls);
* a hunter is *near* an animal when their Chebyshev distance is <= 1 (same or
  one of the 8 neighbouring cells);
* **stag**: captured when at least ``stag_hunters`` hunters (default 2) that are
  near it execute ``catch`` at the same step; team reward ``stag_reward``
  (default 10); the stag respawns at a random cell and the episode goes on
  (``end_on_stag=True`` ends the episode instead, ``terminated``). Hunters used
  for the stag do not also catch a hare at that step;
* **hare**: every other hunter executing ``catch`` takes the first hare near it;
  each captured hare pays ``hare_reward`` (default 2) once (two hunters on the
  same hare still give 2) and respawns at a random cell;
* episodes are cut after ``episode_limit`` steps (default 50, ``truncated``).

Layout: one group ``"hunter"`` (``hunter_0`` ..), ``Discrete(6)``, kind
``cooperative``, ``shared_reward=True`` (every hunter receives the team reward).
Entity-free observations ``[B, N, 2 + 2(N-1) + 2 + 2 n_hares]``: own position
``(x, y) / (size-1)``, then the positions of the other hunters, the stag and
the hares relative to the hunter, ``(dx, dy) / (size-1)``. Global state
``[B, 2N + 2 + 2 n_hares + 1]``: absolute normalised positions of hunters,
stag, hares and ``t / episode_limit``.

Episode statistics: ``step.info["episode_metrics"]`` holds ``stag_captures``
and ``hare_captures`` ``[B]`` (counts of the episode that ended at this step,
read by :class:`~marl.env.EpisodeStats` for ended copies); the running counts of
episodes in progress are ``env.stag_captures`` / ``env.hare_captures``.

Randomness comes from one ``torch.Generator`` seeded with ``seed`` (or the
seed given to :meth:`StagHunter.reset`), shared by all copies.
"""

from __future__ import annotations

from typing import Any, Dict, Optional

import gymnasium as gym
import numpy as np
import torch

from marl.env import EnvInfo, GroupInfo, MarlError, MultiAgentEnv, Observation, Step
from marl.envs.common import check_kwargs
from marl.envs.grid import (
    DIRS,
    MOVE_ACTIONS,
    MOVES,
    WORK,
    check_ints,
    check_probs,
    first_near,
    grid_state,
    load_grid_state,
    other_index,
    relative_others,
    scenarios,
    team_observation,
    team_step,
)

__all__ = ["StagHunter", "ACTIONS", "STAY", "CATCH", "scenarios", "make"]

ACTIONS = MOVE_ACTIONS + ["catch"]
STAY, CATCH = 0, WORK


class StagHunter(MultiAgentEnv):
    """Batched stag hunt on a grid (rules in the module docstring).

    Args:
        scenario: ``None`` or ``"default"`` (the game is set by the kwargs).
        num_envs: ``B`` (default 32).
        size: grid side (>= 2, default 7).
        n_hunters: hunters (>= 1, default 2).
        n_hares: hares (>= 0, default 2).
        stag_hunters: hunters needed for the stag (default 2, <= n_hunters).
        stag_reward, hare_reward: team rewards (10, 2).
        stag_move_prob, hare_move_prob: chance of a random step per step (0.2, 0).
        episode_limit: steps per episode (default 50).
        end_on_stag: the episode terminates when the stag is caught (default False:
            the stag respawns).
        seed: seed of the generator (``reset(seed)`` reseeds).
        device: torch device.

    Attributes:
        action_names: ``{"hunter": ACTIONS}``; read by the off-beat wrapper so
            durations can name actions (``{"catch": 3}``).
    """

    action_names = {"hunter": list(ACTIONS)}
    _STATE = ("hunters", "stag", "hares", "t", "stag_captures", "hare_captures", "_started")  # saved by get_state

    def __init__(
        self,
        scenario: Optional[str] = None,
        num_envs: int = 32,
        size: int = 7,
        n_hunters: int = 2,
        n_hares: int = 2,
        stag_hunters: int = 2,
        stag_reward: float = 10.0,
        hare_reward: float = 2.0,
        stag_move_prob: float = 0.2,
        hare_move_prob: float = 0.0,
        episode_limit: int = 50,
        end_on_stag: bool = False,
        seed: Optional[int] = 0,
        device: str = "cpu",
    ):
        if scenario not in (None, "default"):
            raise MarlError(f"stag_hunter has one scenario, 'default' (set the game with kwargs), got '{scenario}'.")
        check_ints(
            ("num_envs", num_envs, 1),
            ("size", size, 2),
            ("n_hunters", n_hunters, 1),
            ("n_hares", n_hares, 0),
            ("stag_hunters", stag_hunters, 1),
            ("episode_limit", episode_limit, 1),
        )
        if stag_hunters > n_hunters:
            raise MarlError(f"stag_hunters ({stag_hunters}) cannot exceed n_hunters ({n_hunters}).")
        check_probs(("stag_move_prob", stag_move_prob), ("hare_move_prob", hare_move_prob))
        self.device = torch.device(device)
        self.size, self.H, self.M = int(size), int(n_hunters), int(n_hares)
        self.stag_hunters = int(stag_hunters)
        self.stag_reward, self.hare_reward = float(stag_reward), float(hare_reward)
        self.stag_move_prob, self.hare_move_prob = float(stag_move_prob), float(hare_move_prob)
        self.end_on_stag = bool(end_on_stag)
        self._seed = seed
        self._gen = torch.Generator(device=self.device)
        self._gen.manual_seed(0 if seed is None else int(seed))
        self._moves = MOVES.to(self.device)
        self._dirs = DIRS.to(self.device)
        # per hunter, the indices of the other hunters (the observation's hunters block)
        self._others = other_index(self.H, self.device)

        self.info = self._env_info(int(episode_limit), int(num_envs))
        self._zero_state()

    def _env_info(self, episode_limit: int, num_envs: int) -> EnvInfo:
        """The task's ``EnvInfo``: one cooperative group of hunters with a shared reward."""
        H, M = self.H, self.M
        agents = [f"hunter_{i}" for i in range(H)]
        obs_dim = 2 + 2 * (H - 1) + 2 + 2 * M
        self.state_dim = 2 * H + 2 + 2 * M + 1
        group = GroupInfo(
            "hunter", agents, gym.spaces.Box(-1.0, 1.0, (obs_dim,), np.float32), gym.spaces.Discrete(len(ACTIONS))
        )
        return EnvInfo(
            family="stag_hunter",
            scenario="default",
            agents=agents,
            groups={"hunter": group},
            state_dim=self.state_dim,
            episode_limit=episode_limit,
            kind="cooperative",
            shared_reward=True,
            num_envs=num_envs,
        )

    def _zero_state(self) -> None:
        """Positions, clock and capture counts of every copy, zero until the first reset."""
        B, H, M = self.num_envs, self.H, self.M
        z = lambda *s: torch.zeros(*s, dtype=torch.long, device=self.device)  # noqa: E731
        self.hunters, self.stag, self.hares = z(B, H, 2), z(B, 2), z(B, M, 2)
        self.t = z(B)
        self.stag_captures, self.hare_captures = z(B), z(B)
        self._started = False

    # ------------------------------------------------------------------ API

    def reset(self, seed: Optional[int] = None) -> Step:
        """Reset every copy; ``seed`` (if given) reseeds the shared generator."""
        if seed is not None:
            self._gen.manual_seed(int(seed))
        self._respawn(torch.ones(self.num_envs, dtype=torch.bool, device=self.device))
        self._started = True
        return self.observe()

    def step_env(self, actions: Dict[str, torch.Tensor]) -> Step:
        """Move, catch, move the animals (see the module docstring); ended rows keep their last observation."""
        if not self._started:
            raise MarlError("Call reset() before step().")
        a = actions["hunter"].to(self.device)
        B, M = self.num_envs, self.M
        self.hunters = (self.hunters + self._moves[a]).clamp(0, self.size - 1)
        catching = a == CATCH  # [B, H]
        near_stag = (self.hunters - self.stag[:, None]).abs().amax(-1) <= 1  # [B, H]
        stag_hit = (catching & near_stag).sum(-1) >= self.stag_hunters  # [B]
        used = catching & near_stag & stag_hit[:, None]
        reward = stag_hit.float() * self.stag_reward
        hare_hit = torch.zeros(B, M, dtype=torch.bool, device=self.device)
        if M:
            first = first_near(self.hunters, self.hares)  # [B, H, M]
            hare_hit = (first & (catching & ~used)[:, :, None]).any(1)  # [B, M]
            reward = reward + hare_hit.sum(-1).float() * self.hare_reward
            self.hares = torch.where(hare_hit[:, :, None], self._cells(B, M), self.hares)
            self.hares = self._wander(self.hares, self.hare_move_prob)
        self.stag_captures += stag_hit.long()
        self.hare_captures += hare_hit.sum(-1)
        self.stag = torch.where(stag_hit[:, None], self._cells(B, 1)[:, 0], self.stag)
        self.stag = self._wander(self.stag[:, None], self.stag_move_prob)[:, 0]
        self.t += 1
        terminated = stag_hit & self.end_on_stag
        truncated = (self.t >= self.info.episode_limit) & ~terminated
        obs, state = self._observe()
        return self._make_step(
            obs, state, reward, terminated, truncated, self.stag_captures.float(), self.hare_captures.float()
        )

    def reset_rows(self, rows: torch.Tensor) -> Observation:
        """Respawn every entity of the copies in ``rows`` (``[B]`` bool) and restart their clocks."""
        self._respawn(rows.to(self.device))
        obs, state = self._observe()
        return team_observation("hunter", len(ACTIONS), obs, state)

    def get_state(self) -> Dict[str, Any]:
        """Entity positions, clocks, capture counts and the generator state (exact resume)."""
        return grid_state(self, self._STATE)

    def set_state(self, state: Dict[str, Any]) -> None:
        """Restore a :meth:`get_state` dict."""
        load_grid_state(self, self._STATE, state)

    def set_positions(self, hunters=None, stag=None, hares=None) -> None:
        """Place entities by hand (tests, demos): ``[B, N, 2]`` / ``[B, 2]`` / ``[B, M, 2]`` or broadcastable ``(x, y)``."""

        def put(cur, v):
            return torch.as_tensor(v, dtype=torch.long, device=self.device).expand_as(cur).clone()

        if hunters is not None:
            self.hunters = put(self.hunters, hunters)
        if stag is not None:
            self.stag = put(self.stag, stag)
        if hares is not None:
            self.hares = put(self.hares, hares)

    def observe(self) -> Step:
        """The current observation as a :class:`Step` with zero reward (after :meth:`set_positions`)."""
        B = self.num_envs
        no = torch.zeros(B, dtype=torch.bool, device=self.device)
        obs, state = self._observe()
        return self._make_step(
            obs,
            state,
            torch.zeros(B, device=self.device),
            no,
            no,
            self.stag_captures.float(),
            self.hare_captures.float(),
        )

    # ------------------------------------------------------------------ internals

    def _cells(self, *shape) -> torch.Tensor:
        return torch.randint(0, self.size, (*shape, 2), generator=self._gen, device=self.device)

    def _wander(self, pos: torch.Tensor, p: float) -> torch.Tensor:
        """Each entity of ``pos`` ``[B, K, 2]`` steps in a random direction with probability ``p``."""
        if p <= 0 or pos.shape[1] == 0:
            return pos
        B, K = pos.shape[:2]
        go = torch.rand(B, K, generator=self._gen, device=self.device) < p
        d = self._dirs[torch.randint(0, 4, (B, K), generator=self._gen, device=self.device)]
        return torch.where(go[..., None], (pos + d).clamp(0, self.size - 1), pos)

    def _respawn(self, rows: torch.Tensor) -> None:
        B = self.num_envs
        r = rows[:, None, None]
        self.hunters = torch.where(r, self._cells(B, self.H), self.hunters)
        self.stag = torch.where(rows[:, None], self._cells(B), self.stag)
        self.hares = torch.where(r, self._cells(B, self.M), self.hares)
        self.t = torch.where(rows, 0, self.t)
        self.stag_captures = torch.where(rows, 0, self.stag_captures)
        self.hare_captures = torch.where(rows, 0, self.hare_captures)

    def _observe(self):
        B, H = self.num_envs, self.H
        n = float(self.size - 1)
        animals = torch.cat([self.stag[:, None], self.hares], 1)  # [B, 1+M, 2]
        rel = animals[:, None] - self.hunters[:, :, None]  # [B, H, 1+M, 2]
        rel_h = relative_others(self.hunters, self._others)
        obs = torch.cat(
            [self.hunters.float() / n, rel_h.reshape(B, H, -1).float() / n, rel.reshape(B, H, -1).float() / n], -1
        )
        state = torch.cat(
            [
                self.hunters.reshape(B, -1).float() / n,
                self.stag.float() / n,
                self.hares.reshape(B, -1).float() / n,
                (self.t.float() / self.info.episode_limit)[:, None],
            ],
            -1,
        )
        return obs, state

    def _make_step(self, obs, state, reward, terminated, truncated, stag_n, hare_n) -> Step:
        return team_step(
            "hunter",
            len(ACTIONS),
            obs,
            state,
            reward,
            terminated,
            truncated,
            {"stag_captures": stag_n, "hare_captures": hare_n},
        )


def make(scenario: Optional[str] = None, **kwargs) -> StagHunter:
    """Registry factory of the ``"stag_hunter"`` family; see :class:`StagHunter`."""
    valid = [
        "num_envs",
        "size",
        "n_hunters",
        "n_hares",
        "stag_hunters",
        "stag_reward",
        "hare_reward",
        "stag_move_prob",
        "hare_move_prob",
        "episode_limit",
        "end_on_stag",
        "seed",
        "device",
    ]
    check_kwargs("the stag_hunter family", kwargs, valid)
    return StagHunter(scenario, **kwargs)
