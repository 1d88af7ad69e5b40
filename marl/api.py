"""``marl.fit``: train an algorithm on a :class:`~marl.env.MultiAgentEnv` with one call.

The data path, in one line: ``make_env -> fit -> (Trainer: runner -> learner) -> Result``.
:func:`prepare` checks everything that needs no Ray (config, algorithm/env fit,
policy mapping); :func:`build_trainer` starts Ray and builds the trainer with
its env, run folder and callbacks; :func:`fit` runs the iterations, writes
logs and checkpoints and returns a :class:`~marl.results.Result`.
"""
from __future__ import annotations

import datetime as _dt
import os
import uuid
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

import yaml

from marl.callbacks import Callback, CallbackList
from marl.checkpoint import resolve_checkpoint, save_checkpoint
from marl.config import EngineConfig, config_view, list_algos, load_config, trainer_class, validate_stop
from marl.env import MarlError, MultiAgentEnv, set_fit_entry
from marl.errors import EnvRunnersLost, TrainingDiverged
from marl.mapping import PolicyMapping
from marl.results import Result, load

__all__ = ["fit", "build_trainer", "prepare", "load", "list_algos", "init_ray", "start_ray"]

DEFAULT_STOP = {"env_steps": 1_000_000}


def start_ray() -> bool:
    """Start a local Ray with this machine's CPUs and no dashboard, unless one is running.

    Returns True if this call started it.
    """
    import ray

    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    os.environ.setdefault("RAY_DEDUP_LOGS", "0")
    if ray.is_initialized():
        return False
    ray.init(num_cpus=os.cpu_count() or 1, include_dashboard=False, log_to_driver=False, configure_logging=False)
    return True


def init_ray(cfg: Union[EngineConfig, Dict[str, Any]]) -> Union[EngineConfig, Dict[str, Any]]:
    """Start Ray for this machine if needed and fit the requested actors into its CPUs.

    Asking for more CPUs than Ray has makes RLlib hang silently at build time
    (measured with 3 env runners on 2 CPUs), so requests are checked here:
    more env runners than CPUs is an error; otherwise per-actor CPU shares are
    scaled down so that runners and learners fit (in a copy of ``cfg``).

    Raises:
        MarlError: more env runners than Ray has CPUs.
    """
    import ray

    start_ray()
    cpus = float(ray.cluster_resources().get("CPU", 1))
    c = config_view(cfg)  # a plain dict of these keys is accepted too (tests call init_ray with one)
    runners, learners = c.num_env_runners, c.num_learners
    if runners > cpus:
        raise MarlError(f"num_env_runners={runners} is more than the {cpus:g} CPUs Ray has; use at most {int(cpus)}.")
    want = runners * c.num_cpus_per_env_runner + learners * c.num_cpus_per_learner
    if want > cpus:
        scale = cpus / want
        shares = {"num_cpus_per_env_runner": c.num_cpus_per_env_runner * scale,
                  "num_cpus_per_learner": c.num_cpus_per_learner * scale}
        cfg = cfg.replace(**shares) if isinstance(cfg, EngineConfig) else {**cfg, **shares}
    return cfg


def prepare(env: MultiAgentEnv, algo: str, overrides: Dict[str, Any]):
    """Validate everything that can be checked without Ray: config, algorithm/env fit, mapping.

    Returns ``(cfg, algo_class, env, mapping)``; ``env`` is rebuilt with the
    config's ``num_envs`` when that differs from the env's own.

    Raises:
        MarlError: unknown algorithm or config key, an env the algorithm cannot
            handle, or a mapping that puts agents with different spaces in one module.
    """
    from marl.text import TextEnv  # the text-game contract (imports RLlib's env base)

    if not isinstance(env, (MultiAgentEnv, TextEnv)):
        raise MarlError(f"fit() needs an env from marl.make_env (a MultiAgentEnv or a TextEnv), got {type(env).__name__}.")
    cfg = load_config(algo, env.info.family, overrides)
    algo_cls = trainer_class(algo)
    algo_cls.check_env(cfg, env.info)
    if cfg.num_envs and cfg.num_envs != env.num_envs:
        if env.spec is None:
            raise MarlError("num_envs can only be changed for envs built by marl.make_env(name, ...).")
        env = env.spec.make(num_envs=cfg.num_envs)
    mapping = PolicyMapping(env.info, share=cfg.share, agent_id=cfg.agent_id)
    algo_cls.check_mapping(cfg, mapping)
    return cfg, algo_cls, env, mapping


