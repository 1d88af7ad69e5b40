"""The config schema of FACMAC (:class:`FACMACConfig`), apart from the trainer so that a config is loaded and
checked without importing torch or Ray (the algorithm is in :mod:`marl.algos.facmac`).

Source: Peng et al. 2021, "FACMAC: Factored Multi-Agent Centralised Policy Gradients" (NeurIPS 2021,
arXiv 2003.06709): per-agent critics mixed into ``Q_tot`` (Sec. 4.1) and the centralised policy gradient
over the joint action (Sec. 4.2, Eq. 5). Default values: its official code's MaMuJoCo config
(``configs/algos/facmac.yaml`` names each one).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

from marl.algos.ddpg_config import DDPGConfig
from marl.config import key
from marl.config.checks import ERROR, rule

FACMAC_MIXERS = ("qmix", "qmix_nonmonotonic", "vdn")  # docs/algorithms/facmac.md


@rule(("critic",), ERROR, "FACMAC's critics are per agent (own observation and action); the mixer adds the state")
def per_agent_critic(c: Any) -> Optional[str]:
    if c.critic == "obs":
        return None
    return (
        f"critic={c.critic!r}: FACMAC mixes per-agent critics Q_a(o_a, u_a), and the centralised information "
        f"enters through the mixer; use critic: obs (or maddpg for a centralised critic per agent)."
    )


@rule(("twin_critics",), ERROR, "FACMAC mixes one critic per agent (no clipped double-Q)")
def one_critic(c: Any) -> Optional[str]:
    if not c.twin_critics:
        return None
    return "twin_critics=True: FACMAC mixes one critic per agent into Q_tot; use twin_critics: false (or matd3)."


@rule(("policy_gradient",), ERROR, "FACMAC's policy gradient is centralised: every agent's current action")
def joint_gradient(c: Any) -> Optional[str]:
    if c.policy_gradient == "joint":
        return None
    return (
        f"policy_gradient={c.policy_gradient!r}: FACMAC's actor loss mixes every agent's Q_a(o_a, mu_a(o_a)) into "
        f"Q_tot (the centralised policy gradient, Peng et al. 2021, Sec. 4.2); use policy_gradient: joint (or maddpg "
        f"for policy_gradient: own)."
    )


@dataclass(frozen=True, kw_only=True)
class FACMACConfig(DDPGConfig):
    """FACMAC keys (``docs/algorithms/facmac.md``): the DDPG family's keys plus the mixer and the actor's
    action regulariser; values in ``configs/algos/facmac.yaml``."""

    LAYER = "factored critic"
    RULES = (per_agent_critic, one_critic, joint_gradient)

    mixer: str = key(
        "how the agents' Q_a become Q_tot: qmix (monotonic hypernetwork mixer on the state), qmix_nonmonotonic "
        "(the same without abs on the weights) or vdn (their sum)",
        choices=FACMAC_MIXERS,
    )
    mixing_embed: int = key("qmix mixers: mixing network width", ge=1)
    hypernet_layers: int = key("qmix mixers: layers of the hypernetworks", choices=(1, 2))
    hypernet_embed: int = key("qmix mixers: hidden width of two-layer hypernetworks", ge=1)
    actor_reg: float = key(
        "weight of the squared actions (in half action ranges) added to the actor loss, continuous actions", ge=0
    )
