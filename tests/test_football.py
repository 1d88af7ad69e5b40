"""Google Research Football adapter (envs/football.py).

CI has no gfootball (its C++ engine needs Debian build packages CI does not install), so most tests
run the adapter against a small fake ``gfootball`` package injected through ``sys.modules``: the same
module layout, ``FootballEnv`` API (raw observation dicts, the gym < 0.26 four-value step) and
helper functions as gfootball 2.10.2, with a one-dimensional game (the ball carrier runs right and
shoots; a shot from x >= 0.8 scores, an earlier one loses the ball). The tests on the real engine
skip where gfootball does not import.
"""

import importlib.util
import itertools
import sys
import types

import numpy as np
import pytest
import torch
from marl.envs import football as adapter

from marl.env import EpisodeStats, MarlError, check_env, make_env

DURATION = 6  # the fake's game_duration (gfootball's academy scenarios: 400)
RIGHT, SHOT, IDLE = adapter.ACTIONS.index("right"), adapter.ACTIONS.index("shot"), adapter.ACTIONS.index("idle")
HAS_GFOOTBALL = importlib.util.find_spec("gfootball") is not None
# uniformly random play on the real academy_empty_goal_close: 15 of 100 episodes won (seed 0, measured
# with gfootball 2.10.2 built here); the learning check's budget and bar (see its docstring)
RANDOM_GOAL_RATE = 0.15
LEARN_STEPS, LEARN_BAR = 20_000, 0.35


class FakeConfig:
    """gfootball.env.config.Config: values by key, ``update``."""

    def __init__(self, values):
        self._values = dict(values)

    def __getitem__(self, key):
        return self._values[key]

    def update(self, values):
        self._values.update(values)


class FakeFootballEnv:
    """gfootball.env.football_env.FootballEnv over a one-dimensional game.

    ``players=["agent:left_players=n,..."]``: ``n`` agents. The ball carrier (left player 1, agent 0's
    active player) moves +0.1 on RIGHT; SHOT scores from x >= 0.8, else the keeper wins the ball
    (possession change: the episode ends without a goal). The game also ends after DURATION steps.
    Each reset records the engine seed it reads from the config in ``seeds``.
    """

    created = []

    def __init__(self, config):
        self._config = config
        self.n = int(config["players"][0].split("left_players=")[1].split(",")[0])
        self.seeds = []
        self.closed = False
        FakeFootballEnv.created.append(self)

    def reset(self):
        self.seeds.append((self._config["game_engine_random_seed"], self._config["reverse_team_processing"]))
        self.x, self.t, self.score, self.owner = 0.5, 0, [0, 0], 0
        return self.observation()

    def observation(self):
        obs = []
        for i in range(self.n):
            obs.append(
                {
                    "left_team": np.array([[-1.0, 0.0], [self.x, 0.0]] + [[0.0, 0.1 * k] for k in range(self.n - 1)]),
                    "left_team_direction": np.zeros((self.n + 1, 2)),
                    "right_team": np.array([[1.0, 0.0]]),
                    "right_team_direction": np.zeros((1, 2)),
                    "ball": np.array([self.x, 0.0, 0.1]),
                    "ball_direction": np.zeros(3),
                    "ball_owned_team": self.owner,
                    "ball_owned_player": 1,
                    "active": 1 + i,
                    "game_mode": 0,
                    "score": list(self.score),
                    "steps_left": DURATION - self.t,
                }
            )
        return obs

    def step(self, action):
        assert len(action) == self.n and self.t < DURATION
        self.t += 1
        done, r = False, 0
        if action[0] == RIGHT:
            self.x = round(self.x + 0.1, 6)
        elif action[0] == SHOT:
            done = True
            if self.x >= 0.8:
                self.score[0], r = 1, 1
            else:
                self.owner = 1
        done = done or self.t >= DURATION
        return self.observation(), np.array([r] * self.n, np.float32), done, {"score_reward": r}

    def close(self):
        self.closed = True


def fake_simple115(observation, fixed_positions):
    """Simple115StateWrapper.convert_observation's layout: 88 team values, ball (3 + 3), owner one-hot,
    active one-hot (11, from index 97), game mode one-hot (7)."""
    out = np.zeros((len(observation), 115), np.float32)
    for i, o in enumerate(observation):
        out[i, 88:91] = o["ball"]
        out[i, 94 + o["ball_owned_team"] + 1] = 1
        if o["active"] != -1:
            out[i, 97 + o["active"]] = 1
        out[i, 108 + o["game_mode"]] = 1
    return out


