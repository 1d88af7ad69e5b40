"""Every way a PettingZoo user names an env resolves (envs/pettingzoo/names.py)."""

import pytest

import marl
from marl.envs.pettingzoo import names
from marl.errors import MarlError


@pytest.mark.parametrize(
    "written, path",
    [
        ("pettingzoo.classic.tictactoe_v3", "pettingzoo.classic.tictactoe_v3"),
        ("classic.tictactoe_v3", "pettingzoo.classic.tictactoe_v3"),
        ("tictactoe_v3", "pettingzoo.classic.tictactoe_v3"),
        ("tictactoe", "pettingzoo.classic.tictactoe_v3"),
        ("classic.connect_four", "pettingzoo.classic.connect_four_v3"),
        ("pistonball_v6", "pettingzoo.butterfly.pistonball_v6"),
        ("simple_tag_v3", "mpe2.simple_tag_v3"),  # PettingZoo's MPE lives in mpe2 now
        ("mpe2.simple_tag", "mpe2.simple_tag_v3"),
        ("mypkg.envs.arena_v1", "mypkg.envs.arena_v1"),  # another package's path: left to the importer
        ("json", "json"),  # a top-level module that exists
        ("mypkg.mod:ArenaEnv", "mypkg.mod:ArenaEnv"),
    ],
)
def test_forms_resolve(written, path):
    assert names.resolve_name(written) == path


@pytest.mark.parametrize(
    "written, closest",
    [
        ("tictactoe_v4", "'tictactoe_v3'"),
        ("classic.tictacto_v3", "'classic.tictactoe_v3'"),
        ("pettingzoo.classic.tictactoe_v9", "'pettingzoo.classic.tictactoe_v3'"),
        ("conect_four", "'connect_four'"),
    ],
)
def test_typos_name_the_closest_in_the_form_written(written, closest):
    with pytest.raises(MarlError, match=f"Unknown PettingZoo env module '{written}'. Did you mean {closest}"):
        names.resolve_name(written)


def test_ambiguous_short_name_lists_every_match(monkeypatch):
    monkeypatch.setattr(names, "known_modules", lambda: ["pettingzoo.classic.duel_v1", "pettingzoo.sisl.duel_v1"])
    with pytest.raises(MarlError, match="'duel_v1' is ambiguous: pettingzoo.classic.duel_v1, pettingzoo.sisl.duel_v1"):
        names.resolve_name("duel_v1")
    assert names.resolve_name("sisl.duel_v1") == "pettingzoo.sisl.duel_v1"


@pytest.mark.parametrize("written", ["tictactoe_v3", "classic.connect_four", "simple_tag_v3"])
def test_make_env_takes_short_names(written):
    env = marl.make_env("pettingzoo", written, num_envs=2)
    s = env.reset(seed=0)
    env.step(env.random_actions(s))
    assert env.num_envs == 2


def test_zero_sum_games_are_competitive_with_one_team_per_player():
    env = marl.make_env("pettingzoo", "tictactoe_v3", num_envs=2)
    assert env.info.kind == "competitive"
    assert env.info.teams == {"player_1": ["player_1"], "player_2": ["player_2"]}
    assert marl.make_env("pettingzoo", "connect_four", num_envs=1).info.kind == "competitive"
    declared = marl.make_env("pettingzoo", "tictactoe_v3", num_envs=1, kind="cooperative")
    assert declared.info.kind == "cooperative"  # what the user declares wins
    assert marl.make_env("pettingzoo", "simple_spread_v3", num_envs=1).info.kind == "cooperative"


def test_zero_sum_game_trains_and_evaluates_per_player(ray_session, run_dir):
    # each player is its own team (and its own group, named as the player): evaluation reports both sides
    env = marl.make_env("pettingzoo", "tictactoe_v3", num_envs=8)
    res = env.fit("ippo", stop={"iterations": 2}, progress=False, eval_episodes=16, rollout_length=10, log_dir=run_dir)
    assert res.eval["return_player_1_mean"] == pytest.approx(-res.eval["return_player_2_mean"])
    assert res.eval["episode_return_mean"] == pytest.approx(0.0)
