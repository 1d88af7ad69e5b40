"""Shared parts of the entity-aware agent networks (HPN/DPN in ``hpn.py``, ASN in ``asn.py``).

An agent's network input is the flat vector the runner builds,
``[obs (D_obs) | agent one-hot (N, shared modules) | last action (A, optional)]``.
:class:`EntityInputs` splits it, with the env's
:attr:`marl.env.EnvInfo.entity_layout`, into own features ``[..., d_own]``,
one ``[..., m_t, d_t]`` tensor per entity type ``t``, the agent index and
the last action. Its index tables are buffers that are *not* saved in state
dicts, so a network's parameters never depend on the entity counts: the same
weights load into a network built for a scenario with more or fewer entities
(transfer, Hao et al. 2022 §5.4).
"""
from __future__ import annotations

from typing import Any, Dict, List, Optional, Tuple

import torch
from torch import nn

from marl.env import MarlError

AGENTS = ("mlp", "hpn", "dpn", "asn")


def entity_index(spec: Dict[str, Any]) -> torch.Tensor:
    """Observation indices ``[m, d]`` of one entity type (``start``/``dim`` or ``fields``)."""
    fields = spec.get("fields") or [(spec["start"], spec["dim"])]
    m = int(spec["count"])
    blocks = [torch.arange(int(s), int(s) + m * int(d)).view(m, int(d)) for s, d in fields]
    return torch.cat(blocks, 1) if blocks else torch.zeros(m, 0, dtype=torch.long)


def entity_dim(spec: Dict[str, Any]) -> int:
    """Features per entity of one type."""
    fields = spec.get("fields") or [(spec["start"], spec["dim"])]
    return sum(int(d) for _, d in fields)


class EntityInputs(nn.Module):
    """Split flat agent inputs into own features, entities, agent index and last action.

    Args:
        layout: one group's entity layout (see :class:`marl.env.EnvInfo`).
        obs_dim: ``D_obs``, the group's observation size.
        id_dim: size of the agent one-hot after the observation (0: none).
        last_action_dim: size of the last-action one-hot after that (0: none).

    Attributes:
        own_dim: ``d_own``; ``dims``: type -> ``d_t``; ``counts``: type -> ``m_t``;
        ``targets``: ``[(type, first_action, m)]`` in action order;
        ``n_normal``: actions that target no entity; ``n_actions``: all actions.

    Raises:
        MarlError: the layout has no ``entities`` or its targeted actions do not
            follow the normal actions contiguously.
    """

    def __init__(self, layout: Dict[str, Any], obs_dim: int, id_dim: int = 0, last_action_dim: int = 0):
        super().__init__()
        if not layout or not layout.get("entities"):
            raise MarlError(f"An entity-aware agent needs an entity layout with 'entities'; got {layout!r}.")
        own = [i for s, e in layout.get("own", []) for i in range(int(s), int(e))]
        self.register_buffer("own_idx", torch.tensor(own, dtype=torch.long), persistent=False)
        self.types: List[str] = list(layout["entities"])
        self.dims = {t: entity_dim(layout["entities"][t]) for t in self.types}
        self.counts = {t: int(layout["entities"][t]["count"]) for t in self.types}
        self.unit_types = {t: tuple(layout["entities"][t]["unit_type"]) for t in self.types if layout["entities"][t].get("unit_type")}
        for t in self.types:
            self.register_buffer(f"idx_{t}", entity_index(layout["entities"][t]), persistent=False)
        self.obs_dim, self.id_dim, self.last_action_dim = int(obs_dim), int(id_dim), int(last_action_dim)
        self.own_dim = len(own)
        self.n_normal = int(layout.get("n_normal_actions", 0))
        self.targets = self._targets(layout)
        self.n_actions = self.n_normal + sum(m for _, _, m in self.targets)
        keep = torch.ones(self.obs_dim + self.id_dim + self.last_action_dim)
        for t, _, _ in self.targets:
            keep[getattr(self, f"idx_{t}").reshape(-1)] = 0
        self.register_buffer("non_target_mask", keep, persistent=False)

    def _targets(self, layout) -> List[Tuple[str, int, int]]:
        targets = sorted(((t, int(f), int(m)) for t, (f, m) in (layout.get("action_targets") or {}).items()), key=lambda x: x[1])
        nxt = self.n_normal
        for t, first, m in targets:
            if t not in self.counts or first != nxt or m != self.counts[t]:
                raise MarlError(
                    f"action_targets {layout.get('action_targets')} must follow the {self.n_normal} normal actions "
                    f"contiguously, one action per entity of an entity type ({self.counts})."
                )
            nxt += m
        return targets

    def split(self, x: torch.Tensor):
        """``x [..., D]`` -> ``own [..., d_own]``, ``{type: [..., m_t, d_t]}``,
        agent index ``[...]`` long (``None`` without a one-hot), last action ``[..., A]`` (or ``None``)."""
        own = x[..., self.own_idx]
        ents = {t: x[..., getattr(self, f"idx_{t}")] for t in self.types}
        d = self.obs_dim
        agent = x[..., d:d + self.id_dim].argmax(-1) if self.id_dim else None
        d += self.id_dim
        last = x[..., d:d + self.last_action_dim] if self.last_action_dim else None
        return own, ents, agent, last

    def non_target(self, x: torch.Tensor) -> torch.Tensor:
        """``x`` with the features of action-targeted entities zeroed (ASN's ``env_input: non_target``)."""
        return x * self.non_target_mask


