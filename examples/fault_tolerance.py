"""Fault drill: kill one of two remote env runners mid-run and watch marl restore it
(docs/engine.md, "Fault tolerance").

Each algorithm trains with 2 remote env runners; at the end of iteration --kill-at, env runner 1
is killed as a crash would kill it (``--how sigkill``: its process gets SIGKILL; ``--how ray``:
``ray.kill`` with restart). Training goes on with the other runner, Ray restarts the killed
one, marl gives it the learners' weights and samples with both again.

    python examples/fault_tolerance.py                          # mappo, qmix, reinforce (tiny LM)
    python examples/fault_tolerance.py --algos qmix --kill-at 3 --after 10

Prints one row per algorithm:
  iterations      iterations completed (none fails)
  env steps       env steps trained on
  lost            env steps the killed runner had sampled that never reached a learner: its
                  unfinished episodes (a value-decomposition buffer drops them; PPO and the LLM
                  family consume every rollout in its iteration, so they lose none)
  not sampled     env steps the run sampled less while a runner was down (throughput, not data)
  to restored     seconds from the kill to marl's "env runner 1 restored" line
  to full         seconds from the kill to the end of the first iteration with both runners
"""

from __future__ import annotations

import argparse
import os
import signal
import time
from typing import Any, Dict, Tuple

import marl
from marl.api import build_trainer
from marl.engine.faults import kill_env_runner


def make(algo: str, num_envs: int) -> Tuple[Any, Dict[str, Any]]:
    """The env and config overrides of one drill: MPE simple_spread for MAPPO / QMIX, the iterated
    prisoner's dilemma with a tiny GPT-2 (built from a config, no download) for the LLM family."""
    if algo in ("mappo", "ippo", "qmix", "vdn", "iql"):
        env = marl.make_env("mpe", "simple_spread", num_envs=num_envs)
        kw = dict(epochs=4) if algo in ("mappo", "ippo") else dict(batch_size=8, learning_starts_episodes=8)
        return env, dict(rollout_length=10, **kw)  # 25-step episodes span rollouts: the kill cuts some
    from marl.algos.llm.policy import tiny_config, word_tokenizer
    from marl.envs.text.dilemmas import COMPACT_STATES

    tok = word_tokenizer(["<A>", "<B>", *COMPACT_STATES])
    env = marl.make_env("ipd", rounds=4, prompt_style="compact", history="last")
    return env, dict(
        model=tiny_config(len(tok), n_positions=64),
        tokenizer=tok,
        constrain_actions=True,
        max_new_tokens=2,
        games_per_iteration=8,
        eval_every=0,
        lr=1e-3,
    )


def kill(trainer, how: str) -> None:
    """Kill env runner 1: SIGKILL to its process (a crash, e.g. the OOM killer), or ``ray.kill``."""
    if how == "sigkill":
        os.kill(trainer.runner_faults.pids[1], signal.SIGKILL)
    else:
        kill_env_runner(trainer, 1, restart=True)


def drill(algo: str, kill_at: int, after: int, num_envs: int, how: str, timeout_s: float) -> Dict[str, Any]:
    """Train, kill runner 1 after iteration ``kill_at``, go on until it is back and ``after`` more
    iterations have run at full strength (at most ``timeout_s`` after the kill). Returns the row."""
    env, kw = make(algo, num_envs)
    trainer, *_ = build_trainer(env, algo, num_env_runners=2, progress=False, eval_episodes=0, **kw)
    try:
        steps, full_step, t_kill, t_full, not_sampled, it, full_after = 0.0, 0.0, None, None, 0.0, 0, 0
        wall_kill = 0.0
        while full_after < after:
            m = trainer.train()["marl"]
            it, delta, steps = it + 1, m["env_steps"] - steps, m["env_steps"]
            if t_kill is None:
                full_step = delta
                if it == kill_at:
                    t_kill, wall_kill = time.perf_counter(), time.time()
                    kill(trainer, how)
                continue
            not_sampled += full_step - delta
            if m["runners_healthy"] == 2 and m["runners_restored"] >= 1:
                t_full = t_full or time.perf_counter() - t_kill
                full_after += 1
            if time.perf_counter() - t_kill > timeout_s:
                raise RuntimeError(f"{algo}: runner 1 not back within {timeout_s} s")
        first = {e["event"]: e["time"] - wall_kill for e in reversed(trainer.runner_faults.events)}
        buffer = getattr(trainer, "buffer", None)
        return {
            "algo": algo,
            "iterations": it,
            "env steps": int(steps),
            "lost": int(buffer.steps_dropped) if buffer is not None else 0,
            "not sampled": int(not_sampled),
            "noticed after": first["lost"],
            "to restored": first["restored"],
            "to full": t_full,
        }
    finally:
        trainer.stop()


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--algos", nargs="+", default=["mappo", "qmix", "reinforce"])
    p.add_argument("--kill-at", type=int, default=3, help="kill runner 1 after this iteration")
    p.add_argument("--after", type=int, default=3, help="iterations at full strength after the restore")
    p.add_argument("--num-envs", type=int, default=4, help="env copies per runner (MPE)")
    p.add_argument("--how", choices=["sigkill", "ray"], default="sigkill")
    p.add_argument("--timeout", type=float, default=300.0, help="seconds to wait for the restore")
    args = p.parse_args()
    rows = [drill(a, args.kill_at, args.after, args.num_envs, args.how, args.timeout) for a in args.algos]
    cols = ["algo", "iterations", "env steps", "lost", "not sampled", "noticed after", "to restored", "to full"]
    print("\n| " + " | ".join(cols) + " |\n|" + "---|" * len(cols))
    for r in rows:
        print("| " + " | ".join(f"{r[c]:.1f} s" if isinstance(r[c], float) else str(r[c]) for c in cols) + " |")


if __name__ == "__main__":
    main()
