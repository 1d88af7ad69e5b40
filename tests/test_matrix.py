"""Matrix games (envs/matrix.py): hand-checked payoffs, transitions, auto-reset, errors.

No Ray, tiny batches: the whole file runs in about a second.
"""

import itertools

import gymnasium as gym
import numpy as np
import pytest
import torch

import marl
from marl.env import EpisodeStats, MarlError, list_envs, make_env
from marl.envs.matrix import MatrixGame, optimal_return, scenarios

CLIMBING = [[11, -30, 0], [-30, 7, 6], [0, 0, 5]]
NONMONOTONIC = [[8, -12, -12], [-12, 0, 0], [-12, 0, 0]]


def penalty(k):
    return [[k, 0, 10], [0, 2, 0], [10, 0, k]]


def all_joint_actions(shape):
    """``[J, N]`` int64: every joint action of a payoff of ``shape`` (row-major)."""
    return torch.tensor(list(itertools.product(*[range(n) for n in shape])), dtype=torch.long)


def check_shapes(env, s):
    """The common contract (marl.env.check_step: shapes, dtypes, flags, finals), plus the matrix games' rules."""
    marl.env.check_step(env, s)
    B, g = env.num_envs, env.info.groups["agent"]
    N, D = g.n_agents, env.info.state_dim
    assert s.final_obs is not None and s.final_state is not None and s.final_avail_actions is not None
    assert s.alive["agent"].all() and not s.truncated.any()
    # every agent sees the global one-hot; shared reward
    assert torch.equal(s.obs["agent"], s.state[:, None].expand(B, N, D))
    assert torch.equal(s.final_obs["agent"], s.final_state[:, None].expand(B, N, D))
    assert (s.state.sum(-1) == 1).all() and (s.final_state.sum(-1) == 1).all()
    assert (s.reward["agent"] == s.reward["agent"][:, :1]).all()


# --------------------------------------------------------------------------- registry / info


def test_registered_and_info():
    assert list_envs(with_scenarios=True)["matrix"] == ["two_step", "climbing", "penalty", "nonmonotonic"]
    assert scenarios() == ["two_step", "climbing", "penalty", "nonmonotonic"]
    for name in scenarios():
        env = make_env("matrix", name, num_envs=3, seed=0)
        info = env.info
        assert isinstance(env, MatrixGame) and info.family == "matrix" and info.scenario == name
        assert info.agents == ["agent_0", "agent_1"] and list(info.groups) == ["agent"]
        assert info.kind == "cooperative" and info.shared_reward and list(info.teams) == ["team"]
        assert info.groups["agent"].action_space == gym.spaces.Discrete(2 if name == "two_step" else 3)
        assert info.episode_limit == (2 if name == "two_step" else 1)
        marl.check_env(env, steps=5)
        assert info.state_dim == (4 if name == "two_step" else 2)
        assert info.groups["agent"].obs_dim == info.state_dim
    assert make_env("matrix:climbing", num_envs=2).info.scenario == "climbing"
    clone = make_env("matrix", "penalty", num_envs=2, k=-5).spec.make()
    assert clone.optimal_return == 10 and clone.num_envs == 2


def test_optimal_returns():
    assert {n: optimal_return(n) for n in scenarios()} == {
        "two_step": 8,
        "climbing": 11,
        "penalty": 10,
        "nonmonotonic": 8,
    }
    assert optimal_return(make_env("matrix", "two_step", num_envs=1)) == 8
    assert make_env("matrix", "penalty", k=0).optimal_return == 10
    assert optimal_return(make_env("matrix", payoff=[[1, 2], [3, -4]])) == 3
    with pytest.raises(MarlError, match="climbing"):
        optimal_return("climbin")
    with pytest.raises(MarlError, match="matrix game"):
        optimal_return(object())


# --------------------------------------------------------------------------- payoffs