def fake_smm(observation, config=None, channel_dimensions=(96, 72)):
    """generate_smm: [N, 72, 96, 4] uint8, here only the ball plane (255 at the ball)."""
    frame = np.zeros((len(observation), 72, 96, 4), np.uint8)
    for i, o in enumerate(observation):
        frame[i, 36, int((o["ball"][0] + 1) / 2 * 95), 2] = 255
    return frame


class FakeCheckpoints:
    """CheckpointRewardWrapper: +0.1 per agent for each ring (here: every 0.1 of ball x past 0.5) first
    reached with the ball, the ten remaining ones at once on a goal."""

    def __init__(self, env):
        self.env = env
        self._collected_checkpoints = {}

    def reward(self, reward):
        for i in range(len(reward)):
            have = self._collected_checkpoints.get(i, 0)
            if reward[i] == 1:
                reward[i] += 0.1 * (10 - have)
                self._collected_checkpoints[i] = 10
                continue
            reached = int(round((self.env.x - 0.5) * 10)) if i == 0 else 0
            if reached > have:
                reward[i] += 0.1 * (reached - have)
                self._collected_checkpoints[i] = reached
        return reward


@pytest.fixture
def fake_gfootball(monkeypatch):
    """A fake gfootball importable (replacing the real one, if any, for this test)."""
    FakeFootballEnv.created = []
    names = ["gfootball", "gfootball.env"]
    mods = {n: types.ModuleType(n) for n in names}
    leaves = {
        "config": {"Config": FakeConfig},
        "football_env": {"FootballEnv": FakeFootballEnv},
        "wrappers": {
            "Simple115StateWrapper": type(
                "Simple115StateWrapper", (), {"convert_observation": staticmethod(fake_simple115)}
            ),
            "CheckpointRewardWrapper": FakeCheckpoints,
        },
        "observation_preprocessing": {"generate_smm": fake_smm},
    }
    for leaf, attrs in leaves.items():
        m = types.ModuleType(f"gfootball.env.{leaf}")
        for k, v in attrs.items():
            setattr(m, k, v)
        mods[m.__name__] = m
        setattr(mods["gfootball.env"], leaf, m)
    mods["gfootball"].env = mods["gfootball.env"]
    for n, m in mods.items():
        monkeypatch.setitem(sys.modules, n, m)


def actions(env, a):
    """``[B, n]`` actions: agent 0 plays ``a[b]`` in copy ``b``, the others idle."""
    B, n = env.num_envs, env.info.groups["left"].n_agents
    out = torch.full((B, n), IDLE, dtype=torch.int64)
    out[:, 0] = torch.as_tensor(a)
    return {"left": out}


# --------------------------------------------------------------------------- no gfootball


def test_missing_gfootball_says_why_and_how_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "gfootball", None)  # import gfootball -> ImportError
    with pytest.raises(MarlError) as e:
        make_env("football", "academy_empty_goal_close")
    msg = str(e.value)
    assert "could not be imported" in msg and "compiled game engine" in msg
    for w in ['pip install "marl-rllib[football]"', "apt-get install", "libboost-all-dev", "libsdl2-gfx-dev", "cmake"]:
        assert w in msg, (w, msg)


def test_scenarios_are_listed_without_gfootball(monkeypatch):
    monkeypatch.setitem(sys.modules, "gfootball", None)
    names = adapter.scenarios()
    assert len(names) == 12 and "academy_empty_goal_close" in names and "11_vs_11_easy_stochastic" in names
    assert sum(n.startswith("academy_") for n in names) == 11


# --------------------------------------------------------------------------- the contract, on the fake


@pytest.mark.parametrize("scenario, n", [("academy_empty_goal_close", 1), ("academy_3_vs_1_with_keeper", 3)])
def test_simple115v2_passes_check_env(fake_gfootball, scenario, n):
    env = make_env("football", scenario, num_envs=3)
    g = env.info.groups["left"]
    assert g.agents == [f"left_{i}" for i in range(n)] and g.n_actions == 19 and env.info.state_dim == 115
    assert env.info.shared_reward and env.info.episode_limit == 400
    check_env(env, steps=40, num_envs=3, verbose=False)
    step = env.reset(seed=1)
    assert step.obs["left"].shape == (3, n, 115) and step.obs["left"].dtype == torch.float32
    assert step.avail_actions["left"].shape == (3, n, 19) and bool(step.avail_actions["left"].all())


