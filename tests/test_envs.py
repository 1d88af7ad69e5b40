"""Env adapters: the batched MultiAgentEnv contract on MPE, VMAS and generic PettingZoo envs.

No Ray. Small batches and short episodes keep the whole file fast on 2 CPU cores.
"""

import importlib
import subprocess
import sys

import gymnasium as gym
import numpy as np
import pettingzoo
import pytest
import torch
from pettingzoo import ParallelEnv

import marl
from marl.env import MarlError, list_envs, make_env
from marl.envs.common import build_groups, mpe2_modules
from marl.envs.mpe import MPEEnv
from marl.envs.pettingzoo import PettingZooEnv
from marl.envs.wrappers.flatten_obs import flatten

MPE_SCENARIOS = [
    "simple",
    "simple_adversary",
    "simple_crypto",
    "simple_push",
    "simple_reference",
    "simple_speaker_listener",
    "simple_spread",
    "simple_tag",
    "simple_world_comm",
    "simple_line",
    "simple_formation",
    "collect_treasure",
]


# --------------------------------------------------------------------------- helpers


def check_step(env, s):
    """The common contract (shapes, dtypes, flags, finals: marl.env.check_step), plus what these adapters add."""
    marl.env.check_step(env, s)
    info = env.info
    assert s.final_obs is not None and s.final_state is not None  # given on every step, ended or not
    # structured observations (an image Box, a Dict) enter the state flattened
    pieces = {a: flatten(s.obs[name])[:, j] for name, g in info.groups.items() for j, a in enumerate(g.agents)}
    assert info.state_dim == sum(g.obs_dim * g.n_agents for g in info.groups.values())
    # the global state is all observations concatenated in agent order
    assert torch.equal(s.state, torch.cat([pieces[a] for a in info.agents], dim=1))


def run_contract(env, limit, episodes=2, vel=None):
    """Step ``episodes`` full episodes: ends exactly at ``limit`` as truncations, then a fresh episode.

    ``vel``: slice of the agents' own velocity in the observation (0 in a fresh episode).
    """
    marl.check_env(env, steps=episodes * limit, seed=1)
    gen = torch.Generator().manual_seed(0)
    s = env.reset(seed=0)
    check_step(env, s)
    assert not s.done.any()
    for g in env.info.groups.values():
        if g.discrete:
            assert s.avail_actions[g.name].all(), "no masks -> every action legal"
        assert s.alive[g.name].all()
    for t in range(1, episodes * limit + 1):
        s = env.step(env.random_actions(s, gen))
        check_step(env, s)
        if t % limit:
            assert not s.done.any(), t
            assert torch.equal(s.final_state, s.state)
            continue
        assert s.truncated.all() and not s.terminated.any(), t
        for b in range(env.num_envs):  # the reset row holds a new episode
            assert not torch.equal(s.final_state[b], s.state[b])
        if vel is not None:
            for name in env.info.groups:
                assert (s.obs[name][..., vel] == 0).all(), "fresh episode starts at rest"
                assert (s.final_obs[name][..., vel] != 0).any()
    return s


# --------------------------------------------------------------------------- registry / errors


