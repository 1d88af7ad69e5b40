"""Text games: the action parser, iterated dilemmas, OpenSpiel games and Trust-and-Split (no Ray, fast)."""

import sys

import pytest

from marl.env import MarlError, make_env
from marl.envs.text.dilemmas import COOPERATE, DEFECT, IteratedDilemma, TitForTat
from marl.envs.text.trust_and_split import Greedy, TrustAndSplit, TruthfulCooperator, split_payoffs
from marl.text import RandomBot, TextEnv, parse_action


def play(env, bots, seed=0):
    """Play one game with ``bots`` (agent -> Bot); return the last step's rewards."""
    env.reset(seed=seed)
    rewards = {}
    while not env.done:
        _, rewards, *_ = env.step({a: bots[a].act(env, a) for a in env.to_act()})
    return rewards


# ---------------------------------------------------------------------------- parser
@pytest.mark.parametrize(
    "text, move",
    [
        ("<A>", "<A>"),
        ("  <a> ", "<A>"),  # case and spacing ignored
        ("I play <B> now", "<B>"),  # exactly one legal move contained
        ("<A> or <B>?", None),  # two moves: ambiguous
        ("nothing here", None),
        ("<answer><A></answer> ... <answer><B></answer>", "<B>"),  # the last answer block wins
        ("thinking about <A>... <answer> <B> </answer>", "<B>"),  # only the answer block is read
    ],
)
def test_parse_action(text, move):
    assert parse_action(text, [COOPERATE, DEFECT]) == move


def test_parse_action_prefers_exact_match():
    assert parse_action("c1", ["c1", "c10"]) == "c1"
    assert parse_action("k10", [f"k{i}" for i in range(11)]) == "k10"


# ---------------------------------------------------------------------------- dilemmas
@pytest.mark.parametrize(
    "m0, m1, r0, r1",
    [(COOPERATE, COOPERATE, 3, 3), (COOPERATE, DEFECT, 0, 5), (DEFECT, COOPERATE, 5, 0), (DEFECT, DEFECT, 1, 1)],
)
def test_ipd_payoffs(m0, m1, r0, r1):
    env = IteratedDilemma("ipd", rounds=2)
    env.reset(seed=0)
    _, rew, done, _, infos = env.step({"player_0": m0, "player_1": m1})
    assert rew == {"player_0": r0, "player_1": r1} and not done["__all__"]
    assert infos["player_0"]["move"] == m0 and infos["player_1"]["legal_actions"] == [COOPERATE, DEFECT]


def test_dilemma_penalty_plays_defect():
    env = IteratedDilemma("ipd", rounds=1, invalid_penalty=-1.0)
    env.reset(seed=0)
    _, rew, done, _, infos = env.step({"player_0": "maybe", "player_1": COOPERATE})
    assert infos["player_0"] == {"invalid": True, "move": DEFECT}
    assert rew == {"player_0": 5 - 1.0, "player_1": 0} and done["__all__"]
    assert env.episode_metrics()["invalid_rate"] == 0.5


def test_dilemma_retry_then_forfeit():
    env = IteratedDilemma("ipd", rounds=3, invalid_action="retry", retries=1, invalid_penalty=-0.5)
    env.reset(seed=0)
    obs, rew, done, _, _ = env.step({"player_0": "??", "player_1": COOPERATE})
    assert list(obs) == ["player_0"] and "Invalid reply" in obs["player_0"][-1]["content"]
    assert rew == {"player_0": -0.5, "player_1": 0.0} and not done["__all__"]
    obs, rew, done, _, _ = env.step({"player_0": DEFECT})  # the good retry plays the round
    assert rew == {"player_0": 5.0, "player_1": 0.0} and set(obs) == {"player_0", "player_1"}
    env.step({"player_0": "??", "player_1": COOPERATE})
    _, rew, done, _, _ = env.step({"player_0": "still ??"})  # retries used up: forfeit
    assert done["__all__"] and rew == {"player_0": -0.5, "player_1": 0.0}


def test_dilemma_forfeit_ends_game():
    env = IteratedDilemma("ipd", rounds=5, invalid_action="forfeit", invalid_penalty=-11.0)
    env.reset(seed=0)
    obs, rew, done, _, _ = env.step({"player_0": COOPERATE, "player_1": "no"})
    assert obs == {} and done["__all__"] and rew == {"player_0": 0.0, "player_1": -11.0}
    with pytest.raises(MarlError):
        env.step({"player_0": COOPERATE, "player_1": COOPERATE})


