"""The BenchMARL anchor: marl MAPPO vs BenchMARL's MAPPO on VMAS simple_spread, alternating iterations.

BenchMARL (Bettini et al., 2024, arXiv:2312.01472) pins its own torchrl and
tensordict, so it is not a dependency of marl: it lives in another Python
environment and runs there as a child process
(:mod:`marl.benchmarks.benchmarl_child`, standard library + BenchMARL only).
The environment is made once with (``docs/engine.md``, "Throughput")::

    python -m venv --system-site-packages ~/.venvs/benchmarl
    ~/.venvs/benchmarl/bin/pip install benchmarl==1.5.2 torch==2.13.0

(``--system-site-packages`` shares torch and vmas with marl's environment;
pinning torch keeps pip from pulling a CUDA build), and is named with
``marl bench vs-benchmarl --benchmarl-python ~/.venvs/benchmarl/bin/python``
or the ``MARL_BENCHMARL_PYTHON`` variable.

Pairs alternate: one marl iteration (``trainer.train()``), then one BenchMARL
iteration (the child's ``go``), so load from other processes hits both sides
alike. Same settings on both sides: ``B`` VMAS copies, ``T`` steps per copy
per iteration, ``E`` epochs of ``K`` minibatches, MLPs 2x``hidden`` ReLU for
actor and critic, a centralised critic evaluated once per env step with a value
per agent (marl ``critic=team``, BenchMARL ``share_param_critic``), discrete actions, ``max_steps`` per
episode, one torch thread. The first iteration of each side is warm-up.
"""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
from pathlib import Path
from typing import Any, Dict, List, Optional

from marl.benchmarks.common import SideResult, mean
from marl.errors import MarlError

__all__ = ["ENV_VAR", "SETUP_HINT", "BenchmarlAnchor", "benchmarl_python"]

ENV_VAR = "MARL_BENCHMARL_PYTHON"
SETUP_HINT = (
    "make BenchMARL's environment once with `python -m venv --system-site-packages ~/.venvs/benchmarl && "
    "~/.venvs/benchmarl/bin/pip install benchmarl==1.5.2 torch==2.13.0`, then pass "
    f"--benchmarl-python ~/.venvs/benchmarl/bin/python (or set {ENV_VAR})"
)
_CHILD = Path(__file__).with_name("benchmarl_child.py")


def benchmarl_python(given: Optional[str]) -> Optional[str]:
    """The interpreter of BenchMARL's environment: ``given``, else ``$MARL_BENCHMARL_PYTHON``, else ``None``.

    Raises:
        MarlError: the path names no file.
    """
    path = given or os.environ.get(ENV_VAR) or None
    if path is not None and not Path(os.path.expanduser(path)).is_file():
        raise MarlError(f"BenchMARL python {path!r} does not exist; {SETUP_HINT}.")
    return None if path is None else os.path.expanduser(path)


class BenchmarlAnchor:
    """BenchMARL's MAPPO (or an off-policy actor-critic) in a child process, one timed iteration per
    :meth:`train_one`.

    Args:
        python: interpreter of BenchMARL's environment (:func:`benchmarl_python`).
        num_envs, rollout_length, epochs, minibatches, hidden, max_steps: ``B``, ``T``,
            ``E``, ``K``, MLP width, episode length (as marl's side).
        **child: more options of the child (``benchmarks/benchmarl_child.py``): ``algo``, ``task``,
            ``optimizer_steps``, ``train_batch``, ``activation``.

    Raises:
        MarlError: the child fails to start (BenchMARL missing or broken in that
            environment) or dies; the message carries the tail of its stderr.
    """

    def __init__(
        self,
        python: str,
        num_envs: int = 512,
        rollout_length: int = 25,
        epochs: int = 3,
        minibatches: int = 2,
        hidden: int = 64,
        max_steps: int = 100,
        **child: Any,
    ):
        args = [
            python,
            str(_CHILD),
            "--num-envs",
            str(num_envs),
            "--rollout-length",
            str(rollout_length),
            "--epochs",
            str(epochs),
            "--minibatches",
            str(minibatches),
            "--hidden",
            str(hidden),
            "--max-steps",
            str(max_steps),
            *[x for k, v in child.items() for x in (f"--{k.replace('_', '-')}", str(v))],
        ]
        self.algo = str(child.get("algo", "mappo"))
        self._stderr = tempfile.TemporaryFile(mode="w+")
        env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
        self._proc = subprocess.Popen(
            args, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._stderr, text=True, env=env
        )
        self.settings: Dict[str, Any] = self._read().get("settings", {})
        self.iterations: List[Dict[str, float]] = []

    def _read(self) -> Dict[str, Any]:
        """The child's next JSON line; a dead child raises :class:`MarlError` with its stderr tail."""
        while True:
            line = self._proc.stdout.readline()
            if not line:
                self._proc.wait(timeout=30)
                self._stderr.seek(0)
                tail = self._stderr.read()[-2000:]
                raise MarlError(
                    f"the BenchMARL child ({self._proc.args[0]}) exited with code "
                    f"{self._proc.returncode}; {SETUP_HINT}. Its stderr ends with:\n{tail}"
                )
            if line.startswith("{"):
                return json.loads(line)

    def train_one(self) -> Dict[str, float]:
        """Run one BenchMARL iteration; returns its times (seconds) and frames."""
        self._proc.stdin.write("go\n")
        self._proc.stdin.flush()
        it = self._read()
        self.iterations.append(it)
        return it

    def result(self, warmup: int = 1) -> SideResult:
        """The :class:`SideResult` of iterations ``warmup+1..n`` (name ``"benchmarl"``)."""
        its = self.iterations[warmup:]
        return SideResult(
            name="benchmarl",
            env_steps=sum(int(i["frames"]) for i in its),
            wall_s=sum(i["wall_s"] for i in its),
            iterations=len(its),
            sample_s=mean([i["collection_s"] for i in its]),
            learn_s=mean([i["training_s"] for i in its]),
            cpu_s=sum(i["cpu_s"] for i in its),
            settings={**self.settings, "critic": f"BenchMARL {self.algo} share_param_critic"},
            notes=["child process in BenchMARL's own environment; learn_s includes its replay-buffer fill"],
        )

    def stop(self) -> None:
        """End the child (``stop``, then kill after 30 s)."""
        try:
            self._proc.stdin.write("stop\n")
            self._proc.stdin.close()
            self._proc.wait(timeout=30)
        except (OSError, ValueError, subprocess.TimeoutExpired):
            self._proc.kill()
        finally:
            self._stderr.close()