@pytest.mark.parametrize(
    "scenario, kwargs, table",
    [
        ("climbing", {}, CLIMBING),
        ("penalty", {}, penalty(-100)),
        ("penalty", {"k": -7.5}, penalty(-7.5)),
        ("nonmonotonic", {}, NONMONOTONIC),
        ("custom", {"payoff": [[8, -12, -12], [-12, 0, 0], [-12, 0, 0]]}, NONMONOTONIC),
        (None, {"payoff": np.arange(24.0).reshape(2, 3, 4) - 5}, np.arange(24.0).reshape(2, 3, 4) - 5),
    ],
)
def test_one_step_payoffs_all_joint_actions_in_one_batched_step(scenario, kwargs, table):
    table = np.asarray(table, dtype=np.float64)
    joint = all_joint_actions(table.shape)
    env = make_env("matrix", scenario, num_envs=len(joint), **kwargs)
    s = env.reset(seed=3)
    check_shapes(env, s)
    start = torch.tensor([1.0, 0.0])
    assert (s.state == start).all() and not s.done.any() and (s.reward["agent"] == 0).all()
    s = env.step({"agent": joint})
    check_shapes(env, s)
    expected = torch.tensor([table[tuple(j)] for j in joint.tolist()], dtype=torch.float32)
    for i in range(table.ndim):
        assert torch.equal(s.reward["agent"][:, i], expected)
    assert s.terminated.all() and not s.truncated.any()
    assert (s.final_state == torch.tensor([0.0, 1.0])).all(), "final obs = terminal one-hot"
    assert (s.state == start).all(), "auto-reset: obs belong to the next episode"
    assert env.optimal_return == table.max()


def test_two_step_transitions_and_payoffs():
    # copy = (a0 at step 1, a1 at step 1, a0 at step 2, a1 at step 2): all 16 combinations
    plan = all_joint_actions((2, 2, 2, 2))
    env = make_env("matrix", "two_step", num_envs=16, seed=0)
    s1, s2a, s2b, term = torch.eye(4)
    s = env.reset(seed=0)
    check_shapes(env, s)
    assert (s.state == s1).all() and (s.obs["agent"] == s1).all()

    s = env.step({"agent": plan[:, :2]})
    check_shapes(env, s)
    assert (s.reward["agent"] == 0).all() and not s.done.any()
    went_b = plan[:, 0] == 1  # only agent 0's first action matters
    assert (s.state[~went_b] == s2a).all() and (s.state[went_b] == s2b).all()
    assert torch.equal(s.final_state, s.state)

    s = env.step({"agent": plan[:, 2:]})
    check_shapes(env, s)
    pay_2b = torch.tensor([[0.0, 1.0], [1.0, 8.0]])
    expected = torch.where(went_b, pay_2b[plan[:, 2], plan[:, 3]], torch.tensor(7.0))
    assert torch.equal(s.reward["agent"], expected[:, None].expand(16, 2))
    assert s.terminated.all() and not s.truncated.any()
    assert (s.final_state == term).all() and (s.final_obs["agent"] == term).all()
    assert (s.state == s1).all(), "auto-reset to state 1"
    assert s.final_avail_actions["agent"].all()
    assert float(expected.max()) == 8 == env.optimal_return
    assert env.state_names == ["1", "2A", "2B", "terminal"]

    # the next episode runs the same way, and EpisodeStats sees 2-step episodes
    stats = EpisodeStats(env.info)
    for t in range(4):
        s = env.step({"agent": plan[:, 2 * (t % 2) : 2 * (t % 2) + 2]})
        stats.update(s)
        assert bool(s.terminated.all()) == (t % 2 == 1)
    done = stats.pop()
    assert done["episode_length"] == [2.0] * 32
    assert done["episode_return"] == (2 * expected).tolist() * 2  # summed over the 2 agents


def test_auto_reset_lockstep_and_seed_is_ignored():
    env = make_env("matrix", "climbing", num_envs=5)
    a = env.reset(seed=1)
    b = env.reset(seed=123)
    assert torch.equal(a.state, b.state)
    gen = torch.Generator().manual_seed(0)
    table = torch.tensor(CLIMBING, dtype=torch.float32)
    for _ in range(4):
        act = env.random_actions(b, gen)
        b = env.step(act)
        check_shapes(env, b)
        assert b.terminated.all()
        assert torch.equal(b.reward["agent"][:, 0], table[act["agent"][:, 0], act["agent"][:, 1]])


