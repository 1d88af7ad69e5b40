"""Algorithm registry: name -> trainer class and config schema (``"module:attribute"`` strings).

Algorithms register themselves where they live (``algos/__init__.py`` for marl's
own, a plugin package's ``__init__`` for others, found through the
``marl.plugins`` entry points)::

    register_algo("mappo", trainer="marl.algos.ppo:PPO", schema="marl.algos.ppo_config:PPOConfig",
                  description="Multi-agent PPO ...")

The schema (a subclass of :class:`~marl.config.schema.ConfigBase`) lives in a module
that imports neither torch nor Ray, so listing the algorithms, loading and checking a
config and ``marl train --help`` import neither; the trainer (and with it RLlib and
torch) is imported when the algorithm is built.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Tuple, Type

from marl.config.schema import ConfigBase, spec_map
from marl.errors import MarlError, unknown_choice
from marl.plugins import load_plugins, load_target


@dataclass(frozen=True)
class AlgoEntry:
    """One registered algorithm."""

    name: str
    trainer: str  # "module:Class" of its Trainer
    description: str
    defaults: Optional[str]  # YAML file of its values; None = configs/algos/<name>.yaml
    schema: Optional[str] = None  # "module:Class" of its config schema; None = the trainer's config_class
    variants: Tuple[Tuple[str, str], ...] = ()  # (env kind, algorithm that serves it under this name)


_ALGOS: Dict[str, AlgoEntry] = {}
ENV_KINDS = ("tensor", "text")  # a MultiAgentEnv (batched tensors) or a TextEnv (text games)


def register_algo(
    name: str,
    trainer: str,
    description: str = "",
    defaults: Optional[str] = None,
    *,
    schema: Optional[str] = None,
    variants: Optional[Mapping[str, str]] = None,
) -> None:
    """Register an algorithm under ``name`` (registering a name again replaces it).

    Args:
        name: what users pass to ``fit(env, name)`` and ``marl train algo=name``.
        trainer: ``"module:Class"`` of its :class:`~marl.engine.trainer.Trainer`
            subclass, imported when the algorithm is first built.
        description: one line for ``marl list``.
        defaults: path of the YAML file with its values (and ``base: <algo>``);
            default ``configs/algos/<name>.yaml`` of marl.
        schema: ``"module:Class"`` of its config schema (the trainer's ``config_class``),
            in a module that imports neither torch nor Ray: configs are then loaded and
            checked without importing the trainer. ``None``: the trainer's ``config_class``
            (importing the trainer module to check a config).
        variants: env kind (``"tensor"`` or ``"text"``, :data:`ENV_KINDS`) -> the registered algorithm
            that ``fit(env, name)`` runs on envs of that kind (:func:`resolve_algo`): one name for one
            method whose tensor and text implementations differ (``advantage_alignment``).
    Raises:
        MarlError: ``trainer`` or ``schema`` is not a ``"module:Class"`` string; a variant of an
            unknown env kind.
    """
    for kind in variants or {}:
        if kind not in ENV_KINDS:
            raise unknown_choice(f"env kind of register_algo('{name}', variants=...)", kind, ENV_KINDS)
    for what, target in (("trainer", trainer), ("schema", schema)):
        if target is not None and not (isinstance(target, str) and ":" in target):
            raise MarlError(f"register_algo('{name}'): {what} must be a 'module:Class' string, got {target!r}.")
    path = str(defaults) if defaults is not None else None
    _ALGOS[name] = AlgoEntry(name, trainer, description, path, schema, tuple(dict(variants or {}).items()))


def resolve_algo(name: str, kind: str) -> str:
    """The algorithm ``fit(env, name)`` runs on an env of kind ``kind`` (``"tensor"`` or ``"text"``):
    the variant ``name`` registered for that kind, else ``name`` itself.

    Raises:
        MarlError: unknown algorithm (or unknown variant target).
    """
    target = dict(algo_entry(name).variants).get(kind, name)
    return algo_entry(target).name


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


def trainer_class(name: str) -> Type[Any]:
    """Import and return the trainer class of algorithm ``name``.

    Raises:
        MarlError: unknown algorithm; a trainer string that names nothing; or a trainer whose
            ``config_class`` is not the registered ``schema``.
    """
    entry = algo_entry(name)
    trainer = load_target(entry.trainer)
    if entry.schema is not None and getattr(trainer, "config_class", None) is not config_class(name):
        raise MarlError(
            f"Algorithm '{name}': {trainer.__name__}.config_class is "
            f"{getattr(trainer, 'config_class', None)!r}, but register_algo named schema={entry.schema!r}."
        )
    return trainer


def config_class(name: str) -> Type[Any]:
    """The config schema of algorithm ``name``: its registered ``schema`` (no trainer module is
    imported), else the ``config_class`` of its trainer.

    Raises:
        MarlError: unknown algorithm, or a schema that is not a ConfigBase dataclass.
    """
    entry = algo_entry(name)
    if entry.schema is not None:
        cls, where = load_target(entry.schema), f"schema {entry.schema!r}"
    else:
        trainer = trainer_class(name)
        cls, where = getattr(trainer, "config_class", None), f"{trainer.__name__}.config_class"
    if not (isinstance(cls, type) and issubclass(cls, ConfigBase)):
        raise MarlError(f"Algorithm '{name}': {where} must be a marl.config.ConfigBase dataclass, got {cls!r}.")
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
