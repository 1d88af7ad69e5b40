"""marl's checkpoint metadata as JSON: what :func:`marl.load` needs, with nothing that runs code when read.

The metadata holds plain values (the config, metrics, the agent -> module table) and a few
records: :class:`~marl.env.EnvInfo` with its :class:`~marl.env.contract.GroupInfo` and
:class:`~marl.env.contract.ExtraColumn` entries, :class:`~marl.env.EnvSpec`, gymnasium spaces,
numpy arrays and torch dtypes. Each record is a JSON object with a tag (``"__record__"``,
``"__space__"``, ``"__ndarray__"``, ``"__tuple__"``, ``"__items__"``, ``"__torch_dtype__"``);
reading rebuilds only the classes named in :data:`RECORDS` and :data:`SPACES`, never one the
file names by module.

Hugging Face objects an LLM run is configured with are kept in files that load without code: a
model config as its ``to_dict()`` (a dict with ``model_type``, which ``from_config`` takes), a
tokenizer through ``save_pretrained`` into a folder of the checkpoint (``{"__pretrained__":
"<folder>"}``, read back as that folder's path for ``from_pretrained``). Any other value that has no
JSON form (an object built in code) is written as ``{"__unsaved__": "<type>"}`` and read back as ``None``; an env spec with such a
value is not written at all (``None``: a loaded policy then acts on the saved ``EnvInfo``, and
``evaluate`` needs the env passed in).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, Callable, Dict, Optional, Type, cast

import gymnasium as gym
import numpy as np
import torch

from marl.env import EnvInfo, EnvSpec
from marl.env.contract import ExtraColumn, GroupInfo

RECORDS: Dict[str, Type[Any]] = {c.__name__: c for c in (EnvInfo, GroupInfo, ExtraColumn, EnvSpec)}
SPACES: Dict[str, Type[gym.Space]] = {
    c.__name__: c
    for c in (
        gym.spaces.Box,
        gym.spaces.Discrete,
        gym.spaces.MultiDiscrete,
        gym.spaces.MultiBinary,
        gym.spaces.Tuple,
        gym.spaces.Dict,
        gym.spaces.Text,
    )
}


class NotJson(TypeError):
    """A value with no JSON form in :func:`encode`."""


def encode(x: Any, strict: bool = True, save: Optional[Callable[[Any], str]] = None) -> Any:
    """``x`` as JSON values (see the module docstring).

    Args:
        save: writes a Hugging Face tokenizer into the checkpoint and returns its folder (relative);
            ``None``: tokenizers have no JSON form.

    Raises:
        NotJson: with ``strict``, a value of another type (without: it becomes ``{"__unsaved__": type}``).
    """
    enc: Callable[[Any], Any] = lambda v: encode(v, strict, save)  # noqa: E731
    if x is None or isinstance(x, (bool, str)):
        return x
    if isinstance(x, (int, float, np.integer, np.floating, np.bool_)):
        return x.item() if isinstance(x, np.generic) else x
    if isinstance(x, dict):
        if all(isinstance(k, str) and not k.startswith("__") for k in x):
            return {k: enc(v) for k, v in x.items()}
        return {"__items__": [[enc(k), enc(v)] for k, v in x.items()]}
    if isinstance(x, list):
        return [enc(v) for v in x]
    if isinstance(x, tuple):
        return {"__tuple__": [enc(v) for v in x]}
    if isinstance(x, np.ndarray):
        return {"__ndarray__": x.tolist(), "dtype": str(x.dtype), "shape": list(x.shape)}
    if isinstance(x, torch.dtype):
        return {"__torch_dtype__": str(x).removeprefix("torch.")}
    if type(x).__name__ in SPACES and isinstance(x, SPACES[type(x).__name__]):
        return {"__space__": type(x).__name__, **{k: enc(v) for k, v in _space_args(x).items()}}
    if type(x).__name__ in RECORDS and isinstance(x, RECORDS[type(x).__name__]):
        fields = {f.name: enc(getattr(x, f.name)) for f in dataclasses.fields(x)}
        return {"__record__": type(x).__name__, "fields": fields}
    if type(x).__module__.startswith("transformers."):
        if hasattr(x, "model_type") and hasattr(x, "to_dict"):  # a PretrainedConfig
            return enc(x.to_dict())
        if save is not None and hasattr(x, "save_pretrained"):  # a tokenizer: JSON files of its own
            return {"__pretrained__": save(x)}
    if strict:
        raise NotJson(f"{type(x).__name__} {x!r:.80}")
    return {"__unsaved__": type(x).__name__}


def _space_args(s: gym.Space) -> Dict[str, Any]:
    if isinstance(s, gym.spaces.Box):
        return {"low": s.low, "high": s.high, "dtype": str(s.dtype)}
    if isinstance(s, gym.spaces.Discrete):
        return {"n": int(s.n), "start": int(s.start)}
    if isinstance(s, gym.spaces.MultiDiscrete):
        return {"nvec": s.nvec, "dtype": str(s.dtype)}
    if isinstance(s, gym.spaces.MultiBinary):
        return {"n": s.n}
    if isinstance(s, gym.spaces.Tuple):
        return {"spaces": list(s.spaces)}
    if isinstance(s, gym.spaces.Text):
        return {"max_length": s.max_length, "min_length": s.min_length, "charset": s.characters}
    return {"spaces": dict(cast(gym.spaces.Dict, s).spaces)}


def decode(x: Any, root: Optional[Path] = None) -> Any:
    """The value :func:`encode` wrote (records and spaces rebuilt through their constructors);
    ``root``: the checkpoint folder a ``__pretrained__`` folder is relative to.

    Raises:
        ValueError, TypeError, KeyError: a malformed or unknown tag, fields a record does not take, or a
            ``__pretrained__`` folder outside ``root`` (the caller reports the checkpoint as damaged).
    """
    if isinstance(x, list):
        return [decode(v, root) for v in x]
    if not isinstance(x, dict):
        return x
    if "__tuple__" in x:
        return tuple(decode(v, root) for v in x["__tuple__"])
    if "__items__" in x:
        return {decode(k, root): decode(v, root) for k, v in x["__items__"]}
    if "__pretrained__" in x:
        return _inside(root, x["__pretrained__"])
    if "__ndarray__" in x:
        return np.asarray(x["__ndarray__"], dtype=np.dtype(x["dtype"])).reshape(x["shape"])
    if "__torch_dtype__" in x:
        dtype = getattr(torch, x["__torch_dtype__"])
        if not isinstance(dtype, torch.dtype):
            raise ValueError(f"not a torch dtype: {x['__torch_dtype__']!r}")
        return dtype
    if "__unsaved__" in x:
        return None
    if "__space__" in x:
        return _space(x)
    if "__record__" in x:
        return RECORDS[x["__record__"]](**{k: decode(v, root) for k, v in x["fields"].items()})
    return {k: decode(v, root) for k, v in x.items()}


def _inside(root: Optional[Path], rel: str) -> str:
    """``root / rel`` as text, if it is a folder inside ``root`` (a checkpoint names only its own files)."""
    if root is None:
        raise ValueError("a saved object folder needs the checkpoint folder")
    path = (Path(root) / rel).resolve()
    if Path(root).resolve() not in path.parents or not path.is_dir():
        raise ValueError(f"saved object folder {rel!r} is not a folder inside the checkpoint")
    return str(path)


def _space(x: Dict[str, Any]) -> gym.Space:
    kind = x["__space__"]
    args = {k: decode(v) for k, v in x.items() if k != "__space__"}
    if kind == "Box":
        return gym.spaces.Box(low=args["low"], high=args["high"], dtype=np.dtype(args["dtype"]))
    if kind == "MultiDiscrete":
        return gym.spaces.MultiDiscrete(args["nvec"], dtype=np.dtype(args["dtype"]))
    return SPACES[kind](**args)
