"""LLM self-play: estimator formulas on hand-computed vectors (docs/algorithms/llm_selfplay.md),
token masks, the learner's loss, generation, and short Ray runs (LoRA, errors)."""

import math

import pytest
import torch

pytest.importorskip("transformers")

import marl  # noqa: E402
from marl.algos.llm import advantages as est  # noqa: E402
from marl.algos.llm.learner import aggregate, k3_kl, policy_loss  # noqa: E402
from marl.algos.llm.policy import CausalLMModule, Generator, tiny_config, word_tokenizer  # noqa: E402
from marl.algos.llm.runner import Turn  # noqa: E402
from marl.algos.llm.selfplay import turn_advantages, turns_to_batch  # noqa: E402
from marl.config import algo_defaults  # noqa: E402

ONE = torch.ones(1, 3, dtype=torch.bool)


# ------------------------------------------------------------------ formulas
def test_mars_turn_returns_and_role_normalisation():
    R = est.discounted_returns(torch.tensor([[0.05, 0.05, 1.05]]), ONE, 1.0)
    assert torch.allclose(R, torch.tensor([[1.15, 1.10, 1.05]]))
    A = est.normalize_by_key(R, ONE, ["p0"])
    assert torch.allclose(A, torch.tensor([[1.2247, 0.0, -1.2247]]), atol=1e-4)


def test_role_normalisation_is_per_role():
    # role p1's rewards are 10x larger; per-role normalisation gives both the same advantages
    R = torch.tensor([[1.0, 2.0], [10.0, 20.0]])
    A = est.normalize_by_key(R, torch.ones(2, 2, dtype=torch.bool), ["p0", "p1"])
    assert torch.allclose(A[0], A[1])
    pooled = est.normalize_by_key(R, torch.ones(2, 2, dtype=torch.bool), [0, 0])
    assert not torch.allclose(pooled[0], pooled[1])


def test_discounted_returns_ignore_padding():
    r = torch.tensor([[1.0, 1.0, 5.0]])
    m = torch.tensor([[True, True, False]])
    assert torch.allclose(est.discounted_returns(r, m, 0.5), torch.tensor([[1.5, 1.0, 0.0]]))


def test_advantage_alignment_published_and_jit():
    a1, a2 = torch.tensor([[1.0, -1.0, 2.0]]), torch.tensor([[0.5, 1.0, -1.0]])
    assert torch.allclose(est.aa_weights(a1, ONE, 0.9), torch.tensor([[0.0, 0.81, -0.081]]), atol=1e-6)
    assert torch.allclose(est.aa_credit(a1, a2, ONE, 0.5, 0.9), torch.tensor([[1.0, -0.595, 2.0405]]), atol=1e-6)
    assert torch.allclose(est.aa_weights(a1, ONE, 0.9, jit=True), torch.tensor([[1.0, -0.1, 1.91]]), atol=1e-6)
    assert torch.allclose(
        est.aa_credit(a1, a2, ONE, 0.5, 0.9, jit=True), torch.tensor([[1.25, -1.05, 1.045]]), atol=1e-6
    )
    assert torch.equal(est.aa_credit(a1, a2, ONE, 0.0, 0.9), a1)  # beta 0: naive


def test_rloo_leave_one_out():
    G = torch.tensor([[3.0, 1.0], [1.0, 1.0], [2.0, 0.0]])
    A = est.leave_one_out(G, torch.ones(3, 2, dtype=torch.bool), [0, 0, 0])
    assert torch.allclose(A, torch.tensor([[1.5, 0.5], [-1.5, 0.5], [0.0, -1.0]]))
    alone = est.leave_one_out(G, torch.ones(3, 2, dtype=torch.bool), [0, 1, 1])
    assert torch.equal(alone[0], torch.zeros(2))  # no peer: no baseline, no signal


