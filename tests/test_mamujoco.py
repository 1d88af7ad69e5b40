"""MaMuJoCo (envs/mamujoco.py): the batched env contract on HalfCheetah 2x3 and the robots it shares
code with, against gymnasium_robotics's own ``mamujoco_v1`` env. No Ray; episodes of a few steps.

Skipped when gymnasium_robotics or mujoco is not installed (``pip install 'marl-rllib[mamujoco]'``).
"""

import warnings

import numpy as np
import pytest
import torch

import marl
from marl.env import list_envs, make_env
from marl.env.registry import scenarios_of

pytest.importorskip("mujoco", reason="MaMuJoCo needs mujoco: pip install 'marl-rllib[mamujoco]'")
pytest.importorskip(
    "gymnasium_robotics", reason="MaMuJoCo needs gymnasium-robotics: pip install 'marl-rllib[mamujoco]'"
)

from gymnasium_robotics import mamujoco_v1  # noqa: E402

from marl.envs.mamujoco import _mujoco_warnings, agent_confs  # noqa: E402

LIMIT = 5


def cheetah(**kw):
    kw.setdefault("num_envs", 3)
    kw.setdefault("episode_limit", LIMIT)
    return make_env("mamujoco", "HalfCheetah", agent_conf="2x3", **kw)


def scripted(env, steps, seed=0):
    """The steps of ``env`` under a fixed random action sequence (``torch.Generator`` seeded with ``seed``)."""
    gen = torch.Generator().manual_seed(seed)
    out = [env.reset(seed=seed)]
    for _ in range(steps):
        out.append(env.step(env.random_actions(out[-1], gen)))
    return out


def test_registry_lists_the_robots_and_their_partitions():
    assert "mamujoco" in list_envs() and "HalfCheetah" in scenarios_of("mamujoco")
    confs = agent_confs()
    # the partitions of FACMAC's MaMuJoCo (Peng et al. 2021, arXiv:2003.06709)
    assert {"2x3", "6x1"} <= set(confs["HalfCheetah"]) and {"2x4", "2x4d", "4x2"} <= set(confs["Ant"])
    assert confs["Hopper"] == ("3x1",) and confs["Walker2d"] == ("2x3",)


def test_contract_shapes_truncation_and_auto_reset():
    env = cheetah()
    info = env.info
    assert info.family == "mamujoco" and info.scenario == "HalfCheetah-2x3" and info.shared_reward
    assert info.episode_limit == LIMIT and info.state_dim == 17  # HalfCheetah-v5's observation
    (g,) = info.groups.values()
    assert g.agents == ["agent_0", "agent_1"] and g.obs_dim == 12 and g.n_actions == 3 and not g.discrete
    assert g.action_space.low.tolist() == [-1.0] * 3 and g.action_space.high.tolist() == [1.0] * 3
    steps = scripted(env, 2 * LIMIT)
    for t, s in enumerate(steps):
        marl.env.check_step(env, s)
        assert s.obs["agent"].shape == (3, 2, 12) and s.obs["agent"].dtype == torch.float32
        assert s.state.shape == (3, 17) and s.state.dtype == torch.float32
        assert s.avail_actions["agent"] is None and s.alive["agent"].all()
        # the team reward: the same for both agents
        assert torch.equal(s.reward["agent"][:, 0], s.reward["agent"][:, 1])
        # the time limit is a truncation of every copy at once, never a termination
        assert not s.terminated.any()
        assert s.truncated.all() if t and t % LIMIT == 0 else not s.truncated.any(), t
        if t and t % LIMIT == 0:
            # auto-reset: a new episode in every row, the ended one kept in final_*
            assert not torch.equal(s.final_state, s.state) and not torch.equal(s.final_obs["agent"], s.obs["agent"])
        elif t:
            assert torch.equal(s.final_state, s.state)
    env.close()