def test_dilemma_forfeit_penalises_every_offender():
    env = IteratedDilemma("ipd", rounds=5, invalid_action="forfeit", invalid_penalty=-11.0)
    env.reset(seed=0)
    obs, rew, done, _, infos = env.step({"player_0": "no", "player_1": "neither"})
    assert obs == {} and done["__all__"] and rew == {"player_0": -11.0, "player_1": -11.0}
    assert infos["player_0"]["invalid"] and infos["player_1"]["invalid"]
    assert env.returns == rew and env.episode_metrics()["invalid_rate"] == 1.0


def test_format_reward_is_a_base_option():
    env = IteratedDilemma("ipd", rounds=2, format_reward=0.05, invalid_penalty=-1.0)
    env.reset(seed=0)
    _, rew, *_ = env.step({"player_0": COOPERATE, "player_1": "??"})  # the bad reply gets no format reward
    assert rew == {"player_0": pytest.approx(0 + 0.05), "player_1": 5 - 1.0}
    forfeit = IteratedDilemma("ipd", rounds=2, format_reward=0.05, invalid_action="forfeit", invalid_penalty=-11.0)
    forfeit.reset(seed=0)
    _, rew, *_ = forfeit.step({"player_0": COOPERATE, "player_1": "??"})
    assert rew == {"player_0": 0.05, "player_1": -11.0}  # a valid reply keeps its format reward


class _Deal(TextEnv):
    """One simultaneous round; the system prompt shows a card dealt by new_game()."""

    simultaneous = True

    def new_game(self):
        self.card = self.rng.choice("JQK")

    def legal_actions(self, agent):
        return ["<go>"]

    def system_prompt(self, agent):
        return f"Your card is {self.card}."

    def observe(self, agent):
        return "Go?"

    def apply(self, moves):
        self.done = True
        return {a: 1.0 for a in moves}


def test_reset_deals_before_system_prompts_and_gives_legal_actions():
    env = _Deal("deal")
    obs, infos = env.reset(seed=0)
    assert obs["player_0"][0]["content"] == f"Your card is {env.card}."
    assert infos == {a: {"legal_actions": ["<go>"]} for a in env.players}
    env = IteratedDilemma("ipd", rounds=1)
    assert env.reset(seed=0)[1] == {a: {"legal_actions": [COOPERATE, DEFECT]} for a in env.players}


def test_free_text_turn_needs_a_parse_override():
    class Talk(_Deal):
        def legal_actions(self, agent):
            return []

    env = Talk("talk")
    env.reset(seed=0)
    with pytest.raises(MarlError, match="override parse"):
        env.step({"player_0": "hi", "player_1": "hello"})


def test_tit_for_tat_copies_co_player():
    env = IteratedDilemma("ipd", rounds=4)
    env.reset(seed=0)
    tft = TitForTat()
    seen = []
    for other in (DEFECT, COOPERATE, DEFECT, COOPERATE):
        seen.append(tft.act(env, "player_0"))
        env.step({"player_0": seen[-1], "player_1": other})
    assert seen == [COOPERATE, DEFECT, COOPERATE, DEFECT]
    m = env.episode_metrics()
    assert m["coop_rate_player_0"] == 0.5 and m["p_coop_after_defect"] == 0.0  # TFT always answers D with D


def test_dilemma_compact_and_errors():
    env = IteratedDilemma("stag_hunt", rounds=2, prompt_style="compact")
    obs, _ = env.reset(seed=0)
    assert obs["player_0"] == [{"role": "user", "content": "start"}]
    obs, *_ = env.step({"player_0": COOPERATE, "player_1": DEFECT})
    assert obs["player_1"][-1]["content"] == "BA"  # one word: own move first, A = cooperate
    with pytest.raises(MarlError, match="Valid choices"):
        IteratedDilemma("ipdd")
    with pytest.raises(MarlError, match="invalid_action"):
        IteratedDilemma("ipd", invalid_action="ignore")


