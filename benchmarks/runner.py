"""``marl.benchmark(...)``: run a suite's (env, task, algorithm, seed) runs as Ray tasks.

Each run is one Ray task with the suite's CPU/GPU request, so a laptop runs as many
at once as it has cores and a cluster (``address=``) runs the same code unchanged.
The output folder::

    <out>/benchmark.json          marks a folder this runner made (suite name, protocol settings)
    <out>/suite.yaml              the suite as run (seeds included)
    <out>/runs/<env>/<task>/<algo>/seed_<k>/
        record.json               status (done / failed / interrupted), evaluation series, absolute
                                  metric, error, wall-clock, config: written by the run itself
        <marl run folder>/        what marl.fit writes (config, progress.csv, tb/, checkpoints/)
    <out>/results.json            every finished run in marl-eval's JSON format
    <out>/provenance.json         versions, git commit, hardware, wall-clock, config of every run

A relaunch skips the runs whose record says done, resumes the others from their last
checkpoint (exact where the env saves its state, docs/index.md) and retries failed ones.
"""

from __future__ import annotations

import dataclasses
import json
import os
import time
import traceback
from pathlib import Path
from typing import Any, Dict, List, Optional

from marl.errors import MarlError
from marl.rundir import is_run_folder, write_json
from marl.benchmarks.suite import RunSpec, Suite

MARKER = "benchmark.json"
RECORD = "record.json"
_PROTOCOL = ("env_steps", "eval_interval", "eval_episodes", "absolute_factor", "eval_actions")
_PROTOCOL_BEFORE = {"eval_actions": "greedy"}  # what folders made before a protocol key existed used


# ------------------------------------------------------------------ one run (in a Ray task)
def run_one(spec: RunSpec, suite: Suite, slot: str) -> Dict[str, Any]:
    """Train and evaluate one run into ``slot``, write its ``record.json`` and return the record.

    Never raises for a failing run: the error and traceback go into the record (status
    ``failed``) so the rest of the suite continues; Ctrl-C / cancel gives status
    ``interrupted`` after marl saved a checkpoint.
    """
    import marl
    from marl.benchmarks.protocol import EvaluationProtocol

    slot_dir = Path(slot)
    slot_dir.mkdir(parents=True, exist_ok=True)
    t0 = time.time()
    record: Dict[str, Any] = {"key": spec.key, "spec": dataclasses.asdict(spec), "protocol": protocol_of(suite)}
    record["started"] = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(t0))  # this launch's start of the run
    protocol = EvaluationProtocol(
        suite.eval_interval, suite.eval_episodes, suite.absolute_factor, seed=spec.seed, actions=suite.eval_actions
    )
    resume = latest_run_folder(slot_dir)
    write_json(
        slot_dir / RECORD,
        {
            **record,
            "status": "running",
            "host": os.uname().nodename,
            "pid": os.getpid(),
        },
    )
    try:
        env = marl.make_env(spec.env, spec.task, **spec.env_kwargs)
        result = marl.fit(
            env,
            spec.algo,
            stop={"env_steps": suite.env_steps},
            resume=resume,
            callbacks=[protocol],
            log_dir=str(slot_dir),
            eval_episodes=0,
            progress=False,
            checkpoint_every=suite.checkpoint_every,
            **spec.overrides,
        )
        record.update(
            status="done",
            series=protocol.series,
            absolute=protocol.absolute,
            run_dir=result.log_dir,
            env_steps=int(result.metrics["env_steps"]),
            config=_config_of(result),
        )
    except KeyboardInterrupt as e:  # marl.errors.RunInterrupted: a checkpoint was saved
        record.update(status="interrupted", error=str(e), series=protocol.series)
    except Exception as e:  # noqa: BLE001 - a failed run is recorded, the suite goes on
        record.update(
            status="failed", error=f"{type(e).__name__}: {e}", traceback=traceback.format_exc(), series=protocol.series
        )
    record.update(wall_clock_s=round(time.time() - t0, 1), resumed_from=str(resume) if resume else None)
    write_json(slot_dir / RECORD, record)
    return record


def protocol_of(suite: Suite) -> Dict[str, Any]:
    """The settings every run of one output folder must share (budget and evaluation protocol)."""
    return {k: getattr(suite, k) for k in _PROTOCOL}


def latest_run_folder(slot: Path) -> Optional[str]:
    """The newest marl run folder in ``slot`` that holds a checkpoint (``None``: start fresh), the one
    :func:`run_one` resumes."""
    from marl.checkpoint import list_checkpoints

    if not slot.is_dir():
        return None
    found = [p for p in slot.iterdir() if p.is_dir() and is_run_folder(p) and list_checkpoints(p)]
    return str(max(found, key=lambda p: p.stat().st_mtime)) if found else None


