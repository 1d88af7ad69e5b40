"""Melting Pot adapter (envs/meltingpot.py): spaces, shapes and dtypes per key, the observations against the
substrate itself, rgb_scale, the state, auto-reset, truncation and termination, seeding, masks, episode
metrics, and the scenario error. Skipped when dm-meltingpot or dmlab2d is missing.

Coins (2 players, the cheapest substrate) carries most checks; building one copy takes about a second.
The ``check_env`` and ``fit`` tests run once marl accepts Dict observations (``marl.env.obs_leaves``).
"""

import importlib.util

import numpy as np
import pytest
import torch

import marl

if importlib.util.find_spec("meltingpot") is None or importlib.util.find_spec("dmlab2d") is None:
    pytest.skip("dm-meltingpot / dmlab2d are not installed", allow_module_level=True)

from marl.envs import meltingpot as mp  # noqa: E402

from marl.env import MarlError, make_env  # noqa: E402

B = 2
COINS_PLAYERS, COINS_ACTIONS = 2, 7
DICT_OBS = hasattr(marl.env, "obs_leaves")  # the library accepts Dict observations (issue 30, item 1)
needs_dict_obs = pytest.mark.skipif(not DICT_OBS, reason="marl does not accept Dict observations yet")


def acts(env, seed):
    """``T`` fixed random joint actions, the same for every env they are applied to."""
    gen = torch.Generator().manual_seed(seed)
    return [
        {
            g: torch.randint(0, gi.n_actions, (env.num_envs, gi.n_agents), generator=gen)
            for g, gi in env.info.groups.items()
        }
        for _ in range(12)
    ]


@pytest.fixture(scope="module")
def coins():
    env = make_env("meltingpot", "coins", num_envs=B, seed=3)
    yield env
    env.close()


def test_info_spaces_and_shapes_per_key(coins):
    info = coins.info
    assert (info.family, info.kind, info.shared_reward, info.num_envs) == ("meltingpot", "mixed", False, B)
    assert list(info.groups) == ["player"] and info.groups["player"].agents == ["player_0", "player_1"]
    space = info.groups["player"].obs_space
    assert list(space.spaces) == ["MISMATCHED_COIN_COLLECTED_BY_PARTNER", "RGB"]
    assert space["RGB"].shape == (88, 88, 3) and space["RGB"].dtype == np.uint8
    assert space["MISMATCHED_COIN_COLLECTED_BY_PARTNER"].shape == (1,)
    assert info.groups["player"].action_space.n == COINS_ACTIONS
    # WORLD.RGB of coins is 136 x 136: 17 x 17 sprite cells of 3 colours, then one vector key per player
    assert info.state_dim == 17 * 17 * 3 + COINS_PLAYERS
    assert info.episode_limit == 5000  # coins' maxEpisodeLengthFrames
    step = coins.reset(seed=3)
    obs = step.obs["player"]
    assert list(obs) == list(space.spaces)  # the Dict space's key order
    assert obs["RGB"].shape == (B, 2, 88, 88, 3) and obs["RGB"].dtype == torch.uint8
    assert obs["MISMATCHED_COIN_COLLECTED_BY_PARTNER"].shape == (B, 2, 1)
    assert obs["MISMATCHED_COIN_COLLECTED_BY_PARTNER"].dtype == torch.float32
    assert step.state.shape == (B, info.state_dim) and step.state.dtype == torch.float32
    assert step.avail_actions["player"].shape == (B, 2, COINS_ACTIONS) and bool(step.avail_actions["player"].all())
    assert step.alive["player"].all() and step.reward["player"].shape == (B, 2)
    assert not step.done.any()


def record(env, copy=0):
    """Make copy ``copy`` of ``env`` keep every timestep its substrate returns (``reset`` then ``step``s)."""
    seen, sub = [], env._envs[copy]
    reset, step = sub.reset, sub.step

    def keep(fn):
        def call(*args, **kwargs):
            ts = fn(*args, **kwargs)
            seen.append(ts)
            return ts

        return call

    sub.reset, sub.step = keep(reset), keep(step)
    return seen


def test_observations_rewards_and_state_are_the_substrates(coins):
    """What the adapter returns for copy 0 against the timesteps its substrate returned."""
    coins.reset(seed=11)
    seen = record(coins)
    plan = acts(coins, 0)
    for a in plan:
        step = coins.step(a)
        ts = seen[-1]
        for i in range(COINS_PLAYERS):
            np.testing.assert_array_equal(step.obs["player"]["RGB"][0, i].numpy(), ts.observation[i]["RGB"])
        world = mp.pool(ts.observation[0]["WORLD.RGB"], 8).reshape(-1) / 255
        np.testing.assert_allclose(step.state[0, : world.size].numpy(), world, rtol=1e-6)
        mismatched = [ts.observation[i]["MISMATCHED_COIN_COLLECTED_BY_PARTNER"] for i in range(COINS_PLAYERS)]
        np.testing.assert_array_equal(step.state[0, world.size :].numpy(), np.asarray(mismatched, np.float32))
        np.testing.assert_array_equal(step.reward["player"][0].numpy(), np.asarray(ts.reward, np.float32))
    assert len(seen) == len(plan)


