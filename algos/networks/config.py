"""Config keys of the agent network (values in ``configs/agent_net.yaml``), part of the schema of
every family that builds its agents from tensors (PPO, value decomposition), not of the LLM family."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from marl.algos.networks.asn import ENTITY_MODULES, ENV_INPUTS
from marl.algos.networks.registry import FAMILIES, agent_networks
from marl.config import ConfigBase, key


def _agent_choices() -> list:
    """Every registered agent network (of any family; a research network plugs in by registering)."""
    return list(dict.fromkeys(n for family in FAMILIES for n in agent_networks(family)))


@dataclass(frozen=True, kw_only=True)
class AgentNetConfig(ConfigBase):
    """Agent network keys: ``mlp`` is the family's plain network; ``hpn``, ``dpn`` and ``asn`` need an
    env with an entity layout (``docs/algorithms/entity_networks.md``)."""

    LAYER = "agent network"
    DEFAULTS = "agent_net.yaml"

    agent: str = key("agent network: the family's plain network (mlp) or an entity-aware one", choices=_agent_choices)
    hpn_hyper_dim: int = key("HPN: hypernetwork width K", ge=1)
    hpn_heads: int = key("HPN: input embedding heads", ge=1)
    hpn_id_table: int = key("HPN: agent-id embedding rows, the largest team the weights will act for", ge=1)
    dpn_bank_size: int = key("DPN: modules in each bank", ge=1)
    dpn_hard: bool = key("DPN: hard argmax module selection (straight-through gradient)")
    asn_hidden: int = key("ASN: width of each stream", ge=1)
    asn_env_input: str = key("ASN: input of the environment stream (non_target: targeted entities zeroed)",
                             choices=ENV_INPUTS)
    asn_entity_modules: str = key("ASN: entity-stream modules shared, per unit type, or one per entity",
                                  choices=ENTITY_MODULES)
    init_from: Optional[str] = key("checkpoint or run folder whose agent networks start this run (transfer)")
