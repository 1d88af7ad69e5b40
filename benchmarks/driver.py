"""The driver of ``marl benchmark run``: submit the runs, show progress, write results and provenance.

:func:`benchmark` (also ``marl.benchmark``) runs a suite (:mod:`marl.benchmarks.suite`)
into an output folder (:mod:`marl.benchmarks.runner`): every (env, task, algorithm,
seed) run is a Ray task asking for ``cpus_per_run`` CPUs and ``gpus_per_run`` GPUs.
Without ``address`` marl starts a local Ray with this machine's CPUs (so a 2-core
laptop runs 2 runs at once); with ``address`` it joins that cluster
(``ray.init(address=...)``). Ctrl-C cancels the running runs (each saves a checkpoint),
writes the results of the finished ones and says how to continue. A SIGKILL of the driver takes
every process it started with it (:mod:`marl.benchmarks.guardian`), and the same command then
continues the suite. Each launch prints one line per run: skipped, resumed, restarted or started.
"""

from __future__ import annotations

import contextlib
import os
import platform
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence, Tuple, Union

from marl.errors import MarlError, RunInterrupted
from marl.rundir import write_json, write_yaml
from marl.benchmarks import runner
from marl.benchmarks.guardian import guarded
from marl.benchmarks.suite import RunSpec, Suite, load_suite

_PACKAGES = (
    "marl-rllib",
    "ray",
    "torch",
    "numpy",
    "pettingzoo",
    "mpe2",
    "vmas",
    "jaxmarl",
    "jax",
    "gymnasium",
    "rliable",
)


def benchmark(
    suite: Union[str, Suite],
    out: Optional[str] = None,
    *,
    seeds: Optional[Sequence[int]] = None,
    tasks: Optional[Sequence[str]] = None,
    algos: Optional[Sequence[str]] = None,
    address: Optional[str] = None,
    retry_failed: bool = True,
    progress: bool = True,
    report: bool = True,
) -> Dict[str, Any]:
    """Run a benchmark suite; returns ``{"out", "done", "failed", "results", "report"}``.

    Args:
        suite: a bundled suite name (``"smoke"``, ``"mpe"``, ...), a YAML path, or a :class:`Suite`.
        out: output folder (default ``marl_benchmarks/<suite name>``); a folder of an earlier launch
            of the same suite continues it: finished runs are skipped, interrupted ones resume.
        seeds: run these seeds instead of the suite's.
        tasks: run only these of the suite's tasks (:meth:`~marl.benchmarks.suite.Suite.with_tasks`).
        algos: run only these of the suite's algorithm labels (:meth:`~marl.benchmarks.suite.Suite.with_algos`).
        address: a Ray cluster to run on (``"auto"``, ``"<host>:6379"``); default: a local Ray.
        retry_failed: run the runs that failed in an earlier launch again.
        progress: show the live progress bar (runs done / running / failed, ETA).
        report: write ``report.md`` (:func:`marl.benchmarks.report.write_report`) at the end.

    Raises:
        MarlError: a bad suite (before anything runs); an output folder this runner did not
            make, or one of another suite or protocol; a finished run made with other settings.
        RunInterrupted: Ctrl-C; the finished runs' results are written first.
    """
    suite = load_suite(suite) if isinstance(suite, str) else suite
    if seeds:
        suite = suite.with_seeds(seeds)
    if tasks:
        suite = suite.with_tasks(tasks)
    if algos:
        suite = suite.with_algos(algos)
    out_dir = Path(out or Path("marl_benchmarks") / suite.name).resolve()
    runs = suite.runs()
    check_runs(suite)
    runner.open_output(out_dir, suite)
    from filelock import FileLock, Timeout

    lock = FileLock(str(out_dir / "benchmark.lock"))
    try:
        lock.acquire(timeout=0)
    except Timeout as e:
        raise MarlError(f"Another 'marl benchmark run' is writing {out_dir}; wait for it or give another --out.") from e
    try:
        return _run_locked(suite, out_dir, runs, address, retry_failed, progress, report)
    finally:
        lock.release()


def check_runs(suite: Suite) -> None:
    """Build every task's env once and check every algorithm on it as ``fit`` would before Ray
    starts (env kwargs, algorithm/env fit, policy mapping), so a bad suite fails before any run.

    Raises:
        MarlError: naming the env, task and algorithm.
    """
    import marl
    from marl.api import prepare

    for family, e in suite.envs.items():
        for task in e["tasks"]:
            kwargs = suite.env_kwargs(family, task)
            try:
                env = marl.make_env(family, task, **kwargs)
            except (MarlError, TypeError, ValueError) as err:
                raise MarlError(f"Suite env {family!r} task {task!r} with kwargs {kwargs}: {err}") from err
            for spec in {s.algo_label: s for s in suite.runs() if s.env == family and s.task == task}.values():
                try:
                    prepare(env, spec.algo, spec.overrides)
                except MarlError as err:
                    raise MarlError(f"Suite algorithm {spec.algo_label!r} on {family}/{task}: {err}") from err


