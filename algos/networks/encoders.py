"""Observation encoders: structured observations (images, dicts of keys) -> one feature vector per agent.

Every algorithm family reads structured observations the same way
(docs/observations.md): an :class:`ObsEncoder` encodes each key of the observation
with the encoder registered for it and concatenates the outputs, ``[..., F]``, before
the agent network (PPO's actor and IPPO's observation critic, the Q-networks of
IQL / VDN / QMIX). Per key, by the rank of its ``Box``:

* rank 3 (an image ``[H, W, C]``, channels last): ``cnn``, the "Nature CNN" of Mnih et
  al. 2015 ("Human-level control through deep reinforcement learning", Nature 518,
  Methods: conv 32 8x8 stride 4, 64 4x4 stride 2, 64 3x3 stride 1, ReLU, fully connected
  512) for images of at least :data:`NATURE_MIN` pixels a side; smaller images (5x5,
  11x11, 16x16 grid views) get :data:`SMALL_CNN` (32 3x3 stride 2, 64 3x3 stride 2, fully
  connected 128). A kernel larger than what is left of the image is clipped to it (stride 1),
  so every configured stack fits every image;
* any other rank (a vector, a 2-D map): ``mlp``, flattened, then the ``hidden`` layers
  (none by default: the values pass through to the agent network, which has its own MLP).

uint8 values are scaled into [0, 1] by the ``Box``'s ``high`` inside the encoder, so buffers keep
the bytes: ``1/255`` for pixels (as the Nature DQN's preprocessing); feature planes that declare
smaller bounds per element (Overcooked's 0/1 planes and 0..20 counters) are divided by those, since
1/255 would shrink a 0/1 plane to 0.004 (IPPO then stayed at random play on Overcooked, docs/envs.md). The layers come from the algorithm config's ``encoder`` key
(``{"cnn": {"channels": [...], "kernels": [...], "strides": [...], "fc": [...]}, "mlp":
{"hidden": [...]}}``, checked by :func:`marl.algos.networks.config.check_encoder`); a
research encoder replaces one with :func:`register_encoder`.
"""

from __future__ import annotations

from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

import gymnasium as gym
import numpy as np
import torch
from torch import nn

from marl.algos.networks.base import AgentNetwork
from marl.algos.networks.config import NATURE_CNN, SMALL_CNN
from marl.env import MarlError, map_obs, obs_leaves
from marl.errors import unknown_choice

NATURE_MIN = 36  # the smallest side the Nature stack convolves without clipping (36 -> 8 -> 3 -> 1)
Builder = Callable[[gym.spaces.Box, Mapping[str, Any]], nn.Module]
_ENCODERS: Dict[str, Builder] = {}


def register_encoder(name: str, build: Builder) -> None:
    """Make ``name`` (``"cnn"`` for rank-3 keys, ``"mlp"`` for the others) build ``build(box, spec)``:
    an ``nn.Module`` mapping ``[M, *box.shape]`` (float32, uint8 already scaled) to ``[M, out_dim]``,
    with an ``out_dim`` attribute; ``spec`` is the config's ``encoder[name]`` dict (maybe empty)."""
    _ENCODERS[name] = build


def encoder_kind(box: gym.spaces.Box) -> str:
    """The encoder a key gets: ``"cnn"`` for a rank-3 Box (an image ``[H, W, C]``), ``"mlp"`` otherwise."""
    return "cnn" if len(box.shape) == 3 else "mlp"


def fit_layers(size: Tuple[int, int], kernels: Sequence[int], strides: Sequence[int]) -> List[Tuple[int, int]]:
    """``(kernel, stride)`` of each conv layer on an image of ``size = (H, W)``: a kernel larger than the
    side left is clipped to it, with stride 1, so a stack never convolves past the image.

    Example: Nature's (8, 4), (4, 2), (3, 1) on 11x11 -> (8, 4), (1, 1), (1, 1) (11 -> 1 -> 1 -> 1)."""
    out, side = [], min(size)
    for k, s in zip(kernels, strides):
        if k > side:
            k, s = side, 1
        out.append((int(k), int(s)))
        side = (side - k) // s + 1
    return out


def relu_layers(d: int, widths: Sequence[int]) -> Tuple[List[nn.Module], int]:
    """``Linear(d, w_1), ReLU, Linear(w_1, w_2), ReLU, ...`` for ``widths``; returns the modules and the last width
    (``d`` when ``widths`` is empty)."""
    mods: List[nn.Module] = []
    for width in widths:
        mods += [nn.Linear(d, int(width)), nn.ReLU()]
        d = int(width)
    return mods, d


