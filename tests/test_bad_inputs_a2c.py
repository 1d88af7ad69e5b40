"""Bad inputs to IA2C / MAA2C (algos/a2c.py, algos/a2c_config.py): each a MarlError naming the value and
the valid choices, raised by ``fit`` before Ray starts or a run folder is written."""

import pytest

import marl
from marl.env import MarlError
from test_bad_inputs_config import no_ray_four_cpus  # noqa: F401  (autouse: Ray may not start)
from toy_envs import MatchEnv, MultiDiscreteEnv

CASES = [  # id, env class, algo, keys, fragments of the message
    (
        "ia2c_state_critic",
        MatchEnv,
        "ia2c",
        {"critic": "state"},
        ["ia2c does not train critic='state'", "use algo maa2c"],
    ),
    ("ia2c_team_critic", MatchEnv, "ia2c", {"critic": "team", "recurrent": False}, ["its critic is one of: obs"]),
    ("maa2c_obs_critic", MatchEnv, "maa2c", {"critic": "obs"}, ["state, team, auto", "for critic='obs' use algo ia2c"]),
    ("negative_entropy", MatchEnv, "ia2c", {"entropy_coef": -0.1}, ["'entropy_coef' must be >= 0, got -0.1"]),
    ("negative_value_coef", MatchEnv, "maa2c", {"value_loss_coef": -1.0}, ["'value_loss_coef' must be >= 0"]),
    ("tau_zero", MatchEnv, "maa2c", {"target_tau": 0.0}, ["'target_tau' must be in (0, 1], got 0.0"]),
    ("tau_above_one", MatchEnv, "ia2c", {"target_tau": 1.5}, ["'target_tau' must be in (0, 1], got 1.5"]),
    ("nstep_zero", MatchEnv, "ia2c", {"nstep": 0}, ["'nstep' must be >= 1, got 0"]),
    ("nstep_fraction", MatchEnv, "maa2c", {"nstep": 2.5}, ["'nstep' expects a whole number, got 2.5"]),
    ("ppo_epochs", MatchEnv, "ia2c", {"epochs": 4}, ["Unknown config key 'epochs' for algorithm 'ia2c'", "a PPO key"]),
    ("ppo_clip", MatchEnv, "maa2c", {"clip": 0.2}, ["Unknown config key 'clip' for algorithm 'maa2c'"]),
    ("team_gru", MatchEnv, "maa2c", {"critic": "team", "recurrent": True}, ["critic=team", "use critic=state"]),
    ("multidiscrete", MultiDiscreteEnv, "ia2c", {}, ["ia2c cannot handle the action space", "Discrete, 1-D Box"]),
]


@pytest.mark.parametrize("make, algo, kw, fragments", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_bad_a2c_input_is_a_marl_error_naming_it(make, algo, kw, fragments, tmp_path):
    with pytest.raises(MarlError) as e:
        marl.fit(make(num_envs=2), algo, stop={"iterations": 1}, log_dir=str(tmp_path / "runs"), **kw)
    for part in fragments:
        assert part in str(e.value), str(e.value)
    assert not (tmp_path / "runs").exists()
