"""Checkpoints on disk: where they are, what marl writes beside RLlib's state, integrity and pruning.

A run folder holds ``checkpoints/checkpoint_<iteration:06d>/``; each is an RLlib
``Algorithm`` checkpoint plus :data:`META_FILE`, JSON (:mod:`marl.meta_json`) with what
``marl.load`` needs to act again without Ray: the algorithm name and config, the env spec
and ``EnvInfo``, the agent -> module table, the last metrics and the family's own entries
(``Trainer.checkpoint_meta``), and :data:`MANIFEST_FILE`, the iteration, env steps and a
sha256 checksum of every other file of the folder (RLlib's included), verified whenever a
checkpoint is loaded or resumed.

A checkpoint is written into a hidden ``.tmp-checkpoint_*`` folder and renamed into place
once complete, so a crash or a full disk while saving never leaves a half-written
``checkpoint_*`` (the temporary folder is removed when a write fails).

Reading runs no code from the checkpoint (docs/security.md): the metadata is JSON, and
RLlib's pickles are read through :class:`marl.safe_pickle.SafeUnpickler`, which refuses
any name a checkpoint's state does not need. The checksums detect damage, not tampering
(anyone can rewrite a manifest). ``trust=True`` (``trust_checkpoint=True`` in the public
calls) reads a checkpoint from a trusted source without these limits: one written before
marl had a manifest or JSON metadata (:data:`LEGACY_META_FILE`).
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import pickle
import shutil
import uuid
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, Dict, Iterable, Iterator, List, Optional, Tuple, cast

import torch

from marl.errors import MarlError
from marl.safe_pickle import TRUST_HINT, check_pickles, safe_load

if TYPE_CHECKING:
    from ray.rllib.core.rl_module.torch import TorchRLModule

    from marl.engine.trainer import Trainer

META_FILE = "marl_meta.json"
LEGACY_META_FILE = "marl_meta.pkl"  # marl's metadata before it was JSON: read only with trust=True
MANIFEST_FILE = "marl_manifest.json"
MODULES_DIR = Path("learner_group") / "learner" / "rl_module"  # one sub-folder per module id
_TMP_PREFIX = ".tmp-checkpoint_"


def is_checkpoint(path: Path) -> bool:
    """``path`` is a marl checkpoint folder (it has :data:`META_FILE`, :data:`LEGACY_META_FILE` or
    :data:`MANIFEST_FILE`)."""
    return any((path / f).is_file() for f in (META_FILE, LEGACY_META_FILE, MANIFEST_FILE))


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


def resolve_checkpoint(path: str, verify: bool = True, trust: bool = False) -> Path:
    """A checkpoint folder, or the latest checkpoint inside a run folder (absolute: RLlib reads
    relative paths as URIs); with ``verify`` its files are checked against its manifest
    (:func:`verify_checkpoint`, which ``trust`` lets pass a checkpoint without one).

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
        verify_checkpoint(ckpt, trust=trust)
    return ckpt


META_TYPES: Dict[str, Tuple[type, ...]] = {  # entry -> the types it may have (a missing entry is not checked)
    "algo": (str,),
    "config": (dict,),
    "agent_to_module": (dict,),
    "metrics": (dict,),
    "env_spec": (type(None),),  # and EnvSpec / EnvInfo, added in _check_meta (imports marl.env)
    "env_info": (type(None),),
}


def read_meta(checkpoint: Path, trust: bool = False) -> Dict[str, Any]:
    """The metadata entries of a checkpoint folder (:data:`META_FILE`, JSON).

    A checkpoint written before marl's metadata was JSON has :data:`LEGACY_META_FILE`, a pickle,
    read only with ``trust`` (unpickling it can run code).

    Raises:
        MarlError: the file is missing, unreadable or holds entries of the wrong type (a damaged
            checkpoint); a legacy pickle without ``trust`` (says how to trust or convert it).
    """
    checkpoint = Path(checkpoint)
    path = checkpoint / META_FILE
    if not path.is_file() and (checkpoint / LEGACY_META_FILE).is_file():
        return _check_meta(checkpoint, _read_legacy_meta(checkpoint, trust))
    try:
        from marl.meta_json import decode

        meta = decode(json.loads(path.read_text()), checkpoint)
    except FileNotFoundError:
        raise MarlError(f"Checkpoint {checkpoint} is damaged: its file '{META_FILE}' is missing.") from None
    except (OSError, ValueError, TypeError, KeyError, AttributeError, MarlError) as e:
        raise MarlError(
            f"Checkpoint {checkpoint} is damaged: its file '{META_FILE}' cannot be read ({type(e).__name__}: {e})."
        ) from e
    return _check_meta(checkpoint, meta)


