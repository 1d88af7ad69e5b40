"""Q-learning pieces of value decomposition (IQL / VDN / QMIX): TD(lambda) targets,
the masked TD loss, double-Q, epsilon-greedy exploration and reward statistics.

Sources: QMIX (Rashid et al. 2018, arXiv 1803.11485) as in its official code,
pymarl (Samvelyan et al. 2019, arXiv 1902.04043: 1-step double-Q target, masked
squared TD error, ``DecayThenFlatSchedule``); TD(lambda) targets of Hu et al. 2021
(arXiv 2102.03479, official code ``build_td_lambda_targets``); double Q-learning (van Hasselt et al.
2016, arXiv 1509.06461); Chan et al. 1979 (parallel variance update).
Used by :mod:`marl.algos.value_decomp`; ``docs/algorithms/value_decomposition.md``.
"""

from __future__ import annotations

from typing import Dict, List, Optional, Tuple

import torch

from marl.errors import TrainingDiverged

NEG_INF = -1e10  # Q of an unavailable action in argmaxes (pymarl uses -9999999)


def epsilon_at(env_steps: float, start: float, end: float, anneal_steps: float) -> float:
    """Linear epsilon schedule in sampled env steps (pymarl ``DecayThenFlatSchedule``):
    ``start`` at 0, ``end`` from ``anneal_steps`` on."""
    if anneal_steps <= 0:
        return float(end)
    frac = min(max(float(env_steps) / float(anneal_steps), 0.0), 1.0)
    return float(start + (end - start) * frac)


def td_lambda_targets(
    rewards: torch.Tensor,
    terminated: torch.Tensor,
    filled: torch.Tensor,
    next_q: torch.Tensor,
    gamma: float,
    lam: float,
) -> torch.Tensor:
    """TD(lambda) returns over padded episodes (pymarl2 ``build_td_lambda_targets``).

    ``G_t = r_t + gamma (1 - term_t) [(1 - lam) Q'_{t+1} + lam G_{t+1}]`` where
    ``Q'_{t+1} = next_q[:, t]`` is the target network's value of the next step and,
    past the last step of an episode, ``G_{t+1}`` is replaced by ``Q'_{t+1}``
    (a truncated episode bootstraps; a terminated one has ``term = 1``).
    ``lam = 0`` is the 1-step target; ``lam = 1`` on a terminated episode is the
    Monte-Carlo return.

    Args:
        rewards: ``[E, T, ...]``; terminated, filled: ``[E, T]`` bool;
        next_q: ``[E, T, ...]`` (same trailing dims as ``rewards``, e.g. agents for IQL).
    Returns:
        ``[E, T, ...]`` targets (values at unfilled steps are meaningless; mask them).
    """
    extra = rewards.dim() - 2
    shape = terminated.shape + (1,) * extra
    cont = (~terminated).to(rewards.dtype).view(shape)
    filled_next = torch.cat([filled[:, 1:], torch.zeros_like(filled[:, :1])], 1).view(shape)
    T = rewards.shape[1]
    out = torch.empty_like(rewards)
    g = next_q[:, T - 1]
    for t in range(T - 1, -1, -1):
        nq = next_q[:, t]
        g_next = torch.where(filled_next[:, t], g, nq)
        g = rewards[:, t] + gamma * cont[:, t] * ((1 - lam) * nq + lam * g_next)
        out[:, t] = g
    return out


def masked_td_loss(
    q_tot: torch.Tensor,
    next_q: torch.Tensor,
    rewards: torch.Tensor,
    terminated: torch.Tensor,
    filled: torch.Tensor,
    mask: torch.Tensor,
    gamma: float,
    lam: float,
) -> Tuple[torch.Tensor, torch.Tensor]:
    """``sum(mask * (q_tot - y)^2) / sum(mask)`` with ``y`` the TD(lambda) target
    (:func:`td_lambda_targets`, no gradient); pymarl's ``q_learner`` loss.

    Masked entries (padding, dead agents for IQL) are selected away with
    ``torch.where``, so whatever they hold (even NaN) reaches neither the loss
    nor its gradient.

    Args:
        q_tot, next_q, rewards: ``[E, T, ...]``; terminated, filled: ``[E, T]`` bool;
        mask: bool, shaped like ``q_tot``.
    Returns:
        ``(loss scalar, targets y [E, T, ...])``.
    """
    with torch.no_grad():
        y = td_lambda_targets(rewards, terminated, filled, torch.where(mask, next_q, 0.0), gamma, lam)
    td = torch.where(mask, q_tot - y, torch.zeros_like(q_tot))
    return (td**2).sum() / mask.sum().clamp(min=1), y


