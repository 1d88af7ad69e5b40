"""Bad inputs of ITRPO and MATRPO (algos/trpo.py, algos/trpo_config.py): each a clear MarlError naming the
value and the valid choices, raised before Ray starts (Ray is replaced by a function that fails the test)."""

import pytest

import marl
from marl.config.schema import ConfigValueError
from marl.env import MarlError
from test_bad_inputs import no_ray  # noqa: F401  (autouse: Ray must not start)
from toy_envs import MatchEnv, MultiDiscreteEnv


CASES = [  # id, env class, algo, overrides, error type, message fragments
    (
        "kl_threshold 0",
        MatchEnv,
        "matrpo",
        {"kl_threshold": 0.0},
        ConfigValueError,
        ("'kl_threshold' must be > 0", "got 0.0"),
    ),
    (
        "backtrack_coef 1",
        MatchEnv,
        "matrpo",
        {"backtrack_coef": 1.0},
        ConfigValueError,
        ("'backtrack_coef' must be in (0, 1)",),
    ),
    ("cg_iters 0", MatchEnv, "itrpo", {"cg_iters": 0}, ConfigValueError, ("'cg_iters' must be >= 1", "got 0")),
    ("cg_iters 2.5", MatchEnv, "itrpo", {"cg_iters": 2.5}, ConfigValueError, ("cg_iters", "2.5")),
    (
        "line_search_steps 0",
        MatchEnv,
        "matrpo",
        {"line_search_steps": 0},
        ConfigValueError,
        ("'line_search_steps' must be >= 1",),
    ),
    (
        "accept_ratio < 0",
        MatchEnv,
        "matrpo",
        {"accept_ratio": -0.5},
        ConfigValueError,
        ("'accept_ratio' must be >= 0", "-0.5"),
    ),
    (
        "cg_damping < 0",
        MatchEnv,
        "matrpo",
        {"cg_damping": -0.1},
        ConfigValueError,
        ("'cg_damping' must be >= 0", "-0.1"),
    ),
    (
        "two learners",
        MatchEnv,
        "matrpo",
        {"num_learners": 2},
        MarlError,
        ("num_learners=2 is not supported", "num_learners=0 or 1"),
    ),
    (
        "torch_compile",
        MatchEnv,
        "itrpo",
        {"torch_compile": True},
        MarlError,
        ("differentiates the KL twice", "torch_compile=false"),
    ),
    (
        "misspelt key",
        MatchEnv,
        "matrpo",
        {"kl_treshold": 0.01},
        MarlError,
        ("'kl_treshold'", "Did you mean 'kl_threshold'?"),
    ),
    (
        "team critic, GRU",
        MatchEnv,
        "matrpo",
        {"critic": "team", "recurrent": True},
        MarlError,
        ("critic=team", "critic=state"),
    ),
    (
        "MultiDiscrete actions",
        MultiDiscreteEnv,
        "itrpo",
        {},
        MarlError,
        ("MultiDiscrete([2 2])", "supported: Discrete, 1-D Box"),
    ),
]


@pytest.mark.parametrize("make, algo, kw, error, fragments", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_bad_trpo_input_is_a_marl_error_naming_it(make, algo, kw, error, fragments, tmp_path):
    with pytest.raises(error) as e:
        marl.fit(make(num_envs=2), algo, stop={"iterations": 1}, log_dir=str(tmp_path / "runs"), **kw)
    for part in fragments:
        assert part in str(e.value), str(e.value)
    assert not (tmp_path / "runs").exists()
