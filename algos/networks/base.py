"""The agent-network protocol every algorithm calls, and the one GRU unroll every recurrent network uses.

An agent network maps an agent's input vector to one output per action
(logits for PPO, Q-values for value decomposition), optionally carrying a
recurrent state between steps. PPO's actor and value decomposition's agent
network call it the same way (``docs/algorithms/entity_networks.md``,
"The agent-network protocol"):

* ``state_size``: ``S``, the size of the carried state (0: feed-forward).
* ``initial_state(batch_shape)``: zeros ``[*batch_shape, S]`` (``None`` when ``S == 0``).
* ``step(x [M, D], h [M, S] | None) -> (out [M, A], h' [M, S] | None)``: one acting step.
* ``unroll(x [M, L, D], h0 [M, S] | None, starts [M, L] bool | None) -> out [M, L, A]``:
  a training sequence; where ``starts[m, t]`` the state is zeroed before step ``t``
  (an episode began there). ``h0 = None`` is the zero state.

Feed-forward networks ignore ``h``/``h0``/``starts`` and return ``h' = None``.
"""
from __future__ import annotations

from typing import Optional, Sequence, Tuple

import torch
from torch import nn
from torch.nn import functional as F


class AgentNetwork(nn.Module):
    """Base class of the agent networks (the protocol in the module docstring).

    A subclass sets ``state_size`` and implements :meth:`forward`, one call over a
    whole sequence that also returns the state after every step; :meth:`step` and
    :meth:`unroll` are built on it, so acting and training run the same code. A
    network may instead override :meth:`step` and :meth:`unroll` themselves, as
    long as unrolling a sequence equals stepping through it with the same resets
    (``tests/test_agent_networks.py`` checks every registered network).
    """

    state_size: int = 0

    def forward(self, x: torch.Tensor, h0: Optional[torch.Tensor] = None,
                starts: Optional[torch.Tensor] = None) -> Tuple[torch.Tensor, Optional[torch.Tensor]]:
        """``x [M, L, D]``, ``h0 [M, S]``, ``starts [M, L]`` -> outputs ``[M, L, A]`` and the
        state after each step ``[M, L, S]`` (``None`` for feed-forward networks)."""
        raise NotImplementedError(f"{type(self).__name__} must implement forward() or step() and unroll()")

    def initial_state(self, batch_shape: Sequence[int]) -> Optional[torch.Tensor]:
        """Zero state ``[*batch_shape, S]``; ``None`` for a feed-forward network."""
        return torch.zeros(*batch_shape, self.state_size) if self.state_size else None

    def step(self, x: torch.Tensor, h: Optional[torch.Tensor] = None) -> Tuple[torch.Tensor, Optional[torch.Tensor]]:
        """One step: ``x [M, D]``, ``h [M, S]`` (``None``: zero state) -> ``out [M, A]``, ``h' [M, S]`` or ``None``."""
        out, states = self(x.unsqueeze(1), h if self.state_size else None)  # feed-forward: h is ignored
        return out.squeeze(1), None if states is None else states[:, -1]

    def unroll(self, x: torch.Tensor, h0: Optional[torch.Tensor] = None,
               starts: Optional[torch.Tensor] = None) -> torch.Tensor:
        """``x [M, L, D]`` from ``h0 [M, S]`` with resets before the steps where ``starts [M, L]``
        -> ``[M, L, A]``."""
        return self(x, h0, starts)[0] if self.state_size else self(x)[0]

    def sequence(self, x: torch.Tensor) -> torch.Tensor:
        """Whole episodes from the zero state: ``[M, L, D] -> [M, L, A]``."""
        return self.unroll(x)


def gru_unroll(gru: nn.GRU, z: torch.Tensor, h0: Optional[torch.Tensor], starts: Optional[torch.Tensor]) -> torch.Tensor:
    """Run a one-layer ``batch_first`` GRU over ``z [M, L, H_in]`` from ``h0 [M, H]`` (zeros if ``None``);
    where ``starts[m, t]`` the state is zeroed before step ``t``. Returns the states ``[M, L, H]``.

    Without a reset inside the sequence (after step 0) this is one fused ``nn.GRU``
    call; otherwise the GRU runs one step at a time. Every recurrent agent network
    unrolls through this function.
    """
    M, L = z.shape[:2]
    h = torch.zeros(M, gru.hidden_size, dtype=z.dtype, device=z.device) if h0 is None else h0
    if starts is not None:
        h = h * (~starts[:, 0]).unsqueeze(-1).to(h.dtype)
    if starts is None or L == 1 or not bool(starts[:, 1:].any()):
        return gru(z, h.unsqueeze(0).contiguous())[0]
    outs = []
    for t in range(L):
        if t:
            h = h * (~starts[:, t]).unsqueeze(-1).to(h.dtype)
        out, hn = gru(z[:, t:t + 1], h.unsqueeze(0).contiguous())
        h = hn.squeeze(0)
        outs.append(out)
    return torch.cat(outs, 1)


def recurrent_layer(layer: nn.Module, z: torch.Tensor, h0: Optional[torch.Tensor] = None,
                    starts: Optional[torch.Tensor] = None) -> torch.Tensor:
    """The middle layer of pymarl-style agents on ``z [M, L, H]``: an ``nn.GRU`` unrolled by
    :func:`gru_unroll`, or, for the feed-forward variant, ``ReLU(layer(z))`` (no state)."""
    if isinstance(layer, nn.GRU):
        return gru_unroll(layer, z, h0, starts)
    return F.relu(layer(z))


class RecurrentCore(nn.Module):
    """``GRU(H)`` or, with ``recurrent=False``, ``FC(H -> H) -> ReLU`` (no state); see :func:`recurrent_layer`."""

    def __init__(self, hidden: int, recurrent: bool):
        super().__init__()
        self.recurrent = recurrent
        self.cell = nn.GRU(hidden, hidden, batch_first=True) if recurrent else nn.Linear(hidden, hidden)

    def forward(self, z: torch.Tensor, h0: Optional[torch.Tensor] = None, starts: Optional[torch.Tensor] = None) -> torch.Tensor:
        """``z [M, L, H]`` -> ``[M, L, H]``."""
        return recurrent_layer(self.cell, z, h0, starts)
