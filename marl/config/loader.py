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

import collections.abc
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any, Dict, List, Mapping, Optional, Tuple, Type

import yaml

from marl.config.checks import check_rules
from marl.config.registry import algo_entry, config_class, defaults_path, list_algos, ownership_hint
from marl.config.suggest import marl_name, suggest_key
from marl.config.sections import section_class, section_entries
from marl.config.schema import ConfigBase, ConfigValueError, _Config, check_range, coerce, spec_map
from marl.errors import MarlError, closest

if TYPE_CHECKING:  # the engine layer's schema imports this module's helpers
    from marl.config.engine import EngineConfig

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
        MarlError: the file is missing, not a readable UTF-8 text file, not valid YAML or gives
            a key twice (names the file, line and column), or holds something else than a mapping.
    """
    if not path.exists():
        raise MarlError(f"Config file {_label(path)} does not exist.")
    try:
        text = path.read_text(encoding="utf-8")
        data = yaml.load(text, Loader=_UniqueKeyLoader)  # noqa: S506 - a SafeLoader subclass
    except yaml.YAMLError as e:
        raise MarlError(f"Config file {_label(path)} is not valid YAML: {_yaml_error(e)}") from None
    except (OSError, UnicodeDecodeError) as e:  # a folder, no permission, binary bytes
        raise MarlError(f"Config file {_label(path)} cannot be read as UTF-8 text: {e}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise MarlError(f"{_label(path)} must hold key: value pairs, got {type(data).__name__}.")
    return data


class _UniqueKeyLoader(yaml.SafeLoader):
    """``yaml.SafeLoader`` that refuses a key given twice in one mapping (PyYAML keeps the last
    silently, so the first value a user wrote would be ignored without a word)."""

    def construct_mapping(self, node, deep=False):
        seen: Dict[Any, int] = {}
        for key_node, _ in node.value:
            k = self.construct_object(key_node, deep=True)
            line = key_node.start_mark.line + 1
            if isinstance(k, collections.abc.Hashable) and k in seen:
                raise yaml.constructor.ConstructorError(
                    None, None, f"key {k!r} is given twice (lines {seen[k]} and {line})", key_node.start_mark
                )
            seen[k] = line
        return super().construct_mapping(node, deep)


def _yaml_error(e: yaml.YAMLError) -> str:
    """``"line 3, column 5: could not find expected ':'"``: where PyYAML stopped, 1-based, and why
    (its marks count from 0), with the line of the construct it was reading if that is another."""
    mark = getattr(e, "problem_mark", None) or getattr(e, "context_mark", None)
    problem = getattr(e, "problem", None) or str(e)
    context, start = getattr(e, "context", None), getattr(e, "context_mark", None)
    if context and start is not None and mark is not None and start.line != mark.line:
        context = f"{context} started at line {start.line + 1}, column {start.column + 1}"
    where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark is not None else ""
    return f"{where}{problem}" + (f" ({context})" if context else "") + "."


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
            raise MarlError(
                f"{_label(defaults_path(chain[0], config_dir()))}: 'base: {base}' makes a cycle "
                f"({' -> '.join(reversed(chain))} -> {base})."
            )
        algo_entry(base)  # an unknown base is an unknown algorithm
        chain.insert(0, base)


def layer_sources(cls: Type[Any]) -> List[Source]:
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
            raise MarlError(
                f"{_label(path)}: unknown section '{section}'.{closest(section, valid)} "
                f"Sections are 'all' and algorithm names: {', '.join(valid)}."
            )
        if values is not None and not isinstance(values, dict):
            raise MarlError(f"{_label(path)}: section '{section}' must hold key: value pairs, got {values!r}.")
    return [(f"{_label(path)} (section '{s}')", data.get(s) or {}) for s in ["all"] + algo_chain(algo)]


def env_overrides(family: str, algo: str) -> Dict[str, Any]:
    """The values ``configs/envs/<family>.yaml`` sets for ``algo`` (sections merged, later wins)."""
    out: Dict[str, Any] = {}
    for _, values in env_sources(family, algo):
        out.update(values)
    return out


def unknown_key_error(cls: Type[Any], algo: str, name: str, source: str) -> MarlError:
    """The error for a key that ``algo``'s schema lacks: the family that owns it, or the valid key the user
    most likely meant (:func:`~marl.config.suggest.suggest_key`: ``learning_rate`` -> ``lr``)."""
    where = "" if source == USER else f"{source}: "
    specs = spec_map(cls)
    if name in specs:  # an internal key
        return MarlError(f"{where}'{name}' is set by marl, not a config key.")
    valid = cls.keys_of()
    hint = ownership_hint(name, algo)  # a key of another family: the close matches would only mislead
    alias = marl_name(name)
    if not hint and alias != name and alias not in valid and ownership_hint(alias, algo):
        hint = f" marl calls it '{alias}';{ownership_hint(alias, algo)}"  # ent_coef on qmix
    tail = hint or f"{suggest_key(name, valid)} Valid keys: {', '.join(sorted(valid))}."
    return MarlError(f"{where}Unknown config key '{name}' for algorithm '{algo}'.{tail}")


def build(cls: Type[Any], algo: str, sources: List[Source]) -> Any:
    """Merge ``sources`` (later wins) into a checked ``cls`` instance for ``algo``, with the
    sections of the plug-ins it selects (:func:`with_sections`).

    A name that is no key of ``cls`` but a registered section (``legem``) holds that
    section's keys (:mod:`marl.config.sections`).

    Raises:
        MarlError: a key ``cls`` lacks, a key no source gives a value, or a value of
            the wrong type or range (naming the file it came from); a bad section; values that
            violate an error rule across keys (:mod:`marl.config.checks`).
    Warns:
        ConfigWarning: values that violate a warning rule across keys.
    """
    specs, entries = spec_map(cls), section_entries()
    keys: List[Source] = []
    sections: Dict[str, List[Source]] = {}
    for source, data in sources:
        keys.append((source, {k: v for k, v in data.items() if k in specs or k not in entries}))
        for name in (k for k in data if k not in specs and k in entries):
            sections.setdefault(name, []).append((source, data[name]))
    cfg = _typed(
        cls,
        algo,
        keys,
        lambda name, source: unknown_key_error(cls, algo, name, source),
        lambda e: ownership_hint(e.key, algo, e.value) if e.kind == "choice" else "",
    )
    cfg = with_sections(cfg, sections)
    check_rules(cfg)  # checks across keys of scope config (marl/config/checks.py)
    return cfg


def _typed(cls: Type[Any], algo: str, sources: List[Source], unknown, hint=None, section: str = "") -> Any:
    """``sources`` merged key by key (later wins) into a checked ``cls`` instance.

    Args:
        unknown: ``(name, source) -> MarlError`` for a name that is no key of ``cls``.
        hint: ``ConfigValueError -> str`` appended to a bad value's message.
        section: the name of the section ``cls`` is the schema of ("" for an algorithm's config).
    """
    valid = cls.keys_of()
    values: Dict[str, Any] = {}
    origin: Dict[str, str] = {}
    for source, data in sources:
        for name, value in data.items():
            if name not in valid:
                raise unknown(name, source)
            values[name], origin[name] = value, source
    missing = [k for k in valid if k not in values]
    what = f"config section '{section}'" if section else f"algorithm '{algo}'"
    if missing:
        files = ", ".join(src for src, _ in sources if src != USER) or "none"
        raise MarlError(f"No value for config key(s) {', '.join(missing)} of {what} in its YAML files ({files}).")
    try:
        return cls(algo=algo, **values)
    except ConfigValueError as e:
        where = "" if origin.get(e.key, USER) == USER else f" (from {origin[e.key]})"
        name = f"{section}.{e.key}" if section else e.key
        text = f"Config section '{section}': {e}" if section else str(e)
        raise ConfigValueError(f"{text}{where}{hint(e) if hint else ''}", name, e.value, e.kind) from None


def with_sections(cfg: _Config, given: Dict[str, List[Source]]) -> _Config:
    """``cfg`` with a section for every plug-in it selects, from the section's YAML file and the
    layers ``given`` (section name -> sources of its keys, later wins).

    Raises:
        MarlError: the user gave a section whose plug-in ``cfg`` does not select (names the key
            and value that select it); an unknown key of a section (with the closest and the
            valid keys); a section that is not a dict; a bad value (names ``section.key``).
    """
    entries = section_entries()
    for name, layers in given.items():
        entry = entries[name]
        if not entry.active(cfg) and any(source == USER for source, _ in layers):
            now = getattr(cfg, entry.key, None)
            raise MarlError(
                f"The config section {name}={{...}} sets keys of {entry.key}={entry.value!r}, but "
                f"{entry.key} is {now!r}: give {entry.key}={entry.value!r} too, or leave the section out."
            )
    built = {
        name: build_section(name, cfg.algo, given.get(name, [])) for name, entry in entries.items() if entry.active(cfg)
    }
    return cfg.replace(sections=built) if built or cfg.sections else cfg


def build_section(name: str, algo: str, layers: List[Source]) -> ConfigBase:
    """Section ``name`` from its schema's YAML file, then ``layers`` (each a dict of its keys).

    Raises:
        MarlError: a layer that is not a dict, an unknown key (with the closest and the valid
            keys), a key without a value, or a bad value (naming ``<section>.<key>``).
    """
    cls: Any = section_class(name)
    valid = sorted(cls.keys_of())
    for source, data in layers:
        if not isinstance(data, Mapping):
            where = "" if source == USER else f"{source}: "
            raise MarlError(
                f"{where}config section '{name}' takes a dict of its keys ({', '.join(valid)}), got {data!r}."
            )

    def unknown(key: str, source: str) -> MarlError:
        where = "" if source == USER else f"{source}: "
        return MarlError(
            f"{where}Unknown key '{key}' in config section '{name}'.{suggest_key(key, valid)} "
            f"Valid keys: {', '.join(valid)}."
        )

    return _typed(cls, algo, layer_sources(cls) + list(layers), unknown, section=name)


def algo_defaults(algo: str) -> Any:
    """``algo``'s configuration from its YAML files alone (no env family, no overrides).

    Raises:
        MarlError: unknown algorithm (lists the valid names and the closest), or bad YAML values.
    """
    cls = config_class(algo)
    return build(cls, algo, layer_sources(cls) + algo_sources(algo))


def load_config(algo: str, family: Optional[str], overrides: Optional[Dict[str, Any]] = None) -> EngineConfig:
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


def restore_config(algo: str, saved: Mapping[str, Any]) -> EngineConfig:
    """The typed config of a run saved as a plain dict (a checkpoint's ``meta["config"]``).

    Saved values the current schema accepts are kept. Keys the schema gained since the
    run take their ``before`` value (what such a run did, :func:`marl.config.key`) or else
    ``algo``'s YAML value, as do values saved as text (a callable ``share`` or an object
    ``model`` is saved as its repr); keys the schema no longer has are
    ignored, so checkpoints of older versions load. A section is read from its nested
    dict (``legem: {beta: ...}``) or, in checkpoints of versions that had no sections,
    from the flat keys ``<section>_<key>`` (``legem_beta``).

    Raises:
        MarlError: unknown algorithm, or bad YAML values.
    """
    specs = spec_map(config_class(algo))
    older = {name: spec.before for name, spec in specs.items() if spec.before is not None and name not in saved}
    cfg = algo_defaults(algo).replace(**older, **_accepted(specs, saved))
    given: Dict[str, List[Source]] = {}
    for name, entry in section_entries().items():
        if entry.active(cfg):
            old = {k[len(name) + 1 :]: v for k, v in saved.items() if k.startswith(f"{name}_")}
            nested = saved.get(name)
            kept = _accepted(spec_map(section_class(name)), {**old, **(nested if isinstance(nested, Mapping) else {})})
            given[name] = [(f"the saved section '{name}'", kept)]
    return with_sections(cfg, given)


def _accepted(specs: Mapping[str, Any], saved: Mapping[str, Any]) -> Dict[str, Any]:
    """The saved values that keys of ``specs`` (not internal) accept, typed."""
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
    return kept