def gru_unroll(gru: nn.GRU, z: torch.Tensor, h0: Optional[torch.Tensor], starts: Optional[torch.Tensor]) -> torch.Tensor:
    """Run a one-layer ``batch_first`` GRU over ``z [M, L, H_in]`` from ``h0 [M, H]`` (zeros if ``None``);
    where ``starts[m, t]`` the state is zeroed before step ``t``. Returns ``[M, L, H]``.

    Without resets inside the sequence this is one fused ``nn.GRU`` call."""
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


class RecurrentCore(nn.Module):
    """``GRU(H)`` or, with ``recurrent=False``, ``FC(H -> H) -> ReLU`` (no state)."""

    def __init__(self, hidden: int, recurrent: bool):
        super().__init__()
        self.recurrent = recurrent
        self.cell = nn.GRU(hidden, hidden, batch_first=True) if recurrent else nn.Linear(hidden, hidden)

    def forward(self, z: torch.Tensor, h0=None, starts=None) -> torch.Tensor:
        """``z [M, L, H]`` -> ``[M, L, H]`` (see :func:`gru_unroll`)."""
        if not self.recurrent:
            return torch.relu(self.cell(z))
        return gru_unroll(self.cell, z, h0, starts)


def build_agent_net(kind: str, c: Dict[str, Any], n_actions: int) -> nn.Module:
    """The entity-aware network ``kind`` (``hpn``, ``dpn``, ``asn``) from a module's ``model_config``.

    ``model_config`` keys: ``entity_layout`` (this module's group), ``group_obs_dim``,
    ``id_dim``, ``last_action_dim``, ``hidden`` and the ``hpn_*`` / ``asn_*`` keys.

    Raises:
        MarlError: unknown ``kind`` (lists the choices), or the layout's actions
            do not match the group's ``n_actions``.
    """
    if kind not in AGENTS[1:]:
        raise MarlError(f"Unknown entity-aware agent '{kind}'. Valid choices: {', '.join(AGENTS[1:])}.")
    inputs = EntityInputs(c["entity_layout"], c["group_obs_dim"], c.get("id_dim", 0), c.get("last_action_dim", 0))
    if inputs.n_actions != n_actions:
        raise MarlError(
            f"The entity layout describes {inputs.n_actions} actions ({inputs.n_normal} normal + targets "
            f"{inputs.targets}), but the group has {n_actions}."
        )
    if kind == "asn":
        from marl.algos.networks.asn import ASNNet

        return ASNNet(inputs, hidden=int(c.get("asn_hidden", 32)), recurrent=bool(c.get("recurrent", True)),
                      env_input=c.get("asn_env_input", "all"), entity_modules=c.get("asn_entity_modules", "shared"))
    from marl.algos.networks.hpn import HPNNet

    return HPNNet(
        inputs,
        hidden=int(c.get("hidden", 64)),
        hyper_dim=int(c.get("hpn_hyper_dim", 64)),
        heads=int(c.get("hpn_heads", 1)),
        generator="bank" if kind == "dpn" else "mlp",
        bank_size=int(c.get("dpn_bank_size", 4)),
        hard=bool(c.get("dpn_hard", False)),
        recurrent=bool(c.get("recurrent", True)),
        id_table=int(c.get("hpn_id_table", 32)),
    )


