"""Structured observations through the generic adapters (issue 30, item 1): a PettingZoo ``ParallelEnv`` and a
Gymnasium multi-agent env of a third party, with an image ``Box`` or a ``Dict`` of {image, vector}, keep their
structure (``obs[g]`` ``[B, N_g, *shape]`` per key, uint8 kept uint8); other spaces flatten as before; the state
stays the flat float32 vector of every agent's flattened observation; ``flatten_obs=True`` gives the old vector.

The test env is ``envs/cue.py``'s task written as a user would write it for PettingZoo / Gymnasium: each agent's
rewarded action is the band of its ``12 x 12`` RGB image that holds a bright square; its ``"vec"`` carries the
episode's progress and noise, nothing about the cue.
"""

from __future__ import annotations

import functools
import time
from typing import Any, Dict, Optional

import gymnasium as gym
import numpy as np
import pytest
import torch
from pettingzoo import ParallelEnv

import marl
from marl.env.rules import EnvRuleError
from marl.errors import MarlError

SIZE, PATCH, VEC = 12, 3, 4
RGB = gym.spaces.Box(0, 255, (SIZE, SIZE, 3), np.uint8)
VECTOR = gym.spaces.Box(-1.0, 1.0, (VEC,), np.float32)


class Cue:
    """The task's state and draws, shared by the PettingZoo and the Gymnasium form.

    Args:
        n_agents; n_actions: bands of the image (``SIZE // n_actions`` rows each); limit: steps per episode;
        obs: ``"dict"`` (``Dict(rgb, vec)``), ``"rgb"`` (the image Box alone) or ``"discrete"`` (a ``Dict`` that
            also holds a ``Discrete`` key: flattened); sizes: agent index -> image side (agents that differ);
        bad: a broken observation (``"shape"``, ``"float"``, ``"range"``, ``"key"``, ``"text"``); rgb_dtype: the
            image's dtype (uint8, or a float dtype with values in [0, 1]).
    """

    def __init__(
        self,
        n_agents: int = 2,
        n_actions: int = 3,
        limit: int = 4,
        obs: str = "dict",
        sizes: Optional[Dict[int, int]] = None,
        bad: Optional[str] = None,
        rgb_dtype: Any = np.uint8,
    ):
        self.names = [f"agent_{i}" for i in range(n_agents)]
        self.A, self.limit, self.kind, self.bad = n_actions, limit, obs, bad
        self.sizes = [(sizes or {}).get(i, SIZE) for i in range(n_agents)]
        self.spaces = [self._space(s, rgb_dtype) for s in self.sizes]
        self.rng = np.random.default_rng()
        self.t, self.cue = 0, np.zeros(n_agents, np.int64)
        self.last: list = []

    def _space(self, side: int, dtype: Any) -> gym.spaces.Space:
        hi = 255 if dtype == np.uint8 else 1.0
        rgb = gym.spaces.Box(0, hi, (side, side, 3), dtype)
        if self.kind == "rgb":
            return rgb
        keys: Dict[str, gym.spaces.Space] = {"rgb": rgb, "vec": VECTOR}
        if self.kind == "discrete":
            keys["turn"] = gym.spaces.Discrete(3)
        return gym.spaces.Dict(keys)

    def reset(self, seed: Optional[int]) -> list:
        if seed is not None:
            self.rng = np.random.default_rng(seed)
        self.t = 0
        return self._draw()

    def step(self, actions) -> tuple:
        reward = [float(int(a) == c) for a, c in zip(actions, self.cue)]
        self.t += 1
        return self._draw(), reward, self.t >= self.limit

    def _draw(self) -> list:
        out = []
        for i, side in enumerate(self.sizes):
            band = side // self.A
            self.cue[i] = self.rng.integers(self.A)
            top = self.cue[i] * band + self.rng.integers(band - PATCH + 1)
            left = self.rng.integers(side - PATCH + 1)
            img = np.zeros((side, side, 3), np.uint8)
            img[top : top + PATCH, left : left + PATCH] = self.rng.integers(128, 256, 3)
            vec = np.concatenate([[self.t / self.limit], self.rng.uniform(-1, 1, VEC - 1)]).astype(np.float32)
            out.append(self._obs(img, vec, i))
        self.last = out
        return out

    def _obs(self, img: np.ndarray, vec: np.ndarray, i: int) -> Any:
        space = self.spaces[i] if self.kind == "rgb" else self.spaces[i]["rgb"]
        if space.dtype != np.uint8:
            img = img.astype(space.dtype) / 255
        broken = self.bad
        if broken == "shape":
            img = np.zeros((SIZE, SIZE, 4), np.uint8)
        elif broken == "float":
            img = img.astype(np.float32)
        elif broken == "range":
            img = np.full((SIZE, SIZE, 3), 300, np.int16)
        elif broken == "text":
            img = np.full((SIZE, SIZE, 3), "x")
        if self.kind == "rgb":
            return img
        o: Dict[str, Any] = {"rgb": img, "vec": vec}
        if self.kind == "discrete":
            o["turn"] = self.t % 3
        if broken == "key":
            del o["vec"]
        return o


