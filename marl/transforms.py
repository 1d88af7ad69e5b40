"""Batch transforms: plug-ins that rewrite what a trainer learns from, before the loss.

A :class:`~marl.callbacks.Callback` watches a run; a :class:`BatchTransform` changes its
data: the sampled rollouts, the whole episodes entering a replay buffer, or the batch of
a learner update. Reward redistribution for off-beat actions is one (``causal_shift`` and
``legem``, registered by ``marl.algos``; ``docs/offbeat.md``). A transform is chosen by
name and has its keys in a config section of its own name (:mod:`marl.config.sections`)::

    env.fit("qmix", reward_redistribution="legem", legem={"beta": 0.2})
    marl train env=stag_hunter algo=qmix reward_redistribution=legem legem.beta=0.2

Hooks run in the driver process, in this order::

    check(cfg, info, hooks)            classmethod, before Ray starts: can it run on this env / algorithm?
    setup(trainer)                     once, when the trainer is built (before a checkpoint is restored)
    load_state_dict(state)             on resume, what state_dict() saved
    per iteration:
        on_rollout(trainer, rollout)   after each sampling call (Trainer.sample_rollouts), after the callbacks'
                                       on_rollout; on-policy: before sequences are built; off-policy:
                                       before the rollout enters the replay buffer
        on_episodes(trainer, episodes) trainers with a replay buffer of whole episodes (QMIX, VDN, IQL): the
                                       episodes the last rollout completed, once each, before any is sampled
        on_batch(trainer, batch)       every learner update (Trainer.update_learners): the batch before the loss
    state_dict()                       saved in every checkpoint (exact resume)

A trainer class lists the hooks its training step calls in ``transform_hooks``
(:class:`~marl.engine.trainer.Trainer`: ``on_rollout``, ``on_batch``); a transform none of
whose hooks the algorithm calls is refused before Ray starts, naming the algorithms that
can use it. Hooks change their argument in place and return nothing.

This module imports neither torch nor Ray (configs are checked before Ray starts).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, Iterator, List, Mapping, Optional, Sequence, Tuple, Union

import numpy as np

from marl.callbacks import named_list
from marl.config.sections import register_section, resolve_class
from marl.errors import MarlError, unknown_choice
from marl.plugins import load_plugins

Trainer = Any  # a marl.engine.trainer.Trainer (this module sits below the engine)
HOOKS = ("on_rollout", "on_episodes", "on_batch")
NONE = "none"
SELECT_KEY = "reward_redistribution"  # the config key that names the run's transform
STATE_KEY = "marl_transforms"  # the transforms' state in a trainer's checkpoint state


class BatchTransform:
    """Base class of batch transforms; every hook does nothing by default.

    Args:
        config: the transform's config section (an instance of the schema it was registered
            with, e.g. ``cfg.legem``), or None for a transform without keys.
        name: its registered name (the key of its state in checkpoints).

    Class attributes:
        legacy_state_key: where checkpoints of older versions kept this transform's state at
            the top of the trainer's state (read when the checkpoint has no ``marl_transforms``).
    """

    legacy_state_key: Optional[str] = None

    def __init__(self, config: Any = None, name: Optional[str] = None):
        self.config = config
        self.name = name or type(self).__name__

    @classmethod
    def hooks(cls) -> Tuple[str, ...]:
        """The data hooks this class overrides (of ``on_rollout``, ``on_episodes``, ``on_batch``)."""
        return tuple(h for h in HOOKS if getattr(cls, h) is not getattr(BatchTransform, h))

    @classmethod
    def check(cls, cfg: Any, info: Any, hooks: Sequence[str]) -> None:
        """Raise :class:`~marl.errors.MarlError` if the transform cannot run with config ``cfg`` on an
        env described by ``info`` (an ``EnvInfo``, e.g. more than one team) under a trainer that
        calls ``hooks``; called before Ray starts."""

    def setup(self, trainer: Trainer) -> None:
        """The trainer is built (``trainer.cfg``, ``trainer.run``, ``trainer.env_info``); nothing sampled yet."""

    def on_rollout(self, trainer: Trainer, rollout: Dict[str, Any]) -> None:
        """A time-major rollout (``BatchedEnvRunner.sample``): ``rollout["modules"][m]`` holds module
        ``m``'s ``[T, B, N_m, ...]`` torch tensors (``obs``, ``actions``, ``rewards``, ``alive``, the
        env's extra columns such as off-beat ``decision``), ``rollout["starts"]``,
        ``["terminated"]``, ``["truncated"]`` are ``[T, B]`` bool. Replace or edit tensors in place."""

    def on_episodes(self, trainer: Trainer, episodes: "Episodes") -> None:
        """Whole episodes just committed to the replay buffer (:class:`Episodes`); writes into
        their arrays change what the learner samples."""

    def on_batch(self, trainer: Trainer, batch: Any) -> None:
        """The batch of a learner update (an RLlib ``MultiAgentBatch`` in the family's layout:
        PPO's per-module sequences, the value-decomposition joint episodes), after the family's
        own preprocessing; edit its columns in place."""

    def state_dict(self) -> Dict[str, Any]:
        """State to save in checkpoints (picklable); empty by default."""
        return {}

    def load_state_dict(self, state: Dict[str, Any]) -> None:
        """Restore what :meth:`state_dict` returned."""


# ============================================================ views of replay episodes
class Episode:
    """One whole episode in a replay buffer of agent-aligned episodes
    (:class:`~marl.engine.replay.JointEpisodeBuffer`), as numpy views of the buffer's arrays:
    writing into them (``ep.rewards[m][:] = x``, ``ep.rewards[m] += x``) rewrites the episode.

    Attributes:
        slot: the buffer slot; length: ``L``, its steps; terminated: it ended in an absorbing
            state (False: truncated, e.g. at the episode limit).
        modules: module ids, in the buffer's order (the agents' env order within each).
        rewards: module -> ``[L, N_m]`` float32 per-agent rewards (writable views).
        obs: module -> ``[L+1, N_m, D_m]`` observations (index ``L``: the last one, after the episode's end).
        actions: module -> ``[L, N_m]`` int64; alive: module -> ``[L, N_m]`` bool.
        state: ``[L+1, S]`` global states.
    """

    def __init__(self, buffer: Any, slot: int):
        d, L = buffer.data, int(buffer.lengths[slot])
        self._buffer = buffer
        self.slot, self.length = int(slot), L
        self.terminated = bool(d["terminated"][slot, L - 1])
        self.modules: List[str] = list(buffer.module_shapes)
        self.rewards = {m: d[f"{m}/rewards"][slot, :L] for m in self.modules}
        self.obs = {m: d[f"{m}/obs"][slot, : L + 1] for m in self.modules}
        self.actions = {m: d[f"{m}/actions"][slot, :L] for m in self.modules}
        self.alive = {m: d[f"{m}/alive"][slot, :L] for m in self.modules}
        self.state = d["state"][slot, : L + 1]

    def column(self, module: str, name: str, default: Any = True) -> np.ndarray:
        """``[L, N_m]`` values of the env's extra column ``name`` (off-beat ``decision``) for ``module``;
        ``default`` everywhere when the env declares no such column (no off-beat wrapper: every
        agent decides at every step)."""
        return self._buffer.column(module, name, self.slot, self.length, default)


class Episodes(Sequence[Episode]):
    """The episodes of buffer ``slots`` (a sequence of :class:`Episode`).

    Attributes:
        modules: module ids, in the buffer's order; lengths: ``[E]`` int64 episode lengths.
    """

    def __init__(self, buffer: Any, slots: Sequence[int]):
        self.episodes = [Episode(buffer, s) for s in slots]
        self.modules: List[str] = list(buffer.module_shapes)
        self.lengths = np.array([e.length for e in self.episodes], np.int64)

    def __getitem__(self, i):
        return self.episodes[i]

    def __len__(self) -> int:
        return len(self.episodes)

    def __iter__(self) -> Iterator[Episode]:
        return iter(self.episodes)


# ============================================================ registry
@dataclass(frozen=True)
class TransformEntry:
    """One registered transform."""

    name: str
    target: Union[str, type]  # "module:Class" of its BatchTransform, or the class
    config: Optional[Union[str, type]]  # "module:Class" of its config section's schema, or None
    description: str


_TRANSFORMS: Dict[str, TransformEntry] = {}


def register_transform(
    name: str, target: Union[str, type], *, config: Optional[Union[str, type]] = None, description: str = ""
) -> None:
    """Register a batch transform under ``name`` (registering a name again replaces it).

    Args:
        name: what users pass as ``reward_redistribution=name`` (not ``none``).
        target: ``"module:Class"`` of its :class:`BatchTransform` subclass, imported when a run
            uses it (or the class itself, e.g. in a notebook or a test).
        config: ``"module:Class"`` of the schema of its keys (a ``marl.config.ConfigBase``
            dataclass with ``DEFAULTS``, in a module that imports neither torch nor Ray), or None.
            Users give the keys in the section ``name`` (``legem={"beta": 0.2}``).
        description: one line for the docs.
    Raises:
        MarlError: ``name`` is ``none``, or ``target`` is neither a ``"module:Class"`` string nor
            a BatchTransform subclass.
    """
    if name == NONE:
        raise MarlError(f"register_transform: '{NONE}' means no transform; choose another name.")
    if not (isinstance(target, str) and ":" in target) and not (
        isinstance(target, type) and issubclass(target, BatchTransform)
    ):
        raise MarlError(
            f"register_transform('{name}'): target must be a 'module:Class' string or a "
            f"marl.transforms.BatchTransform subclass, got {target!r}."
        )
    _TRANSFORMS[name] = TransformEntry(name, target, config, description)
    if config is not None:
        register_section(name, config, key=SELECT_KEY, value=name)


def list_transforms() -> Dict[str, str]:
    """Transform name -> one-line description, sorted by name (imports no transform module)."""
    load_plugins()
    return {name: _TRANSFORMS[name].description for name in sorted(_TRANSFORMS)}


def transform_choices() -> Tuple[str, ...]:
    """The valid values of ``reward_redistribution``: ``none`` and the registered transforms."""
    return (NONE, *list_transforms())


def transform_class(name: str) -> type:
    """The :class:`BatchTransform` subclass registered as ``name`` (imported on first use).

    Raises:
        MarlError: unknown name (lists the registered ones), or a target that is no BatchTransform.
    """
    load_plugins()
    if name not in _TRANSFORMS:
        raise unknown_choice("batch transform", name, sorted(_TRANSFORMS))
    return resolve_class(_TRANSFORMS[name].target, BatchTransform, f"Batch transform '{name}'")


def selected(cfg: Any) -> List[str]:
    """The transforms config ``cfg`` selects (``reward_redistribution``, unless ``none``)."""
    name = getattr(cfg, SELECT_KEY, NONE)
    return [] if name in (NONE, None) else [name]


def check_transforms(cfg: Any, info: Any, trainer_cls: Any) -> None:
    """The checks of the transforms ``cfg`` selects, before Ray starts: the algorithm's trainer
    calls one of the transform's hooks, then the transform's own :meth:`BatchTransform.check`.

    Raises:
        MarlError: a transform none of whose hooks the trainer calls (naming the algorithms whose
            trainers do), or what the transform's check raises.
    """
    hooks = tuple(getattr(trainer_cls, "transform_hooks", ()))
    for name in selected(cfg):
        cls: Any = transform_class(name)
        if not set(cls.hooks()) & set(hooks):
            raise MarlError(
                f"{SELECT_KEY}='{name}' transforms data at {', '.join(cls.hooks()) or 'no hook'}; "
                f"{cfg.algo} calls {', '.join(hooks) or 'no transform hook'}. Algorithms that can "
                f"use it: {', '.join(_algos_calling(cls.hooks())) or 'none'}."
            )
        cls.check(cfg, info, hooks)


def _algos_calling(hooks: Sequence[str]) -> List[str]:
    """Registered algorithms whose trainers call one of ``hooks`` (a broken plugin is skipped)."""
    from marl.config.registry import list_algos, trainer_class

    out = []
    for algo in list_algos():
        try:
            calls = set(getattr(trainer_class(algo), "transform_hooks", ()))
        except Exception:  # noqa: BLE001 - this only words an error
            continue
        if calls & set(hooks):
            out.append(algo)
    return out


# ============================================================ the run's transforms
class TransformList:
    """The transforms of a run, in order; the trainer calls them
    (:class:`~marl.engine.trainer.Trainer`: ``batch_transforms``).

    Raises:
        TypeError: an element is not a :class:`BatchTransform`.
        ValueError: two transforms share a ``name`` (their checkpoint state would collide).
    """

    def __init__(self, transforms: Sequence[BatchTransform] = ()):
        self.transforms: List[BatchTransform] = named_list(transforms, BatchTransform, "batch transforms")

    @classmethod
    def from_config(cls, cfg: Any) -> "TransformList":
        """The transforms ``cfg`` selects, each built with its config section (``cfg.sections``;
        a config made by hand without the section gets the section's YAML defaults)."""
        out = []
        for name in selected(cfg):
            out.append(transform_class(name)(_section(cfg, name), name))
        return cls(out)

    def __bool__(self) -> bool:
        return bool(self.transforms)

    def setup(self, trainer: Trainer) -> None:
        for t in self.transforms:
            t.setup(trainer)

    def on_rollout(self, trainer: Trainer, rollout: Dict[str, Any]) -> None:
        for t in self.transforms:
            t.on_rollout(trainer, rollout)

    def on_episodes(self, trainer: Trainer, episodes: Episodes) -> None:
        for t in self.transforms:
            t.on_episodes(trainer, episodes)

    def on_batch(self, trainer: Trainer, batch: Any) -> None:
        for t in self.transforms:
            t.on_batch(trainer, batch)

    def state_dict(self) -> Dict[str, Any]:
        """Transform name -> its state."""
        return {t.name: t.state_dict() for t in self.transforms}

    def load_state_dict(self, trainer_state: Mapping[str, Any]) -> None:
        """Restore from a trainer's checkpoint state: its ``marl_transforms`` entry, or for a
        checkpoint of an older version a transform's ``legacy_state_key`` entry."""
        saved = trainer_state.get(STATE_KEY)
        for t in self.transforms:
            if saved is not None:
                if t.name in saved:
                    t.load_state_dict(saved[t.name])
            elif t.legacy_state_key and t.legacy_state_key in trainer_state:
                t.load_state_dict(trainer_state[t.legacy_state_key])


def _section(cfg: Any, name: str) -> Any:
    """Transform ``name``'s config section in ``cfg`` (None if it registered no schema)."""
    if _TRANSFORMS[name].config is None:
        return None
    sections = getattr(cfg, "sections", None) or {}
    if name in sections:
        return sections[name]
    from marl.config.loader import build_section

    return build_section(name, cfg.algo, [])
