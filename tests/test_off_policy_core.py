"""The off-policy core (marl/engine/off_policy.py, marl/engine/replay.py's TransitionBuffer): the
transition buffer's rows, ring, sampling and checkpoint state; target networks on hand-computed
values; the update-to-data ratio and target schedule counted exactly on scripted rollouts, through
the trainer's own iteration (no Ray: the sampler and the learner group are scripted)."""

from __future__ import annotations

import pickle
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from marl.engine.off_policy import (
    CALL_BYTES,
    TARGET_TAU,
    OffPolicyTrainer,
    UpdateSchedule,
    hard_update,
    make_target,
    mean_over_learners,
    polyak_update,
    row_blocks,
    target_pairs,
    update_target,
)
from marl.engine.replay import JointEpisodeBuffer, TransitionBuffer
from marl.errors import MarlError

N, D, A, S = 2, 1, 3, 1


# --------------------------------------------------------------------------- scripted rollouts
def _rollout(T, B, t0=0, lengths=(3, 2), terminal=(True, False), k=None):
    """``T`` steps of ``B`` env copies from global step ``t0``; copy ``b`` plays episodes of
    ``lengths[b]`` steps that end terminated (``terminal[b]``) or truncated. An observation is
    ``100 b + g`` at global step ``g``; the last observation of an episode is its negative;
    reward ``g``, action ``g % 3`` (legal), action ``(g + 1) % 3`` illegal."""
    g = torch.arange(t0, t0 + T + 1).view(-1, 1).expand(T + 1, B)
    b = torch.arange(B).view(1, -1)
    length = torch.tensor(lengths[:B]).view(1, -1)
    starts, done = g[:T] % length == 0, (g[:T] + 1) % length == 0
    term = done & torch.tensor(terminal[:B]).view(1, -1)
    value = (100 * b + g).float()
    final = torch.where(done, -value[1:], value[1:])

    def agents(x):  # [T', B] -> [T', B, N, D]
        return x.view(*x.shape, 1, 1).expand(*x.shape, N, D).clone()

    def avail(gg):
        illegal = ((gg + 1) % A).view(*gg.shape, 1, 1).expand(*gg.shape, N, 1)
        return torch.ones(*gg.shape, N, A, dtype=torch.bool).scatter(-1, illegal, False)

    ended = int(done.sum()) if k is None else k
    return {
        "starts": starts,
        "terminated": term,
        "truncated": done & ~term,
        "state": value.unsqueeze(-1),
        "final_state": final.unsqueeze(-1),
        "modules": {
            "m": {
                "obs": agents(value),
                "final_obs": agents(final),
                "actions": (g[:T] % A).unsqueeze(-1).expand(T, B, N).clone(),
                "rewards": g[:T].float().unsqueeze(-1).expand(T, B, N).clone(),
                "alive": torch.ones(T, B, N, dtype=torch.bool),
                "logp": torch.zeros(T, B, N),
                "avail": avail(g[:T]),
                "final_avail": avail(g[1:]),
            }
        },
        "metrics": {"env_steps": T * B, "episode_return": [0.0] * ended},
    }


SHAPES = {"m": {"n": N, "obs_dim": D, "n_actions": A}}


# --------------------------------------------------------------------------- transition buffer
def test_transition_rows_are_time_major_and_end_on_the_final_observation():
    buf = TransitionBuffer(64, SHAPES, S)
    assert buf.add_rollout(_rollout(4, 2)) == 8 and len(buf) == 8
    d = buf.data
    for t in range(4):
        for b, (L, terminal) in enumerate([(3, True), (2, False)]):
            row, value = t * 2 + b, 100 * b + t
            ends = (t + 1) % L == 0
            assert d["m/obs"][row, 0, 0] == value and d["state"][row, 0] == value
            assert d["m/next_obs"][row, 1, 0] == (-(value + 1) if ends else value + 1)  # never the next episode's start
            assert d["next_state"][row, 0] == d["m/next_obs"][row, 0, 0]
            assert d["terminated"][row] == (ends and terminal)  # a truncation bootstraps
            assert d["m/rewards"][row].tolist() == [t, t] and d["m/actions"][row].tolist() == [t % 3] * N
            assert not d["m/avail"][row, 0, (t + 1) % A] and not d["m/next_avail"][row, 0, (t + 2) % A]
    assert buf.episodes_added == 1 + 2  # copy 0 ended at t=2, copy 1 at t=1 and t=3
    assert buf.just_committed.tolist() == list(range(8))


