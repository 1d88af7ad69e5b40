"""Env wrappers for any batched :class:`~marl.env.MultiAgentEnv` (installed as ``marl.envs.wrappers``).

Registered by name with strings (imported when first used), so that
``make_env(..., offbeat=..., crash=...)`` applies them: ``offbeat``
(:mod:`marl.envs.wrappers.offbeat`, order 10, inside) and ``crash``
(:mod:`marl.envs.wrappers.crash`, order 20, outside). The classes are
importable from here too (loaded on first access).
"""

from marl.env import register_wrapper

register_wrapper(
    "flatten_obs",
    "marl.envs.wrappers.flatten_obs:wrap_flatten_obs",
    "Structured (image / dict) observations flattened into one float32 vector per agent (docs/observations.md)",
    order=5,
)
register_wrapper(
    "offbeat",
    "marl.envs.wrappers.offbeat:wrap_offbeat",
    "Off-beat actions: every action takes a pre-set number of steps (docs/offbeat.md)",
    order=10,
)
register_wrapper(
    "crash",
    "marl.envs.wrappers.crash:wrap_crash",
    "Crash-prone agents, optionally with a coach that sets the crash rate (docs/envs.md)",
    order=20,
)

_LAZY = {"ActionRecord": "offbeat", "OffBeatWrapper": "offbeat", "CrashWrapper": "crash", "FlattenObs": "flatten_obs"}


def __getattr__(name):
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(f"marl.envs.wrappers.{_LAZY[name]}"), name)
    raise AttributeError(f"module 'marl.envs.wrappers' has no attribute {name!r}")
