"""Translation of a marl run into RLlib's ``AlgorithmConfig``: module specs, runners, learners.

RLlib provides the distributed engine; this module says how marl uses it: one
``RLModuleSpec`` per policy-mapping module, :class:`~marl.engine.runner.BatchedEnvRunner`
for sampling, the family's learner class, and the validated marl config in
``learner_config_dict`` (with what remote processes need to rebuild the env).
"""

from __future__ import annotations

from typing import Any, Dict, Optional, cast

from ray.rllib.algorithms.algorithm_config import AlgorithmConfig
from ray.rllib.core.rl_module.multi_rl_module import MultiRLModuleSpec
from ray.rllib.core.rl_module.rl_module import RLModuleSpec
from ray.rllib.policy.policy import PolicySpec

from marl.config import EngineConfig
from marl.engine.context import RunContext, learner_config_dict
from marl.engine.faults import fault_tolerance_settings
from marl.engine.runner import BatchedEnvRunner, MappingFn
from marl.env import MultiAgentEnv
from marl.mapping import PolicyMapping


class TrainerConfig(AlgorithmConfig):
    """AlgorithmConfig whose default module spec is the algorithm family's RLModule."""

    def get_default_rl_module_spec(self) -> RLModuleSpec:
        return RLModuleSpec(module_class=cast(Any, self.algo_class).module_class)

    def get_default_learner_class(self):
        return cast(Any, self.algo_class).learner_class


def module_spaces(mapping: PolicyMapping) -> Dict[str, PolicySpec]:
    """Per module: observation space widened by the agent one-hot (:meth:`PolicyMapping.obs_space`: a
    ``Dict`` for structured observations), and the action space."""
    out = {}
    for mid in mapping.modules:
        g = mapping.group_info(mid)
        out[mid] = PolicySpec(observation_space=mapping.obs_space(mid), action_space=g.action_space)
    return out


def agent_module_specs(
    algo_cls, cfg: EngineConfig, mapping: PolicyMapping, spaces: Optional[Dict[str, PolicySpec]] = None, **kwargs
) -> Dict[str, RLModuleSpec]:
    """One ``RLModuleSpec`` per policy-mapping module (``spaces``: module id -> ``PolicySpec``,
    default :func:`module_spaces`; ``kwargs``: e.g. ``inference_only=True``)."""
    spaces = module_spaces(mapping) if spaces is None else spaces
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


def batched_sampling(cfg: EngineConfig, env: MultiAgentEnv) -> Dict[str, Dict[str, Any]]:
    """How tensor envs are sampled: :class:`~marl.engine.runner.BatchedEnvRunner` env runners,
    each stepping ``B = env.num_envs`` copies for ``T = rollout_length`` steps, and a train batch
    of ``T * B`` env steps per learner (the ``sampling`` default of :func:`build_algorithm_config`)."""
    return {
        "env_runners": dict(
            env_runner_cls=BatchedEnvRunner,
            num_envs_per_env_runner=env.num_envs,
            rollout_fragment_length=cfg.rollout_length,
        ),
        "training": dict(train_batch_size_per_learner=cfg.rollout_length * env.num_envs),
    }


def build_algorithm_config(
    algo_cls,
    cfg: EngineConfig,
    env: MultiAgentEnv,
    mapping: PolicyMapping,
    *,
    spaces: Optional[Dict[str, PolicySpec]] = None,
    sampling: Optional[Dict[str, Dict[str, Any]]] = None,
):
    """Translate a validated marl config into an RLlib ``AlgorithmConfig`` for ``algo_cls``
    (the family's learner and modules; the default ``Trainer.build_config``).

    Args:
        spaces: module id -> ``PolicySpec`` of the modules' spaces; default :func:`module_spaces`
            (text games pass their ``Text`` spaces).
        sampling: the env runners' settings beside their number and CPUs (``"env_runners"``:
            keywords of ``AlgorithmConfig.env_runners``, with ``env_runner_cls``) and the
            ``"training"`` keywords that depend on them; default :func:`batched_sampling`.
    """
    spaces = module_spaces(mapping) if spaces is None else spaces
    sampling = batched_sampling(cfg, env) if sampling is None else sampling
    specs = agent_module_specs(algo_cls, cfg, mapping, spaces)
    specs.update(algo_cls.extra_module_specs(cfg, mapping))  # learner-only modules (e.g. QMIX mixers)
    run = RunContext.of(env, mapping, spaces, family=algo_cls.family_context(cfg, env, mapping))
    learner_cfg = learner_config_dict(cfg, run)
    config = (
        TrainerConfig(algo_class=algo_cls)
        .environment(observation_space=None, action_space=None, disable_env_checking=True)
        # RLlib annotates num_cpus_per_env_runner as int, but hands it to Ray, which takes fractions
        .env_runners(
            num_env_runners=cfg.num_env_runners,
            num_cpus_per_env_runner=cfg.num_cpus_per_env_runner,  # type: ignore[arg-type]
            **sampling.get("env_runners", {}),
        )
        .fault_tolerance(**fault_tolerance_settings(cfg))
        .learners(
            num_learners=cfg.num_learners,
            num_gpus_per_learner=cfg.num_gpus_per_learner,
            num_cpus_per_learner=cfg.num_cpus_per_learner if cfg.num_learners else "auto",
            learner_config_dict=learner_cfg,
        )
        .multi_agent(policies=spaces, policy_mapping_fn=MappingFn(mapping.agent_to_module))
        .rl_module(rl_module_spec=MultiRLModuleSpec(rl_module_specs=specs))
        .training(
            lr=lr_schedule(cfg), grad_clip=cfg.max_grad_norm, grad_clip_by="global_norm", **sampling.get("training", {})
        )
        .debugging(seed=cfg.seed, log_level="ERROR")
        .reporting(metrics_num_episodes_for_smoothing=1)
    )
    config.learner_config_dict = learner_cfg
    return config


def lr_schedule(cfg: EngineConfig):
    """``lr`` for RLlib: a constant, or ``[[0, lr], [env_steps, 0]]`` (piecewise linear in
    sampled env steps) when ``lr_schedule`` is ``"linear"``; ``fit`` puts the stop's
    ``env_steps`` in ``cfg.lr_anneal_steps``."""
    if cfg.lr_schedule == "constant":
        return cfg.lr
    return [[0, cfg.lr], [cfg.lr_anneal_steps, 0.0]]
