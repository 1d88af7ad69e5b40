"""Entity layouts (``EnvInfo.entity_layout``): check_entity_layout, user-declared layouts, MPE simple_spread.

No Ray, tiny batches: the whole file runs in a few seconds.
"""

import gymnasium as gym
import numpy as np
import pytest
import torch
from mpe2 import simple_tag_v3

from marl.env import EnvInfo, GroupInfo, MarlError, check_entity_layout, make_env
from marl.envs.pettingzoo import PettingZooEnv


def entity_view(obs: torch.Tensor, spec: dict) -> torch.Tensor:
    """``obs [..., D]`` -> ``[..., count, d]`` features of one entity type (``start``/``dim`` or ``fields``)."""
    fields = spec.get("fields") or [(spec["start"], spec["dim"])]
    m = spec["count"]
    return torch.cat([obs[..., s : s + m * d].reshape(*obs.shape[:-1], m, d) for s, d in fields], -1)


def own_view(obs: torch.Tensor, layout: dict) -> torch.Tensor:
    return torch.cat([obs[..., s:e] for s, e in layout["own"]], -1)


# --------------------------------------------------------------------------- MPE simple_spread


def raw_worlds(env):
    """The mpe2 worlds of the ``B`` copies (fast path: raw_env; PettingZoo path: parallel_env)."""
    return [getattr(e, "unwrapped", e).world for e in env._envs]


@pytest.mark.parametrize("fast", [True, False])
@pytest.mark.parametrize("N", [3, 5])
def test_simple_spread_layout_matches_the_world(N, fast):
    # mpe2's worlds are read directly: the mpe2 backends (the torch backend has the same layout:
    # tests/test_mpe_backends.py)
    env = make_env("mpe", "simple_spread", N=N, num_envs=2, fast=fast, **({"backend": "mpe2"} if fast else {}))
    lay = env.info.entity_layout["agent"]
    assert check_entity_layout(env.info.entity_layout, env.info) == env.info.entity_layout
    assert lay["own"] == [(0, 4)] and lay["n_normal_actions"] == 5 and lay["action_targets"] == {}
    assert lay["entities"]["landmark"] == {"start": 4, "count": N, "dim": 2}
    p_other, p_comm = 4 + 2 * N, 4 + 2 * N + 2 * (N - 1)
    assert lay["entities"]["agent"] == {"fields": [(p_other, 2), (p_comm, 2)], "count": N - 1}
    assert p_comm + 2 * (N - 1) == env.info.groups["agent"].obs_dim  # own + entities cover the observation
    s = env.reset(seed=3)
    for _ in range(3):
        s = env.step(env.random_actions(s))
    obs = s.obs["agent"]  # [B, N, D]
    own = own_view(obs, lay)
    landmarks = entity_view(obs, lay["entities"]["landmark"])  # [B, N, N, 2]
    others = entity_view(obs, lay["entities"]["agent"])  # [B, N, N-1, 4]
    for b, world in enumerate(raw_worlds(env)):
        for i, agent in enumerate(world.agents):
            want_own = np.concatenate([agent.state.p_vel, agent.state.p_pos])
            want_land = np.stack([lm.state.p_pos - agent.state.p_pos for lm in world.landmarks])
            want_other = np.stack(
                [np.concatenate([o.state.p_pos - agent.state.p_pos, o.state.c]) for o in world.agents if o is not agent]
            )
            np.testing.assert_allclose(own[b, i].numpy(), want_own, atol=1e-6)
            np.testing.assert_allclose(landmarks[b, i].numpy(), want_land, atol=1e-6)
            np.testing.assert_allclose(others[b, i].numpy(), want_other, atol=1e-6)


def test_simple_spread_layout_continuous_neighbours_and_other_scenarios():
    cont = make_env("mpe", "simple_spread", N=4, num_envs=1, continuous_actions=True).info.entity_layout["agent"]
    assert set(cont) == {"own", "entities"}  # continuous actions: no n_normal_actions / action_targets
    near = make_env("mpe", "simple_spread", N=4, num_envs=1, num_agent_neighbors=2, num_landmark_neighbors=3)
    lay = near.info.entity_layout["agent"]
    assert lay["entities"]["landmark"]["count"] == 3 and lay["entities"]["agent"]["count"] == 2
    assert lay["entities"]["agent"]["fields"] == [(10, 2), (14, 2)] and near.info.groups["agent"].obs_dim == 18
    for name in ("simple_tag", "simple_adversary"):
        assert make_env("mpe", name, num_envs=1).info.entity_layout is None


# --------------------------------------------------------------------------- check_entity_layout

D, A = 20, 8  # obs_dim and discrete actions of the test group "ally"