def test_seeds_follow_seed_plus_copy(monkeypatch):
    """reset(seed) rebuilds copy b from seed + b; reset() keeps the substrates; copies differ."""
    env = make_env("meltingpot", "coins", num_envs=B, seed=None)
    built, build = [], env._build

    def spy(seed):
        built.append(seed)
        return build(seed)

    monkeypatch.setattr(env, "_build", spy)
    first = env.reset(seed=5)
    assert built == [5, 6]
    env.reset()
    assert built == [5, 6]  # no seed: reset in place
    env.reset(seed=5)
    assert built == [5, 6, 5, 6]  # a seed after the first reset: rebuilt
    assert not torch.equal(first.obs["player"]["RGB"][0], first.obs["player"]["RGB"][1])
    env.close()


def test_rgb_scale_averages_blocks_and_state_vectors():
    small = make_env("meltingpot", "coins", num_envs=1, seed=2, rgb_scale=8, state="vectors")
    assert small.info.groups["player"].obs_space["RGB"].shape == (11, 11, 3)
    assert small.info.state_dim == COINS_PLAYERS  # the players' vector keys only
    seen = record(small)
    step = small.reset()
    for a in acts(small, 2)[:4]:
        raw = seen[-1].observation
        want = np.stack([np.rint(mp.pool(raw[i]["RGB"], 8)).astype(np.uint8) for i in range(COINS_PLAYERS)])
        np.testing.assert_array_equal(step.obs["player"]["RGB"][0].numpy(), want)
        mismatched = [raw[i]["MISMATCHED_COIN_COLLECTED_BY_PARTNER"] for i in range(COINS_PLAYERS)]
        np.testing.assert_array_equal(step.state[0].numpy(), np.asarray(mismatched, np.float32))
        step = small.step(a)
    small.close()


def test_truncation_auto_reset_and_episode_metrics():
    env = make_env("meltingpot", "coins", num_envs=B, seed=4, max_steps=6)
    assert env.info.episode_limit == 6
    step, total = env.reset(), torch.zeros(B)
    for t, a in enumerate(acts(env, 3)[:6]):
        step = env.step(a)
        total += step.reward["player"].sum(-1)
        if t < 5:
            assert not step.done.any()
            assert step.final_obs["player"]["RGB"] is step.obs["player"]["RGB"]
    assert step.truncated.all() and not step.terminated.any()
    assert not torch.equal(step.final_obs["player"]["RGB"], step.obs["player"]["RGB"])  # a new episode
    metrics = step.info["episode_metrics"]
    torch.testing.assert_close(metrics["per_capita_return"], total / COINS_PLAYERS)
    assert "events_coin_consumed" in metrics
    assert (metrics["events_AvatarStarted"] == COINS_PLAYERS).all()  # every avatar starts once per episode
    after = env.step(acts(env, 4)[0])
    assert (after.info["episode_metrics"]["events_AvatarStarted"] == COINS_PLAYERS).all()  # counts restarted
    env.close()


def test_the_substrates_own_end_is_a_termination(coins, monkeypatch):
    import dm_env

    step = coins.reset(seed=8)
    real = coins._envs[1].step

    def last(actions):
        ts = real(actions)
        return dm_env.termination(ts.reward, ts.observation)

    monkeypatch.setattr(coins._envs[1], "step", last)
    step = coins.step(acts(coins, 5)[0])
    assert step.terminated.tolist() == [False, True] and not step.truncated.any()
    assert coins._steps.tolist() == [1, 0]  # copy 1 restarted


@pytest.mark.parametrize("name", mp.SOCIAL_DILEMMAS)
def test_each_social_dilemma_builds_and_steps(name):
    env = make_env("meltingpot", name, num_envs=1, rgb_scale=8)
    n = len(env.info.agents)
    assert n == {"coins": 2, "prisoners_dilemma_in_the_matrix__arena": 8, "stag_hunt_in_the_matrix__arena": 8}.get(
        name, 7
    )
    step = env.reset()
    for a in acts(env, 6)[:3]:
        step = env.step(a)
    for g, gi in env.info.groups.items():
        for k, box in gi.obs_space.spaces.items():
            assert step.obs[g][k].shape == (1, gi.n_agents, *box.shape)
    assert "WORLD.RGB" not in env.info.groups["player"].obs_space.spaces
    assert set(step.info["episode_metrics"]) >= {"per_capita_return"}
    env.close()


def test_scenario_names_the_missing_saved_models():
    bots = mp.meltingpot_module("configs.bots")
    with pytest.raises(MarlError) as e:
        make_env("meltingpot", "commons_harvest__open_0")
    msg = str(e.value)
    assert "scenario" in msg and bots.MODELS_ROOT in msg and "make_env('meltingpot', 'commons_harvest__open')" in msg
    assert "commons_harvest__open/" in msg  # a missing model folder, named


def test_listing_and_registration():
    assert set(mp.SOCIAL_DILEMMAS) <= set(marl.env.scenarios_of("meltingpot"))
    assert "meltingpot" in marl.list_envs()


@needs_dict_obs
def test_check_env_passes():
    env = make_env("meltingpot", "coins", num_envs=B, rgb_scale=8, max_steps=8)
    marl.check_env(env, steps=20, seed=0)
    env.close()


@needs_dict_obs
def test_ippo_fits_one_iteration(ray_session, run_dir):
    env = make_env("meltingpot", "coins", num_envs=B, rgb_scale=8, max_steps=16)
    result = env.fit(
        "ippo",
        stop={"iterations": 1},
        rollout_length=16,
        epochs=1,
        eval_episodes=0,
        num_env_runners=0,
        checkpoint_every=0,
        progress=False,
        log_dir=run_dir,
    )
    assert result.metrics["env_steps"] == B * 16
