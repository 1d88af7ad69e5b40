"""Run folders that an accident cannot corrupt: resume checks, in place or a new folder, one writer, Ctrl-C.

A run folder ``<log_dir>/<family>-<scenario>-<algo>-<time>-<id>/`` holds, beside
``config.yaml``, ``progress.csv``, ``tb/`` and ``checkpoints/``:

* :data:`RUN_MARKER` (``marl_run.json``): marks a folder marl created (when, what);
* :data:`PARENT_FILE` (``parent.json``): in a run started from a checkpoint that is
  not the latest of its run (or a copy elsewhere), the run folder and checkpoint it
  started from, with their iteration and env steps;
* :data:`LOCK_FILE` (``marl.lock``), a ``filelock`` lock held by the one process
  writing the folder, and :data:`HOLDER_FILE` (``marl.lock.json``), who holds it
  (pid, host, start time, command). The operating system releases the lock when
  its process dies (``flock``), so a crashed run never blocks the folder.

``fit(resume=...)`` goes through :func:`open_resume` (checksum, then compatibility:
nothing is written before both pass) and :func:`open_run`: the run continues in the
checkpoint's own folder only when that checkpoint is the folder's latest; otherwise
a new folder records its parent and the source run is only read.
:class:`StopOnSignal` turns the first SIGINT / SIGTERM into "finish this iteration,
save, stop" and a second into an immediate abort.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import shlex
import shutil
import signal
import socket
import sys
import threading
import uuid
from contextlib import contextmanager
from dataclasses import dataclass
from inspect import signature
from pathlib import Path
from typing import TYPE_CHECKING, Any, Dict, Iterator, List, Optional

import yaml
from filelock import FileLock, Timeout

from marl.checkpoint import check_state, checkpoint_key, list_checkpoints, read_meta, reading, resolve_checkpoint
from marl.env import EnvInfo, spaces_equal
from marl.errors import MarlError

if TYPE_CHECKING:
    from marl.engine.trainer import Trainer

RUN_MARKER = "marl_run.json"
PARENT_FILE = "parent.json"
LOCK_FILE = "marl.lock"
HOLDER_FILE = "marl.lock.json"
_BOOKKEEPING = {RUN_MARKER, PARENT_FILE, LOCK_FILE, HOLDER_FILE}
_NOT_NETWORK = {"algo", "log_dir", "progress", "eval_episodes"}  # config keys left out of a failed restore's diff

# filelock >= 3.24 may fall back to a soft (file-exists) lock where flock is missing (some network
# file systems); such a lock outlives a killed process, so marl asks for the OS lock only where it can.
_NATIVE_ONLY: Dict[str, Any] = (
    {"fallback_to_soft": False} if "fallback_to_soft" in signature(FileLock.__init__).parameters else {}
)


def write_json(path: Path, obj: Any) -> None:
    """Write ``obj`` as JSON through a temporary file and ``os.replace``: readers see all or nothing."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(obj, indent=1, default=str))
    os.replace(tmp, path)


