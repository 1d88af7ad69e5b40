"""Trainer: an RLlib ``Algorithm`` running marl's batched data path.

RLlib provides the distributed engine (``EnvRunnerGroup`` of remote sampling
actors, ``LearnerGroup`` with DDP / GPU learners, checkpoints, fault
tolerance). An algorithm family subclasses :class:`Trainer`, sets
``module_class`` / ``learner_class`` and implements the hooks declared below;
:meth:`Trainer.training_step` uses :meth:`Trainer.sample_rollouts` and
:meth:`Trainer.update_learners` and returns what it sampled and measured.

A trainer is built with its env, run folder and callbacks
(``Trainer(config, env=..., run_dir=..., callbacks=...)``): the local env
runner samples the very env object given to ``fit`` (remote runners rebuild it
from its spec), files the family writes go to ``run_dir``, and
:class:`~marl.callbacks.Callback` hooks run at every rollout and iteration.
The run's batch transforms (:mod:`marl.transforms`, e.g. reward redistribution) rewrite
rollouts in :meth:`Trainer.sample_rollouts`, the episodes a family commits to its replay
buffer through :meth:`Trainer.transform_episodes`, and batches in :meth:`Trainer.update_learners`.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Tuple

import numpy as np
import torch
from ray.rllib.algorithms.algorithm import Algorithm
from ray.rllib.algorithms.algorithm_config import AlgorithmConfig
from ray.rllib.core.learner.learner_group import LearnerGroup
from ray.rllib.core.rl_module.rl_module import RLModuleSpec
from ray.rllib.env.env_runner_group import EnvRunnerGroup
from ray.rllib.utils.metrics import NUM_ENV_STEPS_SAMPLED_LIFETIME

from marl.callbacks import CallbackList
from marl.checkpoint import load_module, module_states, resolve_checkpoint
from marl.config import ConfigBase, restore_config
from marl.config.checks import Rule, RunFacts, check_rules
from marl.engine.context import RunAccess
from marl.engine.faults import RunnerFaults
from marl.engine.resume import SAMPLING_KEY, restore_sampling, sampling_state
from marl.engine.rllib_seam import PrivateLogdir, wants_component
from marl.engine.runner import MappingFn
from marl.engine.spec import TrainerConfig, agent_module_specs, build_algorithm_config
from marl.env import MultiAgentEnv
from marl.errors import MarlError
from marl.errors import TrainingDiverged  # noqa: F401  (re-exported: families raise it from their learners)
from marl.mapping import SHARE_MODES, PolicyMapping
from marl.policy import Policy
from marl.transfer import load_weights
from marl.transforms import STATE_KEY, Episodes, TransformList


@dataclass
class StepOutput:
    """What :meth:`Trainer.training_step` returns.

    Attributes:
        rollout: what was sampled; ``rollout["metrics"]`` holds ``env_steps`` (int)
            and per-episode lists (``episode_return``, ``win_rate``, ...) of the
            episodes that ended during the iteration.
        metrics: the family's own metrics of the iteration (learner losses,
            epsilon, buffer size, ...), flat floats.
    """

    rollout: Dict[str, Any]
    metrics: Dict[str, float] = field(default_factory=dict)


class Trainer(RunAccess, PrivateLogdir, Algorithm):
    """Base of marl's algorithms (an RLlib ``Algorithm``).

    Args:
        config: the RLlib config built by :meth:`build_config`.
        env: the driver's env object; the local env runner samples it (``None``:
            the local runner builds one from the config's env spec).
        run_dir: the run folder for files the family writes (``None``: write none).
        callbacks: run callbacks (:class:`~marl.callbacks.CallbackList`).

    Attributes:
        cfg: the run's config, an instance of the family's ``config_class`` (e.g.
            ``PPOConfig``): read keys as attributes, ``self.cfg.gamma``. Env runners
            and learners read it the same way (:class:`~marl.engine.context.RunAccess`).
        run: the run's :class:`~marl.engine.context.RunContext`: env spec, agent -> module
            table, module spaces, env copies ``num_envs`` and, in ``run.family``, the
            family's static extras (:meth:`family_context`).
        progress: ``env_steps``, ``iterations``, ``episodes``, ``time_s`` (saved in
            checkpoints, so a resumed run continues its counts).
        last_metrics: the flat metrics of the last iteration.

    Class attributes a family sets: ``module_class`` (its RLModule),
    ``learner_class`` (its Learner), ``config_class`` (its config schema, a
    :class:`marl.config.ConfigBase` dataclass), ``learner_metrics`` (learner
    metric names kept in the iteration's metrics), ``RULES`` (checks across keys it adds to its
    schema's), ``transform_hooks`` (the batch-transform
    hooks its training step calls, :mod:`marl.transforms`; a family that commits whole
    episodes to a replay buffer adds ``on_episodes`` and calls :meth:`transform_episodes`).
    """

    module_class = None
    learner_class = None
    config_class = None
    learner_metrics = (
        "policy_loss",
        "value_loss",
        "entropy",
        "explained_variance",
        "approx_kl",
        "clip_fraction",
        "value_mean",
        "total_loss",
    )
    transform_hooks: Tuple[str, ...] = ("on_rollout", "on_batch")  # called by sample_rollouts, update_learners
    #: checks across keys of scope run that a core applies to every schema it trains, beside the
    #: schema's own ``RULES`` (marl/config/checks.py; :meth:`check_mapping`)
    RULES: Tuple[Rule, ...] = ()
    batch_transforms = TransformList()  # none until setup builds the run's (a state asked for earlier is empty)
    # RLlib types these Optional; its setup builds them before any of marl's code reads them
    config: AlgorithmConfig
    env_runner_group: EnvRunnerGroup
    learner_group: LearnerGroup
    runner_faults: Optional[RunnerFaults]

    def __init__(
        self,
        config: Optional[AlgorithmConfig] = None,
        *,
        env: Optional[MultiAgentEnv] = None,
        run_dir: Optional[Path] = None,
        callbacks: Optional[CallbackList] = None,
        **kwargs: Any,
    ):
        self.local_env = env
        self.run_dir = Path(run_dir) if run_dir is not None else None
        self.run_callbacks = callbacks if callbacks is not None else CallbackList()
        super().__init__(config=config, **kwargs)

    @classmethod
    def get_default_config(cls) -> AlgorithmConfig:
        return TrainerConfig(algo_class=cls)

    def setup(self, config):
        super().setup(config)
        self.progress = {"env_steps": 0, "iterations": 0, "episodes": 0, "time_s": 0.0}
        self.last_metrics: Dict[str, Any] = {}
        local: Any = self.env_runner_group.local_env_runner  # a BatchedEnvRunner (marl.engine.runner)
        if local is not None and self.local_env is not None:
            local.attach_env(self.local_env)
        # remote runners: sample from the healthy ones, restore lost ones (marl/engine/faults.py)
        self.runner_faults = RunnerFaults(self) if self.env_runner_group.num_remote_env_runners() else None
        init_from = getattr(self.cfg, "init_from", None)  # a key of the families with agent networks only
        if init_from:
            self.init_weights_from(init_from)
        self.batch_transforms = TransformList.from_config(self.cfg)  # marl/transforms.py
        self.batch_transforms.setup(self)

    # =============================================================== hooks a family implements
    @classmethod
    def check_env(cls, cfg: ConfigBase, info) -> None:
        """Raise :class:`~marl.errors.MarlError` if this algorithm cannot train on an env
        described by ``info`` (an ``EnvInfo``); called before Ray starts."""

    @classmethod
    def check_mapping(cls, cfg: ConfigBase, mapping: PolicyMapping) -> None:
        """Raise :class:`~marl.errors.MarlError` if this algorithm cannot train with ``mapping``; called
        before Ray starts. By default: the checks across keys of scope ``run`` of ``cfg``'s schema
        (:mod:`marl.config.checks`, with the env, the mapping and the CPUs), and no module id of
        the mapping taken by a learner-only module of the algorithm (:meth:`extra_module_specs`).
        A family that adds checks calls this first.

        Raises:
            MarlError: a violated error rule; a mapping module named like one of the algorithm's own.
        Warns:
            ConfigWarning: a violated warning rule.
        """
        check_rules(cfg, RunFacts.of(mapping), extra=cls.RULES)
        taken = sorted(set(cls.extra_module_specs(cfg, mapping)) & set(mapping.modules))
        if taken:
            agents = [a for a, m in mapping.agent_to_module.items() if m == taken[0]]
            raise MarlError(
                f"share={mapping.share!r} maps agents {agents} to module '{taken[0]}', a name {cfg.algo} gives "
                f"its own module ({', '.join(taken)}); return another module id."
            )

    @classmethod
    def check_run(cls, cfg: ConfigBase, env: Any, mapping: PolicyMapping) -> None:
        """Raise :class:`~marl.errors.MarlError` for what only the env object itself tells (e.g. a text
        game's bots against the ``opponents`` key); called before Ray starts, after :meth:`check_mapping`."""

    @classmethod
    def module_config(cls, cfg: ConfigBase, mapping: PolicyMapping, mid: str) -> Dict[str, Any]:
        """The ``model_config`` of the RLModule of policy-mapping module ``mid``."""
        raise NotImplementedError(f"{cls.__name__} must implement module_config")

    @classmethod
    def extra_module_specs(cls, cfg: ConfigBase, mapping: PolicyMapping) -> Dict[str, RLModuleSpec]:
        """Learner-only modules beside the agents' modules (e.g. QMIX mixers); none by default."""
        return {}

    @classmethod
    def family_context(cls, cfg: ConfigBase, env: MultiAgentEnv, mapping: PolicyMapping) -> Any:
        """Static facts the learners and :meth:`training_step` need beside the config (e.g. team
        layouts), as a picklable object of the family's own (a dataclass); it becomes
        ``run.family``. ``None`` by default."""
        return None

    @classmethod
    def build_config(cls, cfg: Any, env: MultiAgentEnv, mapping: PolicyMapping) -> AlgorithmConfig:
        """The RLlib ``AlgorithmConfig`` of a run: by default batched env runners, ``learner_class``
        and one ``module_class`` module per mapping module (:func:`~marl.engine.spec.build_algorithm_config`)."""
        return build_algorithm_config(cls, cfg, env, mapping)

    @classmethod
    def checkpoint_meta(cls, cfg: ConfigBase) -> Dict[str, Any]:
        """Extra entries for the checkpoint's metadata that :meth:`policy_from_checkpoint`
        needs (e.g. an LLM's tokenizer object); none by default."""
        return {}

    @classmethod
    def policy_from_checkpoint(cls, ckpt: Path, meta: Dict[str, Any], env: Optional[MultiAgentEnv] = None) -> Policy:
        """The greedy policy saved in checkpoint ``ckpt`` (``marl.load``; no Ray needed).

        Default: the tensor :class:`~marl.policy.Policy` from the saved agent modules.
        With ``env`` the modules are rebuilt for that env's agents and entity counts and the
        weights copied in (transfer of HPN / DPN agents, :mod:`marl.transfer`).

        Raises:
            MarlError: with ``env``, a network whose parameter shapes depend on the scenario.
        """
        cfg = restore_config(meta["algo"], meta["config"])
        if env is not None:
            # a share mode is kept; a callable was saved as its repr: the saved table stands in for it
            saved_share = meta["config"].get("share")
            share = saved_share if saved_share in SHARE_MODES else MappingFn(meta["agent_to_module"])
            mapping = PolicyMapping(env.info, share=share, agent_id=cfg.agent_id)
            cls.check_env(cfg, env.info)
            specs = agent_module_specs(cls, cfg, mapping, inference_only=True)
            states = module_states(ckpt, specs)
            modules: Dict[str, Any] = {mid: spec.build() for mid, spec in specs.items()}
            for mid, module in modules.items():
                load_weights(module, states[mid], mid)
                module.eval()
            return Policy(mapping, modules)
        info = meta["env_spec"].make(num_envs=1).info if meta.get("env_spec") else meta["env_info"]
        mapping = PolicyMapping(info, share=MappingFn(meta["agent_to_module"]), agent_id=cfg.agent_id)
        return Policy(mapping, {mid: load_module(ckpt, mid) for mid in mapping.modules})

    def make_policy(self, mapping: PolicyMapping) -> Policy:
        """The greedy policy with a copy of the learners' current weights (runs without Ray)."""
        spec = self.config.get_multi_rl_module_spec(spaces=None, inference_only=True)
        built: Any = spec.build()
        state = self.learner_group.get_state(components="learner/rl_module", inference_only=True)["learner"][
            "rl_module"
        ]
        built.set_state(state)
        modules = {mid: built[mid] for mid in mapping.modules}
        for m in modules.values():
            m.eval()
        return Policy(mapping, modules)

    def training_step(self) -> StepOutput:  # type: ignore[override]  # returns what it sampled
        """One iteration of the family: sample (:meth:`sample_rollouts`), learn
        (:meth:`update_learners`), and return the rollout and the family's metrics."""
        raise NotImplementedError(f"{type(self).__name__} must implement training_step")

    # =============================================================== data path
    def sample_rollouts(self, **act_kwargs) -> Dict[str, Any]:
        """One rollout per healthy env runner, concatenated along the env axis ``B``
        (``act_kwargs``, e.g. ``epsilon``, go to the modules' ``act``); callbacks see it first,
        then the batch transforms (``on_rollout``) rewrite it.

        ``rollout["env_copies"]`` (``[B]`` int64) numbers the rollout's env copies among all
        runners' (runner ``r``'s copies are ``r * B_r ... (r + 1) * B_r - 1``): with a runner
        lost, its copies are missing (:meth:`~marl.engine.replay.JointEpisodeBuffer.add_rollout`).
        """
        t0 = time.perf_counter()
        return self._rollout_of(self.foreach_runner_indexed(lambda r: r.sample(**act_kwargs)), t0)

    def start_rollouts(self, **act_kwargs) -> None:
        """Start :meth:`sample_rollouts`'s rollout on the remote env runners without waiting for it
        (asynchronous sampling, e.g. while the learners take gradient steps); :meth:`collect_rollouts`
        returns it. Each runner first loads the learners' current weights (:meth:`RunnerFaults.submit`).

        Raises:
            MarlError: the trainer has no remote env runner (``num_env_runners: 0``).
        """
        if self.runner_faults is None:
            raise MarlError("asynchronous sampling needs remote env runners (num_env_runners >= 1); the run has none.")
        self.runner_faults.submit(lambda r: r.sample(**act_kwargs))

    def collect_rollouts(self) -> Dict[str, Any]:
        """The rollout :meth:`start_rollouts` started (waiting for it), as :meth:`sample_rollouts` returns one;
        runners lost meanwhile are left out (with none left, the rollout is sampled again on a restarted one)."""
        assert self.runner_faults is not None  # start_rollouts refused a run without remote runners
        t0 = time.perf_counter()
        return self._rollout_of([(self.runner_faults.ids.index(i), p) for i, p in self.runner_faults.collect()], t0)

    def _rollout_of(self, indexed: List[Tuple[int, Dict[str, Any]]], t0: float) -> Dict[str, Any]:
        """The rollout of the runners' parts ``indexed`` (``(runner position, part)``), seen by the callbacks and
        rewritten by the batch transforms; the time since ``t0`` counts as sampling time."""
        rollout = _concat_rollouts([part for _, part in indexed])
        rollout["env_copies"] = torch.cat(
            [torch.arange(r * part["starts"].shape[1], (r + 1) * part["starts"].shape[1]) for r, part in indexed]
        )
        self._sample_time += time.perf_counter() - t0
        self.run_callbacks.on_rollout(self, rollout)
        self.batch_transforms.on_rollout(self, rollout)
        return rollout

    def transform_episodes(self, buffer: Any, slots: List[int]) -> None:
        """The batch transforms' ``on_episodes`` on the whole episodes in ``slots`` of ``buffer`` (a
        :class:`~marl.engine.replay.JointEpisodeBuffer`), which were just committed: a family with a
        replay buffer of episodes calls this once per commit, before it samples (``transform_hooks``)."""
        if self.batch_transforms and slots:
            self.batch_transforms.on_episodes(self, Episodes(buffer, slots))

    @property
    def env_info(self) -> Any:
        """The ``EnvInfo`` of the env being trained on (the driver's env, else one built from the spec)."""
        env = self.local_env if self.local_env is not None else self.run.make_env(num_envs=1)
        return env.info

    def update_learners(self, batch, sync_weights: bool = True, **timesteps) -> Dict[str, float]:
        """One learner-group update on ``batch`` (``timesteps`` extras reach the learners'
        ``update``), then push the new weights to the runners if ``sync_weights``. The batch
        transforms (``on_batch``) see ``batch`` first.
        Returns the learners' metrics named in ``learner_metrics`` as ``{"<module>/<metric>": float}``."""
        t0 = time.perf_counter()
        self.batch_transforms.on_batch(self, batch)
        results = self.learner_group.update(
            batch=batch, timesteps={NUM_ENV_STEPS_SAMPLED_LIFETIME: self.progress["env_steps"], **timesteps}
        )
        if sync_weights:
            self.env_runner_group.sync_weights(from_worker_or_learner_group=self.learner_group, inference_only=True)
        self._learn_time += time.perf_counter() - t0
        return _reduce_learner_results(results, self.learner_metrics)

    def foreach_runner(self, fn: Callable[[Any], Any]) -> List[Any]:
        """``fn(runner)`` on every sampling env runner: the healthy remote ones, or the local one
        when there are none. Returns the results in runner order.

        Raises:
            EnvRunnersLost: no remote runner is left and none can be restarted.
        """
        return [result for _, result in self.foreach_runner_indexed(fn)]

    def foreach_runner_indexed(self, fn: Callable[[Any], Any]) -> List[Tuple[int, Any]]:
        """:meth:`foreach_runner` with each result's runner position (0-based; 0 for the local
        runner). A remote runner lost during the call is reported and left out
        (:class:`~marl.engine.faults.RunnerFaults`)."""
        if self.runner_faults is None:
            return [(0, fn(self.env_runner_group.local_env_runner))]
        return [(self.runner_faults.ids.index(i), result) for i, result in self.runner_faults.foreach(fn)]

    def first_runner(self, fn: Callable[[Any], Any]) -> Any:
        """``fn(runner)`` on one sampling env runner (the first healthy remote one, another if it
        is lost during the call; or the local one), e.g. for an evaluation."""
        if self.runner_faults is None:
            return fn(self.env_runner_group.local_env_runner)
        return self.runner_faults.foreach(fn, first_only=True)[0][1]

    def foreach_env(self, fn: Callable[[MultiAgentEnv], Any]) -> List[Any]:
        """``fn(env)`` on the env of every sampling runner (e.g. a callback setting a crash rate)."""
        return self.foreach_runner(lambda runner: fn(runner.ensure_env()))

    def init_weights_from(self, path: str) -> None:
        """Start from the agent networks of another run's checkpoint (``init_from``), e.g. an HPN
        trained on a smaller scenario (:mod:`marl.transfer`). Mixers, optimiser state and
        learner-only parts whose shapes differ start fresh.

        Raises:
            MarlError: no checkpoint at ``path``, a module id it lacks, or an agent
                network whose shapes differ.
        """
        mids = dict.fromkeys(self.run.agent_to_module.values())  # module ids, in order, once each
        states = module_states(resolve_checkpoint(path), mids)

        def load(learner: Any, *_: Any) -> Dict[str, List[str]]:
            return {mid: load_weights(learner.module[mid], st, mid) for mid, st in states.items()}

        fresh = self.learner_group.foreach_learner(load)
        self.env_runner_group.sync_weights(from_worker_or_learner_group=self.learner_group, inference_only=True)
        first = next(iter(fresh)).get()  # RemoteCallResults -> the first learner's report
        kept = {m: f for m, f in first.items() if f}
        print(
            f"[marl] initialised {', '.join(states)} from {path}" + (f"; fresh (shapes differ): {kept}" if kept else "")
        )

    # =============================================================== iteration
    def train_iteration(self) -> Dict[str, Any]:
        """Run one :meth:`training_step` and return flat metrics (floats) for logging."""
        t0 = time.perf_counter()
        self._sample_time = self._learn_time = 0.0
        out = self.training_step()
        dt = time.perf_counter() - t0
        m = out.rollout["metrics"]
        p = self.progress
        p["env_steps"] += m["env_steps"]
        p["iterations"] += 1
        p["episodes"] += len(m.get("episode_return", []))
        p["time_s"] += dt
        metrics: Dict[str, Any] = {
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
                metrics[f"{k}_mean"] = float(np.mean(v))
        metrics.update(out.metrics)
        if self.runner_faults is not None:
            metrics.update(self.runner_faults.metrics())  # runners_healthy, runners_lost, runners_restored
        metrics.update(self.run_callbacks.on_iteration_end(self, metrics) or {})
        self.last_metrics = metrics
        return metrics

    def step(self):
        # RLlib's train() -> step(): restore crashed env runners (fault tolerance),
        # then one of our iterations, whose flat metrics become the result.
        self.restore_env_runners(self.env_runner_group)
        return {"marl": self.train_iteration()}

    def restore_env_runners(self, env_runner_group) -> List[int]:
        """RLlib's hook at the start of every iteration: restarted remote runners come back with
        the learners' weights, and a line is printed (:meth:`RunnerFaults.restore`)."""
        faults = getattr(self, "runner_faults", None)
        if faults is None or env_runner_group is not self.env_runner_group:
            return super().restore_env_runners(env_runner_group)
        return faults.restore()

    def cleanup(self) -> None:
        # RLlib's stop(): lost remote runners are ended first, RLlib stops the others
        faults = getattr(self, "runner_faults", None)
        if faults is not None:
            faults.close()
        super().cleanup()

    # =============================================================== checkpoints
    def get_state(self, components=None, *, not_components=None, **kwargs):
        state = super().get_state(components, not_components=not_components, **kwargs)
        state["marl_progress"] = dict(self.progress)
        state["marl_callbacks"] = self.run_callbacks.state_dict()
        state[STATE_KEY] = self.batch_transforms.state_dict()
        if wants_component(self, SAMPLING_KEY, components, not_components):  # exact resume (docs/index.md)
            state[SAMPLING_KEY] = sampling_state(self)
        return state

    def set_state(self, state):
        super().set_state(state)
        if "marl_progress" in state:
            self.progress.update(state["marl_progress"])
        if "marl_callbacks" in state:
            self.run_callbacks.load_state_dict(state["marl_callbacks"])
            self.run_callbacks.on_checkpoint_restore(self)
        self.batch_transforms.load_state_dict(state)  # its own entry, or an older version's (legacy_state_key)
        if SAMPLING_KEY in state:  # last: it restores the driver's random generators
            restore_sampling(self, state[SAMPLING_KEY])


def _concat_rollouts(parts: List[Dict[str, Any]]) -> Dict[str, Any]:
    if len(parts) == 1:
        return parts[0]
    out: Dict[str, Any] = {}
    for k, v in parts[0].items():
        if k == "modules":
            out[k] = {
                mid: {c: torch.cat([p[k][mid][c] for p in parts], dim=1) for c in cols} for mid, cols in v.items()
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