def test_extracted_is_the_uint8_minimap(fake_gfootball):
    env = make_env("football", "academy_empty_goal_close", num_envs=2, representation="extracted")
    space = env.info.groups["left"].obs_space
    assert space.shape == (72, 96, 4) and space.dtype == np.uint8
    step = env.reset(seed=0)
    assert step.obs["left"].shape == (2, 1, 72, 96, 4) and step.obs["left"].dtype == torch.uint8
    step = env.step(actions(env, [RIGHT, IDLE]))
    # ball x 0.6 in copy 0 (column int(1.6 / 2 * 95) = 76), 0.5 in copy 1 (column 71), on the ball plane
    assert step.obs["left"][0, 0, 36, 76, 2] == 255 and step.obs["left"][1, 0, 36, 71, 2] == 255
    assert int(step.obs["left"].sum()) == 2 * 255
    assert step.state.shape == (2, 115) and step.state.dtype == torch.float32


def check_images(env):
    """check_env on an image env; skipped while the core takes only 1-D observations (the structured
    observations of issue 30 are merged separately)."""
    try:
        check_env(env, steps=40, num_envs=env.num_envs, verbose=False)
    except MarlError as e:
        if "obs_space must be a 1-D Box" in str(e):
            pytest.skip("this marl core takes only 1-D observation spaces")
        raise


def test_extracted_passes_check_env(fake_gfootball):
    check_images(make_env("football", "academy_empty_goal_close", num_envs=2, representation="extracted"))


def test_state_is_the_game_without_the_active_player(fake_gfootball):
    env = make_env("football", "academy_3_vs_1_with_keeper", num_envs=1)
    step = env.reset(seed=0)
    obs, state = step.obs["left"][0], step.state[0]
    assert [int(obs[i, 97:108].argmax()) for i in range(3)] == [1, 2, 3]  # each agent's own active one-hot
    assert float(state[97:108].abs().sum()) == 0.0
    assert torch.equal(state[:97], obs[0, :97]) and torch.equal(state[108:], obs[0, 108:])


def test_goal_terminates_and_time_out_truncates(fake_gfootball):
    env = make_env("football", "academy_empty_goal_close", num_envs=3)
    env.reset(seed=0)
    stats = EpisodeStats(env.info)
    # copy 0 runs 3 steps and shoots from 0.8 (goal), copy 1 shoots from 0.5 (loses the ball),
    # copy 2 idles until the time limit
    plan = [[RIGHT, SHOT, IDLE]] + [[RIGHT, IDLE, IDLE]] * 2 + [[SHOT, IDLE, IDLE]] + [[IDLE] * 3] * 2
    ends = []
    for a in plan:
        step = env.step(actions(env, a))
        stats.update(step)
        ends.append((step.terminated.tolist(), step.truncated.tolist(), step.reward["left"][:, 0].tolist()))
    assert ends[0] == ([False, True, False], [False, False, False], [0.0, 0.0, 0.0])
    assert ends[3] == ([True, False, False], [False, False, False], [1.0, 0.0, 0.0])
    assert ends[5] == ([False, False, False], [False, False, True], [0.0, 0.0, 0.0])
    done = stats.pop()
    # episodes end in the order copy 1 (step 1), copy 0 (step 4), copy 2 (step 6)
    assert done["episode_length"] == [1.0, 4.0, 6.0]
    assert done["win_rate"] == [0.0, 1.0, 0.0] and done["goal_difference"] == [0.0, 1.0, 0.0]
    assert done["episode_return"] == [0.0, 1.0, 0.0]


def test_checkpoint_reward_is_per_agent(fake_gfootball):
    env = make_env("football", "academy_pass_and_shoot_with_keeper", rewards="scoring,checkpoints")
    assert not env.info.shared_reward
    env.reset(seed=0)
    got = [env.step(actions(env, [a])).reward["left"][0].tolist() for a in (RIGHT, RIGHT, RIGHT, SHOT)]
    want = [[0.1, 0.0], [0.1, 0.0], [0.1, 0.0], [1.7, 2.0]]  # goal: 1 + the rings each agent had not reached (7, 10)
    np.testing.assert_allclose(got, want, atol=1e-6)
    env.reset(seed=0)  # a new episode collects the rings again
    np.testing.assert_allclose(env.step(actions(env, [RIGHT])).reward["left"][0].tolist(), [0.1, 0.0], atol=1e-6)


