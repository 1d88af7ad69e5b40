"""Advantage Alignment for tensor policies (algos/advantage_alignment.py): the aligned advantage on
hand-computed numbers (the same as the LLM path's), ``w_t`` blind to the action it weighs, and
learning on the tensor IPD: AA agents cooperate with each other and each retaliates against
always-defect in either seat; naive independent PPO defects."""

import torch

import marl
from marl.algos.advantage_alignment import align, episode_starts
from marl.algos.llm import advantages as llm_est  # the LLM path's estimators
from marl.engine.on_policy import gae

A0, A1 = [1.0, -1.0, 2.0], [0.5, 1.0, -1.0]  # own advantages of agent 0 and agent 1, 3 steps
ONES = torch.ones(1, 1, 3)


def _align(modules):
    """``align`` on one env copy: module id -> ``[1, N_m, 3]`` advantages, all alive, one episode."""
    starts = {m: episode_starts(torch.zeros_like(a, dtype=torch.bool)) for m, a in modules.items()}
    active = {m: torch.ones_like(a) for m, a in modules.items()}
    return align(modules, active, starts, {m: a.shape[1] for m, a in modules.items()}, 0.5, 0.9)


def test_aligned_advantage_by_hand_and_as_the_llm_path():
    out = _align({"a0": torch.tensor([[A0]]), "a1": torch.tensor([[A1]])})
    # agent 0: w = 0.9 * [0, 0.9 * 1, 0.9^2 * 1 + 0.9 * (-1)] = [0, 0.81, -0.081]; A2 = agent 1's
    assert torch.allclose(out["a0"][0, 0], torch.tensor([1.0, -1.0 + 0.5 * 0.81 * 1.0, 2.0 + 0.5 * -0.081 * -1.0]))
    # agent 1: w = 0.9 * [0, 0.9 * 0.5, 0.81 * 0.5 + 0.9 * 1] = [0, 0.405, 1.1745]; A2 = agent 0's
    assert torch.allclose(out["a1"][0, 0], torch.tensor([0.5, 1.0 - 0.5 * 0.405, -1.0 + 0.5 * 1.1745 * 2.0]))
    one = torch.ones(1, 3, dtype=torch.bool)
    for mine, other, m in ((A0, A1, "a0"), (A1, A0, "a1")):
        llm = llm_est.aa_credit(torch.tensor([mine]), torch.tensor([other]), one, 0.5, 0.9)
        assert torch.allclose(out[m][0], llm)
    # one module holding both agents gives the same numbers as one module per agent
    both = _align({"all": torch.tensor([[A0, A1]])})["all"][0]
    assert torch.allclose(both, torch.cat([out["a0"][0], out["a1"][0]]))


def test_the_sum_restarts_at_each_episode():
    a = torch.tensor([[[1.0, -1.0, 2.0, 1.0, -1.0, 2.0]], [[0.5, 1.0, -1.0, 0.5, 1.0, -1.0]]]).transpose(0, 1)
    done = torch.tensor([False, False, True, False, False, True]).expand(1, 2, 6)
    out = align({"m": a}, {"m": torch.ones_like(a)}, {"m": episode_starts(done)}, {"m": 2}, 0.5, 0.9)["m"]
    assert torch.allclose(out[..., :3], out[..., 3:])  # the second episode does not see the first
    assert torch.allclose(
        out[0, 0, :3], llm_est.aa_credit(torch.tensor([A0]), torch.tensor([A1]), ONES[0].bool(), 0.5, 0.9)[0]
    )


def test_mean_weighting_by_hand_restarting_at_each_episode():
    """``aa_weighting: mean`` (the official Melting Pot code's integrated_aa): ``w_t = (1/t) sum_{k<t} A1_k``.
    Agent 0, A0 = [1, -1, 2] twice: w = [0, 1, (1 - 1) / 2 = 0] in each episode; A2 = agent 1's [0.5, 1, -1],
    beta 0.5: A* = [1, -1 + 0.5 * 1 * 1, 2 + 0] = [1, -0.5, 2]. Agent 1: w = [0, 0.5, 0.75], A* = [0.5, 1 - 0.5 *
    0.5 * 1, -1 + 0.5 * 0.75 * 2] = [0.5, 0.75, -0.25]."""
    a = torch.tensor([[[1.0, -1.0, 2.0, 1.0, -1.0, 2.0]], [[0.5, 1.0, -1.0, 0.5, 1.0, -1.0]]]).transpose(0, 1)
    done = torch.tensor([False, False, True, False, False, True]).expand(1, 2, 6)
    out = align({"m": a}, {"m": torch.ones_like(a)}, {"m": episode_starts(done)}, {"m": 2}, 0.5, 0.9, mean=True)["m"][0]
    assert torch.allclose(out[0], torch.tensor([1.0, -0.5, 2.0] * 2))
    assert torch.allclose(out[1], torch.tensor([0.5, 0.75, -0.25] * 2))
    # a long episode of constant advantages: the mean stays at their size, the discounted sum grows towards 1/(1-gamma)
    long = torch.ones(1, 200)
    mask = torch.ones(1, 200, dtype=torch.bool)
    assert torch.allclose(llm_est.aa_weights(long, mask, 0.99, mean=True)[0, 1:], torch.ones(199))
    assert llm_est.aa_weights(long, mask, 0.99)[0, -1] > 80


