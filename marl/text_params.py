"""Parameter rules of text games (:mod:`marl.text`): one check for every family.

A game class declares ``params`` (name -> :class:`Param`); :class:`marl.text.TextEnv` merges them
along the class hierarchy and checks a game's keyword arguments before any ``__init__`` of it runs
(:func:`checked_init`). A float, a string or a bool where a whole number is meant, or a count
below its bound, is a :class:`MarlError` naming the game, the parameter, the value and the valid
range: values are never rounded or converted. Parameters passed through to a game library
(OpenSpiel's ``params``, TextArena's ``env_kwargs``) are checked against the library's own
defaults (:func:`check_library_params`).
"""

from __future__ import annotations

import functools
import inspect
import math
import numbers
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Mapping, Optional

from marl.errors import MarlError, closest


@dataclass(frozen=True)
class Param:
    """The rule of one parameter: its kind and, for numbers, its range (bounds included).

    Kinds: ``"whole"`` (an ``int``, never a ``bool``, a float or a string), ``"number"`` (a
    finite ``int`` or ``float``, never a ``bool``), ``"flag"`` (``True`` / ``False``),
    ``"text"`` (a ``str``), ``"table"`` (a dict). ``optional``: ``None`` is accepted too.
    """

    kind: str = "whole"
    low: Optional[float] = None
    high: Optional[float] = None
    optional: bool = False

    def accepts(self, value: Any) -> bool:
        """Whether ``value`` has this kind and lies in the range."""
        if value is None:
            return self.optional
        if self.kind in ("whole", "number"):
            real = isinstance(value, numbers.Integral if self.kind == "whole" else numbers.Real)
            if isinstance(value, bool) or not real or not math.isfinite(value):
                return False
            return (self.low is None or value >= self.low) and (self.high is None or value <= self.high)
        return isinstance(value, {"flag": bool, "text": str, "table": Mapping}[self.kind])

    def describe(self) -> str:
        """The rule in words, e.g. ``"a whole number (int) >= 1"``."""
        what = {
            "whole": "a whole number (int)",
            "number": "a finite number (int or float)",
            "flag": "True or False",
            "text": "a string",
            "table": "a dict",
        }[self.kind]
        if self.low is not None and self.high is not None:
            what += f" in {self.low:g}..{self.high:g}"
        elif self.low is not None:
            what += f" >= {self.low:g}"
        elif self.high is not None:
            what += f" <= {self.high:g}"
        return what + (" or None" if self.optional else "")


def rule_of_default(default: Any) -> Optional[Param]:
    """The :class:`Param` a library parameter gets from the type of its default value
    (``bool`` -> flag, ``int`` -> whole, ``float`` -> number, ``str`` -> text); None for other types."""
    for kind, types in (("flag", bool), ("whole", int), ("number", float), ("text", str)):
        if isinstance(default, types):
            return Param(kind)
    return None


def check_param(owner: str, name: str, value: Any, rule: Param) -> None:
    """Raise :class:`MarlError` unless ``rule`` accepts ``value``.

    Args:
        owner: who takes the parameter (e.g. ``"text game 'ipd'"``), first in the message.
        name: the parameter's name.
    Raises:
        MarlError: naming ``owner``, ``name``, ``value`` with its type, and the valid range.
    """
    if not rule.accepts(value):
        raise MarlError(
            f"{owner}: {name}={value!r} ({type(value).__name__}) is refused: {name} must be "
            f"{rule.describe()} (values are never rounded or converted)."
        )


def check_library_params(owner: str, what: str, given: Mapping[str, Any], defaults: Mapping[str, Any]) -> None:
    """Check parameters passed through to a game library (OpenSpiel's game parameters, a TextArena
    env's keyword arguments) against the library's own defaults: each name must be one of
    ``defaults``, and each value must have its default's type (:func:`rule_of_default`).

    Args:
        owner: the game in messages; what: the argument holding them (e.g. ``"params"``).
    Raises:
        MarlError: an unknown name (with the closest and the valid names), or a value of another
            type than the default's (a float or a bool where an int is meant, ...).
    """
    for name, value in given.items():
        if name not in defaults:
            raise MarlError(
                f"{owner}: unknown {what} key '{name}'.{closest(name, list(defaults))} Valid keys: "
                f"{', '.join(map(str, defaults)) or 'none'}."
            )
        rule = rule_of_default(defaults[name])
        if rule is not None:
            check_param(owner, f"{what}[{name!r}]", value, rule)


def init_parameters(cls: type) -> List[str]:
    """Keyword names the ``__init__`` methods along ``cls``'s hierarchy take (``**kwargs`` pass on)."""
    names: List[str] = []
    for klass in cls.__mro__:
        init = klass.__dict__.get("__init__")
        if init is None or klass is object:
            continue
        init = getattr(init, "__wrapped__", init)
        for p in list(inspect.signature(init).parameters.values())[1:]:
            if p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL) and p.name not in names:
                names.append(p.name)
        if klass.__name__ == "TextEnv":
            break
    return names


def checked_init(init: Callable) -> Callable:
    """``init`` behind ``TextEnv.check_params`` on the arguments it is called with."""
    signature = inspect.signature(init)

    @functools.wraps(init)
    def checked(self: Any, *args: Any, **kwargs: Any) -> None:
        try:
            bound = signature.bind(self, *args, **kwargs)
        except TypeError:
            return init(self, *args, **kwargs)  # Python's own error for a wrong call
        values: Dict[str, Any] = {}
        for name, value in list(bound.arguments.items())[1:]:
            if signature.parameters[name].kind == inspect.Parameter.VAR_KEYWORD:
                values.update(value)
            else:
                values[name] = value
        type(self).check_params(values)
        return init(self, *args, **kwargs)

    return checked
