"""The batched torch MPE backend against mpe2 (the reference backend), step by step.

Both backends start from the same world (the mpe2 copies' entity states are loaded into the
torch env) and take the same random actions; observations, state and rewards must agree to
1e-5 (float32 outputs of float64 physics; envs/mpe/batched.py says why they can differ at all).
"""

import numpy as np
import pytest
import torch

import marl
from marl.env import check_env
from marl.envs.mpe import MPEEnv
from marl.envs.mpe.batched import SCENARIOS, TorchMPEEnv
from marl.errors import MarlError

TOL = 1e-5


def load_mpe2_world(env: TorchMPEEnv, ref: MPEEnv) -> None:
    """Copy every mpe2 copy's entity positions, velocities, comm and goal into ``env``."""
    w = env.world
    for b, raw in enumerate(ref._envs):
        ents = raw.world.agents + raw.world.landmarks
        w.pos[b] = torch.tensor(np.stack([e.state.p_pos for e in ents]))
        w.vel[b] = torch.tensor(np.stack([e.state.p_vel for e in ents]))
        w.c[b] = torch.tensor(np.stack([a.state.c for a in raw.world.agents]))
        if env.info.scenario == "simple_speaker_listener":
            env.scenario.goal[b] = raw.world.landmarks.index(raw.world.agents[0].goal_b)
        if env.info.scenario == "simple_reference":
            env.scenario.goal[b] = torch.tensor([raw.world.landmarks.index(a.goal_b) for a in raw.world.agents])
        if env.info.scenario == "simple_adversary":
            env.scenario.goal[b] = raw.world.landmarks.index(raw.world.agents[0].goal_a)
    env.steps[:] = torch.tensor([raw.steps for raw in ref._envs])
    env._observe()


def _pair(scenario, B, continuous, max_cycles=25, **kw):
    ref = marl.make_env(
        "mpe", scenario, num_envs=B, continuous_actions=continuous, max_cycles=max_cycles, backend="mpe2", **kw
    )
    env = marl.make_env(
        "mpe", scenario, num_envs=B, continuous_actions=continuous, max_cycles=max_cycles, backend="torch", **kw
    )
    assert isinstance(ref, MPEEnv) and isinstance(env, TorchMPEEnv)
    return ref, env


def _close(a, b, what):
    assert a.shape == b.shape and a.dtype == b.dtype, what
    err = (a.double() - b.double()).abs().max().item()
    assert err <= TOL, f"{what}: max abs difference {err}"


def _compare(s_ref, s, what):
    for g in s_ref.obs:
        _close(s_ref.obs[g], s.obs[g], f"{what} obs[{g}]")
        _close(s_ref.reward[g], s.reward[g], f"{what} reward[{g}]")
    _close(s_ref.state, s.state, f"{what} state")
    assert torch.equal(s_ref.truncated, s.truncated) and torch.equal(s_ref.terminated, s.terminated), what


@pytest.mark.parametrize("continuous", [False, True], ids=["discrete", "continuous"])
@pytest.mark.parametrize(
    "scenario, kw",
    [
        ("simple_spread", {}),
        ("simple_spread", {"N": 4, "local_ratio": 0.0}),
        ("simple_speaker_listener", {}),
        ("simple_reference", {}),
        ("simple_reference", {"local_ratio": 0.2}),
        ("simple_adversary", {}),
        ("simple_adversary", {"N": 3}),
    ],
)
def test_torch_backend_equals_mpe2_step_by_step(scenario, kw, continuous):
    B, T = 8, 25
    ref, env = _pair(scenario, B, continuous, max_cycles=T, **kw)
    gen = torch.Generator().manual_seed(0)
    for episode in range(3):  # each episode starts from a fresh mpe2 reset copied into the torch env
        s_ref = ref.reset(seed=10 * episode)
        env.reset(seed=0)
        load_mpe2_world(env, ref)
        s = env._make_step(torch.zeros(B, len(env.info.agents)), s_ref.terminated, s_ref.truncated)
        _compare(s_ref, s, f"episode {episode} reset")
        for t in range(T):
            actions = ref.random_actions(s_ref, generator=gen)
            s_ref = ref.step_env(ref.check_actions(actions))
            s = env.step_env(env.check_actions(actions))
            _compare(s_ref, s, f"episode {episode} step {t}")
        assert bool(s.truncated.all())  # max_cycles reached in every copy


