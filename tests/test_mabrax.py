"""MABrax (JaxMARL's multi-agent Brax) through marl: the batched contract on ``ant_4x2``.

Needs ``brax`` (the ``mabrax`` extra; CI does not install it): skipped without it. XLA compiles
Brax's batched step once per module (minutes on a loaded 2-core CPU), so the env is module-scoped
and the episodes are cut to ``LIMIT`` steps.
"""

import numpy as np
import pytest
import torch

import marl
from marl.env import MarlError, make_env
from marl.envs import jax_batch

try:  # import jaxmarl the adapters' way (XLA flags first; jaxmarl resets sys.stdout / sys.stderr)
    jax_batch.import_jaxmarl("test")
except MarlError:
    pass
pytest.importorskip("jaxmarl")
pytest.importorskip("brax")

pytestmark = pytest.mark.slow  # the first test compiles Brax's step (minutes); see the module docstring

B, LIMIT = 3, 4


@pytest.fixture(scope="module")
def ant():
    return make_env("mabrax", "ant_4x2", num_envs=B, seed=0, episode_length=LIMIT)


def test_info_matches_jaxmarl_spaces(ant):
    raw = ant.jaxmarl_env
    info, g = ant.info, ant.info.groups["agent"]
    assert info.kind == "cooperative" and info.shared_reward and list(info.groups) == ["agent"]
    assert g.n_agents == 4 and info.episode_limit == LIMIT
    box = raw.action_space(raw.agents[0])
    assert g.action_space.shape == (2,) == tuple(box.shape)
    assert np.all(g.action_space.low == -1.0) and np.all(g.action_space.high == 1.0)
    assert g.obs_space.shape == tuple(raw.observation_space(raw.agents[0]).shape)
    assert info.state_dim == raw.env.observation_size  # Brax's full observation


def test_reset_and_step_shapes_and_team_reward(ant):
    s = ant.reset(seed=0)
    D, S = ant.info.groups["agent"].obs_space.shape[0], ant.info.state_dim
    assert s.obs["agent"].shape == (B, 4, D) and s.obs["agent"].dtype == torch.float32
    assert s.state.shape == (B, S) and s.state.dtype == torch.float32 and torch.isfinite(s.state).all()
    assert s.avail_actions["agent"] is None and s.alive["agent"].all()
    assert torch.equal(s.reward["agent"], torch.zeros(B, 4)) and not s.done.any()
    s = ant.step(ant.random_actions(s, torch.Generator().manual_seed(0)))
    assert s.obs["agent"].shape == (B, 4, D) and s.state.shape == (B, S) and torch.isfinite(s.obs["agent"]).all()
    r = s.reward["agent"]
    assert r.shape == (B, 4) and torch.equal(r, r[:, :1].expand(B, 4))  # one team reward
    assert r.abs().sum() > 0  # Brax's ant pays a survive bonus every step
    assert s.terminated.shape == (B,) == s.truncated.shape and s.terminated.dtype == torch.bool


def test_actions_beyond_the_space_act_as_its_bounds(ant):
    """Actions outside ``[-1, 1]`` reach Brax clipped to the space: 5 moves the ant as 1 does."""
    out = []
    for value in (1.0, 5.0, -1.0):
        ant.reset(seed=1)
        out.append(ant.step({"agent": torch.full((B, 4, 2), value)}).state)
    assert torch.equal(out[0], out[1]) and not torch.equal(out[0], out[2])


def test_auto_reset_final_obs_is_the_last_one_and_the_clock_restarts(ant):
    gen = torch.Generator().manual_seed(2)
    s = ant.reset(seed=2)
    start, length, cut = s.obs["agent"].clone(), torch.zeros(B, dtype=torch.long), 0
    for _ in range(3 * LIMIT):
        s = ant.step(ant.random_actions(s, gen))
        length += 1
        # cut exactly at LIMIT steps of each copy's own episode, unless the ant fell over (terminated)
        assert torch.equal(s.truncated, (length == LIMIT) & ~s.terminated)
        d = s.done
        same = (s.final_obs["agent"] == s.obs["agent"]).flatten(1).all(-1)
        assert torch.equal(same, ~d)  # final_obs differs from obs exactly in the rows that ended
        # the final observation is the episode's last one, not its first (what Brax's own auto-reset
        # would hand back)
        assert not (s.final_obs["agent"][d] == start[d]).flatten(1).all(-1).any()
        cut += int(s.truncated.sum())
        start[d], length[d] = s.obs["agent"][d], 0
    assert cut >= 1


def test_seeding_is_reproducible_and_copy_b_is_copy_0_of_seed_plus_b(ant):
    a = ant.reset(seed=10).obs["agent"].clone()
    assert torch.equal(ant.reset(seed=10).obs["agent"], a)
    b = ant.reset(seed=11).obs["agent"]
    assert torch.equal(a[1], b[0]) and torch.equal(a[2], b[1]) and not torch.equal(a[0], b[0])


def test_check_env_passes(ant):
    marl.check_env(ant, steps=2 * LIMIT, seed=0, verbose=False)
