"""Bad inputs to the Melting Pot adapter (envs/meltingpot.py): each is a ``MarlError`` naming the bad value and
the valid choices. Skipped when dm-meltingpot or dmlab2d is missing; all but the last two cases fail before a
substrate is built.
"""

import importlib.util

import pytest
import torch

if importlib.util.find_spec("meltingpot") is None or importlib.util.find_spec("dmlab2d") is None:
    pytest.skip("dm-meltingpot / dmlab2d are not installed", allow_module_level=True)

from marl.env import MarlError, make_env  # noqa: E402


def step_before_reset():
    env = make_env("meltingpot", "coins", num_envs=1)
    env.step({"player": torch.zeros(1, 2, dtype=torch.long)})


CASES = [
    ("no substrate", lambda: make_env("meltingpot"), "needs a substrate. Valid choices: "),
    (
        "unknown substrate",
        lambda: make_env("meltingpot", "commons_harvest_open"),
        "Unknown Melting Pot substrate 'commons_harvest_open'. Did you mean 'commons_harvest__open'",
    ),
    (
        "scenario (bots)",
        lambda: make_env("meltingpot", "clean_up_0"),
        "'clean_up_0' is a Melting Pot scenario (substrate 'clean_up' with background bots)",
    ),
    (
        "unknown keyword",
        lambda: make_env("meltingpot", "coins", rgb_scal=8),
        "Unknown keyword argument 'rgb_scal' for Melting Pot substrates.",
    ),
    ("rgb_scale 0", lambda: make_env("meltingpot", "coins", rgb_scale=0), "rgb_scale must be a positive int, got 0"),
    (
        "rgb_scale not dividing 88",
        lambda: make_env("meltingpot", "coins", rgb_scale=3),
        "rgb_scale=3 must divide the RGB observation's height and width 88 x 88",
    ),
    (
        "max_steps 0",
        lambda: make_env("meltingpot", "coins", max_steps=0),
        "max_steps (or None) must be a positive int, got 0",
    ),
    (
        "unknown state",
        lambda: make_env("meltingpot", "coins", state="global"),
        "Unknown Melting Pot state 'global'. Valid choices: vectors, world",
    ),
    (
        "state vectors without vector keys",
        lambda: make_env("meltingpot", "collaborative_cooking__cramped", state="vectors"),
        "gives its players no vector observation (only RGB), so state='vectors' would be empty; use state='world'",
    ),
    (
        "unknown role",
        lambda: make_env("meltingpot", "coins", roles=["default", "predator"]),
        "Unknown role of Melting Pot substrate 'coins' 'predator'. Valid choices: default",
    ),
    (
        "roles as one string",
        lambda: make_env("meltingpot", "coins", roles="default"),
        "roles must be a non-empty list of role names (default), got 'default'",
    ),
    ("num_envs 0", lambda: make_env("meltingpot", "coins", num_envs=0), "num_envs must be a positive int, got 0"),
    ("step before reset", step_before_reset, "Call reset() before step()."),
    (
        "action out of range",
        lambda: make_env("meltingpot", "coins", num_envs=1).step({"player": torch.full((1, 2), 7)}),
        "Actions of group 'player' must lie in [0, 7)",
    ),
]


@pytest.mark.parametrize("make, fragment", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_bad_input(make, fragment):
    with pytest.raises(MarlError) as e:
        make()
    assert fragment in str(e.value)