def test_transition_ring_overwrites_the_oldest_and_keeps_the_newest_of_a_large_rollout():
    buf = TransitionBuffer(5, SHAPES, S)
    buf.add_rollout(_rollout(2, 2))  # rows 0-3: states 0, 100, 1, 101
    buf.add_rollout(_rollout(2, 2, t0=2))  # states 2, 102, 3, 103 into rows 4, 0, 1, 2
    assert len(buf) == 5 and buf.ptr == 3 and buf.just_committed.tolist() == [4, 0, 1, 2]
    assert buf.data["state"][:, 0].tolist() == [102, 3, 103, 101, 2]  # 0, 100 and 1 evicted
    buf.add_rollout(_rollout(4, 2, t0=10))  # 8 transitions into 5 rows: the newest 5
    assert sorted(buf.data["state"][:, 0].tolist()) == [12, 13, 111, 112, 113]
    assert buf.ptr == (3 + 8) % 5 and buf.transitions_added == 4 + 4 + 8 and len(buf) == 5


def test_transition_sampling_is_uniform_with_replacement_and_rows_stay_whole():
    buf = TransitionBuffer(16, SHAPES, S)
    buf.add_rollout(_rollout(5, 2))  # 10 rows
    rng = np.random.default_rng(0)
    draws = 20_000
    b = buf.sample(draws, rng)
    assert b["m/obs"].shape == (draws, N, D) and b["m/actions"].shape == (draws, N)
    assert b["terminated"].shape == (draws,)
    assert TransitionBuffer.steps_in(b) == draws
    counts = np.bincount(((b["state"][:, 0] % 100) * 2 + (b["state"][:, 0] >= 100)).astype(int), minlength=10)
    chi2 = float(((counts - draws / 10) ** 2 / (draws / 10)).sum())
    assert len(counts) == 10 and chi2 < 27.9  # chi-square, 9 degrees of freedom, p = 0.001
    same = np.abs(b["m/next_obs"][:, 0, 0]) - np.abs(b["m/obs"][:, 0, 0])
    assert (same == 1).all() and (b["m/rewards"][:, 0] == b["state"][:, 0] % 100).all()  # one transition per row
    again = buf.sample(7, np.random.default_rng(3))
    np.testing.assert_array_equal(again["state"], buf.sample(7, np.random.default_rng(3))["state"])


def test_transition_state_round_trip_continues_exactly_and_shrinks_to_the_newest():
    buf = TransitionBuffer(6, SHAPES, S)
    for k in range(4):
        buf.add_rollout(_rollout(1, 2, t0=k))  # 8 transitions: the ring has wrapped
    other = TransitionBuffer(6, SHAPES, S)
    other.set_state(pickle.loads(pickle.dumps(buf.get_state())))
    for x in (buf, other):
        x.add_rollout(_rollout(1, 2, t0=4))
    for k in buf.data:
        np.testing.assert_array_equal(other.data[k], buf.data[k])
    assert (other.ptr, other.size, other.transitions_added) == (buf.ptr, buf.size, 10)
    assert other.episodes_added == buf.episodes_added
    np.testing.assert_array_equal(
        other.sample(9, np.random.default_rng(1))["state"], buf.sample(9, np.random.default_rng(1))["state"]
    )
    small = TransitionBuffer(3, SHAPES, S)
    small.set_state(buf.get_state())
    assert small.size == 3 and small.data["state"][:, 0].tolist() == [103, 4, 104]  # the newest, oldest first
    with pytest.raises(MarlError, match="columns"):
        TransitionBuffer(6, {"m": {"n": N, "obs_dim": D, "action_dim": 2}}, S).set_state(buf.get_state())
    with pytest.raises(MarlError, match="shape"):
        TransitionBuffer(6, {"m": {"n": N + 1, "obs_dim": D, "n_actions": A}}, S).set_state(buf.get_state())


