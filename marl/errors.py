"""marl's user-facing errors and the helpers that word them.

Every module of marl may import this one; it imports nothing of marl.
"""
from __future__ import annotations

import difflib
from typing import Any, Sequence


class MarlError(ValueError):
    """Base class of marl's user-facing errors (bad names, bad config, bad input)."""


class EnvRunnersLost(MarlError):
    """Every remote env runner is lost and none can be restarted (``docs/engine.md``, "Fault tolerance")."""


class TrainingDiverged(FloatingPointError):
    """A loss became NaN or infinite; the message names the loss and the module."""


def closest(name: Any, choices: Sequence[Any]) -> str:
    """Return ``" Did you mean 'x'?"`` for the closest of ``choices``, or ``""``."""
    match = difflib.get_close_matches(str(name), [str(c) for c in choices], n=1, cutoff=0.5)
    return f" Did you mean '{match[0]}'?" if match else ""


def unknown_choice(what: str, name: Any, choices: Sequence[Any]) -> MarlError:
    """Build the error for an unknown name: it lists the valid choices and the closest."""
    return MarlError(
        f"Unknown {what} '{name}'.{closest(name, choices)} "
        f"Valid choices: {', '.join(sorted(map(str, choices)))}."
    )