# ---------------------------------------------------------------------------- OpenSpiel
def _ttt(**kw):
    pytest.importorskip("pyspiel")
    from marl.envs.text.openspiel import OpenSpielGame

    return OpenSpielGame("tic_tac_toe", **kw)


def _run(env, cells):
    """Play tic-tac-toe cells (0..8) alternately from X; return the last step's output."""
    env.reset(seed=0)
    out = None
    for cell in cells:
        (agent,) = env.to_act()
        out = env.step({agent: env.action_text(cell)})
    return out


def test_openspiel_missing_pyspiel(monkeypatch):
    from marl.envs.text.openspiel import OpenSpielGame

    monkeypatch.setitem(sys.modules, "pyspiel", None)  # import pyspiel -> ImportError
    with pytest.raises(MarlError, match="pip install open_spiel"):
        OpenSpielGame("tic_tac_toe")


def test_ttt_make_env_and_seats():
    pytest.importorskip("pyspiel")
    env = make_env("openspiel", "tic_tac_toe")
    assert env.info.kind == "competitive" and env.players == ["player_0", "player_1"]
    obs, _ = env.reset(seed=0)
    assert list(obs) == ["player_0"] and env.to_act() == ["player_0"]
    assert "mark X" in obs["player_0"][0]["content"] and "<X(0,0)>" in obs["player_0"][0]["content"]
    with pytest.raises(MarlError, match="tic_tac_toe"):
        make_env("openspiel", "tic_tac_to")


def test_ttt_rendering_from_both_views():
    env = _ttt()
    obs, *_ = _run(env, [0, 4])  # X at (0,0), O at (1,1); X to move
    prompt = obs["player_0"][-1]["content"]
    assert "X__\n_O_\n___" in prompt and "player_1 played <O(1,1)>" in prompt
    assert "<X(0,1)>" in prompt and "<X(1,1)>" not in prompt
    assert "mark O" in env.system_prompt("player_1")
    compact = _ttt(prompt_style="compact", history="last")
    obs, *_ = _run(compact, [0, 4])
    assert obs["player_0"] == [{"role": "user", "content": "me _ _ _ opp _ _ _ _"}]  # no system prompt
    obs, *_ = _run(compact, [0, 4, 8])
    assert obs["player_1"][-1]["content"] == "opp _ _ _ me _ _ _ opp"


def test_ttt_legality_map():
    env = _ttt()
    env.reset(seed=0)
    assert env.legal_map() == {f"<X({a // 3},{a % 3})>": a for a in range(9)}
    env.step({"player_0": "<answer><X(1,1)></answer>"})
    assert "<O(1,1)>" not in env.legal_actions("player_1") and env.legal_actions("player_0") == []
    assert env.legal_map()["<O(2,2)>"] == 8
    compact = _ttt(prompt_style="compact")
    compact.reset(seed=0)
    assert compact.legal_actions("player_0") == [f"c{a}" for a in range(9)]


@pytest.mark.parametrize("reply", ["<X(5,5)>", "I pass", "<O(0,0)>"])
def test_ttt_invalid_forfeits(reply):
    env = _ttt()
    env.reset(seed=0)
    obs, rew, done, _, infos = env.step({"player_0": reply})
    assert obs == {} and done["__all__"] and infos["player_0"]["invalid"]
    assert rew == {"player_0": -11.0, "player_1": 0.0}
    m = env.episode_metrics()
    assert m["forfeit"] == 1 and m["loss_player_0"] == 1 and m["win_player_1"] == 1 and m["draw"] == 0


def test_ttt_occupied_cell_forfeits_second_player():
    env = _ttt()
    env.reset(seed=0)
    env.step({"player_0": "<X(0,0)>"})
    _, rew, done, _, _ = env.step({"player_1": "<O(0,0)>"})
    assert done["__all__"] and rew == {"player_0": 0.0, "player_1": -11.0}


def test_ttt_draw_reward():
    env = _ttt(draw_reward=0.1)
    _, rew, done, _, _ = _run(env, [0, 1, 2, 4, 3, 5, 7, 6, 8])
    assert done["__all__"] and rew == {"player_0": 0.1, "player_1": 0.1}
    m = env.episode_metrics()
    assert m["draw"] == 1 and m["moves"] == 9 and m["win_player_0"] == m["loss_player_1"] == 0


