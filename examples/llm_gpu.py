"""LLM self-play on one GPU: tokens generated and trained per second and GPU memory, for
Advantage Alignment on the IPD and MARS on tic-tac-toe, with a Qwen2-style ~0.5B model
built from a config (random weights: this measures the path and its throughput, not
learning), bf16 weights, LoRA, ``num_gpus_per_learner=1``.

    python examples/llm_gpu.py --out llm_gpu.json [--iterations 3] [--games 32] [--learners 0]
    python examples/llm_gpu.py --gpus 0 --tiny --iterations 1 --games 2   # CPU smoke test of the script

The tokenizer is a byte-level BPE trained on the games' own prompts
(:func:`marl.algos.llm.policy.bpe_tokenizer`): no hub download is needed. One JSON
object per case goes to ``--out`` (metrics of the last iteration, wall-clock, peak GPU
memory of this process, where the learner and the generating env runner live with
``--learners 0``). Numbers: ``docs/llm_models.md``.
"""

from __future__ import annotations

import argparse
import json
import time

import torch

import marl
from marl.algos.llm.policy import bpe_tokenizer
from marl.text import random_play_chats

CASES = {
    # AA on the 10-round IPD: natural-language prompts with the whole game so far, free replies
    "advantage_alignment/ipd": dict(
        game=("ipd", None, {"rounds": 10}),
        algo="advantage_alignment",
        kw=dict(max_new_tokens=64, constrain_actions=False),
    ),
    # MARS on tic-tac-toe (OpenSpiel): replies constrained to the legal moves
    "mars/tic_tac_toe": dict(
        game=("openspiel", "tic_tac_toe", {}), algo="mars", kw=dict(max_new_tokens=8, constrain_actions=True)
    ),
}


def qwen2_half_b():
    """The Qwen2.5-0.5B architecture (24 layers, d 896, GQA 14/2 heads, 151,936-token vocabulary,
    tied embeddings): about 494M parameters, random weights."""
    from transformers import Qwen2Config

    return Qwen2Config(
        vocab_size=151936,
        hidden_size=896,
        intermediate_size=4864,
        num_hidden_layers=24,
        num_attention_heads=14,
        num_key_value_heads=2,
        max_position_embeddings=32768,
        rope_theta=1_000_000.0,
        tie_word_embeddings=True,
    )


def tiny_qwen2():
    """A 2-layer Qwen2 for the CPU smoke test (``--tiny``)."""
    from transformers import Qwen2Config

    return Qwen2Config(
        vocab_size=1200,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=4096,
    )


def make_game(spec):
    family, scenario, kw = spec
    return marl.make_env(family, scenario, **kw) if scenario else marl.make_env(family, **kw)


def run_case(name: str, case, tok, args) -> dict:
    env = make_game(case["game"])
    cuda = args.gpus > 0
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    t0 = time.perf_counter()
    res = env.fit(
        case["algo"],
        stop={"iterations": args.iterations},
        model=tiny_qwen2() if args.tiny else qwen2_half_b(),
        tokenizer=tok,
        dtype="bfloat16",
        lora=True,
        lora_r=16,
        lora_alpha=32,
        num_learners=args.learners,
        num_gpus_per_learner=args.gpus,
        games_per_iteration=args.games,
        eval_every=0,
        lr=1e-5,
        progress=False,
        log_dir=args.log_dir,
        **case["kw"],
    )
    wall = time.perf_counter() - t0
    m = res.metrics
    keep = (
        "tokens_generated_per_s",
        "players/tokens_trained_per_s",
        "replies_trained",
        "prompts_truncated",
        "env_steps",
        "time_this_iter_s",
        "sample_time_s",
        "learn_time_s",
    )
    return {
        "case": name,
        "iterations": args.iterations,
        "games_per_iteration": args.games,
        "num_learners": args.learners,
        "wall_s": round(wall, 1),
        "peak_gpu_memory_gib": round(torch.cuda.max_memory_allocated() / 2**30, 2) if cuda else None,
        **{k: m[k] for k in keep if k in m},
        "all_metrics": {k: v for k, v in m.items() if isinstance(v, (int, float))},
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="llm_gpu.json")
    ap.add_argument("--iterations", type=int, default=3)
    ap.add_argument("--games", type=int, default=32)
    ap.add_argument("--learners", type=int, default=0, help="0: learner in the driver (with the env runner)")
    ap.add_argument("--gpus", type=int, default=1, help="num_gpus_per_learner (0: CPU smoke test)")
    ap.add_argument("--tiny", action="store_true", help="a 2-layer model instead of the 0.5B one (smoke test)")
    ap.add_argument("--cases", nargs="*", default=list(CASES))
    ap.add_argument("--log-dir", default="/tmp/llm_gpu_runs")
    args = ap.parse_args()
    if args.gpus > 0 and not torch.cuda.is_available():
        raise SystemExit("examples/llm_gpu.py measures the GPU path: no CUDA device is visible.")
    texts = [
        m["content"]
        for spec in (c["game"] for c in CASES.values())
        for s in range(3)
        for chat in random_play_chats(make_game(spec), s)
        for m in chat
    ]
    tok = bpe_tokenizer(texts, vocab_size=1000)
    out = {"device": torch.cuda.get_device_name(0) if args.gpus > 0 else "cpu", "torch": torch.__version__, "cases": []}
    for name in args.cases:
        row = run_case(name, CASES[name], tok, args)
        print(json.dumps(row), flush=True)
        out["cases"].append(row)
        with open(args.out, "w") as f:  # after every case: a later one may run out of time
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
