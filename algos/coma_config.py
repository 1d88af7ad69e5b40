"""The config schema of COMA (:class:`COMAConfig`), apart from the trainer so that a config is loaded
and checked without importing torch or Ray (the algorithm is in :mod:`marl.algos.coma`).

Sources of the keys: Foerster et al. 2018, "Counterfactual Multi-Agent Policy Gradients" (AAAI 2018,
arXiv 1705.08926), section 4 and appendix (TD(lambda) critic targets from a target network, lambda
0.8); EPyMARL (Papoudakis et al. 2021, arXiv 2006.07869),
https://github.com/uoe-agents/epymarl/blob/main/src/config/algs/coma.yaml.
"""

from __future__ import annotations

from dataclasses import dataclass

from marl.algos.networks.config import ACTIVATIONS, AgentNetConfig
from marl.config import EngineConfig, key
from marl.config.checks import minibatches_beyond_rows


@dataclass(frozen=True, kw_only=True)
class COMAConfig(AgentNetConfig, EngineConfig):
    """COMA keys (``docs/algorithms/coma.md``); values in ``configs/algos/coma.yaml``."""

    LAYER = "COMA"
    RULES = (minibatches_beyond_rows,)  # checks across keys (marl/config/checks.py)

    gamma: float = key("discount factor", gt=0, le=1)
    td_lambda: float = key("lambda of the critic's TD(lambda) targets (0: one-step targets)", ge=0, le=1)
    target_update_interval: int = key("learner updates between hard copies of the critic into its target", ge=1)
    entropy_coef: float = key("weight of the entropy bonus", ge=0)
    value_loss_coef: float = key("weight of the critic's squared TD error in the loss", ge=0)
    adam_eps: float = key("Adam epsilon", gt=0)
    epochs: int = key("passes over each rollout (the advantages are computed once, before the first)", ge=1)
    num_minibatches: int = key("minibatches per pass", ge=1)
    hidden: int = key("width of the hidden layers (and of the GRU)", ge=1)
    layers: int = key("hidden layers of the actor and critic MLPs", ge=1)
    activation: str = key("activation of the hidden layers", choices=ACTIVATIONS)
    layer_norm: bool = key("LayerNorm on the network inputs")
    policy_gain: float = key("orthogonal-init gain of the policy output layer", gt=0)
    recurrent: bool = key("GRU actor instead of an MLP (the critic stays an MLP, as in the paper)")
    chunk_length: int = key("recurrent training: sequence chunk length in steps", ge=1)
