"""Config sections: a plug-in's own keys, kept in a section of the algorithm's config.

A plug-in that has keys of its own (a batch transform, :mod:`marl.transforms`) declares
them in a schema of its own, a :class:`~marl.config.schema.ConfigBase` dataclass with
``LAYER`` (its name) and ``DEFAULTS`` (its YAML file under ``configs/``), and registers it
as a section that one choice of a config key switches on::

    register_section("legem", "marl.algos.legem_config:LegemConfig",
                     key="reward_redistribution", value="legem")

Users give a section as a dict of its keys: ``fit(..., reward_redistribution="legem",
legem={"beta": 0.2})``, ``legem.beta=0.2`` on the command line, or ``legem: {beta: 0.2}``
in an algorithm's or env family's YAML file. The loader (:func:`marl.config.loader.build`)
merges the section's own YAML file and these layers key by key (later wins), checks every
key against the section's schema and puts the sections of the plug-ins the config selects
in ``cfg.sections`` (readable as ``cfg.legem.beta``). A section given while its plug-in is
not selected, an unknown key of a section, or a bad value is a :class:`MarlError`.

This module imports the schema of a section only when the section is used; a schema
module must not import torch or Ray (configs are checked before Ray starts).
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any, Dict, Union

from marl.config.schema import ConfigBase
from marl.errors import MarlError
from marl.plugins import load_plugins


@dataclass(frozen=True)
class SectionEntry:
    """One registered section: its schema, and the ``key`` / ``value`` that switch it on."""

    name: str
    schema: Union[str, type]  # "module:Class", or the class itself
    key: str
    value: Any

    def active(self, cfg: Any) -> bool:
        """Whether config ``cfg`` selects this section's plug-in (``cfg.<key> == value``)."""
        return getattr(cfg, self.key, None) == self.value


_SECTIONS: Dict[str, SectionEntry] = {}


def register_section(name: str, schema: Union[str, type], *, key: str, value: Any) -> None:
    """Register config section ``name`` (registering a name again replaces it).

    Args:
        name: the section's name, as users write it (``legem={...}``); it must not be a config key.
        schema: ``"module:Class"`` of its :class:`ConfigBase` dataclass (imported when the section
            is used; the module imports neither torch nor Ray), or the class.
        key, value: the section is part of a config whose ``key`` has ``value``.
    Raises:
        MarlError: ``schema`` is neither a ``"module:Class"`` string nor a ConfigBase subclass.
    """
    if not (isinstance(schema, str) and ":" in schema) and not (
        isinstance(schema, type) and issubclass(schema, ConfigBase)
    ):
        raise MarlError(
            f"register_section('{name}'): schema must be a 'module:Class' string or a "
            f"marl.config.ConfigBase subclass, got {schema!r}."
        )
    _SECTIONS[name] = SectionEntry(name, schema, key, value)


def section_entries() -> Dict[str, SectionEntry]:
    """Section name -> :class:`SectionEntry` of every registered section (plug-ins loaded)."""
    load_plugins()
    return dict(_SECTIONS)


def section_class(name: str) -> type:
    """The schema class of section ``name`` (imported on first use).

    Raises:
        MarlError: no such section, or its schema is not a ConfigBase dataclass.
    """
    entry = section_entries().get(name)
    if entry is None:
        raise MarlError(f"Unknown config section '{name}'. Sections: {', '.join(sorted(_SECTIONS)) or 'none'}.")
    return resolve_class(entry.schema, ConfigBase, f"Config section '{name}'")


def resolve_class(target: Union[str, type], base: type, what: str) -> type:
    """``target`` (a ``"module:Class"`` string, imported now, or a class) as a subclass of ``base``.

    Raises:
        MarlError: it is not a ``base`` subclass (``what`` names whose target it is).
    """
    cls = target
    if isinstance(cls, str):
        module, _, attr = cls.partition(":")
        cls = getattr(importlib.import_module(module), attr)
    if not (isinstance(cls, type) and issubclass(cls, base)):
        raise MarlError(f"{what}: {target!r} is not a {base.__module__}.{base.__name__} subclass.")
    return cls
