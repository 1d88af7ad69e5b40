"""Bad user envs (issue 29, item 1): each ends in a ``MarlError`` naming the rule, the env, the agent, the key
and the step, from ``check_env``, the adapters ``make_env`` uses, the runners' guard and evaluation.

The envs are small real PettingZoo ``ParallelEnv`` / ``AECEnv`` and Gymnasium classes (what users bring)
and ``MultiAgentEnv`` subclasses, each with one defect. The table runs in about two seconds without Ray;
the two ``fit`` tests at the end share the session's Ray (``ray_session``).
"""

from __future__ import annotations

import functools
import re

import gymnasium as gym
import numpy as np
import pytest
import torch
from pettingzoo import AECEnv, ParallelEnv

import marl
from marl.env.rules import RULES, EnvCastWarning, EnvRuleError
from marl.errors import MarlError
from marl.policy import run_episodes

AGENTS = ["a_0", "a_1"]
BOX = gym.spaces.Box(-10.0, 10.0, (3,), np.float32)


def obs_at(t, agent):
    """The observation of ``agent`` at episode step ``t``: a float32 ``[3]`` vector."""
    return np.full(3, 0.1 * t + (agent == "a_1"), np.float32)


# ------------------------------------------------------------------ user envs, one knob per defect
class Par(ParallelEnv):
    """A two-agent PettingZoo ParallelEnv (obs Box(3), Discrete(3) actions), episodes of ``limit`` steps.

    Knobs: ``obs(t, agent)`` the observation, ``mask(t, agent)`` an action mask in ``infos`` (or in the
    observation with ``mask_in_obs``), ``reward(t, agent)``, ``old_reset`` / ``old_step`` (the pre-2022
    API), ``limit=None`` (never ends)."""

    metadata = {"name": "bad_par"}

    def __init__(self, obs=obs_at, mask=None, reward=None, old_reset=False, old_step=False, limit=5, mask_in_obs=False):
        self.possible_agents = list(AGENTS)
        self.obs_fn, self.mask_fn, self.reward_fn = obs, mask, reward
        self.old_reset, self.old_step, self.limit, self.mask_in_obs = old_reset, old_step, limit, mask_in_obs
        self.t = 0

    def observation_space(self, agent):
        if self.mask_in_obs:
            return gym.spaces.Dict({"observation": BOX, "action_mask": gym.spaces.MultiBinary(3)})
        return BOX

    def action_space(self, agent):
        return gym.spaces.Discrete(3)

    def _obs(self):
        out = {}
        for a in self.agents:
            o = self.obs_fn(self.t, a)
            out[a] = {"observation": o, "action_mask": self.mask_fn(self.t, a)} if self.mask_in_obs else o
        return out

    def _infos(self):
        if self.mask_fn is None or self.mask_in_obs:
            return {a: {} for a in self.agents}
        return {a: {"action_mask": self.mask_fn(self.t, a)} for a in self.agents}

    def reset(self, seed=None, options=None):
        self.agents, self.t = list(AGENTS), 0
        return self._obs() if self.old_reset else (self._obs(), self._infos())

    def step(self, actions):
        self.t += 1
        rew = {a: (self.reward_fn(self.t, a) if self.reward_fn else 1.0) for a in self.agents}
        end = self.limit is not None and self.t >= self.limit
        obs, infos = self._obs(), self._infos()
        if self.old_step:
            return obs, rew, {a: end for a in self.agents}, infos
        term = {a: False for a in self.agents}
        trunc = {a: end for a in self.agents}
        if end:
            self.agents = []
        return obs, rew, term, trunc, infos


