"""JaxMARL families (Overcooked, Hanabi, Coin Game, STORM; MABrax behind ``slow``): the batched contract.

XLA compiles each env's batched step once per scenario, options and batch size (one to two minutes
each on a loaded 2-core machine), so the envs are module-scoped and each is compiled once. The
image-observation families are checked directly (shapes, dtypes, seeding, auto-reset) because
``check_env`` accepts image spaces only once the structured-observation work of issue 30 is in.
"""

import numpy as np
import pytest
import torch

import marl
from marl.env import MarlError, make_env
from marl.envs import jax_batch, jaxmarl_envs

try:  # import jaxmarl the adapters' way (XLA flags first; jaxmarl resets sys.stdout / sys.stderr)
    jax_batch.import_jaxmarl("test")
except MarlError:
    pass
pytest.importorskip("jaxmarl")

B = 4


@pytest.fixture(scope="module")
def overcooked():
    return make_env("overcooked", "cramped_room", num_envs=B, seed=0, max_steps=6)


@pytest.fixture(scope="module")
def hanabi():
    return make_env("hanabi", players=2, num_envs=B, seed=0)


@pytest.fixture(scope="module")
def coin():
    return make_env("coin_game", num_envs=B, seed=0, num_inner_steps=3, num_outer_steps=2)


@pytest.fixture(scope="module")
def storm():
    return make_env("storm", "storm", num_envs=B, seed=0, num_inner_steps=5)


def random_actions(s, gen):
    """One uniformly random legal action per agent (the avail masks)."""
    out = {}
    for g, av in s.avail_actions.items():
        probs = av.float().reshape(-1, av.shape[-1])
        out[g] = torch.multinomial(probs, 1, generator=gen).reshape(av.shape[:-1])
    return out


def obs_of(s, g):
    o = s.obs[g]
    return torch.cat([v.flatten(2).float() for v in o.values()], -1) if isinstance(o, dict) else o


# --------------------------------------------------------------------------- static


def test_scenarios_match_jaxmarl_and_listing_needs_no_jax():
    from jaxmarl.environments.overcooked import overcooked_layouts
    from jaxmarl.registration import registered_envs

    assert set(jaxmarl_envs.OVERCOOKED_LAYOUTS) == set(overcooked_layouts)
    assert set(jaxmarl_envs.STORM_SCENARIOS) | set(jaxmarl_envs.MABRAX_SCENARIOS) <= set(registered_envs)
    listed = marl.list_envs(with_scenarios=True)
    assert listed["overcooked"] == list(jaxmarl_envs.OVERCOOKED_LAYOUTS)
    assert listed["hanabi"] == ["2p", "3p", "4p", "5p"] and listed["storm"] == ["storm", "storm_2p", "storm_np"]
    assert "coin_game" in listed and "mabrax" in listed


@pytest.mark.parametrize("players, obs_dim", [(2, 658), (3, 956), (4, 1041), (5, 1280)])
def test_hanabi_info_for_2_to_5_players(players, obs_dim):
    info = make_env("hanabi", f"{players}p", num_envs=2).info  # building compiles nothing
    g = info.groups["agent"]
    hand = 5 if players < 4 else 4
    # discard or play each card of the hand, hint each other player one of 5 colours or 5 ranks, the no-op
    n_actions = 2 * hand + (players - 1) * 10 + 1
    assert (g.n_agents, g.obs_space.shape, g.n_actions) == (players, (obs_dim,), n_actions)
    assert info.state_dim == players * obs_dim and info.kind == "cooperative" and info.shared_reward
    assert info.episode_limit == 2 * (50 - players * hand) + players + 8 + 5


def test_overcooked_layout_shapes():
    for layout, (h, w) in {"cramped_room": (4, 5), "forced_coord": (5, 5), "counter_circuit": (5, 8)}.items():
        info = make_env("overcooked", layout, num_envs=2).info
        assert info.groups["agent"].obs_space.shape == (h, w, 26) and info.groups["agent"].obs_space.dtype == np.uint8
        assert info.state_dim == 2 * h * w * 26 and info.episode_limit == 400


# --------------------------------------------------------------------------- Overcooked


def test_overcooked_obs_are_uint8_grids_truncated_at_max_steps(overcooked):
    gen = torch.Generator().manual_seed(0)
    s = overcooked.reset(seed=3)
    assert s.obs["agent"].shape == (B, 2, 4, 5, 26) and s.obs["agent"].dtype == torch.uint8
    assert torch.equal(s.state, s.obs["agent"].reshape(B, -1).float())
    assert s.avail_actions["agent"].all() and s.alive["agent"].all()
    for t in range(1, 7):
        s = overcooked.step(random_actions(s, gen))
        assert not s.terminated.any()
        assert bool(s.truncated.all()) == (t == 6)  # max_steps=6: every copy ends at step 6, a time-out
        assert torch.equal(s.reward["agent"][:, 0], s.reward["agent"][:, 1])  # one team reward
    # auto-reset: the next observation is a fresh start (step counter planes reset), the final one is not
    assert not torch.equal(s.final_obs["agent"], s.obs["agent"])


