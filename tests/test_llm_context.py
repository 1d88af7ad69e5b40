"""LLM self-play with the tokenizers real models ship: a byte-level BPE tokenizer (as GPT-2,
Llama and Qwen use) trained here on the games' own text, no pad token, a ChatML chat
template, and a 512-position model. Checks: prompts fit the context (oldest turns dropped,
or a clear error), pad token and padding side, vocabulary bounds, sampling log-probs equal
to the learner's under left padding (with and without LoRA), and one training iteration
of every LLM algorithm on every text-game family (docs/llm_models.md)."""

import pytest
import torch

pytest.importorskip("transformers")

import marl  # noqa: E402
from marl.callbacks import Callback  # noqa: E402
from marl.algos.llm.policy import CausalLMModule, Generator, bpe_tokenizer, check_tokenizer  # noqa: E402
from marl.algos.llm.learner import right_align  # noqa: E402
from marl.algos.llm.runner import Turn  # noqa: E402
from marl.algos.llm.selfplay import turns_to_batch  # noqa: E402

# one scenario per text-game family (and both OpenSpiel kinds: a board game, a card game with chance)
GAMES = {
    "ipd": ("ipd", None, {"rounds": 10}),
    "trust_and_split": ("trust_and_split", None, {}),
    "tic_tac_toe": ("openspiel", "tic_tac_toe", {}),
    "leduc_poker": ("openspiel", "leduc_poker", {}),
    "textarena": ("textarena", "TicTacToe-v0", {}),
}
CONTEXT = 512  # positions of the test model: long games outgrow it, every game's rules + state fit


def make_game(name: str, **kw):
    family, scenario, base = GAMES[name]
    if family == "textarena":
        pytest.importorskip("textarena")
    return marl.make_env(family, scenario, **{**base, **kw}) if scenario else marl.make_env(family, **{**base, **kw})


def random_chats(env, seed: int):
    from marl.text import random_play_chats

    return random_play_chats(env, seed)


@pytest.fixture(scope="module")
def bpe():
    """A byte-level BPE tokenizer trained on the games' prompts: ~1k tokens, EOS <|im_end|>, no pad token."""
    texts = [m["content"] for name in GAMES for s in range(3) for c in random_chats(make_game(name), s) for m in c]
    fast = bpe_tokenizer(texts, vocab_size=1000)
    assert fast.pad_token is None  # as GPT-2's and Llama's
    return fast


def gpt2(vocab: int, n_positions: int = CONTEXT):
    from marl.algos.llm.policy import tiny_config

    return tiny_config(vocab, n_positions=n_positions)


def llama(vocab: int):
    from transformers import LlamaConfig

    return LlamaConfig(
        vocab_size=vocab,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=CONTEXT,
    )


def ipd_history(bpe, rounds: int = 10):
    """The last chat of a 10-round IPD game with the full history (natural prompts)."""
    return random_chats(make_game("ipd", rounds=rounds), 0)[-1]


# ------------------------------------------------------------------ tokenizer checks
def test_missing_pad_token_becomes_eos_without_new_tokens(bpe):
    import copy

    tok = check_tokenizer(copy.deepcopy(bpe))
    assert tok.pad_token == tok.eos_token == "<|im_end|>" and len(tok) == len(bpe)  # nothing added
    assert tok.padding_side == "left"


def test_missing_chat_template_is_an_error_and_plain_is_a_fix(bpe):
    import copy

    tok = copy.deepcopy(bpe)
    tok.chat_template = None
    with pytest.raises(marl.MarlError, match="no chat template.*chat_template='plain'"):
        check_tokenizer(tok)
    check_tokenizer(tok, "plain")
    text = tok.apply_chat_template([{"role": "user", "content": "hi"}], add_generation_prompt=True, tokenize=False)
    assert text == "user: hi\nassistant:"


def test_tokenizer_larger_than_the_embedding_table_is_an_error(bpe):
    lm = CausalLMModule(model_config={"model": gpt2(len(bpe) - 10)}).lm
    gen = Generator(check_tokenizer(bpe), max_new_tokens=4)
    with pytest.raises(marl.MarlError, match=rf"has {len(bpe)} tokens but the model embeds only {len(bpe) - 10} ids"):
        gen.generate(lm, [[{"role": "user", "content": "hello"}]])


# ------------------------------------------------------------------ fitting prompts into the context
def _n(gen, chat):
    return len(gen.render(chat))