def test_grpo_one_scalar_per_trajectory():
    r = torch.tensor([[1.0, 0.0], [0.0, 0.0], [3.0, 0.0]])
    m = torch.tensor([[True, True], [True, False], [True, True]])
    A = est.trajectory_group_norm(r, m, [0, 0, 0])
    assert A[0, 0] == A[0, 1] and A[1, 1] == 0
    assert abs(float(A[:, 0].sum())) < 1e-5  # zero mean over the group


def _turns(rewards):
    """Turns of two simultaneous games: rewards[g][seat] = per-round rewards."""
    out = []
    for g, seats in enumerate(rewards):
        for seat, rs in seats.items():
            for k, r in enumerate(rs):
                out.append(Turn(g, seat, k, k, True, g, [1, 2], [3], r))
    return out


def test_turn_advantages_aa_uses_co_player_advantage():
    turns = _turns([{"a": [3, 3], "b": [3, 0]}, {"a": [0, 1], "b": [5, 1]}])
    cfg = algo_defaults("reinforce").replace(
        estimator="reinforce",
        reward_scale=1.0,
        reward_sharing="none",
        gamma=1.0,
        role_norm=True,
        beta=0.5,
        aa_gamma=1.0,
        aa_variant="published",
    )
    naive = turn_advantages(turns, cfg, simultaneous=True, group_size=1)
    aa = turn_advantages(turns, cfg.replace(estimator="advantage_alignment"), simultaneous=True, group_size=1)
    by = {(t.game, t.seat, t.k): t for t in turns}
    # RLOO per seat over the batch: seat a, game 0, round 0: G = 6 vs the other game's 1 -> A1 = 5
    assert naive[id(by[(0, "a", 0)])] == pytest.approx(5.0)
    # round 1 of game 0 for seat a: A1 = 3 - 1 = 2; w = gamma * A1_0 = 5; A2 (seat b) = 0 - 1 = -1
    assert aa[id(by[(0, "a", 1)])] == pytest.approx(2.0 + 0.5 * 5.0 * -1.0)
    assert aa[id(by[(0, "a", 0)])] == pytest.approx(5.0)  # nothing before round 0


def test_rae_role_baseline_is_read_before_its_update():
    """SPIRAL RAE (arXiv 2506.24119): A = R - b_role, then b_role <- decay b_role + (1 - decay) R."""
    base = {}
    A = est.role_ema_advantages(torch.tensor([1.0, -1.0, 1.0]), ["p0", "p1", "p0"], base, decay=0.9)
    assert torch.allclose(A, torch.tensor([1.0, -1.0, 0.9]))  # p0's second trajectory: 1 - 0.1
    assert base == pytest.approx({"p0": 0.9 * 0.1 + 0.1 * 1.0, "p1": -0.1})
    m = torch.tensor([[True, True, True], [True, True, False]])
    assert torch.allclose(est.turn_discounts(m, 0.5), torch.tensor([[0.25, 0.5, 1.0], [0.5, 1.0, 0.0]]))


def test_turn_advantages_rae_carries_baselines_across_batches():
    turns = _turns([{"a": [1, 0], "b": [0, -1]}, {"a": [0, 3], "b": [0, 0]}])
    cfg = algo_defaults("spiral").replace(reward_scale=1.0, gamma=1.0, rae_decay=0.5)
    baselines = {}
    adv = turn_advantages(turns, cfg, simultaneous=True, group_size=1, baselines=baselines)
    by = {(t.game, t.seat, t.k): adv[id(t)] for t in turns}
    # seat a: game 0 R=1 (b=0) -> A=1, b=0.5; game 1 R=3 -> A=2.5, b=1.75; every turn of a game the same (gamma 1)
    assert by[(0, "a", 0)] == by[(0, "a", 1)] == pytest.approx(1.0)
    assert by[(1, "a", 0)] == pytest.approx(2.5) and by[(0, "b", 0)] == pytest.approx(-1.0)
    assert baselines == pytest.approx({"a": 1.75, "b": -0.25})
    again = turn_advantages(turns, cfg, simultaneous=True, group_size=1, baselines=baselines)
    assert again[id(turns[0])] == pytest.approx(1.0 - 1.75)  # the next batch starts from the kept baseline


