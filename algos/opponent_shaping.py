"""Advantage Alignment's opponent-aware advantage, shared by the LLM path (``algos/llm/batches.py``)
and the tensor-policy algorithm (``algos/advantage_alignment.py``).

Duque et al. 2025, "Advantage Alignment Algorithms" (ICLR 2025, arXiv 2406.14662), method section (the
advantage-alignment policy gradient) and the equation in the README of the official code
(github.com/jduquevan/advantage-alignment)::

    A*_t = A1_t + beta * gamma * (sum_{k<t} gamma^(t-k) A1_k) * A2_t

``A1`` is the agent's own advantage, ``A2`` the co-player's (the sum over the other agents with more
than two, as the official code's ``other_A_s``). Piche et al. 2025 (arXiv 2511.19405) use it for LLM
agents; their official code also offers the "jit" sum over ``k <= t`` without the extra ``gamma``.
Rows are ``[n, T]`` with time last; hand-computed test vectors are in ``tests/test_llm.py`` and
``tests/test_advantage_alignment_tensor.py``.
"""

from __future__ import annotations

from typing import Optional

import torch


def aa_weights(
    a1: torch.Tensor,
    mask: torch.Tensor,
    gamma: float,
    jit: bool = False,
    starts: Optional[torch.Tensor] = None,
    mean: bool = False,
) -> torch.Tensor:
    """Advantage Alignment weight on the co-player's advantage.

    Published (``jit=False``; ``exclude_k_equals_t=True`` in the official code of Piche et al.):
    ``w_t = gamma * sum_{k<t} gamma^(t-k) A1_k`` (0 at t = 0).
    Jit (``jit=True``, k <= t, no extra gamma): ``w_t = sum_{k<=t} gamma^(t-k) A1_k``.
    Mean (``mean=True``, ``gamma`` unused): ``w_t = (1/t) sum_{k<t} A1_k``, the mean of the episode's past
    own advantages (0 at t = 0), as Duque et al.'s official Melting Pot code computes it
    (``actor_loss_mode: integrated_aa``: a cumulative sum divided by the step index). Its size does not
    grow with the episode's length as a sum's does.
    Duque et al. 2025 (arXiv 2406.14662, the A* equation) and Piche et al. 2025 (arXiv 2511.19405).

    Args:
        a1: ``[n, T]`` own advantages; mask ``[n, T]`` bool (padding and dead steps False).
        gamma: the alignment discount.
        starts: ``[n, T]`` bool, True where a new episode begins: the sum restarts there (a
            tensor rollout holds several episodes in a row). ``None``: one episode per row.
    Returns:
        ``[n, T]`` weights, 0 on padding.
    """
    a = a1 * mask
    out = torch.zeros_like(a)
    acc = torch.zeros_like(a[:, 0])  # sum_{k<=t} gamma^(t-k) A1_k over the current episode (mean: undiscounted)
    steps = torch.zeros_like(acc)  # steps of the current episode so far (mean)
    for t in range(a.shape[1]):
        keep = 1.0 if starts is None else (~starts[:, t]).to(acc.dtype)
        prev, prev_steps = acc * keep, steps * keep
        if mean:
            out[:, t] = prev / prev_steps.clamp(min=1.0)
            acc, steps = prev + a[:, t], prev_steps + 1.0
            continue
        acc = gamma * prev + a[:, t]
        out[:, t] = acc if jit else gamma * (gamma * prev)
    return out * mask


def aa_credit(
    a1: torch.Tensor,
    a2: torch.Tensor,
    mask: torch.Tensor,
    beta: float,
    gamma: float,
    jit: bool = False,
    starts: Optional[torch.Tensor] = None,
    past: Optional[torch.Tensor] = None,
    mean: bool = False,
) -> torch.Tensor:
    """Opponent-aware advantage ``A*_t = A1_t + beta * w_t * A2_t`` (:func:`aa_weights`).

    Args:
        a1: ``[n, T]`` own advantages; a2: ``[n, T]`` the co-player's advantages
            at the same step (0 where it has none); mask ``[n, T]``.
        beta: weight of the alignment term (0.5 for the IPD in Piche et al.'s official code,
            ``aa_weight`` 1 in Duque et al.'s official Melting Pot config).
        gamma: AA discount (0.9 in Piche et al.'s code; the return discount in Duque et al.).
        starts: ``[n, T]`` episode starts (:func:`aa_weights`).
        past: ``[n, T]`` the own advantages summed into ``w_t`` (default ``a1``). The tensor
            trainer passes one-step advantages (TD errors): a GAE advantage of a step ``k < t`` also
            sums the TD errors of steps ``t`` and later, so ``w_t`` would depend on the very action
            ``a_t`` it weighs (``algos/advantage_alignment.py``).
        mean: ``w_t`` is the mean of the past own advantages (:func:`aa_weights`).
    Returns:
        ``[n, T]`` credits, 0 on padding.
    """
    w = aa_weights(a1 if past is None else past, mask, gamma, jit, starts, mean)
    return (a1 + beta * w * a2) * mask


def others_sum(a: torch.Tensor) -> torch.Tensor:
    """The co-player advantage ``A2`` of every agent: the sum over the *other* agents.

    Official code of Duque et al. (``other_A_s``: ``(ones - eye) @ A``); with two agents, the other's.

    Args:
        a: ``[..., N, T]`` advantages of the ``N`` agents of one game.
    Returns:
        ``[..., N, T]``.
    """
    return a.sum(-2, keepdim=True) - a
