"""Bad inputs to COMA, each a clear MarlError naming the bad value and the valid ones, before Ray starts."""

import gymnasium as gym
import numpy as np
import pytest

import marl
from marl.env import MarlError
from test_bad_inputs import no_ray  # noqa: F401  (autouse: Ray must not start)
from toy_envs import MatchEnv, MultiDiscreteEnv


def match():
    return MatchEnv(num_envs=2)


class BoxActionEnv(MatchEnv):
    """MatchEnv that declares continuous actions, ``Box(-1, 1, (2,))``."""

    def __init__(self, **kw):
        super().__init__(**kw)
        self.info.groups["agent"].action_space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)


CASES = [
    (
        "continuous actions",
        BoxActionEnv,
        {},
        ["coma cannot handle the action space Box", "group 'agent'", "supported: Discrete"],
    ),
    ("MultiDiscrete actions", MultiDiscreteEnv, {}, ["coma cannot handle the action space MultiDiscrete"]),
    ("td_lambda above 1", match, {"td_lambda": 1.5}, ["td_lambda", "1.5"]),
    ("td_lambda negative", match, {"td_lambda": -0.1}, ["td_lambda", "-0.1"]),
    ("gamma 0", match, {"gamma": 0.0}, ["gamma", "0.0"]),
    ("target_update_interval 0", match, {"target_update_interval": 0}, ["target_update_interval", "0"]),
    ("epochs 0", match, {"epochs": 0}, ["epochs", "0"]),
    ("negative entropy_coef", match, {"entropy_coef": -1.0}, ["entropy_coef", "-1.0"]),
    ("activation typo", match, {"activation": "rleu"}, ["activation", "rleu", "relu"]),
    ("unknown key", match, {"td_lamda": 0.5}, ["td_lamda", "td_lambda"]),
    (
        "more minibatches than rows",
        match,
        {"num_minibatches": 1000, "rollout_length": 2},
        ["num_minibatches=1000", "rows"],
    ),
]


@pytest.mark.parametrize("make, kw, excerpts", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_bad_coma_input_is_a_clear_error_before_ray(make, kw, excerpts):
    with pytest.raises(MarlError) as e:
        marl.fit(make(), "coma", stop={"iterations": 1}, **kw)
    for part in excerpts:
        assert part in str(e.value), str(e.value)
