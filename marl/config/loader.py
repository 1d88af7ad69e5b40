"""Configuration loading: YAML values, layer on layer, checked against the algorithm's schema.

Layers, later wins:

1. the ``DEFAULTS`` file of every layer of the schema (``configs/engine.yaml``;
   ``configs/agent_net.yaml`` for the algorithms with an agent network);
2. ``configs/algos/<algo>.yaml``, on top of the file its ``base: <algo>`` names
   (ippo on mappo, vdn on qmix, mars on reinforce);
3. ``configs/envs/<family>.yaml``: section ``all``, then the section of every
   algorithm of the ``base:`` chain (a ``mappo:`` section also applies to ippo);
4. the user's overrides (keywords of ``fit``, ``key=value`` on the command line).

Every key of every layer must be a key of the algorithm's schema, and the
layers together must give every key a value. An unknown key is an error naming
the closest valid key, or the family that owns it.
"""
from __future__ import annotations

from importlib import resources
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Tuple

import yaml

from marl.config.registry import algo_entry, config_class, defaults_path, list_algos, ownership_hint
from marl.config.schema import ConfigBase, ConfigValueError, check_range, coerce, spec_map
from marl.errors import MarlError, closest

META_KEYS = ("base",)
USER = "your overrides"
Source = Tuple[str, Dict[str, Any]]  # (where the values come from, the values)


def config_dir() -> Path:
    """Folder of the installed YAML defaults (``marl.configs``)."""
    return Path(str(resources.files("marl.configs")))


def _label(path: Path) -> str:
    try:
        return f"configs/{path.relative_to(config_dir()).as_posix()}"
    except ValueError:
        return str(path)


def read_yaml(path: Path) -> Dict[str, Any]:
    """A YAML file that holds a mapping (an empty file is ``{}``).

    Raises:
        MarlError: the file is missing or holds something else than a mapping.
    """
    if not path.exists():
        raise MarlError(f"Config file {_label(path)} does not exist.")
    with open(path) as f:
        data = yaml.safe_load(f)
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise MarlError(f"{_label(path)} must hold key: value pairs, got {type(data).__name__}.")
    return data


def algo_chain(algo: str) -> List[str]:
    """``algo`` and the algorithms its file starts from (``base:``), the root first: ``["mappo", "ippo"]``.

    Raises:
        MarlError: unknown algorithm, or a ``base:`` cycle.
    """
    chain = [algo]
    while True:
        base = read_yaml(defaults_path(chain[0], config_dir())).get("base")
        if base is None:
            return chain
        if base in chain:
            raise MarlError(f"{_label(defaults_path(chain[0], config_dir()))}: 'base: {base}' makes a cycle "
                            f"({' -> '.join(reversed(chain))} -> {base}).")
        algo_entry(base)  # an unknown base is an unknown algorithm
        chain.insert(0, base)


def layer_sources(cls: type) -> List[Source]:
    """The ``DEFAULTS`` files of the layers of schema ``cls``, the most basic first."""
    out = []
    for c in reversed(cls.__mro__):
        name = vars(c).get("DEFAULTS")
        if name:
            out.append((_label(config_dir() / name), read_yaml(config_dir() / name)))
    return out


def algo_sources(algo: str) -> List[Source]:
    """The algorithm files of ``algo``'s ``base:`` chain, the root first, without their ``base`` key."""
    out = []
    for name in algo_chain(algo):
        path = defaults_path(name, config_dir())
        out.append((_label(path), {k: v for k, v in read_yaml(path).items() if k not in META_KEYS}))
    return out


def env_sources(family: Optional[str], algo: str) -> List[Source]:
    """Sections ``all`` and those of ``algo``'s ``base:`` chain of ``configs/envs/<family>.yaml`` (none if no file).

    Raises:
        MarlError: a section that is neither ``all`` nor a registered algorithm.
    """
    path = config_dir() / "envs" / f"{family}.yaml"
    if family is None or not path.exists():
        return []
    data = read_yaml(path)
    valid = ["all"] + list(list_algos())
    for section, values in data.items():
        if section not in valid:
            raise MarlError(f"{_label(path)}: unknown section '{section}'.{closest(section, valid)} "
                            f"Sections are 'all' and algorithm names: {', '.join(valid)}.")
        if values is not None and not isinstance(values, dict):
            raise MarlError(f"{_label(path)}: section '{section}' must hold key: value pairs, got {values!r}.")
    return [(f"{_label(path)} (section '{s}')", data.get(s) or {}) for s in ["all"] + algo_chain(algo)]


