"""Bad inputs of text games and the LLM path (issue 29, items 4 and 12): each case must end in a
MarlError whose message names the bad value and the rule, before any harm (no Ray start, no
download, no file touched). Plus the defaults a new user meets with a small local model: a
512-position GPT-2 with a byte-level BPE tokenizer, and the reply budget clamped to the context."""

import logging
import os

import pytest

import marl
from marl.errors import MarlError

transformers = pytest.importorskip("transformers")

from marl.algos.llm.policy import CausalLMModule, Generator, bpe_tokenizer, check_tokenizer, tiny_config  # noqa: E402
from marl.text import random_play_chats  # noqa: E402

CONTEXT = 512  # positions of the test model (GPT-2 small's is 1024; the user had 512)
MISSING = "no_such_model_dir/gpt2-512/v1"  # a relative path: not a hub id (two slashes)


@pytest.fixture(scope="module")
def bpe():
    """A byte-level BPE tokenizer (~600 tokens, ChatML template, EOS <|im_end|>, no pad token) trained
    on the natural-language prompts of the IPD and Trust-and-Split."""
    texts = [
        m["content"]
        for env in (marl.make_env("ipd", rounds=3), marl.make_env("trust_and_split", rounds=2))
        for seed in range(2)
        for chat in random_play_chats(env, seed)
        for m in chat
    ]
    return check_tokenizer(bpe_tokenizer(texts, vocab_size=600))


@pytest.fixture(scope="module")
def lm(bpe):
    return CausalLMModule(model_config={"model": tiny_config(len(bpe), n_positions=CONTEXT)}).lm


def _model_folder(root, bpe, tokenizer: bool):
    """A saved tiny model (config.json + weights), with or without the tokenizer files."""
    model = CausalLMModule(model_config={"model": tiny_config(len(bpe), n_positions=64)}).lm
    model.save_pretrained(root)
    if tokenizer:
        bpe.save_pretrained(root)
    return root


def _files(folder):
    return {name: os.path.getsize(os.path.join(folder, name)) for name in sorted(os.listdir(folder))}


# ------------------------------------------------------------------ the table
def _game(family, scenario=None, **kw):
    def make(tmp_path, bpe):
        if family == "textarena":
            pytest.importorskip("textarena")
        if family == "openspiel":
            pytest.importorskip("pyspiel")
        return marl.make_env(family, scenario, **kw) if scenario else marl.make_env(family, **kw)

    return make


def _built(**kw):
    """The game class itself (not make_env): its own check, at the class level."""

    def make(tmp_path, bpe):
        from marl.envs.text.dilemmas import IteratedDilemma

        return IteratedDilemma(**kw)

    return make


def _fit(model=None, folder=None, **kw):
    """``make_env("ipd").fit("reinforce", ...)``; ``folder``: "empty", "no_tokenizer" or "file" under tmp_path."""

    def run(tmp_path, bpe):
        m = model
        if folder == "empty":
            m = str(tmp_path)
        elif folder == "no_tokenizer":
            m = str(_model_folder(tmp_path, bpe, tokenizer=False))
        elif folder == "file":
            (tmp_path / "model.safetensors").write_bytes(b"weights")
            m = str(tmp_path / "model.safetensors")
        elif m is None:
            m = tiny_config(len(bpe), n_positions=CONTEXT)
            kw.setdefault("tokenizer", bpe)
        return marl.make_env("ipd", rounds=2).fit("reinforce", model=m, stop={"iterations": 1}, **kw)

    return run


def _generator(**kw):
    def make(tmp_path, bpe):
        return Generator(bpe, **kw)

    return make


def _prompt_without_room(legal):
    """A prompt that leaves no room for a reply: the context is the rules and state alone
    (+ the longest move's tokens when ``legal``), with ``context_policy="truncate"``."""

    def run(tmp_path, bpe):
        gen = Generator(bpe, label="ipd")
        chat = random_play_chats(marl.make_env("ipd", rounds=3), 0)[-1]
        minimal = len(gen.render(chat[:1] + chat[-1:]))
        gen.prompt_ids(chat, minimal + (len(gen.action_ids(legal[0])) if legal else 0), legal)

    return run


