"""Configuration: YAML defaults + overrides, validated.

Layers, later wins: ``configs/engine.yaml`` (engine), ``configs/algos/<algo>.yaml``
(algorithm, with the source of each default), ``configs/envs/<family>.yaml``
(sections ``all`` and ``<algo>``), then the user's keyword or ``key=value``
overrides. An unknown key is an error listing the valid keys and the closest
match; a value of the wrong type is an error naming the key and the expected type.
"""
from __future__ import annotations

from importlib import resources
from pathlib import Path
from typing import Any, Dict, List, Optional

import yaml

from marl.env import MarlError, closest, unknown_choice

STOP_KEYS = ("env_steps", "iterations", "time_s", "episode_return_mean")
META_KEYS = ("class", "description", "base")


def config_dir() -> Path:
    """Folder of the installed YAML defaults (``marl.configs``)."""
    return Path(str(resources.files("marl.configs")))


def _read(path: Path) -> Dict[str, Any]:
    with open(path) as f:
        return yaml.safe_load(f) or {}


def list_algos() -> Dict[str, str]:
    """Algorithm name -> one-line description, from ``configs/algos/*.yaml``."""
    out = {}
    for p in sorted((config_dir() / "algos").glob("*.yaml")):
        out[p.stem] = _read(p).get("description", "")
    return out


def algo_defaults(algo: str) -> Dict[str, Any]:
    """Engine defaults merged with ``configs/algos/<algo>.yaml``.

    Raises:
        MarlError: unknown algorithm (lists the valid names and the closest).
    """
    algos = list_algos()
    if algo not in algos:
        raise unknown_choice("algorithm", algo, list(algos))
    cfg = _read(config_dir() / "engine.yaml")
    cfg.update(_algo_file(algo))
    cfg["algo"] = algo
    return cfg


def _algo_file(algo: str, seen: tuple = ()) -> Dict[str, Any]:
    """``configs/algos/<algo>.yaml`` on top of the file its ``base:`` key names (e.g. vdn on qmix)."""
    data = _read(config_dir() / "algos" / f"{algo}.yaml")
    base = data.pop("base", None)
    if base is None:
        return data
    if base in seen + (algo,):
        raise MarlError(f"configs/algos/{algo}.yaml: 'base: {base}' makes a cycle")
    return {**_algo_file(base, seen + (algo,)), **data}


def env_overrides(family: str, algo: str) -> Dict[str, Any]:
    path = config_dir() / "envs" / f"{family}.yaml"
    if not path.exists():
        return {}
    data = _read(path)
    return {**(data.get("all") or {}), **(data.get(algo) or {})}


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


def _check_type(key: str, value: Any, default: Any) -> Any:
    if default is None or value is None:
        return value
    if isinstance(default, bool):
        if isinstance(value, bool):
            return value
        raise MarlError(f"Config key '{key}' expects true/false, got {value!r}.")
    if isinstance(default, (int, float)) and not isinstance(default, bool):
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise MarlError(f"Config key '{key}' expects a number, got {value!r}.")
        if isinstance(default, int) and isinstance(value, float) and not value.is_integer():
            raise MarlError(f"Config key '{key}' expects a whole number, got {value!r}.")
        return type(default)(value)
    if isinstance(default, str) and not isinstance(value, str):
        raise MarlError(f"Config key '{key}' expects a string, got {value!r}.")
    return value


def validate_stop(stop: Optional[Dict[str, Any]]) -> Dict[str, float]:
    """Check a ``stop`` dict: keys from :data:`STOP_KEYS`, positive numbers (any reached ends the run)."""
    stop = dict(stop or {})
    for k, v in stop.items():
        if k not in STOP_KEYS:
            raise unknown_choice("stop criterion", k, STOP_KEYS)
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            raise MarlError(f"Stop criterion '{k}' expects a number, got {v!r}.")
        if k != "episode_return_mean" and v <= 0:
            raise MarlError(f"Stop criterion '{k}' must be positive, got {v!r}.")
    return stop


def load_config(algo: str, family: str, overrides: Optional[Dict[str, Any]] = None) -> Dict[str, Any]:
    """Merged, validated configuration of ``algo`` on an env ``family``.

    Raises:
        MarlError: unknown algorithm, unknown key (with the closest valid key)
            or a value of the wrong type.
    """
    cfg = algo_defaults(algo)
    cfg.update(env_overrides(family, algo))
    valid = [k for k in cfg if k not in META_KEYS + ("algo",)]
    for key, value in (overrides or {}).items():
        if key not in valid:
            raise MarlError(
                f"Unknown config key '{key}' for algorithm '{algo}'.{closest(key, valid)} "
                f"Valid keys: {', '.join(sorted(valid))}."
            )
        if key == "share" and callable(value):
            cfg[key] = value
            continue
        cfg[key] = _check_type(key, value, cfg[key])
    _check_ranges(cfg)
    return cfg


LR_SCHEDULES = ("constant", "linear")


def _check_ranges(cfg: Dict[str, Any]) -> None:
    if cfg.get("lr_schedule", "constant") not in LR_SCHEDULES:
        raise unknown_choice("lr_schedule", cfg["lr_schedule"], LR_SCHEDULES)
    for key in ("rollout_length", "epochs", "num_minibatches", "hidden"):
        if key in cfg and int(cfg[key]) < 1:
            raise MarlError(f"Config key '{key}' must be >= 1, got {cfg[key]!r}.")
    for key in ("num_env_runners", "num_learners"):
        if int(cfg[key]) < 0:
            raise MarlError(f"Config key '{key}' must be >= 0, got {cfg[key]!r}.")


def parse_cli_overrides(items: List[str]) -> Dict[str, Any]:
    """``["lr=1e-3", "stop.env_steps=1e5"]`` -> ``{"lr": 0.001, "stop": {"env_steps": 100000.0}}``."""
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