def test_overcooked_seeding_copy_b_is_copy_0_of_seed_plus_b(overcooked):
    a, b = overcooked.reset(seed=10), overcooked.reset(seed=11)
    assert torch.equal(a.obs["agent"][1], b.obs["agent"][0]) and torch.equal(a.obs["agent"][2], b.obs["agent"][1])
    assert torch.equal(overcooked.reset(seed=10).obs["agent"], a.obs["agent"])


def test_overcooked_shaped_reward_anneals_linearly():
    env = make_env("overcooked", "cramped_room", num_envs=B, shaped_reward=True, shaping_horizon=10 * B, max_steps=6)
    plain = make_env("overcooked", "cramped_room", num_envs=B, max_steps=6)
    assert env.shaping_weight() == 1.0 and plain.shaping_weight() == 0.0
    s, p = env.reset(seed=0), plain.reset(seed=0)
    gen = torch.Generator().manual_seed(1)
    diffs, saved_at_5 = [], None
    for t in range(12):
        acts = random_actions(s, gen)
        weight = env.shaping_weight()
        assert weight == pytest.approx(max(0.0, 1.0 - t / 10))  # 1 - env_steps / horizon, B steps per call
        if t == 5:
            saved_at_5 = env.get_state()
        s, p = env.step(acts), plain.step(acts)
        diffs.append((s.reward["agent"] - p.reward["agent"]) / max(weight, 1e-9) if weight else s.reward["agent"] * 0)
        if weight == 0:
            assert torch.equal(s.reward["agent"], p.reward["agent"])
    d = torch.stack(diffs)
    # JaxMARL's shaped rewards: 3 (onion in pot / plate picked up) or 5 (soup picked up) per cook and step
    assert torch.all(torch.isin(d.round(), torch.tensor([0.0, 3.0, 5.0])))
    # the anneal's clock is part of the saved state: a restored env pays the weight of the saved step
    env.set_state(saved_at_5)
    assert env.env_steps == 5 * B and env.shaping_weight() == pytest.approx(0.5)


def _soup_script() -> list:
    """Agent 0's moves in cramped_room: three onions into the pot, a plate, the soup (after the 20
    cooking steps), delivered at step 49 (JaxMARL's action ids)."""
    up, down, right, left, stay, use = range(6)
    onion = [left, left, use, right, up, use]  # from the pot's tile: fetch an onion, put it in the pot
    script = [left, use, right, up, use] + onion * 2 + [down, left, down, use, right, up, up] + [stay] * 20
    return script + [use, down, right, down, use]  # take the soup, walk to the serving tile, deliver


SOUP_SCRIPT = _soup_script()


def test_overcooked_soups_count_the_deliveries_of_the_episode():
    """A scripted cook (agent 0; agent 1 stays) in cramped_room: three onions into the pot, a plate,
    the soup (after the 20 cooking steps), delivered at step 49; episodes of 70 steps."""
    env = make_env("overcooked", "cramped_room", num_envs=2, seed=0, max_steps=70)
    script, stay = SOUP_SCRIPT, 4

    def episode(actions, saved_at=None):
        sparse, saved = torch.zeros(2), None
        for t, a in enumerate(actions + [stay] * (70 - len(actions))):
            s = env.step({"agent": torch.tensor([[a, stay]] * 2)})
            sparse += s.reward["agent"][:, 0]
            saved = env.get_state() if t == saved_at else saved
        assert s.truncated.all()
        return s.info["episode_metrics"]["soups"], sparse, saved

    env.reset(seed=0)
    soups, sparse, saved = episode(script, saved_at=60)
    assert soups.tolist() == [1.0, 1.0] and sparse.tolist() == [20.0, 20.0]  # one soup, 20 per cook
    assert episode([])[0].tolist() == [0.0, 0.0]  # the count restarts with the next episode
    env.set_state(saved)  # after the delivery: the restored episode still counts it
    soups_again = None
    for _ in range(9):
        soups_again = env.step({"agent": torch.full((2, 2), stay)}).info["episode_metrics"]["soups"]
    assert soups_again.tolist() == [1.0, 1.0]


# --------------------------------------------------------------------------- Hanabi


