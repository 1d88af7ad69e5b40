"""MAPPO's actor (an MLP or GRU trunk and a linear head) and the MLP block it is built from.

Defaults follow the official MAPPO code (Yu et al. 2022, "The Surprising
Effectiveness of PPO in Cooperative Multi-Agent Games", arXiv 2103.01955;
official code's defaults): hidden 64, ReLU,
LayerNorm on the input features, orthogonal init, and a small output gain
(0.01) for the policy head so the initial policy is near uniform.
"""

from __future__ import annotations

from typing import Any, Dict, Optional

import torch
from torch import nn

from marl.algos.networks.base import AgentNetwork, gru_unroll

ACTIVATIONS = {"relu": nn.ReLU, "tanh": nn.Tanh, "elu": nn.ELU}
GRU_PARAMS = ("weight_ih", "weight_hh", "bias_ih", "bias_hh")  # nn.GRUCell names; nn.GRU adds "_l0"


def init_linear(layer: nn.Linear, gain: float, init: str = "orthogonal") -> nn.Linear:
    """Orthogonal weights with ``gain``, zero bias (MAPPO / PPO convention); ``init="torch"`` keeps
    PyTorch's default (``nn.Linear.reset_parameters``: uniform in ``+-1/sqrt(fan_in)``), as EPyMARL's
    networks do, and ignores ``gain``."""
    if init == "orthogonal":
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
        init: ``"orthogonal"`` (gains as above) or ``"torch"`` (PyTorch's default, :func:`init_linear`).
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
        init: str = "orthogonal",
    ):
        super().__init__()
        act = ACTIVATIONS[activation]
        gain = nn.init.calculate_gain("relu" if activation == "relu" else "tanh")
        mods: list = [nn.LayerNorm(in_dim)] if layer_norm else []
        d = in_dim
        for _ in range(layers):
            mods += [init_linear(nn.Linear(d, hidden), gain, init), act()]
            d = hidden
        if out_dim is not None:
            mods.append(init_linear(nn.Linear(d, out_dim), out_gain, init))
        self.net = nn.Sequential(*mods)
        self.out_dim = out_dim if out_dim is not None else d

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


class GRUTrunk(nn.Module):
    """MLP encoder (one hidden layer) followed by a GRU: ``x [M, L, D]`` -> states ``[M, L, H]``
    (the recurrent base of MAPPO's official code, Yu et al. 2022, arXiv 2103.01955).

    The GRU is an ``nn.GRU`` unrolled by :func:`~marl.algos.networks.base.gru_unroll`.
    Checkpoints from before it replaced an ``nn.GRUCell`` (keys ``cell.weight_ih`` ...)
    load into it: the same tensors under ``gru.weight_ih_l0`` ...
    """

    def __init__(
        self, in_dim: int, hidden: int = 64, activation: str = "relu", layer_norm: bool = True, init: str = "orthogonal"
    ):
        super().__init__()
        self.encoder = MLP(in_dim, None, hidden, 1, activation, layer_norm, init=init)
        # same parameter shapes and init draws (uniform, in this order) as the nn.GRUCell it replaced
        self.gru = nn.GRU(hidden, hidden, batch_first=True)
        self.hidden = hidden

    def forward(
        self, x: torch.Tensor, h0: Optional[torch.Tensor] = None, starts: Optional[torch.Tensor] = None
    ) -> torch.Tensor:
        return gru_unroll(self.gru, self.encoder(x), h0, starts)  # one batched encoder call for all L steps

    def _load_from_state_dict(self, state_dict, prefix, *args, **kwargs):
        for name in GRU_PARAMS:
            old, new = f"{prefix}cell.{name}", f"{prefix}gru.{name}_l0"
            if old in state_dict and new not in state_dict:
                state_dict[new] = state_dict.pop(old)
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)


class MAPPOActor(AgentNetwork):
    """MAPPO/IPPO's plain actor: MLP trunk (or, with ``recurrent``, a :class:`GRUTrunk`) and a
    linear head; outputs are the categorical logits or the Gaussian mean.

    Args:
        in_dim: ``D``, the observation size; n_actions: ``A``.
        hidden: width ``H``; layers: hidden layers of the MLP trunk (the GRU trunk's
            encoder has one).
        activation, layer_norm: see :class:`MLP`.
        out_gain: orthogonal gain of the head (MAPPO ``gain`` 0.01).
        recurrent: GRU trunk, state ``[M, H]``.
        init: weight init of the linear layers (:func:`init_linear`); the GRU keeps PyTorch's.
    """

    def __init__(
        self,
        in_dim: int,
        n_actions: int,
        hidden: int = 64,
        layers: int = 2,
        activation: str = "relu",
        layer_norm: bool = True,
        out_gain: float = 0.01,
        recurrent: bool = False,
        init: str = "orthogonal",
    ):
        super().__init__()
        self.recurrent = recurrent
        self.state_size = hidden if recurrent else 0
        if recurrent:
            self.trunk = GRUTrunk(in_dim, hidden, activation, layer_norm, init)
        else:
            self.trunk = MLP(in_dim, None, hidden, layers, activation, layer_norm, init=init)
        self.head = MLP(hidden, n_actions, layers=0, layer_norm=False, out_gain=out_gain, init=init)

    def forward(self, x, h0=None, starts=None):
        if not self.recurrent:  # rows as [M * L, D]: inductor compiled the [M, 1, D] form 2.6x slower than eager
            return self.head(self.trunk(x.reshape(-1, x.shape[-1]))).view(*x.shape[:-1], -1), None
        states = self.trunk(x, h0, starts)
        return self.head(states), states


def build_mappo_actor(c: Dict[str, Any], n_actions: int) -> MAPPOActor:
    """The actor from :class:`~marl.algos.ppo.PPOModule`'s ``model_config`` (``obs_dim``, ``hidden``,
    ``layers``, ``activation``, ``layer_norm``, ``policy_gain``, ``recurrent``, ``init``)."""
    return MAPPOActor(
        int(c["obs_dim"]),
        n_actions,
        int(c["hidden"]),
        int(c.get("layers", 2)),
        c.get("activation", "relu"),
        bool(c.get("layer_norm", True)),
        float(c.get("policy_gain", 0.01)),
        bool(c.get("recurrent", False)),
        c.get("init", "orthogonal"),
    )
