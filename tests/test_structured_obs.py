"""Structured observations (issue 30, item 1): image ``Box`` and ``Dict`` spaces end to end.

The contract helpers, ``check_env`` and the runners' guard on the ``image_cue`` toy env
(``envs/cue.py``), the replay buffers (uint8 stays uint8), the on-policy sequences (one column per
key), the per-key encoders (Nature CNN and small images, uint8 scaling) and the ``flatten_obs``
wrapper. Learning checks are at the end (``ray_session``).
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch

import marl
from marl.algos.networks.encoders import ObsEncoder, fit_layers, uint8_scale
from marl.engine.on_policy import rollout_to_sequences
from marl.engine.replay import JointEpisodeBuffer, TransitionBuffer
from marl.env import GroupInfo, flatten_columns, map_obs, nest_columns, obs_dtypes
from marl.env.guard import EnvGuard
from marl.mapping import PolicyMapping

IMAGE = gym.spaces.Box(0, 255, (16, 16, 3), np.uint8)
VECTOR = gym.spaces.Box(-1.0, 1.0, (4,), np.float32)
DICT = gym.spaces.Dict({"image": IMAGE, "vector": VECTOR})


# ------------------------------------------------------------------ contract
def test_group_info_of_structured_spaces():
    g = GroupInfo("agent", ["a0", "a1"], DICT, gym.spaces.Discrete(4))
    assert g.structured and g.obs_shape == {"image": (16, 16, 3), "vector": (4,)}
    assert g.obs_dim == 16 * 16 * 3 + 4  # the flattened size
    assert obs_dtypes(DICT) == {"image": torch.uint8, "vector": torch.float32}
    flat = GroupInfo("agent", ["a0"], gym.spaces.Box(0, 255, (5,), np.uint8), gym.spaces.Discrete(2))
    assert not flat.structured and obs_dtypes(flat.obs_space) == {"obs": torch.float32}  # 1-D: float32 as before


def test_tree_helpers_map_flatten_and_nest():
    obs = {"image": torch.ones(2, 3, 5, 5, 3), "vector": torch.zeros(2, 3, 4)}
    shapes = map_obs(lambda t: t.reshape(-1, *t.shape[2:]).shape, obs)
    assert shapes == {"image": (6, 5, 5, 3), "vector": (6, 4)}
    cols = {"obs": obs, "actions": torch.zeros(2, 3)}
    flat = flatten_columns(cols)
    assert list(flat) == ["obs/image", "obs/vector", "actions"]
    assert nest_columns(flat)["obs"]["image"] is obs["image"]


@pytest.mark.parametrize("kind", ["dict", "image"])
def test_check_env_passes_image_cue(kind):
    env = marl.make_env("image_cue", num_envs=3, obs=kind, size=11, patch=2)
    text = marl.check_env(env, steps=20, verbose=False)
    assert "Box(11, 11, 3) uint8" in text
    step = env.reset(seed=0)
    image = step.obs["agent"]["image"] if kind == "dict" else step.obs["agent"]
    assert image.dtype == torch.uint8 and tuple(image.shape) == (3, 2, 11, 11, 3)


def test_image_cue_cue_is_in_the_image_only():
    """The cue band of each agent's image is the rewarded action; acting on it earns 1 per agent and step."""
    env = marl.make_env("image_cue", num_envs=4, size=16, patch=3)
    step = env.reset(seed=1)
    for _ in range(3):
        img = step.obs["agent"]["image"]  # [B, N, H, W, 3]
        rows = img.amax(dim=(-1, -2)) > 0  # [B, N, H]: rows holding the patch
        band = rows.float().argmax(-1) // (16 // 4)
        step = env.step({"agent": band})
        assert torch.equal(step.reward["agent"], torch.ones(4, 2))


