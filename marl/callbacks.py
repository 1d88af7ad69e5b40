"""Callbacks: code that runs at fixed points of a training run, without changing the trainer.

In the spirit of SB3's ``BaseCallback`` and BenchMARL's ``Callback``: subclass
:class:`Callback`, override the hooks you need and pass instances to
``fit(..., callbacks=[...])``. Envs contribute callbacks of their own through
:meth:`marl.env.MultiAgentEnv.callbacks` (the crash wrapper's coach is one), so
research features plug into any algorithm without code in the trainer.

Hooks run in the driver process, in this order::

    on_fit_start(trainer)                         once, after the trainer is built (and restored)
    per iteration:
        on_rollout(trainer, rollout)              after every sampling call, before learning
        on_iteration_end(trainer, metrics)        -> extra metrics to log (or None)
        on_checkpoint_save(trainer, path)         after a checkpoint is written
    on_fit_end(trainer, result)                   after the last iteration and checkpoint
    on_evaluate(result, metrics)                  after a greedy evaluation (Result.evaluate)

``state_dict`` / ``load_state_dict`` carry a callback's own state through
checkpoints: what :meth:`Callback.state_dict` returns is saved in every
checkpoint and handed back on resume before :meth:`Callback.on_checkpoint_restore`.

Beside the callbacks, batch transforms (:mod:`marl.transforms`) change what the learner
trains on: a :class:`~marl.transforms.BatchTransform` rewrites each rollout right after
the callbacks' ``on_rollout`` (``on_rollout``), the whole episodes a replay buffer commits
(``on_episodes``) and the batch of every learner update (``on_batch``). A transform is
chosen by config (``reward_redistribution="legem"``) with its keys in a section of its
own (``legem={"beta": 0.2}``), is checked before Ray starts, and saves its state in
checkpoints like a callback; reward redistribution for off-beat actions is one.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Dict, Iterable, List, Optional

from marl.errors import MarlError  # imports nothing of marl: this module still sits below the engine

if TYPE_CHECKING:  # for the annotations only: this module imports no other module of marl (it sits below the engine)
    from marl.engine.trainer import Trainer


class Callback:
    """Base class of run callbacks; every hook does nothing by default.

    Attributes:
        name: key of this callback's state in checkpoints (default: the class name);
            two callbacks of one run must not share it.
    """

    @property
    def name(self) -> str:
        return type(self).__name__

    def on_fit_start(self, trainer: Trainer) -> None:
        """The trainer is built (and, on resume, restored); nothing has been sampled yet."""

    def on_rollout(self, trainer: Trainer, rollout: Dict[str, Any]) -> None:
        """A rollout was sampled (time-major tensors, see ``BatchedEnvRunner.sample``; text
        games: turns). ``rollout["metrics"]`` holds per-episode lists of the episodes that
        ended in it. A callback may rewrite rewards here before the learner sees them; a
        configurable, checkpointed rewrite is a batch transform (:mod:`marl.transforms`)."""

    def on_iteration_end(self, trainer: Trainer, metrics: Dict[str, Any]) -> Optional[Dict[str, float]]:
        """An iteration ended with ``metrics`` (flat floats); return extra metrics to log, or None."""
        return None

    def on_checkpoint_save(self, trainer: Trainer, path: Path) -> None:
        """A checkpoint was written to ``path`` (it already holds :meth:`state_dict`)."""

    def on_checkpoint_restore(self, trainer: Trainer) -> None:
        """The trainer was restored from a checkpoint; :meth:`load_state_dict` has run."""

    def on_fit_end(self, trainer: Trainer, result: Any) -> None:
        """Training ended; ``result`` is the :class:`~marl.results.Result` (before its evaluation)."""

    def on_evaluate(self, result: Any, metrics: Dict[str, float]) -> None:
        """A greedy evaluation of ``result`` gave ``metrics``."""

    def state_dict(self) -> Dict[str, Any]:
        """State to save in checkpoints (picklable); empty by default."""
        return {}

    def load_state_dict(self, state: Dict[str, Any]) -> None:
        """Restore what :meth:`state_dict` returned."""


def named_list(items: Iterable[Any], base: type, what: str) -> List[Any]:
    """``items`` as a list, each an instance of ``base`` with a ``name`` no other shares (the key
    of its state in checkpoints; also used for :class:`marl.transforms.TransformList`).

    Raises:
        TypeError: an element is not a ``base`` instance.
        ValueError: two elements share a ``name`` (their checkpoint state would collide).
    """
    items = list(items)
    for x in items:
        if not isinstance(x, base):
            raise TypeError(f"{what} must be {base.__module__}.{base.__name__} instances, got {type(x).__name__}.")
    names = [x.name for x in items]
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        raise ValueError(f"two {what} share the name {dup[0]!r}; give one a distinct `name`.")
    return items


def check_callbacks(callbacks: Any) -> List[Callback]:
    """``fit``'s ``callbacks`` argument as a list of :class:`Callback` instances (``None``: none).

    Raises:
        MarlError: ``callbacks`` is not a list or tuple (a single callback, a string, a dict), an
            element is a :class:`Callback` class instead of an instance, or is not a
            :class:`Callback` at all (each names the value), or two share a ``name``.
    """
    if callbacks is None:
        return []
    if not isinstance(callbacks, (list, tuple)):
        cls = callbacks if isinstance(callbacks, type) else type(callbacks)
        hint = f" (one callback: callbacks=[{cls.__name__}()])" if issubclass(cls, Callback) else ""
        raise MarlError(
            f"callbacks takes a list of marl.callbacks.Callback instances, got {_shown(callbacks)} "
            f"({type(callbacks).__name__}){hint}."
        )
    for i, cb in enumerate(callbacks):
        if isinstance(cb, type) and issubclass(cb, Callback):
            raise MarlError(f"callbacks[{i}] is the class {cb.__name__}, not an instance: pass {cb.__name__}().")
        if not isinstance(cb, Callback):
            raise MarlError(
                f"callbacks[{i}] is {_shown(cb)} ({type(cb).__name__}), not a marl.callbacks.Callback: subclass "
                f"Callback and override the hooks you need (docs: marl/callbacks.py)."
            )
    try:
        return named_list(callbacks, Callback, "callbacks")
    except ValueError as e:  # two share a name
        raise MarlError(str(e)) from None


def _shown(value: Any) -> str:
    """A value for a message: its repr, cut to 80 characters; a class by its name, a callback as ``Name()``."""
    text = value.__name__ if isinstance(value, type) else repr(value)
    if isinstance(value, Callback):
        text = f"{type(value).__name__}()"
    return text if len(text) <= 80 else text[:77] + "..."


class CallbackList(Callback):
    """Several callbacks called in order; metrics returned by ``on_iteration_end`` are merged.

    Raises:
        TypeError: an element is not a :class:`Callback`.
        ValueError: two callbacks share a ``name`` (their checkpoint state would collide).
    """

    def __init__(self, callbacks: Iterable[Callback] = ()):
        self.callbacks: List[Callback] = named_list(callbacks, Callback, "callbacks")

    def on_fit_start(self, trainer: Trainer) -> None:
        for cb in self.callbacks:
            cb.on_fit_start(trainer)

    def on_rollout(self, trainer: Trainer, rollout: Dict[str, Any]) -> None:
        for cb in self.callbacks:
            cb.on_rollout(trainer, rollout)

    def on_iteration_end(self, trainer: Trainer, metrics: Dict[str, Any]) -> Dict[str, float]:
        extra: Dict[str, float] = {}
        for cb in self.callbacks:
            extra.update(cb.on_iteration_end(trainer, {**metrics, **extra}) or {})
        return extra

    def on_checkpoint_save(self, trainer: Trainer, path: Path) -> None:
        for cb in self.callbacks:
            cb.on_checkpoint_save(trainer, path)

    def on_checkpoint_restore(self, trainer: Trainer) -> None:
        for cb in self.callbacks:
            cb.on_checkpoint_restore(trainer)

    def on_fit_end(self, trainer: Trainer, result: Any) -> None:
        for cb in self.callbacks:
            cb.on_fit_end(trainer, result)

    def on_evaluate(self, result: Any, metrics: Dict[str, float]) -> None:
        for cb in self.callbacks:
            cb.on_evaluate(result, metrics)

    def state_dict(self) -> Dict[str, Any]:
        return {cb.name: cb.state_dict() for cb in self.callbacks}

    def load_state_dict(self, state: Dict[str, Any]) -> None:
        for cb in self.callbacks:
            if cb.name in state:
                cb.load_state_dict(state[cb.name])
