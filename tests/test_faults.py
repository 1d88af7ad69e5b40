"""Fault tolerance of remote env runners (docs/engine.md, "Fault tolerance"): a killed runner is
restored and training goes on for PPO, value decomposition and LLM self-play; with none left and
none restartable the run stops with a clear error and keeps its checkpoint (Ray)."""

import os
import re
import time

import numpy as np
import pytest
import torch

import marl
from marl.api import build_trainer
from marl.callbacks import Callback
from marl.engine.faults import kill_env_runner
from marl.engine.rllib_seam import runner_actors
from marl.env import MarlError
from marl.errors import EnvRunnersLost
from test_value_decomp import _buffer, _rollout

QUICK = dict(progress=False, eval_episodes=0, num_env_runners=2)


def spread():
    """Remote runners rebuild it from its spec (no test module needed in their processes)."""
    return marl.make_env("mpe", "simple_spread", num_envs=4)


def _wait_restored(trainer, runner: int, timeout_s: float = 120.0) -> float:
    """Poll the trainer's restore step (what every iteration starts with) until ``runner`` is back."""
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < timeout_s:
        if runner in trainer.restore_env_runners(trainer.env_runner_group):
            return time.perf_counter() - t0
        time.sleep(0.2)
    pytest.fail(f"env runner {runner} was not restored within {timeout_s} s")


def _wait_alive(handle, timeout_s: float = 120.0) -> None:
    """Ping an actor directly (not through marl) until Ray has restarted it."""
    import ray

    t0 = time.perf_counter()
    while time.perf_counter() - t0 < timeout_s:
        ref = handle.ping.remote()
        if ray.wait([ref], timeout=1.0)[0]:
            try:
                ray.get(ref)
                return
            except ray.exceptions.RayError:
                time.sleep(0.2)
    pytest.fail("the actor was not restarted")


def _runner_weights(trainer, runner: int, mid: str):
    return dict(trainer.runner_faults.foreach(lambda r: {k: v.clone() for k, v in r.module[mid].state_dict().items()}))[
        runner
    ]


def _learner_weights(trainer, mid: str):
    state = trainer.learner_group.get_state(components="learner/rl_module", inference_only=True)
    return {k: torch.as_tensor(v) for k, v in state["learner"]["rl_module"][mid].items()}


def _kill_and_recover(trainer, capsys):
    """Kill runner 1 between iterations; train on the other; restore it with the learners' weights.
    Returns the per-iteration metrics of (before, degraded, after)."""
    mid = next(iter(trainer.run.agent_to_module.values()))
    before = trainer.train()["marl"]
    kill_env_runner(trainer, 1)
    degraded = trainer.train()["marl"]
    _wait_restored(trainer, 1)
    restored, learner = _runner_weights(trainer, 1, mid), _learner_weights(trainer, mid)
    assert all(torch.equal(restored[k], learner[k]) for k in learner)  # synced before it samples again
    after = trainer.train()["marl"]
    out = capsys.readouterr().out
    assert "[marl] env runner 1 lost (" in out and "); continuing with 1 of 2" in out
    assert "[marl] env runner 1 restored" in out
    assert (degraded["runners_healthy"], after["runners_healthy"]) == (1.0, 2.0)
    assert (after["runners_lost"], after["runners_restored"]) == (1.0, 1.0)
    return before, degraded, after


def test_buffer_accepts_a_rollout_without_a_lost_runners_copies():
    buf = _buffer(capacity=8, B=2, limit=4)  # 2 runners x 1 copy
    buf.add_rollout(_rollout(2, 2, [[True, True], [False, False]], [[False, False]] * 2, [[False, False]] * 2))
    one = _rollout(2, 1, [[False], [False]], [[False], [True]], [[False], [True]], t0=2)
    one["env_copies"] = torch.tensor([1])  # runner of copy 0 lost: its open episode is dropped
    assert buf.add_rollout(one) == 1 and buf.steps_dropped == 2
    fresh = _rollout(2, 2, [[True, True], [False, False]], [[False, False], [True, True]], [[False, False]] * 2, t0=10)
    fresh["env_copies"] = torch.tensor([0, 1])  # copy 0's runner restarted: fresh episodes
    assert buf.add_rollout(fresh) == 2
    assert sorted(buf.lengths[buf.committed].tolist()) == [2, 2, 4]
    slots = np.flatnonzero(buf.committed & (buf.lengths == 2))
    assert all(buf.data["m/obs"][s, 0, 0, 0] == 10 for s in slots)  # nothing of the dropped episode
    bad = _rollout(1, 2, [[True, True]], [[False, False]], [[False, False]])
    bad["env_copies"] = torch.tensor([0, 0])
    with pytest.raises(MarlError, match="distinct copies"):
        buf.add_rollout(bad)
    with pytest.raises(MarlError, match="built for 2"):
        buf.add_rollout(_rollout(1, 1, [[True]], [[False]], [[False]]))