def test_guard_casts_float_vector_key_and_keeps_uint8():
    env = marl.make_env("image_cue", num_envs=2)
    step = env.reset(seed=0)
    step.obs["agent"]["vector"] = step.obs["agent"]["vector"].double()
    guard = EnvGuard(env.info, "test")
    with pytest.warns(UserWarning, match=r"obs\['vector'\]"):
        out = guard(step, reset=True)
    assert out.obs["agent"]["vector"].dtype == torch.float32
    assert out.obs["agent"]["image"].dtype == torch.uint8


# ------------------------------------------------------------------ mapping, buffers, sequences
def _mapping(num_envs=2):
    env = marl.make_env("image_cue", num_envs=num_envs, size=8, patch=2, limit=3)
    return env, PolicyMapping(env.info, share="all", agent_id=True)


def test_module_obs_is_a_dict_with_agent_id():
    env, m = _mapping()
    obs = m.module_obs("shared", env.reset(seed=0).obs)
    assert list(obs) == ["image", "vector", "agent_id"]
    assert obs["image"].dtype == torch.uint8 and tuple(obs["agent_id"].shape) == (2, 2, 2)
    assert torch.equal(obs["agent_id"][1], torch.eye(2))
    assert m.obs_columns("shared")["obs/image"] == ((8, 8, 3), np.uint8)


def _rollout(env, m, T):
    """A runner-like rollout of random actions: module obs ``[T+1, B, N, ...]`` per key."""
    step = env.reset(seed=0)
    obs, final_obs, acts, rew, alive, term, trunc, state, fstate, starts = ([] for _ in range(10))
    start = torch.ones(env.num_envs, dtype=torch.bool)
    for _ in range(T):
        obs.append(m.module_obs("shared", step.obs))
        state.append(step.state)
        starts.append(start)
        a = env.random_actions(step)
        nxt = env.step(a)
        acts.append(a["agent"])
        rew.append(nxt.reward["agent"])
        alive.append(nxt.alive["agent"])
        final_obs.append(m.module_obs("shared", nxt.final_obs))
        fstate.append(nxt.final_state)
        term.append(nxt.terminated)
        trunc.append(nxt.truncated)
        start = nxt.done
        step = nxt
    obs.append(m.module_obs("shared", step.obs))
    state.append(step.state)

    def stack(x):
        return {k: torch.stack([s[k] for s in x]) for k in x[0]} if isinstance(x[0], dict) else torch.stack(x)

    module = dict(obs=stack(obs), final_obs=stack(final_obs), actions=stack(acts), rewards=stack(rew))
    module.update(alive=stack(alive), logp=torch.zeros(T, env.num_envs, 2))
    module.update(avail=torch.ones(T, env.num_envs, 2, 4, dtype=torch.bool))
    module["final_avail"] = module["avail"]
    return {
        "modules": {"shared": module},
        "state": stack(state),
        "final_state": stack(fstate),
        "terminated": stack(term),
        "truncated": stack(trunc),
        "starts": stack(starts),
    }


def test_joint_episode_buffer_stores_uint8_images():
    env, m = _mapping()
    shapes = {"shared": {"n": 2, "obs_dim": m.obs_dim("shared"), "obs": m.obs_columns("shared"), "n_actions": 4}}
    buf = JointEpisodeBuffer(8, 3, 2, shapes, env.info.state_dim)
    rollout = _rollout(env, m, 6)
    assert buf.add_rollout(rollout) == 4  # two episodes of 3 steps per copy
    assert buf.data["shared/obs/image"].dtype == np.uint8
    assert "shared/obs" not in buf.data
    # the first episode of copy 0: steps 0..2, then its final observation at index 3
    img = rollout["modules"]["shared"]["obs"]["image"][:, 0]
    slot = 0
    assert np.array_equal(buf.data["shared/obs/image"][slot, :3], img[:3].numpy())
    final = rollout["modules"]["shared"]["final_obs"]["image"][2, 0]
    assert np.array_equal(buf.data["shared/obs/image"][slot, 3], final.numpy())
    batch = buf.sample(4, np.random.default_rng(0))
    assert batch["shared/obs/image"].shape == (4, 4, 2, 8, 8, 3)


