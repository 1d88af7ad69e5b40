"""Config keys of the agent network (values in ``configs/agent_net.yaml``), part of the schema of
every family that builds its agents from tensors (PPO, value decomposition), not of the LLM family.

This module imports neither torch nor the network modules, so that a config is loaded and
checked without torch: the choices that the networks define are spelled here, and
``marl.algos.networks.asn`` and ``tests/test_lazy_imports.py`` hold the networks to them.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Optional

from marl.config import ConfigBase, key

ENV_INPUTS = ("all", "non_target")  # ASN's environment-stream input (marl.algos.networks.asn)
ENTITY_MODULES = ("shared", "unit_type", "separate")  # ASN's entity-stream modules (marl.algos.networks.asn)
ACTIVATIONS = ("relu", "tanh", "elu")  # the keys of marl.algos.networks.mlp.ACTIVATIONS
# the networks marl.algos.networks.registry registers when it is imported (mlp for each family)
BUILTIN_AGENTS = ("mlp", "hpn", "dpn", "asn")
REGISTRY = "marl.algos.networks.registry"


def _agent_choices() -> list:
    """Every registered agent network (of any family; a research network plugs in by registering).

    Registering a network imports the registry (and torch); until something has, the
    registered networks are the built-in ones, so a config is checked without importing it.
    """
    registry = sys.modules.get(REGISTRY)
    if registry is None:
        return list(BUILTIN_AGENTS)
    return list(dict.fromkeys(n for family in registry.FAMILIES for n in registry.agent_networks(family)))


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
    asn_env_input: str = key(
        "ASN: input of the environment stream (non_target: targeted entities zeroed)", choices=ENV_INPUTS
    )
    asn_entity_modules: str = key(
        "ASN: entity-stream modules shared, per unit type, or one per entity", choices=ENTITY_MODULES
    )
    init_from: Optional[str] = key("checkpoint or run folder whose agent networks start this run (transfer)")