def test_ttt_reset_infos_name_the_player_to_move():
    env = _ttt()
    obs, infos = env.reset(seed=0)
    assert list(obs) == list(infos) == ["player_0"] and len(infos["player_0"]["legal_actions"]) == 9


def test_ttt_terminal_reward_reaches_non_acting_player():
    env = _ttt()
    _, rew, done, _, infos = _run(env, [0, 1, 3, 2, 6])  # X completes column 0
    assert done["__all__"] and list(infos) == ["player_0"]  # only X acted ...
    assert rew == {"player_0": 1.0, "player_1": -1.0}  # ... but O gets its -1 in the same step
    assert env.episode_metrics()["win_player_0"] == 1


def test_ttt_format_reward():
    env = _ttt(format_reward=0.05)
    _, rew, *_ = _run(env, [0, 1, 3, 2, 6])
    assert rew == {"player_0": pytest.approx(1.05), "player_1": -1.0}
    assert env.returns == {"player_0": pytest.approx(3 * 0.05 + 1), "player_1": pytest.approx(2 * 0.05 - 1)}


def _seat_stats(env, bots, games, seed=0):
    wins = {"x": 0.0, "o": 0.0, "draw": 0.0}
    for g in range(games):
        play(env, bots, seed=seed + g)
        m = env.game_metrics()
        wins["x"] += m["win_player_0"]
        wins["o"] += m["win_player_1"]
        wins["draw"] += m["draw"]
    return {k: v / games for k, v in wins.items()}


def test_ttt_random_vs_random_matches_exact_baseline():
    env = _ttt(history="last", prompt_style="compact")
    # distinct bot seeds: two RandomBots with one seed would make correlated choices
    stats = _seat_stats(env, {"player_0": RandomBot(seed=1), "player_1": RandomBot(seed=2)}, 2000)
    assert stats["x"] == pytest.approx(0.5849, abs=0.04)  # exact, by enumeration (docs/text_games.md)
    assert stats["o"] == pytest.approx(0.2881, abs=0.04)
    assert stats["draw"] == pytest.approx(0.1270, abs=0.04)


def test_mcts_beats_random_as_x():
    env = _ttt(history="last")
    from marl.envs.text.openspiel import MCTSBot

    assert set(env.bots()) == {"random", "mcts"}
    stats = _seat_stats(env, {"player_0": MCTSBot(seed=0), "player_1": RandomBot(seed=1)}, 30)
    assert stats["x"] >= 0.8 and stats["o"] == 0


@pytest.mark.parametrize("game", ["kuhn_poker", "leduc_poker", "connect_four", "mini_hanabi"])
@pytest.mark.parametrize("style", ["natural", "compact"])
def test_openspiel_games_play_to_the_end(game, style):
    pytest.importorskip("pyspiel")
    env = make_env("openspiel", game, prompt_style=style, seed=0)
    bots = {a: RandomBot(seed=i) for i, a in enumerate(env.players)}
    for g in range(3):
        obs, _ = env.reset(seed=g)
        while not env.done:
            (agent,) = obs
            legal = env.legal_actions(agent)
            assert legal and (style == "natural" or all(len(m.split()) == 1 for m in legal))
            obs, rew, *_ = env.step({agent: bots[agent].act(env, agent)})
        m = env.episode_metrics()
        assert m["invalid_rate"] == 0 and m["moves"] >= 1 and m["forfeit"] == 0
        if game == "mini_hanabi":
            assert env.info.kind == "cooperative" and rew["player_0"] == rew["player_1"] == m["score"]
        else:
            assert m["win_player_0"] + m["loss_player_0"] + m["draw"] == 1
            assert rew["player_0"] == -rew["player_1"] or rew["player_0"] == rew["player_1"] == 0.1


def test_openspiel_generic_games_and_errors():
    pytest.importorskip("pyspiel")
    env = make_env("openspiel", "kuhn_poker", params={"players": 3}, seed=0)  # pyspiel's own strings
    assert env.players == ["player_0", "player_1", "player_2"]
    play(env, {a: RandomBot(seed=i) for i, a in enumerate(env.players)})
    assert sum(env.returns.values()) == pytest.approx(0) and env.episode_metrics()["invalid_rate"] == 0
    env = make_env("openspiel", "breakthrough", prompt_style="compact")
    env.reset(seed=0)
    assert all(len(m.split()) == 1 for m in env.legal_actions("player_0"))
    with pytest.raises(MarlError, match="not turn-based"):
        make_env("openspiel", "goofspiel")
    with pytest.raises(MarlError, match="Did you mean 'breakthrough'"):
        make_env("openspiel", "breakthroug")


