"""Ctrl-C / SIGTERM during fit: the iteration finishes, a checkpoint is saved and named with the exact
call or command that resumes, the trainer stops, Ray goes down if marl started it; a second Ctrl-C aborts
at once. Each test runs a real training process and signals it after its first iteration."""

import json
import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from marl.checkpoint import list_checkpoints, resolve_checkpoint
from run_helpers import TESTS, ray_processes

pytestmark = pytest.mark.skipif(not Path("/proc").is_dir(), reason="finds Ray's processes through /proc")

SCRIPT = """
import json, sys, time
sys.path.insert(0, {tests!r})
import marl, ray
from marl.callbacks import Callback
from toy_envs import MatchEnv
from run_helpers import QUICK

class Tell(Callback):
    def on_iteration_end(self, trainer, metrics):
        print("ITER", metrics["iteration"], flush=True)

    def on_rollout(self, trainer, rollout):
        if {slow} and trainer.progress["iterations"] >= 1:  # the second iteration takes long
            print("SLOW", flush=True)
            time.sleep(30)

def report(e):
    print("RESULT " + json.dumps({{"type": type(e).__name__, "message": str(e), "checkpoint": e.checkpoint,
                                  "aborted": e.aborted, "ray": ray.is_initialized()}}), flush=True)

try:
    marl.fit(MatchEnv(num_envs=4), "ippo", stop={{"iterations": 100000}}, log_dir=sys.argv[1], checkpoint_every=1,
             callbacks=[Tell()], **QUICK)
except KeyboardInterrupt as e:
    report(e)
    it = json.load(open(e.checkpoint + "/marl_manifest.json"))["iteration"] if e.checkpoint else 0
    if {resume}:
        res = marl.fit(MatchEnv(num_envs=4), "ippo", stop={{"iterations": it + 1}}, resume=e.checkpoint, **QUICK)
        print("RESUMED " + json.dumps({{"log_dir": res.log_dir, "iteration": res.metrics["iteration"]}}), flush=True)
"""


def _start(cmd, tmp_path):
    """Start ``cmd`` in its own session with its own Ray temp dir; returns (process, Ray temp dir)."""
    ray_tmp = f"/tmp/mr{uuid.uuid4().hex[:6]}"  # short: Ray's socket paths must fit in 107 bytes
    env = {**os.environ, "RAY_TMPDIR": ray_tmp, "PYTHONPATH": str(TESTS)}
    proc = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, start_new_session=True, cwd=tmp_path
    )
    return proc, ray_tmp


def _wait_for(proc, prefix, timeout=240):
    t0 = time.time()
    for line in proc.stdout:
        if line.startswith(prefix):
            return line
        assert time.time() - t0 < timeout, f"no '{prefix}' line"
    raise AssertionError(f"process ended before printing '{prefix}': {proc.stderr.read()[-3000:]}")


def _finish(proc, ray_tmp):
    out, err = proc.communicate(timeout=240)
    deadline = time.time() + 20
    while ray_processes(ray_tmp) and time.time() < deadline:
        time.sleep(0.5)
    assert ray_processes(ray_tmp) == [], "Ray processes of the run are left"
    shutil.rmtree(ray_tmp, ignore_errors=True)
    return out, err


def _script(tmp_path, slow=False, resume=False):
    path = tmp_path / "train.py"
    path.write_text(SCRIPT.format(tests=str(TESTS), slow=slow, resume=resume))
    return [sys.executable, str(path), str(tmp_path / "runs")]


def _result(out):
    return json.loads(next(line for line in out.splitlines() if line.startswith("RESULT "))[len("RESULT ") :])


def test_sigterm_saves_a_checkpoint_names_the_resume_call_and_shuts_ray_down(tmp_path):
    proc, ray_tmp = _start(_script(tmp_path, resume=True), tmp_path)
    _wait_for(proc, "ITER 1")
    proc.send_signal(signal.SIGTERM)
    out, err = _finish(proc, ray_tmp)
    assert proc.returncode == 0, err[-3000:]
    r = _result(out)
    ckpt = Path(r["checkpoint"])
    assert r["type"] == "RunInterrupted" and not r["aborted"] and r["ray"] is False  # fit shut its Ray down
    assert resolve_checkpoint(str(ckpt)) == ckpt  # complete: every file matches its checksum
    assert r["message"].startswith("Training stopped by SIGTERM after iteration ")
    assert (
        f"Resume with: marl.fit(env, 'ippo', stop={{'iterations': 100000}}, resume='{ckpt}', callbacks=[...]"
        in r["message"]
    )
    assert f"[marl] SIGTERM: checkpoint saved: {ckpt}" in out
    assert "SIGTERM: finishing this iteration, then saving a checkpoint" in err and "Traceback" not in err
    resumed = json.loads(next(line for line in out.splitlines() if line.startswith("RESUMED "))[len("RESUMED ") :])
    run = ckpt.parent.parent
    assert resumed["log_dir"] == str(run)  # it was the latest checkpoint: the run continued in place
    assert list_checkpoints(run)[-2] == ckpt and resumed["iteration"] == int(ckpt.name.split("_")[1]) + 1


def test_ctrl_c_in_a_terminal_ends_marl_train_with_code_130_and_the_resume_command(tmp_path):
    items = [
        "env=mpe:simple_spread",
        "algo=ippo",
        "env.num_envs=2",
        "stop.iterations=100000",
        "rollout_length=5",
        "epochs=1",
        "eval_episodes=0",
        f"log_dir={tmp_path / 'runs'}",
    ]
    proc, ray_tmp = _start([sys.executable, "-m", "marl.cli", "train", *items], tmp_path)
    _wait_for(proc, "[marl] it     1")
    os.killpg(proc.pid, signal.SIGINT)  # what Ctrl-C does: every process of the terminal's foreground group
    out, err = _finish(proc, ray_tmp)
    assert proc.returncode == 130, err[-3000:]
    assert "Traceback" not in err
    ckpt = Path(next(line for line in out.splitlines() if "SIGINT: checkpoint saved: " in line).split(": ")[-1])
    assert resolve_checkpoint(str(ckpt)) == ckpt
    assert "marl train: Training stopped by SIGINT after iteration " in err
    assert f"resume with: marl train {' '.join(items)} resume={ckpt}" in err


def test_a_second_ctrl_c_aborts_at_once_and_keeps_the_last_checkpoint(tmp_path):
    proc, ray_tmp = _start(_script(tmp_path, slow=True), tmp_path)
    _wait_for(proc, "SLOW")  # inside iteration 2, after checkpoint 1 was saved
    t0 = time.time()
    os.killpg(proc.pid, signal.SIGINT)
    time.sleep(1.0)
    os.killpg(proc.pid, signal.SIGINT)
    out, err = _finish(proc, ray_tmp)
    assert time.time() - t0 < 25  # did not wait for the 30 s iteration
    r = _result(out)
    assert r["aborted"] and r["ray"] is False and r["checkpoint"].endswith("checkpoint_000001")
    assert r["message"].startswith(
        "Training aborted by a second SIGINT during iteration 2; nothing of that iteration was saved. Last checkpoint: "
    )
    run = Path(r["checkpoint"]).parent.parent
    assert [p.name for p in (run / "checkpoints").iterdir()] == ["checkpoint_000001"]  # no half-written one
    assert "Traceback" not in err
