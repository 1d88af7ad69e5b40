"""HPN and DPN agent networks: permutation-invariant inputs, permutation-equivariant outputs.

Source: Hao et al. 2023, "Boosting Multiagent Reinforcement Learning via
Permutation Invariant and Permutation Equivariant Networks" (ICLR; arXiv
2203.05285, first titled "Breaking the Curse of Dimensionality in Multiagent
State Space"); its official code (pymarl3), agent ``hpns_rnn``. Equations and
tested properties: ``docs/algorithms/entity_networks.md``.

For each entity type ``t`` with features ``x_j [d_t]`` a generator gives a code
``z_j = g(x_j)``; parameters are linear in the code:

* **HPN** (``generator="mlp"``): ``z_j = ReLU(W1 x_j + b1)`` (``K = hyper_dim``),
  so ``W_in(x_j) = reshape(A z_j + c)`` is a two-layer hypernetwork.
* **DPN** (``generator="bank"``): ``z_j = softmax(S x_j)`` over a bank of ``K``
  modules, ``W_in(x_j) = sum_k z_jk W_k`` (a soft module selection, our reading of
  the paper's DPN: ``docs/algorithms/entity_networks.md``;
  ``hard=True`` selects ``argmax`` in the forward pass with a straight-through
  gradient).

PI input layer: ``e = sum_j x_j^T W_in(x_j)`` (no per-entity bias, so an
all-zero entity adds exactly 0). PE output layer for entity-targeted actions:
``q_j = mean_heads(h . w_out(x_j) + b_out(x_j))``.

How it is computed (same values up to float rounding; ``tests/test_entity_fast_paths.py``
compares outputs and gradients with the per-entity equations):

* ``W_in`` is linear in ``z``, so ``e = A . vec(sum_j x_j z_j^T) + C . sum_j x_j``:
  one batched matmul for the pooled outer products and one matmul with ``A``, never
  one ``[d, H]`` matrix per entity (:meth:`EntityHyper.pool`).
* The output hypernetworks and the mean over heads fold into one ``[H + 1, K + 1]``
  matrix, so ``q_j = [z_j, 1] . u`` with ``u = [h, 1] G`` once per row
  (:meth:`EntityHyper.folded_output`).
* Rows (agent steps) whose entities of a type are all zero -- padding past an
  episode's end, dead agents, no unit of the type in sight -- pool to exactly 0 and
  have the code ``g(0)`` in every slot: they skip the hypernetwork work of that type
  (:func:`entity_support`).
* Features that are zero in every entity of a type in the batch -- the unused slots of
  a unit-type one-hot, 5 of SMAX's 13 per unit on single-type maps -- multiply their
  weight blocks by 0, so the code layer and the pooled matmul leave them out
  (:func:`entity_support`; 38% less input-layer work on 5m_vs_6m).
"""

from __future__ import annotations

from typing import Any, Dict, Optional, Tuple

import torch
from torch import nn
from torch.nn import functional as F

from marl.algos.networks.base import AgentNetwork, RecurrentCore
from marl.algos.networks.entity import EntityInputs

GENERATORS = ("mlp", "bank")
Codes = Tuple[Optional[torch.Tensor], torch.Tensor]  # (rows holding an entity of the type or None: all, their codes)


class Merger(nn.Module):
    """Merge ``heads`` embeddings ``[..., heads, H]`` -> ``[..., H]`` by a softmax over heads
    of a learned per-head, per-feature weight (pymarl3 ``Merger``); identity for one head."""

    def __init__(self, heads: int, hidden: int):
        super().__init__()
        self.heads = heads
        self.weight = nn.Parameter(torch.ones(1, heads, hidden)) if heads > 1 else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.weight is None:
            return x.squeeze(-2)
        return (F.softmax(self.weight, dim=1) * x).sum(-2)


