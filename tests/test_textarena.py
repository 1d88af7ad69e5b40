"""TextArena games through the ``textarena`` package (envs/text/textarena.py): the env contract,
invalid replies, error messages and one MARS iteration with a tiny model (skipped without textarena)."""

import random
import sys

import pytest

import marl
from marl.env import MarlError, make_env
from marl.text import RandomBot

pytest.importorskip("textarena")


def _play(env, seed, bots=None):
    """Play one game with random bots; return (every step's rewards, the episode metrics)."""
    bots = bots or {a: RandomBot(seed=2 * seed + k) for k, a in enumerate(env.players)}
    obs, infos = env.reset(seed=seed)
    steps = []
    while obs:
        (agent,) = obs  # turn-based: one seat asked at a time
        assert env.to_act() == [agent] and infos[agent]["legal_actions"] == env.legal_actions(agent)
        obs, rewards, dones, _, infos = env.step({agent: bots[agent].act(env, agent)})
        steps.append(rewards)
    assert dones["__all__"] and env.to_act() == []
    return steps, env.episode_metrics()


def test_tic_tac_toe_contract_both_seats():
    env = make_env("textarena", "TicTacToe-v0", seed=0)
    assert env.info.family == "textarena" and env.info.kind == "competitive"
    assert env.players == ["player_0", "player_1"] and env.max_decisions == 5
    obs, infos = env.reset(seed=0)
    assert list(obs) == ["player_0"] and infos["player_0"]["legal_actions"] == [f"[{k}]" for k in range(9)]
    system, user = obs["player_0"]
    assert system["role"] == "system" and "Tic Tac Toe" in system["content"]  # TextArena's player prompt
    assert user["content"].startswith("[GAME] Current Board")
    wins = {"player_0": 0, "player_1": 0}
    for seed in range(40):
        steps, m = _play(env, seed)
        final = steps[-1]
        assert final["player_0"] + final["player_1"] == 0  # zero-sum: +1 / -1, or a draw 0 / 0
        assert all(r == {"player_0": 0.0, "player_1": 0.0} for r in steps[:-1])  # paid at the end only
        assert m["invalid_rate"] == 0.0 and m["forfeit"] == 0.0 and m["game_invalid_moves"] == 0.0
        assert m["win_player_0"] + m["loss_player_0"] + m["draw"] == 1.0
        assert m["win_player_0"] == m["loss_player_1"] and 5 <= m["moves"] <= 9
        for a in wins:
            wins[a] += m[f"win_{a}"]
    assert wins["player_0"] > 0 and wins["player_1"] > 0  # both seats can win


def test_seeded_games_repeat_and_leave_global_random_alone():
    env = make_env("textarena", "TicTacToe-v0", seed=0)
    state = random.getstate()
    first = [_play(env, s)[1] for s in range(5)]
    assert random.getstate() == state  # TextArena's reset reseeds `random`: here on the env's own state
    assert [_play(env, s)[1] for s in range(5)] == first


def test_prompts_natural_and_compact():
    env = make_env("textarena", "TicTacToe-v0")
    env.reset(seed=0)
    obs, *_ = env.step({"player_0": "I play [4]"})  # a legal move inside text
    prompt = obs["player_1"][-1]["content"]
    assert "[Player 0] [4]" in prompt and "placed their symbol (O) in cell 4" in prompt
    compact = make_env("textarena", "TicTacToe-v0", prompt_style="compact", history="last")
    obs, _ = compact.reset(seed=0)
    assert obs == {"player_0": [{"role": "user", "content": " ".join(["_"] * 9)}]}
    obs, *_ = compact.step({"player_0": "[4]"})
    assert obs["player_1"] == [{"role": "user", "content": "_ _ _ _ opp _ _ _ _"}]
    obs, *_ = compact.step({"player_1": "[0]"})
    assert obs["player_0"][0]["content"] == "opp _ _ _ me _ _ _ _"  # own view: player_0's O is "me"


