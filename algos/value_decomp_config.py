"""The config schema of IQL, VDN and QMIX (:class:`ValueDecompConfig`), apart from the trainer so
that a config is loaded and checked without importing torch or Ray (the algorithms are in
:mod:`marl.algos.value_decomp`).

Sources of the keys: Rashid et al. 2018 (QMIX, arXiv 1803.11485) and pymarl (released with SMAC,
Samvelyan et al. 2019, arXiv 1902.04043: RMSprop, hard target updates, mixing and hypernetwork
widths); Sunehag et al. 2018 (VDN, arXiv 1706.05296); Tampuu et al. 2017 (IQL, arXiv 1511.08779);
TD(lambda) targets as in Hu et al. 2021 (arXiv 2102.03479).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

from marl.algos.networks.config import AgentNetConfig
from marl.config import EngineConfig, key
from marl.config.checks import ERROR, RUN, WARNING, RunFacts, buffer_room, rule

MIXERS = ("none", "vdn", "qmix")
OPTIMIZERS = ("adam", "rmsprop")


# ------------------------------------------------------------ checks across keys (marl/config/checks.py)
def _never_in_buffer(name: str, need: int, capacity: int) -> Optional[str]:
    if need <= capacity:
        return None
    return (
        f"{name}={need} episodes can never be in a buffer of buffer_size={capacity} episodes, "
        f"so training would never start; use {name} <= buffer_size."
    )


@rule(
    ("batch_size", "buffer_size"), ERROR, "training waits for batch_size episodes in the buffer: it would never start"
)
def batch_beyond_buffer(c: Any) -> Optional[str]:
    return _never_in_buffer("batch_size", c.batch_size, c.buffer_size)


@rule(
    ("learning_starts_episodes", "buffer_size"),
    ERROR,
    "training waits for learning_starts_episodes episodes in the buffer: it would never start",
)
def starts_beyond_buffer(c: Any) -> Optional[str]:
    return _never_in_buffer("learning_starts_episodes", c.learning_starts_episodes, c.buffer_size)


@rule(
    ("buffer_size", "num_envs", "num_env_runners"),
    ERROR,
    "every env copy holds an open episode slot; the ring would evict open slots before their episodes end",
    scope=RUN,
)
def buffer_below_copies(c: Any, run: RunFacts) -> Optional[str]:
    return buffer_room(c.buffer_size, run.env_copies(c))


@rule(
    ("batch_size", "learning_starts_episodes", "buffer_size", "num_envs", "num_env_runners"),
    WARNING,
    "open episodes take buffer slots: training starts only if episodes happen to end together at "
    "the end of a rollout (it does for fixed-length episodes that divide rollout_length)",
    scope=RUN,
)
def start_needs_open_slots(c: Any, run: RunFacts) -> Optional[str]:
    need, copies = max(c.batch_size, c.learning_starts_episodes), run.env_copies(c)
    if need + copies <= c.buffer_size:
        return None
    return (
        f"training starts when the buffer holds max(batch_size, learning_starts_episodes)={need} finished "
        f"episodes, but the {copies} env copies each keep a running episode in it, so it holds at most "
        f"buffer_size - {copies} = {c.buffer_size - copies} finished episodes while they run: training starts "
        f"only if episodes end together at the end of a rollout, and may never start. Use buffer_size >= "
        f"{need + copies}."
    )


@rule(
    ("episodes_per_update", "buffer_size"),
    WARNING,
    "runs, but episodes leave the buffer before any gradient step can sample them",
)
def updates_outrun_buffer(c: Any) -> Optional[str]:
    if c.episodes_per_update <= c.buffer_size:
        return None
    lost = 1 - c.buffer_size / c.episodes_per_update
    return (
        f"episodes_per_update={c.episodes_per_update} is more than buffer_size={c.buffer_size}: a gradient "
        f"step comes every {c.episodes_per_update} new episodes, but the buffer keeps only the newest "
        f"{c.buffer_size}, so at least {lost:.0%} of the episodes leave it before any gradient step can "
        f"sample them. Use episodes_per_update <= buffer_size."
    )


@rule(
    ("batch_size", "episodes_per_update"),
    WARNING,
    "runs, but an episode is replayed less than once on average (pymarl: 32 per episode, pymarl2: 16)",
)
def few_replays(c: Any) -> Optional[str]:
    if c.batch_size >= c.episodes_per_update:
        return None
    return (
        f"batch_size={c.batch_size} is less than episodes_per_update={c.episodes_per_update}: each gradient "
        f"step samples {c.batch_size} episodes per {c.episodes_per_update} new ones, so an episode is replayed "
        f"{c.batch_size / c.episodes_per_update:.2g} times on average and many never. Use batch_size >= "
        f"episodes_per_update."
    )


@rule(
    ("epsilon_start", "epsilon_end"),
    ERROR,
    "a rising schedule explores more the longer it learns; almost surely the two values swapped",
)
def epsilon_rises(c: Any) -> Optional[str]:
    if c.epsilon_start >= c.epsilon_end:
        return None
    return (
        f"epsilon_start={c.epsilon_start} is below epsilon_end={c.epsilon_end}: exploration would rise over "
        f"epsilon_anneal_steps={c.epsilon_anneal_steps} env steps instead of decaying. Swap the two values "
        f"(epsilon_start is the higher), or give epsilon_start == epsilon_end for a constant epsilon."
    )


@rule(
    ("epsilon_anneal_steps", "epsilon_start", "epsilon_end"),
    WARNING,
    "runs with a constant epsilon_end (documented: the schedule reaches epsilon_end after "
    "epsilon_anneal_steps), but epsilon_start is never used",
)
def epsilon_never_anneals(c: Any) -> Optional[str]:
    if c.epsilon_anneal_steps > 0 or c.epsilon_start == c.epsilon_end:
        return None
    return (
        f"epsilon_anneal_steps=0 with epsilon_start={c.epsilon_start} and epsilon_end={c.epsilon_end}: epsilon "
        f"is {c.epsilon_end} from the first step and epsilon_start is never used. Give epsilon_anneal_steps > 0 "
        f"env steps to anneal, or epsilon_start == epsilon_end."
    )


@dataclass(frozen=True, kw_only=True)
class ValueDecompConfig(AgentNetConfig, EngineConfig):
    """IQL / VDN / QMIX keys (``docs/algorithms/value_decomposition.md``); values in
    ``configs/algos/qmix.yaml``, which ``vdn.yaml`` and ``iql.yaml`` start from (``base: qmix``)."""

    LAYER = "value decomposition"
    RULES = (
        batch_beyond_buffer,
        starts_beyond_buffer,
        buffer_below_copies,
        start_needs_open_slots,
        updates_outrun_buffer,
        few_replays,
        epsilon_rises,
        epsilon_never_anneals,
    )

    mixer: str = key(
        "team value: none (IQL, one TD loss per agent), vdn (sum) or qmix (monotonic mixer)", choices=MIXERS
    )
    gamma: float = key("discount factor", gt=0, le=1)
    optimizer: str = key("adam, or rmsprop (pymarl's RMSprop: alpha 0.99, eps 1e-5)", choices=OPTIMIZERS)
    batch_size: int = key("episodes per gradient step", ge=1)
    buffer_size: int = key("episodes in the joint replay buffer", ge=1)
    episodes_per_update: int = key("new episodes per gradient step", ge=1)
    learning_starts_episodes: int = key("episodes in the buffer before training (at least batch_size)", ge=0)
    target_update_interval: int = key("episodes between hard target-network copies", ge=1)
    standardise_rewards: bool = key("train on (r - running mean) / running std (EPyMARL standardise_rewards)")
    td_lambda: float = key("TD(lambda) targets; 0 = the 1-step target", ge=0, le=1)
    epsilon_start: float = key("exploration epsilon at env step 0", ge=0, le=1)
    epsilon_end: float = key("exploration epsilon after epsilon_anneal_steps", ge=0, le=1)
    epsilon_anneal_steps: int = key("env steps of the linear epsilon decay", ge=0)
    hidden: int = key("width of the agent network (rnn_hidden_dim)", ge=1)
    recurrent: bool = key("FC-GRU-FC agent network (pymarl rnn_agent) instead of an MLP")
    last_action: bool = key("the agent's last action is part of its input (obs_last_action)")
    mixing_embed: int = key("QMIX: mixing network width (mixing_embed_dim)", ge=1)
    hypernet_layers: int = key("QMIX: layers of the hypernetworks", choices=(1, 2))
    hypernet_embed: int = key("QMIX: hidden width of two-layer hypernetworks", ge=1)
    checkpoint_buffer: bool = key("save the replay buffer in checkpoints (a resumed run keeps learning off-policy)")
    q_abs_max: float = key(
        "TrainingDiverged when an agent's Q or Q_tot of a trained step exceeds this in absolute "
        "value (diverging TD targets); 0 = no bound",
        gt=0,
        off=0,
    )
