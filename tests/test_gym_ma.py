"""The Gymnasium multi-agent adapter (make_env("gymnasium", ...)): LBF and RWARE through the env
contract, equality with the env stepped directly, and the adapter's rules on a toy env."""

import subprocess
import sys

import gymnasium as gym
import numpy as np
import pytest
import torch

import marl
from marl.errors import MarlDeprecationWarning, MarlError
from test_envs import run_contract

lbforaging = pytest.importorskip("lbforaging")
rware = pytest.importorskip("rware")

LBF = "lbforaging:Foraging-8x8-2p-2f-v3"


@pytest.mark.parametrize(
    "name, limit",
    [
        (LBF, 10),
        ("lbforaging:Foraging-2s-8x8-3p-2f-coop-v3", 10),
        ("rware:rware-tiny-2ag-v2", 25),
        ("rware:rware-tiny-4ag-v2", 25),
    ],
)
def test_contract(name, limit):
    env = marl.make_env("gymnasium", name, num_envs=3, episode_limit=limit)
    assert env.info.family == "gymnasium" and env.info.kind == "cooperative" and env.info.episode_limit == limit
    run_contract(env, limit=limit)


@pytest.mark.parametrize("common", [False, True])
def test_same_observations_and_rewards_as_the_env_itself(common):
    env = marl.make_env("gymnasium", LBF, num_envs=2, common_reward=common)
    ref = [gym.make("Foraging-8x8-2p-2f-v3", disable_env_checker=True) for _ in range(2)]
    s = env.reset(seed=7)
    obs = [r.reset(seed=7 + b)[0] for b, r in enumerate(ref)]
    gen = torch.Generator().manual_seed(0)
    total = 0.0
    for t in range(40):
        want = np.stack([np.concatenate([np.asarray(o, np.float32) for o in obs[b]]) for b in range(2)])
        assert np.array_equal(s.state.numpy(), want), t
        acts = env.random_actions(s, gen)
        s = env.step(acts)
        outs = [ref[b].step(tuple(int(a) for a in acts["agent"][b])) for b in range(2)]
        obs = [o[0] for o in outs]
        rew = np.array([o[1] for o in outs], np.float32)  # [B, N]
        if common:
            rew = np.repeat(rew.sum(1, keepdims=True), 2, 1)
        assert np.allclose(s.reward["agent"].numpy(), rew), t
        total += float(rew.sum())
        if s.done.any():
            break
    assert total > 0 or t == 39  # LBF pays when food is loaded


