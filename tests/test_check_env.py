"""marl.check_env: a correct toy env passes; envs that break one rule each fail with a message naming it.

No simulator, no Ray: the whole file runs in about a second.
"""

import gymnasium as gym
import numpy as np
import pytest
import torch

import marl
from marl.env import EnvInfo, ExtraColumn, GroupInfo, MarlError, MultiAgentEnv, Observation, Step, check_step
from marl.env.rules import EnvCastWarning

B, LIMIT = 4, 3


class Toy(MultiAgentEnv):
    """Group "a" (2 agents, Discrete(3), obs 4) and "c" (1 agent, Box(2) actions, obs 3); truncated every
    ``LIMIT`` steps. ``bug(step, phase)`` edits each Step after ``reset`` (phase "reset") or ``step``
    (phase "step") to break one rule."""

    def __init__(self, bug=None, extra=False, limit=LIMIT):
        box = lambda n: gym.spaces.Box(-1.0, 1.0, (n,), np.float32)  # noqa: E731
        groups = {
            "a": GroupInfo("a", ["a_0", "a_1"], box(4), gym.spaces.Discrete(3)),
            "c": GroupInfo("c", ["c_0"], box(3), box(2)),
        }
        cols = {"flag": ExtraColumn(torch.bool, False, "a test column")} if extra else {}
        self.info = EnvInfo(
            "toy",
            "check",
            ["a_0", "a_1", "c_0"],
            groups,
            state_dim=11,
            episode_limit=limit,
            num_envs=B,
            extra_columns=cols,
        )
        self.bug, self.extra, self.limit = bug, extra, limit
        self.t = torch.zeros(B, dtype=torch.long)

    def _observation(self) -> Observation:
        x = self.t.float()[:, None, None] / 10
        obs = {"a": x.expand(B, 2, 4).clone(), "c": x.expand(B, 1, 3).clone()}
        state = torch.cat([obs["a"].reshape(B, -1), obs["c"].reshape(B, -1)], 1)
        avail = {"a": torch.ones(B, 2, 3, dtype=torch.bool), "c": None}
        alive = {"a": torch.ones(B, 2, dtype=torch.bool), "c": torch.ones(B, 1, dtype=torch.bool)}
        return Observation(obs, state, avail, alive)

    def _step(self, reward, terminated, truncated) -> Step:
        s = Step(
            *self._observation(),
            reward={"a": reward.expand(B, 2).clone(), "c": reward.expand(B, 1).clone()},
            terminated=terminated,
            truncated=truncated,
        )
        if self.extra:
            s.extras = {"flag": {"a": torch.zeros(B, 2, dtype=torch.bool), "c": torch.zeros(B, 1, dtype=torch.bool)}}
        return s

    def reset(self, seed=None):
        self.t.zero_()
        no = torch.zeros(B, dtype=torch.bool)
        s = self._step(torch.zeros(B, 1), no, no.clone())
        s.final_obs, s.final_state = dict(s.obs), s.state
        return self._break(s, "reset")

    def step_env(self, actions):
        self.t += 1
        truncated = self.t >= self.limit
        return self._step(torch.ones(B, 1), torch.zeros(B, dtype=torch.bool), truncated)

    def reset_rows(self, rows):
        self.t[rows] = 0
        return self._observation()

    def step(self, actions):
        return self._break(super().step(actions), "step")

    def _break(self, s, phase):
        if self.bug is not None:
            self.bug(s, phase)
        return s


def at(phase, fn):
    """A bug that edits the Step only in ``phase`` ("reset" or "step")."""
    return lambda s, p: fn(s) if p == phase else None


def set_(field, value_of):
    return lambda s: setattr(s, field, value_of(s))


def put(field, group, value_of):
    return lambda s: getattr(s, field).__setitem__(group, value_of(s))


def row_ended(s):
    return bool(s.done.any())


def final_obs_off_in_row_0(s):
    """final_obs of group "a" changed in a row that did not end."""
    f = dict(s.final_obs)
    f["a"] = f["a"].clone()
    f["a"][0] += 1
    s.final_obs = f