def write_yaml(path: Path, obj: Dict[str, Any]) -> None:
    """Write ``obj`` as YAML (keys in order) through a temporary file and ``os.replace``."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with open(tmp, "w") as f:
        yaml.safe_dump(obj, f, sort_keys=False)
    os.replace(tmp, path)


def is_run_folder(path: Path) -> bool:
    """``path`` is a marl run folder: it has :data:`RUN_MARKER`, or (runs written before the marker
    existed) a ``config.yaml`` beside a ``checkpoints/`` folder."""
    path = Path(path)
    return (path / RUN_MARKER).is_file() or ((path / "config.yaml").is_file() and (path / "checkpoints").is_dir())


# ============================================================ resume: what it reads, what must match
@dataclass
class ResumeSource:
    """A checked checkpoint to resume from.

    Attributes:
        checkpoint: the checkpoint folder (absolute).
        meta: its metadata (:func:`marl.checkpoint.read_meta`).
        run: the marl run folder that holds it, or ``None`` (a copy elsewhere).
        trusted: the user vouched for its source (``trust_checkpoint=True``): it is read
            without marl's limits (:func:`marl.checkpoint.reading`).
    """

    checkpoint: Path
    meta: Dict[str, Any]
    run: Optional[Path]
    trusted: bool = False

    def is_latest(self) -> bool:
        """The checkpoint is the latest of its run folder (by iteration, env steps)."""
        if self.run is None:
            return False
        found = list_checkpoints(self.run)
        return bool(found) and found[-1].resolve() == self.checkpoint

    def describe(self) -> Dict[str, Any]:
        metrics = self.meta.get("metrics") or {}
        it, steps = checkpoint_key(self.checkpoint)
        return {
            "run": str(self.run) if self.run else None,
            "checkpoint": str(self.checkpoint),
            "iteration": int(metrics.get("iteration", it)),
            "env_steps": int(metrics.get("env_steps", steps)),
        }


def open_resume(
    resume: str, algo: str, info: EnvInfo, agent_to_module: Dict[str, str], trust: bool = False
) -> ResumeSource:
    """Find, verify and check the checkpoint named by ``resume=``; writes nothing anywhere.

    Args:
        resume: a checkpoint folder or a run folder (its latest checkpoint).
        algo, info, agent_to_module: the new call's algorithm, ``EnvInfo`` and policy mapping.
        trust: read the checkpoint without marl's limits (``fit(trust_checkpoint=True)``).

    Raises:
        MarlError: no checkpoint there, a damaged one (names the file), a pickle outside the
            allowlist (without ``trust``), or one that does not match the call
            (:func:`compare_with_checkpoint`, every difference named).
    """
    ckpt = resolve_checkpoint(resume, trust=trust)
    meta = read_meta(ckpt, trust=trust)
    # the pickles RLlib's restore reads (its state files), against the allowlist, before Ray starts
    check_state(ckpt, trust, modules=False)
    diffs = compare_with_checkpoint(meta, algo, info, agent_to_module)
    if diffs:
        raise MarlError(
            f"Cannot resume from {ckpt}: it does not match this call (checkpoint vs now):\n  - "
            + "\n  - ".join(diffs)
            + "\nResume with the algorithm, env and policy mapping (share=, agent_id=) it was trained "
            "with, or start a new run without resume=."
        )
    parent = ckpt.parent.parent
    run = parent if ckpt.parent.name == "checkpoints" and is_run_folder(parent) else None
    return ResumeSource(ckpt, meta, run, trusted=trust)


def compare_with_checkpoint(
    meta: Dict[str, Any], algo: str, info: EnvInfo, agent_to_module: Dict[str, str]
) -> List[str]:
    """What differs between a checkpoint's metadata and a new call, one line each
    (``"<what>: <checkpoint's> vs <now>"``): algorithm, env family, scenario, agents,
    groups (agents, team, observation and action spaces by :func:`marl.env.spaces_equal`),
    state size and the policy mapping (agent -> module). Entries a checkpoint lacks are not compared."""
    diffs: List[str] = []

    def differ(what: str, old: Any, new: Any) -> None:
        if old != new:
            diffs.append(f"{what}: {old!r} vs {new!r}")

    differ("algorithm", meta.get("algo", algo), algo)
    old: Optional[EnvInfo] = meta.get("env_info")
    if old is not None:
        differ("env family", old.family, info.family)
        differ("scenario", old.scenario, info.scenario)
        differ("agents", list(old.agents), list(info.agents))
        differ("groups", list(old.groups), list(info.groups))
        for name in [g for g in old.groups if g in info.groups]:
            g0, g1 = old.groups[name], info.groups[name]
            differ(f"agents of group '{name}'", list(g0.agents), list(g1.agents))
            differ(f"team of group '{name}'", g0.team, g1.team)
            for what in ("obs_space", "action_space"):
                a, b = getattr(g0, what), getattr(g1, what)
                if not spaces_equal(a, b):
                    diffs.append(f"{what} of group '{name}': {a} vs {b}")
        differ("state size (state_dim)", old.state_dim, info.state_dim)
    saved = meta.get("agent_to_module")
    if saved is not None:
        moved = [
            f"{a}: {saved[a]!r} vs {agent_to_module[a]!r}"
            for a in saved
            if a in agent_to_module and saved[a] != agent_to_module[a]
        ]
        if moved:
            diffs.append("policy mapping (agent -> module): " + ", ".join(moved))
    return diffs


# ============================================================ one writer per run folder
class RunLock:
    """The lock of one run folder (``filelock``), with who holds it written beside it.

    Raises (from :meth:`acquire`):
        MarlError: another process holds it; the message names its pid, host, start
            time and command, and how to proceed.
    """

    def __init__(self, run_dir: Path):
        self.run_dir = Path(run_dir)
        self.holder_path = self.run_dir / HOLDER_FILE
        self._lock = FileLock(str(self.run_dir / LOCK_FILE), timeout=0, **_NATIVE_ONLY)

    def acquire(self) -> "RunLock":
        try:
            self._lock.acquire(timeout=0)
        except Timeout:
            raise MarlError(self._busy_message()) from None
        except OSError as e:  # e.g. ENOSYS: a file system without flock
            raise MarlError(
                f"Cannot lock run folder {self.run_dir} ({e}): its file system offers no lock that is "
                "released when a process dies. Put log_dir on a local disk."
            ) from e
        try:
            write_json(
                self.holder_path,
                {
                    "pid": os.getpid(),
                    "host": socket.gethostname(),
                    "started": _now(),
                    "command": shlex.join(sys.argv) or sys.executable,
                },
            )
        except BaseException:
            self._lock.release()
            raise
        return self

    def release(self) -> None:
        if not self._lock.is_locked:
            return
        if (self.holder() or {}).get("pid") == os.getpid():
            self.holder_path.unlink(missing_ok=True)
        self._lock.release()

    def holder(self) -> Optional[Dict[str, Any]]:
        """The holder's entry (pid, host, started, command), or ``None`` if none is readable."""
        try:
            return json.loads(self.holder_path.read_text())
        except (OSError, ValueError):
            return None

    def _busy_message(self) -> str:
        h = self.holder()
        if h is None:
            who = "another process (it wrote no holder entry)"
        else:
            gone = (
                "; that pid no longer runs here, so a process it started holds the lock"
                if h.get("host") == socket.gethostname() and not _alive(h.get("pid"))
                else ""
            )
            who = (
                f"pid {h.get('pid')} on host {h.get('host')}, started {h.get('started')}, "
                f"command: {h.get('command')}{gone}"
            )
        pid = h.get("pid") if h else "<pid>"
        return (
            f"Run folder {self.run_dir} is being written by another marl process: {who}. One process writes "
            f"a run folder at a time (lock {self.run_dir / LOCK_FILE}). Wait for that run to end, or stop it "
            f"(Ctrl-C in its terminal or `kill -INT {pid}`: it saves a checkpoint first) and resume again; "
            "to train a second run from the same checkpoint now, resume from a copy of the checkpoint "
            "folder placed outside this run folder (it starts a new run folder)."
        )

    def __enter__(self) -> "RunLock":
        return self.acquire()

    def __exit__(self, *exc: Any) -> None:
        self.release()


