"""Bad inputs to HAPPO (algos/happo.py): each a MarlError naming the value and the valid choices, raised
before Ray starts or a run folder is written. One table; every case asserts the error type and fragments
of its message."""

import pytest

import marl
import marl.algos.happo  # noqa: F401  (torch and Ray's modules load here, not in the first case's time)
from marl.errors import MarlError
from test_bad_inputs_config import no_ray_four_cpus  # noqa: F401  (autouse: Ray fails the test if started)
from toy_envs import MatchEnv, MultiDiscreteEnv


def match():
    return MatchEnv(num_envs=2)  # agents agent_0, agent_1 in one group 'agent'


def adversary():
    return marl.make_env("mpe", "simple_adversary", num_envs=2)  # adversary_0; agent_0, agent_1


def pair(agent):
    return "pair"


CASES = [
    (
        "share all",
        match,
        {"share": "all"},
        ("happo needs one module per agent", "share='all' maps", "['agent_0', 'agent_1']", "share='individual'"),
    ),
    (
        "share auto",
        match,
        {"share": "auto"},
        ("share='auto' (here 'all')", "one module 'shared'", "share='individual'"),
    ),
    ("share group", adversary, {"share": "group"}, ("share='group' maps", "['agent_0', 'agent_1']")),
    ("mapping function", match, {"share": pair}, ("share=pair maps agents", "module 'pair'", "its own module")),
    ("fixed_order not a bool", match, {"fixed_order": "sometimes"}, ("fixed_order", "sometimes")),
    ("unknown key", match, {"fixed_orders": True}, ("Unknown config key 'fixed_orders'", "Did you mean 'fixed_order'")),
    ("clip below 0", match, {"clip": -0.1}, ("clip", "-0.1")),
    ("epochs 0", match, {"epochs": 0}, ("epochs", ">= 1")),
    ("MultiDiscrete actions", lambda: MultiDiscreteEnv(num_envs=2), {}, ("happo cannot handle", "Discrete, 1-D Box")),
]
HATRPO_CASES = [  # HATRPO: HAPPO's mapping rule and TRPO's trust-region rules together
    ("hatrpo share all", match, {"share": "all"}, ("hatrpo needs one module per agent", "share='individual'")),
    ("hatrpo two learners", match, {"num_learners": 2}, ("one trust-region step", "num_learners=2")),
    ("hatrpo kl_threshold 0", match, {"kl_threshold": 0.0}, ("kl_threshold", "> 0")),
]


@pytest.mark.parametrize(
    "algo, make, kw, fragments",
    [("happo", *c[1:]) for c in CASES] + [("hatrpo", *c[1:]) for c in HATRPO_CASES],
    ids=[c[0] for c in CASES + HATRPO_CASES],
)
def test_bad_input_is_a_marl_error_naming_it(algo, make, kw, fragments, tmp_path):
    with pytest.raises(MarlError) as err:
        marl.fit(make(), algo, stop={"iterations": 1}, log_dir=str(tmp_path / "runs"), **kw)
    for fragment in fragments:
        assert fragment in str(err.value), (fragment, str(err.value))
    assert not (tmp_path / "runs").exists()