def test_dead_agents_give_no_co_player_advantage():
    a = torch.tensor([[A0, A1]])
    active = torch.tensor([[[1.0] * 3, [0.0] * 3]])
    out = align(
        {"m": a}, {"m": active}, {"m": episode_starts(torch.zeros(1, 2, 3, dtype=torch.bool))}, {"m": 2}, 0.5, 0.9
    )
    assert torch.allclose(out["m"][0, 0], a[0, 0]) and torch.equal(out["m"][0, 1], torch.zeros(3))


def test_w_sums_one_step_advantages_so_it_ignores_the_current_action():
    """Two histories equal up to step 1 that differ in the agent's own reward at step 2 (say it defected
    there: 5 instead of 3). ``w_2`` weighs the action of step 2, so it must be the same for both: it sums
    the one-step advantages of steps 0 and 1 (``past``). The GAE advantages of steps 0 and 1 already
    hold step 2's reward (lambda > 0): summing them made ``w_t * A2_t`` punish every defection, and the
    agents learned to cooperate after anything."""
    other = torch.tensor([[[0.5, 1.0, -1.0]]])  # the co-player's advantages A2
    one_ep = {m: episode_starts(torch.zeros(1, 1, 3, dtype=torch.bool)) for m in ("me", "co")}
    active = {m: torch.ones(1, 1, 3) for m in ("me", "co")}
    w2 = 0.9 * (0.9 * 3.0 + 0.81 * 3.0)  # gamma * sum_{k<2} gamma^(2-k) delta_k, delta = r (values 0)
    for r2 in (5.0, 3.0):
        r = torch.tensor([[[3.0, 3.0, r2]]])
        zero = torch.zeros_like(r)
        adv = gae(r, zero, zero, torch.zeros_like(r, dtype=torch.bool), 0.9, 0.95)  # delta_t = r_t
        out = align({"me": adv, "co": other}, active, one_ep, {"me": 1, "co": 1}, 0.5, 0.9, past={"me": r, "co": other})
        assert torch.allclose(out["me"][0, 0, 2], adv[0, 0, 2] + 0.5 * w2 * -1.0)
        gae_w = _align({"me": adv, "co": other})["me"][0, 0, 2] - adv[0, 0, 2]
        assert abs(float(gae_w) - 0.5 * w2 * -1.0) > 0.5  # summing GAE advantages: w_2 sees r_2


def test_ipd_pays_the_table_and_shows_the_last_joint_action_from_each_side():
    env = marl.make_env("iterated_matrix", "ipd", rounds=2, num_envs=4)
    s = env.reset()
    assert torch.equal(s.obs["agent_0"][:, 0].argmax(-1), torch.zeros(4, dtype=torch.long))  # slot 0: first round
    act = {"agent_0": torch.tensor([[0], [0], [1], [1]]), "agent_1": torch.tensor([[0], [1], [0], [1]])}
    s = env.step(act)
    assert s.reward["agent_0"][:, 0].tolist() == [3, 0, 5, 1] and s.reward["agent_1"][:, 0].tolist() == [3, 5, 0, 1]
    assert s.obs["agent_0"][:, 0].argmax(-1).tolist() == [1, 2, 3, 4]  # 1 + own * 2 + other
    assert s.obs["agent_1"][:, 0].argmax(-1).tolist() == [1, 3, 2, 4]
    assert not s.truncated.any() and env.step(act).truncated.all() and not s.terminated.any()


# ------------------------------------------------------------------ learning on the tensor IPD
def _play(policy, always_defect=None, n=64, rounds=10):
    """Greedy play on the IPD: mean reward per round of both seats; ``always_defect``: that seat defects."""
    env = marl.make_env("iterated_matrix", "ipd", rounds=rounds, num_envs=n)
    s, total = env.reset(), torch.zeros(2)
    policy.reset()
    for _ in range(rounds):
        a = policy.act(s)
        if always_defect is not None:
            a[always_defect] = torch.ones_like(a[always_defect])
        s = env.step(a)
        total += torch.tensor([float(s.reward["agent_0"].mean()), float(s.reward["agent_1"].mean())])
    return (total / rounds).tolist()


def _fit(run_dir, iterations=100, **kw):
    env = marl.make_env("iterated_matrix", "ipd", rounds=10, num_envs=64)  # one episode per rollout
    base = dict(rollout_length=10, lr=0.005, eval_episodes=0, progress=False, log_dir=run_dir, seed=0)
    return env.fit("advantage_alignment", stop={"iterations": iterations}, checkpoint_every=0, **{**base, **kw})


def test_aa_cooperates_retaliates_in_both_seats_and_naive_ppo_defects(ray_session, run_dir):
    res = _fit(run_dir)
    assert res.config.algo == "advantage_alignment_tensor"  # the same name as on text games
    mutual = _play(res.policy)
    seat0, seat1 = _play(res.policy, "agent_1"), _play(res.policy, "agent_0")  # AA in seat 0, in seat 1
    print("AA self-play", mutual, "AA seat 0 vs always-defect", seat0, "AA seat 1 vs always-defect", seat1)
    assert min(mutual) >= 2.8  # mutual cooperation pays 3 per round, mutual defection 1
    # retaliation: exploited at most in round 1 (0.9 per round; "cooperate after anything" gets 0, the defector 5)
    for aa, defector in ((seat0[0], seat0[1]), (seat1[1], seat1[0])):
        assert aa >= 0.8 and defector <= 1.5
    naive = _play(_fit(run_dir, iterations=40, beta=0.0).policy)  # beta 0: independent PPO
    print("naive self-play", naive)
    assert max(naive) <= 1.5
