"""Helpers shared by the batched grid games (``stag_hunter``, ``quarry``, ``afforestation``).

Every game has agents on a ``size x size`` grid with the actions
:data:`MOVE_ACTIONS` plus one game action (index 5: catch / mine / plant,
which does not move), all tensors over ``B`` copies. The rules of each game
are in its module docstring (docs/offbeat.md).
"""

from __future__ import annotations

import copy
from typing import Any, Dict, List, Sequence

import numpy as np
import torch

from marl.env import MarlError, Observation, Step

MOVE_ACTIONS = ["stay", "up", "down", "left", "right"]
WORK = 5  # index of the game action (catch / mine / plant)
# (dx, dy) of each action; the game action (row 5) does not move
MOVES = torch.tensor([[0, 0], [0, 1], [0, -1], [-1, 0], [1, 0], [0, 0]], dtype=torch.long)
DIRS = MOVES[1:5]


def scenarios() -> List[str]:
    """The grid games have one scenario, ``"default"`` (the game is set by keyword arguments)."""
    return ["default"]


def check_ints(*specs) -> None:
    """Raise :class:`MarlError` unless every ``(name, value, lowest)`` has an int ``value >= lowest``."""
    for name, v, lo in specs:
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < lo:
            raise MarlError(f"{name} must be an int >= {lo}, got {v!r}.")


def check_probs(*specs) -> None:
    """Raise :class:`MarlError` unless every ``(name, p)`` lies in [0, 1]."""
    for name, p in specs:
        if not 0.0 <= float(p) <= 1.0:
            raise MarlError(f"{name} must lie in [0, 1], got {p!r}.")


def grid_state(env: Any, names: Sequence[str]) -> Dict[str, Any]:
    """``get_state`` of a grid game: copies of ``env``'s attributes ``names`` (entity tensors,
    clocks, counts) and the state of its generator ``env._gen`` (docs/envs.md, exact resume)."""
    return {"attrs": {n: copy.deepcopy(getattr(env, n)) for n in names}, "gen": env._gen.get_state()}


def load_grid_state(env: Any, names: Sequence[str], state: Dict[str, Any]) -> None:
    """``set_state`` of a grid game: restore what :func:`grid_state` saved.

    Raises:
        MarlError: the state lacks one of ``names`` (saved by another game).
    """
    missing = [n for n in names if n not in state.get("attrs", {})]
    if missing:
        raise MarlError(f"{type(env).__name__}.set_state: the saved state lacks {missing} (saved by another env?).")
    for n in names:
        setattr(env, n, copy.deepcopy(state["attrs"][n]))
    env._gen.set_state(state["gen"])


def other_index(n: int, device) -> torch.Tensor:
    """``[n, n-1]``: row ``i`` lists the indices of the agents other than ``i``, in order."""
    keep = ~torch.eye(n, dtype=torch.bool, device=device)
    return keep.nonzero()[:, 1].reshape(n, n - 1)


def relative_others(pos: torch.Tensor, others: torch.Tensor) -> torch.Tensor:
    """``[B, N, N-1, 2]``: positions of the other agents relative to each agent (``pos`` ``[B, N, 2]``)."""
    B, N = pos.shape[:2]
    rel = pos[:, None] - pos[:, :, None]  # [B, N, N, 2]: agent j relative to agent i
    return torch.gather(rel, 2, others[None, :, :, None].expand(B, N, N - 1, 2))


def first_near(pos: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """``[B, N, K]`` bool: for each agent (``pos`` ``[B, N, 2]``) the first of ``targets`` ``[B, K, 2]``
    within Chebyshev distance 1 (one-hot; all False when none is near)."""
    near = (pos[:, :, None] - targets[:, None]).abs().amax(-1) <= 1  # [B, N, K]
    return torch.nn.functional.one_hot(near.long().argmax(-1), targets.shape[1]).bool() & near


def team_observation(group: str, n_actions: int, obs: torch.Tensor, state: torch.Tensor) -> Observation:
    """The :class:`Observation` of a one-group game: every action legal, everyone alive."""
    B, N = obs.shape[:2]
    avail = torch.ones(B, N, n_actions, dtype=torch.bool, device=obs.device)
    return Observation(
        {group: obs}, state, {group: avail}, {group: torch.ones(B, N, dtype=torch.bool, device=obs.device)}
    )


def team_step(
    group: str, n_actions: int, obs, state, reward, terminated, truncated, metrics: Dict[str, torch.Tensor]
) -> Step:
    """A :class:`Step` of a one-group cooperative game (see :func:`team_observation`): the team
    ``reward`` ``[B]`` goes to every agent, ``metrics`` to ``info["episode_metrics"]``; the final
    fields hold the current observation (what a reset returns; ``step`` replaces them)."""
    ob = team_observation(group, n_actions, obs, state)
    B, N = obs.shape[:2]
    return Step(
        obs=ob.obs,
        state=state,
        avail_actions=ob.avail_actions,
        alive=ob.alive,
        reward={group: reward[:, None].expand(B, N).clone()},
        terminated=terminated,
        truncated=truncated,
        final_obs=dict(ob.obs),
        final_state=state,
        final_avail_actions=dict(ob.avail_actions),
        info={"episode_metrics": metrics},
    )