def test_zero_advantage_replies_can_be_left_out_of_the_batch():
    turns = _turns([{"a": [1], "b": [0]}])
    adv = {id(turns[0]): 0.5, id(turns[1]): 0.0}
    full = turns_to_batch(turns, adv, {"a": "m", "b": "m"}, 0)
    kept = turns_to_batch(turns, adv, {"a": "m", "b": "m"}, 0, drop_zero=True)
    assert len(full["m"]) == 2 and len(kept["m"]) == 1 and float(kept["m"]["advantages"][0]) == 0.5


def test_reward_sharing_sums_seats():
    turns = _turns([{"a": [5], "b": [0]}, {"a": [1], "b": [1]}])
    cfg = algo_defaults("reinforce").replace(
        estimator="reinforce",
        reward_scale=1.0,
        reward_sharing="sum",
        gamma=1.0,
        role_norm=True,
        beta=0.5,
        aa_gamma=1.0,
        aa_variant="published",
    )
    adv = turn_advantages(turns, cfg, simultaneous=True, group_size=1)
    assert all(v == pytest.approx(3.0 if t.game == 0 else -3.0) for t in turns for v in [adv[id(t)]])


# ------------------------------------------------------------------ tokens and loss
def test_only_reply_tokens_carry_loss():
    t = Turn(0, "a", 0, 0, True, 0, [7, 8, 9], [4, 2], 1.0)
    skipped = Turn(0, "b", 0, 0, False, 0, [7, 8], [5, 2], 1.0)  # a bot / untrained seat
    b = turns_to_batch([t, skipped], {id(t): 0.5, id(skipped): 1.0}, {"a": "m", "b": "m"}, pad_id=0)
    rows = b.policy_batches["m"]
    assert rows["input_ids"].tolist() == [[7, 8, 9, 4, 2]]
    # logp[j] scores token j+1: tokens 4 and 2 sit at positions 3 and 4 -> mask indices 2, 3
    assert rows["loss_mask"].tolist() == [[False, False, True, True]]
    assert rows["advantages"].tolist() == [0.5]


def test_masked_tokens_do_not_change_the_loss():
    logp = torch.randn(2, 5, requires_grad=True)
    mask = torch.tensor([[0, 1, 1, 0, 0], [0, 0, 1, 1, 1]], dtype=torch.bool)
    adv = torch.tensor([[1.0], [-2.0]]).expand(2, 5)
    loss = aggregate(policy_loss(logp, logp.detach(), adv, 0.2, 1.4), mask, "seq_mean_token_mean")
    loss.backward()
    assert torch.all(logp.grad[~mask] == 0) and torch.all(logp.grad[mask] != 0)
    # REINFORCE on the first epoch: d loss / d logp = -A / (tokens of the reply)
    assert logp.grad[0, 1] == pytest.approx(-1.0 / 2) and logp.grad[1, 2] == pytest.approx(2.0 / 3)


def test_right_align_moves_rows_to_the_right_edge_and_keeps_the_reply_columns():
    from marl.algos.llm.learner import right_align

    ids = torch.tensor([[1, 2, 3, 0], [4, 5, 0, 0]])
    att = torch.tensor([[1, 1, 1, 0], [1, 1, 0, 0]])
    lmask = torch.tensor([[False, True, False], [True, False, False]])  # row 0 replies with 3, row 1 with 5
    d = right_align(ids, att, lmask)
    assert d["input_ids"].tolist() == [[1, 2, 3], [0, 4, 5]] and d["attention_mask"].tolist() == [[1, 1, 1], [0, 1, 1]]
    assert d["loss_mask"].tolist() == [[True], [True]]  # one column: the last token of each row