def _alive(pid: Any) -> bool:
    try:
        os.kill(int(pid), 0)
    except (OSError, ValueError, TypeError, OverflowError):
        return False
    return True


# ============================================================ the run folder of a fit
@dataclass
class RunFolder:
    """The folder a ``fit`` writes, locked for it.

    Attributes:
        path: the run folder.
        lock: its :class:`RunLock` (held).
        source: the checkpoint resumed from, or ``None``.
        in_place: the run continues in ``source``'s own folder (it was that folder's latest).
    """

    path: Path
    lock: RunLock
    source: Optional[ResumeSource] = None
    in_place: bool = False

    @property
    def protect(self) -> Optional[Path]:
        """The checkpoint pruning must keep: the one the run continued from, in place."""
        return self.source.checkpoint if self.in_place and self.source else None

    def discard_if_unused(self) -> None:
        """Remove a new run folder that holds nothing but marl's bookkeeping files (a resume that failed)."""
        if not self.in_place and {p.name for p in self.path.iterdir()} <= _BOOKKEEPING:
            shutil.rmtree(self.path, ignore_errors=True)

    def describe(self) -> str:
        if self.source is None:
            return f"logs: {self.path}"
        how = "continuing in place" if self.in_place else f"new run folder (parent in {PARENT_FILE})"
        return f"resumed from {self.source.checkpoint}, {how}; logs: {self.path}"


