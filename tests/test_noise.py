"""What a run prints: marl's own lines and no known third-party notice (marl/noise.py), a real
warning still shown, plain progress lines in a pipe (marl.logging.Progress), the start line's
agent network and the episode count of `marl eval`."""

import io
import json
import logging
import os
import re
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path

import pytest

from marl.logging import Progress, RunLogger
from marl.noise import NOTICES, SHOW_ENV, quiet_third_party

# The README's main job (its first code block), with a budget of two iterations.
MAIN_JOB = """
import marl
result = marl.make_env("mpe", "simple_spread").fit(
    "mappo", stop={{"env_steps": 1600}}, log_dir={log_dir!r}, eval_episodes=4
)
"""


def _main_job(tmp_path: Path, show_all: bool) -> str:
    """stdout and stderr of the main job in a fresh interpreter, through a pipe (not a terminal)."""
    env = {k: v for k, v in os.environ.items() if k not in (SHOW_ENV, "RAY_AUTH_MODE")}
    if show_all:
        env[SHOW_ENV] = "1"
    code = textwrap.dedent(MAIN_JOB.format(log_dir=str(tmp_path / "runs")))
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600, env=env, cwd=tmp_path)
    assert r.returncode == 0, r.stderr[-3000:]
    return r.stdout + r.stderr


def _notices_in(out: str) -> list:
    return [n.pattern for n in NOTICES if re.search(n.pattern, out)]


def test_the_main_job_prints_marls_lines_and_no_known_notice(tmp_path):
    out = _main_job(tmp_path, show_all=False)
    assert _notices_in(out) == [], out
    assert "WARNING" not in out and "Warning:" not in out, out
    lines = out.splitlines()
    assert lines[0].startswith("[marl] mappo (agent=mlp) on <TorchMPEEnv mpe:simple_spread"), out
    assert any(line.startswith("[marl] it     2 | steps      1600") for line in lines), out  # the last iteration
    assert lines[-1].startswith("[marl] greedy evaluation over 4 episodes"), out
    assert "\r" not in out  # no progress bar in a pipe
    assert all(line.startswith("[marl] ") for line in lines), out


def test_the_switch_shows_the_notices_again(tmp_path):
    """The same job with MARL_SHOW_THIRD_PARTY_WARNINGS=1: the patterns match what the libraries print
    (without this, the test above could pass with patterns that never match)."""
    out = _main_job(tmp_path, show_all=True)
    shown = _notices_in(out)
    assert len(shown) >= 3, out  # token auth, new API stack, RLModule deprecation (gputil: if RLlib's monitor starts)
    assert NOTICES[0].pattern in shown and NOTICES[1].pattern in shown


def test_a_real_warning_still_shows():
    quiet_third_party()
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        quiet_third_party()  # its filters go in front of "always"
        warnings.warn("my reward is NaN", UserWarning, stacklevel=1)
        warnings.warn(
            "os.fork() was called. os.fork() is incompatible with multithreaded code, and JAX is "
            "multithreaded, so this will likely lead to a deadlock.",
            RuntimeWarning,
            stacklevel=1,
        )  # not in subprocess
        exec(  # the same warning attributed to the module `subprocess` (Ray's fork + exec) is dropped
            compile("import warnings\nwarnings.warn(msg, RuntimeWarning)", "subprocess.py", "exec"),
            {
                "__name__": "subprocess",
                "msg": "os.fork() was called. os.fork() is incompatible with multithreaded "
                "code, and JAX is multithreaded, so this will likely lead to a deadlock.",
            },
        )
    assert [str(w.message)[:16] for w in seen] == ["my reward is NaN", "os.fork() was ca"]
    kept: list = []
    handler = logging.Handler()
    handler.emit = kept.append  # type: ignore[method-assign]
    rllib, tune = logging.getLogger("ray.rllib.algorithms.algorithm_config"), logging.getLogger("ray.tune.utils.util")
    # an earlier test or Ray itself may have raised these loggers' levels: set them, so the
    # filters (not a level) decide what is kept
    saved = [(log.level, log.disabled) for log in (rllib, tune)]
    for log in (rllib, tune):
        log.addHandler(handler)
        log.setLevel(logging.WARNING)
        log.disabled = False
    try:
        rllib.warning("You are running PPO on the new API stack! This is the new default behavior for this algorithm.")
        rllib.warning("Your train_batch_size is smaller than the rollout fragment length.")
        tune.warning("Install gputil for GPU system monitoring.")
        tune.warning("Install psutil to monitor system performance.")
    finally:
        for log, (level, disabled) in zip((rllib, tune), saved):
            log.removeHandler(handler)
            log.setLevel(level)
            log.disabled = disabled
    assert [r.getMessage()[:20] for r in kept] == ["Your train_batch_siz", "Install psutil to mo"]