def test_ppo_clip_and_dual_clip():
    old = torch.zeros(1, 3)
    logp = torch.log(torch.tensor([[1.5, 0.5, 5.0]]))
    pos = policy_loss(logp, old, torch.ones(1, 3), 0.2, 0.0)
    assert torch.allclose(pos, torch.tensor([[-1.2, -0.5, -1.2]]))
    neg = policy_loss(logp, old, -torch.ones(1, 3), 0.2, 1.4)
    assert torch.allclose(neg, torch.tensor([[1.4, 0.8, 1.4]]))  # rho*|A| capped at c*|A|


def test_k3_kl_zero_at_reference_and_positive_elsewhere():
    x = torch.tensor([-1.0, -2.0])
    assert torch.equal(k3_kl(x, x), torch.zeros(2))
    assert torch.all(k3_kl(x, x + 0.3) > 0)


@pytest.fixture(scope="module")
def tiny():
    tok = word_tokenizer(["<A>", "<B>", "start", "<A> <B>"])
    module = CausalLMModule(model_config={"model": tiny_config(len(tok), n_positions=64)})
    return tok, module


def test_token_logp_matches_log_softmax(tiny):
    tok, module = tiny
    ids = torch.tensor([[4, 8, 2, 5, 6]])
    logp, ent = module.token_logp(ids, torch.ones_like(ids), entropy=True)
    full = torch.log_softmax(module.lm(input_ids=ids).logits.float(), -1)
    assert torch.allclose(logp[0, 2], full[0, 2, 5], atol=1e-5)
    assert torch.all(ent > 0) and torch.all(ent <= math.log(len(tok)) + 1e-4)


def test_reference_policy_is_frozen_and_outside_the_state(tiny):
    _, module = tiny
    ids = torch.tensor([[4, 8, 2, 5, 6]])
    before = module.token_logp(ids, torch.ones_like(ids), reference=True)[0]
    with torch.no_grad():
        for p in module.lm.parameters():
            p.add_(0.1)
    after = module.token_logp(ids, torch.ones_like(ids), reference=True)[0]
    assert torch.allclose(before, after)
    assert not any(k.startswith("_ref") for k in module.state_dict())


@pytest.mark.parametrize("moves", [["<A>", "<B>"], ["<A> <B>", "<B> <A>"]])
def test_constrained_generation_only_produces_legal_moves(tiny, moves):
    tok, module = tiny
    gen = Generator(tok, temperature=1.0, max_new_tokens=4, constrain=True)
    chats = [[{"role": "user", "content": "start"}]] * 16
    prompts, responses, texts = gen.generate(module.lm, chats, [moves] * 16)
    assert set(texts) <= set(moves) and all(r[-1] == tok.eos_token_id for r in responses)
    assert prompts[0] == tok("start", add_special_tokens=False)["input_ids"]


def test_lora_trains_only_adapters(tiny):
    pytest.importorskip("peft")
    tok, _ = tiny
    m = CausalLMModule(
        model_config={
            "model": tiny_config(len(tok), n_positions=64),
            "lora": True,
            "lora_r": 4,
            "lora_alpha": 8,
            "lora_target": ["c_attn"],
        }
    )
    trainable = [n for n, p in m.named_parameters() if p.requires_grad]
    assert trainable and all("lora" in n for n in trainable)
    ids = torch.tensor([[4, 8, 2, 5, 6]])
    ref = m.token_logp(ids, torch.ones_like(ids), reference=True)[0]
    with torch.no_grad():
        for n, p in m.named_parameters():
            if "lora_B" in n:
                p.add_(0.5)
    assert not torch.allclose(m.token_logp(ids, torch.ones_like(ids))[0], ref)  # adapters matter
    assert torch.allclose(m.token_logp(ids, torch.ones_like(ids), reference=True)[0], ref)  # reference = base