def test_kuhn_words_and_view():
    pytest.importorskip("pyspiel")
    env = make_env("openspiel", "kuhn_poker", seed=0)
    env.reset(seed=0)
    assert env.legal_actions("player_0") == ["<check>", "<bet>"]
    env.step({"player_0": "<bet>"})
    assert env.legal_actions("player_1") == ["<fold>", "<call>"]
    view = env.observe("player_1")
    assert "Your card:" in view and "you 1, player_0 2 (pot 3)" in view and "player_0 <bet>" in view
    _, rew, done, _, _ = env.step({"player_1": "<fold>"})
    assert done["__all__"] and rew == {"player_0": 1.0, "player_1": -1.0}


def test_leduc_words():
    pytest.importorskip("pyspiel")
    env = make_env("openspiel", "leduc_poker", prompt_style="compact", seed=0)
    env.reset(seed=0)
    assert env.legal_actions("player_0") == ["check", "bet"]
    env.step({"player_0": "bet"})
    assert env.legal_actions("player_1") == ["fold", "call", "raise"]
    assert env.observe("player_1").split()[1:] == ["bet"]  # own card, then the betting


def test_cfr_policy_is_near_nash_on_kuhn():
    pyspiel = pytest.importorskip("pyspiel")
    from open_spiel.python.algorithms import exploitability, expected_game_score

    from marl.envs.text.openspiel_bots import solve

    game = pyspiel.load_game("kuhn_poker")
    policy = solve(game)
    assert solve(game) is policy  # solved once per process
    assert exploitability.exploitability(game, policy) < 0.001  # measured 8.7e-5 (1000 CFR+ iterations)
    value = expected_game_score.policy_value(game.new_initial_state(), [policy, policy])
    assert value[0] == pytest.approx(-1 / 18, abs=1e-3) and value[1] == pytest.approx(1 / 18, abs=1e-3)  # Kuhn 1951


@pytest.mark.parametrize("game", ["kuhn_poker", "leduc_poker"])
def test_cfr_bot_plays_legal_moves_in_both_seats(game):
    pytest.importorskip("pyspiel")
    from marl.envs.text.openspiel_bots import CFRBot

    env = make_env("openspiel", game, prompt_style="compact", seed=0)
    assert set(env.bots()) == {"random", "mcts", "cfr"} and env.bots()["cfr"] is CFRBot
    cfr_return = 0.0
    for g in range(40):
        cfr_seat = env.players[g % 2]
        # seeds apart from the deal's (reset seed g): one seed would tie the moves to the cards
        bots = {a: CFRBot(seed=1000 + g) if a == cfr_seat else RandomBot(seed=2000 + g) for a in env.players}
        obs, _ = env.reset(seed=g)
        while not env.done:
            (agent,) = obs
            move = bots[agent].act(env, agent)
            assert move in env.legal_actions(agent)
            obs, *_ = env.step({agent: move})
        m = env.episode_metrics()
        assert m["invalid_rate"] == 0 and m["forfeit"] == 0
        cfr_return += env.returns[cfr_seat]
    assert cfr_return > 0  # CFR beats random play (exact mean over seats: +0.147 chips / game in Kuhn, +0.711 in Leduc)


def test_set_history_writes_the_played_position():
    pytest.importorskip("pyspiel")
    env = make_env("openspiel", "leduc_poker", prompt_style="compact", seed=0)
    replay = make_env("openspiel", "leduc_poker", prompt_style="compact")
    bots = {a: RandomBot(seed=10 + i) for i, a in enumerate(env.players)}
    for g in range(5):
        obs, _ = env.reset(seed=g)
        while not env.done:
            (agent,) = obs
            replay.set_history(env.state.history())  # includes the public card's chance outcome
            assert replay.observe(agent) == env.observe(agent) and replay.legal_map() == env.legal_map()
            obs, *_ = env.step({agent: bots[agent].act(env, agent)})
    with pytest.raises(MarlError, match="not legal now"):
        replay.set_history([0, 1, 7])  # Kuhn-like deal, then an action id Leduc does not have


