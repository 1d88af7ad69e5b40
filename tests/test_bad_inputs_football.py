"""Bad inputs to ``make_env("football", ...)``: each is a ``MarlError`` naming the bad value and the valid
choices. The options are checked before gfootball is imported, so the table runs without it (as in CI)."""

import sys

import pytest

from marl.env import make_env
from marl.errors import MarlError

CASES = [
    # (scenario, kwargs, fragments of the message)
    (None, {}, ["needs a scenario", "academy_empty_goal_close", "11_vs_11_easy_stochastic"]),
    (
        "academy_empty_goal_clos",
        {},
        ["Unknown Google Research Football scenario", "Did you mean 'academy_empty_goal_close'"],
    ),
    ("11_vs_11_stochastic", {}, ["'11_vs_11_stochastic'", "Valid choices", "11_vs_11_easy_stochastic"]),
    ("academy_corner", {"representation": "pixels"}, ["football representation 'pixels'", "extracted, simple115v2"]),
    ("academy_corner", {"representation": "simple115"}, ["Did you mean 'simple115v2'"]),
    ("academy_corner", {"rewards": "checkpoints"}, ["football rewards 'checkpoints'", "scoring, scoring,checkpoints"]),
    ("academy_empty_goal", {"number_of_left_players_agent_controls": 3}, ["must be an int in 1..2", "got 3"]),
    ("academy_corner", {"number_of_left_players_agent_controls": 0}, ["must be an int in 1..11", "got 0"]),
    ("academy_corner", {"number_of_left_players_agent_controls": 2.0}, ["must be an int in 1..11", "got 2.0"]),
    (
        "academy_corner",
        {"n_agents": 2},
        ["Unknown keyword argument 'n_agents'", "number_of_left_players_agent_controls"],
    ),
    ("academy_corner", {"representaton": "extracted"}, ["'representaton'", "Did you mean 'representation'"]),
    ("academy_corner", {"num_envs": 0}, ["num_envs must be a positive int, got 0"]),
]


@pytest.mark.parametrize("scenario, kwargs, fragments", CASES)
def test_bad_football_inputs(monkeypatch, scenario, kwargs, fragments):
    monkeypatch.setitem(sys.modules, "gfootball", None)  # checked before gfootball is needed
    with pytest.raises(MarlError) as e:
        make_env("football", scenario, **kwargs)
    for f in fragments:
        assert f in str(e.value), (f, str(e.value))
