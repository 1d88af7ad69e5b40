"""ASN: action semantics network.

Source: Wang et al. 2020, "Action Semantics Network: Considering the Effects of
Actions in Multiagent Systems" (ICLR, arXiv 1907.11461); its official code's
``asn_rnn`` agent (also in pymarl3, the code of Hao et al. 2022). Equations and
tested properties: ``docs/algorithms/entity_networks.md``.

Actions split into those that affect only the agent (``A_in``: no-op, stop,
moves) and those that act on entity ``j`` (``A_out``: attack ``j``, heal ``j``).

* **Environment stream** (O2A_i): ``h_env = GRU(FC(ReLU(FC(o_i))))`` on the
  agent's whole input (the official code) or, with ``env_input="non_target"``,
  on the input with the action-targeted entities' features zeroed.
  ``Q(A_in) = FC(h_env)``.
* **Entity stream** (O2A_i,j): ``h_j = GRU(FC(ReLU(FC(x_j))))`` for each
  targeted entity ``j``, its own hidden state per entity.
* **Pairing**: ``Q(a_j) = <h_env, h_j>``.

``entity_modules`` chooses how entity-stream modules are shared: ``shared`` (one
module per entity type, the official ``asn_rnn``), ``unit_type`` (one module per
unit type read from the entity's unit-type one-hot, as in the official
``asn_diff_type_agent``; needs ``unit_type`` in the layout) or ``separate``
(one module per entity slot, ``asn_wo_share_diff_type_agent``). The paper's
ASN-MI / ASN-MS names are not used: their definitions were not checked
against the paper.

The same outputs serve as Q-values (IQL/VDN/QMIX) and as logits (IPPO/MAPPO).
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional

import torch
from torch import nn
from torch.nn import functional as F

from marl.algos.networks.base import AgentNetwork, RecurrentCore
from marl.algos.networks.config import ENTITY_MODULES, ENV_INPUTS
from marl.algos.networks.entity import EntityInputs
from marl.errors import MarlError


class Stream(nn.Module):
    """``FC(d -> A) -> ReLU -> FC(A -> A) -> GRU(A)`` (or ``FC -> ReLU`` without recurrence)."""

    def __init__(self, d: int, hidden: int, recurrent: bool):
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(d, hidden), nn.Linear(hidden, hidden)
        self.core = RecurrentCore(hidden, recurrent)

    def forward(self, x: torch.Tensor, h0=None, starts=None) -> torch.Tensor:
        """``x [M, L, d]`` -> ``[M, L, A]``."""
        return self.core(self.fc2(F.relu(self.fc1(x))), h0, starts)

    def packed(self, x: torch.Tensor, batch_sizes: torch.Tensor) -> torch.Tensor:
        """Whole sequences from the zero state in packed layout: ``x [sum(lengths), d]`` -> ``[sum(lengths), A]``."""
        return self.core.packed(self.fc2(F.relu(self.fc1(x))), batch_sizes)


class ASNNet(AgentNetwork):
    """ASN recurrent agent network.

    Args:
        inputs: the :class:`EntityInputs` of the module's group (needs targeted actions).
        hidden: ``A`` (32, ``asn_hidden_size``).
        recurrent: GRU streams (else ``FC -> ReLU``).
        env_input: ``"all"`` or ``"non_target"`` (see the module docstring).
        entity_modules: ``"shared"``, ``"unit_type"`` or ``"separate"``.

    An :class:`~marl.algos.networks.base.AgentNetwork` whose state is
    ``[M, A * (1 + sum_t m_t)]`` = ``h_env`` then each targeted entity's ``h_j``
    (type order, then entity order); none without ``recurrent``.

    Raises:
        MarlError: an unknown option, no entity-targeted actions, or
            ``unit_type`` modules without ``unit_type`` in the layout.
    """

    def __init__(
        self,
        inputs: EntityInputs,
        hidden: int = 32,
        recurrent: bool = True,
        env_input: str = "all",
        entity_modules: str = "shared",
    ):
        super().__init__()
        if env_input not in ENV_INPUTS:
            raise MarlError(f"Unknown asn_env_input '{env_input}'. Valid choices: {', '.join(ENV_INPUTS)}.")
        if entity_modules not in ENTITY_MODULES:
            raise MarlError(
                f"Unknown asn_entity_modules '{entity_modules}'. Valid choices: {', '.join(ENTITY_MODULES)}."
            )
        if not inputs.targets:
            raise MarlError("ASN needs actions that target entities (layout 'action_targets'); this layout has none.")
        self.inputs, self.hidden, self.recurrent = inputs, hidden, recurrent
        self.env_input, self.entity_modules = env_input, entity_modules
        d_in = inputs.obs_dim + inputs.id_dim + inputs.last_action_dim
        self.env = Stream(d_in, hidden, recurrent)
        self.normal = nn.Linear(hidden, inputs.n_normal) if inputs.n_normal else None
        self.entity = nn.ModuleDict({t: self._entity_modules(t, m) for t, _, m in inputs.targets})
        self.state_size = hidden * (1 + sum(m for _, _, m in inputs.targets)) if recurrent else 0
        # unit-type modules route each (entity, step) by its type, which may change inside an episode, so
        # only shared and per-slot modules run on the packed used steps (value decomposition's packed path)
        self.skips_padding = entity_modules != "unit_type"

    def _entity_modules(self, t: str, m: int) -> nn.ModuleList:
        d = self.inputs.dims[t]
        if self.entity_modules == "shared":
            n = 1
        elif self.entity_modules == "separate":
            n = m
        else:
            if t not in self.inputs.unit_types:
                raise MarlError(
                    f"asn_entity_modules='unit_type' needs 'unit_type' for entity type '{t}' in the layout."
                )
            a, b = self.inputs.unit_types[t]
            n = b - a
        return nn.ModuleList(Stream(d, self.hidden, self.recurrent) for _ in range(n))

    def _entity_stream(self, t: str, x: torch.Tensor, h0, starts) -> torch.Tensor:
        """Entities ``x [M, L, m, d]`` (state ``h0 [M, m, A]``) -> ``[M, L, m, A]``."""
        M, L, m, d = x.shape
        mods = self.entity[t]
        flat_h = None if h0 is None else h0.reshape(M * m, -1)
        flat_s = None if starts is None else starts.repeat_interleave(m, 0)

        if self.entity_modules == "separate":
            outs = [mods[j](x[:, :, j], None if h0 is None else h0[:, j], starts) for j in range(m)]
            return torch.stack(outs, 2)
        xf = x.permute(0, 2, 1, 3).reshape(M * m, L, d)
        if self.entity_modules == "shared":
            out = mods[0](xf, flat_h, flat_s)
        else:  # one module per unit type; an entity's type is the argmax of its unit-type bits at each step
            a, b = self.inputs.unit_types[t]
            kind = xf[..., a:b].argmax(-1)  # [M*m, L]
            if self.recurrent and L > 1 and not bool((kind == kind[:, :1]).all()):
                out = self._switching_stream(mods, xf, kind, flat_h, flat_s)
            elif self.recurrent:  # every entity keeps its type: each module unrolls the sequences of its entities
                out = self._typed_rows(mods, xf, kind[:, 0], flat_h, flat_s)
            else:  # no state: every (entity, step) is a row of its own
                out = self._typed_rows(mods, xf.reshape(M * m * L, 1, d), kind.reshape(-1), None, None)
        return out.view(M, m, L, -1).permute(0, 2, 1, 3)

    def _typed_rows(self, mods, xf, kind, h, starts) -> torch.Tensor:
        """Each unit-type module on the rows of its type only, batched: ``xf [R, L, d]``, types
        ``kind [R]`` -> ``[R, L, A]``. Equal to running every module on every row and keeping the
        row's own output, at ``1/U`` of the work."""
        out = xf.new_zeros(xf.shape[0], xf.shape[1], self.hidden)
        for u, mod in enumerate(mods):
            rows = (kind == u).nonzero().squeeze(1)
            if rows.numel():
                out = out.index_copy(0, rows, mod(xf.index_select(0, rows), _pick(h, rows), _pick(starts, rows)))
        return out

    def _switching_stream(self, mods, xf, kind, h, starts) -> torch.Tensor:
        """Unit-type modules when an entity's type changes inside the sequence (e.g. its features
        are zeroed when it dies or leaves sight): step by step, each step continuing from the
        state of the module chosen at the previous step, as acting does. ``xf [R, L, d]``,
        ``kind [R, L]`` -> ``[R, L, A]``."""
        outs = []
        for t in range(xf.shape[1]):
            s = None if starts is None else starts[:, t : t + 1]
            out = self._typed_rows(mods, xf[:, t : t + 1], kind[:, t], h, s)
            h = out[:, 0]
            outs.append(out)
        return torch.cat(outs, 1)

    def _split_state(self, h: Optional[torch.Tensor]):
        if h is None:
            return None, {t: None for t, _, _ in self.inputs.targets}
        A = self.hidden
        env, rest, out = h[:, :A], h[:, A:], {}
        for t, _, m in self.inputs.targets:
            out[t], rest = rest[:, : m * A].reshape(-1, m, A), rest[:, m * A :]
        return env, out

    def _env_x(self, x: torch.Tensor) -> torch.Tensor:
        """The environment stream's input: ``x`` or, with ``env_input="non_target"``, ``x`` without the targets."""
        return self.inputs.non_target(x) if self.env_input == "non_target" else x

    def _values(self, h_env: torch.Tensor, h_ents: List[torch.Tensor]) -> torch.Tensor:
        """``Q(A_in) = FC(h_env)`` and ``Q(a_j) = <h_env, h_j>``: ``h_env [..., A]``, one ``[..., m_t, A]`` per
        targeted type -> ``[..., A_out]`` in action order."""
        parts: List[torch.Tensor] = [self.normal(h_env)] if self.normal is not None else []
        parts += [torch.einsum("...a,...ja->...j", h_env, h) for h in h_ents]
        return torch.cat(parts, -1)

    def packed(self, x: torch.Tensor, batch_sizes: torch.Tensor) -> torch.Tensor:
        """Whole episodes from the zero state in packed layout: ``x [sum(lengths), D]`` -> ``[sum(lengths), A_out]``
        (:meth:`~marl.algos.networks.base.AgentNetwork.packed`; ``shared`` and ``separate`` entity modules)."""
        h_env = self.env.packed(self._env_x(x), batch_sizes)  # [N, A]
        _, ents, _, _ = self.inputs.split(x)
        return self._values(h_env, [self._packed_entities(t, ents[t], batch_sizes) for t, _, _ in self.inputs.targets])

    def _packed_entities(self, t: str, x: torch.Tensor, batch_sizes: torch.Tensor) -> torch.Tensor:
        """Packed entities ``x [N, m, d]`` -> their stream states ``[N, m, A]``."""
        N, m, d = x.shape
        mods = self.entity[t]
        if self.entity_modules == "separate":
            return torch.stack([mods[j].packed(x[:, j], batch_sizes) for j in range(m)], 1)
        # each (row, entity) is a sequence of its own; row-major over [N, m] keeps every step's m * batch_sizes[t]
        # rows contiguous and still sorted by decreasing length, so the same packed unroll serves all entities
        return mods[0].packed(x.reshape(N * m, d), batch_sizes * m).view(N, m, -1)

    def forward(self, x: torch.Tensor, h0: Optional[torch.Tensor] = None, starts: Optional[torch.Tensor] = None):
        """``x [M, L, D]`` -> outputs ``[M, L, A_out]`` and states ``[M, L, S]`` (``None`` without recurrence)."""
        env_h0, ent_h0 = self._split_state(h0)
        h_env = self.env(self._env_x(x), env_h0, starts)
        _, ents, _, _ = self.inputs.split(x)
        h_ents = [self._entity_stream(t, ents[t], ent_h0[t], starts) for t, _, _ in self.inputs.targets]  # [M, L, m, A]
        states = torch.cat([h_env] + [h.flatten(2) for h in h_ents], -1) if self.recurrent else None
        return self._values(h_env, h_ents), states


