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

from marl.algos.networks.config import AgentNetConfig
from marl.config import EngineConfig, key

MIXERS = ("none", "vdn", "qmix")
OPTIMIZERS = ("adam", "rmsprop")


@dataclass(frozen=True, kw_only=True)
class ValueDecompConfig(AgentNetConfig, EngineConfig):
    """IQL / VDN / QMIX keys (``docs/algorithms/value_decomposition.md``); values in
    ``configs/algos/qmix.yaml``, which ``vdn.yaml`` and ``iql.yaml`` start from (``base: qmix``)."""

    LAYER = "value decomposition"

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
