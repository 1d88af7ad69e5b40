"""Command-line values (``key=value``) and ``stop`` criteria."""

from __future__ import annotations

import math
import numbers
from typing import Any, Dict, List, Mapping

import yaml

from marl.errors import MarlError, unknown_choice

STOP_KEYS = ("env_steps", "iterations", "time_s", "episode_return_mean")
BOUNDS = ("env_steps", "iterations", "time_s")  # the criteria that are reached for sure


def parse_value(text: str) -> Any:
    """Parse a command-line value with YAML rules (``1e-3``, ``true``, ``[64, 64]``)."""
    try:
        value = yaml.safe_load(text)
    except yaml.YAMLError:
        return text
    if isinstance(value, str):  # YAML 1.1 reads "7e-4" and "1e6" as strings
        try:
            return float(value)
        except ValueError:
            return value
    return value


def parse_cli_overrides(items: List[str]) -> Dict[str, Any]:
    """``["lr=1e-3", "stop.env_steps=1e5"]`` -> ``{"lr": 0.001, "stop": {"env_steps": 100000.0}}``.

    Raises:
        MarlError: an item without ``=``.
    """
    out: Dict[str, Any] = {}
    for item in items:
        if "=" not in item:
            raise MarlError(f"Expected key=value, got '{item}'.")
        key, _, text = item.partition("=")
        value = parse_value(text)
        if "." in key:
            head, _, tail = key.partition(".")
            out.setdefault(head, {})[tail] = value
        else:
            out[key] = value
    return out


def validate_stop(stop: Any) -> Dict[str, float]:
    """Check a ``stop`` dict: keys from :data:`STOP_KEYS`, finite numbers (the first reached ends the run).

    At least one of the bounds ``env_steps``, ``iterations``, ``time_s`` must be given
    (positive): ``episode_return_mean`` alone may never be reached, and ``{}`` never ends.

    Raises:
        MarlError: ``stop`` is not a dict, has no bound, an unknown criterion (with the
            closest), a value that is not a finite number, or a bound that is not positive.
    """
    if not isinstance(stop, Mapping):
        raise MarlError(
            f"stop expects a dict of criteria such as {{'env_steps': 1000000}} (on the command line "
            f"stop.<criterion>=N, e.g. stop.env_steps=1e6), got {stop!r}. Criteria: {', '.join(STOP_KEYS)}."
        )
    stop = dict(stop)
    for k, v in stop.items():
        if k not in STOP_KEYS:
            raise unknown_choice("stop criterion", k, STOP_KEYS)
        if isinstance(v, bool) or not isinstance(v, numbers.Real) or not math.isfinite(v):
            raise MarlError(f"Stop criterion '{k}' expects a finite number, got {v!r}.")
        if k != "episode_return_mean" and v <= 0:
            raise MarlError(f"Stop criterion '{k}' must be positive, got {v!r}.")
    if not set(stop) & set(BOUNDS):
        given = f"stop={stop!r} has no bound" if stop else "stop={} has no criterion"
        raise MarlError(
            f"{given}, so the run might never end: give at least one of {', '.join(BOUNDS)} "
            f"(e.g. stop={{'env_steps': 1000000}}), or leave stop out for the default."
        )
    return stop
