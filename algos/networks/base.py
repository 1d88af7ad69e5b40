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
* ``sequence(x [M, L, D], lengths [M] | None) -> out [M, L, A]``: whole episodes from the
  zero state, of which only the first ``lengths[m]`` steps are used; a network may skip the
  padding after them (:func:`packed_sequence`), whose outputs are then zero.

Feed-forward networks ignore ``h``/``h0``/``starts`` and return ``h' = None``.
"""

from __future__ import annotations

from typing import Optional, Sequence, Tuple

import torch
from torch import nn
from torch.nn import functional as F
from torch.nn.utils.rnn import PackedSequence, pack_padded_sequence, pad_packed_sequence


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

    def forward(
        self, x: torch.Tensor, h0: Optional[torch.Tensor] = None, starts: Optional[torch.Tensor] = None
    ) -> Tuple[torch.Tensor, Optional[torch.Tensor]]:
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

    def unroll(
        self, x: torch.Tensor, h0: Optional[torch.Tensor] = None, starts: Optional[torch.Tensor] = None
    ) -> torch.Tensor:
        """``x [M, L, D]`` from ``h0 [M, S]`` with resets before the steps where ``starts [M, L]``
        -> ``[M, L, A]``."""
        return self(x, h0, starts)[0] if self.state_size else self(x)[0]

    def sequence(self, x: torch.Tensor, lengths: Optional[torch.Tensor] = None) -> torch.Tensor:
        """Whole episodes from the zero state: ``x [M, L, D]`` -> ``[M, L, A]``.

        ``lengths [M]`` (int, ``1 <= lengths <= L``): steps of each row that are used. A network
        with ``skips_padding`` computes only those (:meth:`packed`; zero outputs after them);
        others see the padding zeroed. Either way the first ``lengths[m]`` outputs equal :meth:`unroll`'s.
        """
        if lengths is not None and self.skips_padding:
            return packed_sequence(x, lengths, self.packed)
        if lengths is not None:  # padding may hold anything (even NaN), which would reach the weight gradients
            x = torch.where(step_mask(lengths, x.shape[1]).unsqueeze(-1), x, 0.0)
        return self.unroll(x)

    skips_padding: bool = False  # the network implements packed()

    def packed(self, x: torch.Tensor, batch_sizes: torch.Tensor) -> torch.Tensor:
        """Whole episodes from the zero state in ``PackedSequence`` layout: ``x [sum(lengths), D]``
        (time-major, ``batch_sizes[t]`` rows at step ``t``, rows sorted by decreasing length) ->
        ``[sum(lengths), A]``. Implemented by networks with ``skips_padding``."""
        raise NotImplementedError(f"{type(self).__name__} does not skip padding (skips_padding = False)")


def step_mask(lengths: torch.Tensor, steps: int) -> torch.Tensor:
    """``[M, steps]`` bool, true at the first ``lengths[m]`` steps of row ``m``."""
    return torch.arange(steps, device=lengths.device) < lengths.unsqueeze(-1)


def packed_sequence(x: torch.Tensor, lengths: torch.Tensor, fn) -> torch.Tensor:
    """``fn`` on the first ``lengths[m]`` steps of each row of ``x [M, L, D]`` only; padding is zero.

    ``fn(data [sum(lengths), D], batch_sizes) -> [sum(lengths), A]`` (:meth:`AgentNetwork.packed`).
    Value-decomposition batches are padded to their longest episode (often 2-3x the mean
    length), so this skips most of the work of a training unroll.

    Returns:
        ``[M, L, A]``, zero after ``lengths[m]``.
    """
    p = pack_padded_sequence(x, lengths.cpu(), batch_first=True, enforce_sorted=False)
    out = PackedSequence(fn(p.data, p.batch_sizes), p.batch_sizes, p.sorted_indices, p.unsorted_indices)
    return pad_packed_sequence(out, batch_first=True, total_length=x.shape[1])[0]


def gru_unroll(
    gru: nn.GRU, z: torch.Tensor, h0: Optional[torch.Tensor], starts: Optional[torch.Tensor]
) -> torch.Tensor:
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
        out, hn = gru(z[:, t : t + 1], h.unsqueeze(0).contiguous())
        h = hn.squeeze(0)
        outs.append(out)
    return torch.cat(outs, 1)


def packed_gru(gru: nn.GRU, z: torch.Tensor, batch_sizes: torch.Tensor) -> torch.Tensor:
    """A one-layer ``nn.GRU`` from the zero state over packed steps: ``z [sum(lengths), H_in]`` in
    ``PackedSequence`` layout (time-major, ``batch_sizes[t]`` rows at step ``t``) -> states ``[sum(lengths), H]``.

    The same gate equations, weights and operation order as ``nn.GRU`` (Cho et al. 2014, arXiv 1406.1078,
    as PyTorch implements it), written out because ``nn.GRU`` on a packed sequence narrows its whole input
    at every step, and autograd then builds a zero-filled gradient of the whole input per step (a backward
    quadratic in the episode length). Here the input gates of all steps are one matmul, split per step,
    and the backward joins the per-step pieces once.
    """
    H = gru.hidden_size
    gi = F.linear(z, gru.weight_ih_l0, gru.bias_ih_l0)
    h, states = z.new_zeros(int(batch_sizes[0]), H), []
    for gi_t in gi.split(batch_sizes.tolist()):
        h = h[: gi_t.shape[0]]  # rows are sorted by decreasing length: the finished ones are last
        i_r, i_z, i_n = gi_t.chunk(3, 1)
        h_r, h_z, h_n = F.linear(h, gru.weight_hh_l0, gru.bias_hh_l0).chunk(3, 1)
        r, u = torch.sigmoid(i_r + h_r), torch.sigmoid(i_z + h_z)
        n = torch.tanh(i_n + r * h_n)
        h = (h - n) * u + n  # (1 - u) n + u h, in ATen's order
        states.append(h)
    return torch.cat(states)


def recurrent_layer(
    layer: nn.Module, z: torch.Tensor, h0: Optional[torch.Tensor] = None, starts: Optional[torch.Tensor] = None
) -> torch.Tensor:
    """The middle layer of pymarl-style agents on ``z [M, L, H]``: an ``nn.GRU`` unrolled by
    :func:`gru_unroll`, or, for the feed-forward variant, ``ReLU(layer(z))`` (no state)."""
    if isinstance(layer, nn.GRU):
        return gru_unroll(layer, z, h0, starts)
    return F.relu(layer(z))


def packed_layer(layer: nn.Module, z: torch.Tensor, batch_sizes: torch.Tensor) -> torch.Tensor:
    """:func:`recurrent_layer` on packed rows ``z [sum(lengths), H]`` from the zero state: the GRU by
    :func:`packed_gru`, the feed-forward variant ``ReLU(layer(z))`` row by row."""
    if isinstance(layer, nn.GRU):
        return packed_gru(layer, z, batch_sizes)
    return F.relu(layer(z))


class RecurrentCore(nn.Module):
    """``GRU(H)`` or, with ``recurrent=False``, ``FC(H -> H) -> ReLU`` (no state); see :func:`recurrent_layer`."""

    def __init__(self, hidden: int, recurrent: bool):
        super().__init__()
        self.recurrent = recurrent
        self.cell = nn.GRU(hidden, hidden, batch_first=True) if recurrent else nn.Linear(hidden, hidden)

    def forward(
        self, z: torch.Tensor, h0: Optional[torch.Tensor] = None, starts: Optional[torch.Tensor] = None
    ) -> torch.Tensor:
        """``z [M, L, H]`` -> ``[M, L, H]``."""
        return recurrent_layer(self.cell, z, h0, starts)

    def packed(self, z: torch.Tensor, batch_sizes: torch.Tensor) -> torch.Tensor:
        """Whole episodes from the zero state in packed layout: ``z [sum(lengths), H]`` -> ``[sum(lengths), H]``."""
        return packed_layer(self.cell, z, batch_sizes)
