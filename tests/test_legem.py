"""LeGEM-style redistribution (our reconstruction, docs/offbeat.md): the causal shift and the episodic
memory (marl.algos.redistribution, marl.algos.legem), and the two batch transforms on the off-beat stag hunt."""

import pytest
import torch

from marl.algos.legem import EpisodicMemoryGraph, chain_values, memory_shaping
from marl.algos.redistribution import causal_shift


def test_causal_shift_moves_rewards_to_start_steps_and_conserves_return():
    r = torch.tensor([0.0, 0.0, 0.0, 10.0, 0.0, 2.0])
    records = [(0, 1, 3, 5), (1, 0, 3, 5), (0, 4, 5, 5)]  # two catches end at 3, one at 5
    out = causal_shift(r, records)
    assert torch.allclose(out, torch.tensor([5.0, 5.0, 0.0, 0.0, 2.0, 0.0]))
    assert torch.isclose(out.sum(), r.sum())


def test_causal_shift_conserves_return_on_random_episodes():
    g = torch.Generator().manual_seed(0)
    for _ in range(50):
        T = 20
        r = torch.randn(T, generator=g)
        records, t = [], 0
        while t < T:
            d = int(torch.randint(1, 5, (1,), generator=g))
            records.append((0, t, min(t + d - 1, T - 1), 1))
            t += d
        assert torch.isclose(causal_shift(r, records).sum(), r.sum(), atol=1e-5)


def test_value_propagation_on_a_chain_equals_the_discounted_return():
    mem = EpisodicMemoryGraph(obs_dim=1, key_dim=1, gamma=0.9, resolution=1e-3)
    obs = [torch.tensor([float(k)]) for k in range(4)]  # distinct states: a chain
    rewards, durations = [1.0, 0.0, 2.0, 5.0], [1, 3, 2, 1]
    ids = mem.add_episode(obs, rewards, durations)
    V = mem.propagate()
    want = chain_values(rewards, 0.9, durations)
    assert [round(float(V[i]), 6) for i in ids] == [round(v, 6) for v in want]
    assert abs(want[0] - (1 + 0.9 * (0 + 0.9**3 * (2 + 0.9**2 * 5)))) < 1e-9


def test_memory_keeps_the_best_branch():
    mem = EpisodicMemoryGraph(obs_dim=1, key_dim=1, gamma=1.0, resolution=1e-3)
    s0, a, b = torch.tensor([0.0]), torch.tensor([1.0]), torch.tensor([2.0])
    mem.add_episode([s0, a], [0.0, 1.0], [1, 1])
    mem.add_episode([s0, b], [0.0, 3.0], [1, 1])
    V = mem.propagate()
    assert float(V[mem.node(s0)]) == 3.0  # max over the two remembered continuations


def test_memory_shaping_with_beta_zero_is_identity():
    r = torch.tensor([1.0, 0.0, 2.0])
    v, vn, d = torch.tensor([3.0, 2.0, 2.0]), torch.tensor([2.0, 2.0, 0.0]), torch.tensor([1, 2, 1])
    assert torch.equal(memory_shaping(r, v, vn, d, 0.9, 0.0), r)
    shaped = memory_shaping(r, v, vn, d, 0.9, 1.0)
    assert torch.allclose(shaped, r + 0.9 ** d.float() * vn - v)


def test_team_reward_redistribution_identity_without_offbeat_and_shift_with_it():
    from marl.algos.redistribution import redistribute_team_reward

    r = torch.tensor([[0.0, 0.0], [0.0, 0.0], [10.0, 10.0], [2.0, 2.0]])
    every_step = torch.ones(4, 2, dtype=torch.bool)
    assert torch.equal(redistribute_team_reward(r, every_step, "mean"), r)
    # both agents start a 3-step catch at step 0; the stag reward at step 2 moves to step 0
    dec = torch.tensor([[1, 1], [0, 0], [0, 0], [1, 1]], dtype=torch.bool)
    out = redistribute_team_reward(r, dec, "mean")
    assert out[:, 0].tolist() == [10.0, 0.0, 0.0, 2.0] and torch.isclose(out.mean(1).sum(), r.mean(1).sum())
    out_sum = redistribute_team_reward(r, dec, "sum")
    assert torch.isclose(out_sum.sum(), r.sum())


