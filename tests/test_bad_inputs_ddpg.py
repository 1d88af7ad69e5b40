"""Bad inputs to IDDPG / MADDPG / MATD3 and FACMAC, each a clear MarlError naming the bad value and the valid ones, before
Ray starts."""

import gymnasium as gym
import numpy as np
import pytest

import marl
from marl.env import MarlError
from test_bad_inputs import no_ray  # noqa: F401  (autouse: Ray must not start)
from toy_envs import ImageTargetEnv, MultiDiscreteEnv, TargetEnv


def target():
    return TargetEnv(num_envs=2)


def with_actions(space):
    """A TargetEnv whose agents declare ``space`` as their action space."""

    def make():
        env = TargetEnv(num_envs=2)
        env.info.groups["agent"].action_space = space
        return env

    return make


def stateless():
    env = TargetEnv(num_envs=2)
    env.info.state_dim = 0
    return env


def unbounded():
    env = TargetEnv(num_envs=2)
    env.info.episode_limit = 0
    return env


INF = gym.spaces.Box(-np.inf, np.inf, (2,), np.float32)
CASES = [
    (
        "maddpg",
        "async sampling in the driver",
        target,
        {"async_sampling": True, "num_env_runners": 0},
        ["async_sampling=True", "num_env_runners=0", "use num_env_runners=1"],
    ),
    ("maddpg", "infinite bounds", with_actions(INF), {}, ["group 'agent'", "infinite bounds", "low=[-inf, -inf]"]),
    ("iddpg", "MultiDiscrete", MultiDiscreteEnv, {}, ["MultiDiscrete", "supported: a 1-D Box", "Discrete"]),
    ("maddpg", "2-D Box", with_actions(gym.spaces.Box(-1, 1, (2, 2), np.float32)), {}, ["supported: a 1-D Box"]),
    (
        "maddpg",
        "recurrent buffer of a million episodes",
        target,
        {"recurrent": True},
        ["recurrent=True", "buffer_size=1000000 episodes", "buffer_size <= 100000", "batch_size in episodes"],
    ),
    (
        "maddpg",
        "recurrent actor on image observations",
        lambda: ImageTargetEnv(num_envs=2),
        {"recurrent": True, "buffer_size": 100, "batch_size": 8},
        ["recurrent=True reads flat observations", "group 'agent'", "Dict(", "recurrent: false"],
    ),
    (
        "iddpg",
        "recurrent on unbounded episodes",
        unbounded,
        {"recurrent": True, "buffer_size": 100, "batch_size": 8},
        ["recurrent=True stores whole episodes", "finite episode_limit", "toy:target"],
    ),
    (
        "maddpg",
        "recurrent batch beyond buffer",
        target,
        {"recurrent": True, "buffer_size": 16, "batch_size": 32},
        ["batch_size=32 episodes", "buffer_size=16 episodes"],
    ),
    ("maddpg", "critic typo", target, {"critic": "joint"}, ["critic", "joint", "joint_obs"]),
    ("maddpg", "state critic without a state", stateless, {"critic": "state"}, ["state_dim=0", "joint_obs"]),
    ("matd3", "batch beyond buffer", target, {"buffer_size": 64, "batch_size": 128}, ["batch_size=128", "never"]),
    (
        "maddpg",
        "learning_starts beyond buffer",
        target,
        {"buffer_size": 10, "batch_size": 4, "learning_starts": 11},
        ["learning_starts=11"],
    ),
    ("matd3", "policy_delay 0", target, {"policy_delay": 0}, ["policy_delay", "0"]),
    ("maddpg", "tau above 1", target, {"tau": 1.5}, ["tau", "1.5"]),
    ("maddpg", "negative noise", target, {"exploration_noise_start": -0.1}, ["exploration_noise_start", "-0.1"]),
    ("maddpg", "activation typo", target, {"activation": "rleu"}, ["activation", "rleu", "relu"]),
    (
        "facmac",
        "centralised critic",
        target,
        {"critic": "joint_obs"},
        ["critic='joint_obs'", "per-agent", "critic: obs"],
    ),
    ("facmac", "twin critics", target, {"twin_critics": True}, ["twin_critics=True", "one critic per agent"]),
    ("facmac", "mixer typo", target, {"mixer": "qmx"}, ["mixer", "qmx", "qmix_nonmonotonic", "vdn"]),
    ("facmac", "qmix mixer without a state", stateless, {}, ["mixer=qmix", "state_dim=0", "mixer: vdn"]),
    ("facmac", "hypernet layers 3", target, {"hypernet_layers": 3}, ["hypernet_layers", "3", "1", "2"]),
    ("facmac", "negative actor_reg", target, {"actor_reg": -1.0}, ["actor_reg", "-1.0"]),
]


@pytest.mark.parametrize("algo, make, kw, excerpts", [(c[0], *c[2:]) for c in CASES], ids=[c[1] for c in CASES])
def test_bad_ddpg_input_is_a_clear_error_before_ray(algo, make, kw, excerpts):
    clear_error(algo, make, kw, excerpts)


def clear_error(algo, make, kw, excerpts):
    """``fit`` of ``algo`` on ``make()`` with keys ``kw`` raises a MarlError whose message has every excerpt."""
    with pytest.raises(MarlError) as e:
        marl.fit(make(), algo, stop={"iterations": 1}, **kw)
    for part in excerpts:
        assert part in str(e.value), str(e.value)
