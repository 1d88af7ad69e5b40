"""Feed-forward and recurrent trunks shared by marl's agent networks.

Defaults follow the official MAPPO code (Yu et al. 2022, `onpolicy/config.py`):
hidden 64, ReLU, LayerNorm on the input features, orthogonal init, and a
small output gain (0.01) for policy heads so the initial policy is near uniform.
"""
from __future__ import annotations

from typing import Optional, Sequence

import torch
from torch import nn

ACTIVATIONS = {"relu": nn.ReLU, "tanh": nn.Tanh, "elu": nn.ELU}


def init_linear(layer: nn.Linear, gain: float) -> nn.Linear:
    """Orthogonal weights with ``gain``, zero bias (MAPPO / PPO convention)."""
    nn.init.orthogonal_(layer.weight, gain=gain)
    nn.init.zeros_(layer.bias)
    return layer


class MLP(nn.Module):
    """``[..., in_dim] -> [..., out_dim]``: optional input LayerNorm, ``layers`` hidden layers.

    Args:
        in_dim: input features.
        out_dim: output features (``None``: return the last hidden layer, size ``hidden``).
        hidden: width of hidden layers.
        layers: number of hidden layers.
        activation: one of ``relu``, ``tanh``, ``elu``.
        layer_norm: normalise the input features (MAPPO ``use_feature_normalization``).
        out_gain: orthogonal gain of the output layer.
    """

    def __init__(
        self,
        in_dim: int,
        out_dim: Optional[int],
        hidden: int = 64,
        layers: int = 2,
        activation: str = "relu",
        layer_norm: bool = True,
        out_gain: float = 1.0,
    ):
        super().__init__()
        act = ACTIVATIONS[activation]
        gain = nn.init.calculate_gain("relu" if activation == "relu" else "tanh")
        mods: list = [nn.LayerNorm(in_dim)] if layer_norm else []
        d = in_dim
        for _ in range(layers):
            mods += [init_linear(nn.Linear(d, hidden), gain), act()]
            d = hidden
        if out_dim is not None:
            mods.append(init_linear(nn.Linear(d, out_dim), out_gain))
        self.net = nn.Sequential(*mods)
        self.out_dim = out_dim if out_dim is not None else d

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


class GRUTrunk(nn.Module):
    """MLP encoder followed by a GRU cell, unrolled with episode-start resets.

    ``step``: one step for ``[M, D]`` inputs and ``[M, H]`` hidden state.
    ``unroll``: ``[M, L, D]`` sequences from ``h0 [M, H]``; where
    ``starts[m, t]`` is True the hidden state is zeroed before step ``t``
    (a new episode began inside the sequence).
    """

    def __init__(self, in_dim: int, hidden: int = 64, activation: str = "relu", layer_norm: bool = True):
        super().__init__()
        self.encoder = MLP(in_dim, None, hidden, 1, activation, layer_norm)
        self.cell = nn.GRUCell(hidden, hidden)
        self.hidden = hidden

    def step(self, x: torch.Tensor, h: torch.Tensor) -> torch.Tensor:
        return self.cell(self.encoder(x), h)

    def unroll(self, x: torch.Tensor, h0: torch.Tensor, starts: torch.Tensor) -> torch.Tensor:
        """Returns the hidden states after each step: ``[M, L, H]``."""
        z = self.encoder(x)  # one batched encoder call for all L steps
        h, outs = h0, []
        for t in range(x.shape[1]):
            h = h * (~starts[:, t]).unsqueeze(-1).to(h.dtype)
            h = self.cell(z[:, t], h)
            outs.append(h)
        return torch.stack(outs, 1)


def flat_size(shape: Sequence[int]) -> int:
    n = 1
    for s in shape:
        n *= int(s)
    return n