def _read_legacy_meta(checkpoint: Path, trust: bool) -> Any:
    if not trust:
        raise MarlError(
            f"Checkpoint {checkpoint} was written by an older marl: its metadata '{LEGACY_META_FILE}' is a "
            f"pickle, which marl reads only when told the source is trusted. {TRUST_HINT} To convert it, resume "
            "from it once with trust_checkpoint=True: the checkpoints the new run writes are in the safe format."
        )
    try:
        with open(checkpoint / LEGACY_META_FILE, "rb") as f:
            return pickle.load(f)
    except (pickle.UnpicklingError, EOFError, ValueError, AttributeError, ImportError, IndexError) as e:
        raise MarlError(
            f"Checkpoint {checkpoint} is damaged: its file '{LEGACY_META_FILE}' cannot be read ({e})."
        ) from e


def _check_meta(checkpoint: Path, meta: Any) -> Dict[str, Any]:
    """``meta`` if it is a dict whose entries have the types :data:`META_TYPES` names; else a MarlError."""
    from marl.env import EnvInfo, EnvSpec

    if not isinstance(meta, dict):
        raise MarlError(f"Checkpoint {checkpoint} is damaged: its metadata is a {type(meta).__name__}, not a dict.")
    types = {**META_TYPES, "env_spec": (EnvSpec, type(None)), "env_info": (EnvInfo, type(None))}
    for key in ("algo", "agent_to_module"):
        if key not in meta:
            raise MarlError(f"Checkpoint {checkpoint} is damaged: its metadata has no entry '{key}'.")
    for key, want in types.items():
        if key in meta and not isinstance(meta[key], want):
            raise MarlError(
                f"Checkpoint {checkpoint} is damaged: its metadata entry '{key}' is a {type(meta[key]).__name__}, "
                f"expected {' or '.join(t.__name__ for t in want)}."
            )
    bad = {k: v for k, v in meta["agent_to_module"].items() if not (isinstance(k, str) and isinstance(v, str))}
    if bad:
        raise MarlError(
            f"Checkpoint {checkpoint} is damaged: its agent -> module table has entries that are not text: {bad!r:.200}."
        )
    meta.setdefault("config", {})  # none saved: the algorithm's defaults
    return meta


OBJECTS_DIR = "marl_objects"  # Hugging Face tokenizers of the metadata, one folder each (save_pretrained)


def write_meta(checkpoint: Path, meta: Dict[str, Any]) -> None:
    """Write :data:`META_FILE`: ``meta`` as JSON; an env spec with a value that has no JSON form
    (an object built in code) is written as ``None``; a tokenizer object goes to a folder of
    :data:`OBJECTS_DIR` (:mod:`marl.meta_json`)."""
    from marl.meta_json import NotJson, encode

    def save(obj: Any) -> str:
        rel = f"{OBJECTS_DIR}/{len(list((Path(checkpoint) / OBJECTS_DIR).glob('*')))}"
        obj.save_pretrained(str(Path(checkpoint) / rel))
        return rel

    body = {k: encode(v, strict=False, save=save) for k, v in meta.items() if k != "env_spec"}
    try:
        body["env_spec"] = encode(meta.get("env_spec"))
    except NotJson:
        body["env_spec"] = None
    (Path(checkpoint) / META_FILE).write_text(json.dumps(body, indent=1))


def state_pickles(checkpoint: Path, under: Optional[Path] = None, modules: bool = True) -> List[Path]:
    """The pickles RLlib reads when it restores ``checkpoint`` (``*state.pkl``) and, with ``modules``,
    when it builds one of its modules (every pickle under ``learner_group/learner/rl_module``: the
    class and constructor arguments too); only those ``under`` a sub-folder if given."""
    root = Path(checkpoint) / under if under is not None else Path(checkpoint)
    built = Path(checkpoint) / MODULES_DIR
    return sorted(p for p in root.rglob("*.pkl") if p.name.endswith("state.pkl") or (modules and built in p.parents))


def check_state(checkpoint: Path, trust: bool = False, under: Optional[Path] = None, modules: bool = True) -> None:
    """Unless ``trust``, check every pickle RLlib would read from ``checkpoint`` (or its part ``under``;
    ``modules``: :func:`state_pickles`) against the allowlist (:func:`marl.safe_pickle.check_pickles`),
    without using what they hold.

    Raises:
        marl.safe_pickle.UntrustedCheckpoint: a pickle names something outside the allowlist.
        MarlError: a pickle that cannot be read (a damaged checkpoint).
    """
    if not trust:
        check_pickles(Path(checkpoint), state_pickles(checkpoint, under, modules))


