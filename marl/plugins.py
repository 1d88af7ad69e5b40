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
from typing import Any, List

from marl.errors import MarlError

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
    return load_target(_FUNCTIONS[name])


def load_target(target: str) -> Any:
    """The object a ``"module:attribute"`` string names (``"marl.algos.ppo:PPO"``), its module imported
    now: how marl's registries (algorithms, schemas, env families, wrappers, commands, game runners)
    reach the code they name without importing it before it is used.

    Raises:
        MarlError: ``target`` is not a ``"module:attribute"`` string, no module ``module``
            exists, or the module has no attribute ``attribute`` (the message names all three).
        ImportError: the module exists but imports something that is not installed (an
            optional extra: callers such as ``list_envs`` report it as unavailable).
    """
    module, sep, attr = target.partition(":") if isinstance(target, str) else ("", "", "")
    if not (sep and module and attr):
        raise MarlError(f"Expected a 'module:attribute' string, got {target!r}.")
    try:
        loaded = importlib.import_module(module)
    except ModuleNotFoundError as e:
        if e.name is None or not (module == e.name or module.startswith(e.name + ".")):
            raise  # the module exists; something it imports is missing
        raise MarlError(f"Cannot load {target!r}: there is no module '{module}' ({e}).") from e
    try:
        return getattr(loaded, attr)
    except AttributeError:
        raise MarlError(f"Cannot load {target!r}: module '{module}' has no attribute '{attr}'.") from None