def test_hanabi_masks_one_player_acts_and_return_is_the_score(hanabi):
    marl.check_env(hanabi, steps=30, seed=2, verbose=False)
    gen = torch.Generator().manual_seed(0)
    s = hanabi.reset(seed=1)
    ret = torch.zeros(B)
    ended = []
    length = torch.zeros(B, dtype=torch.long)
    for _ in range(hanabi.info.episode_limit + 5):
        av = s.avail_actions["agent"]
        noop = av.shape[-1] - 1
        acting = av[..., :noop].any(-1)  # players with a real move
        assert torch.equal(acting.sum(-1), torch.ones(B, dtype=torch.long))  # exactly one player acts
        assert av[~acting][:, noop].all() and not av[acting][:, noop].any()  # the others: only the no-op
        s = hanabi.step(random_actions(s, gen))
        r = s.reward["agent"]
        assert torch.equal(r[:, 0], r[:, 1])
        ret += r[:, 0]
        length += 1
        assert not s.truncated.any()
        for b in torch.nonzero(s.terminated).flatten().tolist():
            score = float(s.info["episode_metrics"]["score"][b])
            assert score == ret[b] and 0 <= score <= 25 and length[b] <= hanabi.info.episode_limit
            ended.append(score)
        ret[s.done] = 0
        length[s.done] = 0
    assert len(ended) >= 1


# --------------------------------------------------------------------------- Coin Game


def test_coin_game_groups_rewards_and_meta_episode_length(coin):
    info = coin.info
    assert info.kind == "mixed" and list(info.groups) == ["agent_0", "agent_1"] and info.episode_limit == 6
    marl.check_env(coin, steps=20, seed=0, verbose=False)
    gen = torch.Generator().manual_seed(0)
    s = coin.reset(seed=0)
    assert s.obs["agent_0"].shape == (B, 1, 36) and set(s.obs["agent_0"].unique().tolist()) <= {0.0, 1.0}
    # agent_1 sees the board with the colours swapped (each agent thinks it is red)
    red, blue = s.obs["agent_0"].reshape(B, 3, 3, 4), s.obs["agent_1"].reshape(B, 3, 3, 4)
    assert torch.equal(red[..., [1, 0, 3, 2]], blue)
    for t in range(1, 7):
        s = coin.step(random_actions(s, gen))
        assert bool(s.truncated.all()) == (t == 6) and not s.terminated.any()
        for g in info.groups:  # payoffs [[1, 1, -2], [1, 1, -2]]: +1 per coin taken, -2 per own coin lost
            assert set(s.reward[g].flatten().tolist()) <= {-4.0, -2.0, -1.0, 0.0, 1.0, 2.0}
    rate = s.info["episode_metrics"]["own_coin_rate"]
    assert ((rate >= 0) & (rate <= 1)).all()


# --------------------------------------------------------------------------- STORM


def test_storm_dict_obs_uint8_grid_and_auto_reset(storm):
    info = storm.info
    space = info.groups["agent_0"].obs_space
    assert list(space.spaces) == ["inventory", "observation"] and space["observation"].shape == (5, 5, 16)
    assert info.episode_limit == 5 and info.kind == "mixed"
    s = storm.reset(seed=4)
    grid = s.obs["agent_0"]["observation"]
    assert grid.shape == (B, 1, 5, 5, 16) and grid.dtype == torch.uint8 and int(grid.max()) <= 1
    assert s.obs["agent_1"]["inventory"].shape == (B, 1, 5) and s.state.shape == (B, info.state_dim)
    # the cast to uint8 loses nothing: JaxMARL's float grids of copy 0 (its key: PRNGKey(4), first split)
    import jax

    raw, _ = storm.jaxmarl_env.reset(jax.random.split(jax.random.PRNGKey(4))[1])
    ours = torch.stack([s.obs[a]["observation"][0, 0] for a in info.agents]).numpy()
    assert np.array_equal(np.asarray(raw["observations"]), ours.astype(np.float32))
    gen = torch.Generator().manual_seed(0)
    for t in range(1, 6):
        s = storm.step(random_actions(s, gen))
        assert bool(s.truncated.all()) == (t == 5)
    assert torch.equal(storm.reset(seed=4).obs["agent_0"]["observation"], grid)


@pytest.mark.slow
@pytest.mark.parametrize("scenario, shape", [("storm_2p", (5, 5, 10)), ("storm_np", (5, 5, 14))])
def test_storm_variants(scenario, shape):
    env = make_env("storm", scenario, num_envs=2, seed=0)
    s = env.reset(seed=0)
    o = s.obs["agent_0"]
    grid = o["observation"] if isinstance(o, dict) else o
    assert grid.shape == (2, 1, *shape) and grid.dtype == torch.uint8 and env.info.episode_limit == 152
    s = env.step(random_actions(s, torch.Generator().manual_seed(0)))
    assert s.reward["agent_1"].shape == (2, 1)


@pytest.mark.slow
def test_mabrax_walker_continuous_team():
    pytest.importorskip("brax")
    env = make_env("mabrax", "walker2d_2x3", num_envs=2, seed=0)
    g = env.info.groups["agent"]
    assert g.n_agents == 2 and g.action_space.shape == (3,) and env.info.episode_limit == 1000
    s = env.reset(seed=0)
    s = env.step({"agent": torch.zeros(2, 2, 3)})
    assert s.obs["agent"].shape == (2, 2, g.obs_space.shape[0]) and torch.isfinite(s.state).all()
