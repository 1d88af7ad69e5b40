"""Trainer: an RLlib ``Algorithm`` running marl's batched data path.

RLlib provides the distributed engine (``EnvRunnerGroup`` of remote sampling
actors, ``LearnerGroup`` with DDP / GPU learners, checkpoints, fault
tolerance); algorithm families subclass :class:`Trainer` and implement
``training_step`` with :meth:`Trainer.sample_rollouts` and
:meth:`Trainer.update_learners`.
"""
from __future__ import annotations

import time
from typing import Any, Dict, List

import gymnasium as gym
import numpy as np
import torch
from ray.rllib.algorithms.algorithm import Algorithm
from ray.rllib.algorithms.algorithm_config import AlgorithmConfig
from ray.rllib.core.rl_module.multi_rl_module import MultiRLModuleSpec
from ray.rllib.core.rl_module.rl_module import RLModuleSpec
from ray.rllib.policy.policy import PolicySpec
from ray.rllib.utils.metrics import NUM_ENV_STEPS_SAMPLED_LIFETIME

from marl.engine.runner import LOCAL_ENVS, BatchedEnvRunner, MappingFn
from marl.env import MultiAgentEnv
from marl.errors import TrainingDiverged  # noqa: F401  (re-exported)
from marl.mapping import PolicyMapping


class TrainerConfig(AlgorithmConfig):
    """AlgorithmConfig whose default module spec is the algorithm family's RLModule."""

    def get_default_rl_module_spec(self) -> RLModuleSpec:
        return RLModuleSpec(module_class=self.algo_class.module_class)

    def get_default_learner_class(self):
        return self.algo_class.learner_class


def module_spaces(mapping: PolicyMapping) -> Dict[str, PolicySpec]:
    """Per module: observation space widened by the agent one-hot, and the action space."""
    out = {}
    for mid in mapping.modules:
        g = mapping.group_info(mid)
        obs = gym.spaces.Box(-np.inf, np.inf, (mapping.obs_dim(mid),), np.float32)
        out[mid] = PolicySpec(observation_space=obs, action_space=g.action_space)
    return out


def agent_module_specs(algo_cls, cfg: Dict[str, Any], mapping: PolicyMapping, **kwargs) -> Dict[str, RLModuleSpec]:
    """One ``RLModuleSpec`` per policy-mapping module (``kwargs``: e.g. ``inference_only=True``)."""
    spaces = module_spaces(mapping)
    return {
        mid: RLModuleSpec(
            module_class=algo_cls.module_class,
            observation_space=spaces[mid].observation_space,
            action_space=spaces[mid].action_space,
            model_config=algo_cls.module_config(cfg, mapping, mid),
            **kwargs,
        )
        for mid in mapping.modules
    }


def build_algorithm_config(algo_cls, cfg: Dict[str, Any], env: MultiAgentEnv, mapping: PolicyMapping, env_token: str):
    """Translate a validated marl config into an RLlib ``AlgorithmConfig`` for ``algo_cls``."""
    spaces = module_spaces(mapping)
    specs = agent_module_specs(algo_cls, cfg, mapping)
    specs.update(algo_cls.extra_module_specs(cfg, mapping))  # learner-only modules (e.g. QMIX mixers)
    learner_cfg = engine_entries(cfg, env, mapping, env_token)
    learner_cfg.update(
        module_spaces=spaces,
        num_envs=env.num_envs,
    )
    learner_cfg.update(algo_cls.learner_extras(cfg, env, mapping))
    config = (
        TrainerConfig(algo_class=algo_cls)
        .environment(observation_space=None, action_space=None, disable_env_checking=True)
        .env_runners(
            env_runner_cls=BatchedEnvRunner,
            num_env_runners=int(cfg["num_env_runners"]),
            num_envs_per_env_runner=env.num_envs,
            num_cpus_per_env_runner=float(cfg["num_cpus_per_env_runner"]),
            rollout_fragment_length=int(cfg["rollout_length"]),
        )
        .learners(
            num_learners=int(cfg["num_learners"]),
            num_gpus_per_learner=float(cfg["num_gpus_per_learner"]),
            num_cpus_per_learner=float(cfg["num_cpus_per_learner"]) if cfg["num_learners"] else "auto",
            learner_config_dict=learner_cfg,
        )
        .multi_agent(policies=spaces, policy_mapping_fn=MappingFn(mapping.agent_to_module))
        .rl_module(rl_module_spec=MultiRLModuleSpec(rl_module_specs=specs))
        .training(
            lr=lr_schedule(cfg),
            grad_clip=float(cfg["max_grad_norm"]) if cfg.get("max_grad_norm") else None,
            grad_clip_by="global_norm",
            train_batch_size_per_learner=int(cfg["rollout_length"]) * env.num_envs,
        )
        .debugging(seed=int(cfg["seed"]), log_level="ERROR")
        .reporting(metrics_num_episodes_for_smoothing=1)
    )
    config.learner_config_dict = learner_cfg
    return config


