"""Resuming cannot corrupt a run: mismatches are refused before anything is written, a run continues
in place only from its latest checkpoint (else a new folder records its parent), damaged checkpoints
are named, failed runs keep their files, and no step is logged twice."""

import csv
import json
import os
import shutil
from pathlib import Path

import pytest

import marl
import marl.api as api
from marl.callbacks import Callback
from marl.checkpoint import META_FILE, MANIFEST_FILE, list_checkpoints, read_meta, resolve_checkpoint
from marl.errors import MarlError
from marl.logging import RunLogger
from marl.rundir import PARENT_FILE, RUN_MARKER, RunLock, compare_with_checkpoint, is_run_folder
from run_helpers import QUICK, snapshot
from toy_envs import MatchEnv


@pytest.fixture(scope="module")
def base_run(ray_session, tmp_path_factory):
    """An ippo run on MatchEnv with checkpoints at iterations 1, 2, 3 (20 env steps each)."""
    res = MatchEnv(num_envs=4).fit(
        "ippo",
        stop={"iterations": 3},
        log_dir=str(tmp_path_factory.mktemp("base")),
        checkpoint_every=1,
        keep_checkpoints=0,
        **QUICK,
    )
    return Path(res.log_dir)


@pytest.fixture
def run_copy(base_run, tmp_path):
    """A private copy of the base run (a marl run folder of its own)."""
    return Path(shutil.copytree(base_run, tmp_path / "copy" / base_run.name))


def _no_ray(monkeypatch):
    boom = lambda *a, **k: (_ for _ in ()).throw(AssertionError("Ray started"))  # noqa: E731
    monkeypatch.setattr(api, "start_ray", boom)
    monkeypatch.setattr(api, "init_ray", boom)


def _env(**changes):
    env = MatchEnv(num_envs=4, **{k: v for k, v in changes.items() if k in ("N", "A")})
    for field in ("family", "scenario"):
        if field in changes:
            setattr(env.info, field, changes[field])
    return env


MISMATCHES = [
    ("mappo", {}, {}, r"algorithm: 'ippo' vs 'mappo'"),
    ("ippo", {"family": "toy2"}, {}, r"env family: 'toy' vs 'toy2'"),
    ("ippo", {"scenario": "other"}, {}, r"scenario: 'match' vs 'other'"),
    ("ippo", {"N": 3}, {}, r"agents: \['agent_0', 'agent_1'\] vs \['agent_0', 'agent_1', 'agent_2'\]"),
    ("ippo", {"A": 4}, {}, r"obs_space of group 'agent': Box\(0.0, 1.0, \(3,\), float32\) vs Box\(0.0, 1.0, \(4,\)"),
    ("ippo", {"A": 4}, {}, r"action_space of group 'agent': Discrete\(3\) vs Discrete\(4\)"),
    ("ippo", {}, {"share": "individual"}, r"policy mapping \(agent -> module\): agent_0: 'shared' vs 'agent_0'"),
]


@pytest.mark.parametrize("algo, env_changes, overrides, message", MISMATCHES)
def test_mismatch_is_refused_before_anything_is_written(
    base_run, tmp_path, monkeypatch, algo, env_changes, overrides, message
):
    _no_ray(monkeypatch)
    before, log_dir = snapshot(base_run), tmp_path / "new_runs"
    with pytest.raises(MarlError, match=message) as e:
        api.fit(
            _env(**env_changes),
            algo,
            stop={"iterations": 4},
            resume=str(base_run),
            log_dir=str(log_dir),
            **overrides,
            **QUICK,
        )
    assert "checkpoint_000003" in str(e.value) and "(checkpoint vs now)" in str(e.value)
    assert snapshot(base_run) == before and not log_dir.exists()


def test_networks_that_do_not_fit_are_a_clear_error_and_write_nothing(base_run, tmp_path):
    before = snapshot(base_run)
    with pytest.raises(MarlError, match=r"state does not load into this run .*agent_id: True vs False") as e:
        MatchEnv(num_envs=4).fit("ippo", stop={"iterations": 4}, resume=str(base_run), agent_id=False, **QUICK)
    assert "checkpoint_000003" in str(e.value) and "log_dir" not in str(e.value)
    with pytest.raises(MarlError, match=r"recurrent: False vs True"):  # an older checkpoint: a new folder, removed
        MatchEnv(num_envs=4).fit(
            "ippo",
            stop={"iterations": 4},
            resume=str(base_run / "checkpoints" / "checkpoint_000001"),
            recurrent=True,
            log_dir=str(tmp_path / "runs"),
            **QUICK,
        )
    assert snapshot(base_run) == before and list((tmp_path / "runs").iterdir()) == []


