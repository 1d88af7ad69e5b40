"""The engine layer of the configuration: keys every algorithm has (values in ``configs/engine.yaml``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Dict, Optional, Union

from marl.config.checks import learners_beyond_cores
from marl.config.schema import ConfigBase, key

LR_SCHEDULES = ("constant", "linear")
SHARE_MODES = ("auto", "all", "group", "individual")  # policy mapping modes (marl.mapping.PolicyMapping)
NON_FINITE = ("raise", "mask", "off")  # what env runners do with NaN/inf from the env (marl.engine.guards)


POOL_SAMPLING = ("latest", "uniform")  # which opponent-pool snapshot plays (marl.engine.opponents)


def transform_choices():
    """``none`` and the registered batch transforms (imported here, when first asked: marl.transforms
    registers config sections, so importing it with this module would be circular)."""
    from marl.transforms import transform_choices as choices

    return choices()


@dataclass(frozen=True, kw_only=True)
class EngineConfig(ConfigBase):
    """Engine keys, shared by every algorithm: sampling, learners, seeds, logging, checkpoints,
    learning rate. An algorithm's file may set other values for them (``lr``, ``max_grad_norm``)."""

    LAYER = "engine"
    DEFAULTS = "engine.yaml"
    RULES = (learners_beyond_cores,)  # checks across keys (marl/config/checks.py)

    num_envs: Optional[int] = key("batched env copies B per env runner; null = the env's own num_envs", ge=1)
    rollout_length: int = key("T: steps per env copy per iteration", ge=1)
    num_env_runners: int = key("remote sampling actors; 0 = sample in the driver (at most the number of CPUs)", ge=0)
    num_cpus_per_env_runner: float = key("CPUs per env runner (scaled down automatically to fit Ray's CPUs)", gt=0)
    env_runner_restarts: int = key(
        "restarts of each remote env runner after its process dies (docs/engine.md, Fault tolerance); "
        "0 = a lost runner stays lost and training goes on with the others",
        ge=0,
    )
    env_runner_restart_timeout_s: float = key(
        "seconds to wait for a restarted env runner when none is left, before the run stops", gt=0
    )
    num_learners: int = key("0 = one local learner in the driver; k > 1 = DDP across k learner actors", ge=0)
    num_gpus_per_learner: float = key("GPUs per learner", ge=0)
    num_cpus_per_learner: float = key("CPUs per learner actor (scaled down automatically to fit Ray's CPUs)", gt=0)
    torch_threads: int = key("torch threads in the driver and the samplers", ge=1)
    non_finite: str = key(
        "NaN/inf in an env's observations, states or rewards: raise (an error naming env, agent, "
        "field, step), mask (replaced by 0, counted in non_finite_masked) or off (unchecked)",
        choices=NON_FINITE,
    )
    seed: int = key("seed of the networks, the env copies and the replay sampling", ge=0)
    share: Union[str, Callable] = key(
        "policy mapping (docs/mapping.md); in Python also a callable agent id -> module id", choices=SHARE_MODES
    )
    agent_id: bool = key("append a one-hot agent index to the input of modules shared by several agents")
    lr: float = key("learning rate (Adam / AdamW / RMSprop step size)", gt=0)
    lr_schedule: str = key("constant, or linear: decays lr to 0 at the stop's env_steps", choices=LR_SCHEDULES)
    lr_anneal_steps: int = key("env steps at which a linear lr reaches 0; fit sets it from stop.env_steps", ge=0)
    max_grad_norm: float = key("clip gradients to this global L2 norm", gt=0)
    reward_redistribution: str = key(
        "a registered batch transform that rewrites rewards before the loss (marl/transforms.py; causal_shift, legem: "
        "off-beat envs, docs/offbeat.md), its keys in a section of its name; none = rewards as the env gives them",
        choices=transform_choices,
    )
    log_dir: str = key("runs go to <log_dir>/<family>-<scenario>-<algo>-<time>/ (TensorBoard, CSV, checkpoints)")
    checkpoint_every: int = key("iterations between checkpoints; 0 = only the one at the end", ge=0)
    keep_checkpoints: int = key("checkpoints kept in the run folder (the newest); 0 = all", ge=0)
    progress: bool = key("print a progress bar / line per iteration")
    eval_episodes: int = key("greedy evaluation episodes at the end of fit (tensor envs); 0 = none", ge=0)
    # competitive envs: who plays the seats the learner does not (docs/competitive.md)
    opponents: Dict[str, float] = key("training co-players (self, pool, or a bot of the game) -> probability")
    pool_every: int = key("iterations between snapshots into the opponent pool; 0 = never", ge=0)
    pool_size: int = key("snapshots kept in the opponent pool", ge=1)
    pool_sampling: str = key(
        "which pool snapshot plays: latest, or uniform over the pool (tensor envs)", choices=POOL_SAMPLING
    )
