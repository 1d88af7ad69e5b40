"""Competitive play: AEC turn mode, games between policies and bots, cross-play, ratings,
self-play co-players, the league command, and an IPPO self-play learning check."""

import json
import math
from functools import lru_cache
from types import SimpleNamespace

import numpy as np
import pytest
import torch

import marl
from marl.competitive import League, RandomBot, cross_play, make_bot, outcome, play, ratings, versus
from marl.engine.opponents import Opponents, check_opponents
from marl.errors import MarlError

LINES = [(0, 1, 2), (3, 4, 5), (6, 7, 8), (0, 3, 6), (1, 4, 7), (2, 5, 8), (0, 4, 8), (2, 4, 6)]


@lru_cache(None)
def _random_play(board: str, turn: str):
    """Exact (P(X wins), P(O wins), P(draw)) of tic-tac-toe from ``board`` under uniformly random moves."""
    for p in "XO":
        if any(all(board[i] == p for i in line) for line in LINES):
            return (1.0, 0.0, 0.0) if p == "X" else (0.0, 1.0, 0.0)
    empty = [i for i, c in enumerate(board) if c == "."]
    if not empty:
        return (0.0, 0.0, 1.0)
    nxt = [_random_play(board[:i] + turn + board[i + 1 :], "O" if turn == "X" else "X") for i in empty]
    return tuple(sum(v[k] for v in nxt) / len(nxt) for k in range(3))


def test_turn_mode_random_play_matches_exact_enumeration():
    # one batched step = one move: random vs random must give the exact outcome frequencies
    env = marl.make_env("pettingzoo", "tictactoe_v3", num_envs=64, seed=0)
    assert env.aec_mode == "turn"
    n = 3000
    rec = play(env, {"player_1": RandomBot(env.info, 1), "player_2": RandomBot(env.info, 2)}, n)
    x, o, d = _random_play("." * 9, "X")
    assert abs(x - 0.5848) < 1e-3 and abs(o - 0.2880) < 1e-3  # the known values, as a check of the helper
    r1 = rec["player_1"]
    assert r1.games == n and rec["player_2"].win == r1.loss and rec["player_2"].draw == r1.draw
    for got, p in [(r1.win, x), (r1.loss, o), (r1.draw, d)]:
        assert abs(got / n - p) < 4 * math.sqrt(p * (1 - p) / n), (got / n, p)


def test_turn_mode_masks_waiting_agent_and_shows_the_new_move():
    env = marl.make_env("pettingzoo", "tictactoe_v3", num_envs=3, seed=1)
    s = env.reset()
    assert s.avail_actions["player_1"].all()
    assert s.avail_actions["player_2"][:, 0].tolist() == [[True] + [False] * 8] * 3  # waits: only action 0
    acts = {"player_1": torch.tensor([[4], [0], [8]]), "player_2": torch.tensor([[5], [5], [5]])}
    s = env.step(acts)
    for b, cell in enumerate([4, 0, 8]):
        p2_view = s.obs["player_2"][b, 0].reshape(9, 2)  # channel 1: the opponent's pieces
        assert p2_view[cell, 1] == 1 and p2_view.sum() == 1  # player_2's ignored action placed nothing
        legal = s.avail_actions["player_2"][b, 0]
        assert not legal[cell] and legal.sum() == 8
        assert s.avail_actions["player_1"][b, 0].tolist() == [True] + [False] * 8
    ended = 0
    for _ in range(9):
        s = env.step(env.random_actions(s))
        ended += int(s.done.sum())
        assert s.info["illegal_actions"].sum() == 0  # a mover's own mask is current: never illegal
    assert ended >= 3  # every game ends within 9 moves


@pytest.mark.parametrize("name", ["tictactoe_v3", "connect_four_v3", "go_v5", "rps_v2"])
def test_classic_games_pass_the_env_contract(name):
    env = marl.make_env("pettingzoo", name, num_envs=4, seed=0)
    assert env.info.kind == "competitive" and len(env.info.teams) == 2
    marl.check_env(env, steps=60)


def test_outcome_by_hand():
    assert outcome([1, -1], 0) == "win" and outcome([1, -1], 1) == "loss"
    assert outcome([0, 0], 0) == "draw" and outcome([2, 2, 1], 2) == "loss" and outcome([2, 2, 1], 1) == "draw"


class FirstLegal:
    """Deterministic bot: the lowest legal action."""

    def __init__(self, info):
        self.info = info

    def reset(self):
        pass

    def act(self, step):
        return {g: step.avail_actions[g].float().argmax(-1) for g in self.info.groups}