def test_transition_buffer_continuous_actions_and_errors():
    buf = TransitionBuffer(4, {"m": {"n": N, "obs_dim": D, "action_dim": 2}}, S)
    assert buf.data["m/actions"].shape == (4, N, 2) and buf.data["m/actions"].dtype == np.float32
    assert "m/avail" not in buf.data and "m/next_avail" not in buf.data
    r = _rollout(2, 1)
    r["modules"]["m"]["actions"] = torch.full((2, 1, N, 2), 0.5)
    del r["modules"]["m"]["avail"], r["modules"]["m"]["final_avail"]
    buf.add_rollout(r)
    assert buf.data["m/actions"][:2].tolist() == [[[0.5, 0.5]] * N] * 2
    with pytest.raises(MarlError, match="empty"):
        TransitionBuffer(4, SHAPES, S).sample(1, np.random.default_rng(0))
    with pytest.raises(MarlError, match="capacity"):
        TransitionBuffer(0, SHAPES, S)
    for shape in ({"n": N, "obs_dim": D}, {"n": N, "obs_dim": D, "n_actions": A, "action_dim": 2}):
        with pytest.raises(MarlError, match="exactly one of n_actions"):
            TransitionBuffer(4, {"m": shape}, S)
    r = _rollout(2, 2)
    r["modules"]["m"]["rewards"][1, 0, 1] = float("nan")
    with pytest.raises(MarlError, match="reward nan at rollout step 1"):
        TransitionBuffer(4, SHAPES, S).add_rollout(r)


# --------------------------------------------------------------------------- target networks
def _linear(w, b):
    net = torch.nn.Linear(2, 1)
    with torch.no_grad():
        net.weight.copy_(torch.tensor([w])), net.bias.copy_(torch.tensor([b]))
    return net


def test_polyak_update_on_hand_computed_values():
    online, target = _linear([2.0, -4.0], 1.0), _linear([-2.0, 8.0], 3.0)
    polyak_update(target, online, 0.25)  # 0.25 * online + 0.75 * target
    assert target.weight.tolist() == [[0.25 * 2 + 0.75 * -2, 0.25 * -4 + 0.75 * 8]] == [[-1.0, 5.0]]
    assert target.bias.tolist() == [0.25 * 1 + 0.75 * 3] == [2.5]
    polyak_update(target, online, 0.5)
    assert target.weight.tolist() == [[0.5, 0.5]] and target.bias.tolist() == [1.75]
    assert online.weight.tolist() == [[2.0, -4.0]]  # the online network is only read
    update_target(target, online, 1.0)
    assert target.weight.tolist() == [[2.0, -4.0]] and target.bias.tolist() == [1.0]


def test_polyak_copies_buffers_and_rejects_bad_tau_or_networks():
    online, target = torch.nn.BatchNorm1d(2), torch.nn.BatchNorm1d(2)
    online.running_mean.fill_(3.0)
    polyak_update(target, online, 0.1)
    assert target.running_mean.tolist() == [3.0, 3.0]
    for tau in (0.0, -0.1, 1.5):
        with pytest.raises(MarlError, match=r"tau=.* is not in \(0, 1\]"):
            polyak_update(target, online, tau)
    with pytest.raises(MarlError, match="differ in their parameters"):
        polyak_update(torch.nn.Linear(2, 2), torch.nn.Linear(2, 1), 0.5)