@contextmanager
def open_run(log_dir: str, info: EnvInfo, algo: str, source: Optional[ResumeSource] = None) -> Iterator[RunFolder]:
    """The locked run folder of a ``fit``; the lock is released when the block ends (also on errors).

    Without ``source`` a new folder under ``log_dir``. With ``source``, its own run folder when
    its checkpoint is the latest there (checked again once the lock is held); otherwise a new
    folder whose :data:`PARENT_FILE` names the source, which is never written. A new folder
    that holds only marl's bookkeeping files when the block fails is removed.

    Raises:
        MarlError: the folder to continue is locked by another process (:class:`RunLock`).
    """
    run = _continue_in_place(source) if source is not None else None
    if run is None:
        run = _new_run(Path(log_dir), info, algo, source)
    try:
        yield run
    except BaseException:
        run.discard_if_unused()  # a new folder the failed call wrote nothing into is not left behind
        raise
    finally:
        run.lock.release()


def _continue_in_place(source: ResumeSource) -> Optional[RunFolder]:
    folder = source.run
    if folder is None or not source.is_latest():  # (is_latest() is False without a run folder)
        return None
    lock = RunLock(folder).acquire()
    if not source.is_latest():  # another process saved a newer checkpoint before we held the lock
        lock.release()
        return None
    return RunFolder(folder, lock, source, in_place=True)


RUN_MODE = 0o750  # run folders: the owner writes, the group reads, others nothing (Ray's own are 0777)


def check_log_dir(log_dir: Path) -> None:
    """Refuse a ``log_dir`` where no run folder can be made (before Ray starts or anything is written).

    Raises:
        MarlError: ``log_dir`` (or the nearest existing folder above it) is a file, or a folder this
            process cannot write; the message names the path.
    """
    p = Path(log_dir).expanduser().absolute()
    probe = next((q for q in (p, *p.parents) if q.exists()), None)
    if probe is None:
        return
    if not probe.is_dir():
        what = "is a file" if probe == p else f"cannot be made: {probe} is a file"
        raise MarlError(f"log_dir '{log_dir}' {what}; give a folder for the run folders (log_dir=...).")
    # a folder without its owner's write bit is read-only on purpose, even for root (whom os.access lets write)
    if not os.access(probe, os.W_OK | os.X_OK) or not probe.stat().st_mode & 0o200:
        where = "" if probe == p else f" ({probe}, where it would be made)"
        raise MarlError(
            f"log_dir '{log_dir}' is read-only{where} (mode {probe.stat().st_mode & 0o777:o}); give a folder you can "
            "write (log_dir=...)."
        )


def _make_private_dir(path: Path) -> None:
    """``mkdir -p path``; every folder it makes is :data:`RUN_MODE` (not the umask's default)."""
    missing = [q for q in (path, *path.parents) if not q.exists()]
    path.mkdir(parents=True)
    for q in missing:
        os.chmod(q, RUN_MODE)


def _new_run(log_dir: Path, info: EnvInfo, algo: str, source: Optional[ResumeSource]) -> RunFolder:
    check_log_dir(log_dir)
    stamp = _dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    while True:  # never share a folder: a name taken by another run gets another suffix
        path = log_dir / f"{info.family}-{info.scenario}-{algo}-{stamp}-{uuid.uuid4().hex[:4]}"
        try:
            _make_private_dir(path)
            break
        except FileExistsError:
            continue
        except OSError as e:  # a race with the checks above, a read-only file system
            raise MarlError(f"Cannot make a run folder under log_dir '{log_dir}': {e}.") from e
    lock = RunLock(path).acquire()
    write_json(path / RUN_MARKER, {"created": _now(), "algo": algo, "env": f"{info.family}:{info.scenario}"})
    if source is not None:
        write_json(path / PARENT_FILE, source.describe())
    return RunFolder(path, lock, source, in_place=False)


