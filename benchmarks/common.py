"""What every benchmark shares: the result of one measured side, the clocks, Ray, JSON and table rows.

What is measured
----------------
Training throughput in **env steps per second of whole training iterations**
(sampling + learning + everything else the training loop does per
iteration), on one machine, in one process. For each side::

    env steps/s = env steps of the measured iterations / wall time of those iterations

The leading warm-up iterations of each side (the first one for PPO, more for
value decomposition: JIT compiles, a replay buffer not yet full enough to
train on) are never counted. One *env step* is one step of one env copy (all
agents acting once), whatever the number of agents. Wall time is
``time.perf_counter``; per iteration it runs from the call of the
framework's ``train()`` to its return, so it includes the framework's
per-iteration overhead. The CPU time of this process (``time.process_time``)
over the same iterations is kept too: everything runs in this process, so env
steps per CPU second is a cross-check that other processes' load cannot
inflate. ``docs/engine.md`` ("Throughput") gives measured figures.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import math
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, Iterator, List, Optional, Tuple

__all__ = [
    "MPE_KWARGS",
    "SideResult",
    "Clock",
    "now",
    "timed",
    "mean",
    "ray_for_bench",
    "jsonable",
    "write_json",
    "fmt",
    "fmt_load",
    "side_header",
    "side_row",
]

# The task of both MPE sides of the throughput benchmark (mpe2 simple_spread_v3).
MPE_KWARGS: Dict[str, Any] = {"N": 3, "max_cycles": 25, "local_ratio": 0.5, "continuous_actions": False}

_SECONDS = ("wall_s", "sample_s", "learn_s", "cpu_s")  # float fields JSON may carry as null (NaN)


@dataclass
class SideResult:
    """Throughput of one side over its measured iterations (the warm-up ones excluded).

    Attributes:
        name: label of the side (``"ours"``, ``"rllib"``, ``"vmas"``, an algorithm or agent network).
        env_steps: env steps of the measured iterations (1 env step = 1 step of 1 env copy).
        wall_s: wall time of the measured iterations (seconds).
        iterations: number of measured iterations.
        sample_s: mean sampling time per measured iteration (seconds).
        learn_s: mean learning time per measured iteration (seconds; RLlib: the
            ``learner_group.update`` call; marl: the update plus weight sync).
        cpu_s: CPU time of this process (all its threads) in the measured iterations
            (seconds; NaN if not measured).
        settings: what ran (batch, epochs, minibatches, ...), for the report.
        notes: anything the reader must know (e.g. a check that failed).
    """

    name: str
    env_steps: int
    wall_s: float
    iterations: int
    sample_s: float
    learn_s: float
    cpu_s: float = float("nan")
    settings: Dict[str, Any] = field(default_factory=dict)
    notes: List[str] = field(default_factory=list)

    @property
    def steps_per_s(self) -> float:
        """Env steps per second of whole iterations (wall clock); NaN without wall time."""
        return self.env_steps / self.wall_s if self.wall_s > 0 else float("nan")

    @property
    def steps_per_cpu_s(self) -> float:
        """Env steps per CPU second of this process; NaN without CPU time."""
        return self.env_steps / self.cpu_s if self.cpu_s > 0 else float("nan")

    def to_dict(self) -> Dict[str, Any]:
        """The fields plus the derived ``env_steps_per_s`` and ``env_steps_per_cpu_s``."""
        out = dataclasses.asdict(self)
        out["env_steps_per_s"] = self.steps_per_s
        out["env_steps_per_cpu_s"] = self.steps_per_cpu_s
        return out

    @classmethod
    def from_dict(cls, data: Dict[str, Any]) -> "SideResult":
        """Inverse of :meth:`to_dict` (also of its JSON, where NaN seconds are ``null``);
        derived figures are recomputed, not read."""
        names = {f.name for f in dataclasses.fields(cls)}
        kw = {k: v for k, v in data.items() if k in names}
        for key in _SECONDS:
            if key in kw and kw[key] is None:
                kw[key] = float("nan")
        return cls(**kw)


# ----------------------------------------------------------------------------- clocks

Clock = Tuple[float, float]  # (time.perf_counter(), time.process_time()), seconds


def now() -> Clock:
    """Wall clock and this process's CPU clock, in seconds."""
    return time.perf_counter(), time.process_time()


def timed(fn: Callable, sink: List[float], on_result: Optional[Callable[[Any], None]] = None) -> Callable:
    """Wrap ``fn`` so that each call's wall duration (seconds) is appended to ``sink``;
    ``on_result`` (untimed) receives each call's return value."""

    def wrapper(*args, **kwargs):
        t0 = time.perf_counter()
        out = fn(*args, **kwargs)
        sink.append(time.perf_counter() - t0)
        if on_result is not None:
            on_result(out)
        return out

    return wrapper


def mean(xs: List[float]) -> float:
    """Arithmetic mean; NaN for an empty list."""
    return sum(xs) / len(xs) if xs else float("nan")


@contextlib.contextmanager
def ray_for_bench() -> Iterator[bool]:
    """Start Ray for a benchmark (the machine's CPUs, loopback only, token authentication on; :func:`marl.api.start_ray`)
    and stop it afterwards if this call started it. Yields whether it did."""
    from marl.api import start_ray

    started = start_ray()
    try:
        yield started
    finally:
        if started:
            import ray

            ray.shutdown()


# ----------------------------------------------------------------------------- JSON


def jsonable(x: Any) -> Any:
    """``x`` as plain JSON data: objects with ``to_dict`` through it, tuples as lists,
    NaN and infinities as ``None`` (strict JSON has no NaN)."""
    if hasattr(x, "to_dict"):
        return jsonable(x.to_dict())
    if isinstance(x, dict):
        return {str(k): jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [jsonable(v) for v in x]
    if isinstance(x, float) and not math.isfinite(x):
        return None
    return x


def write_json(result: Any, path: str | os.PathLike) -> Path:
    """Write a benchmark result (anything :func:`jsonable` takes) to ``path`` as indented
    strict JSON, creating parent folders. Returns the path. Values JSON lacks (e.g. a
    ``Path`` in a setting) are written as their ``str``."""
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(jsonable(result), indent=2, allow_nan=False, default=str) + "\n")
    return out


# ----------------------------------------------------------------------------- text


def fmt(v: Any) -> str:
    """A setting's value for the report: floats to 4 significant digits."""
    return f"{v:.4g}" if isinstance(v, float) else str(v)


def fmt_load(load) -> str:
    """A load average triple, two decimals each."""
    return " ".join(f"{x:.2f}" for x in load)


def side_header(label: str, last: str) -> str:
    """Header of a table of sides whose last column is ``last``."""
    return f"{label:<9} {'env_steps/s':>12} {'sample_s/it':>12} {'learn_s/it':>11} {'iters':>6} {last}"


def side_row(r: SideResult, last: str) -> str:
    """One side's row under :func:`side_header`."""
    return f"{r.name:<9} {r.steps_per_s:>12.1f} {r.sample_s:>12.4f} {r.learn_s:>11.4f} {r.iterations:>6d} {last}"