class Turns(AECEnv):
    """A two-player turn-based PettingZoo AECEnv (action mask in the observation), 4 moves per game;
    ``mask(t, agent)`` is the mover's mask at move ``t``, ``obs(t, agent)`` its observation."""

    metadata = {"name": "bad_turns"}

    def __init__(self, obs=obs_at, mask=lambda t, a: np.ones(3, np.int8)):
        self.possible_agents = list(AGENTS)
        self.obs_fn, self.mask_fn = obs, mask

    def observation_space(self, agent):
        return gym.spaces.Dict({"observation": BOX, "action_mask": gym.spaces.MultiBinary(3)})

    def action_space(self, agent):
        return gym.spaces.Discrete(3)

    def observe(self, agent):
        mover = agent == self.agent_selection
        mask = self.mask_fn(self.t, agent) if mover else np.zeros(3, np.int8)
        return {"observation": self.obs_fn(self.t, agent), "action_mask": mask}

    def reset(self, seed=None, options=None):
        self.agents, self.t = list(AGENTS), 0
        self.agent_selection = AGENTS[0]
        self.rewards = {a: 0.0 for a in AGENTS}
        self._cumulative_rewards = dict(self.rewards)
        self.terminations = {a: False for a in AGENTS}
        self.truncations = {a: False for a in AGENTS}
        self.infos = {a: {} for a in AGENTS}

    def step(self, action):
        agent = self.agent_selection
        if self.terminations[agent] or self.truncations[agent]:
            self._was_dead_step(action)
            return
        self.t += 1
        self.rewards = {a: 0.0 for a in self.agents}
        if self.t >= 4:
            self.terminations = {a: True for a in self.agents}
        self.agent_selection = AGENTS[self.t % 2]


class GymMA(gym.Env):
    """A two-agent Gymnasium env in EPyMARL's convention (Tuple spaces, a reward list); knobs as :class:`Par`
    (``obs(t, i)``, ``mask(t)`` rows in ``info["action_mask"]``, ``reward(t)`` the reward list)."""

    def __init__(
        self, obs=lambda t, i: obs_at(t, AGENTS[i]), mask=None, reward=None, old_reset=False, old_step=False, limit=5
    ):
        self.observation_space = gym.spaces.Tuple([BOX, BOX])
        self.action_space = gym.spaces.Tuple([gym.spaces.Discrete(3)] * 2)
        self.obs_fn, self.mask_fn, self.reward_fn = obs, mask, reward
        self.old_reset, self.old_step, self.limit = old_reset, old_step, limit
        self.t = 0

    def _obs(self):
        return tuple(self.obs_fn(self.t, i) for i in range(2))

    def _info(self):
        return {} if self.mask_fn is None else {"action_mask": self.mask_fn(self.t)}

    def reset(self, seed=None, options=None):
        self.t = 0
        return self._obs() if self.old_reset else (self._obs(), self._info())

    def step(self, actions):
        self.t += 1
        rew = self.reward_fn(self.t) if self.reward_fn else [1.0, 1.0]
        end = self.limit is not None and self.t >= self.limit
        if self.old_step:
            return self._obs(), rew, end, self._info()
        return self._obs(), rew, False, end, self._info()


class Own(marl.env.MultiAgentEnv):
    """A user's own batched env on the step_env / reset_rows template: agents agent_0, agent_1 (group
    "agent", obs Box(3), Discrete(3)), B=2 copies out of step (copy 1 one step ahead), episodes of 5 steps;
    ``edit(step, n)`` is applied to the ``n``-th Step it returns (0: the reset): its one defect."""

    def __init__(self, edit=lambda s, n: None, limit=5, length=5):
        box = gym.spaces.Box(-10.0, 10.0, (3,), np.float32)
        agents = ["agent_0", "agent_1"]
        group = marl.env.GroupInfo("agent", agents, box, gym.spaces.Discrete(3))
        self.info = marl.env.EnvInfo(
            "own", "count", agents, {"agent": group}, state_dim=6, episode_limit=limit, num_envs=2
        )
        self.edit, self.n, self.t, self.length = edit, 0, torch.tensor([0, 1]), length

    def _observation(self):
        obs = (self.t.float() / 10)[:, None, None].expand(2, 2, 3).clone()
        ones = torch.ones(2, 2, dtype=torch.bool)
        return marl.env.Observation(
            {"agent": obs}, obs.reshape(2, -1), {"agent": torch.ones(2, 2, 3, dtype=torch.bool)}, {"agent": ones}
        )

    def reset(self, seed=None):
        self.n, self.t = 0, torch.tensor([0, 1])
        no = torch.zeros(2, dtype=torch.bool)
        s = marl.env.Step(
            *self._observation(), reward={"agent": torch.zeros(2, 2)}, terminated=no, truncated=no.clone()
        )
        s.final_obs, s.final_state = dict(s.obs), s.state
        self.edit(s, 0)
        return s

    def step(self, actions):
        s = super().step(actions)
        self.n += 1
        self.edit(s, self.n)
        return s

    def step_env(self, actions):
        self.t += 1
        no = torch.zeros(2, dtype=torch.bool)
        return marl.env.Step(
            *self._observation(), reward={"agent": torch.ones(2, 2)}, terminated=no, truncated=self.t >= 5
        )

    def reset_rows(self, rows):
        self.t[rows] = 0
        return self._observation()