def build_trainer(env: MultiAgentEnv, algo: str, *, run_dir: Optional[Path] = None,
                  callbacks: Sequence[Callback] = (), **overrides: Any):
    """Validate, start Ray and build the trainer without training it.

    Args:
        env, algo, overrides: as for :func:`fit`.
        run_dir: the run folder for files the algorithm writes (``None``: none are written).
        callbacks: run callbacks, after the env's own (:meth:`MultiAgentEnv.callbacks`).

    Returns ``(trainer, env, mapping, cfg)``; ``trainer.train()["marl"]`` runs one
    iteration and returns its metrics; call ``trainer.stop()`` at the end.
    :func:`fit` is built on this.
    """
    cfg, algo_cls, env, mapping = prepare(env, algo, overrides)
    return _build(cfg, algo_cls, env, mapping, run_dir, callbacks)


def _build(cfg, algo_cls, env, mapping, run_dir: Optional[Path], callbacks: Sequence[Callback]):
    cfg = init_ray(cfg)
    run_callbacks = CallbackList([*env.callbacks(), *callbacks])
    config = algo_cls.build_config(cfg, env, mapping)
    trainer = algo_cls(config=config, env=env, run_dir=run_dir, callbacks=run_callbacks)
    return trainer, env, mapping, cfg


def fit(
    env: MultiAgentEnv,
    algo: str,
    *,
    stop: Optional[Dict[str, float]] = None,
    resume: Optional[str] = None,
    callbacks: Sequence[Callback] = (),
    **overrides: Any,
) -> Result:
    """Train ``algo`` on ``env`` and return a :class:`~marl.results.Result`.

    Args:
        env: a batched env from :func:`marl.make_env`.
        algo: algorithm name (see :func:`list_algos`: ``"mappo"``, ``"ippo"``, ...).
        stop: any of ``env_steps``, ``iterations``, ``time_s``,
            ``episode_return_mean`` (the first reached ends the run);
            default ``{"env_steps": 1_000_000}``.
        resume: a checkpoint or run folder; training continues from it (weights,
            optimiser state and step count) and logs into the same run folder.
        callbacks: :class:`~marl.callbacks.Callback` instances, called after the env's own.
        **overrides: config keys (``lr=3e-4``, ``share="group"``,
            ``num_env_runners=2``, ...); unknown keys are errors listing the valid ones.

    Raises:
        MarlError: bad configuration or input (before Ray starts).
        TrainingDiverged: a loss became NaN/inf; the last good checkpoint is
            kept and named in the message.
    """
    stop = validate_stop(stop if stop is not None else DEFAULT_STOP)
    overrides = _anneal_to_stop(stop, overrides)
    cfg, algo_cls, env, mapping = prepare(env, algo, overrides)  # checked before a run folder exists
    run_dir = _run_dir(cfg, env, resume)
    trainer, env, mapping, cfg = _build(cfg, algo_cls, env, mapping, run_dir, callbacks)
    with open(run_dir / "config.yaml", "w") as f:
        yaml.safe_dump(_yaml_safe({**cfg.to_dict(), "stop": stop}), f, sort_keys=False)
    meta = {"algo": algo, "config": _yaml_safe(cfg.to_dict()), "env_spec": env.spec, "env_info": env.info,
            "agent_to_module": dict(mapping.agent_to_module), **type(trainer).checkpoint_meta(cfg)}
    try:
        if resume:
            trainer.restore_from_path(str(resolve_checkpoint(resume).resolve()))
        if cfg.progress:
            print(f"[marl] {algo} on {env!r}; {mapping}; logs: {run_dir} (tensorboard --logdir {run_dir / 'tb'})",
                  flush=True)
        trainer.run_callbacks.on_fit_start(trainer)
        metrics, history, checkpoint = _train(trainer, cfg, stop, run_dir, meta)
        result = Result(metrics=metrics, history=history, checkpoint=checkpoint, log_dir=str(run_dir),
                        policy=trainer.make_policy(mapping), env_spec=env.spec, config=cfg)
        trainer.run_callbacks.on_fit_end(trainer, result)
    finally:
        trainer.stop()
    if cfg.eval_episodes > 0:
        result.eval = result.evaluate(cfg.eval_episodes, env=env)
        trainer.run_callbacks.on_evaluate(result, result.eval)
        if cfg.progress:
            print(f"[marl] greedy evaluation over {cfg.eval_episodes} episodes: return "
                  f"{result.eval.get('episode_return_mean', float('nan')):.2f}; checkpoint: {checkpoint}", flush=True)
    return result