# ------------------------------------------------------------------ errors
def test_llm_algorithms_reject_tensor_envs_and_missing_model():
    with pytest.raises(marl.MarlError, match="text games"):
        marl.make_env("matrix", "two_step").fit("mars", model="x")
    with pytest.raises(marl.MarlError, match="needs model="):
        marl.make_env("ipd").fit("reinforce")
    with pytest.raises(marl.MarlError, match="no such folder"):
        marl.make_env("ipd").fit("advantage_alignment", model="/nonexistent/Qwen3-0.6B")


def test_vllm_path_is_guarded_by_an_import_check(tiny):
    import importlib.util

    if importlib.util.find_spec("vllm") is not None:
        pytest.skip("vllm is installed here")
    with pytest.raises(marl.MarlError, match="marl-rllib\\[vllm\\]"):
        marl.make_env("ipd").fit("reinforce", model="gpt2", generator="vllm")


def test_bad_opponent_and_turn_based_alignment_are_errors(tiny):
    tok, _ = tiny
    env = marl.make_env("ipd", rounds=2)
    with pytest.raises(marl.MarlError, match="always_defect"):
        env.fit(
            "reinforce", model=tiny_config(len(tok)), tokenizer=tok, opponents={"grim": 1.0}, stop={"iterations": 1}
        )
    ttt = marl.make_env("openspiel", "tic_tac_toe")
    with pytest.raises(marl.MarlError, match="simultaneous-move"):
        ttt.fit("advantage_alignment", model=tiny_config(len(tok)), tokenizer=tok, stop={"iterations": 1})


def test_rllib_config_of_a_text_game():
    """LLMSelfPlay builds through marl.engine.spec.build_algorithm_config with its own spaces and
    runners: Text spaces in the modules, the policies and the run context; TextEnvRunners with the
    GPUs asked for; the engine's learners, seed and learning rate; DDP that tolerates unused weights."""
    import gymnasium as gym

    from marl.algos.llm.policy import CausalLMModule
    from marl.algos.llm.runner import TextEnvRunner
    from marl.algos.llm.selfplay import LLMSelfPlay
    from marl.api import prepare
    from marl.engine.context import CONFIG, RUN

    env, _, kw = _ipd_tiny(seed=7, lr=3e-4, num_gpus_per_env_runner=0.5, num_env_runners=1)
    cfg, _, env, mapping = prepare(env, "mars", kw)
    config = LLMSelfPlay.build_config(cfg, env, mapping)
    assert config.env_runner_cls is TextEnvRunner and config.num_gpus_per_env_runner == 0.5
    assert config.num_env_runners == 1 and config.seed == 7 and config.lr == 3e-4
    assert config.torch_ddp_kwargs == {"find_unused_parameters": True}
    specs = config.rl_module_spec.rl_module_specs
    assert set(specs) == set(mapping.modules) == set(config.policies)
    for mid, spec in specs.items():
        assert spec.module_class is CausalLMModule and set(spec.model_config) == set(LLMSelfPlay.MODULE_KEYS)
        assert isinstance(spec.observation_space, gym.spaces.Text) and isinstance(spec.action_space, gym.spaces.Text)
        assert isinstance(config.policies[mid].observation_space, gym.spaces.Text)
    assert config.learner_config_dict[CONFIG] is cfg
    assert set(config.learner_config_dict[RUN].module_spaces) == set(mapping.modules)
    assert config.learner_config_dict[RUN].family.simultaneous  # ipd: both seats move at once


# ------------------------------------------------------------------ Ray: learners and a short run
def _ipd_tiny(**kw):
    from marl.envs.text.dilemmas import COMPACT_STATES

    tok = word_tokenizer(["<A>", "<B>", *COMPACT_STATES])
    env = marl.make_env("ipd", rounds=4, prompt_style="compact", history="last")
    base = dict(model=tiny_config(len(tok), n_positions=64), tokenizer=tok, constrain_actions=True, max_new_tokens=2)
    return env, tok, {**base, **kw}


