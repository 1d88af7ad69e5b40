"""Typed configuration: the base class of every config schema and the rules that check a value.

A schema is a frozen, keyword-only dataclass deriving from :class:`ConfigBase`.
Each field is one config key, declared with :func:`key`: a type annotation, a
one-line doc and its valid range or choices; fields have no defaults, because
the YAML files under ``configs/`` hold the values and their sources
(:mod:`marl.config.loader`). A schema class may set ``LAYER`` (the name shown in
docs and errors for the keys it declares) and ``DEFAULTS`` (a YAML file under
``configs/`` that gives values for them).

Type rules (checked, with casting, when an instance is built): an ``int`` key
accepts ``3`` and ``3.0`` but not ``3.5``; a ``float`` key accepts any number;
numbers are never read from strings, and NaN or infinity is no valid value of
any number key; a ``bool`` key accepts only true/false;
a ``str`` key also takes a path (``os.PathLike``, kept as its string); ``None``
only where the annotation is ``Optional``.
"""

from __future__ import annotations

import collections.abc
import dataclasses
import functools
import math
import numbers
import os
import types
import typing
from typing import Any, Callable, Dict, Iterator, List, NamedTuple, Optional, Sequence, Tuple, Union

from marl.errors import MarlError, unknown_choice


_Config = typing.TypeVar("_Config", bound="ConfigBase")


class ConfigValueError(MarlError):
    """A config value of the wrong type or outside its range; ``key`` and ``value`` name it."""

    def __init__(self, message: str, key: str, value: Any, kind: str):
        super().__init__(message)
        self.key, self.value, self.kind = key, value, kind  # kind: "type" | "range" | "choice"


def key(
    doc: str,
    *,
    choices: Optional[Union[Sequence[Any], Callable[[], Sequence[Any]]]] = None,
    gt: Optional[float] = None,
    ge: Optional[float] = None,
    lt: Optional[float] = None,
    le: Optional[float] = None,
    off: Optional[float] = None,
    internal: bool = False,
    before: Any = None,
) -> Any:
    """Declare a config key: ``name: type = key("one-line doc", ...)`` in a schema class.

    Args:
        doc: one line: what the key means, its unit, where its value comes from.
        choices: the valid values (strings, or numbers), or a function returning them
            (for choices that plugins extend, e.g. the registered agent networks).
        gt, ge, lt, le: bounds of a number (``gt=0, le=1`` is the interval (0, 1]).
        off: one more valid value outside the bounds that switches the feature off
            (``dual_clip``: 0, or > 1).
        internal: set by the loader, not by the user (``algo``); left out of the docs.
        before: the value a checkpoint saved before the key existed resumes with, where the
            YAML default changes what such a run was doing (``None``: the YAML value).
    Returns:
        A ``dataclasses.field`` without a default (the YAML files give the values).
    """
    if "\n" in doc:
        raise ValueError(f"config key docs are one line: {doc!r}")
    if choices is not None and not callable(choices):
        choices = tuple(choices)
    meta = {"doc": doc, "choices": choices, "bounds": (gt, ge, lt, le), "off": off, "internal": internal}
    meta["before"] = before
    return dataclasses.field(metadata=meta)


class FieldSpec(NamedTuple):
    """What the schema says about one key."""

    name: str
    type: Any  # the resolved annotation
    doc: str
    choices_of: Any  # the valid values: a tuple, a function returning them, or None
    bounds: Tuple[Optional[float], ...]  # (gt, ge, lt, le)
    off: Optional[float]
    internal: bool
    layer: str  # LAYER of the schema class that declares the key
    before: Any = None  # the value of checkpoints saved before the key existed (None: the YAML value)

    @property
    def choices(self) -> Optional[Tuple[Any, ...]]:
        """The valid values now (a registry-backed key sees what plugins registered since)."""
        return tuple(self.choices_of()) if callable(self.choices_of) else self.choices_of

    def range_text(self) -> str:
        """``"(0, 1]"``, ``"> 0"``, ``"a, b, c"``, ``"0 (off) or > 1"`` or ``""`` (any value)."""
        if self.choices is not None:
            return ", ".join(map(str, self.choices))
        gt, ge, lt, le = self.bounds
        low = f"({gt:g}" if gt is not None else f"[{ge:g}" if ge is not None else None
        high = f"{lt:g})" if lt is not None else f"{le:g}]" if le is not None else None
        if low and high:
            text = f"{low}, {high}"
        elif low:
            text = f"{'>' if gt is not None else '>='} {low[1:]}"
        elif high:
            text = f"{'<' if lt is not None else '<='} {high[:-1]}"
        else:
            text = ""
        return f"{self.off:g} (off) or {text}" if self.off is not None and text else text


