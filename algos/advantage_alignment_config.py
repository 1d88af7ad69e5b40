"""The config schema of Advantage Alignment for tensor policies (:class:`AAConfig`), apart from the
trainer so that a config is loaded and checked without importing torch or Ray (the algorithm is in
:mod:`marl.algos.advantage_alignment`; the text-game version is the LLM family's ``estimator``).

Sources: Duque et al. 2025, "Advantage Alignment Algorithms" (ICLR 2025, arXiv 2406.14662), method section
(``beta``, the discount of the own past advantages) and Proximal Advantage Alignment (PPO's clipped
surrogate on the aligned advantage, the other keys: :class:`~marl.algos.ppo_config.PPOConfig`).
"""

from __future__ import annotations

from dataclasses import dataclass

from marl.algos.ppo_config import PPOConfig
from marl.config import key

AA_WEIGHTINGS = ("discounted", "mean")  # how w_t combines the past own advantages (marl.algos.opponent_shaping)


@dataclass(frozen=True, kw_only=True)
class AAConfig(PPOConfig):
    """Advantage Alignment keys on top of PPO's (``docs/algorithms/advantage_alignment.md``); values in
    ``configs/algos/advantage_alignment_tensor.yaml``."""

    LAYER = "Advantage Alignment"

    beta: float = key("weight of the opponent-aware term beta * w_t * A2_t; 0 = independent PPO", ge=0)
    aa_gamma: float = key("discount of the agent's own past advantages in w_t (aa_weighting discounted)", gt=0, le=1)
    aa_weighting: str = key(
        "w_t: discounted (the paper's A*: aa_gamma * sum_{k<t} aa_gamma^(t-k) A1_k) or mean (the official "
        "Melting Pot code's integrated_aa: the mean of the episode's past A1_k)",
        choices=AA_WEIGHTINGS,
    )
