"""Bad structured observations and encoder settings (issue 30, item 1): each case ends in a ``MarlError``
whose message names the bad value (the key of a Dict observation, the config entry) and what is valid.

One table; every case builds its input from the ``image_cue`` toy env (``envs/cue.py``) or a small
``MultiAgentEnv`` with one defect. No Ray.
"""

from __future__ import annotations

import dataclasses

import gymnasium as gym
import numpy as np
import pytest
import torch

import marl
from marl.algos.networks.config import encoder_problem
from marl.algos.networks.registry import check_agent
from marl.env import EnvInfo, GroupInfo, MultiAgentEnv, Step
from marl.env.guard import EnvGuard
from marl.env.rules import EnvRuleError
from marl.errors import MarlError
from marl.policy import check_inputs


def _cue(**kw):
    return marl.make_env("image_cue", num_envs=2, size=8, patch=2, **kw)


def _guard_step(edit):
    """The guard on a reset Step of image_cue whose ``obs['agent']`` went through ``edit(dict) -> value``."""
    env = _cue()
    step = env.reset(seed=0)
    step = dataclasses.replace(step, obs={"agent": edit(dict(step.obs["agent"]))})
    EnvGuard(env.info, "test")(step, reset=True)


class OddSpace(MultiAgentEnv):
    """One agent whose observation space is ``space`` (a defect for check_env's ``spaces`` rule)."""

    def __init__(self, space):
        self.info = EnvInfo("odd", "x", ["a"], {"a": GroupInfo("a", ["a"], space, gym.spaces.Discrete(2))}, 1, 5)

    def reset(self, seed=None):  # never reached: check_env rejects the info first
        raise AssertionError


CASES = [
    (
        "dict obs missing a key",
        lambda: _guard_step(lambda d: {"image": d["image"]}),
        EnvRuleError,
        "keys ['image', 'vector']",
    ),
    (
        "image key of another shape",
        lambda: _guard_step(lambda d: {**d, "image": d["image"][..., :2]}),
        EnvRuleError,
        "obs['image']",
    ),
    (
        "float values for a uint8 image key",
        lambda: _guard_step(lambda d: {**d, "image": d["image"].float()}),
        EnvRuleError,
        "cannot be read as the space's uint8",
    ),
    (
        "integer image values beyond 255",
        lambda: _guard_step(lambda d: {**d, "image": d["image"].long() + 300}),
        EnvRuleError,
        "0..255",
    ),
    (
        "a tensor where a dict observation is due",
        lambda: _guard_step(lambda d: d["image"]),
        EnvRuleError,
        "must be a dict with the keys",
    ),
    (
        "Dict space with a Discrete key",
        lambda: marl.check_env(OddSpace(gym.spaces.Dict({"pos": gym.spaces.Discrete(3)})), verbose=False),
        EnvRuleError,
        "obs_space key 'pos'",
    ),
    (
        "empty Dict space",
        lambda: marl.check_env(OddSpace(gym.spaces.Dict({})), verbose=False),
        EnvRuleError,
        "empty Dict",
    ),
    (
        "rank-0 Box space",
        lambda: marl.check_env(OddSpace(gym.spaces.Box(0, 1, (), np.float32)), verbose=False),
        EnvRuleError,
        "a Box of rank >= 1",
    ),
    (
        "hpn on structured observations",
        lambda: check_agent({"agent": "hpn"}, _cue().info),
        MarlError,
        "agent='hpn' reads 1-D vector observations",
    ),
    (
        "unknown encoder entry",
        lambda: _raise(encoder_problem({"resnet": {}})),
        MarlError,
        "unknown entry 'resnet'; valid entries: cnn, mlp",
    ),
    (
        "unknown cnn layer key",
        lambda: _raise(encoder_problem({"cnn": {"filters": [32]}})),
        MarlError,
        "valid entries: channels, kernels, strides, fc",
    ),
    (
        "cnn layer lists of different lengths",
        lambda: _raise(encoder_problem({"cnn": {"channels": [16, 32]}})),
        MarlError,
        "one length >= 1",
    ),
    (
        "non-positive layer width",
        lambda: _raise(encoder_problem({"mlp": {"hidden": [0]}})),
        MarlError,
        "encoder.mlp.hidden must be a list of ints >= 1",
    ),
    (
        "encoder config through fit",
        lambda: _cue().fit("mappo", stop={"iterations": 1}, encoder={"cnn": {"channels": [8, 8]}}),
        MarlError,
        "encoder.cnn needs channels, kernels and strides",
    ),
    (
        "flatten_obs not a bool",
        lambda: _cue(flatten_obs="yes"),
        MarlError,
        "flatten_obs must be True or False, got 'yes'",
    ),
    (
        "image_cue obs kind",
        lambda: _cue(obs="rgb"),
        MarlError,
        "obs must be one of dict, image, got 'rgb'",
    ),
    (
        "policy act with a missing key",
        lambda: _act_with(lambda d: {"image": d["image"]}),
        MarlError,
        "'vector': [B, 2, 4]",
    ),
    (
        "legem on image observations",
        lambda: _legem_check(_cue().info),
        MarlError,
        "flatten_obs=True",
    ),
]


def _legem_check(info):
    from marl.algos.redistribution import Legem

    Legem.check(None, info, ())


def _raise(problem):
    if problem:
        raise MarlError(problem)


def _act_with(edit):
    """The input check of ``Policy.act`` on image_cue observations edited by ``edit``."""
    env = _cue()
    step = env.reset(seed=0)
    check_inputs(env.info, {"agent": edit(dict(step.obs["agent"]))}, {}, None)


@pytest.mark.parametrize("name,call,error,fragment", CASES, ids=[c[0] for c in CASES])
def test_bad_structured_input(name, call, error, fragment):
    with pytest.raises(error) as e:
        call()
    assert fragment in str(e.value), str(e.value)


def test_step_type_of_the_env_is_a_step():
    """The table's envs are real marl envs: a well-formed Step passes the same guard."""
    env = _cue()
    out = EnvGuard(env.info, "test")(env.reset(seed=0), reset=True)
    assert isinstance(out, Step) and out.obs["agent"]["image"].dtype == torch.uint8
