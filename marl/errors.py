"""marl's user-facing errors and the helpers that word them.

Every module of marl may import this one; it imports nothing of marl.
"""

from __future__ import annotations

import difflib
import importlib
from types import ModuleType
from typing import Any, Optional, Sequence


class MarlError(ValueError):
    """Base class of marl's user-facing errors (bad names, bad config, bad input)."""


class EnvRunnersLost(MarlError):
    """Every remote env runner is lost and none can be restarted (``docs/engine.md``, "Fault tolerance")."""


class ConfigWarning(UserWarning):
    """Config values that work together but probably not as meant (``docs/configuration.md``,
    "Checks across keys"); the message names the keys, their values and what happens."""


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