def test_transition_buffer_stores_uint8_images():
    env, m = _mapping()
    shapes = {"shared": {"n": 2, "obs_dim": m.obs_dim("shared"), "obs": m.obs_columns("shared"), "n_actions": 4}}
    buf = TransitionBuffer(100, shapes, env.info.state_dim)
    rollout = _rollout(env, m, 4)
    buf.add_rollout(rollout)
    assert buf.data["shared/next_obs/image"].dtype == np.uint8
    want = rollout["modules"]["shared"]["final_obs"]["image"][1, 1].numpy()  # t=1, b=1: row t*B+b = 3
    assert np.array_equal(buf.data["shared/next_obs/image"][3], want)


@pytest.mark.parametrize("critic", ["state", "obs"])
def test_sequences_keep_one_column_per_key(critic):
    env, m = _mapping()
    batch = rollout_to_sequences(_rollout(env, m, 5), critic)
    rows = batch.policy_batches["shared"]
    assert rows["obs/image"].dtype == np.uint8 and rows["obs/image"].shape == (4, 6, 8, 8, 3)  # [B*N, T+1, ...]
    if critic == "obs":
        assert np.array_equal(rows["critic_in/image"], rows["obs/image"])
    else:
        assert rows["critic_in"].shape == (4, 6, env.info.state_dim + 2)


# ------------------------------------------------------------------ encoders
def test_fit_layers_clip_kernels_to_small_images():
    assert fit_layers((84, 84), [8, 4, 3], [4, 2, 1]) == [(8, 4), (4, 2), (3, 1)]  # 84 -> 20 -> 9 -> 7
    assert fit_layers((11, 11), [8, 4, 3], [4, 2, 1]) == [(8, 4), (1, 1), (1, 1)]  # 11 -> 1
    assert fit_layers((5, 5), [8, 4, 3], [4, 2, 1]) == [(5, 1), (1, 1), (1, 1)]


@pytest.mark.parametrize("side,out", [(84, 512), (36, 512), (16, 128), (11, 128), (5, 128)])
def test_encoder_builds_for_every_image_size(side, out):
    space = gym.spaces.Dict({"image": gym.spaces.Box(0, 255, (side, side, 3), np.uint8), "vector": VECTOR})
    enc = ObsEncoder(space)
    x = {"image": torch.randint(0, 256, (2, 3, side, side, 3), dtype=torch.uint8), "vector": torch.zeros(2, 3, 4)}
    assert enc.out_dim == out + 4 and tuple(enc(x).shape) == (2, 3, out + 4)


def test_encoder_scales_uint8_by_1_over_255():
    torch.manual_seed(0)
    as_bytes = ObsEncoder(gym.spaces.Box(0, 255, (8, 8, 3), np.uint8))
    as_floats = ObsEncoder(gym.spaces.Box(0.0, 1.0, (8, 8, 3), np.float32))
    as_floats.load_state_dict(as_bytes.state_dict())
    x = torch.randint(0, 256, (4, 8, 8, 3), dtype=torch.uint8)
    assert torch.allclose(as_bytes(x), as_floats(x.float() / 255.0), atol=1e-6)