def restore(trainer: Trainer, run: RunFolder, config: Dict[str, Any]) -> None:
    """Restore ``run.source``'s checkpoint into ``trainer`` (an RLlib ``Algorithm``).

    A failure (most often networks whose shapes differ: ``hidden``, ``layers``,
    ``recurrent``, ``agent``, ``agent_id``, ... changed since the checkpoint) becomes a
    MarlError listing the config keys that differ (:func:`open_run` then removes a new run
    folder, which holds only marl's bookkeeping files).

    Raises:
        MarlError: the checkpoint's state does not load (the cause is chained).
    """
    source = run.source
    assert source is not None, "restore() is for a run folder opened with a checkpoint to resume from"
    try:
        # RLlib's pickles through marl's allowlist (checked against it by open_resume)
        with reading(source.checkpoint, source.trusted, checked=True):
            trainer.restore_from_path(str(source.checkpoint))
    except MarlError:  # a pickle outside the allowlist, a damaged pickle: already worded
        raise
    except Exception as e:  # noqa: BLE001 - torch / RLlib errors of every kind, reworded below
        saved = source.meta.get("config") or {}
        changed = [
            f"{k}: {saved.get(k)!r} vs {config.get(k)!r}"
            for k in sorted(set(saved) | set(config))
            if k not in _NOT_NETWORK and saved.get(k) != config.get(k)
        ]
        first = (str(e).strip().splitlines() or [""])[0][:300]
        hint = (
            f"Config keys that differ from the checkpoint's (checkpoint vs now): {'; '.join(changed)}. Keys that "
            "shape the networks (hidden, layers, recurrent, agent, agent_id, ...) must keep the checkpoint's "
            "values."
            if changed
            else "No config key differs from the checkpoint's: it may come from another version of marl or be damaged."
        )
        raise MarlError(
            f"Cannot resume from {source.checkpoint}: its state does not load into this run "
            f"({type(e).__name__}: {first}). {hint}"
        ) from e


def _now() -> str:
    return _dt.datetime.now().isoformat(timespec="seconds")


# ============================================================ Ctrl-C / SIGTERM
class StopOnSignal:
    """While active (a ``with`` block in the main thread), the first SIGINT or SIGTERM sets
    :attr:`received` (the signal's name) so that the run stops after the current iteration;
    a second one raises ``KeyboardInterrupt`` at once. The previous handlers come back at
    the end of the block. Outside the main thread (where Python cannot set handlers) it does nothing.
    """

    SIGNALS = (signal.SIGINT, signal.SIGTERM)

    def __init__(self) -> None:
        self.received: Optional[str] = None
        self._previous: Dict[int, Any] = {}

    def __enter__(self) -> "StopOnSignal":
        if threading.current_thread() is threading.main_thread():
            self._previous = {s: signal.signal(s, self._handle) for s in self.SIGNALS}
        return self

    def __exit__(self, *exc: Any) -> None:
        self._restore()

    def _restore(self) -> None:
        for s, handler in self._previous.items():
            signal.signal(s, signal.SIG_DFL if handler is None else handler)  # None: set outside Python
        self._previous = {}

    def _handle(self, signum: int, frame: Any) -> None:
        name = signal.Signals(signum).name
        if self.received is not None:
            self._restore()
            raise KeyboardInterrupt(f"a second {name}")
        self.received = name
        try:  # os.write, not print: a handler may run while the main thread is inside print
            os.write(
                2,
                f"\n[marl] {name}: finishing this iteration, then saving a checkpoint "
                "(Ctrl-C again to abort at once)\n".encode(),
            )
        except OSError:  # no stderr: the stop goes on silently
            pass
