"""Run logging: progress (a tqdm bar on a terminal, plain lines in a pipe or file), TensorBoard
scalars and a CSV of the same metrics.

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
import time
from pathlib import Path
from typing import Any, Callable, Dict, Optional, TextIO, Union

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


class Progress:
    """Progress of a long job: a tqdm bar when stderr is a terminal, else plain lines.

    In a pipe or a file a redrawn bar is unreadable (carriage returns, one line per
    redraw), so there the view prints a whole line at the first update, then at most
    one every ``every_s`` seconds, and the last one at :meth:`close`. ``fit`` and
    ``marl benchmark run`` both show their progress through this class.

    Args:
        total: the count at the end (env steps, say); None when unknown.
        initial: the count already done (a resumed job).
        desc: the bar's label.
        show: False shows nothing but the lines given to :meth:`write`.
        every_s: seconds between two plain lines (not on a terminal).
        tty: draw the bar; default ``sys.stderr.isatty()``.
        out: the stream of plain lines (default ``sys.stdout``, read at each line).
        clock: seconds (for tests); default ``time.monotonic``.
    """

    def __init__(
        self,
        total: Optional[int],
        initial: int = 0,
        *,
        desc: Optional[str] = None,
        show: bool = True,
        every_s: float = 10.0,
        tty: Optional[bool] = None,
        out: Optional[TextIO] = None,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.show, self.every_s, self._out, self._clock = show, every_s, out, clock
        self.tty = sys.stderr.isatty() if tty is None else tty
        self.bar = None
        if show and self.tty:
            self.bar = tqdm(total=total, initial=initial, desc=desc, unit="step", unit_scale=True, dynamic_ncols=True)
        self._last_print: Optional[float] = None
        self._pending: Optional[str] = None  # the latest line not printed yet

    def update(self, n: int, postfix: Union[Dict[str, Any], str], line: str) -> None:
        """The job is at count ``n``: move the bar there with ``postfix``, or (no terminal)
        print ``line`` if ``every_s`` passed since the last line printed."""
        if not self.show:
            return
        if self.bar is not None:
            self.bar.n = n
            if isinstance(postfix, str):
                self.bar.set_postfix_str(postfix)  # both refresh the bar
            else:
                self.bar.set_postfix(postfix)
            return
        now = self._clock()
        self._pending = line
        if self._last_print is None or now - self._last_print >= self.every_s:
            self._print(line)
            self._last_print = now

    def write(self, msg: str) -> None:
        """Print a message line (above the bar on a terminal), whether or not progress is shown."""
        if self.bar is not None:
            self.bar.write(msg)
        else:
            print(msg, file=self._out or sys.stdout, flush=True)

    def _print(self, line: str) -> None:
        print(line, file=self._out or sys.stdout, flush=True)
        self._pending = None

    def close(self) -> None:
        """Close the bar, or print the last line if it was held back."""
        if self.bar is not None:
            self.bar.close()
        elif self._pending is not None:
            self._print(self._pending)


def _steps(row: Dict[str, str]) -> float:
    """The env steps of a CSV row read back (a row without them counts as step 0)."""
    try:
        return float(row.get("env_steps") or 0)
    except ValueError:
        return 0.0


class RunLogger:
    """Writes every iteration's metrics to TensorBoard (``<run>/tb``), ``<run>/progress.csv``
    and a :class:`Progress` view of env steps, steps/s, mean return and time left.

    Args:
        run_dir: folder of the run.
        stop: the ``stop`` criteria (used for the bar's length and time left).
        show: show progress (a bar on a terminal, else a plain line every ``every_s`` seconds
            and the last iteration's).
        initial_steps: env steps of the checkpoint the run resumed from (0: a new run);
            rows and TensorBoard points of later steps, left by the run before, are dropped.
        every_s: seconds between two plain progress lines.
    """

    def __init__(
        self, run_dir: Path, stop: Dict[str, float], show: bool = True, initial_steps: int = 0, every_s: float = 10.0
    ):
        self.run_dir = Path(run_dir)
        self.tb_dir = self.run_dir / "tb"
        # purge_step: TensorBoard discards the events of earlier sessions from this step on
        self.writer = SummaryWriter(str(self.tb_dir), purge_step=initial_steps + 1 if initial_steps > 0 else None)
        self.csv_path = self.run_dir / "progress.csv"
        self._fd: Optional[int] = None
        self._fields: list = []
        self._rows: list = self._read_existing(initial_steps)
        self.stop = stop
        total = int(stop["env_steps"]) if "env_steps" in stop else None
        self.progress = Progress(total, initial_steps, show=show, every_s=every_s)

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
        ret = m.get("episode_return_mean")
        left = self._time_left(m)
        desc = {
            "it": m["iteration"],
            "steps/s": f"{m['env_steps_per_s']:.0f}",
            "return": "-" if ret is None else f"{ret:.2f}",
        }
        eta = "" if left is None else f" left {left:.0f}s"
        line = (
            f"[marl] it {m['iteration']:>5} | steps {m['env_steps']:>9} | {desc['steps/s']:>6} steps/s"
            f" | return {desc['return']:>8}{eta}"
        )
        self.progress.update(int(m["env_steps"]), desc, line)

    def close(self) -> None:
        self.writer.flush()
        self.writer.close()
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
        self.progress.close()