class CuePZ(ParallelEnv):
    """:class:`Cue` as a PettingZoo ``ParallelEnv`` (agents ``agent_i``; episodes end by truncation)."""

    metadata = {"name": "cue_pz_v0"}

    def __init__(self, **kw: Any):
        self.core = Cue(**kw)
        self.possible_agents = list(self.core.names)
        self.agents: list = []

    def observation_space(self, agent: str) -> gym.spaces.Space:
        return self.core.spaces[self.possible_agents.index(agent)]

    def action_space(self, agent: str) -> gym.spaces.Space:
        return gym.spaces.Discrete(self.core.A)

    def reset(self, seed=None, options=None):
        self.agents = list(self.possible_agents)
        return dict(zip(self.agents, self.core.reset(seed))), {a: {} for a in self.agents}

    def step(self, actions):
        obs, reward, end = self.core.step([actions[a] for a in self.possible_agents])
        names = self.possible_agents
        out = (dict(zip(names, obs)), dict(zip(names, reward)), dict.fromkeys(names, False), dict.fromkeys(names, end))
        if end:
            self.agents = []
        return (*out, {a: {} for a in names})


class CueGym(gym.Env):
    """:class:`Cue` as a Gymnasium multi-agent env (``Tuple`` spaces, a reward list: EPyMARL's convention)."""

    def __init__(self, **kw: Any):
        self.core = Cue(**kw)
        self.observation_space = gym.spaces.Tuple(self.core.spaces)
        self.action_space = gym.spaces.Tuple([gym.spaces.Discrete(self.core.A)] * len(self.core.names))

    def reset(self, seed=None, options=None):
        return tuple(self.core.reset(seed)), {}

    def step(self, actions):
        obs, reward, end = self.core.step(actions)
        return tuple(obs), reward, False, end, {}


def pz(num_envs: int = 3, seed: Optional[int] = 0, flatten_obs: bool = False, **kw: Any) -> Any:
    """A user's ParallelEnv through ``make_env(constructor)`` (the ``"pettingzoo"`` family's object factory)."""
    return marl.make_env(functools.partial(CuePZ, **kw), num_envs=num_envs, seed=seed, flatten_obs=flatten_obs)


def gy(num_envs: int = 3, seed: Optional[int] = 0, flatten_obs: bool = False, **kw: Any) -> Any:
    """A user's Gymnasium env class through ``make_env(EnvClass, **env_kwargs)`` (the ``"gymnasium"`` family)."""
    return marl.make_env(CueGym, num_envs=num_envs, seed=seed, flatten_obs=flatten_obs, **kw)


BUILDERS = [pytest.param(pz, id="pettingzoo"), pytest.param(gy, id="gymnasium")]


def _core(env: Any, b: int) -> Cue:
    """Copy ``b``'s :class:`Cue` (through marl's wrappers, if any)."""
    env = env.unwrapped if isinstance(env, marl.env.Wrapper) else env
    return env._envs[b].unwrapped.core


def _raw(env: Any, b: int) -> list:
    """Copy ``b``'s own last observations, one per agent (what the adapter read)."""
    return _core(env, b).last


