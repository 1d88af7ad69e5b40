"""Result of :func:`marl.fit`; :func:`load` reads a checkpoint back into one."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional

from marl.checkpoint import MODULES_DIR, read_meta, reading, resolve_checkpoint
from marl.config import ConfigBase, restore_config, trainer_class
from marl.env import EnvSpec, MultiAgentEnv, list_envs
from marl.errors import MarlError
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
        ``env`` (default: the trained scenario rebuilt with ``num_envs`` copies and the env's declared
        ``eval_kwargs``, e.g. Overcooked's shaped reward off); text games play
        ``episodes`` games against the bot ``opponent``. See ``Policy.evaluate_episodes``."""
        return self.policy.evaluate_episodes(
            episodes, env=env, env_spec=self.env_spec, num_envs=num_envs, opponent=opponent
        )

    def __repr__(self) -> str:
        r = self.metrics.get("episode_return_mean")
        return f"Result(env_steps={self.metrics.get('env_steps')}, return={r}, checkpoint={self.checkpoint!r})"


def load(path: str, env: Optional[MultiAgentEnv] = None, trust_checkpoint: bool = False) -> Result:
    """Load a checkpoint (a checkpoint folder, or a run folder: its latest checkpoint) without Ray.

    The algorithm class named in the checkpoint's metadata rebuilds its policy
    (:meth:`marl.engine.trainer.Trainer.policy_from_checkpoint`).

    Args:
        path: checkpoint or run folder.
        env: act in this env instead of the one trained on (transfer): the
            modules are rebuilt for its agents and entity counts and the trained
            weights copied in, which works for ``agent="hpn"`` / ``"dpn"``
            (see :mod:`marl.transfer`); ``result.evaluate()`` then plays ``env``'s scenario.
            Without ``env``, the env the checkpoint names is rebuilt only from a registered
            family (:func:`marl.list_envs`).
        trust_checkpoint: the checkpoint comes from a source you trust: read it without marl's
            limits (a checkpoint of an older marl: pickled metadata, no manifest; RLlib pickles
            naming classes outside :data:`marl.safe_pickle.ALLOWED`). Unpickling a file from an
            untrusted source can run any code (docs/security.md).

    Loading runs no code from the checkpoint: every file is first checked against the
    checksums marl wrote beside it (:func:`marl.checkpoint.verify_checkpoint`, which detects
    damage, not tampering), the metadata is JSON, and RLlib's pickles are read through an
    allowlist (:mod:`marl.safe_pickle`).

    Raises:
        MarlError: no marl checkpoint at ``path``; a damaged checkpoint (a missing manifest, a
            missing, truncated or changed file, metadata of the wrong type, named in the
            message); a pickle outside the allowlist or an env family that is not registered
            (without ``trust_checkpoint`` / ``env``); or, with ``env``, a network whose parameter
            shapes depend on the scenario.
    """
    ckpt = resolve_checkpoint(path, trust=trust_checkpoint)
    meta = read_meta(ckpt, trust=trust_checkpoint)
    if env is None and not trust_checkpoint:
        check_env_spec(ckpt, meta.get("env_spec"))
    with reading(ckpt, trust_checkpoint, under=MODULES_DIR):  # the modules are all a policy reads
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


def check_env_spec(ckpt: Any, spec: Optional[EnvSpec]) -> None:
    """Refuse an env spec whose family is not registered, or whose scenario is a module path
    (``pkg.module``, ``pkg:attr``) the family does not list: building either would import a module
    the checkpoint names. A plain scenario name is resolved by the family inside its own package.

    Raises:
        MarlError: names the family or scenario, the registered ones, and ``env=``.
    """
    if spec is None:
        return
    families = list(list_envs())
    how = "pass the env yourself: marl.load(path, env=marl.make_env(...)) (`marl eval <path> env=family:scenario`)"
    if spec.family not in families:
        raise MarlError(
            f"Checkpoint {ckpt} names env family {spec.family!r}, which is not registered here (registered: "
            f"{', '.join(families)}); marl builds a checkpoint's env only from a registered family: {how}."
        )
    try:
        scenarios = list_envs(with_scenarios=True, families=[spec.family])[spec.family]
    except Exception:  # noqa: BLE001 - a family that cannot list its scenarios leaves the check to make_env
        return
    listed = [s for s in scenarios if isinstance(s, str) and not s.startswith("<unavailable")]
    # a plain name is resolved by the family inside its own package; a module path would import what it names
    path_like = spec.scenario is not None and any(c in spec.scenario for c in ".:/")
    if path_like and spec.scenario not in listed:
        raise MarlError(
            f"Checkpoint {ckpt} names scenario {spec.scenario!r} of env family {spec.family!r}, a module path "
            f"the family does not list; marl imports no module a checkpoint names: {how}."
        )