def from_step(n, fn):
    """An edit applied from the ``n``-th Step on."""
    return lambda s, i: fn(s) if i >= n else None


def grow(s):
    s.obs = {"agent": torch.cat([s.obs["agent"], torch.zeros(2, 2, 1)], -1)}


class ResetsEveryRow(Own):
    """reset_rows restarts every copy, not only the ended ones."""

    def reset_rows(self, rows):
        self.t[:] = 0
        return self._observation()


class RandomPolicy:
    """Uniformly random legal actions: the evaluation loop's player (evaluation needs no trained net here)."""

    def __init__(self, env):
        self.env = env

    def reset(self):
        pass

    def act(self, step):
        return self.env.random_actions(step)


def evaluate(env, episodes=2):
    return run_episodes(env, RandomPolicy(env), episodes)


def zero_mask_from(t0, agent="a_1"):
    return lambda t, a: np.zeros(3, np.int8) if (t >= t0 and a == agent) else np.ones(3, np.int8)


def const(value):
    return lambda t, a: value


check = functools.partial(marl.check_env, steps=12, verbose=False)
P, AEC, G = "pettingzoo:bad_par", "pettingzoo:bad_turns", "gymnasium:GymMA"

# (case, class, run, rule, fragments of the message)
CASES = [
    # --- observations whose shape differs from the declared space, or changes mid-episode
    (
        "pz obs shape at reset",
        "obs shape",
        lambda: check(Par(obs=const(np.zeros(4, np.float32)))),
        "obs_space",
        [P, "at reset", "agent 'a_0'", "key 'obs'", "has 4 values", "Box(-10.0, 10.0, (3,)"],
    ),
    (
        "pz obs grows at step 3",
        "obs shape",
        lambda: check(Par(obs=lambda t, a: np.zeros(3 + (t >= 3), np.float32))),
        "obs_space",
        [P, "at step 3", "agent 'a_0'", "key 'obs'", "has 4 values"],
    ),
    (
        "pz obs shrinks for one agent",
        "obs shape",
        lambda: check(Par(obs=lambda t, a: np.zeros(2 if (a == "a_1" and t == 2) else 3, np.float32))),
        "obs_space",
        [P, "at step 2", "agent 'a_1'", "key 'obs'", "has 2 values"],
    ),
    (
        "pz obs is None",
        "dtype",
        lambda: check(Par(mask=const(np.ones(3)), mask_in_obs=True, obs=const(None))),
        "obs_dtype",
        [P, "at reset", "agent 'a_0'", "key 'obs'", "dtype object is not a real number"],
    ),
    (
        "aec obs grows at move 2",
        "obs shape",
        lambda: check(Turns(obs=lambda t, a: np.zeros(3 + (t >= 2), np.float32))),
        "obs_space",
        [AEC, "at step 2", "key 'obs'", "has 4 values"],
    ),
    (
        "gym obs shape at reset",
        "obs shape",
        lambda: check(GymMA(obs=lambda t, i: np.zeros(5 if i else 3, np.float32))),
        "obs_space",
        [G, "at reset", "agent 'agent_1'", "key 'obs'", "has 5 values"],
    ),
    (
        "gym obs tuple of one agent",
        "obs shape",
        lambda: check(GymMA_one_obs()),
        "obs_space",
        [G, "at step 1", "key 'obs'", "expected a tuple of 2 observations"],
    ),
    (
        "own env obs grows at step 2",
        "obs shape",
        lambda: check(Own(from_step(2, grow))),
        "obs_shape",
        ["own:count", "at step 2", "'agent_0', 'agent_1'", "key 'obs'", "(2, 2, 4) differs from (2, 2, 3)"],
    ),
    (
        "own env state shrinks at reset",
        "obs shape",
        lambda: check(Own(from_step(0, lambda s: setattr(s, "state", s.state[:, :5])))),
        "state_shape",
        ["own:count", "at reset", "key 'state'", "(2, 5) differs from (2, 6)"],
    ),
    # --- dtypes that cannot be cast to float32
    (
        "pz complex obs",
        "dtype",
        lambda: check(Par(obs=const(np.ones(3, np.complex64)))),
        "obs_dtype",
        [P, "at reset", "agent 'a_0'", "key 'obs'", "complex64 is not a real number"],
    ),
    (
        "pz float64 beyond float32",
        "dtype",
        lambda: check(Par(obs=lambda t, a: np.full(3, 1e300 if t == 2 else 0.0))),
        "obs_dtype",
        [P, "at step 2", "agent 'a_0'", "key 'obs'", "1e+300 lies beyond float32's range"],
    ),
    (
        "gym string obs",
        "dtype",
        lambda: check(GymMA(obs=lambda t, i: np.array(["a", "b", "c"]))),
        "obs_dtype",
        [G, "at reset", "agent 'agent_0'", "key 'obs'", "is not a real number"],
    ),
    (
        "own env complex obs",
        "dtype",
        lambda: check(Own(from_step(1, lambda s: s.obs.__setitem__("agent", s.obs["agent"].to(torch.complex64))))),
        "obs_dtype",
        ["own:count", "at step 1", "key 'obs'", "complex64 cannot be read as torch.float32"],
    ),
    (
        "own env float mask",
        "dtype",
        lambda: check(
            Own(from_step(0, lambda s: s.avail_actions.__setitem__("agent", s.avail_actions["agent"].float())))
        ),
        "bool_dtype",
        ["own:count", "at reset", "key 'avail_actions'", "float32 cannot be read as torch.bool"],
    ),
    # --- the old PettingZoo / Gymnasium APIs
    (
        "pz reset returns only obs",
        "old API",
        lambda: check(Par(old_reset=True)),
        "reset_api",
        [P, "at reset", "env copy 0", "key 'reset'", "returned dict", "(observations, infos)"],
    ),
    (
        "pz step returns 4 values",
        "old API",
        lambda: check(Par(old_step=True)),
        "step_api",
        [P, "at step 1", "env copy 0", "key 'step'", "a tuple of 4", "four values with one done"],
    ),
    (
        "gym reset returns only obs",
        "old API",
        lambda: check(GymMA(old_reset=True)),
        "reset_api",
        [G, "at reset", "key 'reset'", "returned a tuple of 2", "(observations, infos)"],
    ),
    (
        "gym step returns 4 values",
        "old API",
        lambda: check(GymMA(old_step=True)),
        "step_api",
        [G, "at step 1", "key 'step'", "a tuple of 4"],
    ),
    # --- no legal action for a live agent
    (
        "pz mask in info all zero at step 2",
        "no legal action",
        lambda: check(Par(mask=zero_mask_from(2))),
        "no_legal_action",
        [P, "at step 2", "agent 'a_1'", "key 'avail_actions'", "all zero"],
    ),
    (
        "pz mask in obs all zero at reset",
        "no legal action",
        lambda: check(Par(mask=zero_mask_from(0, "a_0"), mask_in_obs=True)),
        "no_legal_action",
        [P, "at reset", "agent 'a_0'", "key 'avail_actions'"],
    ),
    (
        "aec mover has no legal move",
        "no legal action",
        lambda: check(Turns(mask=zero_mask_from(1, "a_1"))),
        "no_legal_action",
        [AEC, "at step 2", "agent 'a_1'", "key 'avail_actions'", "this agent's turn"],
    ),
    (
        "gym mask all zero for one agent",
        "no legal action",
        lambda: check(GymMA(mask=lambda t: [np.ones(3), np.zeros(3) if t >= 1 else np.ones(3)])),
        "no_legal_action",
        [G, "at step 1", "agent 'agent_1'", "key 'avail_actions'", "no legal action"],
    ),
    (
        "own env mask all False",
        "no legal action",
        lambda: check(Own(from_step(3, lambda s: s.avail_actions["agent"][1, 0].fill_(False)))),
        "no_legal_action",
        ["own:count", "at step 3", "env copy 1", "agent 'agent_0'", "key 'avail_actions'"],
    ),
    # --- episodes that never end during evaluation
    (
        "pz never ends, no limit",
        "never ends",
        lambda: evaluate(marl.make_env(Par(limit=None), num_envs=2)),
        "episode_ends",
        [P, "key 'episode_limit'", "only 0 of 2 episodes ended", "episode_limit = 0", "episode_limit=T"],
    ),
    (
        "gym never ends, no episode_limit",
        "never ends",
        lambda: evaluate(marl.make_env(GymMA(limit=None), num_envs=1)),
        "episode_ends",
        [G, "key 'episode_limit'", "only 0 of 2 episodes", "episode_limit=50)"],
    ),
    (
        "own env declares a limit, never ends",
        "never ends",
        lambda: evaluate(Own(lambda s, i: s.truncated.fill_(False)), episodes=3),
        "episode_ends",
        ["own:count", "info.episode_limit = 5", "only 0 of 3 episodes ended"],
    ),
    (
        "check_env: episode past its limit",
        "never ends",
        lambda: check(Own(limit=3)),
        "episode_limit",
        ["own:count", "at step 4", "row 0 has run 4 steps without ending", "info.episode_limit = 3"],
    ),
    # --- rewards the adapters cannot read as one number per agent
    (
        "pz reward is a vector",
        "reward shape",
        lambda: check(Par(reward=lambda t, a: np.ones(2))),
        "reward_space",
        [P, "at step 1", "agent 'a_0'", "key 'reward'", "not one number"],
    ),
    (
        "gym three rewards for two agents",
        "reward shape",
        lambda: check(GymMA(reward=lambda t: [1.0, 1.0, 1.0])),
        "reward_space",
        [G, "at step 1", "key 'reward'", "3 rewards for 2 agents"],
    ),
    (
        "own env reward [B, N, 1]",
        "reward shape",
        lambda: check(Own(from_step(1, lambda s: s.reward.__setitem__("agent", s.reward["agent"][..., None])))),
        "reward_shape",
        ["own:count", "at step 1", "key 'reward'", "(2, 2, 1) differs from (2, 2)"],
    ),
    # --- check_env names the rule (once all "final_state differs from state")
    (
        "reset_rows restarts live rows",
        "check_env rule",
        lambda: check(ResetsEveryRow()),
        "reset_rows_keeps_others",
        [
            "own:count",
            "at step 4",
            "env copy 0",
            "key 'state'",
            "reset_rows(rows=[False, True]) changed the state of row 0",
        ],
    ),
    (
        "step sets a stale final_state",
        "check_env rule",
        lambda: check(Own(from_step(1, lambda s: setattr(s, "final_state", s.state - 1)))),
        "final_matches",
        ["own:count", "at step 1", "final_state differs from state in row 0"],
    ),
    (
        "not an env",
        "check_env rule",
        lambda: check({"a_0": BOX}),
        "env_type",
        ["expected a marl MultiAgentEnv, a PettingZoo env", "got dict"],
    ),
]


