"""Reading the pickles of a checkpoint without running code from it.

RLlib keeps an ``Algorithm``'s state as pickles (``algorithm_state.pkl``, ``state.pkl``,
``module_state.pkl``; an RLModule's class and constructor arguments in
``class_and_ctor_args.pkl``). Unpickling calls whatever callable a pickle names, so a
pickle written by someone else can run any code (``os.system``, ``builtins.exec``...).
:class:`SafeUnpickler` resolves only the names a marl checkpoint's state is made of
(:data:`ALLOWED`, found by reading every global of real MAPPO and QMIX checkpoints)
and refuses any other with :class:`UntrustedCheckpoint`; a torch tensor inside such a
pickle is read with ``torch.load(weights_only=True)`` instead of torch's own nested,
unrestricted pickle.

The list is what a checkpoint needs, not a sandbox: the classes in it are data
containers, spaces and RL modules whose constructors build networks. A checkpoint from
a source the user trusts can be read without it (``trust_checkpoint=True``).
"""

from __future__ import annotations

import dataclasses
import io
import pickle
from pathlib import Path
from typing import Any, Dict, FrozenSet, Iterable

from marl.errors import MarlError

_NUMPY_CORE = {"_reconstruct", "scalar", "_frombuffer"}
_SPACES = {
    "gymnasium.spaces.box": {"Box"},
    "gymnasium.spaces.discrete": {"Discrete"},
    "gymnasium.spaces.multi_discrete": {"MultiDiscrete"},
    "gymnasium.spaces.multi_binary": {"MultiBinary"},
    "gymnasium.spaces.tuple": {"Tuple"},
    "gymnasium.spaces.dict": {"Dict"},
    "gymnasium.spaces.text": {"Text"},  # text games' observation and action spaces
}

#: module -> names a checkpoint's pickles may use; anything else is refused.
ALLOWED: Dict[str, FrozenSet[str]] = {
    k: frozenset(v)
    for k, v in {
        # containers and plain values (no builtins function: getattr, eval, exec, open, __import__ ...)
        "builtins": {"set", "frozenset", "bytearray", "complex", "slice", "range", "list", "dict", "tuple"},
        "_codecs": {"encode"},  # protocol 2 writes bytes as _codecs.encode(str, "latin1")
        "collections": {"OrderedDict", "defaultdict", "deque", "Counter"},
        # numpy arrays, scalars, dtypes and random generator states (the ctor functions map a
        # bit-generator *name* to numpy's own class)
        "numpy": {"dtype", "ndarray"},
        "numpy._core.multiarray": _NUMPY_CORE,
        "numpy._core.numeric": _NUMPY_CORE,
        "numpy.core.multiarray": _NUMPY_CORE,
        "numpy.core.numeric": _NUMPY_CORE,
        "numpy.random._pickle": {"__bit_generator_ctor", "__generator_ctor", "__randomstate_ctor"},
        # torch tensors (storages are read back with weights_only=True, see SafeUnpickler)
        "torch._utils": {"_rebuild_tensor_v2", "_rebuild_parameter"},
        "torch.storage": {"_load_from_bytes"},
        "torch": {"device", "Size"},
        **_SPACES,
        # marl's sampling state (marl.engine.resume): steps and running episode statistics
        "marl.env.contract": {"Step", "EpisodeStats", "EnvInfo", "GroupInfo", "ExtraColumn"},
        # an RLModule checkpoint's class and constructor arguments
        "ray.rllib.core.rl_module.multi_rl_module": {"MultiRLModule", "MultiRLModuleSpec"},
        "ray.rllib.core.rl_module.rl_module": {"RLModuleSpec"},
    }.items()
}
#: package prefix -> (module, class): subclasses of that class defined in the package are allowed too:
#: marl's RLModules, and the Hugging Face model configs an LLM module is built from (plain attributes).
SUBCLASSES = {
    "marl.": ("ray.rllib.core.rl_module.rl_module", "RLModule"),
    "transformers.": ("transformers", "PretrainedConfig"),
}
#: packages whose dataclasses (records of fields, e.g. JaxMARL's SMAX ``State``) may appear in an env's
#: saved state (``MultiAgentEnv.get_state``, in ``algorithm_state.pkl``); marl's own records too.
DATACLASS_PACKAGES = ("marl.", "jaxmarl.")


