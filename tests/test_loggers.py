"""W&B and MLflow loggers (marl/loggers.py), offline: W&B in offline mode, MLflow with a file store.
Each logs the config once and every iteration's metrics at its env steps; a resumed run logs on
into the same tracker run; a missing package is a MarlError naming the extra."""

import glob
import struct
import subprocess
import sys
import time

import pytest

from marl.errors import MarlError
from toy_envs import MatchEnv

QUICK = dict(progress=False, eval_episodes=4, rollout_length=5, epochs=1, checkpoint_every=0)  # 20 steps/iteration


def _fit(run_dir, callbacks, **kw):
    return MatchEnv(num_envs=4).fit("mappo", log_dir=run_dir, callbacks=callbacks, **{**QUICK, **kw})


def _wandb_records(path: str) -> list:
    """The records of a W&B offline run file (``run-<id>.wandb``): a 7-byte header, then LevelDB's
    log format (32 KiB blocks of chunks, each ``crc32 u32, length u16, type u8`` + bytes; types 1 full,
    2 first, 3 middle, 4 last) around ``wandb_internal_pb2.Record`` protobufs."""
    from wandb.proto import wandb_internal_pb2 as pb

    data, out, buf, pos = open(path, "rb").read(), [], b"", 7
    while pos + 7 <= len(data):
        if 32768 - pos % 32768 < 7:  # a block's tail too short for a header is padding
            pos += 32768 - pos % 32768
            continue
        _, n, kind = struct.unpack("<IHB", data[pos : pos + 7])
        if n == 0 and kind == 0:
            break
        buf, pos = buf + data[pos + 7 : pos + 7 + n], pos + 7 + n
        if kind in (1, 4):
            rec = pb.Record()
            rec.ParseFromString(buf)
            out.append(rec)
            buf = b""
    return out


def _wandb_history(tmp_path, steps: list) -> dict:
    """``{step: {metric: value}}`` over every offline W&B run under ``tmp_path``, once it holds
    ``steps`` (W&B's service writes the file after ``finish`` returns; waits up to 60 s)."""
    for _ in range(120):
        rows = _read_history(tmp_path)
        if sorted(rows) == steps:
            break
        time.sleep(0.5)
    return rows


def _read_history(tmp_path) -> dict:
    rows: dict = {}
    for f in glob.glob(str(tmp_path / "wandb" / "offline-run-*" / "run-*.wandb")):
        for rec in _wandb_records(f):
            if rec.WhichOneof("record_type") == "history":
                items = {i.key or "/".join(i.nested_key): float(i.value_json) for i in rec.history.item}
                rows.setdefault(rec.history.step.num, {}).update(items)
    return rows


def test_wandb_offline_logs_config_and_each_iteration_at_its_env_steps(ray_session, run_dir, tmp_path, monkeypatch):
    pytest.importorskip("wandb")
    from marl.loggers import WandbLogger

    monkeypatch.setenv("WANDB_DIR", str(tmp_path))
    monkeypatch.setenv("WANDB_SILENT", "true")
    wb = WandbLogger(project="marl-test", mode="offline", dir=str(tmp_path))
    res = _fit(run_dir, [wb], stop={"iterations": 2}, lr=1e-3)
    assert wb.run.config["lr"] == 1e-3 and wb.run.config["algo"] == "mappo"
    rows = _wandb_history(tmp_path, [20, 40])
    assert sorted(rows) == [20, 40]  # W&B's step is marl's env steps
    for m in res.history:
        assert rows[m["env_steps"]]["episode_return_mean"] == pytest.approx(m["episode_return_mean"])
    assert rows[40]["eval/episode_return_mean"] == pytest.approx(res.eval["episode_return_mean"])
    again = WandbLogger(project="marl-test", mode="offline", dir=str(tmp_path))
    _fit(run_dir, [again], stop={"iterations": 3}, resume=res.checkpoint)
    assert again.run.id == wb.run.id  # the resumed run logs into the same W&B run
    assert sorted(_wandb_history(tmp_path, [20, 40, 60])) == [20, 40, 60]


def test_mlflow_file_store_logs_config_and_each_iteration_at_its_env_steps(ray_session, run_dir, tmp_path, monkeypatch):
    pytest.importorskip("mlflow")
    from marl.loggers import MLflowLogger

    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")  # MLflow 3 refuses file stores without it
    uri = f"file://{tmp_path / 'mlruns'}"
    ml = MLflowLogger("marl-test", tracking_uri=uri)
    res = _fit(run_dir, [ml], stop={"iterations": 2}, lr=1e-3, share="individual")
    run = ml.client.get_run(ml.run_id)
    assert run.info.status == "FINISHED" and run.info.run_name == res.log_dir.rsplit("/", 1)[-1]
    assert run.data.params["lr"] == "0.001" and run.data.params["share"] == "individual"
    hist = ml.client.get_metric_history(ml.run_id, "episode_return_mean")
    assert [(h.step, h.value) for h in hist] == [
        (m["env_steps"], pytest.approx(m["episode_return_mean"])) for m in res.history
    ]
    (ev,) = ml.client.get_metric_history(ml.run_id, "eval/episode_return_mean")
    assert ev.step == 40 and ev.value == pytest.approx(res.eval["episode_return_mean"])
    again = MLflowLogger("marl-test", tracking_uri=uri)
    _fit(run_dir, [again], stop={"iterations": 3}, resume=res.checkpoint, share="individual")
    assert again.run_id == ml.run_id
    steps = [h.step for h in ml.client.get_metric_history(ml.run_id, "episode_return_mean")]
    assert steps == [20, 40, 60]


@pytest.mark.parametrize(
    "cls, module, extra", [("WandbLogger", "wandb", "marl[wandb]"), ("MLflowLogger", "mlflow.tracking", "marl[mlflow]")]
)
def test_a_missing_tracker_names_the_extra(monkeypatch, cls, module, extra):
    import marl.loggers

    monkeypatch.setitem(sys.modules, module, None)  # import of it raises ImportError
    with pytest.raises(MarlError, match=extra.replace("[", r"\[").replace("]", r"\]")):
        getattr(marl.loggers, cls)()


def test_core_and_the_loggers_module_import_no_tracker():
    code = (
        "import sys, marl, marl.api, marl.cli, marl.loggers\n"
        "bad = [m for m in ('wandb', 'mlflow') if m in sys.modules]\n"
        "assert not bad, bad\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