def GymMA_one_obs():  # noqa: N802 - a constructor, named as the class it builds
    """A GymMA whose step returns one observation instead of a tuple of two."""
    env = GymMA()
    real = env.step
    env.step = lambda a: (obs_at(1, "a_0"),) + real(a)[1:]
    return env


@pytest.mark.parametrize("case, cls, run, rule, fragments", CASES, ids=[c[0] for c in CASES])
def test_bad_env_names_rule_env_agent_key_step(case, cls, run, rule, fragments):
    with pytest.raises(MarlError) as e:
        run()
    assert isinstance(e.value, EnvRuleError) and e.value.rule == rule, str(e.value)
    msg = str(e.value)
    assert msg.startswith(f"[rule {rule}]") and RULES[rule] in msg, msg
    for f in fragments:
        assert f in msg, f"{f!r} not in {msg!r}"


def test_table_size_and_classes():
    """At least 20 distinct bad envs, every class of issue 29 item 1 present."""
    classes = {c[1] for c in CASES}
    assert len(CASES) >= 20 and len({c[0] for c in CASES}) == len(CASES)
    assert {
        "obs shape",
        "dtype",
        "old API",
        "no legal action",
        "never ends",
        "reward shape",
        "check_env rule",
    } <= classes


# ------------------------------------------------------------------ what passes, and what is cast
def test_raw_envs_pass_check_env_with_a_summary(capsys):
    for env, name in ((Par(), P), (Turns(), AEC), (GymMA(), G)):
        text = marl.check_env(env, steps=12)
        assert capsys.readouterr().out.strip() == text
        assert text.startswith(f"check_env: {name} passed (12 steps of ") and "episode limit:" in text
        assert "cast: nothing" in text and "avail_actions:" in text and "state: 6 values" in text
    assert "group 'a' (team 'team'): 2 agents ['a_0', 'a_1']; obs Box(3,), actions Discrete(3)" in marl.check_env(
        Par(), verbose=False
    )
    assert "masked actions seen" in marl.check_env(Turns(), verbose=False)


