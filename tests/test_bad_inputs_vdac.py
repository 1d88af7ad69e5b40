"""VDA2C and VDPPO refuse what they cannot train, before Ray starts: one table, each case a MarlError (or its
config subclass) and a fragment of its message naming the bad value and the way out."""

import dataclasses

import pytest

import marl
import marl.config.checks as checks
from marl.env import MarlError
from test_bad_inputs import no_ray  # noqa: F401  (an autouse fixture)
from toy_envs import MatchEnv


@pytest.fixture(autouse=True)
def four_cpus(monkeypatch):
    """4 CPUs for the checks that count them (``num_learners``), whatever this machine has; ``no_ray`` (imported)
    fails a case that starts Ray before its bad input is caught."""
    monkeypatch.setattr(checks, "available_cpus", lambda: (4.0, "this machine has"))


def match(**info):
    """MatchEnv (one cooperative team of 2 agents, per-agent rewards) with ``info`` fields replaced."""
    env = MatchEnv(num_envs=2)
    env.info = dataclasses.replace(env.info, **info)
    return env


CASES = [
    ("general-sum team", match(kind="mixed"), "vdppo", {}, ("kind='mixed' with shared_reward=False", "ippo, mappo")),
    ("qmix without a state", match(state_dim=0), "vda2c", {}, ("mixer=qmix mixes on the global state", "mixer=vdn")),
    (
        "team split over modules",
        MatchEnv(num_envs=2),
        "vdppo",
        {"share": "individual"},
        ("team 'team' (2 agents) maps to modules ['agent_0', 'agent_1']", "share='all'"),
    ),
    ("two learners", MatchEnv(num_envs=2), "vda2c", {"num_learners": 2}, ("num_learners=2", "num_learners=0 or 1")),
    ("team critic", MatchEnv(num_envs=2), "vdppo", {"critic": "team"}, ("critic", "'team'", "obs, state")),
    ("unknown mixer", MatchEnv(num_envs=2), "vda2c", {"mixer": "qtran"}, ("mixer", "'qtran'", "qmix, vdn")),
    ("unknown actor loss", MatchEnv(num_envs=2), "vdppo", {"actor_loss": "trpo"}, ("actor_loss", "a2c, ppo")),
    ("three hypernet layers", MatchEnv(num_envs=2), "vdppo", {"hypernet_layers": 3}, ("hypernet_layers", "1, 2")),
    ("negative kl_coeff", MatchEnv(num_envs=2), "vdppo", {"kl_coeff": -0.1}, ("kl_coeff", "-0.1", ">= 0")),
    ("zero kl_target", MatchEnv(num_envs=2), "vdppo", {"kl_target": 0.0}, ("kl_target", "0.0", "> 0")),
    ("negative kl_target", MatchEnv(num_envs=2), "vda2c", {"kl_target": -0.01}, ("kl_target", "-0.01", "> 0")),
]


@pytest.mark.parametrize("name, env, algo, kw, fragments", CASES, ids=[c[0] for c in CASES])
def test_vd_actor_critic_bad_input(tmp_path, name, env, algo, kw, fragments):
    with pytest.raises(MarlError) as err:
        marl.fit(env, algo, stop={"iterations": 1}, log_dir=str(tmp_path), progress=False, **kw)
    for fragment in fragments:
        assert fragment in str(err.value), (name, str(err.value))
