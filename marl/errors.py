"""marl's user-facing errors and the helpers that word them.

Every module of marl may import this one; it imports nothing of marl.
"""

from __future__ import annotations

import difflib
import importlib
import sys
import warnings
from types import ModuleType
from typing import Any, Dict, Optional, Sequence


class MarlError(ValueError):
    """Base class of marl's user-facing errors (bad names, bad config, bad input)."""


class EnvRunnersLost(MarlError):
    """Every remote env runner is lost and none can be restarted (``docs/engine.md``, "Fault tolerance")."""


class ConfigWarning(UserWarning):
    """Config values that work together but probably not as meant (``docs/configuration.md``,
    "Checks across keys"); the message names the keys, their values and what happens."""


class MarlDeprecationWarning(DeprecationWarning):
    """A keyword or name of marl that still works but has a new name; the message names the new one.

    Python hides ``DeprecationWarning`` outside ``__main__`` by default; marl's own are shown once per
    call site (the filter below, installed when marl is imported), wherever the call is. The
    third-party filters of :mod:`marl.noise` match other modules and messages, never this category.
    Silence them with ``warnings.filterwarnings("ignore", category=marl.errors.MarlDeprecationWarning)``.
    """


# shown once per call site even outside __main__ (a user's module, a notebook cell's import)
warnings.filterwarnings("default", category=MarlDeprecationWarning)


def _caller_stacklevel() -> int:
    """The ``stacklevel`` of the first frame outside marl (the user's call), counted from the caller of
    :func:`renamed_keyword`'s ``warnings.warn``: the warning then points at the user's line."""
    level, frame = 1, sys._getframe(1)
    while frame is not None and str(frame.f_globals.get("__name__", "")).split(".")[0] == "marl":
        frame, level = frame.f_back, level + 1  # type: ignore[assignment]
    return level


def renamed_keyword(kwargs: Dict[str, Any], old: str, new: str, where: str) -> None:
    """Accept the deprecated keyword ``old`` as ``new`` in ``kwargs`` (changed in place).

    ``old`` alone moves to ``new`` with a :class:`MarlDeprecationWarning` naming ``new``.

    Raises:
        MarlError: both ``old`` and ``new`` given (the message names both and the one to keep).
    """
    if old not in kwargs:
        return
    if new in kwargs:
        raise MarlError(
            f"{where}: got both {new}={kwargs[new]!r} and {old}={kwargs[old]!r}; {old} is the old name of "
            f"{new} (deprecated). Pass only {new}=."
        )
    warnings.warn(
        f"{where}: {old}= is deprecated, use {new}= (same meaning): {new}={kwargs[old]!r}.",
        MarlDeprecationWarning,
        stacklevel=_caller_stacklevel(),
    )
    kwargs[new] = kwargs.pop(old)


class TrainingDiverged(FloatingPointError):
    """A loss became NaN or infinite; the message names the loss and the module."""


class RunInterrupted(KeyboardInterrupt):
    """``fit`` was stopped by Ctrl-C (SIGINT) or SIGTERM (docs/index.md, "Run folders").

    A first signal lets the current iteration finish and saves a checkpoint; a
    second aborts at once (``aborted``: nothing of the running iteration is saved).

    Attributes:
        checkpoint: the checkpoint to resume from (saved at the stop, or the last one
            before an abort; ``None`` if there is none).
        run_dir: the run folder.
        signal: ``"SIGINT"`` or ``"SIGTERM"``.
        aborted: a second signal cut the iteration short.
        resume_call: the Python call that continues the run (set by ``fit``).
    """

    def __init__(self, message: str, *, checkpoint: Optional[str], run_dir: str, signal: str, aborted: bool):
        super().__init__(message)
        self.message, self.checkpoint, self.run_dir = message, checkpoint, run_dir
        self.signal, self.aborted = signal, aborted
        self.resume_call: Optional[str] = None

    def __str__(self) -> str:
        hint = f" Resume with: {self.resume_call}" if self.resume_call and self.checkpoint else ""
        return self.message + hint


def closest(name: Any, choices: Sequence[Any]) -> str:
    """Return ``" Did you mean 'x'?"`` for the closest of ``choices``, or ``""``."""
    match = difflib.get_close_matches(str(name), [str(c) for c in choices], n=1, cutoff=0.5)
    return f" Did you mean '{match[0]}'?" if match else ""


def unknown_choice(what: str, name: Any, choices: Sequence[Any]) -> MarlError:
    """Build the error for an unknown name: it lists the valid choices and the closest."""
    return MarlError(
        f"Unknown {what} '{name}'.{closest(name, choices)} Valid choices: {', '.join(sorted(map(str, choices)))}."
    )


def optional_import(module: str, message: str) -> ModuleType:
    """Import the optional package ``module``; if it is missing, raise :class:`MarlError` with
    ``message`` (which should give the pip command), chained to the ``ImportError``."""
    try:
        return importlib.import_module(module)
    except ImportError as e:
        raise MarlError(message) from e
