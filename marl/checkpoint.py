"""Checkpoints on disk: where they are, what marl writes beside RLlib's state, integrity and pruning.

A run folder holds ``checkpoints/checkpoint_<iteration:06d>/``; each is an RLlib
``Algorithm`` checkpoint plus :data:`META_FILE`, a pickle with what ``marl.load``
needs to act again without Ray: the algorithm name and config, the env spec and
``EnvInfo``, the agent -> module table, the last metrics and the family's own
entries (``Trainer.checkpoint_meta``), and :data:`MANIFEST_FILE`, the iteration,
env steps and a sha256 checksum of every other file of the folder (RLlib's
included), verified whenever a checkpoint is loaded or resumed.

A checkpoint is written into a hidden ``.tmp-checkpoint_*`` folder and renamed
into place once complete, so a crash while saving never leaves a half-written
``checkpoint_*``. Checkpoints are pickles: load only those from a source you trust
(a checksum detects damage, not tampering).
"""

from __future__ import annotations

import hashlib
import json
import os
import pickle
import shutil
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any, Dict, Iterable, List, Optional, Tuple, cast

import torch

from marl.errors import MarlError

if TYPE_CHECKING:
    from ray.rllib.core.rl_module.torch import TorchRLModule

    from marl.engine.trainer import Trainer

META_FILE = "marl_meta.pkl"
MANIFEST_FILE = "marl_manifest.json"
MODULES_DIR = Path("learner_group") / "learner" / "rl_module"  # one sub-folder per module id
_TMP_PREFIX = ".tmp-checkpoint_"


def is_checkpoint(path: Path) -> bool:
    """``path`` is a marl checkpoint folder (it has :data:`META_FILE` or :data:`MANIFEST_FILE`)."""
    return (path / META_FILE).is_file() or (path / MANIFEST_FILE).is_file()


def checkpoint_key(path: Path) -> Tuple[int, int]:
    """``(iteration, env_steps)`` of a checkpoint folder, the order of checkpoints in a run.

    Read from :data:`MANIFEST_FILE`; a checkpoint written before marl had one gives the
    iteration of its name (``checkpoint_<iteration>``) and env steps 0. Names are not
    sorted as text: ``checkpoint_1000000`` comes after ``checkpoint_999999``.
    """
    try:
        m = json.loads((path / MANIFEST_FILE).read_text())
        return int(m["iteration"]), int(m["env_steps"])
    except (OSError, ValueError, KeyError, TypeError):
        digits = path.name.removeprefix("checkpoint_").split("_")[0]
        return (int(digits) if digits.isdigit() else -1), 0


def list_checkpoints(run_dir: Path) -> List[Path]:
    """The checkpoints of a run folder, oldest first (by :func:`checkpoint_key`)."""
    root = Path(run_dir) / "checkpoints"
    found = [p for p in root.glob("checkpoint_*") if p.is_dir() and is_checkpoint(p)] if root.is_dir() else []
    return sorted(found, key=lambda p: (checkpoint_key(p), p.name))


def resolve_checkpoint(path: str, verify: bool = True) -> Path:
    """A checkpoint folder, or the latest checkpoint inside a run folder (absolute: RLlib reads
    relative paths as URIs); with ``verify`` its files are checked against its manifest
    (:func:`verify_checkpoint`).

    Raises:
        MarlError: no marl checkpoint at ``path``, or a damaged one (names the file).
    """
    p = Path(path).expanduser().resolve()
    if not p.exists():
        raise MarlError(f"No marl checkpoint at '{path}': the path does not exist.")
    if is_checkpoint(p):
        ckpt = p
    else:
        cands = list_checkpoints(p)
        if not cands:
            raise MarlError(
                f"No marl checkpoint at '{path}' (expected '{META_FILE}' or a run folder with checkpoints/)."
            )
        ckpt = cands[-1]
    if verify:
        verify_checkpoint(ckpt)
    return ckpt


def read_meta(checkpoint: Path) -> Dict[str, Any]:
    """The :data:`META_FILE` entries of a checkpoint folder.

    Raises:
        MarlError: the file is missing or cannot be unpickled (a damaged checkpoint).
    """
    path = Path(checkpoint) / META_FILE
    try:
        with open(path, "rb") as f:
            return pickle.load(f)
    except FileNotFoundError:
        raise MarlError(f"Checkpoint {checkpoint} is damaged: its file '{META_FILE}' is missing.") from None
    except (pickle.UnpicklingError, EOFError, ValueError) as e:
        raise MarlError(f"Checkpoint {checkpoint} is damaged: its file '{META_FILE}' cannot be read ({e}).") from e


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _files(checkpoint: Path) -> List[str]:
    return sorted(
        str(p.relative_to(checkpoint)) for p in checkpoint.rglob("*") if p.is_file() and p.name != MANIFEST_FILE
    )


def write_manifest(checkpoint: Path, iteration: int, env_steps: int) -> None:
    """Write :data:`MANIFEST_FILE`: the checkpoint's iteration, env steps and, per file
    (path relative to the folder), its size in bytes and sha256 (FIPS 180-4)."""
    checkpoint = Path(checkpoint)
    files = {
        rel: {"bytes": (checkpoint / rel).stat().st_size, "sha256": _sha256(checkpoint / rel)}
        for rel in _files(checkpoint)
    }
    body = {"format": 1, "iteration": int(iteration), "env_steps": int(env_steps), "files": files}
    (checkpoint / MANIFEST_FILE).write_text(json.dumps(body, indent=1))