def test_every_difference_is_listed_and_missing_entries_are_not_compared(base_run):
    meta = read_meta(resolve_checkpoint(str(base_run)))
    env = _env(N=3, scenario="other")
    mapping = {a: "shared" for a in env.info.agents}
    diffs = compare_with_checkpoint(meta, "mappo", env.info, mapping)
    assert [d.split(":")[0] for d in diffs] == [
        "algorithm",
        "scenario",
        "agents",
        "agents of group 'agent'",
        "state size (state_dim)",
    ]
    assert diffs[-1] == "state size (state_dim): 6 vs 9"
    assert compare_with_checkpoint({"algo": "mappo"}, "mappo", env.info, mapping) == []  # an older, shorter meta


def test_checkpoint_from_before_manifests_and_markers_still_resumes_in_place(run_copy):
    ckpt = run_copy / "checkpoints" / "checkpoint_000003"
    for p in [run_copy / RUN_MARKER, *run_copy.glob("checkpoints/*/" + MANIFEST_FILE)]:
        p.unlink()
    # without a manifest it resumes only when trusted (tests/test_bad_inputs_checkpoint.py: refused otherwise)
    res = MatchEnv(num_envs=4).fit("ippo", stop={"iterations": 4}, resume=str(ckpt), trust_checkpoint=True, **QUICK)
    assert res.log_dir == str(run_copy) and res.metrics["iteration"] == 4 and res.metrics["env_steps"] == 80
    assert not (run_copy / PARENT_FILE).exists() and is_run_folder(run_copy)  # config.yaml + checkpoints/
    assert [p.name for p in list_checkpoints(run_copy)][-1] == "checkpoint_000004"


def test_latest_checkpoint_continues_in_place(run_copy):
    res = MatchEnv(num_envs=4).fit("ippo", stop={"iterations": 5}, resume=str(run_copy), checkpoint_every=1, **QUICK)
    assert res.log_dir == str(run_copy) and not (run_copy / PARENT_FILE).exists()
    rows = list(csv.DictReader(open(run_copy / "progress.csv")))
    assert [int(r["env_steps"]) for r in rows] == [20, 40, 60, 80, 100]
    assert [p.name for p in list_checkpoints(run_copy)][-2:] == ["checkpoint_000004", "checkpoint_000005"]


def test_older_checkpoint_starts_a_new_run_with_its_parent_and_leaves_the_source_untouched(base_run, tmp_path):
    before = snapshot(base_run)
    ckpt = base_run / "checkpoints" / "checkpoint_000001"
    res = MatchEnv(num_envs=4).fit("ippo", stop={"iterations": 3}, resume=str(ckpt), log_dir=str(tmp_path), **QUICK)
    new = Path(res.log_dir)
    assert new.parent == tmp_path and new != base_run and snapshot(base_run) == before
    assert json.loads((new / PARENT_FILE).read_text()) == {
        "run": str(base_run.resolve()),
        "checkpoint": str(ckpt.resolve()),
        "iteration": 1,
        "env_steps": 20,
    }
    assert (new / RUN_MARKER).exists() and res.metrics["iteration"] == 3 and res.metrics["env_steps"] == 60
    assert [int(r["env_steps"]) for r in csv.DictReader(open(new / "progress.csv"))] == [40, 60]


def test_a_checkpoint_copied_elsewhere_starts_a_new_run(base_run, tmp_path):
    copy = Path(shutil.copytree(base_run / "checkpoints" / "checkpoint_000003", tmp_path / "saved" / "ck"))
    before = snapshot(copy.parent)
    res = MatchEnv(num_envs=4).fit(
        "ippo", stop={"iterations": 4}, resume=str(copy), log_dir=str(tmp_path / "runs"), **QUICK
    )
    assert Path(res.log_dir).parent == tmp_path / "runs" and snapshot(copy.parent) == before
    assert json.loads((Path(res.log_dir) / PARENT_FILE).read_text())["run"] is None