def test_hard_copy_makes_equal_independent_frozen_weights():
    online = _linear([1.0, 2.0], 3.0)
    target = make_target(online)
    assert all(not p.requires_grad for p in target.parameters()) and all(p.requires_grad for p in online.parameters())
    with torch.no_grad():
        online.weight.add_(1.0)
    assert target.weight.tolist() == [[1.0, 2.0]]  # a copy, not a view
    hard_update(target, online)
    assert target.weight.tolist() == [[2.0, 3.0]] and target.weight.data_ptr() != online.weight.data_ptr()
    with torch.no_grad():
        online.bias.zero_()
    assert target.bias.tolist() == [3.0]


def test_target_pairs_of_modules_with_and_without_targets():
    net = torch.nn.Linear(1, 1)
    with_pairs = SimpleNamespace(target_pairs=lambda: [(net, net)])
    assert target_pairs(with_pairs) == [(net, net)] and target_pairs(object()) == []


# --------------------------------------------------------------------------- update schedule
def test_schedule_counts_updates_per_episode_with_carry_and_learning_starts():
    s = UpdateSchedule(updates=1, per=4, unit="episode", learning_starts=8)
    p = s.initial_progress()
    assert p == {"pending_episodes": 0, "last_target_sync": 0, "updates": 0}
    got = [
        (s.updates_due(p, new, buffered), p["pending_episodes"])
        for new, buffered in [(6, 6), (2, 8), (8, 16), (4, 20), (10, 30)]
    ]
    # 6 before learning starts is not counted; then 2 -> 2 pending; 10 -> 2 updates, 2 left; 6 -> 1, 2; 12 -> 3, 0
    assert got == [(0, 0), (0, 2), (2, 2), (1, 2), (3, 0)]


def test_schedule_several_updates_per_block_of_env_steps():
    s = UpdateSchedule(updates=2, per=3, unit="env_step", learning_starts=5)
    p = s.initial_progress()
    assert [s.updates_due(p, new, buf) for new, buf in [(2, 2), (4, 6), (6, 12), (2, 14)]] == [0, 2, 4, 2]
    assert p["pending_env_steps"] == 0


def test_schedule_target_updates_by_episodes_on_the_last_step_or_by_gradient_steps():
    s = UpdateSchedule(target_interval=10, target_unit="episode", tau=1.0)
    p = s.initial_progress()
    assert s.target_tau(p, last=False, episodes=50) == 0.0  # only the iteration's last step
    assert s.target_tau(p, last=True, episodes=9) == 0.0
    assert s.target_tau(p, last=True, episodes=10) == 1.0 and p["last_target_sync"] == 10
    assert s.target_tau(p, last=True, episodes=19) == 0.0 and s.target_tau(p, last=True, episodes=25) == 1.0
    s = UpdateSchedule(target_interval=3, target_unit="gradient_step", tau=0.01)
    p = s.initial_progress()
    taus = []
    for _ in range(7):
        p["updates"] += 1
        taus.append(s.target_tau(p, last=False, episodes=0))
    assert taus == [0, 0, 0.01, 0, 0, 0.01, 0] and p["last_target_sync"] == 6


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"unit": "step"}, r"unit='step' is not one of \['episode', 'env_step'\]"),
        ({"target_unit": "episodes"}, r"target_unit='episodes' is not one of \['episode', 'gradient_step'\]"),
        ({"per": 0}, "per=0 must be >= 1"),
        ({"updates": 0}, "updates=0"),
        ({"target_interval": 0}, "target_interval=0"),
        ({"learning_starts": -1}, "learning_starts=-1"),
        ({"tau": 0.0}, r"tau=0.0 is not in \(0, 1\]"),
    ],
)
def test_schedule_rejects_bad_settings(kwargs, match):
    with pytest.raises(MarlError, match=match):
        UpdateSchedule(**kwargs)


