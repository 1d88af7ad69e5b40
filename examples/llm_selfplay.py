"""LLM self-play on text games: Advantage Alignment vs naive REINFORCE vs shared rewards in the
iterated prisoner's dilemma, or MARS in tic-tac-toe (OpenSpiel, or TextArena's TicTacToe-v0:
`textarena_tic_tac_toe`, needs `pip install textarena`), Kuhn poker or Leduc poker (OpenSpiel).

Without --model, a tiny GPT-2 is built from a config with a word-level tokenizer (runs on a
laptop CPU, no download; `prompt_style="compact"`). With --model /path/to/hf-model the real
model and its tokenizer are loaded from that path (natural-language prompts; add --lora).

    python examples/llm_selfplay.py ipd --algos advantage_alignment reinforce sum --seeds 0 1 2
    python examples/llm_selfplay.py trust_and_split --algos advantage_alignment reinforce
    python examples/llm_selfplay.py tic_tac_toe --algos mars --iterations 300
    python examples/llm_selfplay.py textarena_tic_tac_toe --iterations 300 --eval-games 2000
    python examples/llm_selfplay.py kuhn_poker --iterations 1000 --eval-games 4000 --seeds 0 1 2
    python examples/llm_selfplay.py kuhn_poker --baselines   # exact OpenSpiel values, no training
    python examples/llm_selfplay.py ipd --model /models/Qwen3-0.6B --lora --iterations 200 \
        --set num_learners=1 num_gpus_per_learner=1

Prints one row per run with the metrics the thresholds use (docs/algorithms/llm_selfplay.md, "Measured").
"""

from __future__ import annotations

import argparse
import time

import numpy as np

import marl
from marl.config import parse_cli_overrides
from marl.envs.text.trust_and_split import HANDS

# Tiny-model settings measured on a 2-core CPU (docs/algorithms/llm_selfplay.md).
TINY = {
    "ipd": dict(lr=3e-4, games_per_iteration=128, entropy_coef=0.0),
    "tic_tac_toe": dict(
        lr=1e-3,
        games_per_iteration=256,
        entropy_coef=0.0,
        kl_coef=0.0,
        temperature=1.0,
        eval_temperature=0.0,
        opponents={"self": 0.7, "random": 0.3},
    ),  # greedy evaluation
}
# No-Press Split (public values, 10 rounds): rewards are points per round (up to 100), divided by
# 100 as AdAlignLLM's TAS reward_normalizing_constant; evaluated against its bots
TINY["trust_and_split"] = dict(
    lr=3e-4,
    games_per_iteration=128,
    entropy_coef=0.0,
    reward_scale=100.0,
    eval_opponents=["greedy", "fair", "truthful_cooperator"],
)
# the same game through TextArena, with the partner mix of tests/test_llm_learning.py (half random)
TINY["textarena_tic_tac_toe"] = {**TINY["tic_tac_toe"], "opponents": {"self": 0.5, "random": 0.5}}
# Poker equilibria mix their moves (Kuhn's player_0 bluffs with a J), so the policy is evaluated
# as sampled. Co-players: self-play plus the two evaluation bots (ours; {self: 0.5, cfr: 0.5}
# measured the same in Kuhn, docs/algorithms/llm_selfplay.md).
POKER = dict(
    lr=1e-3,
    games_per_iteration=256,
    entropy_coef=0.0,
    kl_coef=0.0,
    temperature=1.0,
    eval_temperature=1.0,
    opponents={"self": 0.5, "random": 0.25, "cfr": 0.25},
    eval_opponents=["random", "cfr"],
)
POKER_GAMES = ("kuhn_poker", "leduc_poker")
TINY.update(dict.fromkeys(POKER_GAMES, POKER))
POKER_COLUMNS = [
    f"vs_{bot}_{seat}return{se}"
    for bot in ("random", "cfr")
    for seat in ("player_0_", "player_1_", "")
    for se in ("", "_se")
]
EXACT_COLUMNS = [f"exact_vs_{bot}_{seat}_return" for bot in ("random", "cfr") for seat in ("player_0", "player_1")] + [
    "exact_exploitability"
]
COLUMNS = {
    "ipd": [
        "coop_rate_mean",
        "collective_payoff_mean",
        "vs_always_defect_reward_per_round",
        "vs_always_defect_opp_reward_per_round",
        "vs_tit_for_tat_reward_per_round",
        "vs_always_cooperate_reward_per_round",
        "p_coop_after_defect_mean",
        "p_coop_after_cc_mean",
    ],
    "tic_tac_toe": [
        "vs_random_player_0_win",
        "vs_random_player_0_loss",
        "vs_random_player_1_win",
        "vs_random_player_1_loss",
        "vs_random_invalid_rate",
    ],
    **dict.fromkeys(POKER_GAMES, POKER_COLUMNS + EXACT_COLUMNS + ["vs_random_invalid_rate"]),
}
COLUMNS["textarena_tic_tac_toe"] = COLUMNS["tic_tac_toe"]
COLUMNS["trust_and_split"] = [
    "collective_payoff_mean",
    "claims_mean_high_mean",
    "claims_mean_low_mean",
    "high_share_mean",
    *[
        f"vs_{bot}_{k}"
        for bot in ("greedy", "fair", "truthful_cooperator")
        for k in ("reward_per_round", "opp_reward_per_round")
    ],
]
# compact vocabulary of each OpenSpiel game (envs/text/openspiel.py, compact renderers)
POKER_WORDS = ["J", "Q", "K", "check", "bet", "fold", "call"]  # own card, then the betting
WORDS = {
    "tic_tac_toe": ["me", "opp", "_"] + [f"c{i}" for i in range(9)],
    "kuhn_poker": POKER_WORDS,
    "leduc_poker": POKER_WORDS + ["raise", "/"],
}  # "/" marks the public card


