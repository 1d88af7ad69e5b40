"""marl: multi-agent reinforcement learning on RLlib.

    import marl
    result = marl.make_env("mpe", "simple_spread").fit("mappo")
"""
from marl.env import (
    EnvInfo, GroupInfo, MarlError, MultiAgentEnv, Step, check_entity_layout, check_env, list_envs, make_env,
    register_env,
)
# importing marl.api installs marl.fit as the training entry of MultiAgentEnv.fit (it imports no Ray)
from marl.api import fit, list_algos, load

__version__ = "0.1.0"

__all__ = [
    "EnvInfo", "GroupInfo", "MarlError", "MultiAgentEnv", "Step", "check_entity_layout", "check_env",
    "list_envs", "make_env", "register_env", "fit", "list_algos", "load", "Result", "PolicyMapping", "benchmark",
]


def __getattr__(name):
    if name == "Result":
        from marl.results import Result

        return Result
    if name == "PolicyMapping":
        from marl.mapping import PolicyMapping

        return PolicyMapping
    if name == "benchmark":  # offered by the benchmarks plugin (marl.benchmarks.driver.benchmark)
        from marl.plugins import plugin_function

        return plugin_function(name)
    raise AttributeError(f"module 'marl' has no attribute {name!r}")