# ------------------------------------------------------------------ checkpoint integrity
def _damage(ckpt: Path, how: str) -> str:
    rel = "learner_group/learner/rl_module/shared/module_state.pkl"
    f = ckpt / rel
    if how == "truncated":
        f.write_bytes(f.read_bytes()[:-10])
    elif how == "missing":
        f.unlink()
    elif how == "changed":
        data = bytearray(f.read_bytes())
        data[len(data) // 2] ^= 0xFF
        f.write_bytes(bytes(data))
    elif how == "meta missing":
        (ckpt / META_FILE).unlink()
        return META_FILE
    return rel


@pytest.mark.parametrize(
    "how, says",
    [
        ("truncated", "has .* bytes, .* were written \\(truncated\\)"),
        ("missing", "is missing"),
        ("changed", "does not match its sha256"),
        ("meta missing", "is missing"),
    ],
)
def test_damaged_checkpoint_is_named_by_load_and_resume(run_copy, tmp_path, monkeypatch, how, says):
    ckpt = run_copy / "checkpoints" / "checkpoint_000003"
    rel = _damage(ckpt, how)
    pattern = f"Checkpoint {ckpt} is damaged: file '{rel}' {says}"
    with pytest.raises(MarlError, match=pattern):
        marl.load(str(ckpt))
    _no_ray(monkeypatch)
    before = snapshot(run_copy)
    with pytest.raises(MarlError, match=pattern):
        api.fit(
            MatchEnv(num_envs=4), "ippo", stop={"iterations": 4}, resume=str(run_copy), log_dir=str(tmp_path), **QUICK
        )
    assert snapshot(run_copy) == before and list(tmp_path.iterdir()) == [run_copy.parent]


def test_unreadable_manifest_or_metadata_is_a_clear_error(run_copy):
    ckpt = run_copy / "checkpoints" / "checkpoint_000002"
    (ckpt / MANIFEST_FILE).write_text('{"files": {"a')
    with pytest.raises(MarlError, match=f"Checkpoint {ckpt} is damaged: its file '{MANIFEST_FILE}' cannot be read"):
        marl.load(str(ckpt))
    (ckpt / MANIFEST_FILE).unlink()  # a checkpoint without a manifest is damaged (unless trusted: an old one)
    with pytest.raises(MarlError, match=f"Checkpoint {ckpt} is damaged: its file '{MANIFEST_FILE}' is missing"):
        marl.load(str(ckpt))
    (ckpt / META_FILE).write_bytes((ckpt / META_FILE).read_bytes()[:50])
    with pytest.raises(MarlError, match=f"Checkpoint {ckpt} is damaged: its file '{META_FILE}' cannot be read"):
        marl.load(str(ckpt), trust_checkpoint=True)
    with pytest.raises(MarlError, match="No marl checkpoint at '/no/such/run': the path does not exist"):
        marl.load("/no/such/run")


# ------------------------------------------------------------------ failures, logs without repeats
class Boom(Callback):
    def on_iteration_end(self, trainer, metrics):
        if metrics["iteration"] == 4:
            raise RuntimeError("boom at iteration 4")


def _tb_steps(run: Path, tag: str):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(run / "tb"))
    acc.Reload()
    return [e.step for e in acc.Scalars(tag)]


def test_failed_run_keeps_its_files_and_an_in_place_resume_repeats_no_step(ray_session, tmp_path):
    with pytest.raises(Exception, match="boom at iteration 4"):
        MatchEnv(num_envs=4).fit(
            "ippo", stop={"iterations": 6}, log_dir=str(tmp_path), checkpoint_every=2, callbacks=[Boom()], **QUICK
        )
    (run,) = tmp_path.iterdir()
    assert [p.name for p in list_checkpoints(run)] == ["checkpoint_000002"]
    assert marl.load(str(run)).checkpoint.endswith("checkpoint_000002")
    assert [int(r["env_steps"]) for r in csv.DictReader(open(run / "progress.csv"))] == [20, 40, 60]
    assert _tb_steps(run, "train/iteration") == [20, 40, 60]
    with RunLock(run):  # the failed run released its lock
        pass
    res = MatchEnv(num_envs=4).fit("ippo", stop={"iterations": 4}, resume=str(run), **QUICK)
    assert res.log_dir == str(run)
    rows = list(csv.DictReader(open(run / "progress.csv")))
    assert [(int(r["env_steps"]), int(r["iteration"])) for r in rows] == [(20, 1), (40, 2), (60, 3), (80, 4)]
    assert _tb_steps(run, "train/iteration") == [20, 40, 60, 80]  # the first run's step 60 is purged


def test_csv_rows_are_whole_lines_and_a_wider_header_replaces_the_file(tmp_path, monkeypatch):
    import marl.logging as mlog

    writes, replaces = [], []
    real_write, real_replace = os.write, os.replace
    monkeypatch.setattr(mlog.os, "write", lambda fd, b: writes.append(b) or real_write(fd, b))
    monkeypatch.setattr(mlog.os, "replace", lambda a, b: replaces.append((a, b)) or real_replace(a, b))
    log = RunLogger(tmp_path, {"iterations": 5}, show=False)
    row = dict(iteration=1, env_steps=10, time_s=1.0, env_steps_per_s=10.0)
    log.log(row)
    log.log({**row, "iteration": 2, "env_steps": 20})
    log.log({**row, "iteration": 3, "env_steps": 30, "episode_return_mean": 1.5})  # a new column
    log.log({**row, "iteration": 4, "env_steps": 40, "episode_return_mean": 2.5})
    log.close()
    assert len(writes) == 2 and all(w.count(b"\n") == 1 and w.endswith(b"\n") for w in writes)
    assert [Path(b).name for _, b in replaces] == ["progress.csv", "progress.csv"]  # the first row, the wider header
    rows = list(csv.DictReader(open(tmp_path / "progress.csv")))
    assert [r["episode_return_mean"] for r in rows] == ["", "", "1.5", "2.5"]
    again = RunLogger(tmp_path, {"iterations": 5}, show=False, initial_steps=20)  # resumed from step 20
    again.close()
    assert [r["env_steps"] for r in csv.DictReader(open(tmp_path / "progress.csv"))] == ["10", "20"]
    assert len(replaces) == 3 and not list(tmp_path.glob("*.tmp"))