def _run_locked(
    suite: Suite,
    out_dir: Path,
    runs: List[RunSpec],
    address: Optional[str],
    retry_failed: bool,
    progress: bool,
    report: bool,
) -> Dict[str, Any]:
    write_yaml(out_dir / "suite.yaml", {**suite.source, "name": suite.name, "seeds": suite.seeds})
    todo = _todo(out_dir, runs, retry_failed)
    t0, commit = time.time(), _git_commit()  # the code the runs start from, even if the checkout moves meanwhile
    with guarded():  # a SIGKILL of this process takes Ray and the runs with it (marl.benchmarks.guardian)
        started = _start_ray(address)
        try:
            interrupted = _execute(suite, out_dir, runs, todo, progress)
        finally:
            if started:
                import ray

                ray.shutdown()
    summary = write_results(suite, out_dir, runs, time.time() - t0, commit)
    if interrupted:
        raise RunInterrupted(
            f"Benchmark interrupted: {summary['done']} of {len(runs)} runs finished; results of those written to "
            f"{out_dir / 'results.json'}. Continue with: marl benchmark run {suite.origin or '<suite>'} --out {out_dir}"
            + (f" --seeds {' '.join(map(str, suite.seeds))}" if suite.seeds_given else "")
            + (f" --tasks {' '.join(suite.tasks_given)}" if suite.tasks_given else "")
            + (f" --algos {' '.join(suite.algos_given)}" if suite.algos_given else ""),
            checkpoint=None,
            run_dir=str(out_dir),
            signal="SIGINT",
            aborted=False,
        )
    if report and summary["done"]:
        from marl.benchmarks.report import write_report

        summary["report"] = str(write_report(out_dir))
    return summary


def _todo(out_dir: Path, runs: List[RunSpec], retry_failed: bool) -> List[RunSpec]:
    """The runs to launch: not done (a done run made with other settings is an error). Prints one
    line per run: ``[benchmark] skip|resume|restart|start <key>: why`` (see :func:`plan_line`)."""
    todo = []
    for spec in runs:
        slot = runner.slot_of(out_dir, spec)
        rec = runner.read_record(slot)
        if rec is not None:
            runner.check_record(rec, spec)
        action, why = plan_line(rec, runner.latest_run_folder(slot), retry_failed)
        print(f"[benchmark] {action} {spec.key}: {why}", flush=True)
        if action != "skip":
            todo.append(spec)
    return todo


def plan_line(record: Optional[Dict[str, Any]], checkpointed: Optional[str], retry_failed: bool) -> Tuple[str, str]:
    """What a launch does with one run and why: ``("skip" | "resume" | "restart" | "start", why)``.

    ``record`` is the run's ``record.json`` from an earlier launch (``None``: none), ``checkpointed``
    its newest run folder with a checkpoint (:func:`marl.benchmarks.runner.latest_run_folder`, which
    the run resumes from).
    """
    status = (record or {}).get("status")
    if status == "done":
        return "skip", "done in an earlier launch"
    if status == "failed" and not retry_failed:
        return "skip", "failed in an earlier launch (--no-retry-failed)"
    before = {
        None: "new",
        "running": "its launch ended while it ran",
        "interrupted": "interrupted",
        "failed": "failed",
    }.get(status, str(status))
    if checkpointed:
        return "resume", f"{before}; from the checkpoint in {checkpointed}"
    if record is None:
        return "start", "new"
    return "restart", f"{before}; no checkpoint yet, from step 0"


def _start_ray(address: Optional[str]) -> bool:
    """Join ``address`` or start a local Ray; True when this call started or joined it."""
    import ray

    if ray.is_initialized():
        return False
    if address:
        try:
            ray.init(address=address, log_to_driver=False, configure_logging=False)
        except (ConnectionError, RuntimeError) as e:
            raise MarlError(
                f"Could not join the Ray cluster at {address!r}: {str(e).splitlines()[0]} (a cluster with "
                f"token authentication needs RAY_AUTH_MODE=token and its token, e.g. ~/.ray/auth_token, "
                f"on this machine; docs/benchmarks.md)."
            ) from e
        return True
    from marl.api import start_ray

    return start_ray()