@pytest.mark.parametrize(
    "algo, kwargs, refused, match",
    [
        ("qmix", {"batch_size": 8}, "legem_v2", "causal_shift"),
        ("mappo", {"rollout_length": 20}, "legem", "transforms data at on_episodes; mappo calls on_rollout"),
    ],
)
def test_causal_shift_runs_on_offbeat_stag_hunter(ray_session, run_dir, algo, kwargs, refused, match):
    """QMIX shifts whole episodes in its buffer, MAPPO inside rollouts; a bad or unsupported choice is a clear error."""
    import marl

    env = marl.make_env("stag_hunter", num_envs=8, offbeat={"catch": 3})
    res = env.fit(
        algo,
        stop={"iterations": 2},
        reward_redistribution="causal_shift",
        log_dir=run_dir,
        progress=False,
        eval_episodes=0,
        **kwargs,
    )
    assert res.metrics["iteration"] == 2
    with pytest.raises(marl.MarlError, match=match):
        env.fit(algo, reward_redistribution=refused, log_dir=run_dir, progress=False)


def _two_agent_episode():
    """Agent 0 decides at 0, 3; agent 1 at 0, 1, 3 (L = 5); distinct 1-d observations."""
    obs = torch.arange(10, dtype=torch.float32).reshape(5, 2, 1)
    dec = torch.tensor([[1, 1], [0, 1], [0, 0], [1, 1], [0, 0]], dtype=torch.bool)
    team = torch.tensor([0.0, 0.0, 10.0, 0.0, 2.0])
    return obs, dec, team


def test_legem_memory_values_and_shaping_per_action():
    from marl.algos.legem import LegemMemory

    g = 0.9
    mem = LegemMemory(2, 1, gamma=g, beta=1.0, key_dim=1, resolution=1e-3, refresh_episodes=1)
    obs, dec, team = _two_agent_episode()
    mem.add_episode(obs, team, dec)
    # agent 0: decision at 0 collects 10 g^2 by step 3, then 2 g from its decision at 3 to the end
    v3 = 2 * g
    v0 = 10 * g**2 + g**3 * v3
    phi = mem.potentials(obs, dec)
    assert torch.allclose(phi[:, 0], torch.tensor([v0, v0, v0, v3, v3]))
    F = mem.shaping(obs, dec, terminated=True)
    # over one action of duration d the discounted shaping is gamma^d V(n') - V(n) (docs/offbeat.md)
    disc = g ** torch.arange(3, dtype=torch.float32)
    assert torch.isclose((F[:3, 0] * disc).sum(), torch.tensor(g**3 * v3 - v0), atol=1e-5)
    # a terminated episode telescopes to -Phi(0); beta = 0 is the identity
    full = g ** torch.arange(5, dtype=torch.float32)
    assert torch.isclose((F[:, 1] * full).sum(), -phi[0, 1], atol=1e-5)
    mem.beta = 0.0
    assert torch.equal(mem.shaping(obs, dec, terminated=True), torch.zeros(5, 2))


def test_legem_truncated_episode_keeps_last_potential():
    from marl.algos.legem import LegemMemory

    mem = LegemMemory(2, 1, gamma=0.9, beta=1.0, key_dim=1, resolution=1e-3, refresh_episodes=1)
    obs, dec, team = _two_agent_episode()
    mem.add_episode(obs, team, dec)
    phi = mem.potentials(obs, dec)
    F = mem.shaping(obs, dec, terminated=False)
    assert torch.allclose(F[-1], (0.9 - 1.0) * phi[-1])


def test_qmix_with_legem_runs_and_checkpoints_its_memory(ray_session, run_dir):
    import pickle

    import marl
    from marl.results import resolve_checkpoint

    env = marl.make_env("stag_hunter", num_envs=8, offbeat={"catch": 3})
    kw = dict(
        reward_redistribution="legem",
        legem={"refresh_episodes": 4},
        batch_size=8,
        log_dir=run_dir,
        progress=False,
        eval_episodes=0,
    )
    res = env.fit("qmix", stop={"iterations": 3}, **kw)
    assert res.metrics["iteration"] == 3 and res.config.legem.refresh_episodes == 4
    with open(resolve_checkpoint(res.checkpoint) / "algorithm_state.pkl", "rb") as f:
        state = pickle.load(f)
    (mem,) = state["marl_transforms"]["legem"].values()  # one module (all agents share)
    assert mem["episodes"] >= 8 and all(len(g["nodes"]) > 0 for g in mem["graphs"])
    # the memory goes on from the checkpoint on resume
    more = env.fit("qmix", stop={"iterations": 4}, resume=res.checkpoint, **kw)
    with open(resolve_checkpoint(more.checkpoint) / "algorithm_state.pkl", "rb") as f:
        (after,) = pickle.load(f)["marl_transforms"]["legem"].values()
    assert after["episodes"] > mem["episodes"] and after["graphs"][0]["_next_id"] >= mem["graphs"][0]["_next_id"]