@contextmanager
def reading(
    checkpoint: Path, trust: bool = False, under: Optional[Path] = None, checked: bool = False
) -> Iterator[None]:
    """A block in which RLlib reads ``checkpoint``: unless ``trust``, its pickles are first checked
    (:func:`check_state`, skipped when the caller did so: ``checked``; a remote learner reads them
    too) and this process's RLlib reads them through :class:`~marl.safe_pickle.SafeUnpickler`.

    Raises:
        marl.safe_pickle.UntrustedCheckpoint: a pickle names something outside the allowlist.
        MarlError: a pickle that cannot be read (a damaged checkpoint).
    """
    if trust:
        yield
        return
    from marl.engine.rllib_seam import checkpoint_unpickling

    if not checked:
        check_state(checkpoint, trust, under)
    with checkpoint_unpickling(lambda f: safe_load(f, f"A file of checkpoint {checkpoint}")):
        yield


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


def verify_checkpoint(checkpoint: Path, trust: bool = False) -> None:
    """Check every file listed in the checkpoint's :data:`MANIFEST_FILE` (size, then sha256).

    Without a manifest a checkpoint is damaged, unless ``trust`` (a checkpoint written before
    marl had manifests has none); files added later (notes beside the checkpoint) are ignored.

    Raises:
        MarlError: the manifest is missing or unreadable, or a file is missing, truncated or
            changed; the message names the file and says the checkpoint is damaged.
    """
    checkpoint = Path(checkpoint)
    path = checkpoint / MANIFEST_FILE
    if not path.exists():
        if trust:
            return
        raise MarlError(
            f"Checkpoint {checkpoint} is damaged: its file '{MANIFEST_FILE}' is missing (marl writes one with "
            f"every checkpoint). For a checkpoint written by a marl older than manifests: {TRUST_HINT}"
        )
    try:
        files = json.loads(path.read_text())["files"]
        if not isinstance(files, dict):
            raise TypeError(f"'files' is a {type(files).__name__}")
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
    try:
        trainer.save_to_path(str(tmp))
        write_meta(tmp, {**meta, "metrics": trainer.last_metrics})
        write_manifest(tmp, it, steps)
        n = 0
        while path.exists():
            n += 1
            path = root / f"checkpoint_{it:06d}_{n}"
        os.rename(tmp, path)
    except OSError as e:  # a full disk, a quota, a folder made read-only: keep what was saved before
        shutil.rmtree(tmp, ignore_errors=True)
        last = list_checkpoints(run_dir)
        full = " (the disk is full)" if e.errno in (errno.ENOSPC, errno.EDQUOT) else ""
        raise MarlError(
            f"Cannot write checkpoint {path.name} of iteration {it}{full}: {e}. The partial checkpoint was "
            f"removed; last good checkpoint: {last[-1] if last else 'none'}. Free space under {root} and resume "
            "from it (fit(resume=...))."
        ) from e
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


def module_states(checkpoint: Path, mids: Iterable[str], trust: bool = False) -> Dict[str, Dict[str, torch.Tensor]]:
    """State dicts of modules ``mids`` saved in ``checkpoint`` (learner weights, no Ray needed),
    read as :func:`reading` reads (``trust``: without the allowlist).

    Raises:
        MarlError: a module id is not in the checkpoint (lists the ones that are); a pickle outside
            the allowlist (:class:`~marl.safe_pickle.UntrustedCheckpoint`).
    """
    from ray.rllib.core.rl_module.rl_module import RLModule

    root = Path(checkpoint).resolve() / MODULES_DIR
    saved = sorted(p.name for p in root.iterdir() if p.is_dir()) if root.is_dir() else []
    out = {}
    for mid in mids:
        if mid not in saved:
            raise MarlError(f"Module '{mid}' is not in checkpoint {checkpoint} (it has: {', '.join(saved) or 'none'}).")
        with reading(checkpoint, trust, MODULES_DIR / mid):
            # marl's modules are torch RLModules (RLlib types from_checkpoint as the framework-free base)
            out[mid] = cast("TorchRLModule", RLModule.from_checkpoint(str(root / mid))).state_dict()
    return out


def load_module(checkpoint: Path, mid: str, trust: bool = False) -> TorchRLModule:
    """The RLModule ``mid`` of a checkpoint, rebuilt from its own saved spec, in eval mode
    (read as :func:`reading` reads)."""
    from ray.rllib.core.rl_module.rl_module import RLModule

    checkpoint = Path(checkpoint).resolve()
    with reading(checkpoint, trust, MODULES_DIR / mid):
        module = cast("TorchRLModule", RLModule.from_checkpoint(str(checkpoint / MODULES_DIR / mid)))
    module.eval()
    return module
