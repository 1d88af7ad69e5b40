"""The config schema of IA2C and MAA2C (:class:`A2CConfig`), apart from the trainer so that a config is
loaded and checked without importing torch or Ray (the algorithm is in :mod:`marl.algos.a2c`).

Sources of the keys: Mnih et al. 2016, "Asynchronous Methods for Deep Reinforcement Learning" (A3C,
arXiv 1602.01783, Algorithm S3: n-step returns, entropy bonus); Papoudakis et al. 2021,
"Benchmarking Multi-Agent Deep Reinforcement Learning Algorithms in Cooperative Tasks" (EPyMARL,
arXiv 2006.07869, Section 3 and Appendix C) and its official code's IA2C and MAA2C configs and
actor-critic learner (``q_nstep``, ``target_update_interval_or_tau``, ``standardise_rewards``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

from marl.algos.ppo_config import ActorCriticConfig
from marl.config import key
from marl.config.checks import ERROR, rule

# the critic kinds each algorithm name trains (EPyMARL: ac_critic on the agent's observation for IA2C,
# cv_critic on the global state for MAA2C); another name registered on this schema may take any kind
ALGO_CRITICS = {"ia2c": ("obs",), "maa2c": ("state", "team", "auto")}


@rule(("critic",), ERROR, "an IA2C critic on the state is MAA2C and an MAA2C critic on the observation is IA2C")
def critic_of_the_algorithm(c: Any) -> Optional[str]:
    valid = ALGO_CRITICS.get(c.algo)
    if valid is None or c.critic in valid:
        return None
    other = "maa2c" if c.algo == "ia2c" else "ia2c"
    return (
        f"{c.algo} does not train critic={c.critic!r}; its critic is one of: {', '.join(valid)} "
        f"(for critic={c.critic!r} use algo {other})."
    )


@dataclass(frozen=True, kw_only=True)
class A2CConfig(ActorCriticConfig):
    """IA2C / MAA2C keys (``docs/algorithms/a2c.md``), on top of the actor-critic keys shared with PPO;
    values in ``configs/algos/maa2c.yaml``, which ``ia2c.yaml`` starts from (``base: maa2c``). One
    gradient step per rollout: the on-policy core's ``epochs`` and ``num_minibatches`` are fixed at 1
    (class constants, not keys)."""

    LAYER = "A2C"
    # checks across keys (marl/config/checks.py); the on-policy core adds its minibatch check to every schema
    RULES = (critic_of_the_algorithm,)

    epochs = 1  # read by the on-policy core: A2C takes one gradient step on each rollout
    num_minibatches = 1

    nstep: int = key("n of the n-step returns the critic regresses on and the advantages use (EPyMARL q_nstep)", ge=1)
    target_tau: float = key(
        "soft update rate of the target critic that gives the n-step bootstrap values, per update; 1 = no target",
        gt=0,
        le=1,
    )
    standardise_rewards: bool = key("train on (r - running mean) / running std of all rewards seen (EPyMARL)")
