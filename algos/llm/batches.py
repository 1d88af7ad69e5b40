"""From played turns to the learner's batch: the advantage of every turn for the chosen
estimator (:func:`turn_advantages`, the estimators of :mod:`marl.algos.llm.advantages`) and one
row per trained reply (:func:`turns_to_batch`)."""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Tuple

import numpy as np
import torch
from ray.rllib.policy.sample_batch import MultiAgentBatch, SampleBatch

from marl.algos.llm import advantages as est
from marl.algos.opponent_shaping import others_sum
from marl.algos.llm.config import LLMConfig
from marl.algos.llm.games import Turn


def _rows(turns: List[Turn], by_step: bool) -> Tuple[List[tuple], torch.Tensor, torch.Tensor, Dict[int, tuple]]:
    """Pad turns into trajectories: rows = (game, seat), column = the seat's turn ``k``
    (``by_step``: the game's decision round). Returns ``(keys, rewards [n, T], mask, where)``
    with ``where[id(turn)] = (row, col)``."""
    keys = list(dict.fromkeys((t.game, t.seat) for t in turns))
    row = {k: i for i, k in enumerate(keys)}
    col = (lambda t: t.step) if by_step else (lambda t: t.k)
    T = max(col(t) for t in turns) + 1
    r = torch.zeros(len(keys), T)
    mask = torch.zeros(len(keys), T, dtype=torch.bool)
    where = {}
    for t in turns:
        i, j = row[(t.game, t.seat)], col(t)
        r[i, j] += t.reward
        mask[i, j] = True
        where[id(t)] = (i, j)
    return keys, r, mask, where


def _game_rows(keys: List[tuple]) -> List[List[int]]:
    """Row indices of each game's seats."""
    games: Dict[Any, List[int]] = {}
    for i, (g, _) in enumerate(keys):
        games.setdefault(g, []).append(i)
    return list(games.values())


def _share_rewards(keys: List[tuple], r: torch.Tensor) -> torch.Tensor:
    """Each seat's reward per step replaced by the sum over the seats of its game (aligned by step)."""
    out = r.clone()
    for rows in _game_rows(keys):
        out[rows] = r[rows].sum(0, keepdim=True)
    return out


def _co_player(keys: List[tuple], a: torch.Tensor) -> torch.Tensor:
    """Sum of the other seats' advantages in the same game at the same step (AA's A2)."""
    out = torch.zeros_like(a)
    for rows in _game_rows(keys):
        out[rows] = others_sum(a[rows])
    return out


def turn_advantages(
    turns: List[Turn], cfg: LLMConfig, simultaneous: bool, group_size: int, baselines: Optional[Dict[Any, float]] = None
) -> Dict[int, float]:
    """Advantage of every turn (``id(turn) -> A``) for the estimator ``cfg.estimator`` (module docstring).

    Rewards are divided by ``reward_scale`` first. Groups for baselines: games
    sharing a seed when ``group_size`` > 1, else the whole batch; per seat (and
    apart from bot / past-copy rows of that seat) for RLOO (A1), MARS and RAE, pooled for GRPO.
    ``baselines``: RAE's per-seat moving averages (seat key -> value), updated in place;
    the trainer keeps them across iterations and in checkpoints.
    """
    if not turns:
        return {}
    name = cfg.estimator
    by_step = simultaneous  # simultaneous games align seats by round (AA needs it)
    keys, r, mask, where = _rows(turns, by_step)
    r = r / cfg.reward_scale
    if cfg.reward_sharing == "sum":
        r = _share_rewards(keys, r)
    seed_of = {(t.game, t.seat): t.group for t in turns}
    trained = {(t.game, t.seat): t.trained for t in turns}
    group = [seed_of[k] if group_size > 1 else 0 for k in keys]
    # baselines never mix the learner's rows with a bot's or a past copy's in the same seat
    seat = [(k[1], trained[k]) for k in keys]
    if name == "mars":
        R = est.discounted_returns(r, mask, cfg.gamma)
        adv = est.normalize_by_key(R, mask, seat if cfg.role_norm else [0] * len(keys))
    elif name == "grpo":
        adv = est.trajectory_group_norm(r, mask, group)
    elif name == "rae":
        order = sorted(range(len(keys)), key=lambda i: keys[i])  # games in order, as SPIRAL plays them
        role = [seat[i][0] if seat[i][1] else f"{seat[i][0]}/fixed" for i in order]
        a = est.role_ema_advantages(
            (r * mask).sum(1)[order], role, {} if baselines is None else baselines, cfg.rae_decay
        )
        adv = torch.zeros(len(keys), 1)
        adv[order, 0] = a
        adv = adv * est.turn_discounts(mask, cfg.gamma)
    else:
        G = est.discounted_returns(r, mask, cfg.gamma)
        adv = est.leave_one_out(G, mask, list(zip(group, seat)))
        if name == "advantage_alignment":
            adv = est.aa_credit(adv, _co_player(keys, adv), mask, cfg.beta, cfg.aa_gamma, jit=cfg.aa_variant == "jit")
    return {tid: float(adv[i, j]) for tid, (i, j) in where.items()}


def turns_to_batch(
    turns: List[Turn], adv: Dict[int, float], seat_to_module: Dict[str, str], pad_id: int, drop_zero: bool = False
) -> MultiAgentBatch:
    """One row per trained reply: ``input_ids``, ``attention_mask`` ``[S, L]``, ``loss_mask [S, L-1]``
    (True where the next token belongs to the reply), ``advantages [S]``; per module.
    ``drop_zero``: leave out replies whose advantage is exactly 0 (``filter_zero_advantage``)."""
    per: Dict[str, List[Turn]] = {}
    for t in turns:
        if t.trained and t.response_ids and not (drop_zero and adv[id(t)] == 0.0):
            per.setdefault(seat_to_module[t.seat], []).append(t)
    batches, n_tokens = {}, 0
    for mid, ts in per.items():
        L = max(len(t.prompt_ids) + len(t.response_ids) for t in ts)
        ids = np.full((len(ts), L), pad_id, dtype=np.int64)
        att = np.zeros((len(ts), L), dtype=np.int64)
        lmask = np.zeros((len(ts), L - 1), dtype=bool)
        for i, t in enumerate(ts):
            p, q = len(t.prompt_ids), len(t.response_ids)
            ids[i, : p + q] = t.prompt_ids + t.response_ids
            att[i, : p + q] = 1
            lmask[i, p - 1 : p + q - 1] = True  # logp[j] scores token j+1: the reply's tokens
        n_tokens += int(lmask.sum())
        batches[mid] = SampleBatch(
            {
                "input_ids": ids,
                "attention_mask": att,
                "loss_mask": lmask,
                "advantages": np.array([adv[id(t)] for t in ts], dtype=np.float32),
            }
        )
    return MultiAgentBatch(batches, env_steps=n_tokens)
