"""Config keys of the agent network (values in ``configs/agent_net.yaml``), part of the schema of
every family that builds its agents from tensors (PPO, value decomposition), not of the LLM family.

This module imports neither torch nor the network modules, so that a config is loaded and
checked without torch: the choices that the networks define are spelled here, and
``marl.algos.networks.asn`` and ``tests/test_lazy_imports.py`` hold the networks to them.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Any, Dict, List, Optional

from marl.config import ConfigBase, key
from marl.config.checks import ERROR, rule

ENV_INPUTS = ("all", "non_target")  # ASN's environment-stream input (marl.algos.networks.asn)
ENTITY_MODULES = ("shared", "unit_type", "separate")  # ASN's entity-stream modules (marl.algos.networks.asn)
ACTIVATIONS = ("relu", "tanh", "elu")  # the keys of marl.algos.networks.mlp.ACTIVATIONS
INITS = ("orthogonal", "torch")  # weight init of the linear layers (algos/networks/mlp.py: init_linear)
# the networks marl.algos.networks.registry registers when it is imported (mlp for each family)
BUILTIN_AGENTS = ("mlp", "hpn", "dpn", "asn")
REGISTRY = "marl.algos.networks.registry"


# the observation encoders' layers (marl.algos.networks.encoders; Mnih et al. 2015, Nature 518, Methods)
NATURE_CNN = {"channels": [32, 64, 64], "kernels": [8, 4, 3], "strides": [4, 2, 1], "fc": [512]}
SMALL_CNN = {"channels": [32, 64], "kernels": [3, 3], "strides": [2, 2], "fc": [128]}  # images under 36 px a side
ENCODER_KEYS = {"cnn": ("channels", "kernels", "strides", "fc"), "mlp": ("hidden",)}
# the ``encoder`` key's description, in every schema that has the key (agent networks, off-policy actor-critics)
ENCODER_HELP = (
    "structured observations: layers of the per-key encoders, cnn (images: channels, kernels, strides, fc) "
    "and mlp (other keys: hidden); missing entries take the defaults (docs/observations.md)"
)


def encoder_problem(spec: Any) -> Optional[str]:
    """Why an ``encoder`` config value is not valid (names the bad entry and the valid ones), or ``None``.

    Valid: a dict of encoder names (``cnn``, ``mlp``) -> a dict of their layer lists (``cnn``:
    ``channels``, ``kernels``, ``strides`` of equal length >= 1, ``fc``; ``mlp``: ``hidden``), each
    a list of positive ints; missing names and lists take the defaults.
    """
    if not isinstance(spec, dict):
        return f"encoder must be a dict of {', '.join(ENCODER_KEYS)} -> layers, got {spec!r}."
    for name, layers in spec.items():
        if name not in ENCODER_KEYS:
            return f"encoder has an unknown entry '{name}'; valid entries: {', '.join(ENCODER_KEYS)}."
        valid = ENCODER_KEYS[name]
        if not isinstance(layers, dict):
            return f"encoder.{name} must be a dict of {', '.join(valid)} -> list of ints, got {layers!r}."
        for k, v in layers.items():
            if k not in valid:
                return f"encoder.{name} has an unknown entry '{k}'; valid entries: {', '.join(valid)}."
            if not isinstance(v, list) or not all(isinstance(x, int) and not isinstance(x, bool) and x >= 1 for x in v):
                return f"encoder.{name}.{k} must be a list of ints >= 1, got {v!r}."
    cnn = {**NATURE_CNN, **spec.get("cnn", {})}
    lengths = {k: len(cnn[k]) for k in ("channels", "kernels", "strides")}
    if len(set(lengths.values())) != 1 or not lengths["channels"]:
        return (
            f"encoder.cnn needs channels, kernels and strides of one length >= 1 (one entry per conv layer), got "
            f"lengths {lengths}; give all three when you change the number of layers."
        )
    return None


@rule(("encoder",), ERROR, "an encoder stack that cannot be built would fail on the learners, after Ray starts")
def encoder_layers(c: Any) -> Optional[str]:
    return encoder_problem(c.encoder)


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
    RULES = (encoder_layers,)

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
    encoder: Dict[str, Dict[str, List[int]]] = key(ENCODER_HELP)
    init_from: Optional[str] = key("checkpoint or run folder whose agent networks start this run (transfer)")