@pytest.fixture
def info():
    box = gym.spaces.Box(-1.0, 1.0, (D,), np.float32)
    groups = {
        "ally": GroupInfo("ally", ["ally_0", "ally_1"], box, gym.spaces.Discrete(A)),
        "drone": GroupInfo(
            "drone",
            ["drone_0"],
            gym.spaces.Box(-1.0, 1.0, (6,), np.float32),
            gym.spaces.Box(-1.0, 1.0, (2,), np.float32),
        ),
    }
    return EnvInfo("toy", "t", ["ally_0", "ally_1", "drone_0"], groups, state_dim=D, episode_limit=5)


def good():
    """A valid layout of group "ally": own 0..3, 2 enemies x 4 features, 2 allies split in two fields."""
    return {
        "own": [[0, 4]],
        "entities": {
            "enemy": {"start": 4, "count": 2, "dim": 4, "unit_type": [2, 4]},
            "ally": {"fields": [[12, 2], [16, 1]], "count": 2},
        },
        "n_normal_actions": 6,
        "action_targets": {"enemy": [6, 2]},
    }


def test_valid_layout_is_normalised(info):
    out = check_entity_layout({"ally": good(), "drone": {"own": [(0, 6)]}}, info)
    assert out == {
        "ally": {
            "own": [(0, 4)],
            "entities": {
                "enemy": {"start": 4, "count": 2, "dim": 4, "unit_type": (2, 4)},
                "ally": {"fields": [(12, 2), (16, 1)], "count": 2},
            },
            "n_normal_actions": 6,
            "action_targets": {"enemy": (6, 2)},
        },
        "drone": {"own": [(0, 6)], "entities": {}},  # continuous: no action keys
    }
    # features 18, 19 are neither own nor entity: allowed; n_normal_actions defaults to the untargeted actions
    lay = good()
    del lay["n_normal_actions"]
    assert check_entity_layout({"ally": lay}, info)["ally"]["n_normal_actions"] == 6
    assert check_entity_layout({"ally": {"own": [(0, 2)]}}, info)["ally"] == {
        "own": [(0, 2)],
        "entities": {},
        "n_normal_actions": A,
        "action_targets": {},
    }


def with_(path, value):
    """``good()`` with the key ``path`` (a tuple of keys) set to ``value`` (``...`` deletes it)."""
    lay = good()
    d = lay
    for k in path[:-1]:
        d = d[k]
    if value is ...:
        del d[path[-1]]
    else:
        d[path[-1]] = value
    return {"ally": lay}


@pytest.mark.parametrize(
    "layout, match",
    [
        ({"allies": {}}, r"Unknown entity_layout group 'allies'\. Did you mean 'ally'\?.*Valid choices: ally, drone"),
        ([("own", 0)], "must be a dict of group name"),
        ({"ally": {"entitties": {}}}, r"unknown key 'entitties'\. Did you mean 'entities'\?"),
        # ranges inside the observation
        (with_(("own",), [(18, 22)]), r"own range \(18, 22\) must lie inside the observation, features 0\.\.19"),
        (with_(("own",), [(3, 1)]), r"own range \(3, 1\) must lie inside"),
        (with_(("entities", "enemy", "start"), 14), r"entity 'enemy': features 14\.\.21 .* must lie inside .*0\.\.19"),
        (with_(("entities", "ally", "fields"), [(12, 2), (19, 1)]), r"entity 'ally': features 19\.\.20"),
        # one place per feature
        (
            with_(("own",), [(0, 5)]),
            r"features 4\.\.4 are used by both own range \(0, 5\) and entity 'enemy' \(4\.\.11\)",
        ),
        (
            with_(("entities", "ally", "fields"), [(12, 2), (13, 1)]),
            r"features 13\.\.14 are used by both entity 'ally' \(12\.\.15\) and entity 'ally' \(13\.\.14\)",
        ),
        # entity specs
        (with_(("entities", "enemy", "count"), -1), r"entity 'enemy': count must be >= 0, got -1"),
        (with_(("entities", "enemy", "count"), 2.0), r"entity 'enemy': count must be an int, got 2\.0"),
        (with_(("entities", "enemy", "count"), ...), r"entity 'enemy' needs 'count'"),
        (with_(("entities", "enemy", "dim"), 0), r"entity 'enemy': dim must be >= 1, got 0"),
        (
            with_(("entities", "enemy", "fields"), [(4, 4)]),
            r"entity 'enemy' needs either 'start' and 'dim' or 'fields'",
        ),
        (with_(("entities", "enemy", "dim"), ...), r"entity 'enemy' needs either 'start' and 'dim' or 'fields'"),
        (with_(("entities", "ally", "fields"), []), r"entity 'ally': fields must list at least one"),
        # unit_type inside one entity's features
        (
            with_(("entities", "enemy", "unit_type"), (3, 5)),
            r"unit_type \(3, 5\) must lie inside one entity's 4 features",
        ),
        (
            with_(("entities", "ally", "unit_type"), (2, 2)),
            r"unit_type \(2, 2\) must lie inside one entity's 3 features",
        ),
        (with_(("entities", "enemy", "unit_type"), 3), r"unit_type must be a pair of ints, got 3"),
        # actions: normal + targeted tile 0..A-1
        (with_(("n_normal_actions",), 5), r"actions 5\.\.5 are neither normal nor targeted"),
        (with_(("n_normal_actions",), 7), r"action_targets\['enemy'\] \(6, 2\) overlaps the actions before it"),
        (with_(("n_normal_actions",), 4), r"actions 4\.\.5 are neither normal nor targeted"),
        (with_(("n_normal_actions",), -1), r"n_normal_actions must be >= 0, got -1"),
        (with_(("action_targets",), {"enemy": (6, 3)}), r"targets 3 entities, but entity 'enemy' has count 2"),
        (with_(("action_targets",), {"enemy": (5, 2)}), r"overlaps the actions before it"),
        (
            with_(("action_targets",), {"tank": (6, 2)}),
            r"action_targets names 'tank', which is not an entity type of the group\. Valid entity types: enemy, ally",
        ),
        (with_(("action_targets",), {"ally": (6, 2), "enemy": (6, 2)}), r"overlaps the actions before it"),
        (
            {"ally": {"own": [(0, 2)], "n_normal_actions": 7}},
            r"must cover the group's 8 actions 0\.\.7 exactly once; they cover actions 0\.\.6",
        ),
        (
            {"drone": {"own": [(0, 2)], "n_normal_actions": 2}},
            r"'n_normal_actions' is only for discrete actions; group 'drone' has continuous",
        ),
    ],
)
def test_check_entity_layout_errors(info, layout, match):
    with pytest.raises(MarlError, match=match):
        check_entity_layout(layout, info)