# --------------------------------------------------------------------------- the trainer's iteration
class ScriptedTrainer(OffPolicyTrainer):
    """The core's iteration with a scripted sampler and a recording learner group (no Ray)."""

    cfg = SimpleNamespace(batch_size=4, checkpoint_buffer=True, seed=0)
    run = SimpleNamespace(agent_to_module={"a0": "m", "a1": "m"})

    def __init__(self, buffer, schedule, rollouts):  # the RLlib Algorithm itself is never built
        self.buffer, self.schedule, self.rollouts = buffer, schedule, iter(rollouts)
        self.rng = np.random.default_rng(0)
        self.progress = {"env_steps": 0, "episodes": 0, **schedule.initial_progress()}
        self.calls, self.committed, self.learner_calls = [], [], []

    def make_buffer(self):
        return self.buffer

    def update_schedule(self):
        return self.schedule

    def on_episodes_committed(self, slots):
        self.committed.append(list(slots))

    def sample_rollouts(self, **act):
        return next(self.rollouts)

    def update_learners(self, batch, sync_weights=True, **timesteps):
        (mid,) = batch.policy_batches
        taus = timesteps[TARGET_TAU]  # one per gradient step of the call, each on a block of the batch's rows
        rows = len(batch.policy_batches[mid]["terminated"]) // len(taus)
        for i, tau in enumerate(taus):
            self.calls.append((mid, rows, sync_weights and i == len(taus) - 1, tau))
        self.learner_calls.append(len(taus))
        return {"m/td_loss": float(len(self.calls))}

    def iterate(self):
        out = self.training_step()
        m = out.rollout["metrics"]  # what Trainer.train_iteration counts after the step
        self.progress["env_steps"] += m["env_steps"]
        self.progress["episodes"] += len(m["episode_return"])
        return out.metrics


def test_trainer_takes_exactly_the_scheduled_updates_on_scripted_episodes():
    """One-step episodes: every env step commits an episode. Rollouts of T = 3, 1, 4, 2, 5 steps of
    2 copies commit 6, 2, 8, 4, 10 episodes; one update per 4 from 8 in the buffer: 0, 0, 2, 1, 3.
    Targets every 10 episodes after an iteration's last step: at 16 and at 30 episodes."""
    buf = JointEpisodeBuffer(64, 1, 2, SHAPES, S)
    Ts = [3, 1, 4, 2, 5]
    rollouts = [_rollout(T, 2, t0=sum(Ts[:i]), lengths=(1, 1)) for i, T in enumerate(Ts)]
    s = UpdateSchedule(updates=1, per=4, unit="episode", learning_starts=8, target_interval=10, tau=1.0)
    trainer = ScriptedTrainer(buf, s, rollouts)
    per_iteration = []
    for _ in Ts:
        before = len(trainer.calls)
        metrics = trainer.iterate()
        per_iteration.append(trainer.calls[before:])
        assert metrics["updates"] == len(trainer.calls) and metrics["buffer_episodes"] == len(buf)
    assert [len(c) for c in per_iteration] == [0, 0, 2, 1, 3]
    assert [[(w, tau) for _, _, w, tau in c] for c in per_iteration] == [
        [],
        [],
        [(False, 0.0), (True, 1.0)],
        [(True, 0.0)],
        [(False, 0.0), (False, 0.0), (True, 1.0)],
    ]
    assert all(mid == "m" and n == 4 for mid, n, _, _ in trainer.calls)  # batch_size episodes, under one module id
    assert trainer.progress["last_target_sync"] == 30 and trainer.progress["pending_episodes"] == 0
    assert [len(c) for c in trainer.committed] == [6, 2, 8, 4, 10]  # the hook saw every committed slot


class ChunkedTrainer(ScriptedTrainer):
    """The scripted trainer with ``per_call`` gradient steps per learner call (the core's default: 1)."""

    per_call = 1

    def steps_per_call(self):
        return self.per_call