def test_truncate_drops_the_fewest_oldest_turns_and_keeps_rules_and_state(bpe):
    chat = ipd_history(bpe)
    gen = Generator(check_tokenizer(bpe), max_new_tokens=16)
    full, minimal = _n(gen, chat), _n(gen, chat[:1] + chat[-1:])
    limit = (full + minimal) // 2 + 16  # the full game does not fit, rules + state do
    ids = gen.prompt_ids(chat, limit)
    assert len(ids) + 16 <= limit and gen.truncated == 1
    # what is kept: the system message, then a suffix of the game (whole prompt/reply pairs), then the state
    kept = next(k for k in range(1, len(chat)) if gen.render(chat[:1] + chat[k:]) == ids)
    assert chat[k := kept]["role"] == "user" and (len(chat) - 1 - k) % 2 == 0
    assert _n(gen, chat[:1] + chat[k - 2 :]) + 16 > limit  # one pair fewer dropped would not fit
    text = bpe.decode(ids)
    assert text.startswith("<|im_start|>system\n" + chat[0]["content"]) and chat[-1]["content"] in text
    # state: rules + current state only; error: nothing dropped
    state = Generator(check_tokenizer(bpe), max_new_tokens=16, context_policy="state")
    assert state.prompt_ids(chat, limit) == gen.render(chat[:1] + chat[-1:])
    strict = Generator(check_tokenizer(bpe), max_new_tokens=16, context_policy="error", label="text:ipd")
    with pytest.raises(
        marl.MarlError,
        match=rf"text:ipd: the prompt is {full} tokens \(rules and current state "
        rf"alone: {minimal}\).*holds {limit} positions",
    ):
        strict.prompt_ids(chat, limit)
    assert gen.prompt_ids(chat, None) == gen.render(chat)  # no limit known: nothing dropped


def test_a_state_longer_than_the_context_names_the_game_counts_and_options(bpe):
    chat = ipd_history(bpe)
    gen = Generator(check_tokenizer(bpe), max_new_tokens=16, label="text:ipd")
    minimal = _n(gen, chat[:1] + chat[-1:])
    # rules + state leave 15 of the 16 tokens asked for: the reply budget is clamped, not refused
    ids = gen.prompt_ids(chat, minimal + 15)
    assert len(ids) == minimal and gen.budget(ids, minimal + 15) == 15
    with pytest.raises(marl.MarlError) as e:
        gen.prompt_ids(chat, minimal)  # not even one reply token left
    msg = str(e.value)
    for part in (
        "text:ipd",
        f"rules and current state alone: {minimal}",
        "needs at least 1 (one token of free text)",
        "the reply budget, 16 tokens",
        f"holds {minimal} positions",
        "make_env(..., prompt_style='compact')",
        "a model with a longer context, fit(..., model=...)",
    ):
        assert part in msg, (part, msg)
    # with context_policy="error" dropping the game so far helps too: fit and make_env options
    strict = Generator(check_tokenizer(bpe), max_new_tokens=16, context_policy="error", label="text:ipd")
    with pytest.raises(marl.MarlError) as e:
        strict.prompt_ids(chat, minimal)
    for part in ("fit(..., context_policy='truncate')", "make_env(..., history='last')"):
        assert part in str(e.value), (part, str(e.value))


def test_the_model_context_is_read_from_its_config(bpe):
    gen = Generator(check_tokenizer(bpe), max_new_tokens=8)
    assert gen.limit(CausalLMModule(model_config={"model": gpt2(len(bpe), 96)}).lm) == 96
    assert gen.limit(CausalLMModule(model_config={"model": llama(len(bpe))}).lm) == CONTEXT
    lm = CausalLMModule(model_config={"model": gpt2(len(bpe), 96)}).lm
    with pytest.raises(marl.MarlError, match="max_context=200 exceeds the model's 96 positions"):
        Generator(check_tokenizer(bpe), max_context=200).limit(lm)
    with pytest.raises(marl.MarlError, match="context_policy.*truncate"):
        Generator(check_tokenizer(bpe), context_policy="drop")


