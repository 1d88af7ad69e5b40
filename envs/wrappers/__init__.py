"""Env wrappers for any batched :class:`~marl.env.MultiAgentEnv` (installed as ``marl.envs.wrappers``)."""
from marl.envs.wrappers.offbeat import ActionRecord, OffBeatWrapper  # noqa: F401
from marl.envs.wrappers.crash import CrashWrapper  # noqa: F401
