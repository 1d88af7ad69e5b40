"""Bad checkpoints, log folders and disks (issue 29, items 5 and 14): each ends in a MarlError that
names what is wrong, before anything runs from the checkpoint and before the run's other files change.

One table, :data:`CASES`: a damage done to a copy of a real MAPPO run (two checkpoints), the entry
point that meets it (``marl.load``, ``fit(resume=...)``, ``marl eval``, ``fit(log_dir=...)``), and a
fragment of the message. Every case also checks that no code from the checkpoint ran (a marker file a
malicious pickle would create does not exist) and that the run's files outside the damaged checkpoint
are unchanged, with the other checkpoint still passing its checksums.
"""

from __future__ import annotations

import builtins
import errno
import json
import os
import pickle
import shutil
from pathlib import Path
from typing import Any, Callable, Dict, NamedTuple

import pytest
import torch

import marl
import marl.api as api
import marl.checkpoint as checkpoint
from marl import cli
from marl.checkpoint import LEGACY_META_FILE, MANIFEST_FILE, META_FILE, checkpoint_key, read_meta, verify_checkpoint
from marl.errors import MarlError
from run_helpers import QUICK, snapshot
from toy_envs import MatchEnv

MODULE = Path("learner_group/learner/rl_module/shared")
KW = dict(rollout_length=5, epochs=1, num_minibatches=1, progress=False, eval_episodes=0)


def _env() -> Any:
    return marl.make_env("mpe", "simple_spread", num_envs=2, max_cycles=7)


@pytest.fixture(scope="module")
def base_run(ray_session, tmp_path_factory) -> Path:
    res = _env().fit(
        "mappo", stop={"iterations": 2}, checkpoint_every=1, log_dir=str(tmp_path_factory.mktemp("b")), **KW
    )
    return Path(res.log_dir)


# ----------------------------------------------------------------------------- payloads and damage
class System:
    """A pickle that runs ``touch <marker>`` through ``os.system`` when it is loaded."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


class Exec:
    """A pickle that writes ``<marker>`` through ``builtins.exec(open(...))`` when it is loaded."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return (builtins.exec, (f"open({str(self.marker)!r}, 'w').write('ran')",))