def engine_entries(cfg: Dict[str, Any], env, mapping: PolicyMapping, env_token: str) -> Dict[str, Any]:
    """``cfg`` plus what every runner and learner needs to rebuild the env and the mapping
    (the learner config dict of any marl algorithm)."""
    out = dict(cfg)
    out.update(
        env_spec=vars(env.spec) if env.spec is not None else None,
        env_object=env if env.spec is None else None,
        env_token=env_token,
        agent_to_module=dict(mapping.agent_to_module),
    )
    return out


def begin_update(learner, batch, training_data, timesteps) -> Dict[str, Dict[str, Any]]:
    """Shared opening of marl's ``Learner.update`` overrides: resolve ``training_data``, run the
    pre-update hook, convert to tensors; returns module id -> column dict."""
    learner._check_is_built()
    if training_data is not None:
        training_data.solve_refs()
        batch = training_data.batch
    learner.before_gradient_based_update(timesteps=timesteps or {})
    batch = learner._convert_batch_type(batch)
    learner._weights_seq_no += 1
    return {mid: dict(b) for mid, b in batch.policy_batches.items()}


def lr_schedule(cfg: Dict[str, Any]):
    """``lr`` for RLlib: a constant, or ``[[0, lr], [env_steps, 0]]`` (piecewise linear in
    sampled env steps) when ``lr_schedule`` is ``"linear"``; ``fit`` puts the stop's
    ``env_steps`` in ``cfg["lr_anneal_steps"]``."""
    lr = float(cfg["lr"])
    if cfg.get("lr_schedule", "constant") == "constant":
        return lr
    return [[0, lr], [int(cfg["lr_anneal_steps"]), 0.0]]