class _Toy(gym.Env):
    """Two agents with different spaces; scripted ends and masks to check the adapter's rules."""

    def __init__(self, end_at=3, term_as_list=True, reward_list=True, masks=True):
        self.observation_space = gym.spaces.Tuple((gym.spaces.Box(0, 9, (2,), np.float32), gym.spaces.Discrete(3)))
        self.action_space = gym.spaces.Tuple((gym.spaces.Discrete(4), gym.spaces.Discrete(2)))
        self.end_at, self.term_as_list, self.reward_list, self.masks = end_at, term_as_list, reward_list, masks
        self.t = 0

    def _obs(self):
        return (np.array([self.t, 1.0], np.float32), self.t % 3)

    def _info(self):
        return {"action_mask": [[1, 0, 1, 0], [0, 1]]} if self.masks else {}

    def reset(self, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return self._obs(), self._info()

    def step(self, actions):
        self.t += 1
        done = self.t >= self.end_at
        rew = [float(actions[0]), 10.0 * actions[1]] if self.reward_list else 5.0
        term = [done, done] if self.term_as_list else done
        return self._obs(), rew, term, False, self._info()


def test_toy_rules_groups_masks_rewards_and_ends():
    env = marl.make_env(_Toy, num_envs=2, episode_limit=5)
    assert list(env.info.groups) == ["agent_0", "agent_1"]  # different spaces: one group each
    assert env.info.groups["agent_1"].obs_dim == 3  # Discrete(3) -> one-hot
    s = env.reset(seed=0)
    assert s.avail_actions["agent_0"][0, 0].tolist() == [True, False, True, False]
    assert s.obs["agent_1"][0, 0].tolist() == [1.0, 0.0, 0.0]
    s = env.step({"agent_0": torch.tensor([[2], [0]]), "agent_1": torch.tensor([[1], [1]])})
    assert s.reward["agent_0"][:, 0].tolist() == [2.0, 0.0] and s.reward["agent_1"][:, 0].tolist() == [10.0, 10.0]
    a = {"agent_0": torch.zeros(2, 1, dtype=torch.long), "agent_1": torch.ones(2, 1, dtype=torch.long)}
    s = env.step(a)
    s = env.step(a)  # the env ends at its 3rd step (before the time limit): a termination
    assert s.terminated.all() and not s.truncated.any()
    env = marl.make_env(_Toy, num_envs=1, episode_limit=2, end_at=2, common_reward=True, reward_scalarisation="mean")
    s = env.reset(seed=0)
    a = {"agent_0": torch.tensor([[0]]), "agent_1": torch.tensor([[1]])}
    env.step(a)
    s = env.step(a)  # time limit and env end together: a truncation (the value bootstraps)
    assert s.truncated.all() and not s.terminated.any()
    assert s.reward["agent_0"].item() == s.reward["agent_1"].item() == 5.0  # mean of [0, 10]


def test_scalar_reward_and_bool_end_and_no_masks():
    env = marl.make_env(_Toy, num_envs=1, term_as_list=False, reward_list=False, masks=False)
    s = env.reset(seed=0)
    assert s.avail_actions["agent_0"].all()
    a = {"agent_0": torch.zeros(1, 1, dtype=torch.long), "agent_1": torch.zeros(1, 1, dtype=torch.long)}
    for _ in range(3):
        s = env.step(a)
    assert s.reward["agent_0"].item() == 5.0 and s.reward["agent_1"].item() == 5.0 and s.terminated.all()


def test_lower_case_id_is_matched_to_the_registered_id():
    """Benchmark suites write tasks in lower case (marl-eval's keys); Gymnasium ids are case-sensitive."""
    env = marl.make_env("gymnasium", "lbforaging:foraging-8x8-2p-2f-coop-v3", num_envs=1)
    assert "gymnasium:Foraging-8x8-2p-2f-coop-v3 " in repr(env)
    with pytest.raises(MarlError, match="Unknown Gymnasium env id 'foraging-8x8-2p-2f-coop-v9'"):
        marl.make_env("gymnasium", "lbforaging:foraging-8x8-2p-2f-coop-v9")


def test_names_and_errors():
    with pytest.raises(MarlError, match="needs '<module>:<env id>'"):
        marl.make_env("gymnasium")
    with pytest.raises(
        MarlError, match="Unknown Gymnasium env id 'Foraging-8x8-2p-2f-v9'.*Did you mean 'Foraging-8x8-2p-2f-v3'"
    ):
        marl.make_env("gymnasium", "lbforaging:Foraging-8x8-2p-2f-v9")
    with pytest.raises(MarlError, match="Cannot import module 'lbforagin'"):
        marl.make_env("gymnasium", "lbforagin:Foraging-8x8-2p-2f-v3")
    with pytest.raises(MarlError, match="needs Tuple spaces with one entry per agent"):
        marl.make_env("gymnasium", "CartPole-v1")
    with pytest.raises(MarlError, match="Unknown reward_scalarisation 'max'"):
        marl.make_env("gymnasium", LBF, reward_scalarisation="max")
    with pytest.raises(MarlError, match="episode_limit must be a whole number >= 1"):
        marl.make_env("gymnasium", LBF, episode_limit=0)
    with pytest.raises(MarlError, match="wraps that one instance"):
        marl.make_env(_Toy(), num_envs=4)
    assert marl.make_env(_Toy(), num_envs=1).num_envs == 1
    assert LBF in marl.list_envs(with_scenarios=True)["gymnasium"]


# ------------------------------------------------------------------ episode limits (issue 30, item 6)
@pytest.mark.parametrize(
    "name, kwargs, limit, source",
    [
        (LBF, {}, 50, "ForagingEnv._max_episode_steps"),  # LBF's constructor default, max_episode_steps=50
        ("rware:rware-tiny-2ag-v2", {}, 500, "Warehouse.max_steps"),  # RWARE's max_steps=500
        (LBF, {"max_episode_steps": 30}, 30, "TimeLimit wrapper"),  # gymnasium.make wraps TimeLimit(30)
        (LBF, {"episode_limit": 10}, 10, "episode_limit="),
        (LBF, {"episode_limit": 80}, 50, "ForagingEnv._max_episode_steps"),  # LBF ends at 50 anyway
    ],
)
def test_the_env_s_own_step_limit_is_read(name, kwargs, limit, source):
    env = marl.make_env("gymnasium", name, num_envs=1, **kwargs)
    assert env.info.episode_limit == limit and env.episode_limit_source == source


def _step_until_done(env, max_steps):
    s = env.reset(seed=0)
    a = {g: torch.zeros(env.num_envs, info.n_agents, dtype=torch.long) for g, info in env.info.groups.items()}
    for t in range(1, max_steps + 1):
        s = env.step(a)
        if s.done.all():
            return t, s
    return max_steps, s


def test_a_time_limit_wrapped_instance_reports_and_keeps_its_limit():
    """A ``TimeLimit(env, 7)`` instance (the env itself would run 100 steps): limit 7, a truncation at 7."""
    env = marl.make_env(gym.wrappers.TimeLimit(_Toy(end_at=100, masks=False), 7), num_envs=1)
    assert env.info.episode_limit == 7 and env.episode_limit_source == "TimeLimit wrapper"
    t, s = _step_until_done(env, 20)
    assert t == 7 and s.truncated.all() and not s.terminated.any()
    assert marl.make_env(_Toy, num_envs=1, end_at=100).info.episode_limit == 0  # declares none


def test_lbf_ends_at_its_own_limit_as_a_truncation():
    """LBF reports its 50th step as ``terminated``; with the limit read from the env that step is a
    truncation (the value bootstraps), as with an explicit ``episode_limit=50``."""
    env = marl.make_env("gymnasium", LBF, num_envs=2, seed=3)
    t, s = _step_until_done(env, 60)  # action 0 (no-op): no food is loaded, only the limit ends it
    assert t == 50 and s.truncated.all() and not s.terminated.any()


def test_time_limit_is_a_deprecated_alias_of_episode_limit():
    with pytest.warns(MarlDeprecationWarning, match=r"time_limit= is deprecated, use episode_limit=") as rec:
        env = marl.make_env("gymnasium", LBF, num_envs=1, time_limit=20)
    assert env.info.episode_limit == 20
    assert rec[0].filename == __file__  # the warning points at the user's line, not into marl
    with pytest.warns(MarlDeprecationWarning):
        assert marl.make_env(_Toy, num_envs=1, time_limit=4).info.episode_limit == 4  # the object path too


def test_the_deprecation_shows_outside_main_after_marl_s_filters(tmp_path):
    """Python hides DeprecationWarning outside ``__main__``; marl's own shows from a user's module,
    also after :func:`marl.noise.quiet_third_party` installed the third-party filters."""
    (tmp_path / "user_mod.py").write_text(
        f"import marl\nmarl.make_env('gymnasium', {LBF!r}, num_envs=1, time_limit=20)\n"
    )
    code = "import marl.noise; marl.noise.quiet_third_party(); import user_mod"
    out = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert "user_mod.py:2: MarlDeprecationWarning: make_env('gymnasium', ...): time_limit= is deprecated" in out.stderr


def test_qmix_runs_on_lbf_with_its_default_limit(ray_session, run_dir):
    """No limit passed: QMIX (which stores whole episodes of ``episode_limit`` steps) accepts LBF and trains
    one iteration of 50-step episodes."""
    env = marl.make_env("gymnasium", LBF, num_envs=2)
    assert env.info.episode_limit == 50
    kw = dict(rollout_length=50, batch_size=2, episodes_per_update=2, eval_episodes=0, log_dir=run_dir, progress=False)
    res = env.fit("qmix", stop={"iterations": 1}, **kw)
    assert res.metrics["iteration"] == 1 and res.metrics["env_steps"] == 2 * 50