CASES = {
    # -- text-game parameters: the class-level rule table (marl.text.TextEnv.params), every family
    "ipd rounds float": (_game("ipd", rounds=2.5), ["text game 'ipd'", "rounds=2.5 (float)", "whole number", ">= 1"]),
    "ipd rounds string": (_game("ipd", rounds="3"), ["rounds='3' (str)", "never rounded or converted"]),
    "ipd rounds zero": (_game("ipd", rounds=0), ["rounds=0 (int)", ">= 1"]),
    "stag_hunt retries bool": (_game("stag_hunt", retries=True), ["retries=True (bool)", ">= 0"]),
    "IteratedDilemma seed float": (_built(seed=1.5), ["text game 'ipd'", "seed=1.5 (float)", "or None"]),
    "ipd payoff string": (
        _game("ipd", payoffs={"CC": ("3", 3), "CD": (0, 5), "DC": (5, 0), "DD": (1, 1)}),
        ["payoffs['CC'][0]='3' (str)", "finite number"],
    ),
    "ipd unknown parameter": (_game("ipd", round=3), ["unknown parameter 'round'", "Did you mean 'rounds'"]),
    "trust_and_split coins float": (
        _game("trust_and_split", "coin", coins=10.0),
        ["trust_and_split:coin", "coins=10.0 (float)", "whole number"],
    ),
    "trust_and_split messages string": (
        _game("trust_and_split", messages="no"),
        ["messages='no' (str)", "True or False"],
    ),
    "trust_and_split negative chars": (
        _game("trust_and_split", max_message_chars=-5),
        ["max_message_chars=-5", ">= 1"],
    ),
    "trust_and_split public_values int": (_game("trust_and_split", public_values=1), ["public_values=1", "or None"]),
    "openspiel players float": (
        _game("openspiel", "kuhn_poker", params={"players": 2.5}),
        ["openspiel:kuhn_poker", "params['players']=2.5 (float)", "whole number"],
    ),
    "openspiel players negative": (
        _game("openspiel", "kuhn_poker", params={"players": -1}),
        ["openspiel:kuhn_poker", "OpenSpiel refused", "'players': -1"],
    ),
    "openspiel unknown param": (
        _game("openspiel", "kuhn_poker", params={"player": 3}),
        ["unknown params key 'player'", "Did you mean 'players'"],
    ),
    "openspiel draw_reward string": (
        _game("openspiel", "tic_tac_toe", draw_reward="0.1"),
        ["draw_reward='0.1' (str)", "finite number"],
    ),
    "textarena env_kwargs float": (
        _game("textarena", "ConnectFour-v0", env_kwargs={"num_rows": 2.5}),
        ["textarena:ConnectFour-v0", "env_kwargs['num_rows']=2.5 (float)", "whole number"],
    ),
    "textarena env_kwargs bool": (
        _game("textarena", "ConnectFour-v0", env_kwargs={"num_cols": True}),
        ["env_kwargs['num_cols']=True (bool)"],
    ),
    # -- model and tokenizer paths: refused before transformers is called (nothing is downloaded)
    "model relative missing": (
        _fit(MISSING),
        ["no such folder", os.path.join(os.getcwd(), MISSING), "working directory"],
    ),
    "model owner/name missing, no network": (
        _fit("models/gpt2-512"),
        ["no such folder", os.path.join(os.getcwd(), "models/gpt2-512"), "hub cannot be reached"],
    ),
    "model path under an existing folder": (
        _fit("tests/no_such_model"),
        ["no such folder", "'tests' is a local folder", "not as a hub id"],
    ),
    "model bare name missing": (_fit("gpt2-512-local"), ["no such folder", "owner/name"]),
    "model absolute missing": (_fit("/nonexistent/models/gpt2"), ["no such folder: /nonexistent/models/gpt2"]),
    "model empty folder": (_fit(folder="empty"), ["lacks config.json", "weights", "tokenizer files", "holds nothing"]),
    "model folder without tokenizer": (
        _fit(folder="no_tokenizer"),
        ["lacks tokenizer files", "tokenizer.json", "or pass tokenizer="],
    ),
    "model is a file": (_fit(folder="file"), ["is a file", "model.safetensors"]),
    "tokenizer relative missing": (
        _fit(tokenizer="./no_such_tokenizer"),
        ["tokenizer='./no_such_tokenizer'", "no such folder"],
    ),
    # -- reply budget
    "max_new_tokens float": (_fit(max_new_tokens=2.5), ["max_new_tokens", "2.5"]),
    "max_new_tokens string": (_fit(max_new_tokens="16"), ["max_new_tokens", "16"]),
    "max_new_tokens zero": (_fit(max_new_tokens=0), ["max_new_tokens", "0"]),
    "Generator max_new_tokens bool": (_generator(max_new_tokens=True), ["Generator: max_new_tokens=True (bool)"]),
    "Generator max_context float": (_generator(max_context=512.0), ["max_context=512.0 (float)", "whole number"]),
    "prompt leaves no token": (
        _prompt_without_room([]),
        ["ipd: the prompt is", "needs at least 1", "make_env(..., prompt_style='compact')", "fit(..., model=...)"],
    ),
    "prompt leaves no room for the move": (
        _prompt_without_room(["<A>", "<B>"]),
        ["the longest legal move and EOS", "make_env(..., prompt_style='compact')", "fit(..., model=...)"],
    ),
    # -- options given to the wrong call
    "fit(prompt_style=...)": (
        _fit(prompt_style="compact"),
        ["prompt_style='compact'", "a parameter of the text game", "make_env('ipd', ..., prompt_style='compact')"],
    ),
    "fit(history=...)": (_fit(history="last"), ["make_env('ipd', ..., history='last')", "max_new_tokens"]),
    "fit(rounds=...)": (_fit(rounds=5), ["make_env('ipd', ..., rounds=5)"]),
}


