"""Checkpoint pruning orders by iteration (not by name), keeps the checkpoint a run resumed from and
any newer one, never overwrites a checkpoint, and a save that fails leaves no half checkpoint."""

from pathlib import Path

import pytest

from marl.errors import MarlError
from marl.checkpoint import MANIFEST_FILE, checkpoint_key, list_checkpoints, resolve_checkpoint, save_checkpoint
from run_helpers import QUICK, FakeTrainer, fake_checkpoint
from toy_envs import MatchEnv


def _names(run):
    return [p.name for p in list_checkpoints(run)]


def test_order_is_by_iteration_not_by_name(tmp_path):
    for it in (999_999, 1_000_000, 7):
        fake_checkpoint(tmp_path, it, {"algo": "ippo"}, env_steps=it * 10)
    assert _names(tmp_path) == ["checkpoint_000007", "checkpoint_999999", "checkpoint_1000000"]
    assert resolve_checkpoint(str(tmp_path)).name == "checkpoint_1000000"
    assert checkpoint_key(tmp_path / "checkpoints" / "checkpoint_1000000") == (1_000_000, 10_000_000)


def test_checkpoints_without_a_manifest_are_ordered_by_the_number_in_their_name(tmp_path):
    for it in (10, 9, 100):
        fake_checkpoint(tmp_path, it, {"algo": "ippo"}, manifest=False)
    assert _names(tmp_path) == ["checkpoint_000009", "checkpoint_000010", "checkpoint_000100"]


def test_keep_the_newest(tmp_path):
    t = FakeTrainer()
    for _ in range(5):
        save_checkpoint(t.advance(), tmp_path, {"algo": "ippo"}, keep=2)
    assert _names(tmp_path) == ["checkpoint_000004", "checkpoint_000005"]
    assert (tmp_path / "checkpoints" / "checkpoint_000005" / MANIFEST_FILE).exists()


def test_the_resumed_checkpoint_is_never_pruned(tmp_path):
    t = FakeTrainer()
    resumed = save_checkpoint(t.advance(), tmp_path, {"algo": "ippo"}, keep=0)
    for _ in range(3):
        save_checkpoint(t.advance(), tmp_path, {"algo": "ippo"}, keep=1, protect=resumed)
    assert _names(tmp_path) == ["checkpoint_000001", "checkpoint_000004"]


def test_a_newer_checkpoint_left_in_the_folder_is_never_pruned(tmp_path):
    newer = fake_checkpoint(tmp_path, 10, {"algo": "ippo"}, env_steps=200)
    t = FakeTrainer()
    for _ in range(3):
        save_checkpoint(t.advance(), tmp_path, {"algo": "ippo"}, keep=1)
    assert _names(tmp_path) == ["checkpoint_000003", "checkpoint_000010"] and newer.exists()


def test_an_existing_checkpoint_is_never_overwritten(tmp_path):
    old = fake_checkpoint(tmp_path, 1, {"algo": "other"}, env_steps=5)
    before = (old / MANIFEST_FILE).read_text()
    path = save_checkpoint(FakeTrainer().advance(), tmp_path, {"algo": "ippo"}, keep=0)
    assert path.name == "checkpoint_000001_1" and (old / MANIFEST_FILE).read_text() == before
    same = save_checkpoint(FakeTrainer().advance(), tmp_path, {"algo": "ippo"}, keep=0, protect=old)
    assert same == old.resolve()  # resumed from it and trained no further: it is the checkpoint of this iteration


def test_a_failed_save_leaves_no_checkpoint_and_the_next_save_cleans_up(tmp_path):
    t = FakeTrainer(fail=True).advance()
    with pytest.raises(MarlError, match="Cannot write checkpoint checkpoint_000001 of iteration 1: disk full"):
        save_checkpoint(t, tmp_path, {"algo": "ippo"}, keep=1)
    assert _names(tmp_path) == [] and list((tmp_path / "checkpoints").glob(".tmp-checkpoint_*")) == []
    t.fail = False
    save_checkpoint(t, tmp_path, {"algo": "ippo"}, keep=1)
    assert [p.name for p in (tmp_path / "checkpoints").iterdir()] == ["checkpoint_000001"]


def test_in_place_resume_with_keep_one_keeps_the_resumed_checkpoint(ray_session, tmp_path):
    first = MatchEnv(num_envs=4).fit(
        "ippo", stop={"iterations": 2}, log_dir=str(tmp_path), keep_checkpoints=1, checkpoint_every=1, **QUICK
    )
    run = Path(first.log_dir)
    assert _names(run) == ["checkpoint_000002"]
    more = MatchEnv(num_envs=4).fit(
        "ippo", stop={"iterations": 5}, resume=first.checkpoint, keep_checkpoints=1, checkpoint_every=1, **QUICK
    )
    assert more.log_dir == str(run) and _names(run) == ["checkpoint_000002", "checkpoint_000005"]
    again = MatchEnv(num_envs=4).fit(
        "ippo", stop={"iterations": 5}, resume=more.checkpoint, keep_checkpoints=1, **QUICK
    )  # stop already reached: no iteration, nothing overwritten
    assert again.checkpoint == more.checkpoint and _names(run) == ["checkpoint_000002", "checkpoint_000005"]
