"""Experiment trackers as run callbacks: Weights & Biases and MLflow.

Each logger is a :class:`~marl.callbacks.Callback`: pass it to ``fit`` and it logs the
run's config once and every iteration's metrics (at the iteration's env steps),
then the greedy evaluation under ``eval/``::

    from marl.loggers import MLflowLogger, WandbLogger

    env.fit("mappo", callbacks=[WandbLogger(project="spread")])
    env.fit("mappo", callbacks=[MLflowLogger(experiment="spread", tracking_uri="file:///tmp/mlruns")])

The tracker packages are optional extras (``pip install "marl[wandb]"``,
``pip install "marl[mlflow]"``) and are imported only when a logger is built. The
tracker's run id rides in marl's checkpoints, so a resumed run goes on logging into
the same tracker run. These play the part of the ``wandb`` / ``mlflow``
loggers of BenchMARL (Bettini et al. 2024, arXiv:2312.01472).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import TYPE_CHECKING, Any, Dict, Optional

from marl.callbacks import Callback
from marl.errors import optional_import

if TYPE_CHECKING:
    from marl.engine.trainer import Trainer

__all__ = ["MLflowLogger", "WandbLogger", "flat_config", "scalars"]


def scalars(metrics: Dict[str, Any], prefix: str = "") -> Dict[str, float]:
    """The finite numbers of ``metrics`` (bools, strings and NaN/inf dropped), keys prefixed."""
    return {
        prefix + k: float(v)
        for k, v in metrics.items()
        if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
    }


def flat_config(cfg: Any) -> Dict[str, Any]:
    """The run's config (a marl config, or a dict) as one flat dict: nested sections as ``a.b`` keys."""
    d = cfg.to_dict() if hasattr(cfg, "to_dict") else dict(cfg)
    out: Dict[str, Any] = {}
    for k, v in d.items():
        if isinstance(v, dict):
            out.update({f"{k}.{kk}": vv for kk, vv in flat_config(v).items()})
        else:
            out[k] = v if isinstance(v, (int, float, str, bool)) or v is None else str(v)
    return out


class _TrackerLogger(Callback):
    """What both trackers share: the tracker run opens at fit start (or reopens, on resume), takes the
    config once and each iteration's metrics at its env steps, and closes after the evaluation."""

    def __init__(self) -> None:
        self.run_id: Optional[str] = None
        self._open = False
        self._eval_pending = False

    def on_fit_start(self, trainer: Trainer) -> None:
        run_name = Path(trainer.run_dir).name if trainer.run_dir is not None else None
        self._start(run_name, flat_config(trainer.cfg), trainer.run_dir)
        self._open = True
        self._eval_pending = getattr(trainer.cfg, "eval_episodes", 0) > 0

    def on_iteration_end(self, trainer: Trainer, metrics: Dict[str, Any]) -> None:
        self._log(scalars(metrics), int(metrics["env_steps"]))

    def on_fit_end(self, trainer: Trainer, result: Any) -> None:
        if not self._eval_pending:  # else the run stays open for on_evaluate
            self._finish()

    def on_evaluate(self, result: Any, metrics: Dict[str, float]) -> None:
        if self._open:
            self._log(scalars(metrics, "eval/"), int(result.metrics.get("env_steps", 0)))
            self._finish()

    def _finish(self) -> None:
        if self._open:
            self._end()
            self._open = False

    def state_dict(self) -> Dict[str, Any]:
        return {"run_id": self.run_id}

    def load_state_dict(self, state: Dict[str, Any]) -> None:
        self.run_id = state.get("run_id") or self.run_id

    # the tracker's calls
    def _start(self, run_name: Optional[str], config: Dict[str, Any], run_dir: Optional[Path]) -> None:
        raise NotImplementedError

    def _log(self, values: Dict[str, float], step: int) -> None:
        raise NotImplementedError

    def _end(self) -> None:
        raise NotImplementedError


