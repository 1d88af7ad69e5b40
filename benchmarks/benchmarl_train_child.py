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
--eval-interval 24000 --eval-episodes 10``. With ``--one-step PATH`` (``maddpg``, ``iddpg``) it trains nothing: it
writes the inputs and outputs of one evaluation of the DDPG losses on a random batch to ``PATH``, which
``tests/test_benchmarl_parity.py`` compares with marl's losses on the same weights and batch.
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
    p.add_argument(
        "--one-step", metavar="PATH", help="no training: write one gradient step's inputs and outputs to PATH"
    )
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
        if a.one_step:
            sys.stdout.write(json.dumps(_one_step(experiment, a)) + "\n")
            return 0
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


ONE_STEP_BATCH = 64  # transitions of the one-step comparison's batch; the first 8 end in a terminal state


def _one_step(experiment, a) -> dict:
    """``--one-step``: the inputs and outputs of one loss evaluation of the DDPG losses (``maddpg``, ``iddpg``) on a
    random batch, for ``tests/test_benchmarl_parity.py``: ``torch.save`` of ``{obs, next_obs
    [B, N, D], actions [B, N, K], rewards [B, N], terminated [B], losses: {loss_actor, loss_value}, grads: {"<loss>/
    <parameter>": tensor}, state: {parameter or buffer: tensor}}``. The target critic is moved off the online one
    (``+ N(0, 0.01)``) so that the target path differs from the online path."""
    import torch
    from tensordict import TensorDict

    if a.algo not in ("maddpg", "iddpg"):
        raise SystemExit(f"--one-step compares the DDPG losses (maddpg, iddpg), not {a.algo}")
    (group,) = experiment.group_map
    loss = experiment.losses[group]
    n, d = experiment.observation_spec[group, "observation"].shape[-2:]
    k = experiment.action_spec[group, "action"].shape[-1]
    g = torch.Generator().manual_seed(a.seed)
    b = ONE_STEP_BATCH
    obs, next_obs = torch.randn(b, n, d, generator=g), torch.randn(b, n, d, generator=g)
    actions, rewards = torch.rand(b, n, k, generator=g) * 2 - 1, torch.randn(b, n, generator=g) * 0.1
    terminated = torch.arange(b) < 8
    done = terminated.view(b, 1, 1).expand(b, n, 1).clone()
    td = TensorDict(
        {
            (group, "observation"): obs,
            (group, "action"): actions,
            ("next", group, "observation"): next_obs,
            ("next", group, "reward"): rewards.unsqueeze(-1),
            ("next", group, "done"): done,
            ("next", group, "terminated"): done.clone(),
            ("next", "done"): terminated.view(b, 1).clone(),
            ("next", "terminated"): terminated.view(b, 1).clone(),
        },
        batch_size=[b],
    )
    td = experiment.algorithm.process_batch(group, td)
    with torch.no_grad():
        for name, buf in loss.named_buffers():
            if name.startswith("target_value_network_params") and buf.dim() > 0:
                buf.add_(torch.randn(buf.shape, generator=g) * 0.01)
    grads, losses = {}, {}
    for name in ("loss_actor", "loss_value"):
        loss.zero_grad()
        value = loss(td.clone())[name]
        value.backward()
        losses[name] = float(value.detach())
        grads.update({f"{name}/{p}": v.grad.clone() for p, v in loss.named_parameters() if v.grad is not None})
    state = {p: v.detach().clone() for p, v in [*loss.named_parameters(), *loss.named_buffers()]}
    dump = dict(obs=obs, next_obs=next_obs, actions=actions, rewards=rewards, terminated=terminated)
    torch.save({**dump, "losses": losses, "grads": grads, "state": state}, a.one_step)
    return {"one_step": a.one_step, "losses": losses, "settings": vars(a)}


def _version() -> str:
    import benchmarl

    return getattr(benchmarl, "__version__", "unknown")


if __name__ == "__main__":
    sys.exit(main())
