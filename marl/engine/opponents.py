"""Opponents of self-play on competitive tensor envs: who plays the seats the learner does not.

The ``opponents`` config key maps co-players to probabilities: ``self`` (the current policy
in every seat, all seats trained: plain self-play), ``pool`` (a snapshot of the learner from
earlier iterations) or a bot name of :mod:`marl.competitive` (``random``: uniformly random
legal moves). At the start of every episode each env copy draws a co-player; unless it drew
``self``, it also draws the learner's seat uniformly, and the co-player plays every other seat.
The rows of those seats are recorded with ``alive=False``, so the learner never trains on the
co-player's moves (the same mask that hides dead agents from the losses).

The pool (fictitious self-play against past selves; Heinrich et al. 2015, "Fictitious
self-play in extensive-form games", ICML) gets a snapshot of the runner's weights every
``pool_every`` weight updates and keeps ``pool_size``; ``pool_sampling`` picks the snapshot
that plays the pool games of a whole rollout (``latest`` or ``uniform``). The pool lives in
the runner's memory: after a resume it fills again.
"""

from __future__ import annotations

import copy
from typing import Any, Dict, List, Optional, Tuple

import numpy as np
import torch

from marl.errors import MarlError, unknown_choice

SELF, POOL = "self", "pool"


def check_opponents(opponents: Dict[str, float], info: Any) -> None:
    """Raise :class:`MarlError` for a mix that cannot be played on an env with ``info``.

    Raises:
        MarlError: an empty mix, a negative probability or an all-zero mix; a name that is
            neither ``self``, ``pool`` nor a bot (listing the valid names); co-players other
            than ``self`` on an env with fewer than two teams (nothing to oppose).
    """
    from marl.competitive import bot_names

    if not opponents or min(opponents.values()) < 0 or sum(opponents.values()) <= 0:
        raise MarlError(
            f"opponents must map co-players to probabilities >= 0 with a positive sum, e.g. "
            f"{{'self': 0.5, 'pool': 0.3, 'random': 0.2}}; got {opponents!r}."
        )
    valid = [SELF, POOL] + bot_names()
    for name in opponents:
        if name not in valid:
            raise unknown_choice("opponent", name, valid)
    if set(opponents) != {SELF} and len(info.teams) < 2:
        raise MarlError(
            f"opponents {opponents!r} need a competitive env with two or more teams; "
            f"{info.scenario!r} has teams {list(info.teams)} (kind {info.kind!r})."
        )


class Opponents:
    """Per-copy co-players of one env runner (see the module docstring).

    Args:
        cfg: the run config (``opponents``, ``pool_every``, ``pool_size``, ``pool_sampling``).
        info: the env's :class:`~marl.env.EnvInfo` (teams are the seats).
        num_envs: ``B``.
        seed: seed of the draws and of the bots.
    """

    def __init__(self, cfg: Any, info: Any, num_envs: int, seed: int):
        from marl.competitive import make_bot

        self.cfg, self.info = cfg, info
        self.labels = list(cfg.opponents)
        p = np.asarray([cfg.opponents[k] for k in self.labels], dtype=float)
        self.probs = p / p.sum()
        self.rng = np.random.default_rng(seed)
        self.bots = {k: make_bot(k, info, seed) for k in self.labels if k not in (SELF, POOL)}
        self.seats = list(info.teams)
        self.seat_groups = {s: [g for g, gi in info.groups.items() if gi.team == s] for s in self.seats}
        self.co = np.full(num_envs, SELF, dtype=object)  # co-player of each copy's episode
        self.learner = np.zeros(num_envs, dtype=np.int64)  # the learner's seat index
        self.pool: List[Dict[str, Any]] = []
        self._updates = 0
        self.snapshot_module: Optional[Any] = None  # the pool snapshot playing this rollout
        self.snapshot_h: Dict[str, Any] = {}

    @property
    def enabled(self) -> bool:
        return any(k != SELF and self.cfg.opponents[k] > 0 for k in self.labels)

    def new_episodes(self, rows: torch.Tensor) -> None:
        """Draw co-player and learner seat for the copies in ``rows`` (``[B]`` bool)."""
        idx = rows.nonzero().flatten().numpy()
        if not len(idx):
            return
        co = self.rng.choice(len(self.labels), size=len(idx), p=self.probs)
        self.co[idx] = [self.labels[c] for c in co]
        if self.snapshot_module is None:  # an empty pool: the current policy stands in
            self.co[idx] = np.where(self.co[idx] == POOL, SELF, self.co[idx])
        self.learner[idx] = self.rng.integers(len(self.seats), size=len(idx))

    def weights_updated(self, runner: Any) -> None:
        """Called after the runner got new weights: every ``pool_every`` updates, snapshot them."""
        self._updates += 1
        if self.cfg.pool_every and self._updates % self.cfg.pool_every == 0 and POOL in self.labels:
            self.pool = (self.pool + [copy.deepcopy(runner.module.get_state())])[-self.cfg.pool_size :]

    def start_rollout(self, runner: Any) -> None:
        """Load the pool snapshot that plays this rollout's pool games into a module copy."""
        if not self.pool:
            return
        pick = len(self.pool) - 1 if self.cfg.pool_sampling == "latest" else int(self.rng.integers(len(self.pool)))
        if self.snapshot_module is None:
            self.snapshot_module = copy.deepcopy(runner.module)
        self.snapshot_module.set_state(self.pool[pick])
        self.snapshot_h = {}

    def override(
        self, runner: Any, step: Any, actions: Dict[str, torch.Tensor]
    ) -> Tuple[Dict[str, torch.Tensor], Dict[str, torch.Tensor]]:
        """Replace the actions of the seats co-players play; returns ``(actions, trained)`` with
        ``trained``: group -> ``[B, N_g]`` bool (False on rows a co-player played)."""
        B = runner.env.num_envs
        trained = {g: torch.ones(B, gi.n_agents, dtype=torch.bool) for g, gi in self.info.groups.items()}
        actions = dict(actions)
        for label in set(self.co.tolist()) - {SELF}:
            rows = torch.from_numpy(self.co == label)
            theirs = self._act(label, runner, step)
            for k, s in enumerate(self.seats):
                seat_rows = rows & torch.from_numpy(self.learner != k)
                for g in self.seat_groups[s]:
                    actions[g] = torch.where(_expand(seat_rows, actions[g]), theirs[g], actions[g])
                    trained[g] &= ~seat_rows.view(-1, 1)
        return actions, trained

    def _act(self, label: str, runner: Any, step: Any) -> Dict[str, torch.Tensor]:
        if label != POOL:
            return self.bots[label].act(step)
        snapshot = self.snapshot_module
        assert snapshot is not None  # the pool is drawn only once a snapshot is loaded (new_episodes)
        out = {}
        for mid in runner.mapping.modules:
            obs, avail, alive = runner.module_inputs(mid, step)  # obs: a tensor, or a dict of keys (structured)
            h = self.snapshot_h.get(mid, runner.module[mid].initial_state(tuple(alive.shape)))  # [B, N_m]
            a, _, self.snapshot_h[mid] = snapshot[mid].act(obs, avail, h, explore=True)
            out[mid] = a
        return runner.mapping.scatter(out)

    def episodes_ended(self, done: torch.Tensor) -> None:
        """Zero the pool snapshot's recurrent state of ended episodes, then draw new co-players."""
        for mid, h in self.snapshot_h.items():
            if h is not None:
                self.snapshot_h[mid] = h * (~done).view(-1, 1, 1).to(h.dtype)
        self.new_episodes(done)


def _expand(rows: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    return rows.view(-1, *([1] * (like.dim() - 1)))