BROKEN = [
    (
        "obs shape",
        at("step", put("obs", "a", lambda s: s.obs["a"][..., :3])),
        r"\[rule obs_shape\] env toy:check \(check_env\), at step 1, agent 'a_0', 'a_1' \(group 'a'\), key 'obs': "
        r"shape \(4, 2, 3\) differs from \(4, 2, 4\)",
    ),
    (
        "obs nan",
        at("step", put("obs", "c", lambda s: s.obs["c"].index_fill(0, torch.tensor([2]), float("nan")))),
        r"group 'c': obs holds a NaN or infinite value in row 2",
    ),
    (
        "obs missing group",
        at("step", set_("obs", lambda s: {"a": s.obs["a"]})),
        r"\[rule groups\] .*at step 1, agent 'c_0' \(group 'c'\), key 'obs': obs lacks group 'c': expected the "
        r"groups \['a', 'c'\], got \['a'\]",
    ),
    (
        "obs group order",
        at("reset", set_("obs", lambda s: {"c": s.obs["c"], "a": s.obs["a"]})),
        r"reset: obs must be a dict over the groups \['a', 'c'\]",
    ),
    (
        "state shape",
        at("step", set_("state", lambda s: s.state[:, :10])),
        r"\[rule state_shape\] .*at step 1, key 'state': shape \(4, 10\) differs from \(4, 11\)",
    ),
    (
        "state not a tensor",
        at("reset", set_("state", lambda s: s.state.numpy())),
        r"\[rule step_type\] .*at reset, key 'state': expected a torch tensor, got ndarray",
    ),
    (
        "avail dtype",
        at("step", put("avail_actions", "a", lambda s: s.avail_actions["a"].float())),
        r"\[rule bool_dtype\] .*key 'avail_actions': dtype torch.float32 cannot be read as torch.bool",
    ),
    (
        "no legal action",
        at("step", put("avail_actions", "a", lambda s: s.avail_actions["a"].index_fill(0, torch.tensor([1]), False))),
        r"\[rule no_legal_action\] .*at step 1, env copy 1, agent 'a_0' \(group 'a'\), key 'avail_actions': this "
        r"alive agent has no legal action",
    ),
    (
        "continuous avail",
        at("reset", put("avail_actions", "c", lambda s: torch.ones(B, 1, 2, dtype=torch.bool))),
        r"group 'c': avail_actions must be None for a continuous group",
    ),
    (
        "reward shape",
        at("step", put("reward", "c", lambda s: s.reward["c"][:, 0])),
        r"\[rule reward_shape\] .*agent 'c_0' \(group 'c'\), key 'reward': shape \(4,\) differs from \(4, 1\)",
    ),
    (
        "reward after reset",
        at("reset", put("reward", "a", lambda s: torch.ones(B, 2))),
        r"reset: group 'a': reward after reset must be 0",
    ),
    (
        "flag shape",
        at("step", set_("truncated", lambda s: s.truncated[:, None])),
        r"\[rule flags\] .*at step 1, key 'truncated': shape \(4, 1\) differs from \(4,\)",
    ),
    (
        "both flags",
        at("step", set_("terminated", lambda s: s.truncated.clone())),
        r"step 3: row 0 is both terminated and truncated; a time limit is a truncation, never a termination",
    ),
    (
        "done after reset",
        at("reset", set_("truncated", lambda s: torch.ones(B, dtype=torch.bool))),
        r"reset: row 0 is terminated or truncated after reset",
    ),
    (
        "final obs missing",
        at("step", lambda s: setattr(s, "final_obs", None) if row_ended(s) else None),
        r"step 3: row 0 ended but final_obs / final_state is None",
    ),
    (
        "final obs differs",
        at("step", final_obs_off_in_row_0),
        r"step 1: group 'a': final_obs differs from obs in row 0, which did not end",
    ),
    (
        "final state differs",
        at("step", set_("final_state", lambda s: s.state + 1)),
        r"step 1: final_state differs from state in row 0, which did not end",
    ),
    (
        "final avail differs",
        at(
            "step",
            put("final_avail_actions", "a", lambda s: s.avail_actions["a"].index_fill(2, torch.tensor([0]), False)),
        ),
        r"step 1: group 'a': final_avail_actions differs from avail_actions in row 0, which did not end",
    ),
    (
        "final avail shape",
        at("step", put("final_avail_actions", "a", lambda s: s.avail_actions["a"][..., :2])),
        r"\[rule avail_shape\] .*key 'final_avail_actions': shape \(4, 2, 2\) differs from \(4, 2, 3\)",
    ),
    (
        "episode metrics shape",
        at("step", set_("info", lambda s: {"episode_metrics": {"score": torch.zeros(B, 1)}})),
        r"step 1: info\['episode_metrics'\]\['score'\] has shape \(4, 1\), expected \(4,\)",
    ),
    (
        "undeclared extra",
        at("step", set_("extras", lambda s: {"decision": {"a": torch.zeros(B, 2, dtype=torch.bool)}})),
        r"step 1: extras must hold exactly the columns declared in info.extra_columns \[\], got \['decision'\]",
    ),
]


@pytest.mark.parametrize("name, bug, message", BROKEN, ids=[b[0] for b in BROKEN])
def test_each_broken_rule_is_named(name, bug, message):
    with pytest.raises(MarlError, match=message):
        marl.check_env(Toy(bug), steps=2 * LIMIT)