def test_errors_name_the_group(info):
    with pytest.raises(MarlError, match=r"entity_layout of group 'ally': entity 'enemy'"):
        check_entity_layout(with_(("entities", "enemy", "count"), -3), info)


# --------------------------------------------------------------------------- user-declared layouts

MATRIX_LAYOUT = {"agent": {"own": [(0, 2)], "entities": {"slot": {"start": 2, "count": 2, "dim": 1}}}}


def test_make_env_with_a_user_layout_round_trips_through_the_spec():
    env = make_env("matrix", "two_step", num_envs=2, entity_layout=MATRIX_LAYOUT)
    want = check_entity_layout(MATRIX_LAYOUT, env.info)
    assert env.info.entity_layout == want and want["agent"]["n_normal_actions"] == 2
    assert env.spec.kwargs["entity_layout"] == want and env.spec.kwargs["num_envs"] == 2
    clone = env.spec.make()
    assert clone.info.entity_layout == want and clone.num_envs == 2
    assert make_env("matrix", "two_step", num_envs=2).info.entity_layout is None  # nothing leaks
    assert "entity_layout" not in make_env("matrix", "two_step").spec.kwargs


def test_user_layout_replaces_the_env_layout_and_bad_ones_fail():
    user = {"agent": {"own": [(0, 4)], "entities": {"landmark": {"start": 4, "count": 3, "dim": 2}}}}
    env = make_env("mpe:simple_spread", num_envs=1, entity_layout=user)
    assert set(env.info.entity_layout["agent"]["entities"]) == {"landmark"}
    assert env.spec.make().info.entity_layout == env.info.entity_layout
    with pytest.raises(MarlError, match="Unknown entity_layout group 'agents'"):
        make_env("mpe", "simple_spread", num_envs=1, entity_layout={"agents": {}})
    with pytest.raises(MarlError, match="must lie inside the observation"):
        make_env("matrix", "two_step", entity_layout={"agent": {"own": [(0, 5)]}})


TAG_LAYOUT = {"adversary": {"own": [(0, 4)], "entities": {"obstacle": {"start": 4, "count": 2, "dim": 2}}}}


def test_pettingzoo_family_and_objects_accept_a_layout():
    env = make_env("pettingzoo", "mpe2.simple_tag_v3", num_envs=1, entity_layout=TAG_LAYOUT)
    assert env.info.entity_layout["adversary"]["entities"]["obstacle"] == {"start": 4, "count": 2, "dim": 2}
    assert "agent" not in env.info.entity_layout  # groups left out have no layout
    assert env.spec.make().info.entity_layout == env.info.entity_layout
    obj = make_env(simple_tag_v3.parallel_env, num_envs=2, entity_layout=TAG_LAYOUT)  # make_env(constructor)
    assert obj.info.entity_layout == env.info.entity_layout and obj.spec is None
    direct = PettingZooEnv.from_object(simple_tag_v3.parallel_env(), num_envs=1, entity_layout=TAG_LAYOUT)
    assert direct.info.entity_layout == env.info.entity_layout
    with pytest.raises(MarlError, match="Unknown entity_layout group 'adversaries'"):
        make_env(simple_tag_v3.parallel_env, num_envs=1, entity_layout={"adversaries": {}})
