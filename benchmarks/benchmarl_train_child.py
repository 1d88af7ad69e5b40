"""One whole BenchMARL training run on a VMAS task, for :mod:`marl.benchmarks.benchmarl_returns`.

It runs in *another* Python environment, the one BenchMARL is installed in (BenchMARL pins its own
torchrl/tensordict, so it is not a dependency of marl), and imports only the standard library, torch
and BenchMARL, never marl.

The experiment is BenchMARL's own defaults (its ``base_experiment`` config, the algorithm's config,
the task's config and its MLP ``[256, 256]`` Tanh model for actor and critic) with these changes:
CPU for sampling, training and buffer; ``max_n_frames`` = ``--frames``; an evaluation every
``--eval-interval`` frames of ``--eval-episodes`` episodes (deterministic actions: its default); no
loggers, no rendering, no checkpoints; the marl-eval JSON kept (``create_json``, its default); one
torch thread. ``exploration_anneal_frames`` stays ``null``, which BenchMARL reads as a third of
``max_n_frames``.

When the run ends it prints one JSON line: ``{"settings", "evaluations": [{"frames", "returns"}],
"wall_s", "cpu_s"}``. ``returns`` are BenchMARL's marl-eval ``return`` per evaluation episode: the
mean over groups of the mean over the group's agents of each agent's summed reward.

Usage: ``python benchmarl_train_child.py --algo maddpg --task balance --frames 120000 --seed 0
--eval-interval 24000 --eval-episodes 10``.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

ALGOS = ("maddpg", "iddpg", "masac", "isac")
TASKS = ("balance", "navigation", "sampling")


def _parse(argv):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--algo", choices=ALGOS, required=True)
    p.add_argument("--task", choices=TASKS, required=True)
    for name, default in (("frames", 120_000), ("seed", 0), ("eval-interval", 24_000), ("eval-episodes", 10)):
        p.add_argument(f"--{name}", type=int, default=default)
    return p.parse_args(argv)


def _experiment(a, folder):
    """BenchMARL's ``Experiment`` with the settings of the module docstring."""
    import benchmarl.algorithms as algorithms
    from benchmarl.environments import VmasTask
    from benchmarl.experiment import Experiment, ExperimentConfig
    from benchmarl.models.mlp import MlpConfig

    cfg = ExperimentConfig.get_from_yaml()
    cfg.sampling_device = cfg.train_device = cfg.buffer_device = "cpu"
    cfg.max_n_iters, cfg.max_n_frames = None, a.frames
    cfg.evaluation, cfg.evaluation_interval, cfg.evaluation_episodes = True, a.eval_interval, a.eval_episodes
    cfg.render, cfg.loggers, cfg.create_json = False, [], True
    cfg.checkpoint_interval, cfg.checkpoint_at_end = 0, False
    cfg.save_folder = folder
    algo = getattr(algorithms, f"{a.algo.capitalize()}Config")  # MaddpgConfig, MasacConfig, ...
    model = MlpConfig.get_from_yaml()
    return Experiment(
        task=getattr(VmasTask, a.task.upper()).get_from_yaml(),
        algorithm_config=algo.get_from_yaml(),
        model_config=model,
        critic_model_config=model,
        seed=a.seed,
        config=cfg,
    ), cfg


def _evaluations(folder: str):
    """``[{"frames", "returns"}]`` from the marl-eval JSON BenchMARL wrote under ``folder``."""
    (path,) = [p for p in Path(folder).rglob("*.json") if "step_" in p.read_text()]
    data = json.loads(path.read_text())
    (run,) = [
        seed for env in data.values() for task in env.values() for algo in task.values() for seed in algo.values()
    ]
    steps = sorted((v for k, v in run.items() if k.startswith("step_")), key=lambda s: s["step_count"])
    return [{"frames": s["step_count"], "returns": s["return"]} for s in steps]


def main(argv=None) -> int:
    a = _parse(argv)
    import torch

    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory(prefix="benchmarl_train_") as folder:
        experiment, cfg = _experiment(a, folder)
        t0 = (time.perf_counter(), time.process_time())
        experiment.run()
        wall, cpu = time.perf_counter() - t0[0], time.process_time() - t0[1]
        out = {
            "settings": {
                **vars(a),
                "benchmarl": _version(),
                "torch": torch.__version__,
                "torch_threads": torch.get_num_threads(),
                "frames_per_batch": cfg.off_policy_collected_frames_per_batch,
                "n_envs": cfg.off_policy_n_envs_per_worker,
                "optimizer_steps": cfg.off_policy_n_optimizer_steps,
                "train_batch_size": cfg.off_policy_train_batch_size,
                "lr": cfg.lr,
                "gamma": cfg.gamma,
                "n_agents": experiment.task.config.get("n_agents"),
                "max_steps": experiment.task.config.get("max_steps"),
            },
            "evaluations": _evaluations(folder),
            "wall_s": wall,
            "cpu_s": cpu,
        }
    sys.stdout.write(json.dumps(out) + "\n")
    return 0


def _version() -> str:
    import benchmarl

    return getattr(benchmarl, "__version__", "unknown")


if __name__ == "__main__":
    sys.exit(main())
