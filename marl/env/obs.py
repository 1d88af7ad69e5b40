"""Structured observations: the helpers every layer uses for image ``Box`` and ``Dict`` observation spaces.

A group's observation space is a 1-D ``Box`` (flat: float32 ``[B, N_g, obs_dim]``) or structured: a
``Box`` of another rank (an image ``[H, W, C]``) or a ``gym.spaces.Dict`` of Boxes, whose tensors are
``[B, N_g, *shape]`` in the space's dtype (uint8 stays uint8) or a dict of them (docs/observations.md).
:func:`map_obs` is the one tree-map over such values; :func:`flatten_columns` / :func:`nest_columns`
turn a structured column into flat ``"obs/<key>"`` columns (RLlib's ``SampleBatch``, the replay
buffers) and back.

This module imports nothing of marl.
"""

from __future__ import annotations

from typing import Any, Callable, Dict, cast

import gymnasium as gym
import numpy as np
import torch

OBS_KEY = "obs"  # the key a structured Box observation takes where a dict of keys is needed


def is_structured(space: gym.spaces.Space) -> bool:
    """``space`` is a structured observation space: a ``Dict``, or a ``Box`` whose rank is not 1
    (1-D Boxes are marl's flat observations, float32 ``[B, N, obs_dim]``)."""
    return isinstance(space, gym.spaces.Dict) or (isinstance(space, gym.spaces.Box) and len(space.shape) != 1)


def obs_leaves(space: gym.spaces.Space) -> Dict[str, gym.spaces.Box]:
    """The Boxes of an observation space by key: a ``Dict``'s own (in its key order), ``{OBS_KEY: box}``
    for a ``Box``. Spaces are checked by :func:`marl.env.check_env` (rule ``spaces``), not here."""
    if isinstance(space, gym.spaces.Dict):
        return {k: cast(gym.spaces.Box, b) for k, b in space.spaces.items()}
    return {OBS_KEY: cast(gym.spaces.Box, space)}


def obs_dtype(box: gym.spaces.Space, structured: bool = True) -> torch.dtype:
    """The torch dtype of observation tensors of ``box``: ``uint8`` for a uint8 Box of a structured space
    (images stay bytes: a quarter of float32's memory), float32 otherwise (flat 1-D Boxes always)."""
    if structured and np.dtype(getattr(box, "dtype", np.float32)) == np.uint8:
        return torch.uint8
    return torch.float32


def obs_dtypes(space: gym.spaces.Space) -> Dict[str, torch.dtype]:
    """Key -> torch dtype of an observation space's tensors (:func:`obs_leaves`, :func:`obs_dtype`)."""
    structured = is_structured(space)
    return {k: obs_dtype(b, structured) for k, b in obs_leaves(space).items()}


def map_obs(fn: Callable[..., Any], obs: Any, *rest: Any) -> Any:
    """``fn`` applied to an observation tensor, or key by key to a dict of them (with the same keys of
    each of ``rest``): the one tree-map every layer (rollouts, replay, minibatches) uses for structured
    observations. ``None`` stays ``None``."""
    if obs is None:
        return None
    if isinstance(obs, dict):
        return {k: map_obs(fn, v, *(r[k] for r in rest)) for k, v in obs.items()}
    return fn(obs, *rest)


def flatten_columns(cols: Dict[str, Any], sep: str = "/") -> Dict[str, Any]:
    """Nested columns (a structured ``"obs"``: key -> array) as flat ones, ``"obs/image"`` ... (the form
    RLlib's ``SampleBatch`` and the replay buffers' arrays keep); :func:`nest_columns` inverts it."""
    out: Dict[str, Any] = {}
    for k, v in cols.items():
        if isinstance(v, dict):
            out.update({f"{k}{sep}{kk}": vv for kk, vv in v.items()})
        else:
            out[k] = v
    return out


def nest_columns(cols: Dict[str, Any], sep: str = "/") -> Dict[str, Any]:
    """Inverse of :func:`flatten_columns`: ``"obs/image"``, ``"obs/vector"`` -> ``"obs": {image, vector}``
    (key order kept)."""
    out: Dict[str, Any] = {}
    for k, v in cols.items():
        if sep in k:
            head, tail = k.split(sep, 1)
            out.setdefault(head, {})[tail] = v
        else:
            out[k] = v
    return out
