"""``marl.fit``: train an algorithm on a :class:`~marl.env.MultiAgentEnv` with one call."""
from __future__ import annotations

import datetime as _dt
import importlib
import os
import pickle
import shutil
import uuid
from pathlib import Path
from typing import Any, Dict, Optional

import yaml

from marl.config import list_algos, load_config, validate_stop
from marl.env import MarlError, MultiAgentEnv, set_fit_entry
from marl.mapping import PolicyMapping
from marl.results import META_FILE, Policy, Result, load, resolve_checkpoint

__all__ = ["fit", "build_trainer", "load", "list_algos"]

DEFAULT_STOP = {"env_steps": 1_000_000}


def algo_class(cfg: Dict[str, Any]):
    module, _, name = cfg["class"].partition(":")
    return getattr(importlib.import_module(module), name)


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


def init_ray(cfg: Dict[str, Any]) -> Dict[str, Any]:
    """Start Ray for this machine if needed and fit the requested actors into its CPUs.

    Asking for more CPUs than Ray has makes RLlib hang silently at build time
    (measured with 3 env runners on 2 CPUs), so requests are checked here:
    more env runners than CPUs is an error; otherwise per-actor CPU shares are
    scaled down so that runners and learners fit.
    """
    import ray

    start_ray()
    cpus = float(ray.cluster_resources().get("CPU", 1))
    runners, learners = int(cfg["num_env_runners"]), int(cfg["num_learners"])
    if runners > cpus:
        raise MarlError(f"num_env_runners={runners} is more than the {cpus:g} CPUs Ray has; use at most {int(cpus)}.")
    want = runners * float(cfg["num_cpus_per_env_runner"]) + learners * float(cfg["num_cpus_per_learner"])
    if want > cpus:
        scale = cpus / want
        cfg = dict(cfg)
        cfg["num_cpus_per_env_runner"] = float(cfg["num_cpus_per_env_runner"]) * scale
        cfg["num_cpus_per_learner"] = float(cfg["num_cpus_per_learner"]) * scale
    return cfg


def _run_dir(cfg: Dict[str, Any], env: MultiAgentEnv, resume: Optional[str]) -> Path:
    if resume:
        return resolve_checkpoint(resume).parent.parent
    stamp = _dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    name = f"{env.info.family}-{env.info.scenario}-{cfg['algo']}-{stamp}-{uuid.uuid4().hex[:4]}"
    d = Path(cfg["log_dir"]) / name
    d.mkdir(parents=True, exist_ok=True)
    return d


def _save_checkpoint(algo, run_dir: Path, meta: Dict[str, Any], keep: int) -> str:
    it = algo.progress["iterations"]
    path = run_dir / "checkpoints" / f"checkpoint_{it:06d}"
    algo.save_to_path(str(path.resolve()))
    with open(path / META_FILE, "wb") as f:
        pickle.dump({**meta, "metrics": algo.last_metrics}, f)
    old = sorted((run_dir / "checkpoints").glob("checkpoint_*"))[:-keep] if keep > 0 else []
    for p in old:
        shutil.rmtree(p, ignore_errors=True)
    return str(path)


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


def prepare(env: MultiAgentEnv, algo: str, overrides: Dict[str, Any]):
    """Validate everything that can be checked without Ray: config, algorithm/env fit, mapping.

    Returns ``(cfg, algo_class, env, mapping)``.

    Raises:
        MarlError: unknown algorithm or config key, an env the algorithm cannot
            handle, or a mapping that puts agents with different spaces in one module.
    """
    from marl.text import TextEnv

    if not isinstance(env, (MultiAgentEnv, TextEnv)):
        raise MarlError(f"fit() needs an env from marl.make_env (a MultiAgentEnv or a TextEnv), got {type(env).__name__}.")
    cfg = load_config(algo, env.info.family, overrides)
    algo_cls = algo_class(cfg)
    algo_cls.check_env(cfg, env.info)
    if cfg.get("num_envs") and int(cfg["num_envs"]) != env.num_envs:
        if env.spec is None:
            raise MarlError("num_envs can only be changed for envs built by marl.make_env(name, ...).")
        env = env.spec.make(num_envs=int(cfg["num_envs"]))
    mapping = PolicyMapping(env.info, share=cfg["share"], agent_id=cfg["agent_id"])
    algo_cls.check_mapping(cfg, mapping)
    return cfg, algo_cls, env, mapping


def build_trainer(env: MultiAgentEnv, algo: str, **overrides: Any):
    """Validate, start Ray and build the RLlib algorithm without training it.

    Returns ``(trainer, env, mapping, cfg)``; ``trainer.train()["marl"]`` runs one
    iteration and returns its metrics; call ``trainer.stop()`` at the end.
    :func:`fit` is built on this.
    """
    from marl.engine.runner import LOCAL_ENVS
    from marl.engine.trainer import build_algorithm_config

    cfg, algo_cls, env, mapping = prepare(env, algo, overrides)
    cfg = init_ray(cfg)
    token = uuid.uuid4().hex
    LOCAL_ENVS[token] = env
    try:
        builder = getattr(algo_cls, "build_config", None) or (lambda *a: build_algorithm_config(algo_cls, *a))
        trainer = builder(cfg, env, mapping, token).build_algo()
    except Exception:
        LOCAL_ENVS.pop(token, None)
        raise
    return trainer, env, mapping, cfg