def test_cross_play_matrix_is_complementary_and_ratings_order_players():
    env = marl.make_env("pettingzoo", "tictactoe_v3", num_envs=16, seed=0)
    players = {"first": FirstLegal(env.info), "rand_a": RandomBot(env.info, 3), "rand_b": RandomBot(env.info, 4)}
    lg = cross_play(env, players, episodes=200)
    assert lg.score.shape == (3, 3) and np.allclose(np.diag(lg.score), 0.5)
    assert np.allclose(lg.score + lg.score.T, 1.0)  # two-player zero-sum: i's score + j's score = 1
    assert len(lg.games) == 6 * 200
    r = ratings(lg)
    assert set(r) == set(players) and all(v["sigma"] > 0 for v in r.values())
    # a hand-made league: A always beats B, B always beats C
    games = [(("A", "B"), (1.0, -1.0))] * 20 + [(("C", "B"), (-1.0, 1.0))] * 20
    hand = League(names=["A", "B", "C"], score=np.full((3, 3), 0.5), games=games)
    r = ratings(hand)
    assert r["A"]["mu"] > r["B"]["mu"] > r["C"]["mu"]
    draws = League(names=["A", "B"], score=np.full((2, 2), 0.5), games=[(("A", "B"), (0.0, 0.0))] * 20)
    r = ratings(draws)
    assert abs(r["A"]["mu"] - r["B"]["mu"]) < 1e-6


def test_bad_players_and_seatings_are_errors():
    env = marl.make_env("pettingzoo", "tictactoe_v3", num_envs=2, seed=0)
    with pytest.raises(MarlError, match=r"Unknown bot 'randum'.*random"):
        make_bot("randum", env.info)
    with pytest.raises(MarlError, match=r"seats \(teams\) are \['player_1', 'player_2'\]"):
        play(env, {"player_1": RandomBot(env.info)}, 4)
    with pytest.raises(MarlError, match=">= 2 players"):
        cross_play(env, {"a": RandomBot(env.info)}, 4)


def test_opponent_mix_is_checked_before_training():
    info = marl.make_env("pettingzoo", "tictactoe_v3", num_envs=1).info
    check_opponents({"self": 0.5, "pool": 0.25, "random": 0.25}, info)
    with pytest.raises(MarlError, match=r"Unknown opponent 'randon'.*random"):
        check_opponents({"randon": 1.0}, info)
    with pytest.raises(MarlError, match="positive sum"):
        check_opponents({"self": 0.0}, info)
    coop = marl.make_env("matrix", "penalty", num_envs=1).info
    with pytest.raises(MarlError, match="need a competitive env with two or more teams"):
        check_opponents({"random": 1.0}, coop)
    with pytest.raises(MarlError, match="Unknown opponent"):
        marl.make_env("pettingzoo", "tictactoe_v3", num_envs=2).fit(
            "ippo", opponents={"bogus": 1.0}, stop={"iterations": 1}
        )


def test_co_players_take_one_seat_per_copy_and_are_not_trained():
    env = marl.make_env("pettingzoo", "tictactoe_v3", num_envs=256, seed=0)
    cfg = SimpleNamespace(opponents={"self": 0.5, "random": 0.5}, pool_every=0, pool_size=1, pool_sampling="uniform")
    opp = Opponents(cfg, env.info, env.num_envs, seed=0)
    step = env.reset()
    opp.new_episodes(torch.ones(256, dtype=torch.bool))
    mine = {"player_1": torch.full((256, 1), 7), "player_2": torch.full((256, 1), 7)}
    runner = SimpleNamespace(env=env)
    acts, trained = opp.override(runner, step, mine)
    selfplay = torch.from_numpy(opp.co == "self")
    both = trained["player_1"][:, 0] & trained["player_2"][:, 0]
    one = trained["player_1"][:, 0] ^ trained["player_2"][:, 0]
    assert torch.equal(both, selfplay) and torch.equal(one, ~selfplay)  # vs a bot: exactly one seat trained
    assert 90 < int(selfplay.sum()) < 166  # p = 1/2 of 256
    for g in ("player_1", "player_2"):
        kept = trained[g][:, 0]
        assert (acts[g][kept] == 7).all()  # the learner's own actions stand
        assert step.avail_actions[g][~kept, 0].gather(-1, acts[g][~kept]).all()  # the bot's are legal
    learner_seats = opp.learner[~selfplay.numpy()]
    assert 0 < learner_seats.mean() < 1  # both seats get learned


