"""marl: multi-agent reinforcement learning on RLlib.

    import marl
    result = marl.make_env("mpe", "simple_spread").fit("mappo")

The names below are imported from their modules on first use (PEP 562), so that
``import marl`` and the light parts (the config registry and loader, ``marl list``,
``marl train --help``) import neither torch nor Ray.
"""

from typing import Any

__version__ = "0.1.0"

# public name -> the module that defines it
_LAZY = {
    **dict.fromkeys(
        [
            "EnvInfo",
            "GroupInfo",
            "MultiAgentEnv",
            "Step",
            "check_entity_layout",
            "check_env",
            "list_envs",
            "make_env",
            "register_env",
        ],
        "marl.env",
    ),
    "MarlError": "marl.errors",
    "fit": "marl.api",  # importing marl.api installs marl.fit behind MultiAgentEnv.fit
    "load": "marl.api",
    "list_algos": "marl.config",
    "Result": "marl.results",
    "PolicyMapping": "marl.mapping",
}

__all__ = [
    "EnvInfo",
    "GroupInfo",
    "MarlError",
    "MultiAgentEnv",
    "Step",
    "check_entity_layout",
    "check_env",
    "list_envs",
    "make_env",
    "register_env",
    "fit",
    "list_algos",
    "load",
    "Result",
    "PolicyMapping",
    "benchmark",
]


def __getattr__(name: str) -> Any:
    import importlib
    import importlib.util

    if name in _LAZY:
        value = getattr(importlib.import_module(_LAZY[name]), name)
    elif name == "benchmark":  # offered by the benchmarks plugin (marl.benchmarks.driver.benchmark)
        from marl.plugins import plugin_function

        value = plugin_function(name)
    elif not name.startswith("_") and importlib.util.find_spec(f"marl.{name}") is not None:
        value = importlib.import_module(f"marl.{name}")  # a submodule: marl.callbacks.Callback after import marl
    else:
        raise AttributeError(f"module 'marl' has no attribute {name!r}")
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(__all__))