def layer_of(cls: type, name: str) -> str:
    """``LAYER`` of the first class in ``cls``'s MRO whose own annotations declare ``name``."""
    for c in cls.__mro__:
        if name in vars(c).get("__annotations__", {}):
            return vars(c).get("LAYER", c.__name__)
    raise KeyError(name)


@functools.lru_cache(maxsize=None)
def field_specs(cls: type) -> Tuple[FieldSpec, ...]:
    """The keys of schema class ``cls`` in declaration order (inherited layers first)."""
    hints = typing.get_type_hints(cls)
    out = []
    for f in dataclasses.fields(cls):
        m = f.metadata
        if "doc" not in m:
            raise TypeError(f"{cls.__name__}.{f.name} is not declared with marl.config.key(...)")
        out.append(
            FieldSpec(
                f.name,
                hints[f.name],
                m["doc"],
                m["choices"],
                m["bounds"],
                m["off"],
                m["internal"],
                layer_of(cls, f.name),
                m.get("before"),
            )
        )
    return tuple(out)


def spec_map(cls: type) -> Dict[str, FieldSpec]:
    """Key name -> :class:`FieldSpec` of schema class ``cls``."""
    return {s.name: s for s in field_specs(cls)}


# ------------------------------------------------------------------ types
def describe(tp: Any) -> str:
    """Words for a type in messages and docs: ``int`` -> "a number", ``Optional[str]`` -> "a string or null"."""
    if tp is Any:
        return "any value"
    args = typing.get_args(tp)
    origin = typing.get_origin(tp)
    if origin is typing.Union:
        return " or ".join(describe(a) for a in args)
    if origin in (list, collections.abc.Sequence):
        return f"a list of {describe(args[0]).removeprefix('a ')}s"
    if origin in (dict, collections.abc.Mapping):
        return f"a dict of {describe(args[0]).removeprefix('a ')} -> {describe(args[1]).removeprefix('a ')}"
    if origin is collections.abc.Callable or tp is collections.abc.Callable:
        return "a callable"
    names = {bool: "true/false", int: "a number", float: "a number", str: "a string", type(None): "null"}
    return names.get(tp, getattr(tp, "__name__", str(tp)))


def type_name(tp: Any) -> str:
    """Short name of a type for the docs: ``int``, ``str or null``, ``list of str``, ``dict str -> float``."""
    if tp is Any:
        return "any"
    args, origin = typing.get_args(tp), typing.get_origin(tp)
    if origin is typing.Union:
        return " or ".join(type_name(a) for a in args)
    if origin in (list, collections.abc.Sequence):
        return f"list of {type_name(args[0])}"
    if origin in (dict, collections.abc.Mapping):
        return f"dict {type_name(args[0])} -> {type_name(args[1])}"
    if origin is collections.abc.Callable or tp is collections.abc.Callable:
        return "callable"
    return "null" if tp is type(None) else getattr(tp, "__name__", str(tp))


def coerce(name: str, value: Any, tp: Any) -> Any:
    """``value`` checked against type ``tp`` and cast (``3.0`` -> ``3`` for an int key).

    Raises:
        ConfigValueError: the value does not have the type (message names key, value, type).
    """

    def bad(extra: str = "") -> ConfigValueError:
        message = f"Config key '{name}' expects {extra or describe(tp)}, got {value!r}."
        return ConfigValueError(message, name, value, "type")

    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if tp is Any:
        return value
    if origin is typing.Union:
        for a in args:
            try:
                return coerce(name, value, a)
            except ConfigValueError:
                pass
        raise bad()
    if tp is type(None):
        if value is None:
            return None
        raise bad()
    if tp is bool:
        if isinstance(value, bool):
            return value
        raise bad()
    if tp in (int, float):
        return _number(name, value, tp, bad)
    if tp is str:
        if isinstance(value, (str, os.PathLike)):
            return os.fspath(value)  # a path (log_dir, init_from) is kept as its string
        raise bad()
    if origin in (list, collections.abc.Sequence, dict, collections.abc.Mapping):
        try:
            return _container(name, value, origin, args)
        except ConfigValueError:
            raise bad() from None
    if origin is collections.abc.Callable or tp is collections.abc.Callable:
        if callable(value):
            return value
        raise bad()
    raise TypeError(f"config key '{name}': unsupported annotation {tp!r}")


def _container(name: str, value: Any, origin: Any, args: Tuple[Any, ...]) -> Any:
    """A list (from a list or tuple) or a dict with every element coerced; ConfigValueError if not."""
    if origin in (list, collections.abc.Sequence):
        if not isinstance(value, (list, tuple)):
            raise ConfigValueError("", name, value, "type")
        return [coerce(name, v, args[0]) for v in value]
    if not isinstance(value, collections.abc.Mapping):
        raise ConfigValueError("", name, value, "type")
    return {coerce(name, k, args[0]): coerce(name, v, args[1]) for k, v in value.items()}