def test_encoder_scales_uint8_by_each_elements_bound():
    """Feature planes with their own bounds (Overcooked's: 0/1 planes and a 0..20 counter) are scaled by
    those bounds, not by 1/255: a plane at its bound reads 1.0 (1/255 made a 0/1 plane 0.004)."""
    high = np.ones((4, 5, 3), np.uint8)
    high[..., 2] = 20
    planes = gym.spaces.Box(0, high, dtype=np.uint8)
    scale = uint8_scale(planes)
    assert scale.shape == (4, 5, 3) and scale[0, 0, 0] == 1.0 and scale[0, 0, 2] == np.float32(1 / 20)
    assert uint8_scale(gym.spaces.Box(0, 255, (8, 8, 3), np.uint8)) == 1 / 255  # pixels: the exact old path
    assert uint8_scale(gym.spaces.Box(0, 0, (2,), np.uint8)) == 1.0  # a bound below 1 counts as 1
    assert uint8_scale(gym.spaces.Box(0.0, 20.0, (2,), np.float32)) is None  # floats are fed as they are
    torch.manual_seed(0)
    as_bytes = ObsEncoder(planes)
    as_floats = ObsEncoder(gym.spaces.Box(0.0, 1.0, (4, 5, 3), np.float32))
    as_floats.load_state_dict(as_bytes.state_dict())  # the scale is no checkpoint entry
    x = torch.from_numpy(np.broadcast_to(high, (2, 4, 5, 3)).copy())  # every element at its bound
    assert torch.allclose(as_bytes(x), as_floats(torch.ones(2, 4, 5, 3)), atol=1e-6)


def test_encoder_layers_from_config():
    space = gym.spaces.Dict({"image": IMAGE, "vector": VECTOR})
    enc = ObsEncoder(
        space, {"cnn": {"channels": [8], "kernels": [4], "strides": [4], "fc": []}, "mlp": {"hidden": [5]}}
    )
    assert enc.out_dim == 8 * 4 * 4 + 5


def test_encoder_takes_keys_with_dots():
    """A PettingZoo or Gymnasium Dict key may hold a '.', which ``nn.ModuleDict`` refuses as a name: such a key's
    net is named with '_' for each '.', a name another key already has gets its position appended, and every key
    keeps its own net (its output block depends on that key only)."""
    space = gym.spaces.Dict({"cam.rgb": IMAGE, "cam_rgb": VECTOR, "pos.xy": VECTOR})
    enc = ObsEncoder(space)
    assert enc.module_name == {"cam.rgb": "cam_rgb_0", "cam_rgb": "cam_rgb", "pos.xy": "pos_xy"}
    assert set(enc.nets) == set(enc.module_name.values())
    obs = {k: torch.as_tensor(np.stack([b.sample() for _ in range(3)])) for k, b in space.items()}
    out = enc(obs)
    moved = dict(obs, **{"pos.xy": obs["pos.xy"] + 1.0})
    width = enc.nets["pos_xy"].out_dim
    changed = (enc(moved) != out).any(0)
    assert out.shape == (3, enc.out_dim) and changed[-width:].all() and not changed[:-width].any()
    plain = ObsEncoder(gym.spaces.Dict({"image": IMAGE, "vector": VECTOR}))  # keys without dots keep their names
    assert list(plain.nets) == ["image", "vector"]


# ------------------------------------------------------------------ flatten_obs
def test_flatten_obs_wrapper_concatenates_keys():
    raw = marl.make_env("image_cue", num_envs=2, size=8, patch=2)
    env = marl.make_env("image_cue", num_envs=2, size=8, patch=2, flatten_obs=True)
    assert not env.info.groups["agent"].structured and env.info.groups["agent"].obs_dim == 8 * 8 * 3 + 4
    a, b = raw.reset(seed=3).obs["agent"], env.reset(seed=3).obs["agent"]
    want = torch.cat([a["image"].reshape(2, 2, -1).float(), a["vector"]], -1)
    assert b.dtype == torch.float32 and torch.equal(b, want)
    marl.check_env(env, steps=10, verbose=False)


