"""LLM self-play on text games: Advantage Alignment vs naive REINFORCE vs shared rewards in the
iterated prisoner's dilemma, or MARS in tic-tac-toe (OpenSpiel, or TextArena's TicTacToe-v0:
`textarena_tic_tac_toe`, needs `pip install textarena`).

Without --model, a tiny GPT-2 is built from a config with a word-level tokenizer (runs on a
laptop CPU, no download; `prompt_style="compact"`). With --model /path/to/hf-model the real
model and its tokenizer are loaded from that path (natural-language prompts; add --lora).

    python examples/llm_selfplay.py ipd --algos advantage_alignment reinforce sum --seeds 0 1 2
    python examples/llm_selfplay.py tic_tac_toe --algos mars --iterations 300
    python examples/llm_selfplay.py textarena_tic_tac_toe --iterations 300 --eval-games 2000
    python examples/llm_selfplay.py ipd --model /models/Qwen3-0.6B --lora --iterations 200 \
        --set num_learners=1 num_gpus_per_learner=1

Prints one row per run with the metrics the thresholds use (docs/algorithms/llm_selfplay.md, "Measured").
"""
from __future__ import annotations

import argparse
import time

import marl
from marl.config import parse_cli_overrides

# Tiny-model settings measured on a 2-core CPU (docs/algorithms/llm_selfplay.md).
TINY = {
    "ipd": dict(lr=3e-4, games_per_iteration=128, entropy_coef=0.0),
    "tic_tac_toe": dict(lr=1e-3, games_per_iteration=256, entropy_coef=0.0, kl_coef=0.0, temperature=1.0,
                        eval_temperature=0.0, opponents={"self": 0.7, "random": 0.3}),  # greedy evaluation
}
# the same game through TextArena, with the partner mix of tests/test_llm_learning.py (half random)
TINY["textarena_tic_tac_toe"] = {**TINY["tic_tac_toe"], "opponents": {"self": 0.5, "random": 0.5}}
COLUMNS = {
    "ipd": ["coop_rate_mean", "collective_payoff_mean", "vs_always_defect_reward_per_round",
            "vs_always_defect_opp_reward_per_round", "vs_tit_for_tat_reward_per_round",
            "vs_always_cooperate_reward_per_round", "p_coop_after_defect_mean", "p_coop_after_cc_mean"],
    "tic_tac_toe": ["vs_random_player_0_win", "vs_random_player_0_loss", "vs_random_player_1_win",
                    "vs_random_player_1_loss", "vs_random_invalid_rate"],
}
COLUMNS["textarena_tic_tac_toe"] = COLUMNS["tic_tac_toe"]


def make_game(game: str, compact: bool):
    style = dict(prompt_style="compact", history="last") if compact else {}
    if game == "ipd":
        return marl.make_env("ipd", rounds=10, **style)
    if game == "textarena_tic_tac_toe":
        return marl.make_env("textarena", "TicTacToe-v0", **style)
    return marl.make_env("openspiel", game, **style)


def tiny_model(game: str):
    from marl.algos.llm.policy import tiny_config, word_tokenizer

    if game == "ipd":
        from marl.envs.text.dilemmas import COMPACT_STATES

        words = ["<A>", "<B>", *COMPACT_STATES]
    elif game == "textarena_tic_tac_toe":
        words = ["me", "opp", "_"] + [f"[{i}]" for i in range(9)]  # TextArena's moves, one word each
    else:
        words = ["me", "opp", "_"] + [f"c{i}" for i in range(9)]
    tok = word_tokenizer(words)
    return dict(model=tiny_config(len(tok), n_positions=64), tokenizer=tok, constrain_actions=True, max_new_tokens=2)


def run(game: str, algo: str, seed: int, args) -> dict:
    kw = tiny_model(game) if args.model is None else dict(model=args.model, lora=args.lora)
    if args.model is None:
        kw.update(TINY.get(game, {}))
    if algo == "sum":  # the prosocial control: REINFORCE on the sum of both seats' rewards
        algo, kw["reward_sharing"] = "reinforce", "sum"
    kw.update(seed=seed, eval_every=args.iterations, eval_games=args.eval_games, progress=False, log_dir=args.log_dir)
    kw.update(parse_cli_overrides(args.set or []))
    t0 = time.time()
    res = make_game(game, args.model is None).fit(algo, stop={"iterations": args.iterations}, **kw)
    m = res.metrics
    return {"wall_s": time.time() - t0, **{c: m.get(c, float("nan")) for c in COLUMNS[game]},
            "tokens_generated_per_s": m.get("tokens_generated_per_s"),
            "tokens_trained_per_s": m.get("players/tokens_trained_per_s")}


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("game", choices=["ipd", "tic_tac_toe", "textarena_tic_tac_toe"])
    p.add_argument("--algos", nargs="+", default=None)
    p.add_argument("--seeds", nargs="+", type=int, default=[0])
    p.add_argument("--iterations", type=int, default=300)
    p.add_argument("--eval-games", type=int, default=512)
    p.add_argument("--model", default=None, help="local path or hub id of a causal LM (default: tiny GPT-2)")
    p.add_argument("--lora", action="store_true")
    p.add_argument("--log-dir", default="marl_runs")
    p.add_argument("--set", nargs="*", help="config overrides key=value")
    args = p.parse_args()
    algos = args.algos or (["advantage_alignment", "reinforce", "sum"] if args.game == "ipd" else ["mars"])
    for algo in algos:
        for seed in args.seeds:
            row = run(args.game, algo, seed, args)
            print(f"{args.game} {algo} seed {seed}: " + ", ".join(f"{k} {v:.3f}" for k, v in row.items() if v is not None),
                  flush=True)


if __name__ == "__main__":
    main()