def test_collisions_happen_and_match():
    # agents started on top of each other: contact forces and the collision penalty are exercised
    ref, env = _pair("simple_spread", 4, False)
    ref.reset(seed=3)
    for raw in ref._envs:
        for i, a in enumerate(raw.world.agents):
            a.state.p_pos = np.array([0.01 * i, -0.02 * i])
    ref._state[:] = np.stack(
        [np.concatenate([raw.scenario.observation(a, raw.world) for a in raw.world.agents]) for raw in ref._envs]
    )
    env.reset(seed=0)
    load_mpe2_world(env, ref)
    hits = 0
    zero = {"agent": torch.zeros(4, 3, dtype=torch.long)}
    for t in range(5):
        s_ref, s = ref.step_env(zero), env.step_env(zero)
        _compare(s_ref, s, f"step {t}")
        hits += int((s.reward["agent"] < -1.0).sum())
    assert hits > 0


def test_reset_draws_and_auto_reset():
    env = marl.make_env("mpe", "simple_speaker_listener", num_envs=256, max_cycles=3)
    s = env.reset(seed=1)
    pos = env.world.pos
    assert float(pos.min()) >= -1 and float(pos.max()) <= 1 and float(pos.abs().mean()) == pytest.approx(0.5, abs=0.05)
    assert set(env.scenario.goal.tolist()) == {0, 1, 2}
    assert torch.equal(env.reset(seed=1).state, s.state)  # same seed, same episode
    assert not torch.equal(env.reset(seed=2).state, s.state)
    for _ in range(3):
        s = env.step(env.random_actions(s))
    assert bool(s.truncated.all()) and not torch.equal(s.final_state, s.state)  # copies restarted
    assert int(env.steps.max()) == 0


def test_exact_resume_from_get_state():
    env = marl.make_env("mpe", "simple_spread", num_envs=6, max_cycles=4)
    s = env.reset(seed=5)
    gen = torch.Generator().manual_seed(1)
    for _ in range(3):
        s = env.step(env.random_actions(s, generator=gen))
    saved, gen_state = env.get_state(), gen.get_state()
    first = [env.step(env.random_actions(s, generator=gen)) for _ in range(6)]
    other = marl.make_env("mpe", "simple_spread", num_envs=6, max_cycles=4)
    other.set_state(saved)
    gen.set_state(gen_state)
    again = [other.step(other.random_actions(s, generator=gen)) for _ in range(6)]
    for a, b in zip(first, again):
        assert torch.equal(a.state, b.state) and torch.equal(a.reward["agent"], b.reward["agent"])
    with pytest.raises(MarlError, match="6 copies cannot be loaded into num_envs=2"):
        marl.make_env("mpe", "simple_spread", num_envs=2).set_state(saved)


@pytest.mark.parametrize("scenario", list(SCENARIOS))
def test_check_env_and_same_info_as_mpe2(scenario):
    ref, env = _pair(scenario, 3, False)
    assert env.info.groups.keys() == ref.info.groups.keys() and env.info.state_dim == ref.info.state_dim
    assert (env.info.kind, env.info.shared_reward, env.info.entity_layout) == (
        ref.info.kind,
        ref.info.shared_reward,
        ref.info.entity_layout,
    )
    check_env(env)


def test_backend_choice_and_errors():
    assert isinstance(marl.make_env("mpe", "simple_spread", num_envs=2), TorchMPEEnv)  # the default
    assert isinstance(marl.make_env("mpe", "simple_tag", num_envs=2), MPEEnv)  # not implemented in torch: mpe2
    assert isinstance(marl.make_env("mpe", "simple_adversary", num_envs=2), TorchMPEEnv)
    assert isinstance(marl.make_env("mpe", "simple_spread", num_envs=2, num_agent_neighbors=1), MPEEnv)
    with pytest.raises(MarlError, match="Unknown MPE backend 'jax'.*mpe2.*torch"):
        marl.make_env("mpe", "simple_spread", backend="jax")
    with pytest.raises(MarlError, match="does not implement scenario=simple_tag.*simple_spread.*backend='mpe2'"):
        marl.make_env("mpe", "simple_tag", backend="torch")
    with pytest.raises(MarlError, match="does not implement curriculum=True"):
        marl.make_env("mpe", "simple_spread", backend="torch", curriculum=True)
    with pytest.raises(MarlError, match="'n'.*Did you mean 'N'"):
        marl.make_env("mpe", "simple_spread", backend="torch", n=3)