@pytest.mark.parametrize("case", list(CASES))
def test_bad_input_is_a_clear_marl_error(case, tmp_path, bpe, monkeypatch):
    action, fragments = CASES[case]
    # transformers must not be asked to read a path that marl refuses (it would try the hub)
    called = []
    monkeypatch.setattr(transformers.AutoModelForCausalLM, "from_pretrained", lambda *a, **k: called.append(a))
    monkeypatch.setattr(transformers.AutoTokenizer, "from_pretrained", lambda *a, **k: called.append(a))
    monkeypatch.setattr("marl.algos.llm.models._hub_reachable", lambda: False)  # no network, as on the test machine
    before = _files(tmp_path) if os.path.isdir(tmp_path) else {}
    with pytest.raises(MarlError) as e:
        action(tmp_path, bpe)
    msg = str(e.value)
    for part in fragments:
        assert part in msg, (part, msg)
    assert not called, called
    after = _files(tmp_path)
    assert {k: v for k, v in after.items() if k in before} == before  # nothing the user had was changed


def test_uncached_hub_id_is_refused_offline_before_transformers(monkeypatch):
    from marl.algos.llm.models import pretrained_source

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(MarlError, match="not in the local cache, and the hub cannot be reached"):
        pretrained_source("nobody-here/no-such-model")
    monkeypatch.delenv("HF_HUB_OFFLINE")
    monkeypatch.setattr("marl.algos.llm.models._hub_reachable", lambda: True)
    assert pretrained_source("nobody-here/no-such-model") == "nobody-here/no-such-model"  # a hub id: passed on


def test_a_complete_local_folder_loads(tmp_path, bpe):
    from marl.algos.llm.models import load_causal_lm
    from marl.algos.llm.tokenizer import load_tokenizer

    folder = _model_folder(tmp_path, bpe, tokenizer=True)
    assert load_causal_lm(str(folder)).config.n_positions == 64
    assert len(load_tokenizer(None, str(folder))) == len(bpe)