def test_ray_workers_marl_starts_run_the_filters(ray_session):
    import ray

    @ray.remote
    def filtered() -> list:
        return [type(f).__name__ for f in logging.getLogger("ray.tune.utils.util").filters]

    assert "_DropNotice" in ray.get(filtered.remote())


# ------------------------------------------------------------------ progress


def test_progress_in_a_pipe_prints_a_line_every_interval_and_the_last():
    now = [0.0]
    out = io.StringIO()
    p = Progress(100, tty=False, out=out, every_s=10, clock=lambda: now[0])
    for t, n in [(0, 10), (5, 20), (12, 30), (13, 40), (30, 50), (31, 60)]:
        now[0] = t
        p.update(n, {"n": n}, f"line {n}")
    p.close()
    assert out.getvalue() == "line 10\nline 30\nline 50\nline 60\n"  # 0 s, 12 s, 30 s, then the last at close


def test_progress_on_a_terminal_draws_a_bar_and_prints_no_lines(capsys):
    out = io.StringIO()
    p = Progress(100, tty=True, out=out)
    p.update(50, "half", "line 50")
    p.close()
    err = capsys.readouterr().err
    assert out.getvalue() == "" and "50.0/100" in err and "half" in err


def test_fit_progress_in_a_pipe_is_plain_lines(tmp_path, capsys):
    """RunLogger under pytest's captured (non-terminal) stderr: a line for the first and the last iteration."""
    log = RunLogger(tmp_path, {"iterations": 3}, show=True)
    for i in (1, 2, 3):
        log.log({"env_steps": 10 * i, "iteration": i, "time_s": 0.1 * i, "env_steps_per_s": 100.0})
    log.close()
    cap = capsys.readouterr()
    lines = cap.out.splitlines()
    assert [line[:12] for line in lines] == ["[marl] it   ", "[marl] it   "] and "it     3" in lines[-1]
    assert cap.err == ""


def test_the_start_line_names_the_agent_network():
    from marl.api import _agent_net
    from marl.config import load_config

    assert _agent_net(load_config("mappo", "mpe", {"agent": "hpn"})) == " (agent=hpn)"
    assert _agent_net(load_config("qmix", "smax", {})) == " (agent=mlp)"


def test_marl_eval_says_how_many_episodes_it_played(ray_session, run_dir, capsys):
    from marl.cli import main

    args = ["env=mpe:simple_spread", "algo=ippo", "env.num_envs=4", "stop.iterations=1", f"log_dir={run_dir}"]
    assert main(["train", *args, "progress=false", "eval_episodes=0", "epochs=1"]) == 0
    capsys.readouterr()
    ckpt = next(Path(run_dir).glob("*/checkpoints/checkpoint_*"))
    assert main(["eval", str(ckpt), "episodes=6"]) == 0
    cap = capsys.readouterr()
    assert json.loads(cap.out)["episodes"] == 6
    assert "[marl] eval: played 6 greedy episodes (the scenario it trained on)" in cap.err


@pytest.mark.parametrize("value", ["1", "true"])
def test_the_switch_installs_nothing(monkeypatch, value):
    monkeypatch.setenv(SHOW_ENV, value)
    assert quiet_third_party() is False
