"""The config schema of COMA (:class:`COMAConfig`), apart from the trainer so that a config is loaded
and checked without importing torch or Ray (the algorithm is in :mod:`marl.algos.coma`).

Sources of the keys: Foerster et al. 2018, "Counterfactual Multi-Agent Policy Gradients" (AAAI 2018,
arXiv 1705.08926), section 4 and appendix (TD(lambda) critic targets from a target network, lambda
0.8); EPyMARL (Papoudakis et al. 2021, arXiv 2006.07869),
https://github.com/uoe-agents/epymarl/blob/main/src/config/algs/coma.yaml.
"""

from __future__ import annotations

from dataclasses import dataclass

from marl.algos.ppo_config import OnPolicyNetConfig
from marl.config import key
from marl.config.checks import minibatches_beyond_rows


@dataclass(frozen=True, kw_only=True)
class COMAConfig(OnPolicyNetConfig):
    """COMA keys (``docs/algorithms/coma.md``) on top of the on-policy ones (:class:`OnPolicyNetConfig`); values
    in ``configs/algos/coma.yaml``."""

    LAYER = "COMA"
    RULES = (minibatches_beyond_rows,)  # checks across keys (marl/config/checks.py)

    td_lambda: float = key("lambda of the critic's TD(lambda) targets (0: one-step targets)", ge=0, le=1)
    target_update_interval: int = key("learner updates between hard copies of the critic into its target", ge=1)
    epochs: int = key("passes over each rollout (the advantages are computed once, before the first)", ge=1)
    num_minibatches: int = key("minibatches per pass", ge=1)