def test_registry_lists_families_and_scenarios_lazily():
    envs = list_envs(with_scenarios=True)
    assert {"mpe", "vmas", "pettingzoo"} <= set(envs)
    assert set(MPE_SCENARIOS) <= set(envs["mpe"])
    assert {"simple_spread", "navigation"} <= set(envs["vmas"])
    assert "mpe2.simple_tag_v3" in envs["pettingzoo"]
    # registration is strings only: importing marl.envs must not import adapters or simulators
    code = (
        "import sys, marl.envs; "
        "bad = [m for m in ('marl.envs.mpe', 'marl.envs.vmas', 'marl.envs.pettingzoo', 'mpe2', 'vmas', 'pettingzoo') "
        "if m in sys.modules]; assert not bad, bad"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


@pytest.mark.parametrize(
    "args, kwargs, words",
    [
        (("mep", "simple_spread"), {}, ["'mep'", "Did you mean 'mpe'", "vmas", "pettingzoo"]),
        (("mpe", "simple_sprad"), {}, ["MPE scenario", "'simple_spread'", "collect_treasure"]),
        (("mpe", "simple_spread_v9"), {}, ["simple_spread_v9", "Did you mean"]),
        (("vmas", "navigaton"), {}, ["VMAS scenario", "'navigation'", "simple_spread"]),
        (("pettingzoo", "mpe2.simple_tga_v3"), {}, ["'mpe2.simple_tag_v3'"]),
        (("pettingzoo", "classic/tictactoe-v2"), {}, ["'classic/tictactoe-v3'"]),
        (("mpe", None), {}, ["needs a scenario", "simple_spread"]),
        (("mpe", "simple_spread"), {"n": 3}, ["'n'", "Did you mean 'N'", "local_ratio"]),
        (("mpe", "simple_spread"), {"local_ratio": 2.0}, ["local_ratio", "Valid kwargs"]),
        (("mpe", "simple_tag"), {"N": 3}, ["'N'", "num_good", "num_adversaries"]),
        (("vmas", "navigation"), {"n_agent": 2}, ["'n_agent'", "Did you mean 'n_agents'"]),
    ],
)
def test_unknown_names_and_bad_kwargs_name_the_choices(args, kwargs, words):
    with pytest.raises(MarlError) as e:
        make_env(*args, num_envs=2, **kwargs)
    for w in words:
        assert w in str(e.value), (w, str(e.value))


def test_scenario_name_forms_and_spec():
    for name in ("simple_spread", "simple_spread_v3", "mpe:simple_spread"):
        env = make_env(name, num_envs=2) if ":" in name else make_env("mpe", name, num_envs=2)
        assert env.info.scenario == "simple_spread" and env.info.family == "mpe"
    env = make_env("mpe", "simple_spread", num_envs=2, N=4, local_ratio=0.0)
    assert env.spec.family == "mpe" and env.spec.kwargs["N"] == 4
    clone = env.spec.make()
    assert clone.info.agents == env.info.agents and clone.num_envs == 2
    assert env.info.shared_reward  # local_ratio 0 -> only the global reward


# --------------------------------------------------------------------------- MPE


@pytest.mark.parametrize("scenario", MPE_SCENARIOS)
def test_mpe_contract_every_scenario(scenario):
    env = make_env("mpe", scenario, num_envs=4, max_cycles=5)
    ref = importlib.import_module(f"mpe2.{mpe2_modules()[scenario]}").parallel_env(max_cycles=5)
    assert env.info.agents == list(ref.possible_agents)  # fixed order = possible_agents
    assert env.info.episode_limit == 5 and env.num_envs == 4
    for g in env.info.groups.values():
        for a in g.agents:
            assert g.obs_space.shape == ref.observation_space(a).shape
            assert g.action_space == ref.action_space(a)
    run_contract(env, limit=5)


@pytest.mark.parametrize("scenario", ["simple_spread", "simple_speaker_listener", "simple_world_comm", "simple_crypto"])
def test_mpe_contract_continuous(scenario):
    env = make_env("mpe", scenario, num_envs=4, max_cycles=4, continuous_actions=True)
    for g in env.info.groups.values():
        assert not g.discrete and float(g.action_space.low.min()) == 0.0 and float(g.action_space.high.max()) == 1.0
    run_contract(env, limit=4)


def test_mpe_fresh_episode_after_truncation():
    # simple_spread observations start with the agent's own velocity, 0 at reset
    run_contract(make_env("mpe", "simple_spread", num_envs=6, max_cycles=6), limit=6, vel=slice(0, 2))


def test_mpe_kind_and_teams():
    adv = make_env("mpe", "simple_adversary", num_envs=2).info
    assert adv.kind == "competitive" and list(adv.groups) == ["adversary", "agent"]
    assert adv.groups["adversary"].obs_dim != adv.groups["agent"].obs_dim
    assert adv.groups["agent"].agents == ["agent_0", "agent_1"]
    assert adv.teams == {"adversary": ["adversary"], "good": ["agent"]}
    assert not adv.homogeneous

    sl = make_env("mpe", "simple_speaker_listener", num_envs=2).info
    assert sl.kind == "cooperative" and sl.shared_reward and list(sl.teams) == ["team"]
    assert sl.groups["speaker"].action_space == gym.spaces.Discrete(3)
    assert sl.groups["listener"].action_space == gym.spaces.Discrete(5)
    assert sl.groups["speaker"].obs_dim == 3 and sl.groups["listener"].obs_dim == 11

    spread = make_env("mpe", "simple_spread", num_envs=2).info
    assert spread.kind == "cooperative" and not spread.shared_reward  # local_ratio=0.5 default
    assert spread.groups["agent"].n_agents == 3 and spread.state_dim == 54

    wc = make_env("mpe", "simple_world_comm", num_envs=2).info
    assert wc.teams == {"adversary": ["leadadversary", "adversary"], "good": ["agent"]}
    crypto = make_env("mpe", "simple_crypto", num_envs=2).info
    assert crypto.teams == {"adversary": ["eve"], "good": ["bob", "alice"]} and crypto.shared_reward
    tag = make_env("mpe", "simple_tag", num_envs=2, num_good=2).info
    assert tag.kind == "competitive" and not tag.shared_reward


def _compare_with_parallel_env(scenario, continuous, B=3, max_cycles=6, episodes=2, seed=11, **kw):
    """MPEEnv copy b == mpe2 parallel_env reset with seed + b, fed the same actions."""
    env = MPEEnv(scenario, num_envs=B, continuous_actions=continuous, max_cycles=max_cycles, **kw)
    mod = importlib.import_module(f"mpe2.{mpe2_modules()[scenario]}")
    refs = [mod.parallel_env(max_cycles=max_cycles, continuous_actions=continuous, **kw) for _ in range(B)]
    ref_obs = [r.reset(seed=seed + b)[0] for b, r in enumerate(refs)]
    where = {a: env.info.locate(a) for a in env.info.agents}

    def same(step, ref_obs, ref_rew=None, final=False):
        for b in range(B):
            for a, (g, j) in where.items():
                got = (step.final_obs if final else step.obs)[g][b, j].numpy()
                np.testing.assert_array_equal(got, ref_obs[b][a], err_msg=f"{scenario} copy {b} {a}")
                if ref_rew is not None:
                    assert step.reward[g][b, j].item() == np.float32(ref_rew[b][a]), (scenario, b, a)

    s = env.reset(seed=seed)
    same(s, ref_obs)
    gen = torch.Generator().manual_seed(1)
    for _ in range(episodes * max_cycles):
        acts = env.random_actions(s, gen)
        s = env.step(acts)
        new_obs, rews, finals = [], [], []
        for b, r in enumerate(refs):
            act = {}
            for a, (g, j) in where.items():
                x = acts[g][b, j]
                act[a] = int(x) if x.dim() == 0 else x.numpy().astype(np.float32)
            o, rew, term, trunc, _ = r.step(act)
            assert bool(s.truncated[b]) == any(trunc.values())
            assert bool(s.terminated[b]) == (any(term.values()) and not any(trunc.values()))
            finals.append(o)
            if not r.agents:
                o, _ = r.reset()
            new_obs.append(o)
            rews.append(rew)
        same(s, new_obs, rews)
        same(s, finals, final=True)


@pytest.mark.parametrize("scenario", MPE_SCENARIOS)
def test_mpe_fast_path_equals_parallel_env_discrete(scenario):
    _compare_with_parallel_env(scenario, continuous=False)


@pytest.mark.parametrize(
    "scenario, kw",
    [
        ("simple_spread", {"N": 4, "local_ratio": 0.2}),
        ("simple_speaker_listener", {}),
        ("simple_world_comm", {}),
        ("simple_reference", {}),
        ("collect_treasure", {"num_collectors": 3, "num_treasures": 3}),
        ("simple_crypto", {}),
    ],
)
def test_mpe_fast_path_equals_parallel_env_continuous(scenario, kw):
    _compare_with_parallel_env(scenario, continuous=True, **kw)


def test_mpe_terminate_on_success_is_a_termination():
    # simple_line with 1 step episodes never "succeeds"; force success by a tiny threshold flip
    env = MPEEnv("simple_line", num_envs=2, max_cycles=50, terminate_on_success=True)
    for raw in env._envs:
        raw.scenario.DIST_THRESHOLD = 1e9  # every configuration counts as success
    s = env.reset(seed=0)
    s = env.step(env.random_actions(s))
    assert s.terminated.all() and not s.truncated.any()


def test_mpe_seeding_is_per_copy():
    a = MPEEnv("simple_spread", num_envs=3).reset(seed=7)
    b = MPEEnv("simple_spread", num_envs=3).reset(seed=7)
    c = MPEEnv("simple_spread", num_envs=1).reset(seed=8)
    assert torch.equal(a.state, b.state)
    assert torch.equal(a.state[1], c.state[0])  # copy 1 of seed 7 == copy 0 of seed 8
    assert not torch.equal(a.state[0], a.state[1])


def test_mpe_bad_actions():
    env = MPEEnv("simple_spread", num_envs=2)
    with pytest.raises(MarlError, match="reset"):
        env.step({"agent": torch.zeros(2, 3, dtype=torch.long)})
    env.reset(seed=0)
    with pytest.raises(MarlError, match="Missing actions for group 'agent'"):
        env.step({})
    with pytest.raises(MarlError, match=r"\[0, 5\)"):
        env.step({"agent": torch.full((2, 3), 5)})
    with pytest.raises(MarlError, match="shape"):
        env.step({"agent": torch.zeros(2, 2, dtype=torch.long)})


# --------------------------------------------------------------------------- VMAS


@pytest.mark.parametrize(
    "scenario, continuous, B",
    [("simple_spread", False, 4), ("simple_spread", True, 8), ("navigation", False, 16), ("navigation", True, 8)],
)
def test_vmas_contract(scenario, continuous, B):
    env = make_env("vmas", scenario, num_envs=B, max_steps=5, continuous_actions=continuous)
    assert env.info.family == "vmas" and env.info.episode_limit == 5 and env.num_envs == B
    assert env.info.agents == [f"agent_{i}" for i in range(len(env.info.agents))]
    assert list(env.info.groups) == ["agent"] and env.info.kind == "cooperative"
    g = env.info.groups["agent"]
    assert g.discrete != continuous
    if continuous:
        assert np.all(g.action_space.low == -1) and np.all(g.action_space.high == 1)
    # VMAS observations are [pos, vel, ...]: vel is 0 in a fresh episode
    run_contract(env, limit=5, vel=slice(2, 4))


def test_vmas_partial_reset_and_groups():
    env = make_env("vmas", "simple_tag", num_envs=6, max_steps=4)
    info = env.info
    assert info.kind == "competitive" and list(info.groups) == ["adversary", "agent"]
    assert info.teams == {"adversary": ["adversary"], "good": ["agent"]}
    s = env.reset(seed=1)
    env._env.steps[:2] = 2  # desynchronize: copies 0 and 1 hit max_steps two steps early
    s = env.step(env.random_actions(s))
    s = env.step(env.random_actions(s))
    assert s.truncated.tolist() == [True, True, False, False, False, False]
    assert torch.equal(s.final_state[2:], s.state[2:])  # untouched rows keep their observation
    for b in (0, 1):
        assert not torch.equal(s.final_state[b], s.state[b])
    for name in info.groups:
        assert (s.obs[name][:2, :, 0:2] == 0).all()  # reset rows start at rest (obs = [vel, pos, ...])
    check_step(env, s)


def test_vmas_steps_exactly_as_raw_vmas_until_the_time_limit():
    """The wrapper adds nothing to VMAS's numbers: on BenchMARL's navigation task (collisions, lidar,
    per-agent rewards) every observation and reward of 99 steps of the same random actions equals what
    ``vmas.make_env`` with the same seed returns, and the 100th step is a truncation, not a termination."""
    import vmas

    task = dict(n_agents=3, collisions=True, agents_with_same_goal=1, split_goals=False, observe_all_goals=False,
                shared_rew=False, lidar_range=0.35, agent_radius=0.1)  # fmt: skip
    env = make_env("vmas", "navigation", num_envs=4, max_steps=100, continuous_actions=True, **task)
    raw = vmas.make_env("navigation", num_envs=4, continuous_actions=True, max_steps=100, seed=7, dict_spaces=True,
                        terminated_truncated=True, **task)  # fmt: skip
    names = env.info.agents
    step, raw_obs = env.reset(seed=7), raw.reset(seed=7)
    gen = torch.Generator().manual_seed(1)
    for t in range(100):
        assert torch.equal(step.obs["agent"], torch.stack([raw_obs[n] for n in names], 1)), f"obs differ at step {t}"
        actions = torch.rand(4, 3, 2, generator=gen) * 2 - 1
        step = env.step({"agent": actions})
        raw_obs, raw_rew, terminated, truncated, _ = raw.step({n: actions[:, i] for i, n in enumerate(names)})
        assert torch.equal(step.reward["agent"], torch.stack([raw_rew[n] for n in names], 1)), f"rewards differ at {t}"
        assert step.truncated.tolist() == truncated.tolist() and not step.terminated.any()
    assert step.truncated.all()


def test_vmas_env_keeps_its_own_random_stream():
    """VMAS shares one random state between all its envs in a process; an evaluation env built and reset
    with its own seed between two training steps must not change where the training episodes restart."""

    def restarts(interleave: bool) -> torch.Tensor:
        env = make_env("vmas", "navigation", num_envs=2, max_steps=3, continuous_actions=True)
        step = env.reset(seed=5)
        starts = []
        for t in range(9):  # three episodes: two auto-resets draw new positions
            if interleave and t in (1, 4):
                other = make_env("vmas", "navigation", num_envs=2, max_steps=3, continuous_actions=True, seed=123)
                other.step(other.random_actions(other.reset(seed=99)))
            step = env.step({"agent": torch.full((2, len(env.info.agents), 2), 0.5)})
            if t % 3 == 2:
                starts.append(step.obs["agent"][..., :2].clone())
        return torch.stack(starts)

    alone = restarts(interleave=False)
    assert not torch.equal(alone[0], alone[1])  # the restarts draw new positions
    assert torch.equal(restarts(interleave=True), alone)


def test_vmas_seed_and_errors():
    a = make_env("vmas", "navigation", num_envs=4, max_steps=3).reset(seed=3)
    b = make_env("vmas", "navigation", num_envs=4, max_steps=3).reset(seed=3)
    assert torch.equal(a.state, b.state)
    env = make_env("vmas", "navigation", num_envs=4, max_steps=3, n_agents=2)
    assert env.info.agents == ["agent_0", "agent_1"]
    env.reset()
    with pytest.raises(MarlError, match="shape"):
        env.step({"agent": torch.zeros(4, 3, dtype=torch.long)})


# --------------------------------------------------------------------------- generic PettingZoo


class ToyParallel(ParallelEnv):
    """a_0, a_1 (Box 2x2 obs, Discrete(3) with action 1 masked via infos), b_0 (continuous).

    a_1 terminates at step 2; everyone is truncated at ``limit``.
    """

    metadata = {"name": "toy_v0"}

    def __init__(self, limit=4):
        self.possible_agents = ["a_0", "a_1", "b_0"]
        self.limit = limit
        self.received = []

    def observation_space(self, agent):
        return gym.spaces.Box(-100, 100, (2, 2) if agent[0] == "a" else (3,), np.float32)

    def action_space(self, agent):
        return gym.spaces.Discrete(3) if agent[0] == "a" else gym.spaces.Box(-1, 1, (2,), np.float32)

    def _obs(self, agent):
        return np.full(self.observation_space(agent).shape, self.t + 1 + self.offset, np.float32)

    def _info(self, agent):
        return {"action_mask": np.array([1, 0, 1], np.int8)} if agent[0] == "a" else {}

    def reset(self, seed=None, options=None):
        self.agents = list(self.possible_agents)
        self.t, self.offset = 0, float(np.random.default_rng(seed).uniform())
        return {a: self._obs(a) for a in self.agents}, {a: self._info(a) for a in self.agents}

    def step(self, actions):
        assert set(actions) == set(self.agents), "actions only for live agents"
        for a, x in actions.items():
            assert x in (0, 2) if a[0] == "a" else np.all(np.abs(x) <= 1), (a, x)
        self.received.append(dict(actions))
        self.t += 1
        term = {a: a == "a_1" and self.t == 2 for a in self.agents}
        trunc = {a: self.t >= self.limit for a in self.agents}
        rew = {a: float(self.t) for a in self.agents}
        obs, infos = {a: self._obs(a) for a in self.agents}, {a: self._info(a) for a in self.agents}
        self.agents = [a for a in self.agents if not (term[a] or trunc[a])]
        return obs, rew, term, trunc, infos


def test_pettingzoo_parallel_masks_early_leavers_and_truncation():
    env = PettingZooEnv.from_object(ToyParallel, num_envs=2)
    info = env.info
    assert info.agents == ["a_0", "a_1", "b_0"] and list(info.groups) == ["a", "b"]
    assert info.groups["a"].obs_dim == 4 and info.kind == "mixed"
    assert info.teams == {"a": ["a"], "b": ["b"]}
    s = env.reset(seed=0)
    check_step(env, s)
    assert s.avail_actions["a"][..., 1].logical_not().all() and s.avail_actions["b"] is None
    big = {"b": torch.full((2, 1, 2), 5.0)}  # out of bounds: must be clipped
    for t in range(1, 5):
        acts = env.random_actions(s)  # respects the mask; ToyParallel asserts it
        acts.update(big)
        s = env.step(acts)
        check_step(env, s)
        a1 = s.alive["a"][:, 1]
        if t == 1:
            assert a1.all() and (s.reward["a"] == 1).all()
        if t == 2:  # a_1 leaves: not alive, obs zeros, still gets this step's reward
            assert not a1.any() and (s.obs["a"][:, 1] == 0).all() and (s.reward["a"][:, 1] == 2).all()
        if t == 3:  # afterwards: reward 0, its action is not passed on
            assert not a1.any() and (s.reward["a"][:, 1] == 0).all() and (s.reward["a"][:, 0] == 3).all()
            assert all("a_1" not in r[-1] for r in (e.received for e in env._envs))
        if t < 4:
            assert not s.done.any()
    assert s.truncated.all() and not s.terminated.any()
    assert s.alive["a"].all() and s.alive["b"].all()  # new episode
    last, new = s.final_obs["a"][:, 0] - 5, s.obs["a"][:, 0] - 1  # obs = step + 1 + offset in [0, 1)
    assert ((last >= 0) & (last < 1)).all() and ((new >= 0) & (new < 1)).all()
    assert (s.final_obs["a"][:, 1] == 0).all()  # left before the end
    assert not torch.equal(s.final_state, s.state)
    assert np.all(np.abs(env._envs[0].received[0]["b_0"]) <= 1)


def test_pettingzoo_aec_tictactoe_masks_and_teams():
    # a zero-sum game is competitive by default, one team (and group) per player; declared as one
    # cooperative team, both players share the group "player" (the masks below are checked that way)
    assert make_env("pettingzoo", "classic/tictactoe-v3", num_envs=1).info.kind == "competitive"
    env = make_env("pettingzoo", "classic/tictactoe-v3", num_envs=4, seed=0, kind="cooperative", aec_mode="cycle")
    info = env.info
    assert info.agents == ["player_1", "player_2"] and list(info.groups) == ["player"]
    assert info.groups["player"].obs_dim == 18 and info.groups["player"].n_actions == 9
    s = env.reset()
    check_step(env, s)
    assert s.avail_actions["player"].all()  # empty board (player_2: not its turn -> any)
    s = env.step(env.random_actions(s))
    # one cycle = both players moved; player_1's mask is exactly the empty cells of its observation
    board = s.obs["player"][:, 0].reshape(4, 3, 3, 2).sum(-1).reshape(4, 9)
    assert torch.equal(s.avail_actions["player"][:, 0], board == 0)
    assert (board.sum(-1) == 2).all()
    ended = 0
    for _ in range(12):
        s = env.step(env.random_actions(s))
        check_step(env, s)
        assert s.info["illegal_actions"].shape == (4,)
        assert not s.truncated.any()
        d = s.terminated
        ended += int(d.sum())
        assert (s.reward["player"][d].sum(-1) == 0).all()  # +1/-1 or a draw
        assert (s.reward["player"][~d] == 0).all()
    assert ended >= 4

    ctor = lambda: pettingzoo.make("aec", "classic/tictactoe-v3")  # noqa: E731
    env2 = PettingZooEnv.from_object(ctor, num_envs=2, kind="competitive", teams={"x": ["player_1"], "o": ["player_2"]})
    assert env2.info.kind == "competitive" and list(env2.info.groups) == ["player_1", "player_2"]
    assert env2.info.teams == {"x": ["player_1"], "o": ["player_2"]}
    # competitive without teams: one prefix -> one team per agent
    env3 = PettingZooEnv.from_object(ctor, num_envs=1, kind="competitive")
    assert env3.info.teams == {"player_1": ["player_1"], "player_2": ["player_2"]}
    with pytest.raises(MarlError, match="Valid kwargs"):
        PettingZooEnv.from_object(ctor, num_envs=1, knd="competitive")


def test_pettingzoo_discrete_obs_one_hot_by_instance():
    inst = pettingzoo.make("parallel", "classic/rps-v2", max_cycles=3)
    env = make_env(inst, num_envs=3)  # by instance: copy 0 is inst, others deep copies
    assert env._envs[0] is inst and len({id(e) for e in env._envs}) == 3
    assert env.info.kind == "competitive" and list(env.info.groups) == ["player_0", "player_1"]  # zero-sum
    assert env.info.groups["player_0"].obs_dim == 4 and env.info.episode_limit == 3
    s = env.reset(seed=0)
    for g in ("player_0", "player_1"):
        assert torch.equal(s.obs[g].sum(-1), torch.ones(3, 1))  # one-hot
    for _ in range(3):
        s = env.step(env.random_actions(s))
    assert s.truncated.all()


def test_pettingzoo_construction_forms_agree_with_fast_mpe():
    from mpe2 import simple_tag_v3

    B, kw = 2, {"max_cycles": 4}
    envs = {
        "fast": make_env("mpe", "simple_tag", num_envs=B, **kw),
        "slow": make_env("mpe", "simple_tag", num_envs=B, fast=False, **kw),
        "by_name": make_env("pettingzoo", "mpe2.simple_tag_v3", num_envs=B, **kw),
        "by_instance": make_env(simple_tag_v3.parallel_env(**kw), num_envs=B),
        "by_constructor_aec": make_env(lambda: simple_tag_v3.env(**kw), num_envs=B),
    }
    assert envs["by_name"].info.kind == "mixed" and envs["slow"].info.kind == "competitive"
    steps = {k: e.reset(seed=3) for k, e in envs.items()}
    gen = torch.Generator().manual_seed(0)
    for _ in range(9):
        acts = envs["fast"].random_actions(steps["fast"], gen)
        steps = {k: e.step(acts) for k, e in envs.items()}
        ref = steps["fast"]
        for k, s in steps.items():
            assert torch.equal(ref.state, s.state), k
            assert torch.equal(ref.final_state, s.final_state), k
            assert torch.equal(ref.truncated, s.truncated) and torch.equal(ref.terminated, s.terminated), k
            for g in ref.reward:
                assert torch.equal(ref.reward[g], s.reward[g]), (k, g)


def test_build_groups_splits_prefix_by_spaces():
    box = lambda n: gym.spaces.Box(-1, 1, (n,), np.float32)  # noqa: E731
    d5 = gym.spaces.Discrete(5)
    agents = ["x_0", "x_1", "x_2", "y_0"]
    groups = build_groups(
        agents,
        {"x_0": box(2), "x_1": box(3), "x_2": box(3), "y_0": box(2)},
        {a: d5 for a in agents},
        {a: "team" for a in agents},
    )
    assert {n: g.agents for n, g in groups.items()} == {"x_0": ["x_0"], "x_g1": ["x_1", "x_2"], "y": ["y_0"]}


def test_pettingzoo_bad_objects():
    with pytest.raises(MarlError, match="constructor"):
        make_env(42)
    with pytest.raises(MarlError, match="num_envs"):
        make_env("pettingzoo", "mpe2.simple_v3", num_envs=0)
