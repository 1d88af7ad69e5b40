"""The math of multi-agent PPO, free of RLlib: value normalisation and the clipped losses.

Sources: Schulman et al. 2017 (PPO clipped surrogate, arXiv 1707.06347, eq. 7);
Yu et al. 2022 (MAPPO, arXiv 2103.01955: the losses of its appendix, its
implementation suggestions and its official code's defaults: value
normalisation, Huber value loss, value clipping). :mod:`marl.algos.ppo` builds
its module and minibatch loss on these; GAE, the time-limit bootstrap and
advantage normalisation over active agents belong to every on-policy algorithm
and live in the on-policy core, :mod:`marl.engine.on_policy`.
"""

from __future__ import annotations

from typing import Dict, Optional, Tuple

import torch
from torch import nn
from torch.nn import functional as F


# ============================================================ value normalisation
class ValueNorm(nn.Module):
    """Running normaliser of value targets (Yu et al. 2022, arXiv 2103.01955: official code's ``ValueNorm``).

    Debiased exponential moving averages with ``beta``:
    ``mu <- beta*mu + (1-beta)*mean(x)``, ``mu2 <- beta*mu2 + (1-beta)*mean(x^2)``,
    ``d <- beta*d + (1-beta)``; ``mean = mu/d``, ``var = max(mu2/d - mean^2, 1e-2)``.
    The first update is exact (``mean == batch mean``) thanks to the debiasing term.
    """

    def __init__(self, beta: float = 0.99999, min_var: float = 1e-2):
        super().__init__()
        self.beta, self.min_var = beta, min_var
        self.register_buffer("running_mean", torch.zeros(()))
        self.register_buffer("running_mean_sq", torch.zeros(()))
        self.register_buffer("debias", torch.zeros(()))

    @torch.no_grad()
    def update(self, x: torch.Tensor, mask: Optional[torch.Tensor] = None) -> None:
        """Fold in the values ``x`` (any shape); ``mask`` selects the entries to use."""
        if mask is not None:
            x = x[mask]
        if x.numel() == 0:
            return
        x = x.double()
        b = self.beta
        self.running_mean.mul_(b).add_((1 - b) * x.mean().to(self.running_mean.dtype))
        self.running_mean_sq.mul_(b).add_((1 - b) * (x**2).mean().to(self.running_mean.dtype))
        self.debias.mul_(b).add_(1 - b)

    def stats(self) -> Tuple[torch.Tensor, torch.Tensor]:
        d = self.debias.clamp(min=1e-5)
        mean = self.running_mean / d
        var = (self.running_mean_sq / d - mean**2).clamp(min=self.min_var)
        return mean, var

    def normalize(self, x: torch.Tensor) -> torch.Tensor:
        mean, var = self.stats()
        return (x - mean) / var.sqrt()

    def denormalize(self, x: torch.Tensor) -> torch.Tensor:
        mean, var = self.stats()
        return x * var.sqrt() + mean


# ============================================================ losses
def huber(e: torch.Tensor, delta: float) -> torch.Tensor:
    """Huber loss of residuals ``e`` (elementwise), quadratic inside ``|e| <= delta``."""
    return F.huber_loss(e, torch.zeros_like(e), reduction="none", delta=delta)


def masked_mean(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Mean of ``x`` over the entries where ``mask`` (same shape, bool) is set; 0 if none is (a scalar)."""
    m = mask.to(x.dtype)
    return (x * m).sum() / m.sum().clamp(min=1.0)


def ppo_losses(
    logp: torch.Tensor,
    logp_old: torch.Tensor,
    adv: torch.Tensor,
    entropy: torch.Tensor,
    values: torch.Tensor,
    values_old: torch.Tensor,
    targets: torch.Tensor,
    active: torch.Tensor,
    clip: float,
    value_clip: Optional[float],
    huber_delta: Optional[float],
) -> Dict[str, torch.Tensor]:
    """PPO clipped surrogate and clipped value loss over active rows (Yu et al. 2022, arXiv 2103.01955).

    All inputs are ``[M]``; ``values``, ``values_old`` and ``targets`` are in
    normalised units. Returns ``policy_loss`` (to minimise, i.e. the negated
    clipped surrogate), ``value_loss``, ``entropy``, ``clip_fraction``, ``approx_kl``.
    """
    ratio = torch.exp(logp - logp_old)
    surr = torch.min(ratio * adv, ratio.clamp(1 - clip, 1 + clip) * adv)
    policy_loss = -masked_mean(surr, active)
    err = targets - values
    loss_v = huber(err, huber_delta) if huber_delta else 0.5 * err**2
    if value_clip:
        v_clipped = values_old + (values - values_old).clamp(-value_clip, value_clip)
        err_c = targets - v_clipped
        loss_vc = huber(err_c, huber_delta) if huber_delta else 0.5 * err_c**2
        loss_v = torch.max(loss_v, loss_vc)
    with torch.no_grad():
        clip_frac = masked_mean(((ratio - 1).abs() > clip).float(), active)
        approx_kl = masked_mean((ratio - 1) - (logp - logp_old), active)
    return {
        "policy_loss": policy_loss,
        "value_loss": masked_mean(loss_v, active),
        "entropy": masked_mean(entropy, active),
        "clip_fraction": clip_frac,
        "approx_kl": approx_kl,
    }
