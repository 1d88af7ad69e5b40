"""Helpers of the run-folder tests: file snapshots, checkpoints without Ray, Ray processes of a temp dir."""
from __future__ import annotations

import hashlib
import os
import pickle
from pathlib import Path
from typing import Dict, List, Tuple

from marl.checkpoint import META_FILE, write_manifest
from marl.rundir import RUN_MARKER, write_json

TESTS = Path(__file__).resolve().parent
QUICK = dict(progress=False, eval_episodes=0, rollout_length=5, epochs=1)  # MatchEnv(num_envs=4): 20 steps/iteration


def snapshot(root: Path) -> Dict[str, Tuple[int, int, str]]:
    """Every file under ``root``: relative path -> (size, mtime in ns, sha256); equal snapshots = nothing written."""
    out = {}
    for p in sorted(Path(root).rglob("*")):
        if p.is_file():
            st = p.stat()
            out[str(p.relative_to(root))] = (st.st_size, st.st_mtime_ns, hashlib.sha256(p.read_bytes()).hexdigest())
    return out


class FakeTrainer:
    """Just enough of a Trainer for :func:`marl.checkpoint.save_checkpoint` (writes one small file)."""

    def __init__(self, fail: bool = False):
        self.progress = {"iterations": 0, "env_steps": 0}
        self.last_metrics: Dict[str, float] = {}
        self.fail = fail

    def advance(self, iterations: int = 1, steps_per_iteration: int = 20) -> "FakeTrainer":
        self.progress["iterations"] += iterations
        self.progress["env_steps"] += iterations * steps_per_iteration
        self.last_metrics = {"iteration": self.progress["iterations"], "env_steps": self.progress["env_steps"]}
        return self

    def save_to_path(self, path: str) -> None:
        Path(path).mkdir(parents=True)
        (Path(path) / "algorithm_state.pkl").write_bytes(pickle.dumps(dict(self.progress)))
        if self.fail:
            raise OSError("disk full")


def fake_checkpoint(run: Path, iteration: int, meta: Dict, env_steps: int = 0, manifest: bool = True) -> Path:
    """A checkpoint folder with a metadata pickle (no RLlib state) inside run folder ``run``."""
    path = Path(run) / "checkpoints" / f"checkpoint_{iteration:06d}"
    path.mkdir(parents=True)
    with open(path / META_FILE, "wb") as f:
        pickle.dump({**meta, "metrics": {"iteration": iteration, "env_steps": env_steps}}, f)
    if manifest:
        write_manifest(path, iteration, env_steps)
    if not (Path(run) / RUN_MARKER).exists():
        write_json(Path(run) / RUN_MARKER, {"created": "test"})
    return path


def ray_processes(tmp_root: str) -> List[str]:
    """Command lines of live processes that mention ``tmp_root`` (a ``RAY_TMPDIR``: that Ray's daemons and workers)."""
    found = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit() or int(pid) == os.getpid():
            continue
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            state = next((line for line in Path(f"/proc/{pid}/status").read_text().splitlines()
                          if line.startswith("State:")), "")
        except OSError:
            continue
        if tmp_root in cmd and "zombie" not in state:
            found.append(f"{pid}: {cmd[:200]}")
    return found
