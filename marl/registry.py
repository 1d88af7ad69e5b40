"""Algorithm lookup: the trainer class of an algorithm, found by name through the config.

Core never imports an algorithm module by name; it imports the class a
configuration names (``"module:Class"``), which the algorithm packages provide.
"""
from __future__ import annotations

import importlib
from typing import Any, Mapping


def trainer_class(cfg: Mapping[str, Any]) -> type:
    """The :class:`~marl.engine.trainer.Trainer` subclass named by ``cfg["class"]`` (``"module:Class"``)."""
    module, _, name = str(cfg["class"]).partition(":")
    return getattr(importlib.import_module(module), name)
