"""One writer per run folder: a second process is refused with the holder's pid, host, start time and
command; the lock dies with its process (no stale lock); fit checks it before Ray starts."""

import os
import signal
import socket
import subprocess
import sys
import time

import pytest

import marl.api as api
from marl.api import prepare
from marl.errors import MarlError
from marl.rundir import HOLDER_FILE, LOCK_FILE, RunLock
from run_helpers import QUICK, fake_checkpoint, snapshot
from toy_envs import MatchEnv

HOLD = """
import sys, time
from marl.rundir import RunLock
lock = RunLock(sys.argv[1]).acquire()
print("locked", flush=True)
time.sleep(600)
"""


@pytest.fixture
def holder(tmp_path):
    """A separate process holding the lock of ``tmp_path`` (killed at the end)."""
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(tmp_path), "--tag=holder"], stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout.readline().strip() == "locked"
    yield proc
    if proc.poll() is None:
        proc.kill()
        proc.wait()


def test_second_process_is_refused_with_the_holder_named(tmp_path, holder):
    with pytest.raises(MarlError) as e:
        RunLock(tmp_path).acquire()
    msg = str(e.value)
    assert f"pid {holder.pid} on host {socket.gethostname()}, started 20" in msg
    assert "--tag=holder" in msg and f"kill -INT {holder.pid}" in msg and "resume from a copy" in msg
    assert str(tmp_path / LOCK_FILE) in msg


def test_a_killed_holder_leaves_no_stale_lock(tmp_path, holder):
    holder.send_signal(signal.SIGKILL)
    holder.wait()
    with RunLock(tmp_path) as lock:  # the OS released the dead process's flock
        assert lock.holder()["pid"] == os.getpid()
    assert not (tmp_path / HOLDER_FILE).exists() and (tmp_path / LOCK_FILE).exists()


def test_same_process_second_lock_is_refused_and_release_frees_it(tmp_path):
    first = RunLock(tmp_path).acquire()
    with pytest.raises(MarlError, match=f"pid {os.getpid()} on host"):
        RunLock(tmp_path).acquire()
    first.release()
    RunLock(tmp_path).acquire().release()


def test_a_file_system_without_flock_is_a_clear_error(tmp_path, monkeypatch):
    import errno

    from filelock import FileLock

    def no_flock(self, *a, **k):
        raise OSError(errno.ENOSYS, "Function not implemented")

    monkeypatch.setattr(FileLock, "acquire", no_flock)
    with pytest.raises(MarlError, match="offers no lock that is released when a process dies. Put log_dir on a local"):
        RunLock(tmp_path).acquire()


def test_holder_whose_pid_is_gone_is_reported_as_such(tmp_path, holder):
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    entry = (tmp_path / HOLDER_FILE).read_text().replace(str(holder.pid), dead.stdout.strip())
    (tmp_path / HOLDER_FILE).write_text(entry)  # as if the lock had passed to a child of a process now gone
    with pytest.raises(MarlError, match="that pid no longer runs here, so a process it started holds the lock"):
        RunLock(tmp_path).acquire()


def test_fit_refuses_a_locked_run_before_ray_starts_and_writes_nothing(tmp_path, monkeypatch):
    env = MatchEnv(num_envs=4)
    _, _, _, mapping = prepare(env, "ippo", dict(QUICK))
    meta = {"algo": "ippo", "env_info": env.info, "agent_to_module": dict(mapping.agent_to_module)}
    run = tmp_path / "run"
    fake_checkpoint(run, 3, meta, env_steps=60)
    boom = lambda *a, **k: (_ for _ in ()).throw(AssertionError("Ray started"))  # noqa: E731
    monkeypatch.setattr(api, "start_ray", boom)
    monkeypatch.setattr(api, "init_ray", boom)
    with RunLock(run):
        before = snapshot(run)
        t0 = time.perf_counter()
        with pytest.raises(
            MarlError, match=f"Run folder {run} is being written by another marl process: pid {os.getpid()}"
        ):
            api.fit(env, "ippo", stop={"iterations": 5}, resume=str(run), log_dir=str(tmp_path / "other"), **QUICK)
        assert time.perf_counter() - t0 < 5  # refused at once, no waiting
        assert snapshot(run) == before and not (tmp_path / "other").exists()