# ------------------------------------------------------------------ memory benchmark
def test_obs_memory_counts_what_is_stored():
    from marl.benchmarks.obs_memory import measure, rollout_obs_bytes

    env, m = _mapping()
    rollout = _rollout(env, m, 6)  # T=6, B=2
    mod = rollout["modules"]["shared"]
    stored = sum(t.numel() * t.element_size() for col in ("obs", "final_obs") for t in mod[col].values())
    assert rollout_obs_bytes(m, 12, 2) == stored
    uint8, float32 = measure(side=16, agents=2, steps=10, rollout_steps=160, num_envs=4)
    image = 11 * 2 * 16 * 16 * 3  # 11 observations of 2 agents in one 10-step episode
    assert float32.episode_bytes - uint8.episode_bytes == 3 * image  # 4 bytes per image value instead of 1
    assert float32.rollout_bytes - uint8.rollout_bytes == 3 * (2 * 40 + 1) * 4 * 2 * 16 * 16 * 3


# ------------------------------------------------------------------ learning (image_cue: 8 steps x 2 agents)
CHANCE = 8 * 2 / 4  # 4.0: any policy blind to the image is right 1 time in 4 (the vector carries no cue)
BAR = 12.0  # of the optimum 16


def test_random_play_earns_chance():
    """Uniform actions over 4 episodes of 64 copies: mean return 4.0 +- 0.5 (binomial std of the mean ~0.08)."""
    env = marl.make_env("image_cue", num_envs=64)
    step, ret, gen = env.reset(seed=0), torch.zeros(64), torch.Generator().manual_seed(0)
    for _ in range(8 * 4):
        step = env.step(env.random_actions(step, gen))
        ret += step.reward["agent"].sum(-1)
    assert abs(float(ret.mean()) / 4 - CHANCE) < 0.5


PPO_VARIANTS = [
    pytest.param("mappo", {}, id="mappo"),
    pytest.param("ippo", {}, id="ippo-obs-critic"),
    pytest.param("mappo", {"recurrent": True, "chunk_length": 8}, id="mappo-gru", marks=pytest.mark.slow),
    pytest.param("mappo", {"critic": "state", "num_minibatches": 2}, id="mappo-state-critic", marks=pytest.mark.slow),
]


@pytest.mark.parametrize("algo,extra", PPO_VARIANTS)
def test_ppo_reads_the_image(algo, extra, ray_session, run_dir):
    """MAPPO / IPPO (actor through the small CNN + identity vector encoder; IPPO's critic reads the Dict
    observation through its own encoder): greedy return after 10 iterations of 16 x 16 steps (2,560 env
    steps). Measured: MAPPO seeds 0/1/2 16.0 / 16.0 / 16.0 (about 45 s each on the shared 2-core machine);
    seed 0 of IPPO, MAPPO-GRU and MAPPO with the state critic and 2 minibatches: 16.0 each. Chance (random
    play, or any policy that ignores the image) is 4.0 of 16, the bar 12."""
    env = marl.make_env("image_cue", num_envs=16)
    res = env.fit(
        algo,
        stop={"iterations": 10},
        log_dir=run_dir,
        progress=False,
        rollout_length=16,
        eval_episodes=64,
        seed=0,
        **extra,
    )
    assert res.eval["episode_return_mean"] >= BAR, res.eval


QLEARN = dict(
    epsilon_anneal_steps=3000,
    batch_size=32,
    episodes_per_update=4,
    target_update_interval=20,
    td_lambda=0.0,
    gamma=0.5,
    recurrent=False,
    eval_episodes=64,
    seed=0,
)


@pytest.mark.parametrize("algo", ["iql", "qmix"])
def test_q_learning_reads_the_image(algo, ray_session, run_dir):
    """IQL / QMIX (feed-forward Q-network behind the encoder, uint8 replay): greedy return after 8,000 env steps,
    seeds 0/1/2: IQL 16.0 / 16.0 / 16.0, QMIX 16.0 / 16.0 / 16.0 (40-100 s each on the shared 2-core machine);
    chance 4.0 of 16, the bar 12."""
    env = marl.make_env("image_cue", num_envs=16)
    res = env.fit(algo, stop={"env_steps": 8000}, log_dir=run_dir, progress=False, **QLEARN)
    assert res.eval["episode_return_mean"] >= BAR, res.eval
