"""The benchmark runner: a suite end to end, relaunch skips finished runs, failures are recorded,
output folders are protected, and an interrupted suite (SIGINT) resumes to the same results."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

import marl
from marl.benchmarks import runner
from marl.benchmarks.report import validate_marl_eval
from marl.benchmarks.suite import parse_suite
from marl.checkpoint import list_checkpoints
from marl.errors import MarlError

TINY = {
    "name": "tiny",
    "seeds": 2,
    "budget": {"env_steps": 1024},
    "evaluation": {"interval": 512, "episodes": 4},
    "checkpoint_every": 2,
    "envs": {"matrix": {"tasks": ["two_step"], "kwargs": {"num_envs": 16}}},
    "algos": {"mappo": {"rollout_length": 8}},
}


def _records(out):
    # a fixed depth (<env>/<task>/<algo>/seed_<k>): a recursive walk would enter checkpoint folders
    # that a running run prunes while the walk is under way
    return {
        p.parent.relative_to(out / "runs").as_posix(): json.loads(p.read_text())
        for p in sorted((out / "runs").glob("*/*/*/*/record.json"))
    }


def _without_clock(data):
    """results.json without the wall-clock fields (the only ones two identical runs may differ in)."""
    if isinstance(data, dict):
        return {k: _without_clock(v) for k, v in data.items() if k != "elapsed_time"}
    return data


def test_smoke_suite_runs_reports_and_relaunch_skips_finished_runs(ray_session, tmp_path):
    out = tmp_path / "smoke"
    summary = marl.benchmark("smoke", str(out), progress=False)
    assert summary["done"] == 4 and not summary["failed"], summary
    data = json.loads((out / "results.json").read_text())
    validate_marl_eval(data)
    runs = data["matrix"]["two_step"]
    assert set(runs) == {"qmix", "mappo"} and set(runs["qmix"]) == {"seed_0", "seed_1"}
    seed = runs["qmix"]["seed_0"]
    assert seed["step_0"]["step_count"] == 0  # the untrained policy is the first point
    assert all(len(seed[s]["return"]) == 8 for s in seed if s.startswith("step_"))
    assert len(seed["absolute_metrics"]["return"]) == 80  # 10 x the evaluation episodes
    steps = [seed[f"step_{i}"]["step_count"] for i in range(len(seed) - 1)]
    assert steps == sorted(steps) and steps[-1] >= 2048
    prov = json.loads((out / "provenance.json").read_text())
    assert prov["torch_version"] and prov["hardware"]["cpus"] and len(prov["runs"]) == 4
    assert all(r["config"]["algo"] in ("qmix", "mappo") for r in prov["runs"].values())
    report = (out / "report.md").read_text()
    assert "two_step" in report and "IQM" in report
    assert list(out.glob("*.png")), "the report has figures"
    before = {k: r["wall_clock_s"] for k, r in _records(out).items()}
    mtimes = {p: p.stat().st_mtime_ns for p in (out / "runs").glob("*/*/*/*/record.json")}
    again = marl.benchmark("smoke", str(out), progress=False, report=False)
    assert again["done"] == 4
    assert {p: p.stat().st_mtime_ns for p in (out / "runs").glob("*/*/*/*/record.json")} == mtimes  # nothing re-ran
    assert {k: r["wall_clock_s"] for k, r in _records(out).items()} == before
    assert json.loads((out / "results.json").read_text()) == data


def test_a_failing_run_is_recorded_and_the_others_finish(ray_session, tmp_path, monkeypatch):
    """Also: the provenance names the commit the launch started from, though the checkout moves during it."""
    from marl.benchmarks import driver

    def head():  # the checkout moves once a run has finished
        return "moved-checkout" if list((tmp_path / "b").glob("runs/*/*/*/*/record.json")) else "launch-start"

    monkeypatch.setattr(driver, "_git_commit", head)
    raw = {**TINY, "seeds": 1, "algos": {"mappo": {"rollout_length": 8}, "qmix": {"q_abs_max": 1e-9}}}
    summary = marl.benchmark(parse_suite(raw), str(tmp_path / "b"), progress=False, report=False)
    assert json.loads((tmp_path / "b" / "provenance.json").read_text())["git_commit"] == "launch-start"
    assert summary["done"] == 1
    assert list(summary["failed"]) == ["matrix/two_step/qmix/seed_0"]
    assert "q_abs_max" in summary["failed"]["matrix/two_step/qmix/seed_0"]
    rec = _records(tmp_path / "b")["matrix/two_step/qmix/seed_0"]
    assert rec["status"] == "failed" and "Traceback" in rec["traceback"]
    data = json.loads((tmp_path / "b" / "results.json").read_text())
    assert list(data["matrix"]["two_step"]) == ["mappo"]  # only finished runs are in the table


def test_output_folders_are_checked_before_anything_runs(ray_session, tmp_path):
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("mine")
    with pytest.raises(MarlError, match="not made by 'marl benchmark run'"):
        marl.benchmark(parse_suite(TINY), str(foreign), progress=False)
    assert sorted(p.name for p in foreign.iterdir()) == ["notes.txt"]
    out = tmp_path / "b"
    marl.benchmark(parse_suite({**TINY, "seeds": 1}), str(out), progress=False, report=False)
    other = {**TINY, "budget": {"env_steps": 2048}}
    with pytest.raises(MarlError, match="env_steps: 1024 there, 2048 now"):
        marl.benchmark(parse_suite(other), str(out), progress=False)
    sampled = {**TINY, "evaluation": {**TINY["evaluation"], "actions": "sample"}}
    with pytest.raises(MarlError, match="eval_actions: 'greedy' there, 'sample' now"):
        marl.benchmark(parse_suite(sampled), str(out), progress=False)
    changed = {**TINY, "algos": {"mappo": {"rollout_length": 4}}}
    with pytest.raises(MarlError, match="matrix/two_step/mappo/seed_0.*other settings"):
        marl.benchmark(parse_suite(changed), str(out), progress=False)
    with pytest.raises(MarlError, match="simple_spread"):  # env kwargs are checked by building the env
        marl.benchmark(
            parse_suite({**TINY, "envs": {"mpe": {"tasks": ["simple_spread"], "kwargs": {"M": 3}}}}),
            str(tmp_path / "c"),
            progress=False,
        )
    assert not (tmp_path / "c").exists()


def _halfway(out, env_steps):
    """A run is done and another is training past its first checkpoint but not past half its budget
    (``env_steps``): SIGINT then interrupts a run that has a checkpoint to resume from. A run near its
    end would not do: a signal stops a run only after its current iteration, so under load such a run
    (the done run's partner, say) may finish before the signal reaches it, leaving nothing to resume."""
    try:
        records = _records(out)
        running = [out / "runs" / k for k, r in records.items() if r["status"] == "running"]
        return any(r["status"] == "done" for r in records.values()) and any(
            _has_checkpoint(slot) and runner.partial_steps(slot) <= env_steps // 2 for slot in running
        )
    except (OSError, ValueError):  # a folder pruned or a file replaced while we looked: look again
        return False


def _checkpointed_folders(slot):
    """The run folders of ``slot`` holding a checkpoint (what a relaunch resumes from)."""
    return {p.resolve() for p in slot.iterdir() if p.is_dir() and list_checkpoints(p)} if slot.is_dir() else set()


def _has_checkpoint(slot):
    try:
        return bool(list(slot.glob("*/checkpoints/checkpoint_*")))
    except OSError:  # a checkpoint pruned while we looked
        return False


def _launch(suite_file, out):
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "marl.cli",
            "benchmark",
            "run",
            str(suite_file),
            "--out",
            str(out),
            "--quiet",
            "--no-report",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        preexec_fn=_foreground_sigint,
    )


