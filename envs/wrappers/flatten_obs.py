"""``make_env(..., flatten_obs=True)``: structured observations flattened into one float32 vector per agent.

marl keeps image and dict observations structured end to end (docs/observations.md): uint8 images
stay bytes in buffers and each key gets its own encoder. This wrapper is the opt-out, for networks that
read vectors only (HPN / ASN, a plugin's MLP) or to compare against the structured path: every
structured group's observation (a ``Box`` of any rank, or a ``Dict`` of Boxes) becomes a 1-D float32
``Box`` of ``obs_dim`` values, the keys in the space's order, each flattened row-major (C order) and
cast to float32 (uint8 values keep their 0..255 scale). Flat groups are passed through unchanged.
"""

from __future__ import annotations

import copy
import dataclasses
from typing import Any, Dict, Optional

import gymnasium as gym
import numpy as np
import torch

from marl.env import MarlError, MultiAgentEnv, Step, Wrapper, obs_leaves


def flat_space(space: gym.spaces.Space) -> gym.spaces.Box:
    """The 1-D float32 ``Box`` of a structured space: bounds of each key flattened and concatenated."""
    leaves = obs_leaves(space).values()
    low = np.concatenate([np.asarray(b.low, np.float32).reshape(-1) for b in leaves])
    high = np.concatenate([np.asarray(b.high, np.float32).reshape(-1) for b in leaves])
    return gym.spaces.Box(low, high, dtype=np.float32)


def flatten(obs: Any) -> torch.Tensor:
    """A structured group observation ``[B, N, *shape]`` (or key -> such) -> ``[B, N, obs_dim]`` float32."""
    parts = obs.values() if isinstance(obs, dict) else [obs]
    return torch.cat([p.reshape(*p.shape[:2], -1).float() for p in parts], -1)


class FlattenObs(Wrapper):
    """Structured observations of ``env`` as 1-D float32 vectors (module docstring); shapes
    ``obs[g]``, ``final_obs[g]``: ``[B, N_g, obs_dim_g]``."""

    def __init__(self, env: MultiAgentEnv):
        super().__init__(env)
        info = copy.copy(env.info)
        info.groups = {
            name: dataclasses.replace(g, obs_space=flat_space(g.obs_space)) if g.structured else g
            for name, g in env.info.groups.items()
        }
        self.info = info
        self._flat = [name for name, g in env.info.groups.items() if g.structured]

    def _convert(self, step: Step) -> Step:
        fields: Dict[str, Any] = {}
        for field in ("obs", "final_obs"):
            per_group = getattr(step, field)
            if per_group is not None:
                fields[field] = {g: flatten(v) if g in self._flat else v for g, v in per_group.items()}
        return dataclasses.replace(step, **fields)

    def reset(self, seed: Optional[int] = None) -> Step:
        return self._convert(self.env.reset(seed=seed))

    def step(self, actions: Dict[str, torch.Tensor]) -> Step:
        return self._convert(self.env.step(actions))


def wrap_flatten_obs(env: MultiAgentEnv, options: Any, seed: Optional[int] = None) -> MultiAgentEnv:
    """The ``flatten_obs=`` option of :func:`marl.env.make_env`: ``True`` wraps ``env`` in :class:`FlattenObs`,
    ``False`` leaves it as it is.

    Raises:
        MarlError: ``options`` is not a bool.
    """
    if not isinstance(options, bool):
        raise MarlError(f"flatten_obs must be True or False, got {options!r}.")
    return FlattenObs(env) if options else env