# ------------------------------------------------------------------ reply budgets
def test_the_reply_budget_is_clamped_to_what_the_context_leaves_and_logged_once(bpe, lm, caplog):
    chat = [{"role": "user", "content": "Round 1 of 10. Your choice?"}]
    gen = Generator(bpe, max_new_tokens=4096, label="ipd")
    prompt = gen.render(chat)
    with caplog.at_level(logging.WARNING, logger="marl.llm"):
        prompts, responses, texts = gen.generate(lm, [chat] * 2)
        gen.generate(lm, [chat])
    assert prompts[0] == prompt
    assert all(len(r) <= CONTEXT - len(prompt) for r in responses)
    clamps = [r.getMessage() for r in caplog.records if "clamped" in r.getMessage()]
    assert clamps == [
        f"ipd: reply budget clamped from 4096 to {CONTEXT - len(prompt)} tokens: the prompt takes {len(prompt)} "
        f"of the context's {CONTEXT} positions (said once; fit(..., max_new_tokens=...) sets the budget)."
    ]
    assert gen.clamped == 3


def test_the_default_budget_comes_from_the_game(bpe):
    gen = Generator(bpe, free_text_tokens=520)
    moves = ["<claim 0>", "<claim 10>"]
    longest = max(len(gen.action_ids(m)) for m in moves)
    assert gen.wanted(moves, CONTEXT) == longest + 1 + 8  # the move, EOS, 8 tokens of room (<answer> tags)
    assert gen.needed(moves) == longest + 1
    assert gen.wanted([], CONTEXT) == CONTEXT // 4  # free text: the game's bound, at most a quarter of the context
    assert gen.wanted([], 8192) == 520
    env = marl.make_env("trust_and_split", max_message_chars=100)
    assert env.free_text_chars == 100 + len("<message></message>")


def test_a_short_prompt_on_a_512_position_model_trains_with_mars_defaults(ray_session, run_dir, bpe, caplog):
    """The issue's new user: MARS's default max_new_tokens=4096 refused every prompt of a 512-position
    model. Now the reply budget is clamped to what the context leaves, and the clamp is logged."""
    from marl.algos.llm.config import LLMConfig  # noqa: F401  (the key's type: an int or null)
    from marl.config import algo_defaults

    assert algo_defaults("mars").max_new_tokens == 4096
    env = marl.make_env("ipd", rounds=2, history="last", prompt_style="compact")
    first = Generator(bpe).render(random_play_chats(env, 0)[0])
    assert len(first) < 64  # a short prompt (the was 18 tokens)
    with caplog.at_level(logging.WARNING, logger="marl.llm"):
        res = env.fit(
            "mars",
            model=tiny_config(len(bpe), n_positions=CONTEXT),
            tokenizer=bpe,
            stop={"iterations": 1},
            games_per_iteration=2,
            eval_every=0,
            log_dir=run_dir,
            progress=False,
        )
    assert res.metrics["replies_trained"] == 8  # 2 games x 2 seats x 2 rounds
    assert res.metrics["tokens_generated_per_s"] > 0
    clamps = [r.getMessage() for r in caplog.records if "reply budget clamped from 4096" in r.getMessage()]
    assert len(clamps) == 1, clamps


# ------------------------------------------------------------------ known bug: free-text turns under constraints
def test_constrained_generation_leaves_free_text_turns_free(bpe, lm):
    """Trust-and-Split's message phase has no legal moves. With constrain=True the generator took
    the one-token-move fast path (``all(...)`` over an empty list is True), masked every logit and
    crashed with "probability tensor contains either inf, nan or element < 0"; in a batch mixing
    message and claim turns the message rows were forced to an empty reply."""
    env = marl.make_env("trust_and_split", rounds=1)
    obs, infos = env.reset(seed=0)
    message_chats = [obs[a] for a in env.players]
    assert all(infos[a]["legal_actions"] == [] for a in env.players)
    gen = Generator(bpe, constrain=True, max_new_tokens=12)
    _, responses, texts = gen.generate(lm, message_chats * 4, [[]] * 8)
    assert len(texts) == 8 and max(len(r) for r in responses) > 1  # free text, not forced to EOS
    moves = ["<A>", "<B>"]
    _, responses, texts = gen.generate(lm, message_chats * 4, [[], moves] * 4)
    assert all(t in moves for t in texts[1::2])  # the move rows stay constrained
    assert max(len(r) for r in responses[0::2]) > 1  # the message rows are free