def test_random_actions_with_padded_custom_payoff():
    # 3 agents with 2, 3 and 1 actions: one group, Discrete(3), padded actions unavailable
    table = np.random.default_rng(0).normal(size=(2, 3, 1))
    env = make_env("matrix", "custom", payoff=table, num_envs=64)
    g = env.info.groups["agent"]
    assert g.n_agents == 3 and g.action_space == gym.spaces.Discrete(3)
    assert env.n_actions_per_agent == [2, 3, 1]
    s = env.reset()
    mask = torch.tensor([[True, True, False], [True, True, True], [True, False, False]])
    assert (s.avail_actions["agent"] == mask).all() and (s.final_avail_actions["agent"] == mask).all()
    gen = torch.Generator().manual_seed(1)
    for _ in range(3):
        act = env.random_actions(s, gen)["agent"]
        assert (act < torch.tensor([2, 3, 1])).all()
        s = env.step({"agent": act})
        check_shapes(env, s)
        expected = torch.tensor([table[tuple(j)] for j in act.tolist()], dtype=torch.float32)
        assert torch.allclose(s.reward["agent"], expected[:, None].expand(64, 3))
    assert env.optimal_return == pytest.approx(table.max())
    marl.check_env(env, steps=3)
    with pytest.raises(MarlError, match="not available.*agent_0 has actions 0..1"):
        env.step({"agent": torch.tensor([[2, 0, 0]] * 64)})


# --------------------------------------------------------------------------- errors


@pytest.mark.parametrize(
    "args, kwargs, words",
    [
        (
            ("climbin",),
            {},
            ["Unknown matrix game 'climbin'", "Did you mean 'climbing'", "two_step", "nonmonotonic", "custom"],
        ),
        ((None,), {}, ["needs a scenario or payoff", "two_step", "custom"]),
        (("custom",), {}, ["needs payoff="]),
        (("penalty",), {"k": 5}, ["k must be <= 0", "5"]),
        (("penalty",), {"k": "big"}, ["finite number", "'big'"]),
        (("climbing",), {"k": -1}, ["only for the 'penalty'"]),
        (("climbing",), {"payoff": [[1, 0], [0, 1]]}, ["only for the 'custom'"]),
        (("penalty",), {"K": -1}, ["'K'", "Did you mean 'k'", "payoff"]),
        ((None,), {"payoff": [1, 2, 3]}, ["shape (3,)", "at least 2 agents"]),
        ((None,), {"payoff": 5}, ["shape ()", "at least 2 agents"]),
        ((None,), {"payoff": [[1, 2], [3]]}, ["rectangular"]),
        ((None,), {"payoff": [["a", "b"], ["c", "d"]]}, ["numeric"]),
        ((None,), {"payoff": np.zeros((2, 0))}, ["no actions", "(2, 0)"]),
        ((None,), {"payoff": [[1, float("nan")], [0, 1]]}, ["finite"]),
        (("two_step",), {"num_envs": 0}, ["num_envs", "0"]),
    ],
)
def test_errors_name_the_problem(args, kwargs, words):
    with pytest.raises(MarlError) as e:
        make_env("matrix", *args, **kwargs)
    for w in words:
        assert w in str(e.value), (w, str(e.value))


def test_bad_actions():
    env = make_env("matrix", "two_step", num_envs=2)
    with pytest.raises(MarlError, match="reset"):
        env.step({"agent": torch.zeros(2, 2, dtype=torch.long)})
    env.reset()
    with pytest.raises(MarlError, match=r"shape \(2, 2\)"):
        env.step({"agent": torch.zeros(3, 2, dtype=torch.long)})
    with pytest.raises(MarlError, match="Missing actions for group 'agent'"):
        env.step({"agents": torch.zeros(2, 2, dtype=torch.long)})
    with pytest.raises(MarlError, match="integers"):
        env.step({"agent": torch.zeros(2, 2)})
    with pytest.raises(MarlError, match="Action -1 of agent_1"):
        env.step({"agent": torch.tensor([[0, 0], [0, -1]])})
