"""Pieces shared by the off-policy actor-critics (IDDPG, MADDPG, MATD3, FACMAC, ISAC, MASAC; the algorithms are
in :mod:`marl.algos.ddpg`, :mod:`marl.algos.facmac` and :mod:`marl.algos.sac`): the straight-through Gumbel-softmax
and TD3's smoothing of actions, the TD target, and the critics' inputs over every module's agents.
"""

from __future__ import annotations

from typing import Dict, List, Optional

import torch
from torch.func import functional_call
from torch.nn import functional as F


# ============================================================ action maps
def gumbel_softmax_st(logits: torch.Tensor, gumbel: Optional[torch.Tensor] = None, temperature: float = 1.0):
    """Straight-through Gumbel-softmax sample of ``logits [..., A]`` (Jang et al. 2017, arXiv 1611.01144,
    Sec. 2-3; MADDPG's discrete actions, Lowe et al. 2017, arXiv 1706.02275): forward the one-hot of
    ``argmax(logits + g)``, backward the gradient of the soft sample ``softmax((logits + g) / temperature)``.
    ``gumbel``: the noise ``g`` (default: fresh ``-log(-log U)``). Returns ``[..., A]`` float."""
    if gumbel is None:
        gumbel = -torch.log(-torch.log(torch.rand_like(logits).clamp(1e-20, 1.0 - 1e-7)))
    soft = torch.softmax((logits + gumbel) / temperature, -1)
    hard = F.one_hot(soft.argmax(-1), logits.shape[-1]).to(soft.dtype)
    return hard - soft.detach() + soft


def smoothed(action: torch.Tensor, low, high, std: float, clip: float, eps: Optional[torch.Tensor] = None):
    """TD3's target policy smoothing (Fujimoto et al. 2018, arXiv 1802.09477, Eq. 14): ``clip(a + clip(std *
    h * eps, -clip * h, clip * h), low, high)`` with ``h = (high - low) / 2`` (TD3's noise is in units of
    its ``[-1, 1]`` actions). ``action [..., K]``; ``eps``: standard normal noise (default: fresh)."""
    half = (high - low) / 2
    eps = torch.randn_like(action) if eps is None else eps
    noise = torch.maximum(torch.minimum(std * half * eps, clip * half), -clip * half)
    return torch.maximum(torch.minimum(action + noise, high), low)


def critic_target(rewards, terminated, q_next: List[torch.Tensor], gamma: float) -> torch.Tensor:
    """``y = r + gamma (1 - terminated) min_k Q'_k(x', mu'(o'))`` (DDPG, Lillicrap et al. 2016, arXiv 1509.02971,
    Algorithm 1; with two critics TD3's clipped double-Q, Fujimoto et al. 2018, arXiv 1802.09477, Eq. 10).
    ``rewards [B, N]``, ``terminated [B]`` bool (a truncation bootstraps), each ``q_next [B, N]``."""
    q = torch.stack(q_next).min(0).values
    return rewards + gamma * (~terminated).to(q.dtype).unsqueeze(-1) * q


# ============================================================ critic inputs
def joint_actions(acts: Dict[str, torch.Tensor], mid: str, own: Optional[torch.Tensor] = None) -> torch.Tensor:
    """All agents' actions as seen by the critics of module ``mid``'s ``N`` agents: ``[B, N, sum_m N_m K_m]``
    (modules in ``acts`` order). With ``own [B, N, K]``, agent ``i``'s row has its own action replaced by
    ``own[:, i]`` and every other agent's as stored (MADDPG's policy gradient, Lowe et al. 2017, arXiv
    1706.02275, Eq. 5: ``a_i = mu_i(o_i)``, ``a_j`` from the buffer)."""
    n = acts[mid].shape[1]
    blocks = []
    for m, a in acts.items():
        if m == mid and own is not None:
            eye = torch.eye(n, dtype=torch.bool, device=a.device).unsqueeze(-1)  # [N(i), N(j), 1]
            blocks.append(torch.where(eye, own.unsqueeze(1), a.unsqueeze(1)).flatten(2))
        else:
            blocks.append(a.flatten(1).unsqueeze(1).expand(-1, n, -1))
    return torch.cat(blocks, -1)


def critic_inputs(critic: str, obs, state, acts, mid: str, own: Optional[torch.Tensor] = None) -> torch.Tensor:
    """The critic input ``[B, N_mid, X]`` of module ``mid``'s agents. ``critic``: ``obs`` (own observation and
    action), ``joint_obs`` (every agent's observation and action, MADDPG; Lowe et al. 2017, arXiv 1706.02275,
    Sec. 4.1) or ``state`` (the state ``[B, S]`` and every action); a shared centralised critic also reads the
    agent's one-hot index. ``obs``/``acts``: module -> ``[B, N_m, D_m]`` / ``[B, N_m, K_m]``; ``own``: see
    :func:`joint_actions`."""
    if critic == "obs":
        return torch.cat([obs[mid], acts[mid] if own is None else own], -1)
    n = obs[mid].shape[1]
    ctx = torch.cat([o.flatten(1) for o in obs.values()], -1) if critic == "joint_obs" else state
    parts = [ctx.unsqueeze(1).expand(-1, n, -1), joint_actions(acts, mid, own)]
    if n > 1:
        parts.append(torch.eye(n, device=ctx.device).expand(ctx.shape[0], n, n))
    return torch.cat(parts, -1)


def q_values(critics: torch.nn.ModuleList, x: torch.Tensor) -> List[torch.Tensor]:
    """Each critic's ``Q [B, N]`` of the inputs ``x [B, N, X]``."""
    return [c(x).squeeze(-1) for c in critics]


def frozen(net: torch.nn.Module, *inputs: torch.Tensor) -> torch.Tensor:
    """``net(*inputs)`` with detached parameters: gradients reach the inputs only (an actor loss that never moves
    the critic; DDPG's actor and critic have their own optimisers, Lillicrap et al. 2016, arXiv 1509.02971)."""
    return functional_call(net, {k: v.detach() for k, v in net.named_parameters()}, inputs)