class ImageCNN(nn.Module):
    """``[M, H, W, C]`` (channels last, float) -> ``[M, fc[-1]]``: conv layers (ReLU), flatten, fc layers (ReLU).

    Args:
        shape: ``(H, W, C)``; channels, kernels, strides: one per conv layer; fc: widths of the fully
            connected layers after the convolutions (empty: the flattened conv output).
    """

    def __init__(
        self,
        shape: Sequence[int],
        channels: Sequence[int],
        kernels: Sequence[int],
        strides: Sequence[int],
        fc: Sequence[int],
    ):
        super().__init__()
        H, W, C = (int(x) for x in shape)
        mods: List[nn.Module] = []
        for ch, (k, s) in zip(channels, fit_layers((H, W), kernels, strides)):
            mods += [nn.Conv2d(C, int(ch), k, s), nn.ReLU()]
            C = int(ch)
        self.conv = nn.Sequential(*mods, nn.Flatten())
        with torch.no_grad():
            d = int(self.conv(torch.zeros(1, int(shape[2]), H, W)).shape[-1])
        head, self.out_dim = relu_layers(d, fc)
        self.fc = nn.Sequential(*head)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(self.conv(x.permute(0, 3, 1, 2)))


def build_cnn(box: gym.spaces.Box, spec: Mapping[str, Any]) -> ImageCNN:
    """The ``cnn`` encoder of an image key: ``spec``'s layers, else :data:`NATURE_CNN` for images of at
    least :data:`NATURE_MIN` pixels a side and :data:`SMALL_CNN` for smaller ones."""
    default = NATURE_CNN if min(box.shape[:2]) >= NATURE_MIN else SMALL_CNN
    layers = {**default, **spec}
    return ImageCNN(box.shape, layers["channels"], layers["kernels"], layers["strides"], layers["fc"])


