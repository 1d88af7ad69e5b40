"""Off-policy core: the replay-and-update loop shared by the off-policy families.

An off-policy family (IQL / VDN / QMIX today; off-policy actor-critics on the
:class:`~marl.engine.replay.TransitionBuffer` next) subclasses :class:`OffPolicyTrainer`
and :class:`OffPolicyLearner` and keeps only what is its own: config, networks, targets and
loss. One iteration of :meth:`OffPolicyTrainer.training_step`::

    act_kwargs() -> sample_rollouts (async_sampling: next_rollout) -> buffer.add_rollout -> on_episodes_committed(slots)
    -> observe_rollout -> UpdateSchedule.updates_due -> n steps in calls of steps_per_call:
    [sample_batch of K blocks -> learner update (K x: one gradient step on a block, then the
    target update UpdateSchedule.target_tau asked for)]

This module holds:

* target networks: :func:`make_target`, :func:`hard_update`, :func:`polyak_update`
  (``theta' <- tau theta + (1 - tau) theta'``; Lillicrap et al. 2016, DDPG, arXiv 1509.02971,
  Algorithm 1), usable by any ``nn.Module``; a module exposes its pairs with ``target_pairs()``;
* :class:`UpdateSchedule`: the update-to-data ratio (gradient steps per new episode or env
  step), learning starts, and the target update interval (episodes or gradient steps);
* :class:`OffPolicyLearner`: ``K`` gradient steps per ``update`` call (1 unless the family chunks),
  each followed by the target update its schedule asks for;
* :class:`OffPolicyTrainer`: the iteration above, and the buffer and its generator in checkpoints.

How to add a family on it: ``docs/adding_an_algorithm.md`` ("On the off-policy core").
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any, Dict, Iterable, List, Optional, Tuple

import numpy as np
import torch
from ray.rllib.policy.sample_batch import MultiAgentBatch, SampleBatch

from marl.engine.context import RunAccess, RunContext
from marl.engine.rllib_seam import SeamLearner, wants_component
from marl.engine.trainer import StepOutput, Trainer
from marl.errors import MarlError

EPISODE, ENV_STEP, GRADIENT_STEP = "episode", "env_step", "gradient_step"
DATA_UNITS = (EPISODE, ENV_STEP)  # what the update-to-data ratio counts
TARGET_UNITS = (EPISODE, GRADIENT_STEP)  # what the target update interval counts
# the learners' timesteps entry: per gradient step of the call, the tau of its target update (0: none)
TARGET_TAU = "target_tau"
CALL_BYTES = 32 * 2**20  # the most sampled bytes one learner call carries when a family chunks its gradient steps
REPLAY = "replay_buffer"  # the checkpoint component with the buffer and its sampling generator
ASYNC_KEY = "async_sampling"  # the config key of a family that samples during its gradient steps (next_rollout)
PENDING_KEY = "async_rollout"  # trainer-state entry: the rollout sampled during the last gradient steps


# ============================================================ target networks
def make_target(net: torch.nn.Module) -> torch.nn.Module:
    """A target network of ``net``: a deep copy with the same weights that takes no gradients."""
    return copy.deepcopy(net).requires_grad_(False)


@torch.no_grad()
def hard_update(target: torch.nn.Module, online: torch.nn.Module) -> None:
    """Copy every parameter and buffer of ``online`` into ``target`` (``theta' <- theta``; DQN's
    periodic target copy, Mnih et al. 2015, Nature 518; pymarl's ``_update_targets``)."""
    target.load_state_dict(online.state_dict())


@torch.no_grad()
def polyak_update(target: torch.nn.Module, online: torch.nn.Module, tau: float) -> None:
    """Polyak averaging ``theta' <- tau * theta + (1 - tau) * theta'`` of every parameter, in place;
    buffers (e.g. normalisation statistics) are copied (DDPG's soft target update, Lillicrap et al.
    2016, arXiv 1509.02971, Algorithm 1; ``tau = 1`` is :func:`hard_update`'s copy).

    Raises:
        MarlError: ``tau`` outside ``(0, 1]``, or the two networks' parameters differ in number or shape.
    """
    check_tau(tau)
    pairs = _matched(target.parameters(), online.parameters(), "parameters")
    for t, o in pairs:
        t.mul_(1.0 - tau).add_(o, alpha=tau)
    for t, o in _matched(target.buffers(), online.buffers(), "buffers"):
        t.copy_(o)


def update_target(target: torch.nn.Module, online: torch.nn.Module, tau: float) -> None:
    """:func:`hard_update` for ``tau == 1``, else :func:`polyak_update` with ``tau``."""
    if tau == 1.0:
        hard_update(target, online)
    else:
        polyak_update(target, online, tau)


def target_pairs(module: Any) -> List[Tuple[torch.nn.Module, torch.nn.Module]]:
    """``(online, target)`` network pairs of an RLModule: what its ``target_pairs()`` returns, or
    none for a module without one (e.g. an inference-only copy)."""
    pairs = getattr(module, "target_pairs", None)
    return list(pairs()) if pairs is not None else []


def check_tau(tau: float) -> None:
    """Raise :class:`MarlError` unless ``0 < tau <= 1`` (the fraction of the online weights a target takes)."""
    if not 0.0 < float(tau) <= 1.0:
        raise MarlError(
            f"target update tau={tau} is not in (0, 1]: 1 copies the online network, "
            f"a small value (e.g. 0.005) averages slowly."
        )


def _matched(a: Iterable[torch.Tensor], b: Iterable[torch.Tensor], what: str) -> List[Tuple[Any, Any]]:
    a, b = list(a), list(b)
    if len(a) != len(b) or any(x.shape != y.shape for x, y in zip(a, b)):
        raise MarlError(
            f"target and online networks differ in their {what}: {[tuple(x.shape) for x in a]} "
            f"vs {[tuple(y.shape) for y in b]}"
        )
    return list(zip(a, b))


# ============================================================ when to update
@dataclass(frozen=True)
class UpdateSchedule:
    """When an :class:`OffPolicyTrainer` takes gradient steps and updates its target networks.

    Update-to-data ratio: ``updates`` gradient steps per ``per`` new units of data, ``unit``
    ``"episode"`` (episodes the buffer committed) or ``"env_step"`` (env steps sampled, all env
    copies), counted from the iteration in which the buffer first holds ``learning_starts``
    entries (episodes of a ``JointEpisodeBuffer``, transitions of a ``TransitionBuffer``). What does
    not fill a whole ``per`` carries over (``progress["pending_episodes"]`` / ``["pending_env_steps"]``).
    pymarl2 (Hu et al. 2021, arXiv 2102.03479): ``updates=1, per=8, unit="episode"``; TD3
    (Fujimoto et al. 2018, arXiv 1802.09477): one gradient step per env step.

    Targets take ``tau`` of the online weights (``1``: a hard copy, :func:`update_target`):

    * ``target_unit="episode"``: after the iteration's last gradient step, once
      ``target_interval`` episodes have ended since the last update (pymarl's
      ``target_update_interval``; every step of one iteration sees one episode count);
    * ``target_unit="gradient_step"``: after every ``target_interval``-th gradient step
      (``1`` with a small ``tau``: DDPG's soft update after each step).

    Raises:
        MarlError: a unit not in the choices, ``updates``, ``per`` or ``target_interval`` below 1,
            ``learning_starts`` below 0, or ``tau`` outside ``(0, 1]``.
    """

    updates: int = 1
    per: int = 1
    unit: str = EPISODE
    learning_starts: int = 0
    target_interval: int = 1
    target_unit: str = EPISODE
    tau: float = 1.0

    def __post_init__(self):
        for name, value, choices in (("unit", self.unit, DATA_UNITS), ("target_unit", self.target_unit, TARGET_UNITS)):
            if value not in choices:
                raise MarlError(f"update schedule {name}={value!r} is not one of {list(choices)}")
        for name in ("updates", "per", "target_interval"):
            if int(getattr(self, name)) < 1:
                raise MarlError(f"update schedule {name}={getattr(self, name)} must be >= 1")
        if int(self.learning_starts) < 0:
            raise MarlError(f"update schedule learning_starts={self.learning_starts} must be >= 0")
        check_tau(self.tau)

    @property
    def pending_key(self) -> str:
        """The ``progress`` entry of the data not yet traded for a gradient step."""
        return f"pending_{self.unit}s"

    def initial_progress(self) -> Dict[str, int]:
        """The counters the schedule keeps in the trainer's ``progress`` (saved in checkpoints)."""
        return {self.pending_key: 0, "last_target_sync": 0, "updates": 0}

    def updates_due(self, progress: Dict[str, Any], new: int, buffered: int) -> int:
        """Gradient steps due for ``new`` units of fresh data, the buffer now holding ``buffered``
        entries (none before ``learning_starts``; that data is not counted); updates ``progress``."""
        if buffered < self.learning_starts:
            return 0
        progress[self.pending_key] += new
        blocks = int(progress[self.pending_key] // self.per)
        progress[self.pending_key] -= blocks * self.per
        return blocks * self.updates

    def target_tau(self, progress: Dict[str, Any], last: bool, episodes: int) -> float:
        """``tau`` if the targets are due after the gradient step ``progress["updates"]`` counts
        (``last``: the iteration's last; ``episodes``: episodes ended so far, this iteration's
        included), else ``0``; a due update is marked in ``progress["last_target_sync"]``."""
        if self.target_unit == EPISODE:
            now, due = episodes, last
        else:
            now, due = progress["updates"], True
        if not (due and now - progress["last_target_sync"] >= self.target_interval):
            return 0.0
        progress["last_target_sync"] = now
        return float(self.tau)


def batch_module_id(run: RunContext) -> str:
    """The module id a joint learner batch travels under: the policy mapping's first module.

    One id for all agents' columns keeps RLlib's per-module batch handling (which slices and
    shuffles each module's rows on their own) from splitting the agents of one env step; the
    learner returns its joint loss under the same id."""
    return next(iter(run.agent_to_module.values()))


# ============================================================ learner
class OffPolicyLearner(RunAccess, SeamLearner):
    """Base of off-policy learners: each ``update`` takes ``K = len(timesteps[TARGET_TAU])`` gradient
    steps, step ``i`` on the ``i``-th of ``K`` equal row blocks of the batch the trainer sampled
    (:meth:`learner_batch` shapes its columns for ``forward_train`` / ``compute_losses``), each
    followed, if its tau is positive, by the target update of every module's :func:`target_pairs`
    (:meth:`step`). One call for ``K`` steps converts the batch to tensors once and pays RLlib's
    per-update bookkeeping once. A family implements ``compute_losses`` (and its optimisers)."""

    def update(self, batch=None, training_data=None, timesteps=None, **kwargs):  # type: ignore[override]  # one MultiAgentBatch
        """``K`` gradient steps on ``batch`` (a ``MultiAgentBatch`` of ``K`` blocks); the reduced metrics
        (each metric as logged by the last step)."""
        timesteps = timesteps or {}
        taus = [float(t) for t in timesteps.get(TARGET_TAU, [0.0])]
        columns = self.begin_update(batch, training_data, timesteps)
        for block, tau in zip(row_blocks(columns, len(taus)), taus):
            self.step(self.learner_batch(block), tau)
        self.after_gradient_based_update(timesteps=timesteps)
        return self.metrics.reduce()

    def step(self, batch: Any, tau: float) -> None:
        """One gradient step on ``batch``, then the target update with ``tau`` if it is positive."""
        self.gradient_step(batch)
        if tau > 0:
            self.update_targets(tau)

    def learner_batch(self, columns: Dict[str, Dict[str, torch.Tensor]]) -> Dict[str, Any]:
        """Module id -> tensor columns of the update's batch -> what ``forward_train`` and
        ``compute_losses`` read (default: unchanged)."""
        return columns

    def update_targets(self, tau: float) -> None:
        """:func:`update_target` with ``tau`` on every ``(online, target)`` pair of every module."""
        for mid in self.module.keys():
            for online, target in target_pairs(self.module[mid].unwrapped()):
                update_target(target, online, tau)


def mean_over_learners(grads: Dict[Any, Optional[torch.Tensor]]) -> Dict[Any, Optional[torch.Tensor]]:
    """Each gradient averaged over the learners of a ``torch.distributed`` group, in place (one all-reduce of one
    flat buffer, as DDP's gradient buckets; Li et al. 2020, arXiv 2006.15704, Sec. 3): what DDP does for a loss
    that calls the networks outside its wrapper (an off-policy loss spanning modules). Unchanged with one learner
    or no group. ``grads``: parameter id -> gradient (``None``: no gradient this step, on every learner alike)."""
    dist = torch.distributed
    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
        return grads
    present = [g for g in grads.values() if g is not None]
    if present:
        flat = torch.cat([g.reshape(-1) for g in present])
        dist.all_reduce(flat)
        flat /= dist.get_world_size()
        for g, mean in zip(present, flat.split([g.numel() for g in present])):
            g.copy_(mean.view_as(g))
    return grads


def row_blocks(columns: Dict[str, Dict[str, Any]], k: int) -> List[Dict[str, Dict[str, Any]]]:
    """Module id -> columns of ``k * b`` rows -> ``k`` such dicts of ``b`` rows each (views, no copy).

    Raises:
        MarlError: the row count is not a multiple of ``k``."""
    if k == 1:
        return [columns]
    rows = len(next(iter(next(iter(columns.values())).values())))
    if rows % k:
        raise MarlError(f"a learner call of {k} gradient steps got {rows} rows, not a multiple of {k}.")
    b = rows // k
    return [{m: {c: v[i * b : (i + 1) * b] for c, v in cols.items()} for m, cols in columns.items()} for i in range(k)]


# ============================================================ trainer
class OffPolicyTrainer(Trainer):
    """Base of off-policy algorithms: sample, store in a replay buffer, and take gradient steps
    on uniform samples of it at the family's :class:`UpdateSchedule`.

    A family implements :meth:`make_buffer` and :meth:`update_schedule`, and may override
    :meth:`act_kwargs`, :meth:`on_episodes_committed`, :meth:`observe_rollout`,
    :meth:`transform_batch` and :meth:`replay_extras` / :meth:`load_replay_extras`. Its config
    has ``batch_size`` (entries per gradient step) and ``checkpoint_buffer`` keys.

    Attributes:
        buffer: the replay buffer (``len``, ``add_rollout``, ``just_committed``, ``sample``,
            ``steps_in``, ``episodes_added``, ``get_state`` / ``set_state``, ``ITEMS``).
        rng: the numpy ``Generator`` of the buffer's samples (seeded with ``seed``).
        schedule: the :class:`UpdateSchedule`; its counters live in ``progress``.
    """

    # batch transforms also see whole committed episodes (on_episodes, :meth:`on_episodes_committed`);
    # a family on a TransitionBuffer, whose commits are single steps, sets ("on_rollout", "on_batch")
    transform_hooks = ("on_rollout", "on_episodes", "on_batch")

    def setup(self, config):
        super().setup(config)
        self.buffer = self.make_buffer()
        self.rng = np.random.default_rng(self.cfg.seed)
        self.schedule = self.update_schedule()
        self.progress.update(self.schedule.initial_progress())
        # asynchronous sampling: the rollout sampled while the learners step, {"act": kwargs, "rollout": None
        # while it is in flight on the runners}; None before the first iteration
        self.pending: Optional[Dict[str, Any]] = None

    # --------------------------------------------------------------- hooks of a family
    def make_buffer(self) -> Any:
        """The replay buffer (a :class:`~marl.engine.replay.JointEpisodeBuffer` or
        :class:`~marl.engine.replay.TransitionBuffer`)."""
        raise NotImplementedError(f"{type(self).__name__} must implement make_buffer")

    def update_schedule(self) -> UpdateSchedule:
        """The family's :class:`UpdateSchedule`, from its config."""
        raise NotImplementedError(f"{type(self).__name__} must implement update_schedule")

    def act_kwargs(self) -> Dict[str, float]:
        """Keyword arguments of the modules' ``act`` for this iteration (e.g. ``epsilon``); they are
        reported in the iteration's metrics too. None by default."""
        return {}

    def on_episodes_committed(self, slots: Any) -> None:
        """Transform data the buffer just committed, before anything can sample it: the buffer's
        ``just_committed`` rows (episode slots of a ``JointEpisodeBuffer``, transition rows of a
        ``TransitionBuffer``). By default the run's batch transforms see whole committed episodes
        (``on_episodes``, e.g. ``reward_redistribution``; :mod:`marl.transforms`) when the family
        lists that hook in ``transform_hooks``."""
        if "on_episodes" in self.transform_hooks:
            self.transform_episodes(self.buffer, slots)

    def observe_rollout(self, rollout: Dict[str, Any]) -> None:
        """See the iteration's rollout as sampled (e.g. running reward statistics). Nothing by default."""

    def transform_batch(self, columns: Dict[str, np.ndarray]) -> Dict[str, np.ndarray]:
        """A sampled batch's numpy columns before they go to the learners. Unchanged by default."""
        return columns

    def replay_extras(self) -> Dict[str, Any]:
        """Family state saved beside the buffer in checkpoints (entries of the trainer state)."""
        return {}

    def load_replay_extras(self, state: Dict[str, Any]) -> None:
        """Restore what :meth:`replay_extras` saved (``state``: the whole trainer state)."""

    # --------------------------------------------------------------- the iteration
    def training_step(self) -> StepOutput:  # type: ignore[override]  # returns what it sampled (Trainer)
        """Sample one rollout, store it, take the gradient steps due; metrics: the last step's
        learner metrics, :meth:`act_kwargs`, ``buffer_<ITEMS>`` and ``updates`` (total)."""
        act = self.act_kwargs()
        act, rollout = (
            self.next_rollout(act) if getattr(self.cfg, ASYNC_KEY, False) else (act, self.sample_rollouts(**act))
        )
        new = self.store(rollout)
        episodes = int(self.progress["episodes"]) + len(rollout["metrics"].get("episode_return", []))
        metrics = self.run_updates(self.schedule.updates_due(self.progress, new, len(self.buffer)), episodes)
        metrics.update(act)
        metrics[f"buffer_{self.buffer.ITEMS}"] = float(len(self.buffer))
        metrics["updates"] = float(self.progress["updates"])
        return StepOutput(rollout, metrics)

    def next_rollout(self, act: Dict[str, float]) -> Tuple[Dict[str, float], Dict[str, Any]]:
        """Asynchronous sampling (``async_sampling``): the rollout the runners sampled while the last
        iteration's learners stepped (the first iteration samples now), with the :meth:`act_kwargs` it was
        sampled with; before returning, the runners start the next rollout with ``act`` and the learners' current
        weights, so it is sampled during this iteration's gradient steps. The policy that samples a rollout is
        thus one iteration older than in synchronous sampling (as in Ape-X's actors, Horgan et al. 2018,
        arXiv 1803.00933), and so is its exploration schedule."""
        if self.pending is None:
            used, rollout = act, self.sample_rollouts(**act)
        else:
            used, rollout = self.pending["act"], self.pending["rollout"] or self.collect_rollouts()
        self.start_rollouts(**act)
        self.pending = {"act": dict(act), "rollout": None}
        return used, rollout

    def store(self, rollout: Dict[str, Any]) -> int:
        """Add ``rollout`` to the buffer, transform what it committed, observe the rollout; return
        the new data in the schedule's unit (episodes committed, or env steps sampled)."""
        before = self.buffer.episodes_added
        self.buffer.add_rollout(rollout)
        self.on_episodes_committed(self.buffer.just_committed)
        self.observe_rollout(rollout)
        if self.schedule.unit == EPISODE:
            return self.buffer.episodes_added - before
        return int(rollout["metrics"]["env_steps"])

    def run_updates(self, n: int, episodes: int) -> Dict[str, float]:
        """``n`` gradient steps, each on fresh uniform samples, in learner calls of up to
        :meth:`steps_per_call` steps (:meth:`sample_batch` of that many blocks); the env runners
        get the weights after the last call, the learners update targets after the steps the
        schedule names. Returns the last step's learner metrics (empty without a step)."""
        metrics: Dict[str, float] = {}
        done, per_call = 0, self.steps_per_call()
        while done < n:
            taus = []
            for _ in range(min(per_call, n - done)):
                done += 1
                self.progress["updates"] += 1
                taus.append(self.schedule.target_tau(self.progress, done == n, episodes))
            batch = self.sample_batch(len(taus))
            metrics = self.update_learners(batch, sync_weights=done == n, **{TARGET_TAU: taus})
        return metrics

    def steps_per_call(self) -> int:
        """Gradient steps per learner call: 1 by default (each call's batch is one gradient step's, as
        the batch transforms' ``on_batch`` and the episode buffers' padding to the longest episode
        expect). A family on a :class:`~marl.engine.replay.TransitionBuffer` without batch transforms
        may return more (:meth:`chunked_steps`)."""
        return 1

    def chunked_steps(self) -> int:
        """As many gradient steps per learner call as keep its batch under :data:`CALL_BYTES` (at least
        1); 1 with batch transforms (``on_batch`` sees one gradient step's batch) or more than one
        learner (RLlib shards a call's batch over them)."""
        if self.batch_transforms or self.cfg.num_learners > 1:
            return 1
        row = sum(int(v[0].nbytes) for v in self.buffer.data.values())
        return max(1, CALL_BYTES // max(1, row * int(self.cfg.batch_size)))

    def sample_batch(self, steps: int = 1) -> MultiAgentBatch:
        """``steps`` blocks of ``batch_size`` entries drawn uniformly from the buffer with :attr:`rng`
        (one draw of ``steps * batch_size``), through :meth:`transform_batch`, as one policy batch
        under :func:`batch_module_id`."""
        columns = self.transform_batch(self.buffer.sample(steps * self.cfg.batch_size, self.rng))
        n = self.buffer.steps_in(columns)
        return MultiAgentBatch({batch_module_id(self.run): SampleBatch(columns)}, env_steps=n)

    # --------------------------------------------------------------- checkpoints
    def get_state(self, components=None, *, not_components=None, **kwargs):
        wanted = wants_component(self, REPLAY, components, not_components)
        if wanted and self.pending is not None and self.pending["rollout"] is None:
            # the rollout in flight is part of the run (exact resume): wait for it before the runners' states
            self.pending["rollout"] = self.collect_rollouts()
        state = super().get_state(components, not_components=not_components, **kwargs)
        if not wanted:
            return state  # a component's state only (RLlib's save_to_path asks per component)
        if self.pending is not None:
            state[PENDING_KEY] = self.pending
        state["replay_rng"] = self.rng.bit_generator.state  # the buffer's sampling draws (exact resume)
        if self.cfg.checkpoint_buffer:
            state[REPLAY] = self.buffer.get_state()
        state.update(self.replay_extras())
        return state

    def set_state(self, state):
        super().set_state(state)
        if REPLAY in state:
            self.buffer.set_state(state[REPLAY])
        if "replay_rng" in state:
            self.rng.bit_generator.state = state["replay_rng"]
        if PENDING_KEY in state:
            self.pending = state[PENDING_KEY]
        self.load_replay_extras(state)
