"""The config schema of IPPO and MAPPO (:class:`PPOConfig`) and its keys shared with the other
actor-critic algorithms on PPO's module (:class:`ActorCriticConfig`), apart from the trainer so that a
config is loaded and checked without importing torch or Ray (the algorithm is in :mod:`marl.algos.ppo`).

Sources of the keys: Schulman et al. 2017 (PPO clip, arXiv 1707.06347); Schulman et al. 2016
(GAE, arXiv 1506.02438); Yu et al. 2022 (MAPPO, arXiv 2103.01955: value normalisation, Huber
value loss, value clipping); de Witt et al. 2020 (IPPO, arXiv 2011.09533).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict

from marl.algos.networks.config import ACTIVATIONS, INITS, AgentNetConfig
from marl.config import EngineConfig, key
from marl.config.checks import minibatches_beyond_rows
from marl.config.critic import CRITICS, CriticChoice


@dataclass(frozen=True, kw_only=True)
class OnPolicyNetConfig(AgentNetConfig, EngineConfig):
    """Keys of every algorithm on the on-policy core with PPO's actor (the actor-critic ones below and COMA,
    ``docs/algorithms/coma.md``): the discount, the loss weights, the optimiser and the networks."""

    LAYER = "on-policy"

    gamma: float = key("discount factor", gt=0, le=1)
    entropy_coef: float = key("weight of the entropy bonus", ge=0)
    value_loss_coef: float = key("weight of the critic's loss", ge=0)
    adam_eps: float = key("Adam epsilon", gt=0)
    hidden: int = key("width of the hidden layers (and of the GRU)", ge=1)
    layers: int = key("hidden layers of the actor and critic MLPs", ge=1)
    activation: str = key("activation of the hidden layers", choices=ACTIVATIONS)
    layer_norm: bool = key("LayerNorm on the network inputs")
    policy_gain: float = key("orthogonal-init gain of the policy output layer", gt=0)
    init: str = key(
        "weight init of the linear layers: orthogonal (MAPPO's; gains by activation, policy_gain on the head) "
        "or torch (PyTorch's default, EPyMARL's networks)",
        choices=INITS,
    )
    recurrent: bool = key("GRU actor instead of an MLP (the critic stays an MLP)")
    chunk_length: int = key(
        "recurrent training: sequence chunk length in steps; 0 = the whole rollout (also when it does not divide "
        "rollout_length)",
        ge=1,
        off=0,
    )


NETWORK_KEYS = ("hidden", "layers", "activation", "layer_norm", "recurrent", "policy_gain", "init")


def network_model_config(cfg: OnPolicyNetConfig) -> Dict[str, Any]:
    """The network keys of :class:`OnPolicyNetConfig` as an RLModule ``model_config`` entry (key -> value),
    what PPO's actor and critic and COMA's read (``algos/ppo.py``, ``algos/coma.py``)."""
    return {k: getattr(cfg, k) for k in NETWORK_KEYS}


@dataclass(frozen=True, kw_only=True)
class ActorCriticConfig(CriticChoice, OnPolicyNetConfig):  # CriticChoice: cfg.critic_kind, auto resolved once
    """Keys of the actor-critic algorithms built on the on-policy core and PPO's module (IPPO, MAPPO:
    ``docs/algorithms/ppo.md``; IA2C, MAA2C: ``docs/algorithms/a2c.md``) on top of the on-policy ones: what
    the state-value critic sees, the value and advantage normalisations, and the Gaussian head."""

    LAYER = "actor-critic"

    critic: str = key(
        "value function: global state + agent id, one row per agent (state); global state once per "
        "env step with one value head per agent (team, MLP actors); own observation (obs: IPPO, IA2C); "
        "team for MLP actors and state for GRU actors (auto)",
        choices=CRITICS + ("auto",),
    )
    value_norm: bool = key("normalise value targets with running statistics (ValueNorm)")
    advantage_norm: bool = key("normalise advantages over the active agents of the batch")
    log_std_init: float = key("continuous actions: initial log standard deviation")
    clip_per_network: bool = key(
        "clip the actor's and the critic's gradients to max_grad_norm each by its own global norm (EPyMARL's and "
        "the MAPPO code's two optimisers); false: one global norm over both",
        before=False,  # runs saved before the key clipped with one norm
    )


@dataclass(frozen=True, kw_only=True)
class PPOConfig(ActorCriticConfig):
    """IPPO / MAPPO keys (``docs/algorithms/ppo.md``); values in ``configs/algos/mappo.yaml``, which
    ``ippo.yaml`` starts from (``base: mappo``)."""

    LAYER = "PPO"
    RULES = (minibatches_beyond_rows,)  # checks across keys (marl/config/checks.py)

    gae_lambda: float = key("GAE lambda", ge=0, le=1)
    clip: float = key("PPO clip epsilon of the policy ratio", gt=0)
    value_clip: float = key("clip of the value change around the old value; 0 = no value clipping", ge=0)
    huber_delta: float = key("Huber loss delta of the value loss; 0 = squared error", ge=0)
    epochs: int = key("passes over each rollout", ge=1)
    num_minibatches: int = key("minibatches per pass (split along the env copies)", ge=1)
    torch_compile: bool = key(
        "compile the learner's training forward and minibatch loss with torch.compile "
        "(inductor); the first update pays the compile, about 20 s on a 2-core CPU (docs/engine.md)"
    )
