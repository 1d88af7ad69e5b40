"""marl: multi-agent reinforcement learning on RLlib.

    import marl
    result = marl.make_env("mpe", "simple_spread").fit("mappo")
"""
from marl.env import (
    EnvInfo, GroupInfo, MarlError, MultiAgentEnv, Step, check_entity_layout, list_envs, make_env, register_env,
)

__version__ = "0.1.0"

__all__ = [
    "EnvInfo", "GroupInfo", "MarlError", "MultiAgentEnv", "Step", "check_entity_layout",
    "list_envs", "make_env", "register_env", "fit", "list_algos", "load", "Result", "PolicyMapping",
]


def __getattr__(name):
    # Lazy: importing marl must not import Ray / RLlib (slow) until training starts.
    if name in ("fit", "list_algos", "load"):
        from marl import api

        return getattr(api, name)
    if name == "Result":
        from marl.results import Result

        return Result
    if name == "PolicyMapping":
        from marl.mapping import PolicyMapping

        return PolicyMapping
    raise AttributeError(f"module 'marl' has no attribute {name!r}")
