"""The config schema of VDA2C and VDPPO (:class:`VDACConfig`), apart from the trainer so that a config
is loaded and checked without importing torch or Ray (the algorithms are in :mod:`marl.algos.vd_actor_critic`).

Sources of the keys: Su, Adams and Beling 2021, "Value-Decomposition Multi-Agent Actor-Critics" (AAAI,
arXiv 2007.12306: VDAC-sum and VDAC-mix); MARLlib (Hu et al. 2023, arXiv 2210.13708), whose VDA2C and VDPPO
(https://github.com/Replicable-MARL/MARLlib/blob/master/marllib/marl/algos/core/VD/) mix per-agent values with a VDN sum or a QMIX
mixer;
the adaptive KL penalty (``kl_coeff``, ``kl_target``) of RLlib 1.8's PPO loss, which MARLlib's VDPPO runs on
(https://github.com/ray-project/ray/blob/ray-1.8.0/rllib/agents/ppo/ppo_torch_policy.py: ``KLCoeffMixin``);
the PPO keys as in :class:`~marl.algos.ppo_config.PPOConfig`.
"""

from __future__ import annotations

from dataclasses import dataclass

from marl.algos.ppo_config import PPOConfig
from marl.config import key

VD_MIXERS = ("vdn", "qmix")  # how per-agent values make the team value
ACTOR_LOSSES = ("a2c", "ppo")  # VDA2C's policy gradient, VDPPO's clipped surrogate
VD_CRITICS = ("obs", "state")  # what each agent's value V_i reads (one row per agent: the core's layouts)


@dataclass(frozen=True, kw_only=True)
class VDACConfig(PPOConfig):
    """VDA2C / VDPPO keys (``docs/algorithms/vd_actor_critic.md``): PPO's keys plus the mixer; values in
    ``configs/algos/vdppo.yaml``, which ``vda2c.yaml`` starts from (``base: vdppo``)."""

    LAYER = "VD actor-critic"

    critic: str = key(
        "input of each agent's value V_i before mixing: its own observation (obs, VDAC and MARLlib) "
        "or the global state plus agent id (state)",
        choices=VD_CRITICS,
    )
    mixer: str = key(
        "team value V_tot: vdn (sum of the V_i) or qmix (monotonic mixer on the global state)", choices=VD_MIXERS
    )
    actor_loss: str = key("policy loss: a2c (-log pi * A, VDA2C) or ppo (clipped ratio, VDPPO)", choices=ACTOR_LOSSES)
    mixing_embed: int = key("qmix: mixing network width", ge=1)
    hypernet_layers: int = key("qmix: layers of the hypernetworks", choices=(1, 2))
    hypernet_embed: int = key("qmix: hidden width of two-layer hypernetworks", ge=1)
    kl_coeff: float = key(
        "initial weight of the adaptive KL penalty kl_coeff * KL(pi_old || pi) in the loss (RLlib PPO); 0 = off", ge=0
    )
    kl_target: float = key(
        "mean KL the penalty's weight adapts toward after each update: x1.5 above 2 kl_target, x0.5 below "
        "kl_target / 2",
        gt=0,
    )
