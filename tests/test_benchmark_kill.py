"""SIGKILL of the ``marl benchmark run`` driver: none of its processes (Ray's, the runs') outlive it, and
the same command launched again completes the suite, saying which runs it skipped, resumed or started."""

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
import yaml

from marl.benchmarks.driver import plan_line

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")

SUITE = {
    "name": "killed",
    "seeds": 2,
    "budget": {"env_steps": 8192},
    "evaluation": {"interval": 2048, "episodes": 4},
    "checkpoint_every": 2,
    "envs": {"matrix": {"tasks": ["two_step"], "kwargs": {"num_envs": 16}}},
    "algos": {"mappo": {"rollout_length": 8}},
}


def _carrying(tag):
    """``{pid: command line}`` of every process whose environment has ``MARL_TEST_TAG=<tag>``."""
    found = {}
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and f"MARL_TEST_TAG={tag}".encode() in (entry / "environ").read_bytes().split(
                b"\0"
            ):
                found[int(entry.name)] = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()[:120]
        except OSError:  # exited while we looked
            continue
    return found


def _tree(pid):
    """``{(pid, start time): command line}`` of the descendants of ``pid`` now (psutil if installed, else
    the guardian's own /proc reader)."""
    try:
        import psutil
    except ImportError:
        from marl.benchmarks import guardian

        return {p: str(p[0]) for p in guardian.descendants({pid}, guardian.processes())}
    out = {}
    for child in psutil.Process(pid).children(recursive=True):
        try:
            out[(child.pid, child.create_time())] = " ".join(child.cmdline())[:120] or child.name()
        except psutil.Error:  # exited while we looked
            continue
    return out


def _alive(procs):
    """The processes of ``procs`` (``{(pid, start time): name}`` from :func:`_tree`) that still run."""
    try:
        import psutil
    except ImportError:
        from marl.benchmarks import guardian

        return {p: n for p, n in procs.items() if p in guardian.processes()}
    out = {}
    for (pid, start), name in procs.items():
        try:
            if psutil.Process(pid).create_time() == start and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                out[(pid, start)] = name
        except psutil.Error:
            continue
    return out


def _launch(path, out, tag):
    cmd = [sys.executable, "-m", "marl.cli", "benchmark", "run", str(path), "--out", str(out), "--quiet"]
    return subprocess.Popen(
        cmd + ["--no-report"],
        env={**os.environ, "MARL_TEST_TAG": tag},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def _checkpointed_unfinished(out):
    """Keys of runs that have a checkpoint and are not done."""
    keys = []
    for rec in (out / "runs").glob("*/*/*/*/record.json"):
        try:
            status = json.loads(rec.read_text())["status"]
            if status != "done" and list(rec.parent.glob("*/checkpoints/checkpoint_*")):
                keys.append(rec.parent.relative_to(out / "runs").as_posix())
        except (OSError, ValueError, KeyError):  # being replaced: look again
            continue
    return keys


def _left(tag, seen, timeout):
    """What still runs of ``seen`` (every descendant of the driver seen while it ran) and of the processes
    carrying ``tag``, after waiting up to ``timeout`` s for them to go."""
    deadline = time.time() + timeout
    while time.time() < deadline and (_carrying(tag) or _alive(seen)):
        time.sleep(0.2)
    return {**_carrying(tag), **_alive(seen)}


@pytest.mark.slow  # two launches of Ray: 240 s on a 2-core machine at load 27, over a minute unloaded
def test_sigkill_of_the_driver_leaves_no_process_and_the_relaunch_completes(tmp_path):
    path, out, tag = tmp_path / "suite.yaml", tmp_path / "out", uuid.uuid4().hex
    path.write_text(yaml.safe_dump(SUITE))
    proc = _launch(path, out, tag)
    deadline, seen = time.time() + 300, {}  # a loaded 2-core machine takes a minute to start Ray
    while time.time() < deadline and proc.poll() is None and not _checkpointed_unfinished(out):
        seen.update(_tree(proc.pid))
        time.sleep(0.1)
    seen.update(_tree(proc.pid))
    proc.kill()  # SIGKILL: the driver can run no cleanup of its own
    text, _ = proc.communicate(timeout=30)
    assert proc.returncode == -signal.SIGKILL, text
    names = " ".join(seen.values())
    assert "raylet" in names and "gcs_server" in names and "ray::run_one" in names, seen  # Ray and the runs ran
    left = _left(tag, seen, timeout=15)
    assert left == {}, f"alive 15 s after the driver's SIGKILL: {left}"
    interrupted = _checkpointed_unfinished(out)
    assert interrupted, "a run with a checkpoint was cut short"

    again_tag = uuid.uuid4().hex
    relaunch = _launch(path, out, again_tag)
    seen = {}
    while relaunch.poll() is None:
        seen.update(_tree(relaunch.pid))
        time.sleep(0.2)
    text, _ = relaunch.communicate(timeout=600)
    assert relaunch.returncode == 0, text
    lines = [line for line in text.splitlines() if line.startswith("[benchmark] ")]
    keys = [f"matrix/two_step/mappo/seed_{s}" for s in (0, 1)]
    for key in keys:  # one plan line per run
        assert (
            len([x for x in lines if f" {key}: " in x and x.split()[1] in ("skip", "resume", "restart", "start")]) == 1
        )
    for key in interrupted:
        assert any(x.startswith(f"[benchmark] resume {key}: its launch ended while it ran") for x in lines), text
    data = json.loads((out / "results.json").read_text())
    assert sorted(data["matrix"]["two_step"]["mappo"]) == ["seed_0", "seed_1"]
    for key in interrupted:
        rec = json.loads((out / "runs" / key / "record.json").read_text())
        assert rec["status"] == "done" and rec["resumed_from"], rec
    assert _left(again_tag, seen, timeout=15) == {}, "a normal end leaves nothing behind either"


@pytest.mark.parametrize(
    "record, checkpoint, retry, want",
    [
        (None, None, True, ("start", "new")),
        ({"status": "done"}, "/x", True, ("skip", "done in an earlier launch")),
        ({"status": "failed"}, None, False, ("skip", "failed in an earlier launch (--no-retry-failed)")),
        ({"status": "failed"}, None, True, ("restart", "failed; no checkpoint yet, from step 0")),
        ({"status": "running"}, "/r", True, ("resume", "its launch ended while it ran; from the checkpoint in /r")),
        ({"status": "interrupted"}, "/r", True, ("resume", "interrupted; from the checkpoint in /r")),
    ],
)
def test_plan_lines(record, checkpoint, retry, want):
    assert plan_line(record, checkpoint, retry) == want
