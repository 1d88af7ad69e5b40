"""Command-line values (``key=value``) and ``stop`` criteria."""
from __future__ import annotations

from typing import Any, Dict, List, Optional

import yaml

from marl.errors import MarlError, unknown_choice

STOP_KEYS = ("env_steps", "iterations", "time_s", "episode_return_mean")


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


def validate_stop(stop: Optional[Dict[str, Any]]) -> Dict[str, float]:
    """Check a ``stop`` dict: keys from :data:`STOP_KEYS`, positive numbers (any reached ends the run).

    Raises:
        MarlError: an unknown criterion (with the closest), a value that is not a number,
            or a count that is not positive.
    """
    stop = dict(stop or {})
    for k, v in stop.items():
        if k not in STOP_KEYS:
            raise unknown_choice("stop criterion", k, STOP_KEYS)
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            raise MarlError(f"Stop criterion '{k}' expects a number, got {v!r}.")
        if k != "episode_return_mean" and v <= 0:
            raise MarlError(f"Stop criterion '{k}' must be positive, got {v!r}.")
    return stop
