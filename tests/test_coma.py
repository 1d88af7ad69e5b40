"""COMA (Foerster et al. 2018, arXiv 1705.08926): the critic's inputs, the counterfactual baseline
(eq. 4) and the TD(lambda) targets on hand-computed values, a learning threshold random play cannot
reach, and exact resume."""

from types import SimpleNamespace

import pytest
import torch
from gymnasium.spaces import Discrete

from marl.algos.coma import COMA, coma_critic_inputs, counterfactual_advantage, td_lambda_targets
from test_exact_resume import _one_go_vs_resumed
from toy_envs import MatchEnv

# Q(s, u_0, u_1) of one state, rows u_0, columns u_1
TABLE = torch.tensor([[1.0, 0.0], [3.0, 5.0]])


def table_critic(x: torch.Tensor) -> torch.Tensor:
    """A COMA critic reading TABLE from :func:`coma_critic_inputs` of 2 agents x 2 actions (state width 1):
    the other agent's one-hot picks the column (agent 0) or row (agent 1); out: Q of each own action."""
    other0, other1, agent1 = x[..., 3:5], x[..., 1:3], x[..., 6:7]  # agent 0 sees u_1's block, agent 1 u_0's
    return (1 - agent1) * other0 @ TABLE.T + agent1 * other1 @ TABLE


def test_critic_inputs_hide_the_agents_own_action():
    state = torch.tensor([[[0.5]]])  # [T=1, B=1, S=1]
    x = coma_critic_inputs(state, {"shared": torch.tensor([[[1, 0]]])}, {"shared": 2})["shared"]
    # [s, u_0 one-hot, u_1 one-hot, agent id]: u = (1, 0), each agent's own block zeroed
    assert x[0, 0].tolist() == [[0.5, 0, 0, 1, 0, 1, 0], [0.5, 0, 1, 0, 0, 0, 1]]


def test_critic_inputs_across_modules():
    """share='individual': one agent per module, 2 and 3 actions; the joint action and the agent index span both."""
    state = torch.zeros(1, 1, 0)
    acts = {"a": torch.tensor([[[1]]]), "b": torch.tensor([[[2]]])}
    x = coma_critic_inputs(state, acts, {"a": 2, "b": 3})
    assert x["a"][0, 0].tolist() == [[0, 0, 0, 0, 1, 1, 0]]
    assert x["b"][0, 0].tolist() == [[0, 1, 0, 0, 0, 0, 1]]


def test_learner_rows_carry_each_agents_critic_input():
    """COMA.sequences: row ``b*N + i`` of the learner batch holds agent ``i`` of env copy ``b``, time second,
    and its ``critic_in`` is :func:`coma_critic_inputs` of that agent (T steps, no final-observation column)."""
    T, B, N, A, S = 4, 2, 3, 3, 5
    g = torch.Generator().manual_seed(0)
    per_agent = lambda *shape: torch.randn(T, B, N, *shape, generator=g)  # noqa: E731
    module = {
        "obs": per_agent(2),
        "final_obs": per_agent(2),
        "actions": torch.randint(0, A, (T, B, N), generator=g),
        "logp": per_agent(),
        "rewards": per_agent(),
        "alive": torch.ones(T, B, N, dtype=torch.bool),
    }
    module["obs"] = torch.cat([module["obs"], module["obs"][:1]])  # T+1 observations
    rollout = {
        "state": torch.randn(T + 1, B, S, generator=g),
        "final_state": torch.randn(T, B, S, generator=g),
        "terminated": torch.zeros(T, B, dtype=torch.bool),
        "truncated": torch.zeros(T, B, dtype=torch.bool),
        "starts": torch.zeros(T, B, dtype=torch.bool),
        "modules": {"shared": module},
    }
    trainer = SimpleNamespace(run=SimpleNamespace(module_spaces={"shared": SimpleNamespace(action_space=Discrete(A))}))
    rows = COMA.sequences(trainer, rollout).policy_batches["shared"]
    expected = coma_critic_inputs(rollout["state"][:-1], {"shared": module["actions"]}, {"shared": A})["shared"]
    assert rows["critic_in"].shape == (B * N, T, S + N * A + N) and "final_critic_in" not in rows
    for b in range(B):
        for i in range(N):
            assert torch.equal(torch.from_numpy(rows["critic_in"][b * N + i]), expected[:, b, i])
            assert torch.equal(torch.from_numpy(rows["actions"][b * N + i]), module["actions"][:, b, i])