def test_two_ddp_learners_match_one_learner(ray_session):
    """Same batch, same initial weights: 2 CPU learners (DDP, gloo) end where 1 local learner does
    (docs/algorithms/llm_selfplay.md, "Scale path"), and both learners hold identical weights."""

    import numpy as np
    from ray.rllib.policy.sample_batch import MultiAgentBatch, SampleBatch

    from marl.api import prepare
    from marl.algos.llm.selfplay import LLMSelfPlay

    env, tok, kw = _ipd_tiny(loss_agg="seq_mean_token_mean", lr=1e-2)
    rng = np.random.default_rng(0)
    S, L = 32, 16
    lmask = np.zeros((S, L - 1), dtype=bool)
    lmask[:, 6:9] = True
    rows = SampleBatch(
        {
            "input_ids": rng.integers(3, len(tok), size=(S, L)),
            "attention_mask": np.ones((S, L), np.int64),
            "loss_mask": lmask,
            "advantages": rng.normal(size=S).astype(np.float32),
        }
    )
    weights, init = {}, None
    for n in (0, 2):
        cfg, _, env2, mapping = prepare(env, "reinforce", {**kw, "num_learners": n})
        group = LLMSelfPlay.build_config(cfg, env2, mapping).build_learner_group()
        init = init or group.get_weights()
        group.set_weights(init)
        group.update(batch=MultiAgentBatch({"players": rows}, env_steps=S))
        weights[n] = group.get_weights()["players"]
        if n == 2:
            states = [
                r.get()
                for r in group.foreach_learner(
                    lambda lr: {k: v.detach().clone() for k, v in lr.module["players"].unwrapped().state_dict().items()}
                )
            ]
            assert all(torch.equal(states[0][k], states[1][k]) for k in states[0])
        group.shutdown()
    moved = max(float(np.abs(np.asarray(weights[0][k]) - np.asarray(init["players"][k])).max()) for k in weights[0])
    diff = max(float(np.abs(np.asarray(weights[0][k]) - np.asarray(weights[2][k])).max()) for k in weights[0])
    assert moved > 1e-3 and diff < 1e-4 * moved * 100  # the update is real, and the same on both paths


def test_fit_runs_logs_evaluates_and_reloads_policy(ray_session, run_dir):
    env, tok, kw = _ipd_tiny(
        games_per_iteration=8,
        eval_every=2,
        eval_games=4,
        eval_opponents=["always_defect"],
        lr=1e-3,
        log_dir=run_dir,
        progress=False,
        lora=True,
        lora_r=4,
        lora_target=["c_attn"],
    )
    res = env.fit("advantage_alignment", stop={"iterations": 2}, **kw)
    m = res.metrics
    assert m["iteration"] == 2 and m["replies_trained"] == 8 * 2 * 4
    assert 0.0 <= m["coop_rate_mean"] <= 1.0 and m["invalid_rate_mean"] == 0.0
    assert m["vs_always_defect_opp_coop_rate"] == 0.0  # the bot's seat, seen from the learner
    assert m["players/tokens_trained_per_s"] > 0 and m["tokens_generated_per_s"] > 0
    import json
    import pathlib

    lines = (pathlib.Path(res.log_dir) / "transcripts" / "iteration_000002.jsonl").read_text().splitlines()
    game = json.loads(lines[0])
    assert len(lines) == 4 and len(game["chats"]["player_0"]) == 2 * 4  # 4 rounds: prompt + reply each
    assert game["chats"]["player_0"][1]["content"] in ("<A>", "<B>")
    ev = res.evaluate(episodes=4)
    assert ev["invalid_rate"] == 0.0
    assert set(res.policy.reply([[{"role": "user", "content": "start"}]] * 8, legal=[["<A>", "<B>"]] * 8)) <= {
        "<A>",
        "<B>",
    }
    loaded = marl.load(res.checkpoint)  # the checkpoint's LM and tokenizer, without Ray
    for name, p in res.policy.lms["players"].state_dict().items():
        assert torch.equal(p, loaded.policy.lms["players"].state_dict()[name]), name
    assert loaded.evaluate(episodes=2)["invalid_rate"] == 0.0