def test_kuhn_deal_independent_of_a_bot_seeded_like_the_game():
    """The LLM runner resets bots with the game's seed: the cards must not follow the bot's draws."""
    pytest.importorskip("pyspiel")
    env = make_env("openspiel", "kuhn_poker", prompt_style="compact", seed=0)
    total = 0.0
    for g in range(3000):
        bots = {"player_0": RandomBot(seed=10**6 + g), "player_1": RandomBot(seed=g)}  # player_1 as the runner seeds it
        play(env, bots, seed=g)
        total += env.returns["player_1"]
    assert total / 3000 == pytest.approx(-0.125, abs=0.06)  # exact (OpenSpiel policy_value); -0.21 when correlated


def test_cfr_bot_only_where_cfr_solves_the_game():
    pytest.importorskip("pyspiel")
    from marl.envs.text.openspiel_bots import CFRBot

    assert "cfr" not in make_env("openspiel", "tic_tac_toe").bots()  # perfect information: mcts
    assert "cfr" not in make_env("openspiel", "kuhn_poker", params={"players": 3}).bots()  # not two-player
    env = make_env("openspiel", "tic_tac_toe")
    env.reset(seed=0)
    with pytest.raises(MarlError, match="kuhn_poker, leduc_poker only, not 'tic_tac_toe'"):
        CFRBot(seed=0).act(env, "player_0")
    from marl.algos.llm.runner import check_opponent_names

    with pytest.raises(MarlError, match="Unknown opponent 'cfr'.*Valid choices: mcts, pool, random, self"):
        check_opponent_names(["cfr"], make_env("openspiel", "tic_tac_toe").bots())


# ---------------------------------------------------------------------------- Trust-and-Split
def _tas_round(env, claims, values=None, messages=("hi", "hello")):
    """Play one round with the given claims (and forced values); return the split step's rewards."""
    if values is not None:
        env.values = dict(zip(env.players, values))
    if env.phase == "message":
        env.step(dict(zip(env.players, messages)))
    _, rew, *_ = env.step({a: env.claim_text(x) for a, x in zip(env.players, claims)})
    return rew


def test_split_payoff_formula():
    out = split_payoffs({"a": 7, "b": 6}, {"a": 10.0, "b": 1.0})
    assert out["coins"] == {"a": pytest.approx(70 / 13), "b": pytest.approx(60 / 13)}
    assert out["points"] == {"a": pytest.approx(700 / 13), "b": pytest.approx(60 / 13)}
    assert split_payoffs({"a": 3, "b": 4}, {"a": 1.0, "b": 10.0})["points"] == {"a": 3.0, "b": 40.0}
    assert split_payoffs({"a": 0, "b": 0}, {"a": 1.0, "b": 10.0})["coins"] == {"a": 0.0, "b": 0.0}


def test_tas_env_rewards_hand_computed():
    env = TrustAndSplit(rounds=2)
    env.reset(seed=0)
    rew = _tas_round(env, (7, 6), values=(10.0, 1.0))
    assert rew == {"player_0": pytest.approx(700 / 13), "player_1": pytest.approx(60 / 13)}
    m = env.game_metrics()
    assert m["high_share"] == pytest.approx(0.7 / 1.3) and m["claims_mean"] == 6.5


def test_tas_message_phase():
    env = TrustAndSplit(rounds=1, max_message_chars=5)
    obs, _ = env.reset(seed=0)
    assert env.simultaneous and env.to_act() == ["player_0", "player_1"] and env.legal_actions("player_0") == []
    own, other = env.hands["player_0"], env.hands["player_1"]
    assert own in obs["player_0"][-1]["content"] and other not in obs["player_0"][-1]["content"]
    obs, rew, done, _, infos = env.step({"player_0": "<message>my hand is rock</message>", "player_1": ""})
    assert infos["player_0"] == {"invalid": False, "move": "my ha", "legal_actions": env.legal_actions("player_0")}
    assert rew == {"player_0": 0.0, "player_1": 0.0} and not done["__all__"]
    assert 'player_0 said: "my ha"' in obs["player_1"][-1]["content"]
    assert obs["player_0"][-2] == {"role": "assistant", "content": "<message>my hand is rock</message>"}
    assert env.legal_actions("player_1")[7] == "<claim 7>"
    _, _, done, _, _ = env.step({"player_0": "<claim 4>", "player_1": "I want <claim 6>"})
    assert done["__all__"] and env.episode_metrics()["invalid_rate"] == 0  # messages are never invalid