def test_observations_and_state_are_mamujocos():
    """Copy b seeded with seed + b equals gymnasium_robotics's env reset with that seed, step by step."""
    env = cheetah(num_envs=2, episode_limit=1000)
    s = env.reset(seed=7)
    with warnings.catch_warnings(), _mujoco_warnings():  # no MUJOCO_LOG.TXT in the working directory
        warnings.simplefilter("ignore")
        ref = mamujoco_v1.parallel_env("HalfCheetah", "2x3", agent_obsk=1)
    obs, _ = ref.reset(seed=8)  # copy 1
    for t in range(4):
        for j, a in enumerate(ref.possible_agents):
            np.testing.assert_array_equal(s.obs["agent"][1, j].numpy(), obs[a].astype(np.float32))
        np.testing.assert_array_equal(s.state[1].numpy(), ref.state().astype(np.float32))
        act = torch.full((2, 2, 3), 0.3 * (-1) ** t)
        s = env.step({"agent": act})
        obs, rew, *_ = ref.step({a: np.full(3, 0.3 * (-1) ** t, np.float32) for a in ref.possible_agents})
        assert s.reward["agent"][1, 0].item() == pytest.approx(rew["agent_0"], rel=1e-6)
    env.close()


def test_seeding_same_seed_same_episode():
    a = [s.state for s in scripted(cheetah(), 7, seed=3)]
    b = [s.state for s in scripted(cheetah(), 7, seed=3)]
    c = [s.state for s in scripted(cheetah(), 7, seed=4)]
    assert all(torch.equal(x, y) for x, y in zip(a, b))
    assert not torch.equal(a[0], c[0])
    assert not torch.equal(a[0][0], a[0][1])  # copies get seed + b: they differ


def test_subprocess_workers_step_exactly_as_the_loop():
    """vector="subprocess" (3 copies over 2 workers: slices of 2 and 1) gives the loop's steps,
    through a truncation and its auto-reset."""
    env = cheetah(vector="subprocess", num_workers=2)
    far = scripted(env, LIMIT + 2, seed=3)
    env.close()
    near = scripted(cheetah(), LIMIT + 2, seed=3)
    assert far[LIMIT].truncated.all()
    for x, y in zip(far, near):
        marl.env.check_step(env, x)
        assert torch.equal(x.obs["agent"], y.obs["agent"]) and torch.equal(x.state, y.state)
        assert torch.equal(x.final_obs["agent"], y.final_obs["agent"]) and torch.equal(x.final_state, y.final_state)
        assert torch.equal(x.reward["agent"], y.reward["agent"]) and torch.equal(x.truncated, y.truncated)
    assert env._copies.procs and all(p.poll() is not None for p in env._copies.procs)  # close() ended the workers


def test_actions_are_clipped_to_the_actuator_bounds():
    env = cheetah(num_envs=1)
    env.reset(seed=0)
    far = env.step({"agent": torch.full((1, 2, 3), 5.0)})
    env.reset(seed=0)
    edge = env.step({"agent": torch.ones(1, 2, 3)})
    assert torch.equal(far.state, edge.state) and torch.equal(far.reward["agent"], edge.reward["agent"])
    env.reset(seed=0)
    inner = env.step({"agent": torch.full((1, 2, 3), 0.5)})
    assert not torch.equal(inner.state, edge.state)


def test_a_fall_is_a_termination_and_the_limit_a_truncation():
    """Hopper 3x1 falls under random actions long before 1000 steps: terminated, not truncated."""
    env = make_env("mamujoco", "Hopper", agent_conf="3x1", num_envs=2)
    assert sum(g.n_agents for g in env.info.groups.values()) == 3
    ends = [s for s in scripted(env, 300) if s.done.any()]
    assert ends, "random play kept the Hopper up for 300 steps"
    assert all(bool(s.terminated[s.done].all()) and not s.truncated.any() for s in ends)
    assert env.info.episode_limit == 1000
    env.close()


def test_check_env_passes_on_unequal_agents():
    """HalfCheetah 6x1 with agent_obsk=1: agents see 8 or 9 values, so they form several groups."""
    env = make_env("mamujoco", "HalfCheetah", agent_conf="6x1", num_envs=2, episode_limit=4)
    dims = sorted(g.obs_dim for g in env.info.groups.values())
    assert sum(g.n_agents for g in env.info.groups.values()) == 6 and dims[0] == 8 and dims[-1] == 9
    marl.check_env(env, steps=10, seed=1)
    depth0 = make_env("mamujoco", "HalfCheetah", agent_conf="6x1", num_envs=1, agent_obsk=0)
    assert {g.obs_dim for g in depth0.info.groups.values()} == {7}  # agent_obsk reaches gymnasium_robotics