# ------------------------------------------------------------------ log-probs under left padding
@pytest.mark.parametrize("arch", ["gpt2", "llama"])
@pytest.mark.parametrize("lora", [False, True])
def test_sampling_and_training_log_probs_agree_under_left_padding(bpe, arch, lora):
    """Prompts of different lengths generated in one left-padded batch; the learner's forward scores
    every reply token as generation did (1e-5): on the right-padded rows of turns_to_batch, and in
    the learner's own layout (right_align: left padding, logits of the reply columns only)."""
    pytest.importorskip("peft")
    torch.manual_seed(0)
    tok = check_tokenizer(bpe)
    config = gpt2(len(tok)) if arch == "gpt2" else llama(len(tok))
    mc = {"model": config}
    if lora:
        mc.update(lora=True, lora_r=4, lora_alpha=8)
    module = CausalLMModule(model_config=mc)
    if lora:  # B = 0 at initialisation would hide the adapters: make them matter
        with torch.no_grad():
            for n, p in module.lm.named_parameters():
                if "lora_B" in n:
                    p.normal_(0, 0.1)
    module.eval()
    chats = random_chats(make_game("ipd", rounds=3), 1)[:4] + random_chats(make_game("tic_tac_toe"), 2)[:2]
    gen = Generator(tok, temperature=1.0, max_new_tokens=6)
    prompts, responses, _, logps = gen.generate(module.lm, chats, logprobs=True)
    assert len({len(p) for p in prompts}) > 1  # really padded
    turns = [Turn(0, f"s{i}", 0, 0, True, 0, p, r) for i, (p, r) in enumerate(zip(prompts, responses))]
    batch = turns_to_batch(turns, {id(t): 1.0 for t in turns}, {t.seat: "m" for t in turns}, gen.pad)["m"]
    ids, att = torch.as_tensor(batch["input_ids"]), torch.as_tensor(batch["attention_mask"])
    mask = torch.as_tensor(batch["loss_mask"])
    aligned = right_align(ids, att, mask)  # the learner's layout: left padding, reply-only logits
    with torch.no_grad():
        full, _ = module.token_logp(ids, att)
        kept, _ = module.token_logp(aligned["input_ids"], aligned["attention_mask"], keep=aligned["loss_mask"].shape[1])
    assert aligned["loss_mask"].shape[1] < ids.shape[1] - 1  # only the replies' columns were scored
    for i, lp in enumerate(logps):
        assert torch.allclose(full[i][mask[i]], torch.tensor(lp), atol=1e-5), (i, lp)
        assert torch.allclose(kept[i][aligned["loss_mask"][i]], torch.tensor(lp), atol=1e-5), (i, lp)


def test_one_token_move_log_probs_agree_under_left_padding():
    from marl.algos.llm.policy import tiny_config, word_tokenizer

    tok = word_tokenizer(["<A>", "<B>", "start", "again", "now"])
    module = CausalLMModule(model_config={"model": tiny_config(len(tok), n_positions=64)})
    module.eval()
    chats = [[{"role": "user", "content": "start"}], [{"role": "user", "content": "start again now now"}]]
    gen = Generator(tok, temperature=1.0, max_new_tokens=2, constrain=True)
    prompts, responses, _, logps = gen.generate(module.lm, chats, [["<A>", "<B>"]] * 2, logprobs=True)
    for p, r, lp in zip(prompts, responses, logps):
        ids = torch.tensor([p + r])
        with torch.no_grad():
            full, _ = module.token_logp(ids, torch.ones_like(ids))
        assert abs(float(full[0, len(p) - 1]) - lp[0]) < 1e-5


# ------------------------------------------------------------------ every algorithm x every game family
CASES = [
    (algo, game)
    for algo in ("mars", "advantage_alignment", "reinforce", "grpo", "spiral")
    for game in GAMES
    if not (algo == "advantage_alignment" and game in ("tic_tac_toe", "leduc_poker", "textarena"))
]  # AA: simultaneous
# every other case trains LoRA adapters instead of all weights: each algorithm and each family gets both
CASES = [(algo, game, i % 2 == 1) for i, (algo, game) in enumerate(CASES)]