def test_mappo_runner_killed_is_restored_and_training_continues(ray_session, capsys):
    trainer, *_ = build_trainer(spread(), "mappo", rollout_length=5, epochs=1, **QUICK)
    try:
        before, degraded, after = _kill_and_recover(trainer, capsys)
        TB = 5 * 4  # steps per runner per iteration
        assert before["env_steps"] == 2 * TB and degraded["env_steps"] - before["env_steps"] == TB
        assert after["env_steps"] - degraded["env_steps"] == 2 * TB
        assert trainer.progress["env_steps"] == after["env_steps"] == 5 * TB
        # restarted by Ray between two iterations, no call failed: its untrained answer is dropped
        handle = runner_actors(trainer.env_runner_group)[2]
        kill_env_runner(trainer, 2)
        _wait_alive(handle)
        silent = trainer.train()["marl"]
        assert silent["runners_healthy"] == 1 and silent["env_steps"] - after["env_steps"] == TB
        # Ray answers the first call after the restart either from the new process (marl sees the new
        # pid) or with ActorUnavailableError ("The actor was restarted", or "is restarting" while it still
        # restarts), depending on timing
        out = capsys.readouterr().out
        assert re.search(
            r"\[marl\] env runner 2 lost \((its process was restarted by Ray \(pid"
            r"|ActorUnavailableError: .*actor (was restarted|is restarting))",
            out,
        ), out
        _wait_restored(trainer, 2)
        assert trainer.train()["marl"]["env_steps"] - silent["env_steps"] == 2 * TB

        # an error raised inside a runner is the env's error, not a lost runner (and arrives at once)
        def broken_step(actions):  # local: pickled by value into the runners
            raise MarlError("broken env")

        trainer.foreach_env(lambda env: setattr(env, "step", broken_step))
        t0 = time.perf_counter()
        with pytest.raises(MarlError, match="broken env"):
            trainer.train()
        assert time.perf_counter() - t0 < 30 and "lost" not in capsys.readouterr().out
    finally:
        trainer.stop()


ON_POLICY = ["ia2c", "maa2c", "coma", "vda2c", "vdppo", "itrpo", "matrpo", "happo", "hatrpo", "advantage_alignment"]


@pytest.mark.parametrize("algo", ON_POLICY)
def test_on_policy_runner_killed_is_restored_and_training_continues(ray_session, capsys, algo):
    """Every on-policy algorithm samples and syncs weights as MAPPO does (the test above): a runner killed
    between iterations is restored with the learners' weights, and each iteration trains on the steps the
    healthy runners sampled (one runner's while the other is down)."""
    trainer, *_ = build_trainer(spread(), algo, rollout_length=5, **QUICK)
    try:
        before, degraded, after = _kill_and_recover(trainer, capsys)
        TB = 5 * 4  # steps per runner per iteration
        assert before["env_steps"] == 2 * TB and degraded["env_steps"] - before["env_steps"] == TB
        assert after["env_steps"] - degraded["env_steps"] == 2 * TB
    finally:
        trainer.stop()


def test_qmix_runner_killed_is_restored_and_buffer_keeps_filling(ray_session, capsys):
    trainer, *_ = build_trainer(
        spread(), "qmix", rollout_length=10, batch_size=4, learning_starts_episodes=4, buffer_size=64, **QUICK
    )
    try:
        before, degraded, after = _kill_and_recover(trainer, capsys)
        assert before["env_steps"] == 80 and degraded["env_steps"] == 120 and after["env_steps"] == 200
        assert trainer.buffer.steps_dropped == 4 * 10  # runner 1's 4 copies were 10 steps into their episodes
        assert trainer.buffer.episodes_added == 4  # runner 2's first episodes (25 steps) ended in "after"
        for _ in range(2):
            trainer.train()
        # runner 2's second episodes and the restarted runner 1's first ones (from "after" on) end
        assert trainer.buffer.episodes_added == 4 + 8
    finally:
        trainer.stop()


def test_llm_runner_killed_fewer_games_then_restored(ray_session, capsys):
    from test_llm import _ipd_tiny

    env, tok, kw = _ipd_tiny(
        games_per_iteration=2, eval_every=1, eval_games=2, eval_opponents=["always_defect"], lr=1e-3
    )
    trainer, *_ = build_trainer(env, "reinforce", **{**kw, **QUICK})
    try:
        before, degraded, after = _kill_and_recover(trainer, capsys)
        rounds, seats = 4, 2
        assert before["replies_trained"] == 2 * 2 * seats * rounds and degraded["replies_trained"] == 2 * seats * rounds
        assert after["replies_trained"] == before["replies_trained"]
        assert degraded["vs_always_defect_opp_coop_rate"] == 0.0  # evaluated on runner 2 while runner 1 was down
    finally:
        trainer.stop()


class KillAll(Callback):
    """Kills every remote env runner (for good) at the end of iteration ``at``."""

    def __init__(self, at: int):
        self.at = at

    def on_iteration_end(self, trainer, metrics):
        if metrics["iteration"] == self.at:
            for i in trainer.runner_faults.ids:
                kill_env_runner(trainer, i, restart=False)


def test_all_runners_lost_stops_with_clear_error_and_keeps_checkpoint(ray_session, run_dir, capsys):
    env = spread()
    with pytest.raises(
        EnvRunnersLost,
        match=r"all 2 env runners are lost and none can be restarted.*"
        r"last checkpoint: (\S+);",
    ) as e:
        env.fit(
            "mappo",
            stop={"iterations": 5},
            log_dir=run_dir,
            checkpoint_every=1,
            env_runner_restarts=0,
            callbacks=[KillAll(at=2)],
            rollout_length=5,
            epochs=1,
            **QUICK,
        )
    ckpt = str(e.value).split("last checkpoint: ")[1].split(";")[0]
    assert os.path.basename(ckpt) == "checkpoint_000002"  # saved after the kill, at the end of iteration 2
    assert os.path.isdir(ckpt) and marl.load(ckpt).policy is not None
    out = capsys.readouterr().out
    assert out.count("[marl] env runner") == 2 and "no env runner left" in out
