"""Third-party notices that say nothing to a marl user, filtered in one place.

A first run should print only what marl says. Ray, RLlib, JAX and transformers print
notices on every run that are about their own internals, not about the user's run;
each one filtered here is matched by its logger (or warning category and module) and
by the exact wording of its message, so any other message of the same library,
a warning about a real problem included, still shows. The notices and why each is safe
to drop are in :data:`NOTICES`.

:func:`quiet_third_party` installs the filters; ``fit``, ``start_ray`` and the ``marl``
command call it, and Ray workers that marl starts run it through Ray's
``worker_process_setup_hook`` (:func:`worker_setup_hook`). Set the environment
variable ``MARL_SHOW_THIRD_PARTY_WARNINGS=1`` to see every notice again.
"""

from __future__ import annotations

import logging
import os
import re
import warnings
from typing import NamedTuple, Optional, Type

__all__ = ["NOTICES", "SHOW_ENV", "Notice", "quiet_third_party", "worker_setup_hook", "showing_all"]

SHOW_ENV = "MARL_SHOW_THIRD_PARTY_WARNINGS"


class Notice(NamedTuple):
    """One third-party notice: where it comes from, its exact wording and why marl drops it.

    Attributes:
        source: the logger that logs it, or (``category`` set) the module regex a
            ``warnings.warn`` of it is attributed to.
        pattern: regex matched at the start of the message.
        why: the reason it tells a marl user nothing.
        category: the ``Warning`` class for a ``warnings.warn``; None for a logging record.
    """

    source: str
    pattern: str
    why: str
    category: Optional[Type[Warning]] = None


NOTICES = (
    Notice(
        "ray._private.authentication.authentication_token_setup",
        r"Token authentication is enabled for this Ray cluster\. Set RAY_AUTH_MODE=disabled to opt out\.",
        "marl keeps Ray's token authentication on for the local cluster it starts (marl.api.start_ray)",
    ),
    Notice(
        "ray.rllib.algorithms.algorithm_config",
        r"You are running \w+ on the new API stack! This is the new default behavior for this algorithm\.",
        "marl runs every algorithm on RLlib's new API stack by design",
    ),
    Notice(
        "ray._common.deprecation",
        r"DeprecationWarning: `RLModule\(config=\[RLModuleConfig object\]\)` has been deprecated\.",
        "RLlib's own RLModule.__init__ builds the deprecated RLModuleConfig for every module",
    ),
    Notice(
        "ray.tune.utils.util",
        r"Install gputil for GPU system monitoring\.$",
        "RLlib's optional GPU usage monitor; marl does not read it",
    ),
    Notice(
        r"subprocess\Z",
        r"os\.fork\(\) was called\. os\.fork\(\) is incompatible with multithreaded code, and JAX is multithreaded",
        "JAX warns at every fork, but subprocess (Ray starting its processes) forks and execs at once, "
        "which runs no JAX code in the child; an os.fork elsewhere still warns",
        RuntimeWarning,
    ),
)


def showing_all() -> bool:
    """True when ``MARL_SHOW_THIRD_PARTY_WARNINGS`` is set to anything but ``""``, ``0`` or ``false``."""
    return os.environ.get(SHOW_ENV, "").strip().lower() not in ("", "0", "false", "no")


class _DropNotice(logging.Filter):
    """Drops the records of one logger whose message matches ``pattern`` from its start."""

    def __init__(self, pattern: str):
        super().__init__()
        self.pattern = re.compile(pattern)

    def filter(self, record: logging.LogRecord) -> bool:
        return not self.pattern.match(record.getMessage())


def quiet_third_party() -> bool:
    """Install the filters of :data:`NOTICES` in this process (once; calling again adds nothing).

    Logging records are dropped by a filter on their own logger; warnings by a
    ``warnings.filterwarnings("ignore", message, category, module)`` entry.
    Returns False, installing nothing, when ``MARL_SHOW_THIRD_PARTY_WARNINGS=1``.
    """
    if showing_all():
        return False
    for n in NOTICES:
        if n.category is not None:
            warnings.filterwarnings("ignore", message=n.pattern, category=n.category, module=n.source)
            continue
        log = logging.getLogger(n.source)
        if not any(isinstance(f, _DropNotice) and f.pattern.pattern == n.pattern for f in log.filters):
            log.addFilter(_DropNotice(n.pattern))
    return True


def worker_setup_hook() -> None:
    """Ray's ``worker_process_setup_hook`` for the workers of a cluster marl starts: the same filters there."""
    quiet_third_party()