def _foreground_sigint():
    """The child takes SIGINT as a terminal's foreground job does (Ctrl-C), also when pytest itself was
    started in the background of a non-interactive shell, which starts background jobs with SIGINT
    ignored and passes that on to every child (the runner then rightly ignores the signal)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


@pytest.mark.slow
def test_sigint_halfway_then_relaunch_gives_the_uninterrupted_results(tmp_path):
    suite = {
        **TINY,
        "seeds": 2,
        "budget": {"env_steps": 20000},
        "evaluation": {"interval": 5000, "episodes": 4},
        "envs": {"mpe": {"tasks": ["simple_spread"], "kwargs": {"num_envs": 16}}},
        "algos": {"mappo": {"epochs": 2}, "ippo": {"epochs": 2}},
    }
    path = tmp_path / "suite.yaml"
    path.write_text(yaml.safe_dump(suite))
    out = tmp_path / "interrupted"
    proc = _launch(path, out)
    deadline, halfway = time.time() + 600, False  # a loaded machine takes minutes to start Ray and the runs
    while time.time() < deadline and not halfway:
        time.sleep(0.2)
        halfway = _halfway(out, suite["budget"]["env_steps"])
    proc.send_signal(signal.SIGINT)
    text, _ = proc.communicate(timeout=300)
    assert halfway, ("no run was early in its budget with a checkpoint while another was done", text)
    # Ray 2.60 can abort the driver when a task it cancels is finishing at that moment (a fatal check
    # in its task manager, "Tried to complete task that was not pending"); the runs' data must stay
    # whole either way, which the relaunch below checks
    ray_abort = "Tried to complete task that was not pending" in text
    if not ray_abort:
        assert proc.returncode == 130, text
        assert f"Continue with: marl benchmark run {path} --out {out}" in text
    first = _records(out)
    finished = {k for k, r in first.items() if r["status"] == "done"}
    assert finished and len(finished) < 4, first
    # the runs a relaunch must resume: unfinished, with a checkpoint (at least the run _halfway saw early
    # in its budget: its SIGINT checkpoint, or its periodic one if Ray aborted the driver)
    to_resume = {k: _checkpointed_folders(out / "runs" / k) for k, r in first.items() if r["status"] != "done"}
    to_resume = {k: folders for k, folders in to_resume.items() if folders}
    assert to_resume, ("an unfinished run with a checkpoint", first)
    mtimes = {k: (out / "runs" / k / "record.json").stat().st_mtime_ns for k in finished}
    relaunch = _launch(path, out)
    text, _ = relaunch.communicate(timeout=600)
    assert relaunch.returncode == 0, text
    assert {k: (out / "runs" / k / "record.json").stat().st_mtime_ns for k in finished} == mtimes, text  # not repeated
    again = _records(out)
    resumed = {k for k, r in again.items() if r.get("resumed_from")}
    assert resumed == set(to_resume), ("exactly the interrupted runs with a checkpoint resumed", first, again)
    for k, folders in to_resume.items():
        assert again[k]["status"] == "done" and Path(again[k]["resumed_from"]).resolve() in folders, (k, again[k])
    clean = tmp_path / "clean"
    once = _launch(path, clean)
    text, _ = once.communicate(timeout=600)
    assert once.returncode == 0, text
    got = _without_clock(json.loads((out / "results.json").read_text()))
    want = _without_clock(json.loads((clean / "results.json").read_text()))
    differ = [
        f"{t}/{a}/{k}"
        for t in want["mpe"]
        for a in want["mpe"][t]
        for k in want["mpe"][t][a]
        if got["mpe"].get(t, {}).get(a, {}).get(k) != want["mpe"][t][a][k]
    ]
    assert got == want, (differ, _records(out))


def _fit(tmp_path, env, iterations, callbacks, **overrides):
    """MAPPO on ``env`` for ``iterations`` with ``callbacks``, quietly, into ``tmp_path``."""
    return env.fit(
        "mappo",
        stop={"iterations": iterations},
        log_dir=str(tmp_path),
        progress=False,
        eval_episodes=0,
        callbacks=callbacks,
        **overrides,
    )


def _weights(result):
    return [p.detach().clone() for m in result.policy.modules.values() for p in m.parameters()]


def test_evaluating_does_not_change_the_training_run(ray_session, tmp_path):
    """The protocol's evaluations (and building their policies) draw from no training random stream:
    the same seed trains to the same weights with and without them."""
    from marl.benchmarks.protocol import EvaluationProtocol

    def train(callbacks):
        return _weights(_fit(tmp_path, marl.make_env("mpe", "simple_spread", num_envs=8), 4, callbacks, epochs=2))

    protocol = EvaluationProtocol(interval=100, episodes=4)
    plain, evaluated = train([]), train([protocol])
    assert len(protocol.series) >= 4 and protocol.absolute["return"]
    assert all((a == b).all() for a, b in zip(plain, evaluated))


def test_a_folder_made_before_evaluation_actions_existed_continues_as_greedy(ray_session, tmp_path):
    out = tmp_path / "b"
    marl.benchmark(parse_suite({**TINY, "seeds": 1}), str(out), progress=False, report=False)
    marker = out / runner.MARKER
    old = json.loads(marker.read_text())
    del old["eval_actions"]  # benchmark.json as marl wrote it before the key
    marker.write_text(json.dumps(old))
    marl.benchmark(parse_suite({**TINY, "seeds": 1}), str(out), progress=False, report=False)  # no error
    sampled = {**TINY, "seeds": 1, "evaluation": {**TINY["evaluation"], "actions": "sample"}}
    with pytest.raises(MarlError, match="eval_actions"):
        marl.benchmark(parse_suite(sampled), str(out), progress=False)


def test_sampled_evaluation_draws_actions_repeatably_and_leaves_training_alone(ray_session, tmp_path):
    from marl.benchmarks.protocol import EvaluationProtocol

    # an untrained policy on the penalty game: greedy play repeats one joint action in every episode,
    # sampled play spreads over the payoffs; two sampled evaluations with the same seed agree
    def train(actions):
        protocol = EvaluationProtocol(interval=10**6, episodes=32, absolute_factor=1, actions=actions)
        return protocol, _weights(_fit(tmp_path, marl.make_env("matrix", "penalty", num_envs=8), 1, [protocol]))

    (greedy, w0), (sampled, w1), (again, _) = train("greedy"), train("sample"), train("sample")
    assert all((a == b).all() for a, b in zip(w0, w1))
    assert len(set(greedy.series[0]["return"])) == 1
    assert len(set(sampled.series[0]["return"])) > 1
    assert [p["return"] for p in sampled.series] == [p["return"] for p in again.series]
    assert sampled.absolute["return"] == again.absolute["return"]
    with pytest.raises(MarlError, match="'sampled'.*Did you mean 'sample'"):
        EvaluationProtocol(interval=10, episodes=4, actions="sampled")


@pytest.mark.slow
def test_a_killed_worker_is_recorded_failed_and_the_relaunch_resumes_it(tmp_path):
    suite = {
        **TINY,
        "seeds": 1,
        "budget": {"env_steps": 20000},
        "evaluation": {"interval": 5000, "episodes": 4},
        "envs": {"mpe": {"tasks": ["simple_spread"], "kwargs": {"num_envs": 16}}},
        "algos": {"mappo": {"epochs": 2}},
    }
    path = tmp_path / "suite.yaml"
    path.write_text(yaml.safe_dump(suite))
    out = tmp_path / "b"
    proc = _launch(path, out)
    slot = out / "runs" / "mpe/simple_spread/mappo/seed_0"
    deadline = time.time() + 300
    while time.time() < deadline and not _has_checkpoint(slot):
        time.sleep(0.2)
    os.kill(json.loads((slot / "record.json").read_text())["pid"], signal.SIGKILL)  # the OOM killer, say
    text, _ = proc.communicate(timeout=300)
    assert proc.returncode == 1, text
    rec = json.loads((slot / "record.json").read_text())
    assert rec["status"] == "failed" and "WorkerCrashedError" in rec["error"], rec
    again = _launch(path, out)
    text, _ = again.communicate(timeout=300)
    assert again.returncode == 0, text
    rec = json.loads((slot / "record.json").read_text())
    assert rec["status"] == "done" and rec["resumed_from"], rec


def test_sigterm_is_ctrl_c_while_runs_are_waited_on():
    # a scheduler's SIGTERM takes the Ctrl-C path (checkpoints, relaunch hint); the old handler comes back after
    import os
    import signal

    from marl.benchmarks.driver import term_as_interrupt

    before = signal.getsignal(signal.SIGTERM)
    with pytest.raises(KeyboardInterrupt):
        with term_as_interrupt():
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(5)  # the handler interrupts this
    assert signal.getsignal(signal.SIGTERM) is before


def test_concurrent_runs_is_what_the_cluster_holds():
    from marl.benchmarks.driver import concurrent_runs

    suite = parse_suite({**TINY, "resources": {"cpus_per_run": 2}})
    assert [concurrent_runs(suite, {"CPU": c}) for c in (1.0, 2.0, 5.0, 8.0)] == [1, 1, 2, 4]
    gpu = parse_suite({**TINY, "resources": {"cpus_per_run": 1, "gpus_per_run": 1}})
    assert concurrent_runs(gpu, {"CPU": 16.0, "GPU": 2.0}) == 2 and concurrent_runs(gpu, {"CPU": 16.0}) == 1


def test_runs_with_remote_env_runners_take_their_turns(ray_session, tmp_path):
    """A run that samples on a remote env runner waits in ray.get, and Ray lends its CPUs to the next task then:
    with cpus_per_run equal to the machine's 2 CPUs the driver still runs one at a time (records' start times)."""
    suite = {
        **TINY,
        "seeds": 2,
        "budget": {"env_steps": 2000},
        "evaluation": {"interval": 1000, "episodes": 2},
        "resources": {"cpus_per_run": 2},
        "envs": {"mpe": {"tasks": ["simple_spread"], "kwargs": {"continuous_actions": True, "num_envs": 4}}},
        "algos": {
            "maddpg_async": {
                "algo": "maddpg",
                "rollout_length": 25,
                "hidden": 16,
                "per_env_steps": 100,
                "gradient_steps": 2,
                "async_sampling": True,
                "num_env_runners": 1,
            },
        },
    }
    path = tmp_path / "suite.yaml"
    path.write_text(yaml.safe_dump(suite))
    summary = marl.benchmark(str(path), str(tmp_path / "out"), progress=False, report=False)
    assert summary["done"] == 2 and not summary["failed"], summary
    spans = sorted(
        (time.mktime(time.strptime(r["started"], "%Y-%m-%dT%H:%M:%S")), r["wall_clock_s"])
        for r in _records(tmp_path / "out").values()
    )
    for (start, wall), (next_start, _) in zip(spans, spans[1:]):
        assert next_start >= start + wall - 1.0, spans  # "started" has whole seconds