def test_counterfactual_baseline_by_hand():
    """u = (1, 0), pi_0 = (0.25, 0.75), pi_1 = (0.6, 0.4). Agent 0: Q(s, (., 0)) = (1, 3),
    A = 3 - (0.25*1 + 0.75*3) = 0.5. Agent 1: Q(s, (1, .)) = (3, 5), A = 3 - (0.6*3 + 0.4*5) = -0.8."""
    state = torch.tensor([[[0.5]]])
    u = torch.tensor([[[1, 0]]])
    q = table_critic(coma_critic_inputs(state, {"shared": u}, {"shared": 2})["shared"])
    assert q[0, 0].tolist() == [[1.0, 3.0], [3.0, 5.0]]
    pi = torch.tensor([[[[0.25, 0.75], [0.6, 0.4]]]])
    adv = counterfactual_advantage(q, pi, u)
    assert torch.allclose(adv[0, 0], torch.tensor([0.5, -0.8]))


def test_expected_advantage_under_the_policy_is_zero():
    """E_{u^a ~ pi^a}[A^a(s, (u^{-a}, u^a))] = 0 for any Q and pi: the baseline adds no bias (eq. 4)."""
    g = torch.Generator().manual_seed(0)
    q = torch.randn(64, 5, generator=g) * 10
    pi = torch.softmax(torch.randn(64, 5, generator=g) * 3, -1)
    per_action = torch.stack([counterfactual_advantage(q, pi, torch.full((64,), u)) for u in range(5)], -1)
    assert per_action.abs().max() > 1  # the advantages themselves are not zero
    assert torch.allclose((pi * per_action).sum(-1), torch.zeros(64), atol=1e-5)


R3, Q3 = torch.tensor([1.0, 2.0, 3.0]), torch.tensor([10.0, 20.0, 30.0])
NO = torch.tensor([False, False, False])
END = torch.tensor([False, False, True])


@pytest.mark.parametrize(
    "terminated, cut, lam, expected",
    [
        # G2 = 3; G1 = 2 + .5 (.5*30 + .5*3) = 10.25; G0 = 1 + .5 (.5*20 + .5*10.25) = 8.5625
        (END, NO, 0.5, [8.5625, 10.25, 3.0]),
        # the rollout ends after step 2: G2 = q2 = 30; G1 = 2 + .5 (.5*30 + .5*30) = 17; G0 = 1 + .5 (.5*20 + .5*17)
        (NO, END, 0.5, [10.25, 17.0, 30.0]),
        # lambda 0: one-step targets r_t + gamma q_{t+1}
        (END, NO, 0.0, [11.0, 17.0, 3.0]),
        # lambda 1: discounted returns 1 + .5*2 + .25*3 = 2.75, 2 + .5*3 = 3.5
        (END, NO, 1.0, [2.75, 3.5, 3.0]),
        # a time limit at step 0 (cut), a new episode after it: G0 = q0; G1, G2 as the first case
        (END, torch.tensor([True, False, False]), 0.5, [10.0, 10.25, 3.0]),
    ],
)
def test_td_lambda_targets_of_a_three_step_episode(terminated, cut, lam, expected):
    """gamma 0.5, rewards (1, 2, 3), target-network Q of the taken actions (10, 20, 30)."""
    g = td_lambda_targets(R3, Q3, terminated, cut, 0.5, lam)
    assert torch.allclose(g, torch.tensor(expected))


@pytest.mark.slow  # a learning threshold, as tests/test_learning.py (about 10 s of training on 2 cores)
def test_coma_solves_cue_matching(ray_session, run_dir):
    """Random play earns 5 steps * 3 agents / 4 actions = 3.75, optimal 15. Greedy return after 50
    iterations (lr 5e-3, 2 epochs per rollout, target copied every 10 updates): seeds 0-6 gave
    15, 15, 15, 15, 15, 11.3, 15; the bar is 10."""
    returns = []
    for seed in range(3):
        res = MatchEnv(num_envs=16, N=3, A=4).fit(
            "coma",
            stop={"iterations": 50},
            log_dir=run_dir,
            progress=False,
            rollout_length=10,
            eval_episodes=32,
            seed=seed,
            lr=0.005,
            epochs=2,
            target_update_interval=10,
        )
        returns.append(res.eval["episode_return_mean"])
    print("greedy return per seed:", returns)
    assert min(returns) >= 10.0, returns


@pytest.mark.parametrize(
    "extra",
    [{}, dict(recurrent=True, chunk_length=3, share="individual")],
    ids=["mlp", "gru-individual"],
)
def test_coma_resume_is_exact(ray_session, run_dir, extra):
    """5-step episodes, 3-step rollouts (cut mid-episode). The target critic is copied after update 3,
    one after the checkpoint: the count of updates and the target must come back from it."""
    _one_go_vs_resumed(
        lambda: MatchEnv(num_envs=3, T=5),
        "coma",
        4,
        run_dir,
        rollout_length=3,
        epochs=2,
        num_minibatches=2,
        target_update_interval=3,
        **extra,
    )