class WandbLogger(_TrackerLogger):
    """Logs a run to Weights & Biases: the config once, every iteration's metrics at its env
    steps (``step`` = env steps), the greedy evaluation as ``eval/<metric>``.

    Args:
        project: the W&B project.
        name: the W&B run name (default: the marl run folder's name).
        mode: ``"online"``, ``"offline"`` (written under ``dir``, uploaded later with
            ``wandb sync``) or ``"disabled"``; default: W&B's own (``WANDB_MODE``).
        dir: where W&B writes its files (default: the marl run folder).
        **init_kwargs: further arguments of ``wandb.init`` (``entity``, ``tags``, ``group``, ...).

    Raises:
        MarlError: the ``wandb`` package is not installed (``pip install "marl[wandb]"``).
    """

    def __init__(
        self,
        project: Optional[str] = None,
        *,
        name: Optional[str] = None,
        mode: Optional[str] = None,
        dir: Optional[str] = None,
        **init_kwargs: Any,
    ):
        super().__init__()
        self._wandb = optional_import(
            "wandb", 'WandbLogger needs the wandb package: pip install "marl[wandb]" (or: pip install wandb).'
        )
        self.project, self.run_name, self.mode, self.dir, self.init_kwargs = project, name, mode, dir, init_kwargs
        self.run: Any = None

    def _start(self, run_name: Optional[str], config: Dict[str, Any], run_dir: Optional[Path]) -> None:
        kwargs = dict(project=self.project, name=self.run_name or run_name, config=config, **self.init_kwargs)
        if self.mode is not None:
            kwargs["mode"] = self.mode
        if self.dir or run_dir is not None:
            kwargs["dir"] = str(self.dir or run_dir)
        if self.run_id is not None:  # resumed from a checkpoint: the same W&B run
            kwargs.update(id=self.run_id, resume="allow")
        self.run = self._wandb.init(**kwargs)
        self.run_id = self.run.id

    def _log(self, values: Dict[str, float], step: int) -> None:
        self.run.log(values, step=step)

    def _end(self) -> None:
        self.run.finish()


class MLflowLogger(_TrackerLogger):
    """Logs a run to MLflow: the config as parameters (nested keys as ``a.b``), every iteration's
    metrics at its env steps (``step``), the greedy evaluation as ``eval/<metric>``.

    Args:
        experiment: the MLflow experiment (created if missing; default ``"marl"``).
        tracking_uri: where runs are stored: a server (``http://host:5000``) or a file store
            (``file:///path/mlruns``); default: MLflow's own (``MLFLOW_TRACKING_URI``).
        run_name: the MLflow run name (default: the marl run folder's name).
        tags: tags of the MLflow run.

    Raises:
        MarlError: the ``mlflow`` package is not installed (``pip install "marl[mlflow]"``).
    """

    def __init__(
        self,
        experiment: str = "marl",
        *,
        tracking_uri: Optional[str] = None,
        run_name: Optional[str] = None,
        tags: Optional[Dict[str, str]] = None,
    ):
        super().__init__()
        tracking = optional_import(
            "mlflow.tracking",
            'MLflowLogger needs the mlflow package: pip install "marl[mlflow]" (or: pip install mlflow-skinny).',
        )
        self._entities = optional_import("mlflow.entities", "mlflow.entities is missing; reinstall mlflow.")
        self.client = tracking.MlflowClient(tracking_uri=tracking_uri)
        self.experiment, self.run_name, self.tags = experiment, run_name, dict(tags or {})

    def _start(self, run_name: Optional[str], config: Dict[str, Any], run_dir: Optional[Path]) -> None:
        if self.run_id is not None:  # resumed from a checkpoint: the same MLflow run
            self.client.update_run(self.run_id, status="RUNNING")
            return
        found = self.client.get_experiment_by_name(self.experiment)
        exp_id = found.experiment_id if found is not None else self.client.create_experiment(self.experiment)
        tags = {**self.tags, **({"marl.run_dir": str(run_dir)} if run_dir is not None else {})}
        run = self.client.create_run(exp_id, run_name=self.run_name or run_name, tags=tags)
        self.run_id = run.info.run_id
        params = [self._entities.Param(k, str(v)) for k, v in config.items()]
        for i in range(0, len(params), 100):  # MLflow takes at most 100 parameters per batch
            self.client.log_batch(self.run_id, params=params[i : i + 100])

    def _log(self, values: Dict[str, float], step: int) -> None:
        import time

        now = int(time.time() * 1000)
        metrics = [self._entities.Metric(k, v, now, step) for k, v in values.items()]
        for i in range(0, len(metrics), 1000):  # MLflow takes at most 1000 metrics per batch
            self.client.log_batch(self.run_id, metrics=metrics[i : i + 1000])

    def _end(self) -> None:
        self.client.set_terminated(self.run_id)
