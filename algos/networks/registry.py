"""Agent networks by name: what the ``agent`` config key chooses, for every algorithm.

Built in: ``mlp`` (each family's plain network: :class:`~marl.algos.networks.mlp.MAPPOActor`
for PPO, pymarl's :class:`~marl.algos.networks.rnn.RNNAgent` for value decomposition),
``hpn`` and ``dpn`` (:mod:`marl.algos.networks.hpn`), ``asn`` (:mod:`marl.algos.networks.asn`).
A research network plugs in with :func:`register_agent_network`, typically from
the ``__init__`` of a package declared in the ``marl.plugins`` entry points
(:mod:`marl.plugins`); ``docs/algorithms/entity_networks.md``, "Adding a network".
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple, Union

import gymnasium as gym
import numpy as np

from marl.algos.networks.asn import ASN_KEYS, build_asn, check_asn
from marl.algos.networks.base import AgentNetwork
from marl.algos.networks.encoders import EncodedAgent, ObsEncoder
from marl.algos.networks.entity import EntityInputs
from marl.algos.networks.hpn import HPN_KEYS, build_dpn, build_hpn
from marl.algos.networks.mlp import build_mappo_actor
from marl.algos.networks.rnn import build_rnn_agent
from marl.config import ConfigBase, config_view
from marl.errors import MarlError, closest


@dataclass
class AgentNetworkEntry:
    """One registered network (see :func:`register_agent_network`)."""

    builders: Dict[Optional[str], Callable[..., AgentNetwork]] = field(default_factory=dict)
    entity: bool = False
    check: Optional[Callable[[Any, Any], None]] = None
    config_keys: Tuple[str, ...] = ()


_NETWORKS: Dict[str, AgentNetworkEntry] = {}
FAMILIES = ("ppo", "value_decomp")  # the built-in algorithm families that build agent networks


def register_agent_network(
    name: str,
    build: Callable[..., AgentNetwork],
    *,
    family: Optional[str] = None,
    entity: bool = False,
    check: Optional[Callable[[Any, Any], None]] = None,
    config_keys: Sequence[str] = (),
) -> None:
    """Make ``agent=name`` build ``build``'s network (a later registration of a name replaces it).

    Args:
        name: the value of the ``agent`` config key.
        build: ``build(model_config, n_actions) -> AgentNetwork``; with ``entity``,
            ``build(inputs: EntityInputs, model_config) -> AgentNetwork`` (the registry
            splits the input by the env's entity layout and checks the action count).
            ``model_config`` is the module's: ``obs_dim``, ``hidden``, ``recurrent``,
            ``last_action_dim`` (value decomposition's last-action one-hot, appended to
            the input), the family's own keys and ``config_keys``.
        family: ``"ppo"`` or ``"value_decomp"`` when the network differs between
            algorithm families (``mlp`` does); ``None``: the same network for all.
        entity: the network reads the env's entity layout; :func:`check_agent`
            then requires one for every group, and discrete actions.
        check: ``check(cfg, env_info)`` (``cfg``: the run's config, keys read as attributes),
            run before Ray starts; raises :class:`MarlError`.
        config_keys: config keys copied from the run's config into ``model_config``.
    """
    entry = _NETWORKS.setdefault(name, AgentNetworkEntry())
    entry.builders[family] = build
    entry.entity, entry.check, entry.config_keys = entity, check, tuple(config_keys)


def agent_networks(family: Optional[str] = None) -> List[str]:
    """Names (in registration order) of the networks ``family`` can build: those registered
    for it and the family-independent ones (``family=None``: only the latter)."""
    return [n for n, e in _NETWORKS.items() if None in e.builders or family in e.builders]


def _unknown(kind: Any, choices: List[str]) -> MarlError:
    return MarlError(f"Unknown agent '{kind}'.{closest(kind, choices)} Valid choices: {', '.join(choices)}.")


def build_agent_net(kind: str, c: Dict[str, Any], n_actions: int, family: Optional[str] = None) -> AgentNetwork:
    """The agent network ``kind`` for a module's ``model_config`` ``c`` and ``n_actions`` outputs.

    An entity-aware network reads ``entity_layout`` (this module's group),
    ``group_obs_dim``, ``id_dim`` and ``last_action_dim`` from ``c``. A module with structured
    observations (``c["obs_space"]``, a ``Dict``: :meth:`marl.mapping.PolicyMapping.obs_space`) gets
    the network behind an :class:`~marl.algos.networks.encoders.ObsEncoder` (layers ``c["encoder"]``;
    the last-action one-hot, ``last_action_dim`` values, joins the observation as key ``"last_action"``).

    Raises:
        MarlError: ``kind`` is not registered for ``family`` (lists the choices), or
            the entity layout's actions do not match ``n_actions``.
    """
    choices = agent_networks(family)
    if kind not in choices:
        raise _unknown(kind, choices)
    entry = _NETWORKS[kind]
    build = entry.builders.get(family, entry.builders.get(None))
    if c.get("obs_space") is not None:
        return _encoded(kind, entry, build, c, n_actions)
    if not entry.entity:
        return build(c, n_actions)
    inputs = EntityInputs(c["entity_layout"], c["group_obs_dim"], c.get("id_dim", 0), c.get("last_action_dim", 0))
    if inputs.n_actions != n_actions:
        raise MarlError(
            f"The entity layout describes {inputs.n_actions} actions ({inputs.n_normal} normal + targets "
            f"{inputs.targets}), but the group has {n_actions}."
        )
    return build(inputs, c)


def _encoded(
    kind: str, entry: AgentNetworkEntry, build: Callable[..., AgentNetwork], c: Dict[str, Any], n_actions: int
):
    """Network ``kind`` on the features of an :class:`ObsEncoder` of ``c["obs_space"]`` (see :func:`build_agent_net`)."""
    if entry.entity:
        raise MarlError(structured_entity_error(kind, "this module"))
    space = c["obs_space"]
    last = int(c.get("last_action_dim", 0))
    if last:
        space = gym.spaces.Dict({**space.spaces, "last_action": gym.spaces.Box(0.0, 1.0, (last,), np.float32)})
    encoder = ObsEncoder(space, c.get("encoder"))
    inner = build({**c, "obs_dim": encoder.out_dim, "last_action_dim": 0}, n_actions)
    return EncodedAgent(encoder, inner)


def structured_entity_error(kind: str, where: str) -> str:
    """The message for an entity-aware network asked to read structured observations."""
    return (
        f"agent='{kind}' reads 1-D vector observations split into entities; {where} has structured "
        f"observations (an image Box or a Dict). Use agent='mlp' (its per-key encoders read images and "
        f"dicts), or flatten the observations with marl.make_env(..., flatten_obs=True) (docs/observations.md)."
    )


def check_agent(cfg: Union[ConfigBase, Mapping[str, Any]], info, family: Optional[str] = None) -> None:
    """``agent`` is registered (for ``family``, when given) and, for an entity-aware network,
    every group has a discrete action space and an entity layout; then the network's own
    check (before Ray starts).

    Raises:
        MarlError: unknown agent, or one not built for ``family`` (lists the choices), a
            group without a layout (says how to declare one) or with continuous actions,
            or the network's own check.
    """
    cfg = config_view(cfg)  # a typed config, or a mapping with at least "agent" (tests, plugins)
    kind = cfg.agent
    choices = agent_networks(family) if family is not None else list(_NETWORKS)
    if kind not in choices:
        raise _unknown(kind, choices)
    entry = _NETWORKS[kind]
    if entry.entity:
        for name, g in info.groups.items():
            if g.structured:
                raise MarlError(structured_entity_error(kind, f"group '{name}' of {info.family}:{info.scenario}"))
        _require_layouts(kind, info)
    if entry.check is not None:
        entry.check(cfg, info)


def _require_layouts(kind: str, info) -> None:
    layout = info.entity_layout or {}
    for name, g in info.groups.items():
        if name not in layout:
            raise MarlError(
                f"agent='{kind}' needs an entity layout for group '{name}' of {info.family}:{info.scenario}, "
                f"which has none. Declare one with marl.make_env(..., entity_layout={{'{name}': {{...}}}}) "
                f"(docs/envs.md, 'Entity layouts')."
            )
        if not g.discrete:
            raise MarlError(
                f"agent='{kind}' gives one output per discrete action; group '{name}' has {g.action_space}."
            )


def agent_model_config(cfg: ConfigBase, mapping, mid: str, last_action_dim: int = 0) -> Dict[str, Any]:
    """The ``model_config`` entries module ``mid``'s agent network needs: ``agent``, the
    network's ``config_keys`` and, for an entity-aware one, the group's layout and sizes.

    Raises:
        MarlError: unknown agent (lists the choices).
    """
    kind = cfg.agent
    if kind not in _NETWORKS:
        raise _unknown(kind, list(_NETWORKS))
    entry = _NETWORKS[kind]
    # config_keys the schema lacks are skipped (a plugin's network cannot add keys to the schema)
    out = {"agent": kind, **{k: getattr(cfg, k) for k in entry.config_keys if hasattr(cfg, k)}}
    if mapping.structured(mid):  # the per-key encoders (marl.algos.networks.encoders)
        out.update(obs_space=mapping.obs_space(mid), encoder=dict(getattr(cfg, "encoder", None) or {}))
    if not entry.entity:
        return out
    g = mapping.group_info(mid)
    return {
        **out,
        "entity_layout": mapping.info.entity_layout[g.name],
        "group_obs_dim": g.obs_dim,
        "id_dim": mapping.n_agents(mid) if mapping.uses_agent_id(mid) else 0,
        "last_action_dim": last_action_dim,
    }


register_agent_network("mlp", build_mappo_actor, family="ppo")
register_agent_network("mlp", build_rnn_agent, family="value_decomp")
register_agent_network("hpn", build_hpn, entity=True, config_keys=HPN_KEYS)
register_agent_network("dpn", build_dpn, entity=True, config_keys=HPN_KEYS)
register_agent_network("asn", build_asn, entity=True, check=check_asn, config_keys=ASN_KEYS)
