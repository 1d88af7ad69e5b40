"""Asynchronous sampling of the off-policy actor-critics (``async_sampling: true``; ``OffPolicyTrainer.next_rollout``
in marl/engine/off_policy.py): the remote env runners sample the next rollout while the learner steps, each rollout
acts with the weights the learner had when it started (one iteration older than synchronous sampling), a resumed run
continues exactly with the rollout that was in flight, and a runner lost during a rollout is restored (a run without remote runners is refused:
tests/test_bad_inputs_ddpg.py)."""

import copy
import time

import pytest
import torch

from marl.api import build_trainer
from marl.callbacks import Callback
from marl.engine.rllib_seam import local_learner
from test_exact_resume import _one_go_vs_resumed
from test_faults import QUICK as FAULT_QUICK
from test_faults import _kill_and_recover, spread
from toy_envs import TargetEnv

QUICK = dict(progress=False, eval_episodes=0, checkpoint_every=0)
SMALL = dict(rollout_length=5, batch_size=8, gradient_steps=3, per_env_steps=20, hidden=16, learning_starts=0)


class LearnerAtRollout(Callback):
    """Each rollout as the trainer receives it, with a copy of the learner's module at that moment."""

    def __init__(self):
        self.rollouts, self.modules = [], []

    def on_rollout(self, trainer, rollout):
        self.rollouts.append(rollout)
        self.modules.append(copy.deepcopy(local_learner(trainer.learner_group).module["shared"]))


def _greedy_actions(module, rollout):
    """The module's noiseless actions ``[T, B, N, K]`` on the rollout's observations (``[T + 1, B, N, D]``: the last
    row is the observation after the rollout)."""
    T, B = rollout["modules"]["shared"]["actions"].shape[:2]
    obs = rollout["modules"]["shared"]["obs"][:T]
    a, _, _ = module.act(obs.reshape(T * B, *obs.shape[2:]), None, None, explore=False)
    return a.reshape(T, B, *a.shape[1:])


def test_each_rollout_acts_with_the_weights_of_the_iteration_before(ray_session, run_dir):
    """Without exploration noise, rollout k (k >= 2) is the greedy policy of the learner as it was when rollout k-1
    arrived, not of the learner at rollout k's arrival (which synchronous sampling would have used)."""
    rec = LearnerAtRollout()
    TargetEnv(num_envs=4).fit(
        "maddpg",
        stop={"iterations": 4},
        log_dir=run_dir,
        callbacks=[rec],
        num_env_runners=1,
        async_sampling=True,
        exploration_noise_start=0.0,
        exploration_noise_end=0.0,
        **QUICK,
        **SMALL,
    )
    # the 5th: the rollout in flight at the end, which the final checkpoint keeps for a resume
    assert len(rec.rollouts) == 5
    for k in range(1, 5):
        taken = rec.rollouts[k]["modules"]["shared"]["actions"]
        torch.testing.assert_close(taken, _greedy_actions(rec.modules[k - 1], rec.rollouts[k]))
        assert not torch.allclose(taken, _greedy_actions(rec.modules[k], rec.rollouts[k])), "the learner did not move"


@pytest.mark.parametrize("algo", ["maddpg", "masac"])
def test_async_resume_is_exact_with_the_rollout_in_flight(ray_session, run_dir, algo):
    """The checkpoint keeps the rollout sampled during the last gradient steps: a run split in two learns and acts
    exactly as one run in one go."""
    _one_go_vs_resumed(lambda: TargetEnv(num_envs=4), algo, 4, run_dir, num_env_runners=1, async_sampling=True, **SMALL)


def _slow_down(env):
    """Make every step of ``env`` take 0.3 s longer (pickled by value into the runners)."""
    step = env.step

    def slow(actions):
        time.sleep(0.3)
        return step(actions)

    env.step = slow


def test_runner_killed_during_an_async_rollout_is_restored_and_training_continues(ray_session, capsys):
    """Runner 1 dies while it samples the rollout in flight: the next iteration trains on runner 2's part, the
    rollout started while runner 1 was down comes from runner 2 only, and once restored both sample again."""
    trainer, *_ = build_trainer(
        spread(), "maddpg", async_sampling=True, **FAULT_QUICK, **{**SMALL, "per_env_steps": 40}
    )
    try:
        # slow steps (0.3 s, 5 a rollout): the rollout started after the first iteration is still in flight when
        # runner 1 is killed (a rollout that ended before the kill would be collected whole)
        trainer.foreach_env(_slow_down)
        before, degraded, after = _kill_and_recover(trainer, capsys)
        TB = 5 * 4  # steps per runner per iteration
        assert before["env_steps"] == 2 * TB and degraded["env_steps"] - before["env_steps"] == TB
        assert after["env_steps"] - degraded["env_steps"] == TB  # started on runner 2 alone
        assert trainer.train()["marl"]["env_steps"] - after["env_steps"] == 2 * TB
    finally:
        trainer.stop()