def _config_of(result) -> Dict[str, Any]:
    import yaml

    path = Path(result.log_dir) / "config.yaml"
    return yaml.safe_load(path.read_text()) if path.is_file() else {}


def read_record(slot: Path) -> Optional[Dict[str, Any]]:
    """A run's ``record.json``, or ``None`` when it has none (never started, or killed before writing)."""
    path = slot / RECORD
    if not path.is_file():
        return None
    try:
        return json.loads(path.read_text())
    except json.JSONDecodeError:  # written atomically, so only a foreign or damaged file lands here
        return None


# ------------------------------------------------------------------ the output folder
def open_output(out: Path, suite: Suite) -> None:
    """Create ``out`` for ``suite``, or check that an existing one was made by this runner
    with the same budget and protocol (a relaunch, perhaps with more seeds).

    Raises:
        MarlError: ``out`` holds files this runner did not write, or another suite's or
            protocol's runs (their numbers could not share one table).
    """
    marker = out / MARKER
    if out.exists() and any(out.iterdir()) and not marker.is_file():
        raise MarlError(
            f"{out} is not empty and was not made by 'marl benchmark run'; give another --out "
            f"(marl never writes into a folder it did not create)."
        )
    if marker.is_file():
        saved = json.loads(marker.read_text())
        want = {"suite": suite.name, **protocol_of(suite)}
        saved = {**_PROTOCOL_BEFORE, **saved}
        if any(saved.get(k) != v for k, v in want.items()):
            raise MarlError(
                f"{out} holds runs of another suite or protocol ({_differences(saved, want)}); "
                f"give another --out, or the same settings to continue it."
            )
        return
    out.mkdir(parents=True, exist_ok=True)
    write_json(marker, {"suite": suite.name, **protocol_of(suite), "created": time.strftime("%Y-%m-%dT%H:%M:%S")})


def slot_of(out: Path, spec: RunSpec) -> Path:
    """The folder of one run: ``<out>/runs/<env>/<task>/<algo>/seed_<k>``."""
    return out / "runs" / spec.key


def check_record(record: Dict[str, Any], spec: RunSpec) -> None:
    """A finished run is reused only if it was made with this run's settings.

    Raises:
        MarlError: the record's spec differs (a changed override or env kwarg): the message
            names the run and the difference.
    """
    saved = record.get("spec", {})
    now = json.loads(json.dumps(dataclasses.asdict(spec)))
    if any(saved.get(k) != v for k, v in now.items()):
        raise MarlError(
            f"Run {spec.key} in this folder was made with other settings ({_differences(saved, now)}); "
            f"give another --out to run the changed suite."
        )


def _differences(saved: Dict[str, Any], now: Dict[str, Any]) -> str:
    """``"env_steps: 1024 there, 2048 now"`` for every key of ``now`` that ``saved`` holds otherwise."""
    return ", ".join(f"{k}: {saved.get(k)!r} there, {v!r} now" for k, v in sorted(now.items()) if saved.get(k) != v)


def collect(out: Path, runs: List[RunSpec]) -> Dict[str, Dict[str, Any]]:
    """Every run's record (``key -> record``; runs without one are left out)."""
    out_records = {}
    for spec in runs:
        rec = read_record(slot_of(out, spec))
        if rec is not None:
            out_records[spec.key] = rec
    return out_records


def partial_steps(slot: Path) -> int:
    """Env steps a running run has logged so far (the last row of its ``progress.csv``)."""
    best = 0
    for csv_path in slot.glob("*/progress.csv"):
        try:
            with open(csv_path, "rb") as f:  # the header and the last row only: polled every 2 s per run
                header = f.readline().decode().rstrip().split(",")
                start = f.tell()
                f.seek(max(start, f.seek(0, os.SEEK_END) - 4096))
                rows = f.read().splitlines()
            if rows:
                best = max(best, int(float(rows[-1].decode().split(",")[header.index("env_steps")])))
        except (OSError, ValueError, IndexError):
            continue  # a file being replaced: read it next time
    return best


def to_marl_eval(records: Dict[str, Dict[str, Any]]) -> Dict[str, Any]:
    """marl-eval JSON of the finished runs: ``{env: {task: {algo: {seed_k: {step_i: {...},
    absolute_metrics: {...}}}}}}`` (InstaDeep's marl-eval, the format of Gorsane et al. 2022)."""
    data: Dict[str, Any] = {}
    for rec in records.values():
        if rec.get("status") != "done":
            continue
        s = rec["spec"]
        steps = {f"step_{i}": point for i, point in enumerate(rec["series"])}
        steps["absolute_metrics"] = {k: v for k, v in rec["absolute"].items() if k != "best_step"}
        data.setdefault(s["env"], {}).setdefault(s["task"], {}).setdefault(s["algo_label"], {})[f"seed_{s['seed']}"] = (
            steps
        )
    return data