def _number(name: str, value: Any, tp: type, bad) -> Any:
    """A finite real number (numpy scalars included) cast to ``tp``; an int key takes whole numbers only."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise bad("a number")
    if not math.isfinite(value):  # a NaN bound passes every comparison; an infinite one never ends
        raise bad("a finite number")
    if tp is int and not isinstance(value, numbers.Integral):
        if not float(value).is_integer():
            raise bad("a whole number")
    return tp(value)


def check_range(spec: FieldSpec, value: Any, given: Any = None) -> None:
    """Raise :class:`ConfigValueError` if ``value`` (already typed) is outside the key's range or choices
    (the message shows ``given``, the value before casting, when there is one)."""
    given = value if given is None else given
    if value is None or callable(value):
        return
    if spec.choices is not None:
        if value not in spec.choices:
            raise ConfigValueError(str(unknown_choice(spec.name, given, spec.choices)), spec.name, given, "choice")
        return
    if not isinstance(value, (int, float)) or isinstance(value, bool) or value == spec.off:
        return
    gt, ge, lt, le = spec.bounds
    ok = (
        (gt is None or value > gt)
        and (ge is None or value >= ge)
        and (lt is None or value < lt)
        and (le is None or value <= le)
    )
    if not ok:
        text = spec.range_text()
        where = f"in {text}" if text[0] in "([" else text
        raise ConfigValueError(f"Config key '{spec.name}' must be {where}, got {given!r}.", spec.name, given, "range")


# ------------------------------------------------------------------ base class
@dataclasses.dataclass(frozen=True, kw_only=True)
class ConfigBase(collections.abc.Mapping):
    """Base of the config schemas: a frozen dataclass whose fields are the config keys.

    Read keys as attributes (``cfg.lr``); marl's own code does. As a convenience for
    users, a config is also a read-only mapping (``cfg["lr"]``, ``cfg.get``, ``"lr" in cfg``,
    ``dict(cfg)``, ``{**cfg}``). ``cfg.replace(lr=1e-3)`` (or ``dataclasses.replace``)
    returns a checked copy. The sections of the plug-ins the config selects
    (:mod:`marl.config.sections`) are in ``cfg.sections`` and readable by name:
    ``cfg.legem.beta``.

    Raises:
        ConfigValueError: at construction, a value of the wrong type, outside its
            range or not one of its choices.
    """

    algo: str = key("registered name of the algorithm (set by the loader)", internal=True)
    # the plug-ins' own sections (marl/config/sections.py), set by the loader; not a key itself
    sections: Dict[str, Any] = dataclasses.field(
        default_factory=dict,
        metadata={
            "doc": "config sections of the plug-ins the config selects, by name (set by the loader)",
            "choices": None,
            "bounds": (None, None, None, None),
            "off": None,
            "internal": True,
        },
    )

    def __post_init__(self) -> None:
        for spec in field_specs(type(self)):
            given = getattr(self, spec.name)
            value = coerce(spec.name, given, spec.type)
            check_range(spec, value, given)
            object.__setattr__(self, spec.name, value)

    def __getattr__(self, name: str) -> Any:
        # only reached when no field has the name: a section by name (``cfg.legem.beta``);
        # reads __dict__ directly, so that unpickling (no fields yet) cannot recurse
        sections = self.__dict__.get("sections") or {}
        if name in sections:
            return sections[name]
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    # read-only Mapping protocol: a convenience for users (marl's code reads attributes)
    def __getitem__(self, name: str) -> Any:
        if name in self.__dataclass_fields__:
            return getattr(self, name)
        raise KeyError(name)

    def __iter__(self) -> Iterator[str]:
        return iter(self.__dataclass_fields__)

    def __len__(self) -> int:
        return len(self.__dataclass_fields__)

    def replace(self: _Config, **changes: Any) -> _Config:
        """A copy with ``changes`` applied and checked (``dataclasses.replace``)."""
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> Dict[str, Any]:
        """The keys and values as a plain dict; a section is a nested dict of its keys
        (``{"legem": {"beta": 0.1, ...}}``), as users give it."""
        out = {k: getattr(self, k) for k in self.__dataclass_fields__ if k != "sections"}
        for name, section in self.sections.items():
            out[name] = {k: getattr(section, k) for k in section.keys_of()}
        return out

    @classmethod
    def keys_of(cls) -> List[str]:
        """The user-settable keys of this schema."""
        return [s.name for s in field_specs(cls) if not s.internal]


def config_view(cfg: Any) -> Any:
    """``cfg`` with its keys readable as attributes: a :class:`ConfigBase` as it is, a plain
    mapping (public checks such as ``check_agent({"agent": "hpn"}, info)`` accept one) as a
    ``types.SimpleNamespace`` of its items."""
    if isinstance(cfg, ConfigBase):
        return cfg
    return types.SimpleNamespace(**cfg)
