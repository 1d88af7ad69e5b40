"""Bad episode limits and scenario names (issue 30, items 6 and 7): each case ends in a ``MarlError`` of the
expected type whose message names the bad value and what to write instead.

One table, no Ray: the QMIX case fails in ``fit``'s checks before Ray starts.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch

import marl
from marl.errors import MarlError

pytest.importorskip("lbforaging")

LBF = "lbforaging:Foraging-8x8-2p-2f-v3"


class NoLimit(gym.Env):
    """A two-agent Gymnasium env (EPyMARL's Tuple convention) that declares no step limit."""

    def __init__(self):
        self.observation_space = gym.spaces.Tuple([gym.spaces.Box(0, 1, (2,), np.float32)] * 2)
        self.action_space = gym.spaces.Tuple([gym.spaces.Discrete(2)] * 2)

    def reset(self, seed=None, options=None):
        return (np.zeros(2, np.float32),) * 2, {}

    def step(self, actions):
        return (np.zeros(2, np.float32),) * 2, [0.0, 0.0], False, False, {}


CASES = {
    "gym both names": (
        lambda: marl.make_env("gymnasium", LBF, num_envs=1, time_limit=20, episode_limit=3),
        MarlError,
        ["got both episode_limit=3 and time_limit=20", "time_limit is the old name of episode_limit", "Pass only"],
    ),
    "gym both names, object": (
        lambda: marl.make_env(NoLimit, num_envs=1, time_limit=20, episode_limit=3),
        MarlError,
        ["got both episode_limit=3 and time_limit=20"],
    ),
    "gym limit 0": (
        lambda: marl.make_env("gymnasium", LBF, num_envs=1, episode_limit=0),
        MarlError,
        ["make_env('gymnasium', 'Foraging-8x8-2p-2f-v3')", "episode_limit must be a whole number >= 1", "got 0"],
    ),
    "gym limit float": (
        lambda: marl.make_env("gymnasium", LBF, num_envs=1, episode_limit=2.5),
        MarlError,
        ["episode_limit must be a whole number >= 1", "got 2.5"],
    ),
    "gym limit bool": (
        lambda: marl.make_env("gymnasium", LBF, num_envs=1, time_limit=True),
        MarlError,
        ["episode_limit must be a whole number >= 1", "got True"],
    ),
    "pettingzoo limit negative": (
        lambda: marl.make_env("pettingzoo", "mpe2.simple_spread_v3", num_envs=1, episode_limit=-5),
        MarlError,
        ["PettingZoo env", "episode_limit must be a whole number >= 1", "got -5"],
    ),
    "mpe both names": (
        lambda: marl.make_env("mpe", "simple_spread", num_envs=1, episode_limit=10, max_cycles=20),
        MarlError,
        ["got both episode_limit=10 and max_cycles=20", "marl's name for this env's max_cycles"],
    ),
    "vmas both names": (
        lambda: marl.make_env("vmas", "navigation", num_envs=1, episode_limit=10, max_steps=None),
        MarlError,
        ["got both episode_limit=10 and max_steps=None", "marl's name for this env's max_steps"],
    ),
    "qmix without a limit names the argument": (
        lambda: marl.make_env(NoLimit, num_envs=1).fit("qmix"),
        MarlError,
        [
            "qmix stores whole episodes and needs a finite episode_limit",
            "gymnasium:NoLimit has none",
            "make_env('gymnasium', 'NoLimit', episode_limit=50)",
        ],
    ),
    "vdn without a limit": (
        lambda: marl.make_env(NoLimit, num_envs=1).fit("vdn"),
        MarlError,
        ["vdn stores whole episodes", "episode_limit=50"],
    ),
    "dilemma: close scenario": (
        lambda: marl.make_env("ipd", "ipx"),
        MarlError,
        ["Unknown ipd scenario 'ipx'", "Did you mean 'ipd'?", "Valid choices: ipd"],
    ),
    "dilemma: another family's game": (
        lambda: marl.make_env("ipd", "stag_hunt"),
        MarlError,
        ["Unknown ipd scenario 'stag_hunt'", "its own family: make_env('stag_hunt')"],
    ),
    "matrix: close scenario": (
        lambda: marl.make_env("matrix", "two_stepp"),
        MarlError,
        ["Unknown matrix game 'two_stepp'", "Did you mean 'two_step'?"],
    ),
    "mpe: close scenario": (
        lambda: marl.make_env("mpe", "simple_sprad"),
        MarlError,
        ["Unknown MPE scenario 'simple_sprad'", "Did you mean 'simple_spread'?"],
    ),
}


@pytest.mark.parametrize("case", list(CASES))
def test_bad_limit_or_scenario(case):
    build, error, fragments = CASES[case]
    with pytest.raises(error) as e:
        build()
    for fragment in fragments:
        assert fragment in str(e.value), (fragment, str(e.value))


def test_every_family_with_a_scenario_list_names_the_closest():
    """``make_env(family, <a listed scenario with its last letter changed>)`` names the closest scenario,
    for every family :func:`marl.list_envs` lists (families with one scenario name that one)."""
    listed = marl.list_envs(with_scenarios=True)
    assert set(listed) == set(marl.list_envs())  # every family, with its scenarios
    for family, names in listed.items():
        assert names, family
        if str(names[0]).startswith("<unavailable"):
            continue
        good = str(names[0])
        bad = good[:-1] + ("x" if good[-1] != "x" else "y")
        with pytest.raises(MarlError) as e:
            marl.make_env(family, bad)
        msg = str(e.value)
        assert bad.split(":")[-1] in msg, (family, msg)
        assert "Did you mean" in msg or f"'{good}'" in msg, (family, msg)  # one-scenario families name it


@pytest.mark.parametrize(
    "family, scenario, kwargs",
    [
        ("gymnasium", LBF, {}),
        ("pettingzoo", "mpe2.simple_spread_v3", {}),
        ("mpe", "simple_spread", {}),
        ("mpe", "simple_spread", {"backend": "mpe2"}),
        ("vmas", "navigation", {}),
    ],
)
def test_episode_limit_is_one_keyword_in_every_family(family, scenario, kwargs):
    """``episode_limit=7`` is the limit in each family (VMAS ``max_steps``, MPE ``max_cycles`` underneath),
    and the first episode is cut at step 7 (the envs here run longer by themselves)."""
    env = marl.make_env(family, scenario, num_envs=2, episode_limit=7, **kwargs)
    assert env.info.episode_limit == 7
    s = env.reset(seed=0)
    gen = torch.Generator().manual_seed(0)
    for t in range(1, 8):
        s = env.step(env.random_actions(s, gen))
        assert bool(s.done.all()) == (t == 7), (family, t)
    assert env.spec.make(num_envs=1).info.episode_limit == 7  # the spec rebuilds it with the same limit