def make_game(game: str, compact: bool):
    style = dict(prompt_style="compact", history="last") if compact else {}
    if game == "ipd":
        return marl.make_env("ipd", rounds=10, **style)
    if game == "textarena_tic_tac_toe":
        return marl.make_env("textarena", "TicTacToe-v0", **style)
    if game == "trust_and_split":
        return marl.make_env("trust_and_split", "no_press", **style)
    if game in POKER_GAMES:  # returns in chips (a split Leduc pot pays 0, not draw_reward)
        return marl.make_env("openspiel", game, draw_reward=0.0, **style)
    return marl.make_env("openspiel", game, **style)


def tiny_model(game: str):
    from marl.algos.llm.policy import tiny_config, word_tokenizer

    if game == "ipd":
        from marl.envs.text.dilemmas import COMPACT_STATES

        words = ["<A>", "<B>", *COMPACT_STATES]
    elif game == "textarena_tic_tac_toe":
        words = ["me", "opp", "_"] + [f"[{i}]" for i in range(9)]  # TextArena's moves, one word each
    elif game == "trust_and_split":  # compact No-Press Split: hands, "last" round, claims k0..k10
        words = ["last", "opp", *HANDS, *[f"k{i}" for i in range(11)]]
    else:
        words = WORDS[game]
    tok = word_tokenizer(words)
    return dict(model=tiny_config(len(tok), n_positions=64), tokenizer=tok, constrain_actions=True, max_new_tokens=2)


def run(game: str, algo: str, seed: int, args) -> dict:
    kw = tiny_model(game) if args.model is None else dict(model=args.model, lora=args.lora)
    if args.model is None:
        kw.update(TINY.get(game, {}))
    if algo == "sum":  # the prosocial control: REINFORCE on the sum of both seats' rewards
        algo, kw["reward_sharing"] = "reinforce", "sum"
    poker = game in POKER_GAMES  # evaluated below, with standard errors and exact values
    kw.update(
        seed=seed,
        eval_every=0 if poker else args.iterations,
        eval_games=args.eval_games,
        progress=False,
        log_dir=args.log_dir,
    )
    kw.update(parse_cli_overrides(args.set or []))
    t0 = time.time()
    res = make_game(game, args.model is None).fit(algo, stop={"iterations": args.iterations}, **kw)
    wall = time.time() - t0
    m = dict(res.metrics)
    if poker:
        m.update(seat_returns(res.policy, kw.get("eval_opponents") or ["random", "cfr"], args.eval_games))
        if args.model is None:
            m.update(exact_policy_values(res.policy, game))
    return {
        "wall_s": wall,
        **{c: m.get(c, float("nan")) for c in COLUMNS[game]},
        "tokens_generated_per_s": m.get("tokens_generated_per_s"),
        "tokens_trained_per_s": m.get("players/tokens_trained_per_s"),
    }


def seat_returns(policy, bots, games: int) -> dict:
    """The trained ``policy``'s (a ``TextPolicy``) mean return per game against each bot, per seat
    and over both, with its standard error (``..._se``, sample std / sqrt(games));
    ``games`` games per bot, half in each seat; ``vs_<bot>_invalid_rate`` too."""
    from marl.algos.llm.runner import evaluate

    out = {}
    for bot in bots:
        stats = evaluate(
            policy.make_env, policy.agent_to_module, policy.lms, policy.generator, bot, games, policy.temperature
        )
        out[f"vs_{bot}_invalid_rate"] = float(np.mean(stats["invalid_rate"]))
        for seat in ("player_0_", "player_1_", ""):
            r = np.asarray(stats[f"{seat}return"])
            out[f"vs_{bot}_{seat}return"] = float(r.mean())
            out[f"vs_{bot}_{seat}return_se"] = float(r.std(ddof=1) / np.sqrt(len(r)))
    return out


