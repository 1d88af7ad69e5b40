"""pymarl's RNN agent, the plain agent network of IQL / VDN / QMIX.

Source: Rashid et al. 2018, "QMIX" (ICML, arXiv 1803.11485), §6 "agent
networks": a DRQN with a GRU between two fully connected layers; the ``rnn_agent``
of its official code, pymarl (Samvelyan et al. 2019, arXiv 1902.04043). PyTorch's
default initialisation, as in pymarl.
"""

from __future__ import annotations

from typing import Any, Dict

import torch
from torch import nn
from torch.nn import functional as F

from marl.algos.networks.base import AgentNetwork, packed_layer, recurrent_layer


class RNNAgent(AgentNetwork):
    """``FC(d -> H) -> ReLU -> GRU(H) -> FC(H -> A)``; with ``recurrent=False`` the GRU is
    replaced by ``FC(H -> H) -> ReLU`` (no state).

    Args:
        in_dim: ``d``, the agent's input (observation, agent one-hot, last action).
        n_actions: ``A``; hidden: ``H`` (pymarl ``rnn_hidden_dim``, 64).
        recurrent: GRU middle layer, state ``[M, H]``.
    """

    skips_padding = True  # row-wise layers and a GRU: the used steps of a padded batch can be packed

    def __init__(self, in_dim: int, n_actions: int, hidden: int = 64, recurrent: bool = True):
        super().__init__()
        self.recurrent, self.hidden = recurrent, hidden
        self.state_size = hidden if recurrent else 0
        self.fc1 = nn.Linear(in_dim, hidden)
        self.rnn = nn.GRU(hidden, hidden, batch_first=True) if recurrent else nn.Linear(hidden, hidden)
        self.fc2 = nn.Linear(hidden, n_actions)

    def forward(self, x: torch.Tensor, h0=None, starts=None):
        z = recurrent_layer(self.rnn, F.relu(self.fc1(x)), h0, starts)
        return self.fc2(z), (z if self.recurrent else None)

    def packed(self, x: torch.Tensor, batch_sizes: torch.Tensor) -> torch.Tensor:
        """Used steps only, ``x [sum(lengths), d]`` in packed layout -> ``[sum(lengths), A]``
        (:meth:`~marl.algos.networks.base.AgentNetwork.packed`; :func:`~marl.algos.networks.base.packed_layer`)."""
        z = F.relu(self.fc1(x))
        return self.fc2(packed_layer(self.rnn, z, batch_sizes))


def build_rnn_agent(c: Dict[str, Any], n_actions: int) -> RNNAgent:
    """The agent from :class:`~marl.algos.value_decomp.QAgentModule`'s ``model_config``: input
    ``obs_dim + last_action_dim``, ``hidden`` (64), ``recurrent`` (true)."""
    in_dim = int(c["obs_dim"]) + int(c.get("last_action_dim", 0))
    return RNNAgent(in_dim, n_actions, int(c.get("hidden", 64)), bool(c.get("recurrent", True)))