def on_mask(fn, mask: torch.Tensor, *xs: torch.Tensor) -> torch.Tensor:
    """``fn`` on the entries of ``xs`` where ``mask``, zero elsewhere (differentiable).

    Used for the mixer on the filled steps of a padded batch: a row-wise network gives the
    same values on the gathered rows as on the padded tensor, at ``mask.sum()`` rows' cost.

    Args:
        fn: ``fn(*rows) -> [K]``, called on ``x[mask]`` for each ``x``.
        mask: ``[E, T]`` bool; xs: ``[E, T, ...]``.
    Returns:
        ``[E, T]``.
    """
    rows = fn(*(x[mask] for x in xs))
    return rows.new_zeros(mask.shape).masked_scatter(mask, rows)


def check_q_bound(team: str, bound: float, values: Dict[str, Tuple[torch.Tensor, torch.Tensor]]) -> None:
    """Stop a diverging learner: ``|Q|`` of a trained entry beyond ``bound`` (``0``: no bound).

    A learner whose TD targets chase their own growth shows it in its Q values long
    before its loss overflows to inf / NaN.

    Args:
        team: named in the message.
        bound: the config key ``q_abs_max``.
        values: name (e.g. ``"Q_tot"``) -> ``(Q, mask)``, a tensor and the bool mask of
            its trained entries (same shape).
    Raises:
        TrainingDiverged: naming the value, the team, the peak ``|Q|`` and the bound.
    """
    for name, (q, mask) in values.items() if bound > 0 else ():
        peak = float(torch.where(mask, q.detach().abs(), torch.zeros_like(q)).max())
        if peak > bound:
            raise TrainingDiverged(
                f"{name} of team '{team}' reached |Q| = {peak:.4g}, beyond q_abs_max={bound:g}: the TD targets are "
                f"diverging (try a lower lr or td_lambda); raise q_abs_max if returns this large are real."
            )


def double_q_next(q_online: torch.Tensor, q_target: torch.Tensor, avail: Optional[torch.Tensor]) -> torch.Tensor:
    """Double-Q value ``Q^-(tau', argmax_{u in avail} Q(tau', u))`` (van Hasselt et al. 2016).

    Args:
        q_online, q_target: ``[..., A]``; avail: ``[..., A]`` bool or ``None``.
    Returns:
        ``[...]``.
    """
    q = q_online if avail is None else q_online.masked_fill(~avail, NEG_INF)
    return q_target.gather(-1, q.argmax(-1, keepdim=True)).squeeze(-1)


def masked_argmax(q: torch.Tensor, avail: Optional[torch.Tensor]) -> torch.Tensor:
    """Greedy action over legal actions: ``[..., A] -> [...]`` int64."""
    return (q if avail is None else q.masked_fill(~avail.bool(), NEG_INF)).argmax(-1)


def epsilon_greedy(q: torch.Tensor, avail: Optional[torch.Tensor], epsilon: float, generator=None) -> torch.Tensor:
    """With probability ``epsilon`` a uniform *legal* action, else the masked argmax.

    Args:
        q: ``[M, A]``; avail: ``[M, A]`` bool or ``None``.
    Returns:
        ``[M]`` int64.
    """
    greedy = masked_argmax(q, avail)
    if epsilon <= 0:
        return greedy
    weights = torch.ones_like(q) if avail is None else avail.to(q.dtype)
    weights = torch.where(weights.sum(-1, keepdim=True) > 0, weights, torch.ones_like(weights))
    rand = torch.multinomial(weights, 1, generator=generator).squeeze(-1)
    pick = torch.rand(q.shape[0], generator=generator) < epsilon
    return torch.where(pick, rand, greedy)


def merge_moments(stats: List[float], x: torch.Tensor) -> List[float]:
    """Fold the entries of ``x`` into running ``[count, mean, M2]`` (Chan et al. 1979
    parallel update); the variance is ``M2 / count``."""
    n_b = float(x.numel())
    if n_b == 0:
        return stats
    n_a, mean_a, m2_a = stats
    mean_b = float(x.double().mean())
    m2_b = float(((x.double() - mean_b) ** 2).sum())
    n = n_a + n_b
    delta = mean_b - mean_a
    return [n, mean_a + delta * n_b / n, m2_a + m2_b + delta**2 * n_a * n_b / n]
