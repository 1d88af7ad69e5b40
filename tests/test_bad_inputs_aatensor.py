"""Bad input to Advantage Alignment for tensor policies and the iterated matrix games: each case is a
``MarlError`` naming the bad value (and the valid choices where there are some), raised before Ray starts."""

import pytest
import torch

import marl
from marl.config import ConfigValueError, register_algo
from marl.errors import MarlError


def _fit(**kw):
    return lambda: marl.make_env("iterated_matrix", "ipd").fit("advantage_alignment", **kw)


CASES = [
    # (what is called, error type, message fragment)
    (lambda: marl.make_env("iterated_matrix", "ipdd"), MarlError, "Did you mean 'ipd'?"),
    (lambda: marl.make_env("iterated_matrix", "ipd", rounds=0), MarlError, "rounds must be a whole number >= 1, got 0"),
    (lambda: marl.make_env("iterated_matrix", "ipd", round=5), MarlError, "Valid kwargs: device, num_envs, payoff"),
    (lambda: marl.make_env("iterated_matrix", payoff=[[1, 0], [0, 1]]), MarlError, "must have shape [A, A, 2]"),
    (lambda: marl.make_env("iterated_matrix", "ipd", payoff=[[[1, 1]]]), MarlError, "only for the 'custom'"),
    (lambda: marl.make_env("iterated_matrix", "custom"), MarlError, "needs payoff=<[A, A, 2] array-like>"),
    (lambda: marl.make_env("iterated_matrix"), MarlError, "Valid: ipd, stag_hunt, chicken, custom"),
    (
        lambda: marl.make_env("iterated_matrix", "ipd").step(
            {"agent_0": torch.full((32, 1), 2), "agent_1": torch.zeros(32, 1)}
        ),
        MarlError,
        "agent_0",
    ),
    (_fit(beta=-1.0), ConfigValueError, "beta"),
    (_fit(aa_gamma=1.5), ConfigValueError, "aa_gamma"),
    (_fit(num_learners=2), MarlError, "needs every agent's advantages on one learner: num_learners=2"),
    (_fit(lora=True), MarlError, "'lora' is an LLM self-play key"),
    (lambda: register_algo("x", trainer="a:B", variants={"gpu": "y"}), MarlError, "Valid choices: tensor, text"),
]


@pytest.mark.parametrize("call, error, fragment", CASES)
def test_bad_input_names_value_and_choices(call, error, fragment):
    with pytest.raises(error) as e:
        call()
    assert fragment in str(e.value)