class VectorMLP(nn.Module):
    """``[M, *shape]`` -> ``[M, out_dim]``: flattened, then ``hidden`` layers with ReLU (none: identity)."""

    def __init__(self, shape: Sequence[int], hidden: Sequence[int] = ()):
        super().__init__()
        layers, self.out_dim = relu_layers(int(np.prod(shape)), hidden)
        self.net = nn.Sequential(nn.Flatten(), *layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


def build_mlp(box: gym.spaces.Box, spec: Mapping[str, Any]) -> VectorMLP:
    """The ``mlp`` encoder of a vector (or other non-image) key: ``spec["hidden"]`` layers (default none)."""
    return VectorMLP(box.shape, spec.get("hidden", ()))


def uint8_scale(box: gym.spaces.Box) -> Any:
    """What a uint8 key is multiplied by to lie in [0, 1]: ``1/high`` for a uniform ``high`` (a float;
    ``1/255`` for pixels), else a float32 tensor of ``box.shape`` with ``1/high`` per element (a bound
    below 1 counts as 1). ``None`` for other dtypes, which are fed as they are."""
    if np.dtype(box.dtype) != np.uint8:
        return None
    high = np.maximum(np.broadcast_to(np.asarray(box.high, np.float64), box.shape), 1.0)
    if (high == high.flat[0]).all():
        return 1.0 / float(high.flat[0])
    return torch.from_numpy((1.0 / high).astype(np.float32))


def module_names(keys: Sequence[str]) -> Dict[str, str]:
    """Observation key -> the name of its encoder in a ``ModuleDict``, which refuses names holding a '.':
    the key itself where it can (so checkpoints keep their parameter names), else the key with '_' for
    each '.' (and its position appended if another key already has that name), e.g. ``"a.b" -> "a_b"``."""
    names: Dict[str, str] = {}
    for i, k in enumerate(keys):
        name = k.replace(".", "_") if "." in k else k
        if name in names.values() or (name != k and name in keys):
            name = f"{name}_{i}"
        names[k] = name
    return names


class ObsEncoder(nn.Module):
    """A structured observation -> ``[..., out_dim]`` features: each key encoded by its encoder
    (:func:`encoder_kind`), uint8 keys scaled into [0, 1] by their ``Box``'s ``high`` (:func:`uint8_scale`),
    outputs concatenated in key order.

    Args:
        space: a ``gym.spaces.Dict`` of Boxes (or one Box, read under the key ``"obs"``).
        spec: the config's ``encoder`` dict: encoder name -> its layers (missing: defaults).
    Input: key -> ``[*lead, *shape_k]`` (any leading dims, the same for every key). Output: ``[*lead, out_dim]``.
    Raises:
        MarlError: a key's encoder is not registered (names the key and the registered encoders).
    """

    def __init__(self, space: gym.spaces.Space, spec: Optional[Mapping[str, Any]] = None):
        super().__init__()
        spec = dict(spec or {})
        self.leaves = obs_leaves(space)
        self.ranks = {k: len(b.shape) for k, b in self.leaves.items()}
        self.scale_buffer: Dict[str, str] = {}  # uint8 key -> the name of its scale buffer
        for i, (k, b) in enumerate(self.leaves.items()):
            scale = uint8_scale(b)
            if scale is not None:  # a buffer moves with the module; not persistent: checkpoints stay as they were
                self.scale_buffer[k] = f"uint8_scale_{i}"  # by position: a key may hold a '.'
                self.register_buffer(
                    self.scale_buffer[k], torch.as_tensor(scale, dtype=torch.float32), persistent=False
                )
        nets = {}
        self.module_name = module_names(list(self.leaves))  # obs key -> its net's name in ``nets``
        for k, box in self.leaves.items():
            kind = encoder_kind(box)
            if kind not in _ENCODERS:
                raise unknown_choice(f"encoder of observation key '{k}'", kind, list(_ENCODERS))
            nets[self.module_name[k]] = _ENCODERS[kind](box, dict(spec.get(kind) or {}))
        self.nets = nn.ModuleDict(nets)
        self.out_dim = sum(int(n.out_dim) for n in nets.values())

    def forward(self, obs: Any) -> torch.Tensor:
        if not isinstance(obs, dict):
            obs = {"obs": obs}
        parts = []
        for k, name in self.module_name.items():
            net, x = self.nets[name], obs[k]
            lead = x.shape[: x.dim() - self.ranks[k]]
            x = x.reshape(-1, *x.shape[len(lead) :]).float()
            if k in self.scale_buffer:
                x = x * getattr(self, self.scale_buffer[k])
            parts.append(net(x).reshape(*lead, -1))
        return torch.cat(parts, -1)


class Encoded(nn.Module):
    """``body(encoder(obs))``: a network on vectors (e.g. IPPO's observation critic) fed a structured observation."""

    def __init__(self, encoder: ObsEncoder, body: nn.Module):
        super().__init__()
        self.encoder, self.body = encoder, body

    def forward(self, obs: Any) -> torch.Tensor:
        return self.body(self.encoder(obs))


class EncodedAgent(AgentNetwork):
    """An agent network (``inner``, the registry's, on vectors of ``encoder.out_dim``) behind an
    :class:`ObsEncoder`: the agent-network protocol (:mod:`marl.algos.networks.base`) on structured
    inputs, key -> ``[M, (L,) *shape_k]``. Padding steps of :meth:`sequence` are encoded, then the
    inner network skips or zeroes them as it does for vectors."""

    skips_padding = False  # the packed path of value decomposition gathers vector rows: encode first

    def __init__(self, encoder: ObsEncoder, inner: AgentNetwork):
        super().__init__()
        self.encoder, self.inner = encoder, inner
        self.state_size = inner.state_size

    def initial_state(self, batch_shape):
        return self.inner.initial_state(batch_shape)

    def forward(self, x, h0=None, starts=None):
        return self.inner(self.encoder(x), h0, starts)

    def step(self, x, h=None):
        return self.inner.step(self.encoder(x), h)

    def unroll(self, x, h0=None, starts=None):
        return self.inner.unroll(self.encoder(x), h0, starts)

    def sequence(self, x, lengths=None):
        return self.inner.sequence(self.encoder(x), lengths)


def leading(obs: Any) -> Tuple[int, ...]:
    """The leading dims ``[B, N]`` of a module observation (a tensor ``[B, N, D]`` or a dict of keys)."""
    first = next(iter(obs.values())) if isinstance(obs, dict) else obs
    return tuple(first.shape[:2])


def rows_of(obs: Any, n: int = 2) -> Any:
    """A module observation with its first ``n`` dims merged into one (``[B, N, ...] -> [B*N, ...]``),
    key by key for a structured one; a flat ``[B, N, D]`` becomes ``[B*N, D]`` as before."""
    return map_obs(lambda t: t.reshape(-1, *t.shape[n:]), obs)


def with_key(obs: Dict[str, torch.Tensor], key: str, value: torch.Tensor) -> Dict[str, torch.Tensor]:
    """A copy of a structured observation with one more vector key (e.g. the last action one-hot)."""
    if key in obs:
        raise MarlError(f"the observation already has a key '{key}'; rename it in the env.")
    return {**obs, key: value}


register_encoder("cnn", build_cnn)
register_encoder("mlp", build_mlp)