class InTensor:
    """A torch storage whose bytes are a malicious pickle (torch's ``_load_from_bytes`` reads them)."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        import torch.storage

        return (torch.storage._load_from_bytes, (pickle.dumps(System(self.marker)),))


def _resign(ckpt: Path) -> None:
    """Rewrite the manifest for the files as they are now: what anyone who edits a checkpoint can do."""
    checkpoint.write_manifest(ckpt, *checkpoint_key(ckpt))


def _plant(rel: str, payload: Callable[[Path], Any], resign: bool = True):
    def damage(ckpt: Path, marker: Path) -> None:
        (ckpt / rel).write_bytes(pickle.dumps({"state": payload(marker)}))
        if resign:
            _resign(ckpt)

    return damage


def _legacy_meta(payload: Callable[[Path], Any]):
    """The JSON metadata replaced by an old-format pickle holding ``payload``, re-signed."""

    def damage(ckpt: Path, marker: Path) -> None:
        (ckpt / META_FILE).unlink()
        (ckpt / LEGACY_META_FILE).write_bytes(pickle.dumps({"algo": "mappo", "x": payload(marker)}))
        _resign(ckpt)

    return damage


def _meta(edit: Callable[[Dict[str, Any]], Any]):
    """``edit`` applied to the metadata JSON (its return value, if any, replaces it), re-signed."""

    def damage(ckpt: Path, marker: Path) -> None:
        meta = json.loads((ckpt / META_FILE).read_text())
        meta = edit(meta) or meta
        (ckpt / META_FILE).write_text(json.dumps(meta))
        _resign(ckpt)

    return damage


def _truncate(rel: str, resign: bool):
    def damage(ckpt: Path, marker: Path) -> None:
        (ckpt / rel).write_bytes((ckpt / rel).read_bytes()[:40])
        if resign:
            _resign(ckpt)

    return damage


def _unlink(rel: str):
    return lambda ckpt, marker: (ckpt / rel).unlink()


def _spec(family: str, scenario: str):
    def edit(meta):
        meta["env_spec"]["fields"].update(family=family, scenario=scenario)

    return _meta(edit)


def _set(key: str, value: Any):
    return _meta(lambda meta: meta.__setitem__(key, value))


# ----------------------------------------------------------------------------- entry points
def _load(ckpt: Path, tmp: Path) -> None:
    marl.load(str(ckpt))


def _resume(ckpt: Path, tmp: Path) -> None:
    _env().fit("mappo", stop={"iterations": 3}, resume=str(ckpt), log_dir=str(tmp / "new"), **KW)


def _eval(ckpt: Path, tmp: Path) -> None:
    cli.COMMANDS["eval"]([str(ckpt), "episodes=1"])


class Case(NamedTuple):
    damage: Callable[[Path, Path], None]
    enter: Callable[[Path, Path], None]
    says: str


ENTRY = {"load": _load, "resume": _resume, "eval": _eval}
STATE = "algorithm_state.pkl"
WEIGHTS = str(MODULE / "module_state.pkl")
LEARNER = "learner_group/learner/state.pkl"
CTOR = str(MODULE / "class_and_ctor_args.pkl")
REFUSED = "which marl does not load from a checkpoint"
CASES: Dict[str, Case] = {
    # class 1, damaged checkpoints: no manifest, metadata of the wrong type, truncated files
    **{
        f"no manifest ({how})": Case(_unlink(MANIFEST_FILE), ENTRY[how], f"its file '{MANIFEST_FILE}' is missing")
        for how in ENTRY
    },
    "no metadata": Case(_unlink(META_FILE), _load, f"is damaged: file '{META_FILE}' is missing"),
    "no metadata, re-signed": Case(
        lambda c, m: (_unlink(META_FILE)(c, m), _resign(c)), _resume, f"is damaged: its file '{META_FILE}' is missing"
    ),
    "algo is a number": Case(_set("algo", 7), _load, "metadata entry 'algo' is a int, expected str"),
    "agent table is a list": Case(_set("agent_to_module", ["shared"]), _resume, "entry 'agent_to_module' is a list"),
    "env_info is text": Case(_set("env_info", "mpe"), _eval, "entry 'env_info' is a str, expected EnvInfo"),
    "config is a list": Case(_set("config", [1, 2]), _load, "entry 'config' is a list, expected dict"),
    "metadata is a list": Case(_meta(lambda m: [m]), _load, "its metadata is a list, not a dict"),
    "unknown record in metadata": Case(
        _set("env_info", {"__record__": "Popen", "fields": {}}), _load, f"its file '{META_FILE}' cannot be read"
    ),
    "manifest files is a list": Case(
        lambda c, m: (c / MANIFEST_FILE).write_text('{"files": []}'),
        _load,
        f"its file '{MANIFEST_FILE}' cannot be read",
    ),
    "metadata truncated, re-signed": Case(
        _truncate(META_FILE, resign=True), _eval, f"its file '{META_FILE}' cannot be read"
    ),
    "weights truncated, re-signed": Case(
        _truncate(WEIGHTS, resign=True), _load, f"its file '{WEIGHTS}' cannot be read"
    ),
    "state truncated": Case(_truncate(STATE, resign=False), _resume, f"file '{STATE}' has 40 bytes"),
    # class 2, code in a checkpoint (re-signed, so the checksums pass)
    "os.system in algorithm_state.pkl": Case(_plant(STATE, System), _resume, f"'{STATE}' asks to load 'posix.system'"),
    "exec in the learner's state.pkl": Case(_plant(LEARNER, Exec), _resume, "asks to load 'builtins.exec'"),
    "os.system in the weights (load)": Case(_plant(WEIGHTS, System), _load, REFUSED),
    "exec in the weights (eval)": Case(_plant(WEIGHTS, Exec), _eval, REFUSED),
    "os.system in the module's class file": Case(_plant(CTOR, System), _load, f"'{CTOR}' asks to load 'posix.system'"),
    "pickle inside a torch tensor": Case(_plant(STATE, InTensor), _resume, "torch's weights-only reader refuses"),
    "old pickled metadata with os.system (load)": Case(_legacy_meta(System), _load, "was written by an older marl"),
    "old pickled metadata with exec (resume)": Case(_legacy_meta(Exec), _resume, "trust_checkpoint=True"),
    "old pickled metadata (eval)": Case(_legacy_meta(System), _eval, "--trust-checkpoint"),
    # class 3, an env spec that would import what the checkpoint names
    "unregistered env family (load)": Case(
        _spec("evil_family", "x"), _load, "names env family 'evil_family', which is not registered"
    ),
    "unregistered env family (eval)": Case(_spec("os", "system"), _eval, "names env family 'os'"),
    "scenario that is a module path": Case(
        _spec("mpe", "antigravity.x"), _load, "names scenario 'antigravity.x' of env family 'mpe', a module path"
    ),
    "scenario that is a module:attr (eval)": Case(_spec("pettingzoo", "os:system"), _eval, "a module path"),
}


@pytest.mark.parametrize("name", list(CASES))
def test_bad_checkpoint_is_refused_before_it_runs_or_changes_anything(name, base_run, tmp_path):
    case = CASES[name]
    run = tmp_path / "run"
    shutil.copytree(base_run, run)
    good, bad = run / "checkpoints" / "checkpoint_000001", run / "checkpoints" / "checkpoint_000002"
    marker = tmp_path / "code_ran"
    case.damage(bad, marker)
    before = {k: v for k, v in snapshot(run).items() if not k.startswith("checkpoints/checkpoint_000002")}
    with pytest.raises(MarlError, match=_escape(case.says)):
        case.enter(bad, tmp_path)
    assert not marker.exists(), "code from the checkpoint ran"
    after = {k: v for k, v in snapshot(run).items() if not k.startswith("checkpoints/checkpoint_000002")}
    assert after == before  # nothing of the run outside the damaged checkpoint changed
    verify_checkpoint(good)  # the other checkpoint is intact
    assert not (tmp_path / "new").exists() or not any((tmp_path / "new").iterdir())


def _escape(fragment: str) -> str:
    import re

    return re.escape(fragment)


# ----------------------------------------------------------------------------- log_dir and a full disk
def _refuse_ray(monkeypatch):
    def started(*a, **k):
        raise AssertionError("Ray was started before the log_dir was checked")

    monkeypatch.setattr(api, "start_ray", started)


@pytest.mark.parametrize(
    "layout, says",
    [
        ("file", "is a file"),
        ("under a file", "cannot be made: "),
        ("read-only", "is read-only (mode 555)"),
        ("under read-only", "is read-only ("),
    ],
)
def test_log_dir_that_cannot_hold_runs_is_refused_before_ray(layout, says, tmp_path, monkeypatch):
    afile, ro = tmp_path / "afile", tmp_path / "ro"
    afile.write_text("keep me")
    ro.mkdir()
    (ro / "kept.txt").write_text("kept")
    os.chmod(ro, 0o555)
    log_dir = {"file": afile, "under a file": afile / "runs", "read-only": ro, "under read-only": ro / "runs"}[layout]
    _refuse_ray(monkeypatch)
    try:
        with pytest.raises(MarlError, match=_escape(f"log_dir '{log_dir}' ") + ".*" + _escape(says)):
            MatchEnv(num_envs=4).fit("ippo", stop={"iterations": 1}, log_dir=str(log_dir), **QUICK)
        assert afile.read_text() == "keep me" and sorted(p.name for p in ro.iterdir()) == ["kept.txt"]
    finally:
        os.chmod(ro, 0o755)


def _full_disk(at_call: int, real: Callable[..., Any]) -> Callable[..., Any]:
    calls = []

    def write(*args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        if len(calls) == at_call:
            real(*args, **kwargs)  # part of the checkpoint is on disk when the disk fills
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(*args, **kwargs)

    return write


@pytest.mark.parametrize("writer, at_call, last", [("manifest", 2, "checkpoint_000001"), ("rllib", 1, "none")])
def test_full_disk_ends_the_run_with_the_last_good_checkpoint_and_no_temporary_files(
    writer, at_call, last, ray_session, tmp_path, monkeypatch
):
    from marl.engine.trainer import Trainer

    if writer == "manifest":
        monkeypatch.setattr(checkpoint, "write_manifest", _full_disk(at_call, checkpoint.write_manifest))
    else:
        monkeypatch.setattr(Trainer, "save_to_path", _full_disk(at_call, Trainer.save_to_path))
    with pytest.raises(
        MarlError, match=r"\(the disk is full\).*last good checkpoint: " + (".*" + last if last != "none" else "none")
    ):
        MatchEnv(num_envs=4).fit("ippo", stop={"iterations": 3}, checkpoint_every=1, log_dir=str(tmp_path), **QUICK)
    (run,) = [p for p in tmp_path.iterdir() if p.is_dir()]
    assert not list((run / "checkpoints").glob(".tmp-checkpoint_*"))  # the partial checkpoint is gone
    kept = sorted(p.name for p in (run / "checkpoints").iterdir())
    assert kept == ([] if last == "none" else [last])
    for name in kept:
        verify_checkpoint(run / "checkpoints" / name)
    assert (run / "progress.csv").read_text().count("\n") >= 2  # the logs of the iterations run are kept


# ----------------------------------------------------------------------------- the trust flag
def test_trusted_old_format_checkpoint_loads_evaluates_and_resumes(base_run, tmp_path, capsys):
    """An old checkpoint (pickled metadata, no manifest) is read with the trust flag, and resuming from it
    writes checkpoints that load without the flag."""
    run = tmp_path / "run"
    shutil.copytree(base_run, run)
    ckpt = run / "checkpoints" / "checkpoint_000002"
    meta = read_meta(ckpt)
    (ckpt / META_FILE).unlink()
    (ckpt / MANIFEST_FILE).unlink()
    (ckpt / LEGACY_META_FILE).write_bytes(pickle.dumps(meta))
    assert marl.load(str(ckpt), trust_checkpoint=True).metrics["iteration"] == 2
    assert cli.COMMANDS["eval"]([str(ckpt), "episodes=1", "--trust-checkpoint"]) == 0
    assert str(ckpt) in capsys.readouterr().out  # the evaluation's JSON names the checkpoint
    res = _env().fit("mappo", stop={"iterations": 3}, resume=str(ckpt), trust_checkpoint=True, **KW)
    new = marl.load(res.checkpoint)  # written by this marl: no flag needed
    for mid, module in new.policy.modules.items():  # the weights the policy acts with
        trained = res.policy.modules[mid].state_dict()
        assert all(torch.equal(v, trained[k]) for k, v in module.state_dict().items() if k.startswith("actor."))


@pytest.mark.parametrize("payload", [System, Exec])
def test_the_payloads_do_run_code_when_trusted(payload, base_run, tmp_path):
    """The table's payloads are live: a trusted load (plain pickle) runs them, so a marker that stays
    absent in the table means marl refused them, not that they were harmless."""
    run = tmp_path / "run"
    shutil.copytree(base_run, run)
    ckpt, marker = run / "checkpoints" / "checkpoint_000002", tmp_path / "code_ran"
    _legacy_meta(payload)(ckpt, marker)
    with pytest.raises(MarlError):  # it ran, then the metadata it returned is not marl's
        marl.load(str(ckpt), trust_checkpoint=True)
    assert marker.exists()
