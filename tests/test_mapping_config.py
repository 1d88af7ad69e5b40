"""Policy mapping modes and configuration validation (no Ray)."""

import gymnasium as gym
import numpy as np
import pytest
import torch

from marl.algos.ppo import critic_kind
from marl.config import list_algos, load_config, parse_cli_overrides, validate_stop
from marl.env import EnvInfo, GroupInfo, MarlError
from marl.mapping import PolicyMapping


def box(n):
    return gym.spaces.Box(-1.0, 1.0, (n,), np.float32)


def hetero_info(kind="mixed"):
    return EnvInfo(
        "toy",
        "hetero",
        ["adversary_0", "agent_0", "agent_1"],
        {
            "adversary": GroupInfo("adversary", ["adversary_0"], box(8), gym.spaces.Discrete(5), team="adversary"),
            "agent": GroupInfo("agent", ["agent_0", "agent_1"], box(10), gym.spaces.Discrete(5), team="good"),
        },
        state_dim=28,
        episode_limit=25,
        kind=kind,
        num_envs=4,
    )


def homo_info():
    agents = ["agent_0", "agent_1", "agent_2"]
    return EnvInfo(
        "toy",
        "homo",
        agents,
        {"agent": GroupInfo("agent", agents, box(6), gym.spaces.Discrete(5))},
        state_dim=18,
        episode_limit=25,
        kind="cooperative",
        num_envs=4,
    )


def test_auto_picks_all_for_cooperative_homogeneous_and_group_otherwise():
    assert PolicyMapping(homo_info(), "auto").modules == {"shared": ["agent_0", "agent_1", "agent_2"]}
    assert PolicyMapping(hetero_info(), "auto").modules == {
        "adversary": ["adversary_0"],
        "agent": ["agent_0", "agent_1"],
    }


def test_individual_and_callable_modes():
    m = PolicyMapping(homo_info(), "individual")
    assert list(m.modules) == ["agent_0", "agent_1", "agent_2"]
    assert not m.uses_agent_id("agent_0") and m.obs_dim("agent_0") == 6
    c = PolicyMapping(homo_info(), lambda a: "first" if a == "agent_0" else "rest")
    assert c.modules == {"first": ["agent_0"], "rest": ["agent_1", "agent_2"]}
    assert c.obs_dim("rest") == 6 + 2  # one-hot of 2 agents appended


def test_all_with_different_spaces_is_a_build_time_error():
    with pytest.raises(MarlError, match="adversary_0.*agent_0.*different spaces"):
        PolicyMapping(hetero_info(), "all")
    with pytest.raises(MarlError, match="Did you mean 'group'"):
        PolicyMapping(homo_info(), "gruop")


def test_gather_scatter_roundtrip_with_split_groups():
    info = homo_info()
    m = PolicyMapping(info, lambda a: "a" if a == "agent_1" else "b")
    x = {"agent": torch.arange(4 * 3 * 2, dtype=torch.float32).reshape(4, 3, 2)}
    parts = {mid: m.gather(mid, x) for mid in m.modules}
    assert torch.equal(parts["a"], x["agent"][:, [1]])
    assert torch.equal(parts["b"], x["agent"][:, [0, 2]])
    assert torch.equal(m.scatter(parts)["agent"], x["agent"])


def test_agent_id_onehot():
    m = PolicyMapping(homo_info(), "all")
    out = m.add_agent_id("shared", torch.zeros(2, 3, 6))
    assert out.shape == (2, 3, 9)
    assert torch.equal(out[0, :, 6:], torch.eye(3))


def test_config_layers_and_unknown_key_error():
    cfg = load_config("mappo", "mpe", {"lr": 1e-3})
    assert cfg["lr"] == 1e-3 and cfg["critic"] == "auto" and cfg["num_minibatches"] == 4  # mpe overrides
    assert load_config("mappo", "vmas")["epochs"] == 3 and load_config("mappo", "mpe")["epochs"] == 15
    assert load_config("mappo", "vmas")["critic"] == load_config("mappo", "smax")["critic"] == "state"  # not on MPE
    assert load_config("ippo", "mpe")["critic"] == "obs"
    # auto: the team critic for MLP actors, the per-agent critic for GRU actors (which team does not serve)
    assert critic_kind(load_config("mappo", "mpe")) == "team"
    assert critic_kind(load_config("mappo", "mpe", {"recurrent": True})) == "state"
    assert critic_kind(load_config("ippo", "mpe", {"recurrent": True})) == "obs"
    with pytest.raises(MarlError, match="Unknown config key 'learning_rate'.*Valid keys:.*lr"):
        load_config("mappo", "mpe", {"learning_rate": 1e-3})
    with pytest.raises(MarlError, match="Did you mean 'epochs'"):
        load_config("mappo", "mpe", {"epoch": 3})
    with pytest.raises(MarlError, match="'epochs' expects a number"):
        load_config("mappo", "mpe", {"epochs": "many"})
    with pytest.raises(MarlError, match="Unknown algorithm 'mapo'. Did you mean 'mappo'"):
        load_config("mapo", "mpe")
    assert {"mappo", "ippo"} <= set(list_algos())


def test_stop_and_cli_parsing():
    assert validate_stop({"env_steps": 10}) == {"env_steps": 10}
    with pytest.raises(MarlError, match="Unknown stop criterion 'steps'"):
        validate_stop({"steps": 10})
    kv = parse_cli_overrides(["lr=7e-4", "stop.env_steps=1000", "share=group", "recurrent=true"])
    assert kv == {"lr": 7e-4, "stop": {"env_steps": 1000}, "share": "group", "recurrent": True}
