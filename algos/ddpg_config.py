"""The config schema of IDDPG, MADDPG and MATD3 (:class:`DDPGConfig`) and the keys they share with ISAC and
MASAC (:class:`OffPolicyACConfig`), apart from the trainer so that a
config is loaded and checked without importing torch or Ray (the algorithms are in :mod:`marl.algos.ddpg`).

Sources of the keys: Lillicrap et al. 2016 (DDPG, arXiv 1509.02971); Lowe et al. 2017 (MADDPG,
arXiv 1706.02275); Fujimoto et al. 2018 (TD3, arXiv 1802.09477: twin critics, target policy smoothing,
delayed policy updates); BenchMARL (Bettini et al. 2024, arXiv 2312.01472) for the default values
(``configs/algos/maddpg.yaml``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, List, Optional

from marl.algos.networks.config import ENCODER_HELP, encoder_layers
from marl.config import EngineConfig, key
from marl.config.checks import ERROR, rule

ACTIVATIONS = ("relu", "tanh", "elu")  # marl.algos.networks.mlp.ACTIVATIONS (that module imports torch)
CRITICS = ("obs", "joint_obs", "state")  # what a critic reads beside the actions (docs/algorithms/ddpg.md)
POLICY_GRADIENTS = ("own", "joint")  # which actions the actor loss's critic reads (docs/algorithms/ddpg.md)


EPISODE_BUFFER_MAX = 100_000  # episodes: a recurrent buffer allocates every slot at the episode limit (pymarl: 5000)


def _unit(c: Any) -> str:
    """What ``batch_size`` / ``buffer_size`` / ``learning_starts`` count: whole episodes with recurrent actors."""
    return "episodes" if c.recurrent else "transitions"


def _never_in_buffer(c: Any, name: str, need: int) -> Optional[str]:
    if need <= c.buffer_size:
        return None
    unit = _unit(c)
    return (
        f"{name}={need} {unit} can never be in a buffer of buffer_size={c.buffer_size} {unit}, "
        f"so training would never start; use {name} <= buffer_size."
    )


@rule(("batch_size", "buffer_size", "recurrent"), ERROR, "training waits for batch_size entries: it would never start")
def batch_beyond_buffer(c: Any) -> Optional[str]:
    return _never_in_buffer(c, "batch_size", c.batch_size)


@rule(("learning_starts", "buffer_size", "recurrent"), ERROR, "training waits for learning_starts entries: never")
def starts_beyond_buffer(c: Any) -> Optional[str]:
    return _never_in_buffer(c, "learning_starts", c.learning_starts)


@rule(("recurrent", "buffer_size"), ERROR, "recurrent actors keep whole episodes: buffer_size counts episodes")
def episode_buffer_size(c: Any) -> Optional[str]:
    if not c.recurrent or c.buffer_size <= EPISODE_BUFFER_MAX:
        return None
    return (
        f"recurrent=True keeps whole episodes, so buffer_size counts episodes: buffer_size={c.buffer_size} episodes "
        f"would take memory for {c.buffer_size} full-length episodes; use buffer_size <= {EPISODE_BUFFER_MAX} "
        f"(e.g. 5000, pymarl's) and batch_size in episodes (e.g. 32)."
    )


@rule(("async_sampling", "num_env_runners"), ERROR, "asynchronous sampling runs on remote env runners")
def async_needs_runners(c: Any) -> Optional[str]:
    if not c.async_sampling or c.num_env_runners >= 1:
        return None
    return (
        "async_sampling=True samples on remote env runners while the driver's learner steps, but num_env_runners=0 "
        "samples in the driver; use num_env_runners=1 (at most the CPUs the learner leaves) or async_sampling=False."
    )


@dataclass(frozen=True, kw_only=True)
class OffPolicyACConfig(EngineConfig):
    """Keys of the off-policy actor-critics on the transition buffer (the DDPG family, ``docs/algorithms/ddpg.md``,
    and the SAC family, ``docs/algorithms/sac.md``): critics, targets, replay, schedule and networks."""

    LAYER = "off-policy actor-critic"
    RULES = (batch_beyond_buffer, starts_beyond_buffer, episode_buffer_size, async_needs_runners, encoder_layers)

    critic: str = key(
        "what each agent's critic reads beside actions: obs (its own obs and action: IDDPG, ISAC), joint_obs (all "
        "agents' observations and actions: MADDPG, MASAC) or state (the global state and all actions)",
        choices=CRITICS,
    )
    critic_agent_id: bool = key(
        "a shared centralised critic (joint_obs, state) also reads the agent's one-hot index, one Q per agent (Lowe "
        "et al. 2017); false: one Q per sample for all agents of a module, computed once (BenchMARL's shared critic)"
    )
    policy_gradient: str = key(
        "the actions the actor loss's critic reads: own (the agent's current action, the others' stored: Lowe et al. "
        "2017, Eq. 5) or joint (every agent's current action: FACMAC's centralised gradient, BenchMARL's)",
        choices=POLICY_GRADIENTS,
    )
    twin_critics: bool = key("two critics, target = min of their targets (TD3's clipped double-Q; SAC's twin Q)")
    policy_delay: int = key("gradient steps per actor step and target update (TD3: 2)", ge=1)
    gamma: float = key("discount factor", gt=0, le=1)
    tau: float = key(
        "Polyak averaging of the targets after each actor step: theta' <- tau theta + (1-tau) theta'", gt=0, le=1
    )
    adam_eps: float = key("Adam epsilon", gt=0)
    batch_size: int = key("transitions per gradient step (recurrent: whole episodes)", ge=1)
    buffer_size: int = key("transitions in the replay buffer (recurrent: whole episodes)", ge=1)
    learning_starts: int = key(
        "transitions (recurrent: episodes) in the buffer before training (at least batch_size)", ge=0
    )
    gradient_steps: int = key("gradient steps per per_env_steps new env steps (all env copies)", ge=1)
    per_env_steps: int = key("env steps that pay for gradient_steps gradient steps", ge=1)
    hidden: int = key("width of the actor's and the critic's hidden layers", ge=1)
    layers: int = key("hidden layers of the actor and the critic", ge=1)
    activation: str = key("activation of the hidden layers", choices=ACTIVATIONS)
    # the actor and the critics each have their own encoders (algos/actor_critic_parts.py: CriticEncoders)
    encoder: Dict[str, Dict[str, List[int]]] = key(ENCODER_HELP)
    recurrent: bool = key(
        "GRU actors (pymarl's RNN agent, hidden wide) trained on whole episodes from an episode replay; the critics "
        "stay feed-forward on each step's inputs; batch_size, buffer_size and learning_starts then count episodes"
    )
    random_steps: int = key(
        "env steps (all env copies) at the start of a run that take uniformly random actions instead of the "
        "actors' (TD3's exploratory start, FACMAC's start_steps); counted per iteration: an iteration that starts "
        "below it acts at random throughout",
        ge=0,
    )
    checkpoint_buffer: bool = key("save the replay buffer in checkpoints (a resumed run keeps learning off-policy)")
    async_sampling: bool = key(
        "sample the next rollout on the remote env runners while the learner takes this rollout's gradient steps "
        "(needs num_env_runners >= 1); each rollout then comes from the policy of one iteration before"
    )


@dataclass(frozen=True, kw_only=True)
class DDPGConfig(OffPolicyACConfig):
    """IDDPG / MADDPG / MATD3 keys (``docs/algorithms/ddpg.md``); values in ``configs/algos/maddpg.yaml``,
    which ``iddpg.yaml`` and ``matd3.yaml`` start from (``base: maddpg``)."""

    LAYER = "DDPG family"

    target_noise: float = key("std of the target policy smoothing noise, in half action ranges (TD3: 0.2)", ge=0)
    target_noise_clip: float = key("the smoothing noise is clipped to +- this, in half action ranges", ge=0)
    exploration_noise_start: float = key("std of the Gaussian action noise at env step 0, in half action ranges", ge=0)
    exploration_noise_end: float = key("std of the action noise after exploration_anneal_steps", ge=0)
    exploration_anneal_steps: int = key("env steps of the linear noise decay", ge=0)