@pytest.mark.parametrize("invalid_action", ["retry", "forfeit"])
def test_tas_messages_parse_as_free_text(invalid_action):
    env = TrustAndSplit(rounds=1, invalid_action=invalid_action, format_reward=0.5)
    env.reset(seed=0)
    assert env.parse("player_0", "  <message> a </message> <message> b </message> ") == "b"
    bot = RandomBot(seed=0)
    assert bot.act(env, "player_0") == ""  # free-text turn: says nothing
    _, rew, done, *_ = env.step({"player_0": "", "player_1": "anything <claim 99>"})
    assert not done["__all__"] and rew == {"player_0": 0.5, "player_1": 0.5}
    assert env.messages == {"player_0": "", "player_1": "anything <claim 99>"} and env.n_messages == 2
    assert bot.act(env, "player_0") in env.legal_actions("player_0")


def test_tas_invalid_claim_counts_as_zero():
    env = TrustAndSplit(rounds=1, messages=False)
    env.reset(seed=0)
    _, rew, _, _, infos = env.step({"player_0": "all of them", "player_1": "<claim 4>"})
    assert infos["player_0"] == {"invalid": True, "move": "<claim 0>"}
    assert rew["player_0"] == 0 and rew["player_1"] == 4 * env.log[0]["values"]["player_1"]


def test_tas_no_press():
    env = make_env("trust_and_split", "no_press", rounds=3)
    obs, _ = env.reset(seed=0)
    assert env.phase == "split" and env.max_decisions == 3 and len(env.legal_actions("player_0")) == 11
    prompt = obs["player_0"][-1]["content"]
    assert env.hands["player_1"] in prompt and "(value" in prompt  # No-Press: values are public
    for _ in range(3):
        _tas_round(env, (5, 5))
    assert env.done and len(env.log) == 3


def test_tas_greedy_vs_greedy_collective_55():
    env = make_env("trust_and_split", "rps", rounds=10)
    rewards = play(env, {"player_0": Greedy(), "player_1": Greedy()}, seed=3)
    m = env.episode_metrics()
    assert m["collective_payoff"] == pytest.approx(55.0)  # every round: 5 x 10 + 5 x 1
    assert m["claims_mean"] == 10 and m["high_share"] == pytest.approx(0.5)
    assert sorted(rewards.values()) == [5.0, 50.0]


def test_tas_truthful_cooperators_reach_100():
    env = TrustAndSplit(rounds=5)
    play(env, {"player_0": TruthfulCooperator(), "player_1": TruthfulCooperator()}, seed=1)
    m = env.episode_metrics()
    assert m["collective_payoff"] == pytest.approx(100.0) and m["high_share"] == 1.0
    assert env.log[0]["messages"]["player_0"].startswith("My hand is")


def test_tas_coin_values_compact_and_bots():
    env = make_env("trust_and_split", "coin", rounds=4, prompt_style="compact", seed=0)
    bots = {a: TrustAndSplit.bots()[name](seed=i) for i, (a, name) in enumerate(zip(env.players, ["random", "fair"]))}
    obs, _ = env.reset(seed=0)
    assert obs["player_0"][-1]["content"] in ("v10", "v1")
    env.step({a: bots[a].act(env, a) for a in obs})
    assert env.legal_actions("player_0") == [f"k{k}" for k in range(11)]
    assert bots["player_1"].act(env, "player_1") == "k5"
    while not env.done:
        env.step({a: bots[a].act(env, a) for a in env.to_act()})
    assert all(set(r["values"].values()) <= {1.0, 10.0} for r in env.log)
    assert set(TrustAndSplit.bots()) == {"random", "greedy", "fair", "truthful_cooperator"}


def test_tas_errors():
    with pytest.raises(MarlError, match="Valid choices: coin, rps"):
        TrustAndSplit(values="dice")
    with pytest.raises(MarlError, match="rounds"):
        TrustAndSplit(rounds=0)
    with pytest.raises(MarlError, match="no_press"):
        make_env("trust_and_split", "nopress")
