"""Advantage estimators of LLM self-play, on padded per-trajectory tensors.

A *trajectory* is one seat's turns in one game: ``rewards [n, T]`` with a
``mask [n, T]`` of real turns (turn ``t`` of row ``i`` is the seat's ``t``-th
reply, or the game's ``t``-th round in simultaneous games). Sources: MARS
(Yuan, Xu et al. 2025, arXiv 2510.15414, reconstructed from its official code),
Advantage Alignment (Duque et al. 2025, arXiv 2406.14662; Piche et al. 2025,
arXiv 2511.19405, whose official code gives the RLOO baseline), SPIRAL's
role-conditioned advantage estimation (Liu et al. 2025, arXiv 2506.24119); formulas and
choices in ``docs/algorithms/llm_selfplay.md``.
"""

from __future__ import annotations

from typing import Dict, Hashable, Sequence

import torch

from marl.algos.opponent_shaping import aa_credit, aa_weights  # noqa: F401  (the LLM estimators' AA)


def discounted_returns(rewards: torch.Tensor, mask: torch.Tensor, gamma: float) -> torch.Tensor:
    """Return-to-go over a trajectory's own turns: ``R_t = sum_{t'>=t} gamma^(t'-t) r_t'``.

    MARS turn-level return (Yuan, Xu et al. 2025, arXiv 2510.15414; gamma = 1 there).

    Args:
        rewards: ``[n, T]`` reward credited to each turn.
        mask: ``[n, T]`` bool, True on real turns (padding carries no reward).
    Returns:
        ``[n, T]`` returns, 0 on padding.
    """
    r = rewards * mask
    out = torch.zeros_like(r)
    acc = torch.zeros_like(r[:, 0])
    for t in range(r.shape[1] - 1, -1, -1):
        acc = r[:, t] + gamma * acc
        out[:, t] = acc
    return out * mask


def normalize_by_key(
    values: torch.Tensor, mask: torch.Tensor, keys: Sequence[Hashable], eps: float = 1e-6
) -> torch.Tensor:
    """``(v - mean_k) / (std_k + eps)`` over all masked entries of the rows with key ``k``.

    MARS agent-specific normalisation (arXiv 2510.15414; reconstructed from its official
    code, ``docs/algorithms/llm_selfplay.md``): key = the seat's
    role (per game), population std. A key with one entry gets advantage 0.

    Args:
        values: ``[n, T]``; mask: ``[n, T]`` bool; keys: ``n`` hashables (one per row).
    Returns:
        ``[n, T]``, 0 on padding.
    """
    out = torch.zeros_like(values)
    for k in dict.fromkeys(keys):
        rows = torch.tensor([kk == k for kk in keys])
        m = mask & rows.unsqueeze(1)
        v = values[m]
        out[m] = (v - v.mean()) / (v.std(unbiased=False) + eps)
    return out


def leave_one_out(returns: torch.Tensor, mask: torch.Tensor, groups: Sequence[Hashable]) -> torch.Tensor:
    """RLOO baseline per time step: ``A_t^b = G_t^b - mean_{b' in group(b), b' != b} G_t^b'``.

    RLOO (Ahmadian et al. 2024, arXiv 2402.14740) as in the official code of Piche
    et al. 2025 (arXiv 2511.19405, ``use_rloo``): the group is
    the rollouts sharing a game seed (and seat); only rollouts that have a
    turn ``t`` count. A row alone at ``t`` gets advantage 0 (no baseline can
    be formed without peers).

    Args:
        returns: ``[n, T]`` (e.g. :func:`discounted_returns`); mask: ``[n, T]`` bool;
        groups: ``n`` hashables.
    Returns:
        ``[n, T]`` advantages, 0 on padding.
    """
    out = torch.zeros_like(returns)
    m = mask.to(returns.dtype)
    for g in dict.fromkeys(groups):
        rows = torch.tensor([gg == g for gg in groups])
        G, M = returns[rows], m[rows]
        total, count = (G * M).sum(0), M.sum(0)
        others = (count - 1).clamp(min=1)
        base = (total - G * M) / others
        adv = torch.where(count > 1, G - base, torch.zeros_like(G)) * M
        out[rows] = adv
    return out


def trajectory_group_norm(
    rewards: torch.Tensor, mask: torch.Tensor, groups: Sequence[Hashable], eps: float = 1e-6
) -> torch.Tensor:
    """GRPO-style trajectory advantage: ``(sum_t r_t - mean_group) / (std_group + eps)`` on every turn.

    The "naive GRPO" of MARS Fig. 1 (arXiv 2510.15414; GRPO: Shao et al. 2024,
    arXiv 2402.03300): one scalar per
    trajectory, no temporal credit, all seats of a group pooled.

    Returns:
        ``[n, T]`` (the row's scalar repeated on its turns, 0 on padding).
    """
    total = (rewards * mask).sum(1, keepdim=True)
    norm = normalize_by_key(total, torch.ones_like(total, dtype=torch.bool), groups, eps)
    return norm * mask


def role_ema_advantages(
    returns: torch.Tensor, keys: Sequence[Hashable], baselines: Dict[Hashable, float], decay: float
) -> torch.Tensor:
    """Role-conditioned advantage estimation (RAE): ``A_i = R_i - b_k`` with ``b_k`` a moving
    average of the returns of role ``k``, read before it is updated: ``b_k <- decay * b_k + (1 - decay) * R_i``.

    SPIRAL (Liu et al. 2025, arXiv 2506.24119, Sec. 3.3 and its official code: decay 0.95,
    baseline read before the update, one trajectory at a time). A role seen for the first
    time starts from ``b_k = 0``. Rows are taken in the order given (callers sort them by game).

    Args:
        returns: ``[n]`` trajectory returns ``R_i``.
        keys: ``n`` role keys (a game's seat; SPIRAL: per game and role).
        baselines: role key -> baseline, updated in place (it carries over between batches).
        decay: the moving average's decay in [0, 1).
    Returns:
        ``[n]`` advantages.
    """
    out = torch.zeros_like(returns)
    for i, k in enumerate(keys):
        b = float(baselines.get(k, 0.0))
        r = float(returns[i])
        out[i] = r - b
        baselines[k] = decay * b + (1.0 - decay) * r
    return out


def turn_discounts(mask: torch.Tensor, gamma: float) -> torch.Tensor:
    """``gamma ** (turns after t)`` on each real turn of a trajectory (1 on its last turn), 0 on padding.

    SPIRAL's turn credit (arXiv 2506.24119, official code): turn ``t`` of ``T`` gets
    ``gamma^(T-1-t)`` times the trajectory's advantage (gamma 1 there: every turn the same).

    Args:
        mask: ``[n, T]`` bool, True on real turns.
    Returns:
        ``[n, T]`` float.
    """
    m = mask.to(torch.float32)
    after = m.flip(1).cumsum(1).flip(1) - 1  # real turns after t
    return torch.where(mask, torch.pow(torch.tensor(float(gamma)), after), torch.zeros_like(m))