# ------------------------------------------------------------------ (a), (b): shapes, dtypes, state, auto-reset
@pytest.mark.parametrize("make", BUILDERS)
def test_dict_observation_stays_structured(make):
    env = make()
    g = env.info.groups["agent"]
    assert list(env.info.groups) == ["agent"] and g.agents == ["agent_0", "agent_1"]
    assert isinstance(g.obs_space, gym.spaces.Dict) and list(g.obs_space.spaces) == ["rgb", "vec"]
    assert g.obs_space["rgb"].dtype == np.uint8 and g.obs_shape == {"rgb": (SIZE, SIZE, 3), "vec": (VEC,)}
    per_agent = SIZE * SIZE * 3 + VEC
    assert env.info.state_dim == 2 * per_agent  # every agent's flattened observation, the image included
    s = env.reset(seed=0)
    rgb, vec = s.obs["agent"]["rgb"], s.obs["agent"]["vec"]
    assert rgb.dtype == torch.uint8 and tuple(rgb.shape) == (3, 2, SIZE, SIZE, 3)
    assert vec.dtype == torch.float32 and tuple(vec.shape) == (3, 2, VEC)
    assert s.state.dtype == torch.float32 and tuple(s.state.shape) == (3, 2 * per_agent)
    for b in range(3):
        for i, raw in enumerate(_raw(env, b)):
            assert np.array_equal(rgb[b, i].numpy(), raw["rgb"]) and np.array_equal(vec[b, i].numpy(), raw["vec"])
            # the state: agent i's image row-major (0..255 as floats), then its vector
            flat = np.concatenate([raw["rgb"].reshape(-1).astype(np.float32), raw["vec"]])
            assert np.array_equal(s.state[b, i * per_agent : (i + 1) * per_agent].numpy(), flat)
            core = _core(env, b)
            band = np.flatnonzero(raw["rgb"].max(axis=(1, 2)))  # the rows of the bright square
            assert (band // (SIZE // 3) == core.cue[i]).all() and len(band) == PATCH


@pytest.mark.parametrize("make", BUILDERS)
def test_auto_reset_keeps_the_last_structured_observation(make):
    env = make(limit=4)
    s = env.reset(seed=1)
    for t in range(1, 5):
        s = env.step({"agent": torch.zeros(3, 2, dtype=torch.long)})
        assert bool(s.truncated.all()) == (t == 4) and not s.terminated.any()
    # vec[0] is t / limit: 1.0 in the episode's last observation, 0.0 in the next episode's first
    assert (s.final_obs["agent"]["vec"][..., 0] == 1.0).all() and (s.obs["agent"]["vec"][..., 0] == 0.0).all()
    assert s.final_obs["agent"]["rgb"].dtype == torch.uint8
    assert not torch.equal(s.final_obs["agent"]["rgb"], s.obs["agent"]["rgb"])
    last = s.final_obs["agent"]
    flat = torch.cat([last["rgb"].reshape(3, 2, -1).float(), last["vec"]], -1).reshape(3, -1)
    assert torch.equal(s.final_state, flat) and not torch.equal(s.final_state, s.state)


@pytest.mark.parametrize("make", BUILDERS)
def test_seeding_gives_identical_structured_observations(make):
    def run(seed: int) -> list:
        env = make(seed=None)
        s, out = env.reset(seed=seed), []
        gen = torch.Generator().manual_seed(0)
        for _ in range(6):  # crosses an episode end (limit 4): the copies continue their own RNG streams
            out.append(s.obs["agent"])
            s = env.step(env.random_actions(s, gen))
        return out

    a, b, c = run(7), run(7), run(8)
    assert all(torch.equal(x[k], y[k]) for x, y in zip(a, b) for k in ("rgb", "vec"))
    assert not torch.equal(a[0]["rgb"], c[0]["rgb"])


@pytest.mark.parametrize("make", BUILDERS)
def test_check_env_passes(make):
    text = marl.check_env(make(), steps=20, verbose=False)
    assert "Dict(rgb: Box(12, 12, 3) uint8, vec: Box(4,))" in text


@pytest.mark.parametrize("make", BUILDERS)
def test_image_box_alone_is_a_tensor(make):
    env = make(obs="rgb")
    g = env.info.groups["agent"]
    assert isinstance(g.obs_space, gym.spaces.Box) and g.obs_space.shape == (SIZE, SIZE, 3)
    s = env.reset(seed=0)
    assert s.obs["agent"].dtype == torch.uint8 and tuple(s.obs["agent"].shape) == (3, 2, SIZE, SIZE, 3)
    assert env.info.state_dim == 2 * SIZE * SIZE * 3
    marl.check_env(env, steps=10, verbose=False)


@pytest.mark.parametrize("make", BUILDERS)
def test_float64_image_becomes_float32(make):
    env = make(obs="rgb", rgb_dtype=np.float64)
    assert env.info.groups["agent"].obs_space.dtype == np.float32
    s = env.reset(seed=0)
    assert s.obs["agent"].dtype == torch.float32 and float(s.obs["agent"].max()) <= 1.0
    assert np.allclose(s.obs["agent"][0, 0].numpy(), _raw(env, 0)[0])


@pytest.mark.parametrize("make", BUILDERS)
def test_dict_with_a_discrete_key_is_flattened_as_before(make):
    env = make(obs="discrete")
    g = env.info.groups["agent"]
    assert not g.structured and g.obs_dim == SIZE * SIZE * 3 + 3 + VEC  # rgb, turn (one-hot), vec: sorted keys
    s = env.reset(seed=0)
    raw = _raw(env, 0)[1]
    space = CuePZ(obs="discrete").observation_space("agent_1")
    assert torch.equal(s.obs["agent"][0, 1], torch.from_numpy(gym.spaces.flatten(space, raw).astype(np.float32)))


@pytest.mark.parametrize("make", BUILDERS)
def test_agents_with_different_image_shapes_get_their_own_groups(make):
    # as for any two agents whose spaces differ: one group each (named after the agent), structured each
    env = make(sizes={1: 9})
    assert {n: g.obs_shape["rgb"] for n, g in env.info.groups.items()} == {"agent_0": (12, 12, 3), "agent_1": (9, 9, 3)}
    s = env.reset(seed=0)
    assert tuple(s.obs["agent_1"]["rgb"].shape) == (3, 1, 9, 9, 3)
    assert env.info.state_dim == 12 * 12 * 3 + 9 * 9 * 3 + 2 * VEC
    marl.check_env(env, steps=10, verbose=False)


# ------------------------------------------------------------------ (e) flatten_obs=True: the old flat vector
@pytest.mark.parametrize("make", BUILDERS)
def test_flatten_obs_gives_the_old_flat_vector(make):
    env = make(flatten_obs=True)
    g = env.info.groups["agent"]
    assert not g.structured and g.obs_dim == SIZE * SIZE * 3 + VEC
    s = env.reset(seed=0)
    space = CuePZ().observation_space("agent_0")
    for b in range(3):
        for i, raw in enumerate(_raw(env, b)):
            old = gym.spaces.flatten(space, raw).astype(np.float32)  # what the adapters gave before (read_obs)
            assert np.array_equal(s.obs["agent"][b, i].numpy(), old)
    assert torch.equal(s.state, s.obs["agent"].reshape(3, -1))  # the state: the same vectors, agent order


# ------------------------------------------------------------------ (c) a real PettingZoo env with image views
def test_magent2_adversarial_pursuit_keeps_its_views():
    """MAgent2 (``pip install magent2``): each agent sees a ``[view, view, 5]`` float32 map around it."""
    pursuit = pytest.importorskip("magent2.environments.adversarial_pursuit_v4")
    env = marl.make_env(lambda: pursuit.parallel_env(map_size=20, max_cycles=10), num_envs=2, seed=0)
    groups = {n: (g.n_agents, g.obs_shape) for n, g in env.info.groups.items()}
    assert groups == {"predator": (5, (10, 10, 5)), "prey": (10, (9, 9, 5))}
    s = env.reset(seed=0)
    assert s.obs["predator"].dtype == torch.float32 and tuple(s.obs["predator"].shape) == (2, 5, 10, 10, 5)
    assert s.state.shape == (2, 5 * 500 + 10 * 405)
    text = marl.check_env(env, steps=25, verbose=False)
    assert "Box(10, 10, 5)" in text and "Box(9, 9, 5)" in text


def test_classic_board_planes_are_structured():
    """PettingZoo's classic boards (``Box(3, 3, 2)`` int8 planes under ``"observation"``) keep their shape,
    as float32; the action mask is still read from the observation dict."""
    env = marl.make_env("pettingzoo", "tictactoe_v3", num_envs=2, seed=0)
    assert env.info.groups["player_1"].obs_shape == (3, 3, 2)
    s = env.reset()
    assert s.obs["player_1"].dtype == torch.float32 and tuple(s.obs["player_1"].shape) == (2, 1, 3, 3, 2)
    assert s.avail_actions["player_1"].all() and s.state.shape == (2, 36)


# ------------------------------------------------------------------ bad input: one table
BAD = [
    pytest.param(
        dict(bad="shape"),
        EnvRuleError,
        "[rule obs_space] env pettingzoo:cue_pz_v0, at reset, env copy 0, agent 'agent_0', key 'obs['rgb']': "
        "shape (12, 12, 4); the declared space Box(0, 255, (12, 12, 3), uint8) has (12, 12, 3)",
        id="image-shape",
    ),
    pytest.param(
        dict(bad="float"),
        EnvRuleError,
        "dtype float32 for a uint8 Box (expected uint8 values 0..255)",
        id="float-for-uint8",
    ),
    pytest.param(dict(bad="range"), EnvRuleError, "values in [300, 300] for a uint8 Box", id="uint8-range"),
    pytest.param(dict(bad="key"), EnvRuleError, "needs ['vec']", id="missing-key"),
    pytest.param(dict(bad="text"), EnvRuleError, "[rule obs_dtype]", id="text-image"),
]


@pytest.mark.parametrize("kw,err,fragment", BAD)
def test_bad_structured_observations(kw, err, fragment):
    env = pz(num_envs=1, **kw)
    with pytest.raises(err) as info:
        s = env.reset(seed=0)
        env.step(env.random_actions(s))
    assert isinstance(info.value, MarlError) and fragment in str(info.value), str(info.value)


def test_copies_that_disagree_on_the_image_shape_are_an_error():
    """A constructor whose copies differ (copy 1 sees 9 x 9 images, copy 0 declared 12 x 12): copy 1's first
    observation does not fit the group's space."""
    sizes = iter([{}, {0: 9, 1: 9}])
    with pytest.raises(EnvRuleError, match=r"env copy 1, agent 'agent_0', key 'obs\['rgb'\]': shape \(9, 9, 3\)"):
        marl.make_env(lambda: CuePZ(sizes=next(sizes)), num_envs=2).reset(seed=0)


# ------------------------------------------------------------------ (d) learning: the image is read
def test_ippo_reads_the_image_of_a_pettingzoo_env(ray_session, run_dir):
    """IPPO on :class:`CuePZ` through the PettingZoo adapter (2 agents, 3 actions, 4 steps per episode: optimum 8;
    any policy blind to the image, the vector carries no cue, earns 8 / 3 = 2.67 in expectation). Greedy return
    over 64 episodes after 8 iterations of 16 copies x 16 steps (2,048 env steps): seeds 0 / 1 / 2 gave 8.0 / 8.0 /
    8.0 in 17 / 14 / 11 s of training on the shared 2-core machine; the bar is 6.5."""
    start = time.time()
    env = pz(num_envs=16, seed=0)
    res = env.fit(
        "ippo",
        stop={"iterations": 8},
        log_dir=run_dir,
        progress=False,
        rollout_length=16,
        eval_episodes=64,
        seed=0,
        encoder={"cnn": {"channels": [16], "kernels": [3], "strides": [2], "fc": [64]}},
    )
    print("ippo on CuePZ:", res.eval["episode_return_mean"], f"{time.time() - start:.1f} s")
    assert res.eval["episode_return_mean"] >= 6.5, res.eval
    layers = [m for module in res.policy.modules.values() for m in module.modules()]
    assert any(isinstance(m, torch.nn.Conv2d) for m in layers)  # the image went through the CNN encoder