def env_overrides(family: str, algo: str) -> Dict[str, Any]:
    """The values ``configs/envs/<family>.yaml`` sets for ``algo`` (sections merged, later wins)."""
    out: Dict[str, Any] = {}
    for _, values in env_sources(family, algo):
        out.update(values)
    return out


def unknown_key_error(cls: type, algo: str, name: str, source: str) -> MarlError:
    """The error for a key that ``algo``'s schema lacks: the family that owns it, or the closest valid key."""
    where = "" if source == USER else f"{source}: "
    specs = spec_map(cls)
    if name in specs:  # an internal key
        return MarlError(f"{where}'{name}' is set by marl, not a config key.")
    valid = cls.keys_of()
    hint = ownership_hint(name, algo)  # a key of another family: the close matches would only mislead
    tail = hint or f"{closest(name, valid)} Valid keys: {', '.join(sorted(valid))}."
    return MarlError(f"{where}Unknown config key '{name}' for algorithm '{algo}'.{tail}")


def build(cls: type, algo: str, sources: List[Source]) -> ConfigBase:
    """Merge ``sources`` (later wins) into a checked ``cls`` instance for ``algo``.

    Raises:
        MarlError: a key ``cls`` lacks, a key no source gives a value, or a value of
            the wrong type or range (naming the file it came from).
    """
    specs = spec_map(cls)
    values: Dict[str, Any] = {}
    origin: Dict[str, str] = {}
    for source, data in sources:
        for name, value in data.items():
            if name not in specs or specs[name].internal:
                raise unknown_key_error(cls, algo, name, source)
            values[name], origin[name] = value, source
    missing = [s.name for s in specs.values() if not s.internal and s.name not in values]
    if missing:
        files = ", ".join(src for src, _ in sources if src != USER) or "none"
        raise MarlError(f"No value for config key(s) {', '.join(missing)} of algorithm '{algo}' in its "
                        f"YAML files ({files}).")
    try:
        return cls(algo=algo, **values)
    except ConfigValueError as e:
        where = "" if origin.get(e.key, USER) == USER else f" (from {origin[e.key]})"
        hint = ownership_hint(e.key, algo, e.value) if e.kind == "choice" else ""
        raise ConfigValueError(f"{e}{where}{hint}", e.key, e.value, e.kind) from None


def algo_defaults(algo: str) -> ConfigBase:
    """``algo``'s configuration from its YAML files alone (no env family, no overrides).

    Raises:
        MarlError: unknown algorithm (lists the valid names and the closest), or bad YAML values.
    """
    cls = config_class(algo)
    return build(cls, algo, layer_sources(cls) + algo_sources(algo))


def load_config(algo: str, family: Optional[str], overrides: Optional[Dict[str, Any]] = None) -> ConfigBase:
    """Merged, checked configuration of ``algo`` on an env ``family`` (module docstring).

    Returns:
        An instance of the algorithm's schema (``config_class`` of its trainer):
        attributes ``cfg.lr`` (and, as a read-only convenience, ``cfg["lr"]``).
    Raises:
        MarlError: unknown algorithm, unknown key (with the closest valid key or the
            family that owns it), or a value of the wrong type or outside its range.
    """
    cls = config_class(algo)
    sources = layer_sources(cls) + algo_sources(algo) + env_sources(family, algo)
    return build(cls, algo, sources + [(USER, dict(overrides or {}))])


def restore_config(algo: str, saved: Mapping[str, Any]) -> ConfigBase:
    """The typed config of a run saved as a plain dict (a checkpoint's ``meta["config"]``).

    Saved values the current schema accepts are kept. Keys the schema gained since the
    run, and values saved as text (a callable ``share`` or an object ``model`` is saved
    as its repr), take ``algo``'s YAML values; keys the schema no longer has are
    ignored, so checkpoints of older versions load.

    Raises:
        MarlError: unknown algorithm, or bad YAML values.
    """
    specs = spec_map(config_class(algo))
    kept: Dict[str, Any] = {}
    for name, value in saved.items():
        spec = specs.get(name)
        if spec is None or spec.internal:
            continue
        try:
            typed = coerce(name, value, spec.type)
            check_range(spec, typed, value)
        except ConfigValueError:
            continue
        kept[name] = typed
    return algo_defaults(algo).replace(**kept)
