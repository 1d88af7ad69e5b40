"""Result of :func:`marl.fit`; :func:`load` reads a checkpoint back into one."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional

from marl.checkpoint import read_meta, resolve_checkpoint
from marl.config import ConfigBase, restore_config, trainer_class
from marl.env import EnvSpec, MultiAgentEnv
from marl.policy import Policy


@dataclass
class Result:
    """What :func:`marl.fit` returns.

    Attributes:
        metrics: last iteration's metrics (env steps, returns, losses, steps/s).
        history: metrics of every iteration.
        checkpoint: path of the final checkpoint (reload with :func:`marl.load`).
        log_dir: run folder (TensorBoard logs in ``<log_dir>/tb``, ``progress.csv``).
        policy: greedy :class:`Policy`.
        env_spec: how to rebuild the env trained on (``None`` for an env built by hand).
        config: the run's typed configuration, an instance of the algorithm's schema after
            :func:`marl.fit` and after :func:`load` (``config.lr``, ``config.replace(...)``); after
            :func:`load`, a value the checkpoint holds as text (a callable ``share``) is the YAML default
            (:func:`marl.config.restore_config`).
        eval: statistics of the greedy evaluation at the end of training (may be empty).
    """

    metrics: Dict[str, Any]
    history: List[Dict[str, Any]]
    checkpoint: Optional[str]
    log_dir: Optional[str]
    policy: Policy
    env_spec: Optional[EnvSpec] = None
    config: Optional[ConfigBase] = None
    eval: Dict[str, float] = field(default_factory=dict)

    def evaluate(
        self,
        episodes: int = 32,
        env: Optional[MultiAgentEnv] = None,
        num_envs: Optional[int] = None,
        opponent: str = "random",
    ) -> Dict[str, float]:
        """Greedy evaluation: the mean of each episode statistic over ``episodes`` episodes of
        ``env`` (default: the trained scenario rebuilt with ``num_envs`` copies); text games play
        ``episodes`` games against the bot ``opponent``. See ``Policy.evaluate_episodes``."""
        return self.policy.evaluate_episodes(
            episodes, env=env, env_spec=self.env_spec, num_envs=num_envs, opponent=opponent
        )

    def __repr__(self) -> str:
        r = self.metrics.get("episode_return_mean")
        return f"Result(env_steps={self.metrics.get('env_steps')}, return={r}, checkpoint={self.checkpoint!r})"


def load(path: str, env: Optional[MultiAgentEnv] = None) -> Result:
    """Load a checkpoint (a checkpoint folder, or a run folder: its latest checkpoint) without Ray.

    The algorithm class named in the checkpoint's metadata rebuilds its policy
    (:meth:`marl.engine.trainer.Trainer.policy_from_checkpoint`).

    Args:
        path: checkpoint or run folder.
        env: act in this env instead of the one trained on (transfer): the
            modules are rebuilt for its agents and entity counts and the trained
            weights copied in, which works for ``agent="hpn"`` / ``"dpn"``
            (see :mod:`marl.transfer`); ``result.evaluate()`` then plays ``env``'s scenario.

    Checkpoints are pickles: load only those from a source you trust. Every file is
    first checked against the checksums marl wrote beside it
    (:func:`marl.checkpoint.verify_checkpoint`).

    Raises:
        MarlError: no marl checkpoint at ``path``; a damaged checkpoint (a missing,
            truncated or changed file, named in the message); or, with ``env``, a
            network whose parameter shapes depend on the scenario.
    """
    ckpt = resolve_checkpoint(path)
    meta = read_meta(ckpt)
    policy = trainer_class(meta["algo"]).policy_from_checkpoint(ckpt, meta, env)
    return Result(
        metrics=meta.get("metrics", {}),
        history=[],
        checkpoint=str(ckpt),
        log_dir=str(ckpt.parent.parent),
        policy=policy,
        env_spec=env.spec if env is not None else meta.get("env_spec"),
        config=restore_config(meta["algo"], meta["config"]),
    )