class EntityHyper(nn.Module):
    """Generated per-entity weights for one entity type.

    Args:
        d: features per entity ``d_t``.
        hidden: ``H``; ``heads``: embedding heads (input weights ``[d, H*heads]``).
        targeted: also generate output weights ``[H*heads]`` and bias ``[heads]``
            for the actions that target these entities.
        generator: ``"mlp"`` (HPN hypernetwork, code size ``hyper_dim``) or ``"bank"``
            (DPN module selection over ``bank_size`` modules).
    """

    def __init__(
        self,
        d: int,
        hidden: int,
        heads: int,
        targeted: bool,
        generator: str = "mlp",
        hyper_dim: int = 64,
        bank_size: int = 4,
        hard: bool = False,
    ):
        super().__init__()
        if generator not in GENERATORS:
            raise ValueError(f"generator must be one of {GENERATORS}, got {generator!r}")
        self.d, self.hidden, self.heads, self.generator, self.hard = d, hidden, heads, generator, hard
        k = hyper_dim if generator == "mlp" else bank_size
        bias = generator == "mlp"  # a bank is a pure convex combination of its modules
        self.code = nn.Linear(d, k)
        self.w_in = nn.Linear(k, d * hidden * heads, bias=bias)
        self.w_out = nn.Linear(k, hidden * heads, bias=bias) if targeted else None
        self.b_out = nn.Linear(k, heads, bias=bias) if targeted else None

    def codes(self, x: torch.Tensor, cols: Optional[torch.Tensor] = None) -> torch.Tensor:
        """``x [..., m, d]`` -> codes ``z [..., m, K]``. With ``cols`` (:func:`entity_support`), ``x`` holds only
        those features ``[..., m, len(cols)]``; the others are zero in every entity and add nothing."""
        if cols is None:
            s = self.code(x)
        else:
            s = F.linear(x, self.code.weight.index_select(1, cols), self.code.bias)
        if self.generator == "mlp":
            return F.relu(s)
        p = F.softmax(s, -1)
        if not self.hard:
            return p
        hard = F.one_hot(p.argmax(-1), p.shape[-1]).to(p.dtype)
        return hard + p - p.detach()  # straight-through: hard forward, soft gradient

    def input_weights(self, z: torch.Tensor) -> torch.Tensor:
        """Explicit ``W_in(x_j)``: ``[..., m, d, H*heads]`` (for tests; :meth:`pool` never builds it)."""
        return self.w_in(z).view(*z.shape[:-1], self.d, self.hidden * self.heads)

    def pool(self, x: torch.Tensor, z: torch.Tensor, cols: Optional[torch.Tensor] = None) -> torch.Tensor:
        """PI input layer ``sum_j x_j^T W_in(x_j)``: ``x [..., m, d]``, ``z [..., m, K]`` -> ``[..., heads, H]``;
        ``x`` and ``cols`` as in :meth:`codes` (a feature zero in every entity adds exactly 0: its weight block drops out).

        ``W_in`` is linear in the code, so the sum over entities is taken first, on the
        ``[d, K]`` outer products ``x_j z_j^T`` (one batched matmul), then contracted with
        ``A`` in one matmul: ``d*K*H`` per row instead of ``m*d*K*H``. The bias stays a
        separate ``(sum_j x_j) C``: folding it in as a code column of ones makes ``K + 1``
        columns, which CPU matmul kernels run about 30% slower than ``K``.
        """
        lead, K = x.shape[:-2], z.shape[-1]
        a = self.w_in.weight.view(self.d, -1, K)  # [d, H*heads, K]: one block per feature
        c = None if self.w_in.bias is None else self.w_in.bias.view(self.d, -1)
        if cols is not None:
            a, c = a.index_select(0, cols), None if c is None else c.index_select(0, cols)
        d = x.shape[-1]
        # x^T made contiguous: the batched matmul runs ~30% faster than on the transposed view
        s = torch.matmul(x.transpose(-1, -2).contiguous(), z).reshape(*lead, d * K)
        e = s @ a.transpose(1, 2).reshape(d * K, -1)
        if c is not None:
            e = e + x.sum(-2) @ c
        return e.view(*lead, self.heads, self.hidden)

    def folded_output(self) -> torch.Tensor:
        """The PE output layer as one ``[H + 1, K']`` matrix ``G``: ``q_j = [z_j, 1] . ([h, 1] G)``.

        ``h . w_out(z) + b_out(z)`` is bilinear in ``([h, 1], [z, 1])`` and the mean over heads
        is linear, so both hypernetworks and the head mean fold into ``G`` (the mean is taken on
        the weights, before the matmul). Without biases (DPN banks) ``G`` is ``[H + 1, K]``.
        """
        K = self.w_out.in_features
        wo = self.w_out.weight.view(self.hidden, self.heads, K).mean(1)  # [H, K]
        wb = self.b_out.weight.mean(0, keepdim=True)  # [1, K]
        if self.w_out.bias is None:
            return torch.cat([wo, wb], 0)
        co = self.w_out.bias.view(self.hidden, self.heads).mean(1, keepdim=True)  # [H, 1]
        cb = self.b_out.bias.mean().view(1, 1)
        return torch.cat([torch.cat([wo, co], 1), torch.cat([wb, cb], 1)], 0)

    def head_vector(self, h: torch.Tensor) -> torch.Tensor:
        """``h [..., H]`` -> ``u = [h, 1] G`` ``[..., K']`` (:meth:`folded_output`), shared by all entities."""
        g = self.folded_output()
        return torch.addmm(g[-1], h.reshape(-1, self.hidden), g[:-1]).view(*h.shape[:-1], g.shape[1])

    def pair(self, z: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
        """``q_j = [z_j, 1] . u``: codes ``z [..., m, K]``, ``u [..., K']`` -> ``[..., m]``. An
        elementwise product and sum, not a batched matmul: its backward would be ``[m, 1] x [1, K]``
        outer products, which batched matmul computes slowly on CPU."""
        K = z.shape[-1]
        q = (z * u[..., None, :K]).sum(-1)
        return q + u[..., K:] if u.shape[-1] > K else q

    def targeted_values(self, h: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
        """PE output layer: ``h [..., H]``, ``z [..., m, K]`` -> ``q [..., m]``, the mean over heads
        of ``h . w_out(x_j) + b_out(x_j)`` (through :meth:`folded_output`)."""
        return self.pair(z, self.head_vector(h))

    def zero_code(self, like: torch.Tensor) -> torch.Tensor:
        """The code ``[K]`` of an all-zero entity (``g(0)``, a padding slot or a dead or unseen unit):
        one evaluation stands in for every such entity."""
        return self.codes(like.new_zeros(1, self.d))[0]

    def zero_values(self, h: torch.Tensor) -> torch.Tensor:
        """``h [R, H]`` -> ``[R]``, the PE output of an all-zero entity: ``[h, 1] (G [g(0), 1])``,
        a matrix-vector product (no per-entity work)."""
        z0 = self.zero_code(h)
        g = self.folded_output()
        v = g[:, : z0.shape[0]] @ z0
        if g.shape[1] > z0.shape[0]:
            v = v + g[:, -1]
        return torch.addmv(v[-1], h, v[:-1])


class HPNNet(AgentNetwork):
    """HPN (or DPN) recurrent agent network (``hpns_rnn_agent``).

    ``x = ReLU(FC(own) + id_embedding + FC(last action) + Merger(sum_t e_t))``,
    ``h = GRU(x, h)``, ``out = [FC(h) -> n_normal | q_t for each targeted type]``
    in the env's action order. Q-values for value decomposition, logits for PPO.

    Args:
        inputs: the :class:`EntityInputs` of the module's group.
        hidden: ``H`` (64); ``hyper_dim``: ``K`` (64); ``heads``: embedding heads (1).
        generator: ``"mlp"`` (HPN) or ``"bank"`` (DPN, ``bank_size`` modules, ``hard``).
        recurrent: GRU core (else ``FC -> ReLU``).
        id_table: rows of the agent-id embedding; at least the largest team the
            weights will act for (transfer), raised to the team size if smaller.

    An :class:`~marl.algos.networks.base.AgentNetwork`: state ``[M, H]`` (none
    without ``recurrent``), outputs ``[..., n_normal + sum_t m_t]``.
    """

    def __init__(
        self,
        inputs: EntityInputs,
        hidden: int = 64,
        hyper_dim: int = 64,
        heads: int = 1,
        generator: str = "mlp",
        bank_size: int = 4,
        hard: bool = False,
        recurrent: bool = True,
        id_table: int = 32,
    ):
        super().__init__()
        self.inputs, self.hidden, self.recurrent = inputs, hidden, recurrent
        self.state_size = hidden if recurrent else 0
        targeted = {t for t, _, _ in inputs.targets}
        self.own = nn.Linear(max(inputs.own_dim, 1), hidden)
        self.agent_embedding = nn.Embedding(max(id_table, inputs.id_dim), hidden) if inputs.id_dim else None
        # the last action enters as its normal-action one-hot plus one "targeted a <type>" bit per
        # targeted type, so the weights do not depend on the entity counts (transfer)
        self.last_action = (
            nn.Linear(inputs.n_normal + len(inputs.targets), hidden, bias=False) if inputs.last_action_dim else None
        )
        self.hyper = nn.ModuleDict(
            {
                t: EntityHyper(inputs.dims[t], hidden, heads, t in targeted, generator, hyper_dim, bank_size, hard)
                for t in inputs.types
            }
        )
        self.merger = Merger(heads, hidden)
        self.core = RecurrentCore(hidden, recurrent)
        self.normal = nn.Linear(hidden, inputs.n_normal) if inputs.n_normal else None

    def embed(self, x: torch.Tensor) -> Tuple[torch.Tensor, Dict[str, Codes]]:
        """PI input layer on rows ``x [R, D]`` -> ``[R, H]`` and, per entity type, the rows that
        hold an entity and their codes (:func:`entity_support`)."""
        own, ents, agent, last = self.inputs.split(x)
        if own.shape[-1] == 0:
            own = torch.zeros(*own.shape[:-1], 1, dtype=x.dtype, device=x.device)
        e = self.own(own)
        if agent is not None:
            e = e + self.agent_embedding(agent)
        if last is not None:
            e = e + self.last_action(self.last_action_summary(last))
        codes: Dict[str, Codes] = {}
        for t, v in ents.items():
            rows, xa, cols = entity_support(v)
            if cols is not None:
                xa = xa.index_select(-1, cols)  # read once, by the code layer and the pool
            za = self.hyper[t].codes(xa, cols)
            codes[t] = (rows, za)
            if xa.shape[0]:
                # the merger is linear, so merging each type's embedding and adding equals
                # merging their sum; rows whose entities of this type are all zero pool to exactly 0
                merged = self.merger(self.hyper[t].pool(xa, za, cols))
                e = e + merged if rows is None else e.index_add(0, rows, merged)
        return F.relu(e), codes

    def last_action_summary(self, last: torch.Tensor) -> torch.Tensor:
        """Last action one-hot ``[..., A]`` -> ``[..., n_normal + n_targeted_types]`` (count-independent)."""
        parts = [last[..., : self.inputs.n_normal]]
        parts += [last[..., f : f + m].sum(-1, keepdim=True) for _, f, m in self.inputs.targets]
        return torch.cat(parts, -1)

    def head(self, h: torch.Tensor, codes: Dict[str, Codes]) -> torch.Tensor:
        """``h [R, H]`` -> ``[R, n_normal + sum_t m_t]`` (normal, then PE outputs in action order).
        Rows without an entity of a type get the value of the all-zero code for all its slots."""
        parts = [self.normal(h)] if self.normal is not None else []
        for t, _, m in self.inputs.targets:
            hyper, (rows, za) = self.hyper[t], codes[t]
            if rows is None:
                parts.append(hyper.targeted_values(h, za))
                continue
            q = hyper.zero_values(h).unsqueeze(-1).expand(-1, m)
            parts.append(q.index_put((rows,), hyper.targeted_values(h.index_select(0, rows), za)))
        return torch.cat(parts, -1)

    # the input layer and the head work row by row around the GRU, so a padded batch's used steps can be
    # packed (AgentNetwork.sequence): value decomposition then skips its padding, as for the plain network
    skips_padding = True

    def packed(self, x: torch.Tensor, batch_sizes: torch.Tensor) -> torch.Tensor:
        """Whole episodes from the zero state in packed layout: ``x [sum(lengths), D]`` -> ``[sum(lengths), A]``
        (:meth:`~marl.algos.networks.base.AgentNetwork.packed`)."""
        z, codes = self.embed(x)
        return self.head(self.core.packed(z, batch_sizes), codes)

    def forward(self, x: torch.Tensor, h0: Optional[torch.Tensor] = None, starts: Optional[torch.Tensor] = None):
        """``x [M, L, D]`` -> outputs ``[M, L, A]``, states ``[M, L, H]`` (``None`` without recurrence)."""
        M, L = x.shape[:2]
        z, codes = self.embed(x.reshape(M * L, -1))  # steps as rows: entity rows are picked across time
        states = self.core(z.view(M, L, -1), h0, starts)
        out = self.head(states.reshape(M * L, -1), codes)
        return out.view(M, L, -1), (states if self.recurrent else None)


def entity_support(v: torch.Tensor) -> Tuple[Optional[torch.Tensor], torch.Tensor, Optional[torch.Tensor]]:
    """Entities ``v [R, m, d]`` -> ``(rows, v[rows], cols)``: the indices of the rows with a nonzero
    feature and of the features nonzero in some entity (each ``None`` when all are), from one ``|v|``.

    An all-zero row (padding past an episode's end, a dead agent, no unit of the type in sight:
    most rows of a SMAX batch) adds exactly 0 to the pooled input and has the code ``g(0)`` in
    every slot, so its hypernetwork work is skipped. A feature that is zero in every entity
    multiplies its input-weight block by 0 (the unused slots of a unit-type one-hot: 5 of the 13
    features per unit on 5m_vs_6m, all marines), so it is left out. NaN counts as nonzero.
    """
    if v.numel() == 0:
        return None, v, None
    a = v.abs()
    nz = nonzero_along(a.flatten(1))
    live = nonzero_along(a.reshape(-1, a.shape[-1]).t())  # zero rows add nothing: all rows or the kept ones agree
    cols = None if bool(live.all()) else live.nonzero().squeeze(1)
    if bool(nz.all()):
        return None, v, cols
    rows = nz.nonzero().squeeze(1)
    return rows, v.index_select(0, rows), cols


def nonzero_along(a: torch.Tensor) -> torch.Tensor:
    """``a = |v| [n, k]`` -> ``[n]`` bool: row ``i`` of ``v`` holds a nonzero (or NaN) value.

    A matrix-vector product of ``|v|`` with ones instead of ``(v != 0).any(1)``: sums of
    non-negative numbers are 0 only when every term is (inf and NaN stay nonzero), and on
    CPU the product runs about 20x faster than the boolean reduction (75 vs 1,500 us for
    SMAX-sized batches), which this network does for every entity type of every forward.
    """
    return torch.mv(a, a.new_ones(a.shape[1])) != 0


def build_hpn(inputs: EntityInputs, c: Dict[str, Any], generator: str = "mlp") -> HPNNet:
    """HPN (``generator="mlp"``) or DPN (``"bank"``) from a module's ``model_config``: ``hidden``,
    ``recurrent`` and the ``hpn_*`` / ``dpn_*`` keys (``configs/engine.yaml``)."""
    return HPNNet(
        inputs,
        hidden=int(c.get("hidden", 64)),
        hyper_dim=int(c.get("hpn_hyper_dim", 64)),
        heads=int(c.get("hpn_heads", 1)),
        generator=generator,
        bank_size=int(c.get("dpn_bank_size", 4)),
        hard=bool(c.get("dpn_hard", False)),
        recurrent=bool(c.get("recurrent", True)),
        id_table=int(c.get("hpn_id_table", 32)),
    )


def build_dpn(inputs: EntityInputs, c: Dict[str, Any]) -> HPNNet:
    """DPN: :func:`build_hpn` with the module-bank generator."""
    return build_hpn(inputs, c, generator="bank")


HPN_KEYS = ("hpn_hyper_dim", "hpn_heads", "hpn_id_table", "dpn_bank_size", "dpn_hard")  # config keys it reads