def test_rollout_causal_shift_moves_each_agents_reward_to_its_start_and_conserves_it():
    from marl.algos.redistribution import causal_shift_rollout

    T, B, N = 6, 2, 2
    dec = torch.zeros(T, B, N, dtype=torch.bool)
    dec[[0, 3], 0, 0] = True  # copy 0, agent 0: actions [0, 2], [3, 5]
    dec[[1, 2], 0, 1] = True  # agent 1: [?, 0] started before the chunk, [1, 1], [2, 5]
    starts = torch.zeros(T, B, dtype=torch.bool)
    dones = torch.zeros(T, B, dtype=torch.bool)
    dones[2, 1], starts[3, 1] = True, True  # copy 1: an episode ends at 2, the next starts at 3
    dec[:, 1] = True
    dec[4:, 1] = False  # copy 1: the action started at 3 lasts past the chunk
    r = torch.arange(1.0, 1 + T * B * N).reshape(T, B, N)
    out = causal_shift_rollout(r, dec, starts, dones)
    # copy 0, agent 0: reward at 2 (end of [0, 2]) moves to 0; at 5 the end is unknown -> stays
    assert out[:, 0, 0].tolist() == [r[0, 0, 0] + r[2, 0, 0], r[1, 0, 0], 0.0, r[3, 0, 0], r[4, 0, 0], r[5, 0, 0]]
    # agent 1: step 0 ends an action started before the chunk -> stays; [1, 1] stays in place
    assert out[:3, 0, 1].tolist() == r[:3, 0, 1].tolist()
    # copy 1: every agent decides at 0..3 -> identity there; rewards at 4, 5 stay (no end seen)
    assert torch.equal(out[:, 1], r[:, 1])
    assert torch.allclose(out.sum(0), r.sum(0))
    every = torch.ones(T, B, N, dtype=torch.bool)
    assert torch.equal(causal_shift_rollout(r, every, starts, dones), r)


def test_time_keys_keep_values_bounded_on_merged_cycles():
    """Two alternating observations that merge into one node form a cycle: max-propagation
    climbs far above the real return unless the decision step is part of the key."""
    from marl.algos.legem import LegemMemory

    obs = torch.tensor([[0.0], [1.0]]).repeat(5, 1).reshape(10, 1, 1)
    team, dec = torch.ones(10), torch.ones(10, 1, dtype=torch.bool)
    real = sum(0.9**t for t in range(10))  # return from step 0
    for time_key, bounded in ((False, False), (True, True)):
        mem = LegemMemory(1, 1, gamma=0.9, key_dim=1, resolution=10.0, refresh_episodes=1, time_key=time_key)
        mem.add_episode(obs, team, dec)
        top = float(mem.graphs[0].values.max())
        assert (top <= real + 1e-5) == bounded


def test_unvalued_observations_get_the_step_baseline_not_zero():
    """A new state must not look worse than familiar ones: its potential is the mean value
    of the remembered nodes at the same decision step."""
    from marl.algos.legem import EpisodicMemoryGraph

    mem = EpisodicMemoryGraph(obs_dim=1, key_dim=1, gamma=1.0, resolution=1e-3)
    steps = torch.tensor([0, 1])
    mem.add_episode(torch.tensor([[0.0], [1.0]]), [1.0, 4.0], [1, 1], steps)  # V = 5 at step 0, 4 at step 1
    mem.add_episode(torch.tensor([[2.0], [3.0]]), [0.0, 2.0], [1, 1], steps)  # V = 2 at step 0, 2 at step 1
    mem.propagate()
    new = mem.lookup(torch.tensor([[9.0], [9.0], [0.0]]), torch.tensor([0, 1, 0]))
    assert new.tolist() == [3.5, 3.0, 5.0]  # unseen at step 0 / step 1, then a remembered node
    assert mem.baseline == pytest.approx((5 + 4 + 2 + 2) / 4)