def _execute(suite: Suite, out_dir: Path, runs: List[RunSpec], todo: List[RunSpec], progress: bool) -> bool:
    """Submit ``todo`` as Ray tasks and wait, updating the progress view; True if Ctrl-C stopped it."""
    import ray

    task = ray.remote(num_cpus=suite.cpus_per_run, num_gpus=suite.gpus_per_run, max_retries=0)(runner.run_one)
    queue, pending = list(todo), {}
    limit = concurrent_runs(suite, ray.cluster_resources())

    def submit() -> None:  # keep up to `limit` runs submitted (Ray's own CPU count lets more in: concurrent_runs)
        while queue and len(pending) < limit:
            spec = queue.pop(0)
            pending[task.remote(spec, suite, str(runner.slot_of(out_dir, spec)))] = spec

    submit()
    view = ProgressView(suite, out_dir, runs, todo, show=progress)
    try:
        with term_as_interrupt():
            _wait(pending, view, out_dir, submit)
    except KeyboardInterrupt:
        _cancel(pending, view)
        return True
    finally:
        view.close()
    return False


def concurrent_runs(suite: Suite, resources: Dict[str, float]) -> int:
    """How many runs of ``suite`` the cluster's ``resources`` (``ray.cluster_resources()``) hold at once: its CPUs
    over ``cpus_per_run`` (and GPUs over ``gpus_per_run``), at least 1. The driver submits no more than this,
    because Ray hands a task's CPUs to the next one while the task waits in ``ray.get``: a run that samples on
    remote env runners (``num_env_runners >= 1``, e.g. ``async_sampling``) waits that way all the time: a launch
    of three such runs with ``cpus_per_run: 2`` on a 2-CPU machine started two at once, each with its runner."""
    fits = [int(resources.get("CPU", 0) // suite.cpus_per_run)]
    if suite.gpus_per_run:
        fits.append(int(resources.get("GPU", 0) // suite.gpus_per_run))
    return max(1, min(fits))


def _wait(pending: Dict[Any, RunSpec], view: "ProgressView", out_dir: Path, submit: Callable[[], None]) -> None:
    """Collect finished runs until none is pending, submitting queued ones (``submit``) as slots free up and
    refreshing the progress view."""
    import ray

    while pending:
        ready, _ = ray.wait(list(pending), num_returns=1, timeout=2.0)
        for ref in ready:
            spec = pending.pop(ref)
            view.finished(spec, _record_or_error(ref, runner.slot_of(out_dir, spec)))
        submit()
        view.refresh(list(pending.values()))


@contextlib.contextmanager
def term_as_interrupt() -> Iterator[None]:
    """SIGTERM (a cluster scheduler's or ``kill``'s stop) behaves as Ctrl-C while the runs are waited on:
    the running runs save a checkpoint and the relaunch resumes them. Outside the main thread (where
    Python cannot set handlers) it changes nothing."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    old = signal.signal(signal.SIGTERM, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, old)


def _record_or_error(ref, slot: Path) -> Dict[str, Any]:
    """The run's record; when its process died (a killed worker, out of memory) the run could not
    write one, so the driver marks its record failed (a relaunch resumes it from its checkpoint)."""
    import ray

    try:
        return ray.get(ref)
    except Exception as e:  # noqa: BLE001 - WorkerCrashedError, OutOfMemoryError, ...
        record = {
            **(runner.read_record(slot) or {}),
            "status": "failed",
            "error": f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}",
        }
        if slot.is_dir():
            write_json(slot / runner.RECORD, record)
        return record


def _cancel(pending: Dict[Any, RunSpec], view: "ProgressView", grace_s: float = 120.0) -> None:
    """Ctrl-C: ask every running run to stop (it saves a checkpoint) and wait up to ``grace_s``;
    a second Ctrl-C stops waiting (the runs resume from their last periodic checkpoint)."""
    import ray

    print(
        f"\n[benchmark] interrupted: stopping the running runs (each saves a checkpoint; Ctrl-C again to stop "
        f"waiting); {len(pending)} runs not finished",
        flush=True,
    )
    for ref in pending:
        ray.cancel(ref, force=False)
    try:
        ray.wait(list(pending), num_returns=len(pending), timeout=grace_s)
    except KeyboardInterrupt:
        pass


class ProgressView:
    """The live view (:class:`marl.logging.Progress`: a bar on a terminal, else a plain line every
    10 s) over env steps of all runs (so its ETA counts partial runs), with runs done / running /
    failed; a line per finished or failed run."""

    def __init__(self, suite: Suite, out_dir: Path, runs: List[RunSpec], todo: List[RunSpec], show: bool):
        from marl.logging import Progress

        self.suite, self.out_dir, self.show = suite, out_dir, show
        self.done, self.failed = len(runs) - len(todo), 0
        self.total = len(runs)
        steps = len(runs) * suite.env_steps
        self.bar = Progress(steps, self.done * suite.env_steps, desc=f"benchmark {suite.name}", show=show)
        self._finished_steps = self.done * suite.env_steps

    def finished(self, spec: RunSpec, record: Dict[str, Any]) -> None:
        status = record.get("status")
        if status == "done":
            self.done += 1
            self._finished_steps += self.suite.env_steps
            final = record["absolute"]
            metric = "win_rate" if "win_rate" in final else "return"
            msg = (
                f"done {spec.key}: absolute {metric} {sum(final[metric]) / len(final[metric]):.3f} "
                f"({record.get('wall_clock_s', 0):.0f} s)"
            )
        else:
            self.failed += status == "failed"
            msg = f"{status} {spec.key}: {record.get('error', '')[:300]}"
        self.bar.write(f"[benchmark] {msg}")

    def refresh(self, pending: List[RunSpec]) -> None:
        """Update the bar; ``pending`` are the submitted runs not finished (running or queued)."""
        slots = [runner.slot_of(self.out_dir, s) for s in pending]
        running = sum((runner.read_record(slot) or {}).get("status") == "running" for slot in slots)
        partial = sum(min(runner.partial_steps(slot), self.suite.env_steps) for slot in slots)
        n = self._finished_steps + partial
        runs = f"runs done {self.done}/{self.total}, running {running}, queued {len(pending) - running}, failed {self.failed}"
        total = self.total * self.suite.env_steps
        self.bar.update(n, runs, f"[benchmark] {self.suite.name}: {n:,}/{total:,} env steps | {runs}")

    def close(self) -> None:
        self.bar.close()


# ------------------------------------------------------------------ results and provenance
def write_results(
    suite: Suite, out_dir: Path, runs: List[RunSpec], wall_clock_s: float, commit: Optional[str] = None
) -> Dict[str, Any]:
    """Write ``results.json`` (marl-eval format, finished runs) and ``provenance.json`` (``commit``: the git commit
    the launch started from; default: the current one); returns a summary."""
    from marl.benchmarks.report import validate_marl_eval

    records = runner.collect(out_dir, runs)
    data = runner.to_marl_eval(records)
    validate_marl_eval(data)
    write_json(out_dir / "results.json", data)
    write_json(out_dir / "provenance.json", provenance(records, wall_clock_s, commit))
    done = sum(r.get("status") == "done" for r in records.values())
    failed = {k: r.get("error", "") for k, r in records.items() if r.get("status") == "failed"}
    return {
        "out": str(out_dir),
        "done": done,
        "failed": failed,
        "runs": len(runs),
        "results": str(out_dir / "results.json"),
    }


def provenance(records: Dict[str, Dict[str, Any]], wall_clock_s: float, commit: Optional[str] = None) -> Dict[str, Any]:
    """Versions of marl, Ray, torch and the env packages, git commit (``commit``, taken when the launch started;
    default: the current one), hardware, wall-clock of this launch, and every run's status, wall-clock and full
    config."""
    import importlib.metadata as md

    versions = {}
    for p in _PACKAGES:
        try:
            versions[p] = md.version(p)
        except md.PackageNotFoundError:
            versions[p] = None
    return {
        "marl_version": versions["marl-rllib"],
        "ray_version": versions["ray"],
        "torch_version": versions["torch"],
        "packages": versions,
        "git_commit": commit or _git_commit(),
        "python": sys.version.split()[0],
        "hardware": _hardware(),
        "wall_clock_s": round(wall_clock_s, 1),
        "command": " ".join(sys.argv),
        "time": time.strftime("%Y-%m-%dT%H:%M:%S"),
        "runs": {
            k: {
                "status": r.get("status"),
                "wall_clock_s": r.get("wall_clock_s"),
                "env_steps": r.get("env_steps"),
                "resumed_from": r.get("resumed_from"),
                "config": r.get("config"),
            }
            for k, r in records.items()
        },
    }


def _git_commit() -> Optional[str]:
    """The commit of the marl source tree (``+dirty`` with uncommitted changes), or None."""
    here = Path(__file__).resolve().parent
    try:
        commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=here, capture_output=True, text=True, timeout=10)
        if commit.returncode:
            return None
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=here,
            capture_output=True,
            text=True,
            timeout=10,
        ).stdout.strip()
        return commit.stdout.strip() + ("+dirty" if dirty else "")
    except (OSError, subprocess.SubprocessError):
        return None


def _hardware() -> Dict[str, Any]:
    import torch

    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    gpus = (
        [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())] if torch.cuda.is_available() else []
    )
    mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30 if hasattr(os, "sysconf") else None
    return {
        "cpu": cpu,
        "cpus": os.cpu_count(),
        "memory_gib": round(mem, 1) if mem else None,
        "gpus": gpus,
        "platform": platform.platform(),
        "host": platform.node(),
    }
