"""Bad inputs to ISAC / MASAC, each a clear MarlError naming the bad value and the valid ones, before Ray starts."""

import gymnasium as gym
import numpy as np
import pytest

from test_bad_inputs import no_ray  # noqa: F401  (autouse: Ray must not start)
from test_bad_inputs_ddpg import INF, clear_error, stateless, target, with_actions
from toy_envs import MultiDiscreteEnv

CASES = [
    ("masac", "recurrent buffer of a million episodes", target, {"recurrent": True}, ["buffer_size=1000000 episodes"]),
    ("masac", "target_entropy word", target, {"target_entropy": "high"}, ["target_entropy='high'", "'auto'", "number"]),
    ("isac", "target_entropy list", target, {"target_entropy": [1.0]}, ["target_entropy", "[1.0]"]),
    ("masac", "alpha_init 0", target, {"alpha_init": 0.0}, ["alpha_init", "0.0", "> 0"]),
    ("isac", "alpha_init negative", target, {"alpha_init": -0.5}, ["alpha_init", "-0.5"]),
    (
        "masac",
        "entropy weight above 1",
        target,
        {"discrete_target_entropy_weight": 1.5},
        ["discrete_target_entropy_weight", "1.5"],
    ),
    ("masac", "critic typo", target, {"critic": "joint"}, ["critic", "joint", "joint_obs"]),
    ("masac", "state critic without a state", stateless, {"critic": "state"}, ["state_dim=0", "joint_obs"]),
    ("masac", "infinite bounds", with_actions(INF), {}, ["group 'agent'", "infinite bounds", "low=[-inf, -inf]"]),
    ("isac", "MultiDiscrete", MultiDiscreteEnv, {}, ["MultiDiscrete", "supported: a 1-D Box", "Discrete"]),
    ("isac", "2-D Box", with_actions(gym.spaces.Box(-1, 1, (2, 2), np.float32)), {}, ["supported: a 1-D Box"]),
    ("masac", "batch beyond buffer", target, {"buffer_size": 64, "batch_size": 128}, ["batch_size=128", "never"]),
    ("masac", "tau above 1", target, {"tau": 1.5}, ["tau", "1.5"]),
    ("masac", "DDPG's noise key", target, {"exploration_noise_start": 0.5}, ["exploration_noise_start"]),
]


@pytest.mark.parametrize("algo, make, kw, excerpts", [(c[0], *c[2:]) for c in CASES], ids=[c[1] for c in CASES])
def test_bad_sac_input_is_a_clear_error_before_ray(algo, make, kw, excerpts):
    clear_error(algo, make, kw, excerpts)