class Trainer(Algorithm):
    """Base of marl's algorithms (an RLlib ``Algorithm``).

    Subclasses set ``module_class``, ``learner_class`` and ``config_class`` and implement
    ``training_step`` (which must return ``None``), ``module_config`` and
    ``check_env``. Progress counters live in :attr:`progress` and are saved
    in checkpoints, so a resumed run continues its step count.
    """

    module_class = None
    learner_class = None
    config_class = None  # the config schema (a marl.config.ConfigBase dataclass) of the algorithm
    # learner metrics (last key part) kept in the iteration's flat metrics
    learner_metrics = ("policy_loss", "value_loss", "entropy", "explained_variance", "approx_kl", "clip_fraction", "value_mean", "total_loss")

    @classmethod
    def get_default_config(cls) -> AlgorithmConfig:
        return TrainerConfig(algo_class=cls)

    def setup(self, config):
        super().setup(config)
        self.marl_config: Dict[str, Any] = self.config.learner_config_dict
        self.progress = {"env_steps": 0, "iterations": 0, "episodes": 0, "time_s": 0.0}
        self.last_metrics: Dict[str, Any] = {}
        self.extra_metrics: Dict[str, float] = {}  # set by training_step (e.g. epsilon)
        if self.marl_config.get("init_from"):
            self.init_weights_from(self.marl_config["init_from"])
        self.coach = self._make_coach()

    # --------------------------------------------------------------- crash coach
    def _make_coach(self):
        """The crash-rate coach of an env made with ``crash="fixed"|"curriculum"|"adaptive"``
        (:class:`marl.algos.coach.Coach`), or None."""
        env = LOCAL_ENVS.get(self.marl_config.get("env_token"))
        make = getattr(env, "make_coach", None) if env is not None else None
        coach = make() if callable(make) else None
        if coach is not None:
            self._set_crash_rate(coach.rate)
        return coach

    def _set_crash_rate(self, p: float) -> None:
        """Apply the coach's rate to every runner's env (remote runners rebuilt their env from its spec)."""
        def setter(runner):
            if hasattr(runner.env, "set_rate"):
                runner.env.set_rate(p)

        group = self.env_runner_group
        if group.num_remote_env_runners() == 0:
            setter(group.local_env_runner)
        else:
            group.foreach_env_runner(setter, local_env_runner=False)

    def _coach_step(self, metrics: Dict[str, Any]) -> Dict[str, float]:
        """Feed the iteration's finished episodes to the coach, apply its new rate, return its metrics."""
        if self.coach is None:
            return {}
        returns, wins = metrics.get("episode_return", []), metrics.get("win_rate") or None
        ref = metrics.get("crash_reference")
        if ref and len(ref) == len(returns):  # copies kept at p = 0 measure the coach's P_ref
            is_ref = [bool(x) for x in ref]
            pick = lambda xs, want: [x for x, r in zip(xs, is_ref) if r == want]  # noqa: E731
            self.coach.observe_reference(pick(returns, True), pick(wins, True) if wins else None)
            returns, wins = pick(returns, False), pick(wins, False) if wins else None
        p = self.coach.observe(returns, self.progress["env_steps"], wins=wins)
        self._set_crash_rate(p)
        return {k: float(v) for k, v in self.coach.metrics().items()}  # coach_rate, coach_performance, ...

    def init_weights_from(self, path: str) -> None:
        """Start from the agent networks of another run's checkpoint (``init_from``), e.g. an HPN
        trained on a smaller scenario (:mod:`marl.transfer`). Mixers, optimiser state and
        learner-only parts whose shapes differ start fresh.

        Raises:
            MarlError: no checkpoint at ``path``, a module id it lacks, or an agent
                network whose shapes differ.
        """
        from marl.results import resolve_checkpoint
        from marl.transfer import checkpoint_states, load_weights

        mids = dict.fromkeys(self.marl_config["agent_to_module"].values())  # module ids, in order, once each
        states = checkpoint_states(resolve_checkpoint(path), mids)
        fresh = self.learner_group.foreach_learner(
            lambda learner: {mid: load_weights(learner.module[mid], st, mid) for mid, st in states.items()}
        )
        self.env_runner_group.sync_weights(from_worker_or_learner_group=self.learner_group, inference_only=True)
        first = next(iter(fresh)).get()  # RemoteCallResults -> the first learner's report
        kept = {m: f for m, f in first.items() if f}
        print(f"[marl] initialised {', '.join(states)} from {path}" + (f"; fresh (shapes differ): {kept}" if kept else ""))

    # --------------------------------------------------------------- data path
    def sample_rollouts(self, **act_kwargs) -> Dict[str, Any]:
        """One rollout per env runner, concatenated along the env axis ``B``
        (``act_kwargs``, e.g. ``epsilon``, go to the modules' ``act``)."""
        t0 = time.perf_counter()
        group = self.env_runner_group
        if group.num_remote_env_runners() == 0:
            parts = [group.local_env_runner.sample(**act_kwargs)]
        else:
            parts = group.foreach_env_runner(lambda r: r.sample(**act_kwargs), local_env_runner=False)
        rollout = _concat_rollouts(parts)
        self._sample_time = time.perf_counter() - t0
        return rollout

    def update_learners(self, batch, sync_weights: bool = True, **timesteps) -> None:
        """One learner-group update on ``batch`` (``timesteps`` extras reach the
        learners' ``update``), then push the new weights to the runners if ``sync_weights``."""
        t0 = time.perf_counter()
        results = self.learner_group.update(
            batch=batch, timesteps={NUM_ENV_STEPS_SAMPLED_LIFETIME: self.progress["env_steps"], **timesteps}
        )
        if sync_weights:
            self.env_runner_group.sync_weights(from_worker_or_learner_group=self.learner_group, inference_only=True)
        self._learn_time += time.perf_counter() - t0
        self._learner_results = _reduce_learner_results(results, self.learner_metrics)

    # --------------------------------------------------------------- iteration
    def train_iteration(self) -> Dict[str, Any]:
        """Run one ``training_step`` and return flat metrics (floats) for logging."""
        t0 = time.perf_counter()
        self._learner_results = {}
        self._sample_time = self._learn_time = 0.0
        self.rollout = None
        self.training_step()  # RLlib convention: returns None; our subclasses leave self.rollout
        rollout = self.rollout
        dt = time.perf_counter() - t0
        m = rollout["metrics"]
        p = self.progress
        p["env_steps"] += m["env_steps"]
        p["iterations"] += 1
        p["episodes"] += len(m.get("episode_return", []))
        p["time_s"] += dt
        out: Dict[str, Any] = {
            "env_steps": p["env_steps"],
            "iteration": p["iterations"],
            "episodes": p["episodes"],
            "time_s": p["time_s"],
            "env_steps_per_s": m["env_steps"] / dt,
            "sample_time_s": self._sample_time,
            "learn_time_s": self._learn_time,
        }
        for k, v in m.items():
            if isinstance(v, list) and v:
                out[f"{k}_mean"] = float(np.mean(v))
        out.update(self._learner_results)
        out.update(self.extra_metrics)
        out.update(self._coach_step(m))
        self.last_metrics = out
        return out

    def step(self):
        # RLlib's train() -> step(): restore crashed env runners (fault tolerance),
        # then one of our iterations, whose flat metrics become the result.
        self.restore_env_runners(self.env_runner_group)
        return {"marl": self.train_iteration()}

    def stop(self):
        super().stop()
        LOCAL_ENVS.pop(self.marl_config.get("env_token"), None)  # the driver's env instance is no longer needed

    # --------------------------------------------------------------- checkpoints
    def get_state(self, components=None, *, not_components=None, **kwargs):
        state = super().get_state(components, not_components=not_components, **kwargs)
        state["marl_progress"] = dict(self.progress)
        if getattr(self, "coach", None) is not None:
            state["marl_coach"] = self.coach.__dict__.copy()
        return state

    def set_state(self, state):
        super().set_state(state)
        if "marl_progress" in state:
            self.progress.update(state["marl_progress"])
        if state.get("marl_coach") and getattr(self, "coach", None) is not None:
            self.coach.__dict__.update(state["marl_coach"])
            self._set_crash_rate(self.coach.rate)

    # --------------------------------------------------------------- hooks
    @classmethod
    def module_config(cls, cfg: Dict[str, Any], mapping: PolicyMapping, mid: str) -> Dict[str, Any]:
        raise NotImplementedError

    @classmethod
    def check_env(cls, cfg: Dict[str, Any], info) -> None:
        """Raise :class:`marl.MarlError` if this algorithm cannot handle the env."""

    @classmethod
    def check_mapping(cls, cfg: Dict[str, Any], mapping: PolicyMapping) -> None:
        """Raise :class:`marl.MarlError` if this algorithm cannot train with the policy mapping."""

    @classmethod
    def extra_module_specs(cls, cfg: Dict[str, Any], mapping: PolicyMapping) -> Dict[str, RLModuleSpec]:
        """Learner-only modules beside the agents' modules (none by default)."""
        return {}

    @classmethod
    def learner_extras(cls, cfg: Dict[str, Any], env: MultiAgentEnv, mapping: PolicyMapping) -> Dict[str, Any]:
        """Extra static entries for ``learner_config_dict`` (none by default)."""
        return {}


