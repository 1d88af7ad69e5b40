"""Checkpoints on disk: where they are, what marl writes beside RLlib's state, and pruning.

A run folder holds ``checkpoints/checkpoint_<iteration:06d>/``; each is an RLlib
``Algorithm`` checkpoint plus :data:`META_FILE`, a pickle with what ``marl.load``
needs to act again without Ray: the algorithm name and config, the env spec and
``EnvInfo``, the agent -> module table, the last metrics and the family's own
entries (``Trainer.checkpoint_meta``). Checkpoints are pickles: load only those
from a source you trust.
"""
from __future__ import annotations

import pickle
import shutil
from pathlib import Path
from typing import Any, Dict, Iterable

import torch

from marl.errors import MarlError

META_FILE = "marl_meta.pkl"
MODULES_DIR = Path("learner_group") / "learner" / "rl_module"  # one sub-folder per module id


def resolve_checkpoint(path: str) -> Path:
    """A checkpoint folder, or the latest checkpoint inside a run folder (absolute: RLlib reads
    relative paths as URIs).

    Raises:
        MarlError: no marl checkpoint at ``path``.
    """
    p = Path(path).resolve()
    if (p / META_FILE).exists():
        return p
    cands = sorted((p / "checkpoints").glob("checkpoint_*")) if (p / "checkpoints").is_dir() else []
    cands = [c for c in cands if (c / META_FILE).exists()]
    if not cands:
        raise MarlError(f"No marl checkpoint at '{path}' (expected '{META_FILE}' or a run folder with checkpoints/).")
    return cands[-1]


def read_meta(checkpoint: Path) -> Dict[str, Any]:
    """The :data:`META_FILE` entries of a checkpoint folder."""
    with open(Path(checkpoint) / META_FILE, "rb") as f:
        return pickle.load(f)


def save_checkpoint(trainer, run_dir: Path, meta: Dict[str, Any], keep: int) -> Path:
    """Write ``checkpoints/checkpoint_<iteration>`` of ``trainer`` with its :data:`META_FILE`, then
    delete all but the newest ``keep`` checkpoints (``keep`` <= 0 keeps all). Returns the new path."""
    it = trainer.progress["iterations"]
    path = Path(run_dir) / "checkpoints" / f"checkpoint_{it:06d}"
    trainer.save_to_path(str(path.resolve()))
    with open(path / META_FILE, "wb") as f:
        pickle.dump({**meta, "metrics": trainer.last_metrics}, f)
    old = sorted((Path(run_dir) / "checkpoints").glob("checkpoint_*"))[:-keep] if keep > 0 else []
    for p in old:
        shutil.rmtree(p, ignore_errors=True)
    return path


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
        out[mid] = RLModule.from_checkpoint(str(root / mid)).state_dict()
    return out


def load_module(checkpoint: Path, mid: str):
    """The RLModule ``mid`` of a checkpoint, rebuilt from its own saved spec, in eval mode."""
    from ray.rllib.core.rl_module.rl_module import RLModule

    module = RLModule.from_checkpoint(str(Path(checkpoint).resolve() / MODULES_DIR / mid))
    module.eval()
    return module