@pytest.mark.parametrize(
    "env, dtype",
    [
        (lambda: Par(obs=lambda t, a: obs_at(t, a).astype(np.float64)), "float64"),
        (lambda: Par(obs=lambda t, a: np.arange(3) + t), "int64"),
        (lambda: GymMA(obs=lambda t, i: np.arange(3, dtype=np.int32)), "int32"),
    ],
)
def test_float64_and_integer_obs_are_cast_and_said_once(env, dtype):
    with pytest.warns(EnvCastWarning) as caught:
        text = marl.check_env(env(), steps=20, verbose=False)
    said = [str(w.message) for w in caught if issubclass(w.category, EnvCastWarning)]
    assert len(said) == 1 and f"obs of agent 'a_0' has dtype {dtype}" in said[0].replace("agent_0", "a_0"), said
    assert "passed" in text


def test_vmas_reward_with_a_trailing_dimension_is_read_per_copy():
    """VMAS 'wheel' gives its reward as [B, 1]: the adapter reads [B] (the guard once stopped it under fit)."""
    pytest.importorskip("vmas")
    env = marl.make_env("vmas", "wheel", num_envs=3, max_steps=4)
    text = marl.check_env(env, steps=6, verbose=False)
    assert "vmas:wheel passed" in text


# ------------------------------------------------------------------ under fit (the runners' guard, evaluation)
class Own64(Own):
    """Own with float64 observations and a float64 observation space (once: RuntimeError mixed dtype in torch)."""

    def __init__(self):
        super().__init__(edit=lambda s, n: s.obs.__setitem__("agent", s.obs["agent"].double()))
        self.info.groups["agent"].obs_space = gym.spaces.Box(-10.0, 10.0, (3,), np.float64)