def _train(trainer, cfg: EngineConfig, stop: Dict[str, float], run_dir: Path,
           meta: Dict[str, Any]) -> Tuple[Dict[str, Any], List[Dict[str, Any]], str]:
    """The iteration loop of :func:`fit`: train, log, checkpoint every ``checkpoint_every``
    iterations and at the end. Returns ``(last metrics, history, final checkpoint)``.

    Raises:
        TrainingDiverged: a loss became NaN/inf (the message names the last good checkpoint).
    """
    from marl.logging import RunLogger

    keep = cfg.keep_checkpoints
    logger = RunLogger(run_dir, stop, show=cfg.progress, initial_steps=trainer.progress["env_steps"])
    history: List[Dict[str, Any]] = []
    last_ckpt: Optional[Path] = None
    m: Dict[str, Any] = dict(trainer.progress, iteration=trainer.progress["iterations"])
    try:
        while not _stop_reached(stop, m):
            try:
                m = trainer.train()["marl"]
            except Exception as e:  # noqa: BLE001 - NaN errors come wrapped by Ray
                if _diverged(e):
                    raise TrainingDiverged(
                        f"{_diverged(e)}. Training stopped at {trainer.progress['env_steps']} env steps; "
                        f"last good checkpoint: {last_ckpt or 'none yet'}; logs kept in {run_dir}."
                    ) from e
                if _diverged(e, EnvRunnersLost):  # every env runner gone for good (marl/engine/faults.py)
                    raise EnvRunnersLost(
                        f"{_diverged(e, EnvRunnersLost)} Training stopped at {trainer.progress['env_steps']} env "
                        f"steps; last checkpoint: {last_ckpt or 'none yet'}; logs kept in {run_dir}."
                    ) from e
                raise
            logger.log(m)
            history.append(m)
            if cfg.checkpoint_every and m["iteration"] % cfg.checkpoint_every == 0:
                last_ckpt = _checkpoint(trainer, run_dir, meta, keep)
        last_ckpt = _checkpoint(trainer, run_dir, meta, keep)
    finally:
        logger.close()
    return m, history, str(last_ckpt)


def _checkpoint(trainer, run_dir: Path, meta: Dict[str, Any], keep: int) -> Path:
    path = save_checkpoint(trainer, run_dir, meta, keep)
    trainer.run_callbacks.on_checkpoint_save(trainer, path)
    return path


def _anneal_to_stop(stop: Dict[str, float], overrides: Dict[str, Any]) -> Dict[str, Any]:
    """``lr_schedule='linear'`` decays to 0 at the stop's ``env_steps`` (``lr_anneal_steps``).

    Raises:
        MarlError: a linear schedule without an ``env_steps`` stop criterion.
    """
    if overrides.get("lr_schedule") != "linear":
        return overrides
    if "env_steps" not in stop:
        raise MarlError("lr_schedule='linear' decays the learning rate to 0 at the stop's env_steps; "
                        "give stop={'env_steps': N}.")
    return {**overrides, "lr_anneal_steps": int(stop["env_steps"])}


def _run_dir(cfg: EngineConfig, env: MultiAgentEnv, resume: Optional[str]) -> Path:
    if resume:
        return resolve_checkpoint(resume).parent.parent
    stamp = _dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    name = f"{env.info.family}-{env.info.scenario}-{cfg.algo}-{stamp}-{uuid.uuid4().hex[:4]}"
    d = Path(cfg.log_dir) / name
    d.mkdir(parents=True, exist_ok=True)
    return d


def _stop_reached(stop: Dict[str, float], m: Dict[str, Any]) -> bool:
    if "env_steps" in stop and m["env_steps"] >= stop["env_steps"]:
        return True
    if "iterations" in stop and m["iteration"] >= stop["iterations"]:
        return True
    if "time_s" in stop and m["time_s"] >= stop["time_s"]:
        return True
    r = m.get("episode_return_mean")
    return "episode_return_mean" in stop and r is not None and r >= stop["episode_return_mean"]


def _yaml_safe(cfg: Dict[str, Any]) -> Dict[str, Any]:
    return {k: (v if isinstance(v, (int, float, str, bool, type(None), list, dict)) else repr(v)) for k, v in cfg.items()}


def _diverged(e: BaseException, kind: type = TrainingDiverged) -> Optional[str]:
    """The message of a ``kind`` error (TrainingDiverged) inside ``e`` (Ray wraps remote errors), else None."""
    seen = set()
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        if isinstance(e, kind):
            return str(e)
        cause = getattr(e, "cause", None)
        e = cause if isinstance(cause, BaseException) else (e.__cause__ or e.__context__)
    return None


set_fit_entry(fit)  # MultiAgentEnv.fit / TextEnv.fit train through marl.fit
