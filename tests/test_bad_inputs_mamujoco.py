"""Bad inputs of the MaMuJoCo family (issue 30, item 2): each ends in a MarlError naming the bad value and
the valid choices, before any worker process starts. Skipped without gymnasium_robotics / mujoco."""

import pytest
import torch

import marl
from marl.errors import MarlError

pytest.importorskip("mujoco", reason="MaMuJoCo needs mujoco: pip install 'marl-rllib[mamujoco]'")
pytest.importorskip(
    "gymnasium_robotics", reason="MaMuJoCo needs gymnasium-robotics: pip install 'marl-rllib[mamujoco]'"
)


def _make(scenario="HalfCheetah", **kw):
    return lambda: marl.make_env("mamujoco", scenario, **kw)


def _cheetah(**kw):
    return _make(agent_conf="2x3", num_envs=1, **kw)


def _step_before_reset():
    env = marl.make_env("mamujoco", "HalfCheetah", agent_conf="2x3", num_envs=1)
    env.step({"agent": torch.zeros(1, 2, 3)})


def _wrong_action_shape():
    env = marl.make_env("mamujoco", "HalfCheetah", agent_conf="2x3", num_envs=1)
    env.reset(seed=0)
    env.step({"agent": torch.zeros(1, 2, 6)})


CASES = {
    "unknown scenario": (_make("HalfCheeta", agent_conf="2x3"), "Did you mean 'HalfCheetah'"),
    "scenario: valid list": (_make("Cheetah", agent_conf="2x3"), "Hopper"),
    "no scenario": (_make(None), "needs a scenario. Valid choices: Ant"),
    "no agent_conf": (_make(), "needs agent_conf=..., its partition into agents. Valid choices: 2x3, 6x1"),
    "agent_conf of another robot": (_make(agent_conf="2x4"), "Unknown agent_conf of MaMuJoCo HalfCheetah '2x4'"),
    "agent_conf: valid list": (_make("Ant", agent_conf="3x3"), "2x4, 2x4d, 4x2"),
    "ManySegment agent_conf": (_make("ManySegmentSwimmer", agent_conf="ten"), "must be <agents>x<segments per agent>"),
    "agent_obsk negative": (_cheetah(agent_obsk=-1), "agent_obsk must be an int >= 0, got -1"),
    "episode_limit zero": (_cheetah(episode_limit=0), "episode_limit must be an int >= 1, got 0"),
    "episode_limit float": (_cheetah(episode_limit=10.5), "episode_limit must be an int >= 1, got 10.5"),
    "num_envs zero": (_make(agent_conf="2x3", num_envs=0), "num_envs must be a positive int, got 0"),
    "vector mode": (_cheetah(vector="threads"), "Unknown vector 'threads'"),
    "num_workers zero": (_cheetah(vector="subprocess", num_workers=0), "num_workers must be an int >= 1, got 0"),
    "unknown MuJoCo keyword": (_cheetah(ctrl_cost_wieght=0.1), "'ctrl_cost_wieght' for MaMuJoCo HalfCheetah"),
    "MuJoCo keyword: closest": (_cheetah(ctrl_cost_wieght=0.1), "Did you mean 'ctrl_cost_weight'?"),
    "ManySegment keyword: valid list": (_make("ManySegmentAnt", agent_conf="2x2", foo=1), "Gymnasium's Ant-v5"),
    # CoupledHalfCheetah's observation indexes data.ten_J as a dense (ntendon, nv) matrix; mujoco 4.0.0 stores it sparse
    "robot gymnasium_robotics fails to build": (
        _make("CoupledHalfCheetah", agent_conf="1p1"),
        "gymnasium_robotics could not build MaMuJoCo CoupledHalfCheetah agent_conf='1p1'",
    ),
    "step before reset": (_step_before_reset, "Call reset() before step()"),
    "action shape": (_wrong_action_shape, "must have shape (1, 2, 3) (float32), got (1, 2, 6)"),
}


@pytest.mark.parametrize("name", list(CASES))
def test_bad_input_is_a_marl_error_naming_it(name):
    call, says = CASES[name]
    with pytest.raises(MarlError) as e:
        call()
    assert says in str(e.value), str(e.value)
