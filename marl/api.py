"""``marl.fit``: train an algorithm on a :class:`~marl.env.MultiAgentEnv` with one call.

The data path, in one line: ``make_env -> fit -> (Trainer: runner -> learner) -> Result``.
:func:`prepare` checks everything that needs no Ray (config, algorithm/env fit,
policy mapping); :func:`build_trainer` starts Ray and builds the trainer with
its env, run folder and callbacks; :func:`fit` runs the iterations, writes
logs and checkpoints and returns a :class:`~marl.results.Result`.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

from marl.callbacks import Callback, CallbackList, check_callbacks
from marl.checkpoint import resolve_checkpoint, save_checkpoint
from marl.config import EngineConfig, config_view, list_algos, load_config, resolve_algo, trainer_class, validate_stop
from marl.env import MarlError, MultiAgentEnv, set_fit_entry
from marl.errors import EnvRunnersLost, RunInterrupted, TrainingDiverged
from marl.mapping import PolicyMapping
from marl.noise import quiet_third_party
from marl.results import Result, load
from marl.rundir import RunFolder, StopOnSignal, open_resume, open_run, restore, write_yaml
from marl.transforms import check_transforms

__all__ = ["fit", "build_trainer", "prepare", "load", "list_algos", "init_ray", "start_ray"]

DEFAULT_STOP = {"env_steps": 1_000_000}


def start_ray(num_cpus: Optional[int] = None, **init_kwargs: Any) -> bool:
    """Start a local Ray with ``num_cpus`` (default: this machine's) and no dashboard, unless one
    is running; ``init_kwargs`` go to ``ray.init`` (e.g. ``runtime_env``).

    The cluster marl starts is reachable from this machine only (every Ray server
    binds to the loopback address) and keeps Ray's token authentication on. To use
    a cluster, call ``ray.init(address=...)`` before ``fit``: marl then starts nothing.

    Third-party notices that say nothing about the run are filtered here and, through
    Ray's ``worker_process_setup_hook``, in the workers of the Ray started here
    (:mod:`marl.noise`; ``MARL_SHOW_THIRD_PARTY_WARNINGS=1`` shows them).

    Returns True if this call started it.
    """
    import ray

    from marl.engine.rllib_seam import init_loopback_ray

    quiet_third_party()
    os.environ.setdefault("RAY_DEDUP_LOGS", "0")
    if ray.is_initialized():
        return False
    runtime_env = dict(init_kwargs.pop("runtime_env", None) or {})
    runtime_env.setdefault("worker_process_setup_hook", "marl.noise.worker_setup_hook")
    # address="local": a new Ray of this process, never a cluster a `ray start` left behind on this
    # machine (ray.init would join that one, and refuse num_cpus)
    init_kwargs.setdefault("address", "local")
    init_loopback_ray(
        num_cpus=num_cpus or os.cpu_count() or 1,
        include_dashboard=False,
        log_to_driver=False,
        configure_logging=False,
        runtime_env=runtime_env,
        **init_kwargs,
    )
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
    start_ray()
    return _fit_to_ray(cfg)


def _fit_to_ray(cfg: Union[EngineConfig, Dict[str, Any]]) -> Union[EngineConfig, Dict[str, Any]]:
    """The CPU check and scaling of :func:`init_ray`, in the Ray that is running (started by the caller).

    Raises:
        MarlError: more env runners than Ray has CPUs.
    """
    import ray

    cpus = float(ray.cluster_resources().get("CPU", 1))
    c = config_view(cfg)  # a plain dict of these keys is accepted too (tests call init_ray with one)
    runners, learners = c.num_env_runners, c.num_learners
    if runners > cpus:
        raise MarlError(f"num_env_runners={runners} is more than the {cpus:g} CPUs Ray has; use at most {int(cpus)}.")
    want = runners * c.num_cpus_per_env_runner + learners * c.num_cpus_per_learner
    if want > cpus:
        scale = cpus / want
        shares = {
            "num_cpus_per_env_runner": c.num_cpus_per_env_runner * scale,
            "num_cpus_per_learner": c.num_cpus_per_learner * scale,
        }
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
    from marl.engine.opponents import check_opponents
    from marl.text import TextEnv  # the text-game contract (imports RLlib's env base)

    if not isinstance(env, (MultiAgentEnv, TextEnv)):
        raise MarlError(
            f"fit() needs an env from marl.make_env (a MultiAgentEnv or a TextEnv), got {type(env).__name__}."
        )
    algo = resolve_algo(algo, "text" if isinstance(env, TextEnv) else "tensor")  # one name, per-kind trainers
    cfg = load_config(algo, env.info.family, overrides)
    algo_cls = trainer_class(algo)
    algo_cls.check_env(cfg, env.info)
    check_transforms(cfg, env.info, algo_cls)  # the batch transforms it selects (reward_redistribution)
    _check_before_ray(cfg)
    env = _with_num_envs(env, cfg.num_envs, isinstance(env, TextEnv))
    mapping = PolicyMapping(env.info, share=cfg.share, agent_id=cfg.agent_id)
    if not isinstance(env, TextEnv):  # text games check their co-players against the game's bots
        check_opponents(cfg.opponents, env.info)
    algo_cls.check_mapping(cfg, mapping)
    algo_cls.check_run(cfg, env, mapping)
    return cfg, algo_cls, env, mapping


def _with_num_envs(env: MultiAgentEnv, num_envs: Optional[int], text: bool) -> MultiAgentEnv:
    """``env``, rebuilt from its spec when ``fit`` was given another ``num_envs`` than it has.

    Raises:
        MarlError: a text game (one game per env), or an env built by hand (no spec to rebuild it).
    """
    if not num_envs or num_envs == env.num_envs:
        return env
    if text:
        raise MarlError(
            f"num_envs={num_envs}: a text game is one game per env; play more games per iteration "
            f"with games_per_iteration=N instead."
        )
    if env.spec is None:
        raise MarlError(
            f"num_envs={num_envs} was given, but {env!r} has {env.num_envs} copies and was built by hand "
            f"(not by marl.make_env(name, ...)), so marl cannot rebuild it: build it with {num_envs} "
            f"copies yourself, or leave num_envs out."
        )
    return env.spec.make(num_envs=num_envs)


def _check_before_ray(cfg: EngineConfig) -> None:
    """What the trainer would find out only after Ray started: more env runners than the CPUs of the
    Ray :func:`start_ray` would start (a running Ray is checked by :func:`init_ray`), an ``init_from``
    without a checkpoint.

    Raises:
        MarlError: ``num_env_runners`` above ``os.cpu_count()``; no checkpoint at ``init_from``.
    """
    if getattr(cfg, "init_from", None):  # a key of the families with agent networks only
        resolve_checkpoint(cfg.init_from)
    ray = sys.modules.get("ray")
    cpus = os.cpu_count() or 1
    if not (ray is not None and ray.is_initialized()) and cfg.num_env_runners > cpus:
        raise MarlError(
            f"num_env_runners={cfg.num_env_runners} is more than the {cpus} CPUs of this machine; use at most {cpus}."
        )


def build_trainer(
    env: MultiAgentEnv,
    algo: str,
    *,
    run_dir: Optional[Path] = None,
    callbacks: Sequence[Callback] = (),
    **overrides: Any,
):
    """Validate, start Ray and build the trainer without training it.

    Args:
        env, algo, overrides: as for :func:`fit`.
        run_dir: the run folder for files the algorithm writes (``None``: none are written).
        callbacks: run callbacks, after the env's own (:meth:`MultiAgentEnv.callbacks`).

    Returns ``(trainer, env, mapping, cfg)``; ``trainer.train()["marl"]`` runs one
    iteration and returns its metrics; call ``trainer.stop()`` at the end.
    :func:`fit` is built on this.
    """
    callbacks = check_callbacks(callbacks)
    cfg, algo_cls, env, mapping = prepare(env, algo, overrides)
    start_ray()
    return _build(cfg, algo_cls, env, mapping, run_dir, callbacks)


def _build(cfg, algo_cls, env, mapping, run_dir: Optional[Path], callbacks: Sequence[Callback]):
    """The trainer of a prepared run, in the Ray its caller started (once: :func:`fit` must know
    whether it started Ray, to shut it down after an interrupt)."""
    cfg = _fit_to_ray(cfg)
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
    trust_checkpoint: bool = False,
    **overrides: Any,
) -> Result:
    """Train ``algo`` on ``env`` and return a :class:`~marl.results.Result`.

    Args:
        env: a batched env from :func:`marl.make_env`.
        algo: algorithm name (see :func:`list_algos`: ``"mappo"``, ``"ippo"``, ...).
        stop: any of ``env_steps``, ``iterations``, ``time_s``,
            ``episode_return_mean`` (the first reached ends the run), at least one
            of the first three (:func:`~marl.config.validate_stop`);
            default ``{"env_steps": 1_000_000}``.
        resume: a checkpoint or run folder (its latest checkpoint); training continues
            from it (weights, optimiser state and step count). It must match this call
            (algorithm, env, agents, groups and spaces, policy mapping). The run continues
            in the checkpoint's own run folder when it is that folder's latest checkpoint;
            otherwise in a new run folder whose ``parent.json`` names the source, which is
            only read (docs/index.md, "Run folders").
        callbacks: a list of :class:`~marl.callbacks.Callback` instances, called after the env's own.
        trust_checkpoint: the ``resume`` checkpoint comes from a source you trust: read it without
            marl's limits (pickled metadata of an older marl, no manifest, RLlib pickles naming
            classes outside :data:`marl.safe_pickle.ALLOWED`; docs/security.md).
        **overrides: config keys (``lr=3e-4``, ``share="group"``,
            ``num_env_runners=2``, ...); unknown keys are errors listing the valid ones.

    Raises:
        MarlError: bad configuration or input (before Ray starts; ``callbacks`` that are not a
            list of Callback instances; checks across keys, docs/configuration.md); a ``resume``
            checkpoint that is damaged, untrusted or does not match (before anything is written);
            a ``log_dir`` that is a file or not writable (before Ray starts); a run folder another
            process is writing; a checkpoint that cannot be written (a full disk: the last good
            checkpoint is kept, the partial one removed).
        TrainingDiverged: a loss became NaN/inf; the last good checkpoint is
            kept and named in the message.
        marl.errors.RunInterrupted: Ctrl-C / SIGTERM (a ``KeyboardInterrupt``): the current
            iteration finished and a checkpoint was saved (a second signal aborts at once);
            the message names the checkpoint and the call that resumes; Ray is shut down if
            this call started it.
    """
    quiet_third_party()
    stop = validate_stop(stop if stop is not None else DEFAULT_STOP)
    callbacks = check_callbacks(callbacks)  # before a run folder exists
    given = dict(overrides)  # as the user wrote them, for the resume hint
    overrides = _anneal_to_stop(stop, overrides)
    cfg, algo_cls, env, mapping = prepare(env, algo, overrides)  # checked before a run folder exists
    source = (
        open_resume(resume, cfg.algo, env.info, dict(mapping.agent_to_module), trust=trust_checkpoint)
        if resume
        else None
    )
    with open_run(cfg.log_dir, env.info, cfg.algo, source) as run:  # locked until the end of the block
        ray_started = start_ray()
        try:
            return _fit_run(run, cfg, algo_cls, env, mapping, stop, callbacks)
        except KeyboardInterrupt as e:  # RunInterrupted, or Ctrl-C while the trainer is built
            if isinstance(e, RunInterrupted):
                e.resume_call = _resume_call(algo, stop, given, e.checkpoint, bool(callbacks))
            if ray_started:
                import ray

                ray.shutdown()
            raise


def _fit_run(
    run: RunFolder, cfg, algo_cls, env, mapping, stop: Dict[str, float], callbacks: Sequence[Callback]
) -> Result:
    """Build the trainer into ``run``, restore the resumed checkpoint, train, stop the trainer, evaluate."""
    trainer, env, mapping, cfg = _build(cfg, algo_cls, env, mapping, run.path, callbacks)
    meta = {
        "algo": cfg.algo,
        "config": _yaml_safe(cfg.to_dict()),
        "env_spec": env.spec,
        "env_info": env.info,
        "agent_to_module": dict(mapping.agent_to_module),
        **type(trainer).checkpoint_meta(cfg),
    }
    try:
        if run.source is not None:
            restore(trainer, run, meta["config"])  # before the run's first file is written
        write_yaml(run.path / "config.yaml", _yaml_safe({**cfg.to_dict(), "stop": stop}))
        if cfg.progress:
            print(
                f"[marl] {cfg.algo}{_agent_net(cfg)} on {env!r}; {mapping}; {run.describe()} "
                f"(tensorboard --logdir {run.path / 'tb'})",
                flush=True,
            )
        trainer.run_callbacks.on_fit_start(trainer)
        metrics, history, checkpoint = _train(trainer, cfg, stop, run, meta)
        result = Result(
            metrics=metrics,
            history=history,
            checkpoint=checkpoint,
            log_dir=str(run.path),
            policy=trainer.make_policy(mapping),
            env_spec=env.spec,
            config=cfg,
        )
        trainer.run_callbacks.on_fit_end(trainer, result)
    finally:
        trainer.stop()
    if cfg.eval_episodes > 0:
        result.eval = _final_eval(result, cfg.eval_episodes, env, trainer.run)
        trainer.run_callbacks.on_evaluate(result, result.eval)
        if cfg.progress:
            print(
                f"[marl] greedy evaluation over {cfg.eval_episodes} episodes: return "
                f"{result.eval.get('episode_return_mean', float('nan')):.2f}; checkpoint: {checkpoint}",
                flush=True,
            )
    return result


def _final_eval(result: Result, episodes: int, env, run) -> Dict[str, float]:
    """``fit``'s greedy evaluation: on the training env itself, or, when the env declares
    :attr:`~marl.env.contract.MultiAgentEnv.eval_kwargs` (e.g. Overcooked's shaped reward off), on a
    separate copy built with them (the training env's reward is wherever its anneal stopped)."""
    if not run.eval_kwargs or env.spec is None:
        return result.evaluate(episodes, env=env)
    eval_env = run.make_eval_env(num_envs=env.num_envs)
    try:
        return result.evaluate(episodes, env=eval_env)
    finally:
        eval_env.close()


def _agent_net(cfg: EngineConfig) -> str:
    """`` (agent=hpn)``: the agent network of the families that choose one (``agent`` key), else ``""``."""
    agent = getattr(cfg, "agent", None)
    return f" (agent={agent})" if agent else ""


def _train(
    trainer, cfg: EngineConfig, stop: Dict[str, float], run: RunFolder, meta: Dict[str, Any]
) -> Tuple[Dict[str, Any], List[Dict[str, Any]], str]:
    """The iteration loop of :func:`fit`: train, log, checkpoint every ``checkpoint_every``
    iterations and at the end. Returns ``(last metrics, history, final checkpoint)``.

    A first SIGINT / SIGTERM ends the loop after the current iteration (a second aborts it).

    Raises:
        TrainingDiverged: a loss became NaN/inf (the message names the last good checkpoint).
        RunInterrupted: a signal stopped the run (after saving a checkpoint, unless aborted).
    """
    from marl.logging import RunLogger

    logger = RunLogger(run.path, stop, show=cfg.progress, initial_steps=trainer.progress["env_steps"])
    history: List[Dict[str, Any]] = []
    saved = _Saved(trainer, run, meta, cfg.keep_checkpoints)
    m: Dict[str, Any] = dict(trainer.progress, iteration=trainer.progress["iterations"])
    signals = StopOnSignal()
    try:
        with signals:
            while not _stop_reached(stop, m) and not signals.received:
                m = _iteration(trainer, run.path, saved.last)
                logger.log(m)
                history.append(m)
                if cfg.checkpoint_every and m["iteration"] % cfg.checkpoint_every == 0:
                    saved.save()
            saved.save()
    except KeyboardInterrupt as e:  # a second signal: abort now, keep what was saved
        raise _interrupted(trainer, run, saved.last, signals.received or "SIGINT", aborted=True) from e
    finally:
        logger.close()
    if signals.received and not _stop_reached(stop, m):
        print(f"[marl] {signals.received}: checkpoint saved: {saved.last}", flush=True)
        raise _interrupted(trainer, run, saved.last, signals.received, aborted=False)
    return m, history, str(saved.last)


def _iteration(trainer, run_dir: Path, last_ckpt: Optional[Path]) -> Dict[str, Any]:
    """One ``trainer.train()``; a NaN/inf loss (wrapped by Ray) becomes a TrainingDiverged naming the checkpoint."""
    try:
        return trainer.train()["marl"]
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


class _Saved:
    """The checkpoints of one fit: at most one per iteration; ``last`` is the newest (at first
    the checkpoint the run continues in place from, else ``None``)."""

    def __init__(self, trainer, run: RunFolder, meta: Dict[str, Any], keep: int):
        self.trainer, self.run, self.meta, self.keep = trainer, run, meta, keep
        self.last: Optional[Path] = run.protect
        self._at = trainer.progress["iterations"] if run.protect is not None else None

    def save(self) -> Path:
        it = self.trainer.progress["iterations"]
        if self._at != it:
            self.last = save_checkpoint(self.trainer, self.run.path, self.meta, self.keep, protect=self.run.protect)
            self._at = it
            self.trainer.run_callbacks.on_checkpoint_save(self.trainer, self.last)
        assert self.last is not None  # saved now, or the protected checkpoint of this very iteration
        return self.last


def _interrupted(trainer, run: RunFolder, last: Optional[Path], sig: str, aborted: bool) -> RunInterrupted:
    p = trainer.progress
    if aborted:
        msg = (
            f"Training aborted by a second {sig} during iteration {p['iterations'] + 1}; nothing of that "
            f"iteration was saved. Last checkpoint: {last or 'none'}; run folder: {run.path}."
        )
    else:
        msg = (
            f"Training stopped by {sig} after iteration {p['iterations']} ({p['env_steps']} env steps); "
            f"checkpoint saved: {last}; run folder: {run.path}."
        )
    return RunInterrupted(
        msg, checkpoint=str(last) if last else None, run_dir=str(run.path), signal=sig, aborted=aborted
    )


def _resume_call(
    algo: str, stop: Dict[str, float], overrides: Dict[str, Any], checkpoint: Optional[str], with_callbacks: bool
) -> str:
    """The Python call that continues an interrupted run (with the same env object as ``env``)."""
    extra = "".join(f", {k}={v!r}" for k, v in overrides.items())
    cbs = ", callbacks=[...]" if with_callbacks else ""
    return f"marl.fit(env, {algo!r}, stop={stop!r}, resume={checkpoint!r}{cbs}{extra})"


def _anneal_to_stop(stop: Dict[str, float], overrides: Dict[str, Any]) -> Dict[str, Any]:
    """``lr_schedule='linear'`` decays to 0 at the stop's ``env_steps`` (``lr_anneal_steps``).

    Raises:
        MarlError: a linear schedule without an ``env_steps`` stop criterion.
    """
    if overrides.get("lr_schedule") != "linear":
        return overrides
    if "env_steps" not in stop:
        raise MarlError(
            "lr_schedule='linear' decays the learning rate to 0 at the stop's env_steps; give stop={'env_steps': N}."
        )
    return {**overrides, "lr_anneal_steps": int(stop["env_steps"])}


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
    return {
        k: (v if isinstance(v, (int, float, str, bool, type(None), list, dict)) else repr(v)) for k, v in cfg.items()
    }


def _diverged(e: Optional[BaseException], kind: type = TrainingDiverged) -> Optional[str]:
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