@pytest.mark.parametrize("per_call", [1, 3, 100])
def test_trainer_counts_env_steps_and_gradient_step_targets_on_a_transition_buffer(per_call):
    """Rollouts of 1, 2, 3, 1 steps of 2 copies: 2, 4, 6, 2 env steps; 2 updates per 3 env steps
    once 5 transitions are held: 0, 2, 4, 2; Polyak targets after every 3rd gradient step. In learner
    calls of up to ``per_call`` steps: the same steps of batch_size rows, Polyak steps and a weight sync
    only after each iteration's last step; the calls hold as many steps as the cap allows."""
    buf = TransitionBuffer(100, SHAPES, S)
    Ts = [1, 2, 3, 1]
    rollouts = [_rollout(T, 2, t0=sum(Ts[:i])) for i, T in enumerate(Ts)]
    s = UpdateSchedule(
        updates=2, per=3, unit="env_step", learning_starts=5, target_interval=3, target_unit="gradient_step", tau=0.01
    )
    trainer = ChunkedTrainer(buf, s, rollouts)
    trainer.per_call = per_call
    counts = []
    for _ in Ts:
        before = len(trainer.calls)
        assert "buffer_transitions" in trainer.iterate()
        counts.append(len(trainer.calls) - before)
    assert counts == [0, 2, 4, 2] and trainer.progress["updates"] == 8
    assert [tau for *_, tau in trainer.calls] == [0, 0, 0.01, 0, 0, 0.01, 0, 0]
    assert [w for _, _, w, _ in trainer.calls] == [False, True, False, False, False, True, False, True]
    assert all(rows == 4 for _, rows, _, _ in trainer.calls)
    assert trainer.learner_calls == {1: [1] * 8, 3: [2, 3, 1, 2], 100: [2, 4, 2]}[per_call]


def test_row_blocks_are_consecutive_views_and_refuse_a_ragged_split():
    cols = {"m": {"x": torch.arange(6), "y": torch.arange(6) * 10}}
    blocks = row_blocks(cols, 3)
    assert [b["m"]["x"].tolist() for b in blocks] == [[0, 1], [2, 3], [4, 5]]
    assert blocks[2]["m"]["y"].tolist() == [40, 50] and blocks[0]["m"]["x"].data_ptr() == cols["m"]["x"].data_ptr()
    assert row_blocks(cols, 1) == [cols]
    with pytest.raises(MarlError, match="got 6 rows, not a multiple of 4"):
        row_blocks(cols, 4)


def test_chunked_steps_cap_the_call_by_bytes_and_fall_back_to_one():
    """TransitionBuffer rows of SHAPES: a call carries at most CALL_BYTES; one step with batch transforms or
    more than one learner."""
    buf = TransitionBuffer(100, SHAPES, S)
    row = sum(int(v[0].nbytes) for v in buf.data.values())
    trainer = SimpleNamespace(buffer=buf, batch_transforms=[], cfg=SimpleNamespace(batch_size=128, num_learners=0))
    assert OffPolicyTrainer.chunked_steps(trainer) == CALL_BYTES // (row * 128) > 1
    trainer.cfg.batch_size = CALL_BYTES  # a batch beyond the cap on its own: still one step per call
    assert OffPolicyTrainer.chunked_steps(trainer) == 1
    trainer.cfg.batch_size = 128
    trainer.batch_transforms = ["a transform"]
    assert OffPolicyTrainer.chunked_steps(trainer) == 1
    trainer.batch_transforms, trainer.cfg.num_learners = [], 2
    assert OffPolicyTrainer.chunked_steps(trainer) == 1


def test_mean_over_learners_leaves_one_learner_alone_and_averages_a_group(tmp_path):
    """No process group (or a group of one): the gradients as they are. In a ``gloo`` group of one process the
    all-reduce runs on the flat buffer and writes every gradient back in its own shape; a ``None`` stays ``None``."""
    grads = {0: torch.tensor([[1.0, 2.0], [3.0, 4.0]]), 1: None, 2: torch.tensor([5.0])}
    assert mean_over_learners(grads) is grads and grads[0].tolist() == [[1.0, 2.0], [3.0, 4.0]]
    dist = torch.distributed
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'rendezvous'}", rank=0, world_size=1)
    try:
        out = mean_over_learners(grads)
        assert out[0].tolist() == [[1.0, 2.0], [3.0, 4.0]] and out[1] is None and out[2].tolist() == [5.0]
    finally:
        dist.destroy_process_group()