def test_ippo_self_play_beats_random_in_both_seats(tmp_path):
    torch.manual_seed(0)
    env = marl.make_env("pettingzoo", "tictactoe_v3", num_envs=64)
    res = env.fit(
        "ippo",
        share="all",
        stop={"env_steps": 60_000},
        log_dir=str(tmp_path),
        eval_episodes=0,
        opponents={"self": 0.5, "random": 0.25, "pool": 0.25},
        pool_every=5,
        seed=0,
        progress=False,
    )
    rates = versus(
        marl.make_env("pettingzoo", "tictactoe_v3", num_envs=32),
        res.policy,
        make_bot("random", env.info, seed=11),
        episodes=300,
    )
    # random play wins 58.5% as player_1 and 28.8% as player_2 (exact enumeration above)
    assert rates["player_1"]["win_rate"] > 0.80, rates
    assert rates["player_2"]["win_rate"] > 0.45, rates


def test_league_command_writes_matrix_ratings_and_heatmap(tmp_path):
    from marl.league import run_league

    env = marl.make_env("pettingzoo", "tictactoe_v3", num_envs=8)
    res = env.fit(
        "ippo",
        share="all",
        stop={"iterations": 4},
        log_dir=str(tmp_path / "runs"),
        checkpoint_every=2,
        keep_checkpoints=0,
        eval_episodes=0,
        progress=False,
    )
    run = res.log_dir
    out = tmp_path / "league"
    report = run_league([run], bots=["random"], episodes=8, out=str(out))
    n = len(report["names"])
    assert n >= 3 and report["names"][-1] == "bot:random"
    assert np.array(report["score"]).shape == (n, n)
    assert set(report["ratings"]) == set(report["names"])
    saved = json.loads((out / "league.json").read_text())
    assert saved["names"] == report["names"]
    assert "| player | mu | sigma | ordinal |" in (out / "league.md").read_text()
    assert (out / "crossplay.png").read_bytes()[:4] == b"\x89PNG"
    with pytest.raises(MarlError, match="already holds files"):
        run_league([run], episodes=2, out=str(out))


def test_text_games_join_versus_eval_and_league(tmp_path):
    """Text games go through the same path (algos/llm/matches.py): their seats are the players,
    their bots the game's own; a text policy from marl.load plays in versus, evaluate and the league."""
    pytest.importorskip("transformers")
    pytest.importorskip("pyspiel")
    from marl.algos.llm.policy import tiny_config, word_tokenizer
    from marl.competitive import bot_for, env_seats
    from marl.league import run_league

    tok = word_tokenizer(["me", "opp", "_"] + [f"c{i}" for i in range(9)])
    env = marl.make_env("openspiel", "tic_tac_toe", prompt_style="compact", history="last")
    res = env.fit(
        "mars",
        stop={"iterations": 2},
        model=tiny_config(len(tok), n_positions=64),
        tokenizer=tok,
        constrain_actions=True,
        max_new_tokens=2,
        games_per_iteration=16,
        eval_every=0,
        checkpoint_every=1,
        keep_checkpoints=0,
        log_dir=str(tmp_path / "runs"),
        progress=False,
        seed=0,
    )
    assert env_seats(env) == ["player_0", "player_1"]
    bot = bot_for(env, "random")
    # random vs random through the text game: X wins 58.5%, O 28.8% (exact; sd of 400 games ~0.025)
    rr = versus(env, bot, bot, episodes=400)
    assert abs(rr["player_0"]["win_rate"] - 0.585) < 0.08 and abs(rr["player_1"]["win_rate"] - 0.288) < 0.08, rr
    assert rr["player_0"]["win_rate"] == rr["player_1"]["loss_rate"]  # same 400 seatings, mirrored
    policy = marl.load(res.log_dir).policy
    rates = versus(env, policy, bot, episodes=20)
    for r in rates.values():
        assert r["games"] == 20 and math.isclose(r["win_rate"] + r["draw_rate"] + r["loss_rate"], 1.0)
    ev = marl.load(res.log_dir).evaluate(episodes=10)
    assert {
        f"vs_random/player_{i}/{k}" for i in (0, 1) for k in ("win_rate", "draw_rate", "loss_rate", "score")
    } <= set(ev)
    report = run_league([res.log_dir], bots=["random"], episodes=6, out=str(tmp_path / "league"))
    assert report["names"] == ["checkpoint_000001", "checkpoint_000002", "bot:random"]
    score = np.array(report["score"])
    assert np.allclose(score + score.T, 1.0)  # every game counted once for each side
    with pytest.raises(MarlError, match=r"'always_defect'.*Valid choices: mcts, random"):
        bot_for(env, "always_defect")
    with pytest.raises(MarlError, match="text game"):
        versus(env, object(), bot, episodes=2)
