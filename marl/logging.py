"""Run logging: a progress bar (tqdm), TensorBoard scalars and a CSV of the same metrics.

Both files stay consistent through crashes and resumes: every CSV row reaches the
file as one whole line in one write (no torn lines), a header that grows is
written to a temporary file that replaces the old one (``os.replace``), and a run
continued in place from a checkpoint drops the CSV rows and TensorBoard points
logged after that checkpoint's env steps, so no step appears twice.
"""

from __future__ import annotations

import csv
import io
import math
import os
import sys
from pathlib import Path
from typing import Any, Dict, Optional

from tqdm import tqdm

from torch.utils.tensorboard import SummaryWriter

# Metric -> TensorBoard tag; anything else goes under "train/".
_TAGS = {
    "episode_return_mean": "return/team_sum",
    "episode_length_mean": "episode/length",
    "env_steps_per_s": "perf/env_steps_per_s",
    "sample_time_s": "perf/sample_time_s",
    "learn_time_s": "perf/learn_time_s",
}


def _tag(key: str) -> str:
    if key in _TAGS:
        return _TAGS[key]
    if key.startswith("return_"):
        return "return/" + key[len("return_") :].removesuffix("_mean")
    return "train/" + key


def _steps(row: Dict[str, str]) -> float:
    """The env steps of a CSV row read back (a row without them counts as step 0)."""
    try:
        return float(row.get("env_steps") or 0)
    except ValueError:
        return 0.0


class RunLogger:
    """Writes every iteration's metrics to TensorBoard (``<run>/tb``), ``<run>/progress.csv``
    and a progress bar showing env steps, steps/s, mean return and time left.

    Args:
        run_dir: folder of the run.
        total: the ``stop`` criteria (used for the bar's length and time left).
        show: draw the progress bar (a plain line per iteration when not a TTY).
        initial_steps: env steps of the checkpoint the run resumed from (0: a new run);
            rows and TensorBoard points of later steps, left by the run before, are dropped.
    """

    def __init__(self, run_dir: Path, stop: Dict[str, float], show: bool = True, initial_steps: int = 0):
        self.run_dir = Path(run_dir)
        self.tb_dir = self.run_dir / "tb"
        # purge_step: TensorBoard discards the events of earlier sessions from this step on
        self.writer = SummaryWriter(str(self.tb_dir), purge_step=initial_steps + 1 if initial_steps > 0 else None)
        self.csv_path = self.run_dir / "progress.csv"
        self._fd: Optional[int] = None
        self._fields: list = []
        self._rows: list = self._read_existing(initial_steps)
        self.stop = stop
        self.show = show
        self._tty = sys.stderr.isatty()
        self.bar = None
        if show and self._tty:
            total = int(stop["env_steps"]) if "env_steps" in stop else None
            self.bar = tqdm(total=total, initial=initial_steps, unit="step", unit_scale=True, dynamic_ncols=True)
        self._last_steps = initial_steps

    def _read_existing(self, initial_steps: int) -> list:
        """Rows of a resumed run's CSV up to ``initial_steps``, so the file keeps the whole
        history once; later rows (logged after the checkpoint) are dropped from the file."""
        if not self.csv_path.exists():
            return []
        with open(self.csv_path, newline="") as f:
            reader = csv.DictReader(f)
            rows = list(reader)
            self._fields = list(reader.fieldnames or [])
        kept = [r for r in rows if _steps(r) <= initial_steps]
        if len(kept) < len(rows):
            self._rewrite(kept)
        return kept

    def log(self, m: Dict[str, Any]) -> None:
        step = int(m["env_steps"])
        for k, v in m.items():
            if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and k != "env_steps":
                self.writer.add_scalar(_tag(k), v, step)
        self._write_csv(m)
        self._show(m)

    def _write_csv(self, m: Dict[str, Any]) -> None:
        # Metrics can appear late (no episode ends in the first iteration): when the
        # set of columns grows, the file is rewritten with the wider header.
        row = {k: v for k, v in m.items() if isinstance(v, (int, float, str))}
        self._rows.append(row)
        new_keys = [k for k in row if k not in self._fields]
        if new_keys or not self.csv_path.exists():
            self._fields += new_keys
            self._rewrite(self._rows)
            return
        if self._fd is None:
            self._fd = os.open(self.csv_path, os.O_WRONLY | os.O_APPEND)
        os.write(self._fd, self._lines([row], header=False))  # one whole line in one write

    def _lines(self, rows: list, header: bool) -> bytes:
        buf = io.StringIO()
        w = csv.DictWriter(buf, fieldnames=self._fields, restval="", extrasaction="ignore")
        if header:
            w.writeheader()
        w.writerows(rows)
        return buf.getvalue().encode()

    def _rewrite(self, rows: list) -> None:
        """Write the whole CSV to a temporary file and swap it in: readers see the old or the new file."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
        tmp = self.csv_path.with_name(self.csv_path.name + ".tmp")
        with open(tmp, "wb") as f:
            f.write(self._lines(rows, header=True))
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.csv_path)

    def _time_left(self, m: Dict[str, Any]) -> Optional[float]:
        rate = m["env_steps"] / max(m["time_s"], 1e-9)
        left = []
        if "env_steps" in self.stop:
            left.append((self.stop["env_steps"] - m["env_steps"]) / max(rate, 1e-9))
        if "time_s" in self.stop:
            left.append(self.stop["time_s"] - m["time_s"])
        if "iterations" in self.stop:
            per_it = m["time_s"] / max(m["iteration"], 1)
            left.append((self.stop["iterations"] - m["iteration"]) * per_it)
        return max(0.0, min(left)) if left else None

    def _show(self, m: Dict[str, Any]) -> None:
        if not self.show:
            return
        ret = m.get("episode_return_mean")
        left = self._time_left(m)
        desc = {
            "it": m["iteration"],
            "steps/s": f"{m['env_steps_per_s']:.0f}",
            "return": "-" if ret is None else f"{ret:.2f}",
        }
        if self.bar is not None:
            self.bar.update(int(m["env_steps"]) - self._last_steps)
            self.bar.set_postfix(desc)
        else:
            eta = "" if left is None else f" left {left:.0f}s"
            print(
                f"[marl] it {m['iteration']:>5} | steps {m['env_steps']:>9} | {desc['steps/s']:>6} steps/s"
                f" | return {desc['return']:>8}{eta}",
                flush=True,
            )
        self._last_steps = int(m["env_steps"])

    def close(self) -> None:
        self.writer.flush()
        self.writer.close()
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
        if self.bar is not None:
            self.bar.close()