def _concat_rollouts(parts: List[Dict[str, Any]]) -> Dict[str, Any]:
    if len(parts) == 1:
        return parts[0]
    out: Dict[str, Any] = {}
    for k, v in parts[0].items():
        if k == "modules":
            out[k] = {
                mid: {c: torch.cat([p[k][mid][c] for p in parts], dim=1) for c in cols}
                for mid, cols in v.items()
            }
        elif k == "metrics":
            merged: Dict[str, Any] = {"env_steps": sum(p[k]["env_steps"] for p in parts)}
            for p in parts:
                for mk, mv in p[k].items():
                    if isinstance(mv, list):
                        merged.setdefault(mk, []).extend(mv)
            out[k] = merged
        else:
            out[k] = torch.cat([p[k] for p in parts], dim=1)
    return out


def _reduce_learner_results(results, keep) -> Dict[str, float]:
    """Flatten RLlib learner results (list of nested dicts of Stats) to ``{"module/key": float}``."""
    from ray.rllib.utils.metrics.stats.base import StatsBase as Stats

    flat: Dict[str, List[float]] = {}

    def walk(prefix, d):
        for k, v in d.items():
            key = f"{prefix}/{k}" if prefix else str(k)
            if isinstance(v, dict):
                walk(key, v)
            else:
                val = v.peek() if isinstance(v, Stats) else v
                if isinstance(val, (int, float, np.floating, np.integer)) or (
                    torch.is_tensor(val) and val.numel() == 1
                ):
                    flat.setdefault(key, []).append(float(val))

    for r in results if isinstance(results, list) else [results]:
        walk("", r)
    return {k: float(np.mean(v)) for k, v in flat.items() if k.split("/")[-1] in keep and "__all_modules__" not in k}