def fit(
    env: MultiAgentEnv,
    algo: str,
    *,
    stop: Optional[Dict[str, float]] = None,
    resume: Optional[str] = None,
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
        **overrides: config keys (``lr=3e-4``, ``share="group"``,
            ``num_env_runners=2``, ...); unknown keys are errors listing the valid ones.

    Raises:
        MarlError: bad configuration or input (before Ray starts).
        TrainingDiverged: a loss became NaN/inf; the last good checkpoint is
            kept and named in the message.
    """
    from marl.engine.trainer import TrainingDiverged
    from marl.logging import RunLogger

    stop = validate_stop(stop if stop is not None else DEFAULT_STOP)
    if overrides.get("lr_schedule") == "linear":
        if "env_steps" not in stop:
            raise MarlError("lr_schedule='linear' decays the learning rate to 0 at the stop's env_steps; "
                            "give stop={'env_steps': N}.")
        overrides = {**overrides, "lr_anneal_steps": int(stop["env_steps"])}
    trainer, env, mapping, cfg = build_trainer(env, algo, **overrides)
    run_dir = _run_dir(cfg, env, resume)
    trainer.run_dir = run_dir  # for algorithms that write files of their own (LLM transcripts)
    with open(run_dir / "config.yaml", "w") as f:
        yaml.safe_dump(_yaml_safe({**cfg, "stop": stop}), f, sort_keys=False)
    meta = {"algo": algo, "config": _yaml_safe(cfg), "env_spec": env.spec, "env_info": env.info,
            "agent_to_module": dict(mapping.agent_to_module)}
    meta.update(getattr(type(trainer), "checkpoint_meta", lambda c: {})(cfg))  # e.g. an LLM's tokenizer object
    logger = None
    history, last_ckpt = [], None
    try:
        if resume:
            trainer.restore_from_path(str(resolve_checkpoint(resume).resolve()))
        logger = RunLogger(run_dir, stop, show=bool(cfg["progress"]), initial_steps=trainer.progress["env_steps"])
        if cfg["progress"]:
            print(f"[marl] {algo} on {env!r}; {mapping}; logs: {run_dir} (tensorboard --logdir {run_dir / 'tb'})", flush=True)
        m: Dict[str, Any] = dict(trainer.progress, iteration=trainer.progress["iterations"])
        while not _stop_reached(stop, m):
            try:
                m = trainer.train()["marl"]
            except Exception as e:  # noqa: BLE001 - NaN errors come wrapped by Ray
                if _diverged(e):
                    raise TrainingDiverged(
                        f"{_diverged(e)}. Training stopped at {trainer.progress['env_steps']} env steps; "
                        f"last good checkpoint: {last_ckpt or 'none yet'}; logs kept in {run_dir}."
                    ) from e
                raise
            logger.log(m)
            history.append(m)
            if cfg["checkpoint_every"] and m["iteration"] % int(cfg["checkpoint_every"]) == 0:
                last_ckpt = _save_checkpoint(trainer, run_dir, meta, int(cfg["keep_checkpoints"]))
        last_ckpt = _save_checkpoint(trainer, run_dir, meta, int(cfg["keep_checkpoints"]))
        policy = (getattr(type(trainer), "policy_from", None) or _policy_from)(trainer, mapping)
    finally:
        if logger is not None:
            logger.close()
        trainer.stop()
    result = Result(metrics=m, history=history, checkpoint=last_ckpt, log_dir=str(run_dir), policy=policy,
                    env_spec=env.spec, config=cfg)
    if int(cfg["eval_episodes"]) > 0:
        result.eval = result.evaluate(int(cfg["eval_episodes"]), env=env)
        if cfg["progress"]:
            print(f"[marl] greedy evaluation over {cfg['eval_episodes']} episodes: "
                  f"return {result.eval.get('episode_return_mean', float('nan')):.2f}; checkpoint: {last_ckpt}", flush=True)
    return result


def _diverged(e: BaseException) -> Optional[str]:
    """The message of a TrainingDiverged inside ``e`` (Ray wraps remote errors), else None."""
    from marl.engine.trainer import TrainingDiverged

    seen = set()
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        if isinstance(e, TrainingDiverged):
            return str(e)
        cause = getattr(e, "cause", None)
        e = cause if isinstance(cause, BaseException) else (e.__cause__ or e.__context__)
    return None


def _policy_from(trainer, mapping: PolicyMapping) -> Policy:
    """Greedy policy with a copy of the learner's current weights (runs without Ray)."""
    spec = trainer.config.get_multi_rl_module_spec(spaces=None, inference_only=True)
    modules = spec.build()
    state = trainer.learner_group.get_state(components="learner/rl_module", inference_only=True)["learner"]["rl_module"]
    modules.set_state(state)
    modules = {mid: modules[mid] for mid in mapping.modules}
    for m in modules.values():
        m.eval()
    return Policy(mapping, modules)


set_fit_entry(fit)  # MultiAgentEnv.fit / TextEnv.fit train through marl.fit