def test_episode_seeds_are_reproducible_and_differ_between_copies(fake_gfootball):
    def seeds(seed, episodes=2):
        env = make_env("football", "academy_empty_goal_close", num_envs=2, seed=seed)
        env.reset()
        for _ in range(episodes - 1):
            env.reset()
        return [e.seeds for e in env._envs]

    a, b = seeds(3), seeds(3)
    assert a == b and a[0] != a[1] and a[0][0] != a[0][1] and seeds(4) != a
    for engine_seed, reverse in itertools.chain(*a):
        assert reverse == bool(engine_seed % 2)  # as gfootball's scenario builder derives it


def test_auto_reset_starts_the_next_episode_and_keeps_the_final_obs(fake_gfootball):
    env = make_env("football", "academy_empty_goal_close", num_envs=2)
    env.reset(seed=0)
    for a in ([RIGHT, IDLE],) * 3:
        env.step(actions(env, a))
    step = env.step(actions(env, [SHOT, IDLE]))
    assert step.terminated.tolist() == [True, False]
    assert float(step.final_obs["left"][0, 0, 88]) == pytest.approx(0.8)  # the ball where the goal was shot
    assert float(step.obs["left"][0, 0, 88]) == pytest.approx(0.5)  # the new kick-off
    assert torch.equal(step.final_obs["left"][1], step.obs["left"][1])


def test_close_releases_every_engine(fake_gfootball):
    env = make_env("football", "academy_corner", num_envs=2, number_of_left_players_agent_controls=4)
    assert env.info.groups["left"].n_agents == 4
    env.close()
    assert [e.closed for e in FakeFootballEnv.created] == [True, True]


# --------------------------------------------------------------------------- the real engine


real = pytest.mark.skipif(not HAS_GFOOTBALL, reason="gfootball is not installed (needs its C++ build, docs/envs.md)")


@real
@pytest.mark.parametrize("representation", ["simple115v2", "extracted"])
def test_real_engine_passes_check_env(representation):
    env = make_env("football", "academy_empty_goal_close", num_envs=2, representation=representation)
    if representation == "extracted":
        check_images(env)
    else:
        check_env(env, steps=60, num_envs=2, verbose=False)
    shape = (2, 1, 115) if representation == "simple115v2" else (2, 1, 72, 96, 4)
    assert tuple(env.reset(seed=0).obs["left"].shape) == shape
    env.close()


@real
def test_real_engine_scripted_run_and_shot_scores_random_play_rarely():
    """Running right and shooting scores on academy_empty_goal_close; random play mostly does not."""
    env = make_env("football", "academy_empty_goal_close", num_envs=1)
    env.reset(seed=0)
    step = None
    for t in range(60):
        step = env.step(actions(env, [SHOT if t >= 8 else RIGHT]))
        if step.done.any():
            break
    assert step is not None and step.terminated.tolist() == [True]
    assert step.reward["left"].tolist() == [[1.0]] and step.info["episode_metrics"]["win_rate"].tolist() == [1.0]
    env.close()


@real
@pytest.mark.slow
def test_ippo_learns_to_score_on_academy_empty_goal_close(ray_session, run_dir):
    """IPPO on academy_empty_goal_close (one agent with the ball before the goal): the training goal rate
    of the last 4000 of LEARN_STEPS env steps (the sampled policy; mean over those iterations) must
    reach LEARN_BAR, which uniform random play (RANDOM_GOAL_RATE) does not reach.

    Measured (seed 0, one run, 253 s on 2 shared cores): 0.12 over the first 4000 env steps, 0.59 over
    the last 4000. The greedy evaluation of that run scored in 0 of 50 episodes (mean length 152): the
    argmax action is not the shot, so the greedy player keeps the ball until it is lost; hence the
    sampled policy's rate is the measure here."""
    env = make_env("football", "academy_empty_goal_close", num_envs=4)
    res = env.fit("ippo", stop={"env_steps": LEARN_STEPS}, log_dir=run_dir, progress=False, eval_episodes=0, seed=0)
    late = [
        h["win_rate_mean"] for h in res.history if h.get("env_steps", 0) >= LEARN_STEPS - 4000 and "win_rate_mean" in h
    ]
    print("training goal rate over the last 4000 env steps:", np.mean(late), len(late))
    assert late and np.mean(late) >= LEARN_BAR > RANDOM_GOAL_RATE, late
