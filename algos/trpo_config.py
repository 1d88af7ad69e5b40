"""The config schema of ITRPO and MATRPO (:class:`TRPOConfig`), apart from the trainer so that a
config is loaded and checked without importing torch or Ray (the algorithm is in :mod:`marl.algos.trpo`).

It is PPO's schema (:class:`~marl.algos.ppo_config.PPOConfig`: critic, GAE, value loss, networks)
plus the trust-region keys. Sources: Schulman et al. 2015, "Trust Region Policy Optimization"
(arXiv 1502.05477, sec. 6 and appendix C: KL bound, conjugate gradient, line search); Zhong et al.
2024, HARL (arXiv 2304.09870) and its official code's HATRPO defaults (config keys ``kl_threshold``,
``ls_step``, ``accept_ratio``, ``backtrack_coeff``; 10 conjugate gradient iterations and damping 0.1 in
its TRPO utilities).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

from marl.algos.ppo_config import PPOConfig
from marl.config import key
from marl.config.checks import ERROR, rule


@rule(
    ("num_learners",),
    ERROR,
    "each learner would take its own trust-region step on its share of the batch (the natural gradient "
    "is not all-reduced), so the learners' policies would drift apart",
)
def one_trust_region_learner(c: Any) -> Optional[str]:
    if c.num_learners <= 1:
        return None
    return f"{c.algo} takes one trust-region step on the whole batch in one learner; num_learners={c.num_learners} is not supported, use num_learners=0 or 1."


@rule(
    ("torch_compile",),
    ERROR,
    "the Fisher-vector product differentiates the policy's KL twice, which torch.compile graphs do not support",
)
def no_compiled_trust_region(c: Any) -> Optional[str]:
    if not c.torch_compile:
        return None
    return f"{c.algo} differentiates the KL twice (Fisher-vector products), which torch.compile does not support; use torch_compile=false."


@dataclass(frozen=True, kw_only=True)
class TRPOConfig(PPOConfig):
    """ITRPO / MATRPO keys (docs/algorithms/trpo.md); values in ``configs/algos/matrpo.yaml``, which
    ``itrpo.yaml`` starts from (``base: matrpo``). Of PPO's keys, ``epochs``, ``num_minibatches``, ``lr``,
    ``value_clip``, ``huber_delta`` and ``value_loss_coef`` drive the critic's Adam steps; ``entropy_coef``
    weights an entropy bonus in the surrogate; ``clip`` (PPO's policy clip) is not read."""

    LAYER = "TRPO"
    RULES = (one_trust_region_learner, no_compiled_trust_region)

    kl_threshold: float = key("trust region: largest mean KL(old || new) of an accepted policy step (delta)", gt=0)
    cg_iters: int = key("conjugate gradient iterations for the natural-gradient direction", ge=1)
    cg_damping: float = key("damping added to the KL Hessian in Fisher-vector products: (H + damping I) v", ge=0)
    line_search_steps: int = key("backtracking line search: step lengths tried before the step is rejected", ge=1)
    backtrack_coef: float = key("backtracking line search: factor of the step length after each rejection", gt=0, lt=1)
    accept_ratio: float = key(
        "accept a step only if its surrogate gain is above this share of the linear prediction", ge=0
    )
