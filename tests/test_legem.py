"""LeGEM-style redistribution (reconstruction, reference/algorithms.md §6.3, §6.6)."""
import pytest
import torch

from marl.algos.legem import EpisodicMemoryGraph, causal_shift, chain_values, memory_shaping


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
    assert [round(V[i], 6) for i in ids] == [round(v, 6) for v in want]
    assert abs(want[0] - (1 + 0.9 * (0 + 0.9 ** 3 * (2 + 0.9 ** 2 * 5)))) < 1e-9


def test_memory_keeps_the_best_branch():
    mem = EpisodicMemoryGraph(obs_dim=1, key_dim=1, gamma=1.0, resolution=1e-3)
    s0, a, b = torch.tensor([0.0]), torch.tensor([1.0]), torch.tensor([2.0])
    mem.add_episode([s0, a], [0.0, 1.0], [1, 1])
    mem.add_episode([s0, b], [0.0, 3.0], [1, 1])
    V = mem.propagate()
    assert V[mem.node(s0)] == 3.0  # max over the two remembered continuations


def test_memory_shaping_with_beta_zero_is_identity():
    r = torch.tensor([1.0, 0.0, 2.0])
    v, vn, d = torch.tensor([3.0, 2.0, 2.0]), torch.tensor([2.0, 2.0, 0.0]), torch.tensor([1, 2, 1])
    assert torch.equal(memory_shaping(r, v, vn, d, 0.9, 0.0), r)
    shaped = memory_shaping(r, v, vn, d, 0.9, 1.0)
    assert torch.allclose(shaped, r + 0.9 ** d.float() * vn - v)


def test_team_reward_redistribution_identity_without_offbeat_and_shift_with_it():
    from marl.algos.legem import redistribute_team_reward

    r = torch.tensor([[0.0, 0.0], [0.0, 0.0], [10.0, 10.0], [2.0, 2.0]])
    every_step = torch.ones(4, 2, dtype=torch.bool)
    assert torch.equal(redistribute_team_reward(r, every_step, "mean"), r)
    # both agents start a 3-step catch at step 0; the stag reward at step 2 moves to step 0
    dec = torch.tensor([[1, 1], [0, 0], [0, 0], [1, 1]], dtype=torch.bool)
    out = redistribute_team_reward(r, dec, "mean")
    assert out[:, 0].tolist() == [10.0, 0.0, 0.0, 2.0] and torch.isclose(out.mean(1).sum(), r.mean(1).sum())
    out_sum = redistribute_team_reward(r, dec, "sum")
    assert torch.isclose(out_sum.sum(), r.sum())


def test_qmix_with_causal_shift_runs_on_offbeat_stag_hunter(ray_session, run_dir):
    import marl

    env = marl.make_env("stag_hunter", num_envs=8, offbeat={"catch": 3})
    res = env.fit("qmix", stop={"iterations": 3}, reward_redistribution="causal_shift", batch_size=8,
                  log_dir=run_dir, progress=False, eval_episodes=0)
    assert res.metrics["iteration"] == 3
    with pytest.raises(marl.MarlError, match="causal_shift"):
        env.fit("qmix", reward_redistribution="legem_v2")