def exact_policy_values(policy, game: str) -> dict:
    """Exact values of the trained ``policy`` (a ``TextPolicy`` with one-token compact moves) in
    a poker game: its move probabilities at every information state (softmax of the legal
    moves' logits at the policy's temperature, what its constrained sampler draws from) as an
    OpenSpiel tabular policy, then ``policy_value`` against uniform random play and the ``cfr``
    bot per seat, and its exploitability (chips per game)."""
    import pyspiel
    import torch
    from open_spiel.python.algorithms import expected_game_score, exploitability
    from open_spiel.python.policy import UniformRandomPolicy, tabular_policy_from_callable

    from marl.envs.text.openspiel_bots import solve

    env, g = policy.make_env(), pyspiel.load_game(game)
    gen = policy.generator

    def probs(state):
        env.set_history(state.history())
        (agent,) = env.to_act()
        legal = env.legal_map()  # move text -> pyspiel action id
        chat = [{"role": "user", "content": env.observe(agent)}]  # compact, history="last": no system prompt
        lm = policy.lms[policy.agent_to_module[agent]]
        with torch.no_grad():
            logits = lm(torch.tensor([gen.prompt_ids(chat)])).logits[0, -1]
        moves = torch.stack([logits[gen.action_ids(m)[0]] for m in legal]) / max(policy.temperature, 1e-6)
        return dict(zip(legal.values(), torch.softmax(moves, -1).tolist()))

    learned, rand, cfr = tabular_policy_from_callable(g, probs), UniformRandomPolicy(g), solve(g)
    value = lambda p0, p1: expected_game_score.policy_value(g.new_initial_state(), [p0, p1])
    out = {"exact_exploitability": float(exploitability.exploitability(g, learned))}
    for name, bot in (("random", rand), ("cfr", cfr)):
        out[f"exact_vs_{name}_player_0_return"] = float(value(learned, bot)[0])
        out[f"exact_vs_{name}_player_1_return"] = float(value(bot, learned)[1])
    return out


def exact_baselines(game: str) -> dict:
    """Player_0's and player_1's exact expected chips per game of fixed policy pairs (OpenSpiel
    ``expected_game_score.policy_value``, ``best_response``): uniform random play, the ``cfr``
    bot's policy (envs/text/openspiel_bots.py) and a best response to random play."""
    import pyspiel
    from open_spiel.python.algorithms import best_response, expected_game_score, exploitability
    from open_spiel.python.policy import UniformRandomPolicy

    from marl.envs.text.openspiel_bots import solve

    g = pyspiel.load_game(game)
    rand, cfr = UniformRandomPolicy(g), solve(g)
    value = lambda p0, p1: [float(v) for v in expected_game_score.policy_value(g.new_initial_state(), [p0, p1])]
    return {
        "random vs random": value(rand, rand),
        "random vs cfr": value(rand, cfr),
        "cfr vs random": value(cfr, rand),
        "cfr vs cfr": value(cfr, cfr),
        "best response to random (as player_0, as player_1)": [
            float(best_response.BestResponsePolicy(g, p, rand).value(g.new_initial_state())) for p in (0, 1)
        ],
        "cfr exploitability": float(exploitability.exploitability(g, cfr)),
    }


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("game", choices=["ipd", "trust_and_split", "tic_tac_toe", "textarena_tic_tac_toe", *POKER_GAMES])
    p.add_argument("--algos", nargs="+", default=None)
    p.add_argument("--seeds", nargs="+", type=int, default=[0])
    p.add_argument("--iterations", type=int, default=300)
    p.add_argument("--eval-games", type=int, default=512)
    p.add_argument("--model", default=None, help="local path or hub id of a causal LM (default: tiny GPT-2)")
    p.add_argument("--lora", action="store_true")
    p.add_argument("--log-dir", default="marl_runs")
    p.add_argument("--set", nargs="*", help="config overrides key=value")
    p.add_argument("--baselines", action="store_true", help="print the exact poker baselines and stop")
    args = p.parse_args()
    if args.baselines:
        for k, v in exact_baselines(args.game).items():
            print(f"{args.game} {k}: {v}")
        return
    social = args.game in ("ipd", "trust_and_split")  # social dilemmas: AA against its controls
    algos = args.algos or (["advantage_alignment", "reinforce", "sum"] if social else ["mars"])
    for algo in algos:
        for seed in args.seeds:
            row = run(args.game, algo, seed, args)
            print(
                f"{args.game} {algo} seed {seed}: "
                + ", ".join(f"{k} {v:.3f}" for k, v in row.items() if v is not None),
                flush=True,
            )


if __name__ == "__main__":
    main()