def _torch_storage_from_bytes(b: bytes) -> Any:
    """What ``torch.storage._load_from_bytes`` does, with torch's restricted unpickler."""
    import torch

    try:
        return torch.load(io.BytesIO(b), weights_only=True)
    except pickle.UnpicklingError as e:  # torch's allowlist refused a global of the nested pickle
        first = (str(e).strip().splitlines() or [""])[0][:200]
        raise UntrustedCheckpoint(
            f"A torch tensor in a checkpoint file holds a pickle that torch's weights-only reader refuses ({first}); "
            f"refused. {TRUST_HINT}"
        ) from e


class UntrustedCheckpoint(MarlError, pickle.UnpicklingError):
    """A checkpoint's pickle names something a checkpoint's state never needs (it could run code)."""


TRUST_HINT = (
    "If you trust where this checkpoint comes from, load it with trust_checkpoint=True "
    "(marl.load(path, trust_checkpoint=True), fit(resume=..., trust_checkpoint=True), "
    "`marl eval <path> --trust-checkpoint`): unpickling a file from an untrusted source can run any code "
    "(docs/security.md)."
)


class SafeUnpickler(pickle.Unpickler):
    """A ``pickle.Unpickler`` that resolves only :data:`ALLOWED` names and marl's RLModule classes.

    Args:
        file: a binary file object.
        source: what the message names when a global is refused (the file's path).

    Raises (from ``load``):
        UntrustedCheckpoint: the pickle names any other global (module and name in the message).
    """

    def __init__(self, file: Any, source: str = "a checkpoint file"):
        super().__init__(file)
        self.source = source

    def find_class(self, module: str, name: str) -> Any:
        if (module, name) == ("torch.storage", "_load_from_bytes"):
            return _torch_storage_from_bytes
        if name in ALLOWED.get(module, ()):
            return super().find_class(module, name)
        if _allowed_subclass(module, name):
            return super().find_class(module, name)
        raise UntrustedCheckpoint(
            f"{self.source} asks to load '{module}.{name}', which marl does not load from a checkpoint "
            f"(it could run code); refused. {TRUST_HINT}"
        )


def _allowed_subclass(module: str, name: str) -> bool:
    """``module.name`` is a class of :data:`SUBCLASSES` (importing a module of that package, not running
    anything the pickle chose)."""
    import importlib

    base = next((b for prefix, b in SUBCLASSES.items() if module.startswith(prefix)), None)
    records = module.startswith(DATACLASS_PACKAGES)
    if base is None and not records:
        return False
    try:
        obj = getattr(importlib.import_module(module), name)
        parent = getattr(importlib.import_module(base[0]), base[1]) if base else None
    except (ImportError, AttributeError):
        return False
    if not isinstance(obj, type):
        return False
    return (parent is not None and issubclass(obj, parent)) or (records and dataclasses.is_dataclass(obj))


def safe_load(file: Any, source: str = "a checkpoint file") -> Any:
    """``pickle.load(file)`` through :class:`SafeUnpickler`."""
    return SafeUnpickler(file, source).load()


def check_pickles(checkpoint: Path, files: Iterable[Path]) -> None:
    """Unpickle each of ``files`` with :class:`SafeUnpickler` and discard the result: after this, a
    reader anywhere (a remote learner restoring its state) reads only allowed names.

    Raises:
        UntrustedCheckpoint: a file names a global outside the allowlist (the file is named).
        MarlError: a file is not a readable pickle (the checkpoint is damaged).
    """
    for f in files:
        rel = f.relative_to(checkpoint)
        try:
            with open(f, "rb") as fh:
                safe_load(fh, f"Checkpoint {checkpoint}: file '{rel}'")
        except UntrustedCheckpoint:
            raise
        except Exception as e:  # noqa: BLE001 - truncated/garbled pickles raise many kinds
            raise MarlError(
                f"Checkpoint {checkpoint} is damaged: its file '{rel}' cannot be read ({type(e).__name__}: {e})."
            ) from e
