"""Bad input to the JaxMARL families (issue 30, item 4): each case is a ``MarlError`` naming the bad value
and the valid choices. Every case fails before anything is compiled (a second or two with jaxmarl imported).
"""

import pytest

from marl.env import make_env
from marl.errors import MarlError

pytest.importorskip("jaxmarl")

CASES = [
    # (family, scenario, kwargs, message fragment)
    ("overcooked", "cramped_rom", {}, "Did you mean 'cramped_room'?"),
    ("overcooked", "kitchen", {}, "Valid choices: asymm_advantages, coord_ring, counter_circuit"),
    ("storm", "storm_2q", {}, "Did you mean 'storm_2p'?"),
    ("hanabi", "6p", {}, "Unknown hanabi scenario '6p'"),
    ("hanabi", None, {"players": 6}, "Hanabi players must be 2, 3, 4 or 5, got 6"),
    ("hanabi", "3p", {"players": 2}, "disagree"),
    ("mabrax", None, {}, "needs a scenario. Valid choices: ant_4x2"),
    ("mabrax", "ant_4x3", {}, "Did you mean 'ant_4x2'?"),
    ("overcooked", "cramped_room", {"max_step": 10}, "Did you mean 'max_steps'?"),
    ("overcooked", "cramped_room", {"max_steps": 0}, "max_steps must be a positive int, got 0"),
    ("overcooked", "cramped_room", {"shaping_horizon": 100}, "shaping_horizon needs shaped_reward=True"),
    ("overcooked", "cramped_room", {"shaped_reward": True, "shaping_horizon": -1}, "positive number of env steps"),
    ("hanabi", "2p", {"shaped_reward": True}, "Unknown keyword argument 'shaped_reward'"),
    ("coin_game", None, {"num_inner_steps": 2.5}, "num_inner_steps must be a positive int, got 2.5"),
    ("coin_game", None, {"num_envs": 0}, "num_envs must be a positive int, got 0"),
    ("storm", "storm", {"grid_size": 8}, "Valid kwargs: flat_obs, num_agents, num_envs, num_inner_steps"),
]


@pytest.mark.parametrize("family, scenario, kwargs, fragment", CASES)
def test_bad_input_names_value_and_choices(family, scenario, kwargs, fragment):
    with pytest.raises(MarlError) as e:
        make_env(family, scenario, **kwargs)
    assert fragment in str(e.value)