def verify_checkpoint(checkpoint: Path) -> None:
    """Check every file listed in the checkpoint's :data:`MANIFEST_FILE` (size, then sha256).

    A checkpoint written before marl had manifests has none and passes unchecked;
    files added later (notes beside the checkpoint) are ignored.

    Raises:
        MarlError: the manifest is unreadable, or a file is missing, truncated or
            changed; the message names the file and says the checkpoint is damaged.
    """
    checkpoint = Path(checkpoint)
    path = checkpoint / MANIFEST_FILE
    if not path.exists():
        return
    try:
        files = json.loads(path.read_text())["files"]
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise MarlError(f"Checkpoint {checkpoint} is damaged: its file '{MANIFEST_FILE}' cannot be read ({e}).") from e
    for rel, want in files.items():
        f = checkpoint / rel
        if not f.is_file():
            raise MarlError(f"Checkpoint {checkpoint} is damaged: file '{rel}' is missing.")
        size = f.stat().st_size
        if size != want["bytes"]:
            raise MarlError(
                f"Checkpoint {checkpoint} is damaged: file '{rel}' has {size} bytes, "
                f"{want['bytes']} were written{' (truncated)' if size < want['bytes'] else ''}."
            )
        if _sha256(f) != want["sha256"]:
            raise MarlError(f"Checkpoint {checkpoint} is damaged: file '{rel}' does not match its sha256 checksum.")


def save_checkpoint(
    trainer: Trainer, run_dir: Path, meta: Dict[str, Any], keep: int, protect: Optional[Path] = None
) -> Path:
    """Write ``checkpoints/checkpoint_<iteration>`` of ``trainer`` with its :data:`META_FILE` and
    :data:`MANIFEST_FILE`, then prune (:func:`prune_checkpoints`). Returns the new path.

    The folder is written under a temporary name and renamed when complete. An existing
    checkpoint is never overwritten: ``protect`` (the one the run resumed from) at the same
    iteration is returned as is; any other folder of that name gets a new one beside it.
    """
    root = Path(run_dir).resolve() / "checkpoints"
    it, steps = int(trainer.progress["iterations"]), int(trainer.progress["env_steps"])
    path = root / f"checkpoint_{it:06d}"
    if protect is not None and path == Path(protect).resolve():
        return path  # resumed and trained no further: the checkpoint of this iteration exists
    for stale in root.glob(_TMP_PREFIX + "*"):  # left by a crash while saving (one writer per run: not another's)
        shutil.rmtree(stale, ignore_errors=True)
    tmp = root / f"{_TMP_PREFIX}{it:06d}-{uuid.uuid4().hex[:8]}"
    trainer.save_to_path(str(tmp))
    with open(tmp / META_FILE, "wb") as f:
        pickle.dump({**meta, "metrics": trainer.last_metrics}, f)
    write_manifest(tmp, it, steps)
    n = 0
    while path.exists():
        n += 1
        path = root / f"checkpoint_{it:06d}_{n}"
    os.rename(tmp, path)
    prune_checkpoints(run_dir, keep, newest=path, protect=protect)
    return path


def prune_checkpoints(run_dir: Path, keep: int, newest: Path, protect: Optional[Path] = None) -> List[Path]:
    """Delete all but the ``keep`` latest checkpoints up to ``newest`` (``keep`` <= 0 keeps all).

    Checkpoints are ordered by :func:`checkpoint_key` (iteration, env steps). Never
    deleted: ``newest``, ``protect`` (the checkpoint the run resumed from) and any
    checkpoint later than ``newest`` (e.g. left in the folder by another run).
    Returns the deleted paths.
    """
    if keep <= 0:
        return []
    newest = Path(newest).resolve()
    limit = checkpoint_key(newest)
    older = [p.resolve() for p in list_checkpoints(run_dir) if checkpoint_key(p) <= limit]
    older = [p for p in older if p != newest]
    spare = {newest, Path(protect).resolve() if protect is not None else None}
    doomed = [p for p in older[: max(0, len(older) - (keep - 1))] if p not in spare]
    for p in doomed:
        shutil.rmtree(p, ignore_errors=True)
    return doomed


def module_states(checkpoint: Path, mids: Iterable[str]) -> Dict[str, Dict[str, torch.Tensor]]:
    """State dicts of modules ``mids`` saved in ``checkpoint`` (learner weights, no Ray needed).

    Raises:
        MarlError: a module id is not in the checkpoint (lists the ones that are).
    """
    from ray.rllib.core.rl_module.rl_module import RLModule

    root = Path(checkpoint).resolve() / MODULES_DIR
    saved = sorted(p.name for p in root.iterdir() if p.is_dir()) if root.is_dir() else []
    out = {}
    for mid in mids:
        if mid not in saved:
            raise MarlError(f"Module '{mid}' is not in checkpoint {checkpoint} (it has: {', '.join(saved) or 'none'}).")
        # marl's modules are torch RLModules (RLlib types from_checkpoint as the framework-free base)
        out[mid] = cast("TorchRLModule", RLModule.from_checkpoint(str(root / mid))).state_dict()
    return out


def load_module(checkpoint: Path, mid: str) -> TorchRLModule:
    """The RLModule ``mid`` of a checkpoint, rebuilt from its own saved spec, in eval mode."""
    from ray.rllib.core.rl_module.rl_module import RLModule

    module = cast("TorchRLModule", RLModule.from_checkpoint(str(Path(checkpoint).resolve() / MODULES_DIR / mid)))
    module.eval()
    return module