@pytest.mark.parametrize(
    "make, algo, said, length",
    [
        (
            lambda: marl.make_env(Par(obs=lambda t, a: obs_at(t, a).astype(np.float64)), num_envs=2),
            "ippo",
            "obs of agent 'a_0' has dtype float64; marl casts it to float32",
            5.0,
        ),
        (Own64, "mappo", "obs[agent] of agent 'agent_0', 'agent_1' (group 'agent') has dtype torch.float64", 4.5),
    ],
    ids=["pettingzoo", "own env"],
)
def test_float64_obs_env_fits_one_iteration(ray_session, run_dir, make, algo, said, length):
    """The cast path trains: one iteration, then a greedy evaluation of whole episodes (Own's copies are
    one step apart: episodes of 4 and 5 steps in the first round)."""
    with pytest.warns(EnvCastWarning, match=re.escape(said)):
        result = make().fit(
            algo, stop={"iterations": 1}, rollout_length=5, epochs=1, eval_episodes=2, progress=False, log_dir=run_dir
        )
    assert result.metrics["env_steps"] == 10 and result.eval["episode_length_mean"] == length


def test_fit_stops_at_a_bad_own_env_and_at_evaluation_that_never_ends(ray_session, run_dir):
    with pytest.raises(
        EnvRuleError,
        match=r"\[rule no_legal_action\] env own:count \(env runner 0\), at step 2, env copy 0, agent .agent_1.",
    ):
        Own(from_step(2, lambda s: s.avail_actions["agent"][0, 1].fill_(False))).fit(
            "ippo", stop={"iterations": 1}, rollout_length=5, epochs=1, eval_episodes=0, progress=False, log_dir=run_dir
        )
    never = marl.make_env(Par(limit=None), num_envs=2)
    with pytest.raises(EnvRuleError, match=r"\[rule episode_ends\] env pettingzoo:bad_par.*only 0 of 2 episodes"):
        never.fit(
            "ippo", stop={"iterations": 1}, rollout_length=5, epochs=1, eval_episodes=2, progress=False, log_dir=run_dir
        )
