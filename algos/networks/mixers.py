"""Mixing networks of value decomposition: ``Q_tot`` from the agents' chosen-action utilities.

VDN (Sunehag et al. 2018, arXiv 1706.05296) sums the utilities and has no
parameters (the learner adds them up); QMIX (Rashid et al. 2018, ICML, arXiv
1803.11485) mixes them monotonically with weights generated from the global
state: :class:`QMixer`. Both value-decomposition families (the Q-learning one in
``algos/value_decomp.py``, the actor-critics in ``algos/vd_actor_critic.py``) mix toward the team
reward of :func:`team_rewards`.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F

from marl.errors import MarlError


def team_reward_rule(info) -> str:
    """How the team reward is made from the agents' rewards for an env's ``EnvInfo``: ``"mean"`` where every
    agent receives the team's reward (``shared_reward``), else ``"sum"`` (a cooperative env's own rewards)."""
    return "mean" if info.shared_reward else "sum"


def team_rewards(rewards: torch.Tensor, rule: str, dim: int) -> torch.Tensor:
    """The team reward: ``rewards`` (agents along ``dim``) averaged (``rule == "mean"``) or summed over agents."""
    return rewards.mean(dim) if rule == "mean" else rewards.sum(dim)


class QMixer(nn.Module):
    """QMIX's monotonic mixer (Rashid et al. 2018, arXiv 1803.11485, Eq. 4-5; as in its official code, pymarl).

    ``W1 = |hyper_w1(s)|`` ``[n, E]``, ``b1 = hyper_b1(s)``, ``h = ELU(q W1 + b1)``,
    ``W2 = |hyper_w2(s)|`` ``[E]``, ``b2 = V(s)``; ``Q_tot = h . W2 + b2``.
    Hypernetworks have ``hypernet_layers`` (1 or 2, hidden ``hypernet_embed``).
    Only weights pass through ``abs`` so ``dQ_tot/dQ_a >= 0`` for any parameters. ``monotonic=False``
    drops the ``abs``: the non-monotonic mixer FACMAC also allows (Peng et al. 2021, arXiv 2003.06709,
    Sec. 4.1), same networks otherwise.
    """

    def __init__(
        self,
        n_agents: int,
        state_dim: int,
        embed: int = 32,
        hypernet_layers: int = 2,
        hypernet_embed: int = 64,
        monotonic: bool = True,
    ):
        super().__init__()
        self.n, self.embed, self.monotonic = n_agents, embed, monotonic

        def hyper(out: int) -> nn.Module:
            if hypernet_layers == 1:
                return nn.Linear(state_dim, out)
            if hypernet_layers == 2:
                return nn.Sequential(nn.Linear(state_dim, hypernet_embed), nn.ReLU(), nn.Linear(hypernet_embed, out))
            raise MarlError(f"hypernet_layers={hypernet_layers} is not supported. Valid choices: 1, 2.")

        self.hyper_w1 = hyper(n_agents * embed)
        self.hyper_w2 = hyper(embed)
        self.hyper_b1 = nn.Linear(state_dim, embed)
        self.value = nn.Sequential(nn.Linear(state_dim, embed), nn.ReLU(), nn.Linear(embed, 1))

    def forward(self, qs: torch.Tensor, state: torch.Tensor) -> torch.Tensor:
        """``qs [..., n]``, ``state [..., S]`` -> ``Q_tot [...]``."""
        w1 = self._weights(self.hyper_w1(state)).view(*state.shape[:-1], self.n, self.embed)
        # q W1 as a broadcast product summed over the few agents: an einsum / bmm of [1, n] x [n, E]
        # matrices per row is ~3x slower on CPU for the same values
        h = F.elu((qs.unsqueeze(-1) * w1).sum(-2) + self.hyper_b1(state))
        w2 = self._weights(self.hyper_w2(state))
        return (h * w2).sum(-1) + self.value(state).squeeze(-1)

    def _weights(self, w: torch.Tensor) -> torch.Tensor:
        return w.abs() if self.monotonic else w