def test_invalid_replies_retry_once_then_forfeit():
    env = make_env("textarena", "TicTacToe-v0")
    env.reset(seed=0)
    env.step({"player_0": "[4]"})
    obs, rewards, dones, _, infos = env.step({"player_1": "[4]"})  # occupied: not a legal move
    assert infos["player_1"]["invalid"] and rewards["player_1"] == -1.0 and not dones["__all__"]
    assert obs["player_1"][-1]["content"].startswith("Invalid reply")  # asked again (TextArena: one re-ask)
    obs, rewards, dones, _, _ = env.step({"player_1": "pass"})
    assert dones["__all__"] and obs == {} and rewards == {"player_0": 0.0, "player_1": -1.0}
    m = env.episode_metrics()
    assert m["forfeit"] == 1.0 and m["loss_player_1"] == 1.0 and m["win_player_0"] == 1.0
    assert m["invalid_rate"] == pytest.approx(2 / 3)
    env = make_env("textarena", "TicTacToe-v0", invalid_action="penalty", invalid_penalty=-0.5)
    env.reset(seed=0)
    _, rewards, _, _, infos = env.step({"player_0": "no idea"})  # a random legal move is played
    assert rewards["player_0"] == -0.5 and infos["player_0"]["move"] in [f"[{k}]" for k in range(9)]


def test_connect_four_and_a_free_text_game():
    env = make_env("textarena", "ConnectFour-v0", seed=0)
    env.reset(seed=0)
    assert env.legal_actions("player_0") == [f"[col {c}]" for c in range(7)]
    steps, m = _play(env, 1)
    assert sum(steps[-1].values()) == 0 and m["invalid_rate"] == 0.0
    nim = make_env("textarena", "Nim-v0")  # no move reader: free text, the game judges the reply
    obs, infos = nim.reset(seed=0)
    assert infos["player_0"]["legal_actions"] == [] and nim.parse("player_0", "take 1 1") == "[take 1 1]"
    nim.step({"player_0": "nonsense"})  # TextArena re-asks once, with its notice
    assert nim.to_act() == ["player_0"] and "invalid move" in nim.observe("player_0")
    _, rewards, dones, _, _ = nim.step({"player_0": "still nonsense"})  # the second one loses the game
    assert dones["__all__"] and rewards == {"player_0": -1.0, "player_1": 1.0}
    m = nim.episode_metrics()
    assert m["game_invalid_moves"] == 2.0 and m["loss_player_0"] == 1.0 and m["forfeit"] == 0.0


def test_errors_name_the_bad_value():
    with pytest.raises(MarlError, match="Did you mean 'TicTacToe-v0'"):
        make_env("textarena", "TicTacToe-v1")
    with pytest.raises(MarlError, match="cannot be played by two players"):
        make_env("textarena", "Sudoku-v0")  # a one-player puzzle
    with pytest.raises(MarlError, match="invalid_action"):
        make_env("textarena", "TicTacToe-v0", invalid_action="ignore")
    assert "TicTacToe-v0" in marl.list_envs(with_scenarios=True)["textarena"]


def test_missing_textarena(monkeypatch):
    from marl.envs.text.textarena import TextArenaGame

    monkeypatch.setitem(sys.modules, "textarena", None)  # import textarena -> ImportError
    with pytest.raises(MarlError, match="pip install textarena"):
        TextArenaGame("TicTacToe-v0")


def test_missing_nltk_data_fails_fast(monkeypatch):
    """A word game whose nltk corpus is absent raises at once (no download attempt)."""
    nltk = pytest.importorskip("nltk")
    from marl.envs.text import textarena as adapter

    def missing(*args, **kwargs):
        raise LookupError("Resource 'words' not found.")

    monkeypatch.setattr(adapter.TextArenaGame, "new_game", lambda self: self._call(missing))
    with pytest.raises(MarlError, match="nltk.downloader words"):
        make_env("textarena", "TicTacToe-v0")
    with adapter._offline():
        assert nltk.download("words") is False  # never touches the network
    assert nltk.download is not None and nltk.download.__name__ == "download"


def test_mars_one_iteration_tiny_model(ray_session, run_dir):
    pytest.importorskip("transformers")
    from marl.algos.llm.policy import tiny_config, word_tokenizer

    tok = word_tokenizer(["me", "opp", "_"] + [f"[{k}]" for k in range(9)])
    env = make_env("textarena", "TicTacToe-v0", prompt_style="compact", history="last")
    m = env.fit(
        "mars",
        stop={"iterations": 1},
        model=tiny_config(len(tok), n_positions=64),
        tokenizer=tok,
        constrain_actions=True,
        max_new_tokens=2,
        games_per_iteration=8,
        opponents={"self": 0.5, "random": 0.5},
        eval_every=1,
        eval_games=4,
        eval_opponents=["random"],
        log_dir=run_dir,
        progress=False,
        seed=0,
    ).metrics
    assert m["iteration"] == 1 and m["replies_trained"] > 0
    assert m["vs_random_invalid_rate"] == 0.0  # constrained decoding: only legal moves
    assert m["vs_random_player_0_win"] + m["vs_random_player_0_loss"] <= 1.0