AGENT_KEYS = ("hpn_hyper_dim", "hpn_heads", "hpn_id_table", "dpn_bank_size", "dpn_hard",
              "asn_hidden", "asn_env_input", "asn_entity_modules")


def check_agent(cfg: Dict[str, Any], info) -> None:
    """``agent`` is known and, for an entity-aware agent, every group has a discrete action
    space and an entity layout (checked before Ray starts).

    Raises:
        MarlError: unknown agent (lists the choices) or a group without a layout
            (says how to declare one).
    """
    kind = cfg.get("agent", "mlp")
    if kind not in AGENTS:
        raise MarlError(f"Unknown agent '{kind}'. Valid choices: {', '.join(AGENTS)}.")
    if kind == "mlp":
        return
    layout = info.entity_layout or {}
    for name, g in info.groups.items():
        if name not in layout:
            raise MarlError(
                f"agent='{kind}' needs an entity layout for group '{name}' of {info.family}:{info.scenario}, "
                f"which has none. Declare one with marl.make_env(..., entity_layout={{'{name}': {{...}}}}) "
                f"(docs/envs.md, 'Entity layouts')."
            )
        if not g.discrete:
            raise MarlError(f"agent='{kind}' gives one output per discrete action; group '{name}' has {g.action_space}.")
        if kind == "asn":
            _check_asn(cfg, name, layout[name])


def _check_asn(cfg: Dict[str, Any], group: str, layout: Dict[str, Any]) -> None:
    from marl.algos.networks.asn import ENTITY_MODULES, ENV_INPUTS

    for key, choices in (("asn_env_input", ENV_INPUTS), ("asn_entity_modules", ENTITY_MODULES)):
        if cfg.get(key, choices[0]) not in choices:
            raise MarlError(f"Unknown {key} '{cfg[key]}'. Valid choices: {', '.join(choices)}.")
    targets = layout.get("action_targets") or {}
    if not targets:
        raise MarlError(f"agent='asn' needs actions that target entities; group '{group}' has no 'action_targets' in its layout.")
    if cfg.get("asn_entity_modules") == "unit_type":
        missing = [t for t in targets if not layout["entities"][t].get("unit_type")]
        if missing:
            raise MarlError(f"asn_entity_modules='unit_type' needs 'unit_type' in the layout of entity types {missing} (group '{group}').")


def agent_model_config(cfg: Dict[str, Any], mapping, mid: str, last_action_dim: int = 0) -> Dict[str, Any]:
    """The ``model_config`` entries an entity-aware agent of module ``mid`` needs (``{"agent": "mlp"}`` otherwise)."""
    kind = cfg.get("agent", "mlp")
    if kind == "mlp":
        return {"agent": kind}
    g = mapping.group_info(mid)
    return {
        "agent": kind,
        "entity_layout": mapping.info.entity_layout[g.name],
        "group_obs_dim": g.obs_dim,
        "id_dim": mapping.n_agents(mid) if mapping.uses_agent_id(mid) else 0,
        "last_action_dim": last_action_dim,
        **{k: cfg[k] for k in AGENT_KEYS if k in cfg},
    }
