"""Plugin discovery: the packages that register env families, wrappers, algorithms and commands.

marl core never imports a concrete env, wrapper or algorithm. Packages that
provide them declare an entry point in the group ``marl.plugins``; loading the
entry point imports the package, whose ``__init__`` registers its parts by
name with strings (``"module:callable"``), so the modules themselves are only
imported when one of their parts is first used. marl's own ``marl.envs``,
``marl.algos`` and ``marl.benchmarks`` are registered this way in ``setup.py``;
a third-party package adds its envs or algorithms the same way::

    # setup.py of my_package
    entry_points={"marl.plugins": ["my_envs = my_package.marl_plugin"]}
"""
from __future__ import annotations

import importlib
import importlib.metadata
from typing import List

GROUP = "marl.plugins"
_loaded: List[str] = []


def load_plugins() -> List[str]:
    """Import every package registered in the ``marl.plugins`` entry-point group, once.

    Returns the names of the loaded entry points. A plugin that fails to import
    raises: a broken install should not look like a missing env or algorithm.
    """
    if _loaded:
        return list(_loaded)
    eps = sorted(importlib.metadata.entry_points(group=GROUP), key=lambda ep: ep.name)
    names = list(dict.fromkeys(ep.name for ep in eps))  # an editable and a regular install may both list one
    seen = set()
    for ep in eps:
        if ep.name in seen:
            continue
        seen.add(ep.name)
        ep.load()
    _loaded.extend(names)
    return list(_loaded)


_FUNCTIONS: dict = {}


def register_function(name: str, target: str) -> None:
    """Offer ``marl.<name>(...)`` from a plugin: ``target`` is ``"module:function"``, imported on the
    first call (e.g. the benchmark runner's ``marl.benchmark``)."""
    _FUNCTIONS[name] = target


def plugin_function(name: str):
    """The function a plugin registered as ``name`` (:func:`register_function`).

    Raises:
        AttributeError: no loaded plugin offers it (so ``hasattr(marl, name)`` stays False).
    """
    load_plugins()
    if name not in _FUNCTIONS:
        raise AttributeError(f"module 'marl' has no attribute {name!r}")
    module, _, attr = _FUNCTIONS[name].partition(":")
    return getattr(importlib.import_module(module), attr)
