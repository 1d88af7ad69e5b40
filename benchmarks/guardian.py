"""A guardian process that ends every process a ``marl benchmark run`` driver started once the driver dies.

Ray already ties its head processes (GCS server, raylet) to the process that called ``ray.init``
(``PR_SET_PDEATHSIG``, Linux ``prctl(2)``), but not what those start in turn: after a SIGKILL of
the driver, Ray 2.60's ``DashboardAgent`` and ``RuntimeEnvAgent`` were measured alive 20 s later
(their parent, the raylet, gone), and a run's Ray worker lives on for a few seconds. A SIGKILL
cannot be caught, so the driver cannot clean up itself; instead :func:`guarded` starts this module
as a separate process, in its own session (a terminal's Ctrl-C does not reach it), with a pipe from
the driver on its standard input, and the guardian:

1. every 0.5 s, while the driver lives, records the driver's descendants (parent links in
   ``/proc/<pid>/stat``) with their start times, so it still knows them once they have been
   handed to another parent (about 1% of a core: 5 ms of CPU per look at 150 processes);
2. on end of file on the pipe (the kernel closes it when the driver exits, however it exits,
   SIGKILL included) kills (SIGKILL) every recorded process that still runs (same pid and start
   time), the live descendants of those, and every process whose environment carries the
   driver's tag ``MARL_BENCHMARK_DRIVER`` (set before Ray starts, inherited by every later
   process; a second net, since a process that rewrites its title with ``setproctitle``, as Ray's
   do, may overwrite its environment block), until none is left; then exits.

A process born less than 0.5 s before the driver died, whose parent died with it and whose
environment block is overwritten, can escape; Ray's workers exit on their own once the raylet is
gone (measured: within 5 s). Linux only (``/proc``); elsewhere :func:`guarded` starts nothing.
This file imports nothing of marl, so the guardian is up in milliseconds.
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Dict, Iterator, Optional, Set, Tuple

TAG_VAR = "MARL_BENCHMARK_DRIVER"
_POLL_S = 0.5  # how often the guardian records the driver's descendants (5 ms of CPU a poll, 150 processes)
_ROUNDS = 50  # sweeps until no process is left (0.1 s apart)

Proc = Tuple[int, int]  # (pid, start time in clock ticks after boot): a pid reused later is another process


def processes() -> Dict[Proc, int]:
    """``{(pid, start time): parent pid}`` of every process (``/proc/<pid>/stat``, fields 4 and 22)."""
    out = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:  # exited while we looked
            continue
        fields = stat[stat.rindex(")") + 2 :].split()  # after "pid (command)", which may hold spaces
        out[(int(entry.name), int(fields[19]))] = int(fields[1])
    return out


def descendants(roots: Set[int], table: Dict[Proc, int], spare: Set[Proc] = frozenset()) -> Set[Proc]:
    """The processes of ``table`` (:func:`processes`) below any pid of ``roots``, at any depth, except
    those of ``spare`` and everything below them."""
    children: Dict[int, Set[Proc]] = {}
    for proc, ppid in table.items():
        children.setdefault(ppid, set()).add(proc)
    found: Set[Proc] = set()
    todo = list(roots)
    while todo:
        for proc in children.get(todo.pop(), ()):
            if proc not in found and proc not in spare:
                found.add(proc)
                todo.append(proc[0])
    return found


def tagged(tag: str, var: str = TAG_VAR) -> Set[int]:
    """Pids of the processes whose environment's ``var`` holds ``tag`` (a comma-separated list:
    a driver started by a tagged process adds its own tag), this process excepted. Linux ``/proc``."""
    want = tag.encode()
    prefix = var.encode() + b"="
    found = set()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            environ = (entry / "environ").read_bytes()
        except OSError:  # gone, or another user's
            continue
        for item in environ.split(b"\0"):
            if item.startswith(prefix) and want in item[len(prefix) :].split(b","):
                found.add(int(entry.name))
    return found


def sweep(tag: str, known: Set[Proc]) -> int:
    """SIGKILL the processes of ``known`` that still run, their descendants and the processes tagged
    ``tag``, until none is left; returns how many were killed."""
    killed: Set[int] = set()
    for _ in range(_ROUNDS):
        table = processes()
        alive = {p for p in known if p in table}
        pids = {p[0] for p in alive | descendants({p[0] for p in alive}, table)} | tagged(tag)
        pids.discard(os.getpid())
        if not pids:
            break
        for pid in pids:
            with contextlib.suppress(OSError):  # it exited meanwhile
                os.kill(pid, signal.SIGKILL)
        killed |= pids
        time.sleep(0.1)
    return len(killed)


@contextlib.contextmanager
def guarded() -> Iterator[Optional[str]]:
    """Tag the processes started inside the block and guard them: when this process dies (or the
    block ends) the guardian kills whatever of them is still alive. Yields the tag (``None`` off Linux).

    The tag is restored in ``os.environ`` afterwards, so a caller's later subprocesses are not tagged.
    """
    if not sys.platform.startswith("linux"):
        yield None
        return
    tag = f"{os.getpid()}-{uuid.uuid4().hex[:12]}"
    old = os.environ.get(TAG_VAR)
    guardian = subprocess.Popen(
        [sys.executable, str(Path(__file__).resolve()), str(os.getpid()), tag],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        start_new_session=True,  # not in the terminal's process group: Ctrl-C and a group kill miss it
        close_fds=True,
    )
    assert guardian.stdout is not None
    guardian.stdout.readline()  # "ready" (or end of file if it failed): what starts from here is watched
    os.environ[TAG_VAR] = f"{old},{tag}" if old else tag
    try:
        yield tag
    finally:
        if old is None:
            os.environ.pop(TAG_VAR, None)
        else:
            os.environ[TAG_VAR] = old
        assert guardian.stdin is not None
        guardian.stdin.close()  # what the kernel does when this process dies: the guardian sweeps
        with contextlib.suppress(subprocess.TimeoutExpired):
            guardian.wait(timeout=30)


def watch(driver: int) -> Set[Proc]:
    """Record the descendants of ``driver`` every :data:`_POLL_S` s until end of file on stdin (the
    driver closed the pipe or died); returns every one recorded.

    Processes that were already there when the watch began (this guardian, a Ray the caller of
    :func:`marl.benchmark` started earlier, and what those start later) are spared: they are not the
    benchmark's. "ready" on stdout tells the driver that the watch has begun.
    """
    spare = descendants({driver}, processes())
    print("ready", flush=True)
    known: Set[Proc] = set()
    stdin = sys.stdin.buffer
    while True:
        known |= descendants({driver}, processes(), spare)
        ready, _, _ = select.select([stdin], [], [], _POLL_S)
        if ready and not os.read(stdin.fileno(), 4096):
            return known


def main(argv: list) -> int:
    """``python guardian.py <driver pid> <tag>``: watch the driver, then sweep what it left."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # only the driver's end matters
    sweep(argv[2], watch(int(argv[1])))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