def test_a_correct_env_passes_and_is_left_reset_and_stepped():
    env = Toy(extra=True)
    marl.check_env(env, steps=3 * LIMIT + 1, seed=3)
    assert env.t.tolist() == [1] * B  # stepped through three episodes and one more step


def as_int_obs(s, group):
    """Group ``group``'s obs and final_obs as whole numbers (x10, rounded), as an env with integer features gives."""
    s.final_obs = dict(s.final_obs)
    for field in (s.obs, s.final_obs):
        field[group] = (field[group] * 10).round().long()


CAST = [
    ("obs", at("reset", put("obs", "a", lambda s: s.obs["a"].double())), "obs[a]", "torch.float64"),
    ("obs int", at("step", lambda s: as_int_obs(s, "c")), "obs[c]", "torch.int64"),
    ("alive", at("step", put("alive", "a", lambda s: s.alive["a"].long())), "alive[a]", "torch.int64"),
    ("flag", at("step", set_("terminated", lambda s: s.terminated.long())), "terminated", "torch.int64"),
]


@pytest.mark.parametrize("name, bug, key, dtype", CAST, ids=[c[0] for c in CAST])
def test_other_dtypes_are_cast_and_said_once(name, bug, key, dtype):
    """float64 / integer values are cast (float32 / bool), with one warning per env and key over many
    steps, and the summary lists the cast."""
    with pytest.warns(EnvCastWarning) as caught:
        text = marl.check_env(Toy(bug), steps=2 * LIMIT, verbose=False)
    said = [str(w.message) for w in caught if issubclass(w.category, EnvCastWarning)]
    assert len(said) == 1 and f"{key}" in said[0] and dtype in said[0], said
    assert f"cast: env toy:check (check_env): {key}" in text and "passed (6 steps of 4 env copies" in text, text


@pytest.mark.parametrize(
    "bug, message",
    [
        (
            at("step", lambda s: setattr(s, "extras", {})),
            r"extras must hold exactly the columns .*\['flag'\], got \[\]",
        ),
        (
            at("step", lambda s: s.extras.__setitem__("flag", {"a": s.extras["flag"]["a"]})),
            r"step 1: extras\['flag'\] must be a dict over the groups \['a', 'c'\]",
        ),
        (
            at("step", lambda s: s.extras["flag"].__setitem__("a", torch.zeros(B, 2))),
            r"step 1: extras\['flag'\] of group 'a' has dtype torch.float32, expected torch.bool",
        ),
        (
            at("reset", lambda s: s.extras["flag"].__setitem__("c", torch.zeros(B, 2, dtype=torch.bool))),
            r"reset: extras\['flag'\] of group 'c' has shape \(4, 2\), expected \(4, 1\)",
        ),
    ],
)
def test_declared_extra_columns_are_checked(bug, message):
    with pytest.raises(MarlError, match=message):
        marl.check_env(Toy(bug, extra=True), steps=2)


def test_episode_longer_than_the_limit():
    env = Toy(limit=5)
    env.info.episode_limit = 4  # declares 4, runs 5
    with pytest.raises(
        MarlError,
        match=r"step 5: the episode in row 0 has run 5 steps without ending; expected it "
        r"to end by info.episode_limit = 4",
    ):
        marl.check_env(env, steps=6)


def test_bad_info_and_bad_objects():
    env = Toy()
    env.info.groups["a"].action_space = gym.spaces.MultiDiscrete([2, 2])
    with pytest.raises(MarlError, match=r"group 'a': action_space must be Discrete or a 1-D Box, got MultiDiscrete"):
        marl.check_env(env)
    env = Toy()
    env.info.groups["c"].obs_space = gym.spaces.MultiBinary(3)  # a Box of any rank or a Dict of Boxes is valid
    with pytest.raises(MarlError, match=r"group 'c': obs_space must be a Box of rank >= 1 \(a vector, an image"):
        marl.check_env(env)
    with pytest.raises(
        MarlError, match=r"\[rule env_type\] check_env: expected a marl MultiAgentEnv, a PettingZoo env"
    ):
        marl.check_env("mpe")

    class NoStep(Toy):
        def step(self, actions):
            return {"obs": None}

    with pytest.raises(MarlError, match="step 1: expected a marl Step, got dict"):
        marl.check_env(NoStep())


def test_check_step_alone_on_a_real_env():
    env = marl.make_env("matrix", "two_step", num_envs=3)
    s = env.reset()
    check_step(env, s, reset=True)
    s = env.step({"agent": torch.zeros(3, 2, dtype=torch.long)})
    check_step(env, s)
    s.final_obs["agent"] = s.final_obs["agent"][:, :1]
    with pytest.raises(MarlError, match=r"final_obs has shape \(3, 1, 4\), expected \(3, 2, 4\)"):
        check_step(env, s, where="by hand")
