"""BenchMARL's MAPPO on VMAS simple_spread (or an off-policy actor-critic on another VMAS task), one
iteration per ``go`` line: the child process of :mod:`marl.benchmarks.benchmarl_anchor`.

It runs in *another* Python environment, the one BenchMARL is installed in
(BenchMARL pins its own torchrl/tensordict, so it is not a dependency of marl).
It imports only the standard library, torch and BenchMARL, never marl.

Protocol (one JSON object per stdout line, one command per stdin line):

* the child builds the experiment and prints ``{"ready": true, "settings": {...}}``;
* each ``go`` runs one BenchMARL iteration (collection of ``B*T`` frames, then
  ``epochs`` passes of ``minibatches`` minibatch steps, then the collector's
  weight update) and prints ``{"wall_s", "cpu_s", "collection_s", "training_s",
  "frames"}``; the iteration is timed from the ``go`` to the end of its training,
  so the time spent waiting for the parent is never counted;
* ``stop`` (or end of input) ends the process.

Settings mirror marl's VMAS side (``marl bench vs-benchmarl``): MLPs of two hidden
layers of ``hidden`` units with ``activation`` for actor and critic, CPU for
sampling, training and buffer, one torch thread, no evaluation, no loggers, no
checkpoints. MAPPO (``--algo mappo``, the default): discrete actions and
BenchMARL's centralised critic (``share_param_critic``). An off-policy
actor-critic (``--algo maddpg|iddpg|masac|isac``): continuous actions, the task's
own BenchMARL config (``--task``), an iteration of ``num_envs * rollout_length``
frames and then ``optimizer_steps`` gradient steps on ``train_batch``
transitions each; the exploration anneal is fixed at 1M frames (BenchMARL's
default, a third of max_n_frames, needs a frame budget, which this open-ended
child has not; it changes no timing).

Usage: ``python benchmarl_child.py --num-envs 512 --rollout-length 25 --epochs 3
--minibatches 2 --hidden 64 --max-steps 100``; ``python benchmarl_child.py --algo
maddpg --task balance --num-envs 10 --rollout-length 600 --optimizer-steps 1000
--train-batch 128 --hidden 256 --activation tanh``.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time


try:  # only the child's interpreter (BenchMARL's environment) needs BenchMARL
    from benchmarl.experiment.callback import Callback as _Callback
except ImportError:  # imported elsewhere (docs, tests): the module still loads
    _Callback = object


OFF_POLICY = ("maddpg", "iddpg", "masac", "isac")


class _Stop(Exception):
    """Raised inside BenchMARL's loop when the parent says ``stop``."""


def _parse(argv):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    for name, default in (
        ("num-envs", 512),
        ("rollout-length", 25),
        ("epochs", 3),
        ("minibatches", 2),
        ("hidden", 64),
        ("max-steps", 100),
        ("seed", 0),
        ("optimizer-steps", 1000),
        ("train-batch", 128),
    ):
        p.add_argument(f"--{name}", type=int, default=default)
    p.add_argument("--algo", choices=("mappo",) + OFF_POLICY, default="mappo")
    p.add_argument("--task", default="simple_spread", help="a VMAS task of BenchMARL's VmasTask")
    p.add_argument("--activation", choices=("relu", "tanh"), default="relu")
    return p.parse_args(argv)


def _emit(obj) -> None:
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


def _wait_for_go() -> None:
    line = sys.stdin.readline().strip()
    if line != "go":
        raise _Stop(line)


def _experiment(a, callback, folder):
    """The BenchMARL ``Experiment`` with the settings of the module docstring."""
    import torch
    import benchmarl.algorithms as algorithms
    from benchmarl.environments import VmasTask
    from benchmarl.experiment import Experiment, ExperimentConfig
    from benchmarl.models.mlp import MlpConfig

    frames = a.num_envs * a.rollout_length
    cfg = ExperimentConfig.get_from_yaml()
    cfg.sampling_device = cfg.train_device = cfg.buffer_device = "cpu"
    if a.algo in OFF_POLICY:
        cfg.prefer_continuous_actions = True
        cfg.off_policy_collected_frames_per_batch = frames
        cfg.off_policy_n_envs_per_worker = a.num_envs
        cfg.off_policy_n_optimizer_steps = a.optimizer_steps
        cfg.off_policy_train_batch_size = a.train_batch
        cfg.exploration_anneal_frames = 1_000_000
    else:
        cfg.prefer_continuous_actions = False
        cfg.on_policy_collected_frames_per_batch = frames
        cfg.on_policy_n_envs_per_worker = a.num_envs
        cfg.on_policy_n_minibatch_iters = a.epochs
        cfg.on_policy_minibatch_size = frames // a.minibatches
    cfg.max_n_iters, cfg.max_n_frames = 10**9, None
    cfg.evaluation, cfg.render, cfg.create_json, cfg.loggers = False, False, False, []
    cfg.checkpoint_interval, cfg.checkpoint_at_end = 0, False
    cfg.save_folder = folder
    task = getattr(VmasTask, a.task.upper()).get_from_yaml()
    task.config["max_steps"] = a.max_steps
    activation = {"relu": torch.nn.ReLU, "tanh": torch.nn.Tanh}[a.activation]
    net = MlpConfig(num_cells=[a.hidden, a.hidden], activation_class=activation, layer_class=torch.nn.Linear)
    return Experiment(
        task=task,
        algorithm_config=getattr(algorithms, f"{a.algo.capitalize()}Config").get_from_yaml(),
        model_config=net,
        critic_model_config=net,
        seed=a.seed,
        config=cfg,
        callbacks=[callback],
    )


class IterationClock(_Callback):
    """Times each iteration from the parent's ``go`` to the end of its training, then waits.
    (At module level: BenchMARL pickles its callbacks into the experiment folder.)"""

    def __init__(self):
        super().__init__()
        self.t0 = (time.perf_counter(), time.process_time())
        self.collected = self.t0[0]
        self.frames = 0

    def on_batch_collected(self, batch):
        self.collected = time.perf_counter()
        self.frames = int(batch.numel())

    def on_train_end(self, training_td, group):
        wall, cpu = time.perf_counter(), time.process_time()
        _emit(
            {
                "wall_s": wall - self.t0[0],
                "cpu_s": cpu - self.t0[1],
                "frames": self.frames,
                "collection_s": self.collected - self.t0[0],
                "training_s": wall - self.collected,
            }
        )
        _wait_for_go()
        self.t0 = (time.perf_counter(), time.process_time())


def main(argv=None) -> int:
    a = _parse(argv)
    import torch

    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory(prefix="benchmarl_bench_") as folder:
        clock = IterationClock()
        experiment = _experiment(a, clock, folder)
        _emit(
            {
                "ready": True,
                "settings": {
                    **vars(a),
                    "benchmarl": _version(),
                    "torch": torch.__version__,
                    "torch_threads": torch.get_num_threads(),
                },
            }
        )
        try:
            _wait_for_go()
            clock.t0 = (time.perf_counter(), time.process_time())
            experiment.run()
        except _Stop:
            pass
    return 0


def _version() -> str:
    import benchmarl

    return getattr(benchmarl, "__version__", "unknown")


if __name__ == "__main__":
    sys.exit(main())