def build_asn(inputs: EntityInputs, c: Dict[str, Any]) -> ASNNet:
    """ASN from a module's ``model_config``: ``recurrent`` and the ``asn_*`` keys (``configs/engine.yaml``)."""
    return ASNNet(
        inputs,
        hidden=int(c.get("asn_hidden", 32)),
        recurrent=bool(c.get("recurrent", True)),
        env_input=c.get("asn_env_input", "all"),
        entity_modules=c.get("asn_entity_modules", "shared"),
    )


ASN_KEYS = ("asn_hidden", "asn_env_input", "asn_entity_modules")  # config keys it reads


def check_asn(cfg: Any, info) -> None:
    """Every group's layout has entity-targeted actions (and ``unit_type`` where
    ``asn_entity_modules="unit_type"``); run before Ray starts on the run's config (the
    schema has checked the ``asn_*`` choices).

    Raises:
        MarlError: a layout that cannot serve ASN.
    """
    for group in info.groups:  # the registry has checked that each one has a layout
        layout = info.entity_layout[group]
        targets = layout.get("action_targets") or {}
        if not targets:
            raise MarlError(
                f"agent='asn' needs actions that target entities; group '{group}' has no "
                f"'action_targets' in its layout."
            )
        if cfg.asn_entity_modules == "unit_type":
            missing = [t for t in targets if not layout["entities"][t].get("unit_type")]
            if missing:
                raise MarlError(
                    f"asn_entity_modules='unit_type' needs 'unit_type' in the layout of entity types "
                    f"{missing} (group '{group}')."
                )


def _pick(v: Optional[torch.Tensor], rows: torch.Tensor) -> Optional[torch.Tensor]:
    """Rows ``rows`` of ``v`` (``None`` stays ``None``)."""
    return None if v is None else v.index_select(0, rows)