class LearnerWeights(Callback):
    """The learner's module weights when the run starts and when it ends (module id -> name -> tensor),
    and whether some reply the learner trains on got a nonzero advantage (a policy-gradient signal)."""

    def on_fit_start(self, trainer):
        self.before = self._copy(trainer)

    def on_rollout(self, trainer, rollout):
        from marl.algos.llm.selfplay import turn_advantages

        turns, cfg = rollout["turns"], trainer.cfg  # a copy of RAE's baselines: the trainer updates its own next
        adv = turn_advantages(turns, cfg, trainer.run.family.simultaneous, cfg.group_size, dict(trainer.role_baselines))
        self.signal = any(adv.get(id(t), 0.0) != 0.0 for t in turns if t.trained)

    def on_fit_end(self, trainer, result):
        self.after = self._copy(trainer)

    @staticmethod
    def _copy(trainer):
        state = trainer.learner_group.get_state(components="learner/rl_module")["learner"]["rl_module"]
        return {mid: {k: torch.as_tensor(v).clone() for k, v in st.items()} for mid, st in state.items()}

    def changed(self):
        """(module id, weight name) -> whether the weight differs at the end from the start."""
        return {
            (mid, k): not torch.equal(w, self.after[mid][k]) for mid, st in self.before.items() for k, w in st.items()
        }


@pytest.mark.parametrize("algo, game, lora", CASES)
def test_every_algorithm_trains_on_every_family_with_bpe_and_a_short_context(
    ray_session, run_dir, bpe, algo, game, lora
):
    """Natural-language prompts with the full game history, a byte-level BPE tokenizer without a
    pad token and a 512-position model: one iteration trains the model where the games gave a
    policy-gradient signal, and leaves it untouched where they gave none; long games are truncated,
    never cut inside the model.

    Without weight decay and entropy bonus only the advantages move weights (the k3 KL's gradient
    is 0 while the policy equals its reference). With a signal, every weight of the transformer
    blocks moves; with LoRA the adapters move and the base weights do not. Measured: 15 of the 22
    cases get a signal. No algorithm gets one on Trust-and-Split (the untrained model's free-text
    claims are all invalid: reward 0 for everyone), nor MARS where both games gave each seat the
    same return (its advantages are normalised within a seat)."""
    if lora:
        pytest.importorskip("peft")
    env = make_game(game)
    free_text = game == "trust_and_split"
    weights = LearnerWeights()
    adapters = dict(lora=True, lora_r=4, lora_alpha=8) if lora else {}
    res = env.fit(
        algo,
        stop={"iterations": 1},
        model=gpt2(len(bpe)),
        tokenizer=bpe,
        max_new_tokens=16,
        constrain_actions=not free_text,
        games_per_iteration=2,
        eval_every=0,
        lr=1e-4,
        log_dir=run_dir,
        progress=False,
        max_tokens_per_microbatch=4096,
        weight_decay=0.0,
        entropy_coef=0.0,
        callbacks=[weights],
        **adapters,
    )
    m = res.metrics
    assert m["replies_trained"] > 0
    changed = weights.changed()
    if weights.signal:
        moved = [k for k in changed if ("lora_B" in k[1] if lora else ".h." in k[1])]  # lora_B: A's first gradient is 0
        frozen = [k for k in changed if "lora_" not in k[1]] if lora else []
        assert moved and all(changed[k] for k in moved), [k for k in moved if not changed[k]]
        assert not any(changed[k] for k in frozen), [k for k in frozen if changed[k]]
    else:
        assert not any(changed.values()), [k for k in changed if changed[k]]
    if game in ("ipd", "trust_and_split"):  # 10 rounds of natural-language history outgrow 512 positions
        assert m["prompts_truncated"] > 0


def test_bfloat16_weights_train_checkpoint_and_reload(ray_session, run_dir):
    """dtype="bfloat16" (the GPU setting): RLlib hands module states around as numpy, which has no
    bfloat16; the weights must survive the learner -> runner sync and a checkpoint unchanged."""
    from marl.algos.llm.policy import tiny_config, word_tokenizer
    from marl.envs.text.dilemmas import COMPACT_STATES

    tok = word_tokenizer(["<A>", "<B>", *COMPACT_STATES])
    env = marl.make_env("ipd", rounds=2, prompt_style="compact", history="last")
    res = env.fit(
        "reinforce",
        stop={"iterations": 1},
        model=tiny_config(len(tok), n_positions=64),
        tokenizer=tok,
        dtype="bfloat16",
        constrain_actions=True,
        max_new_tokens=2,
        games_per_iteration=4,
        lr=1e-2,
        log_dir=run_dir,
        progress=False,
    )
    trained = res.policy.lms["players"].state_dict()
    assert all(v.dtype == torch.bfloat16 for v in trained.values() if v.is_floating_point())
    loaded = marl.load(res.checkpoint).policy.lms["players"].state_dict()
    assert all(torch.equal(trained[k], loaded[k]) for k in trained)
