"""Algorithm registry: name -> trainer class (a ``"module:Class"`` string, imported on first use).

Algorithms register themselves where they live (``algos/__init__.py`` for marl's
own, a plugin package's ``__init__`` for others, found through the
``marl.plugins`` entry points)::

    register_algo("mappo", trainer="marl.algos.ppo:PPO", description="Multi-agent PPO ...")

The trainer class names its config schema in ``config_class`` (a subclass of
:class:`~marl.config.schema.ConfigBase`). Listing the algorithms imports no
algorithm module and no Ray.
"""
from __future__ import annotations

import importlib
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Optional

from marl.config.schema import ConfigBase, spec_map
from marl.errors import MarlError, unknown_choice
from marl.plugins import load_plugins


@dataclass(frozen=True)
class AlgoEntry:
    """One registered algorithm."""

    name: str
    trainer: str  # "module:Class" of its Trainer
    description: str
    defaults: Optional[str]  # YAML file of its values; None = configs/algos/<name>.yaml


_ALGOS: Dict[str, AlgoEntry] = {}


def register_algo(name: str, trainer: str, description: str = "", defaults: Optional[str] = None) -> None:
    """Register an algorithm under ``name`` (registering a name again replaces it).

    Args:
        name: what users pass to ``fit(env, name)`` and ``marl train algo=name``.
        trainer: ``"module:Class"`` of its :class:`~marl.engine.trainer.Trainer`
            subclass, imported when the algorithm is first used.
        description: one line for ``marl list``.
        defaults: path of the YAML file with its values (and ``base: <algo>``);
            default ``configs/algos/<name>.yaml`` of marl.
    Raises:
        MarlError: ``trainer`` is not a ``"module:Class"`` string.
    """
    if not isinstance(trainer, str) or ":" not in trainer:
        raise MarlError(f"register_algo('{name}'): trainer must be a 'module:Class' string, got {trainer!r}.")
    _ALGOS[name] = AlgoEntry(name, trainer, description, str(defaults) if defaults is not None else None)


def list_algos() -> Dict[str, str]:
    """Algorithm name -> one-line description, sorted by name (imports no algorithm module)."""
    load_plugins()
    return {name: _ALGOS[name].description for name in sorted(_ALGOS)}


def algo_entry(name: str) -> AlgoEntry:
    """The registry entry of ``name``.

    Raises:
        MarlError: unknown algorithm (lists the valid names and the closest).
    """
    load_plugins()
    if name not in _ALGOS:
        raise unknown_choice("algorithm", name, sorted(_ALGOS))
    return _ALGOS[name]


def builtin_algos() -> List[str]:
    """Names of marl's own algorithms (trainers under ``marl.algos``), in registration order."""
    load_plugins()
    return [n for n, e in _ALGOS.items() if e.trainer.startswith("marl.algos.")]


def trainer_class(name: str) -> type:
    """Import and return the trainer class of algorithm ``name``."""
    module, _, attr = algo_entry(name).trainer.partition(":")
    return getattr(importlib.import_module(module), attr)


def config_class(name: str) -> type:
    """The config schema (``config_class`` of its trainer) of algorithm ``name``.

    Raises:
        MarlError: the trainer declares no ``config_class`` deriving from ConfigBase.
    """
    trainer = trainer_class(name)
    cls = getattr(trainer, "config_class", None)
    if not (isinstance(cls, type) and issubclass(cls, ConfigBase)):
        raise MarlError(f"Algorithm '{name}': {trainer.__name__}.config_class must be a marl.config.ConfigBase "
                        f"dataclass, got {cls!r}.")
    return cls


def defaults_path(name: str, config_dir: Path) -> Path:
    """The YAML file of algorithm ``name``'s values."""
    entry = algo_entry(name)
    return Path(entry.defaults) if entry.defaults else config_dir / "algos" / f"{name}.yaml"


def owners(name: str, exclude: str, value: object = None) -> Dict[str, List[str]]:
    """Which other algorithms have config key ``name``: layer -> algorithm names.

    With ``value``, only those where ``value`` is one of the key's choices.
    Algorithms whose module fails to import are skipped (this only words an error).
    """
    out: Dict[str, List[str]] = {}
    for algo in list_algos():
        if algo == exclude:
            continue
        try:
            spec = spec_map(config_class(algo)).get(name)
        except Exception:  # noqa: BLE001 - a broken plugin must not hide the user's error
            continue
        if spec is None or spec.internal or (value is not None and value not in (spec.choices or ())):
            continue
        out.setdefault(spec.layer, []).append(algo)
    return out


def ownership_hint(name: str, algo: str, value: object = None) -> str:
    """``" 'mixer' is a value decomposition key (iql, qmix, vdn); mappo does not use it."`` or ``""``;
    with ``value``: ``" 'twin' is a toy choice of 'critic' (toy); mappo does not offer it."``."""
    found = owners(name, algo, value)
    if not found:
        return ""
    what = "key" if value is None else f"choice of '{name}'"
    where = " and ".join(f"{_article(layer)} {layer} {what} ({', '.join(algos)})" for layer, algos in found.items())
    if value is None:
        return f" '{name}' is {where}; {algo} does not use it."
    return f" {value!r} is {where}; {algo} does not offer it."


def _article(word: str) -> str:
    """'an' before a vowel sound ("an agent", "an LLM"), else 'a'."""
    acronym = word[:2].isupper()
    return "an" if word[0].lower() in "aeiou" or (acronym and word[0] in "AEFHILMNORSX") else "a"