def test_micro_batching_accumulates_the_same_gradient(ray_session):
    """Splitting a minibatch into token-bounded micro-batches changes memory, not the update."""

    import numpy as np
    from ray.rllib.policy.sample_batch import MultiAgentBatch, SampleBatch

    from marl.api import prepare
    from marl.algos.llm.selfplay import LLMSelfPlay

    env, tok, kw = _ipd_tiny(lr=1e-2, loss_agg="token_mean")
    rng = np.random.default_rng(1)
    S, L = 12, 10
    lmask = rng.random((S, L - 1)) < 0.4
    rows = SampleBatch(
        {
            "input_ids": rng.integers(3, len(tok), size=(S, L)),
            "attention_mask": np.ones((S, L), np.int64),
            "loss_mask": lmask,
            "advantages": rng.normal(size=S).astype(np.float32),
        }
    )
    out, init = [], None
    for budget in (10_000, 25):  # one forward vs micro-batches of 2 rows
        cfg, _, env2, mapping = prepare(env, "reinforce", {**kw, "max_tokens_per_microbatch": budget})
        learner = LLMSelfPlay.build_config(cfg, env2, mapping).build_learner()
        init = init or learner.get_state(components="rl_module")
        learner.set_state(init)
        learner.update(batch=MultiAgentBatch({"players": rows}, env_steps=S))
        out.append({n: p.grad.clone() for n, p in learner.module["players"].named_parameters()})
    # the applied gradients agree to float rounding (Adam's first step is ~lr*sign(g), so weights
    # of near-zero-gradient entries may differ by more than the gradients do)
    assert all(torch.allclose(out[0][k], out[1][k], atol=1e-7, rtol=1e-4) for k in out[0])


def test_separate_seat_policies_and_opponent_pool(ray_session, run_dir):
    env, tok, kw = _ipd_tiny(games_per_iteration=8, eval_every=0, lr=1e-3, log_dir=run_dir, progress=False)
    res = env.fit(
        "reinforce",
        stop={"iterations": 3},
        share="individual",
        pool_every=1,
        opponents={"self": 0.5, "pool": 0.5},
        **kw,
    )
    assert set(res.policy.lms) == {"player_0", "player_1"}  # one LM per seat (policy mapping)
    w0, w1 = (res.policy.lms[s].state_dict() for s in ("player_0", "player_1"))
    assert any(not torch.equal(w0[k], w1[k]) for k in w0)  # trained on their own seats' data
    # with a pool opponent only the learner's seat trains: fewer replies than 8 games x 2 seats x 4 rounds
    assert res.metrics["replies_trained"] < 8 * 2 * 4


def test_free_text_replies_and_invalid_rate(ray_session, run_dir):
    """Natural-language prompts, unconstrained generation: unreadable replies are played as the
    game's default move and counted in invalid_rate (an untrained model mostly babbles)."""
    tok = word_tokenizer(["<A>", "<B>", "Round", "1", "2", "of", "Your", "choice?"])
    env = marl.make_env("ipd", rounds=2, history="last")
    m = env.fit(
        "reinforce",
        stop={"iterations": 1},
        model=tiny_config(len(tok), n_positions=256),
        tokenizer=tok,
        max_new_tokens=4,
        games_per_iteration=8,
        eval_every=0,
        log_dir=run_dir,
        progress=False,
    ).metrics
    assert 0.0 < m["invalid_rate_mean"] <= 1.0
    assert m["replies_trained"] == 8 * 2 * 2
