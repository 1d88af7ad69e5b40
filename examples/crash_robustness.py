"""Crash robustness (coach-assisted MARL, Zhao et al. 2022): train a team four ways (no crashes,
fixed rate, curriculum, adaptive coach) and evaluate each over test crash rates.

    python examples/crash_robustness.py --algo mappo --env-steps 300000 --seeds 0

Prints one table row per training mode (greedy return at each test crash rate and the mean over
rates); each run's folder also gets crash_eval.csv / .md / .png.
"""

from __future__ import annotations

import argparse

import marl
from marl.config import parse_cli_overrides
from marl.envs.wrappers.crash_eval import evaluate_crashes

MODES = {
    "none": 0.0,
    "fixed": {"strategy": "fixed", "rate": 0.2},
    "curriculum": {"strategy": "curriculum", "coach": {"p_max": 0.3}},
    "adaptive": {"strategy": "adaptive", "coach": {"p_max": 0.5}},
}


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--algo", default="mappo")
    p.add_argument("--env", default="mpe:simple_spread")
    p.add_argument("--N", type=int, default=4)
    p.add_argument("--modes", nargs="+", default=list(MODES))
    p.add_argument("--rates", nargs="+", type=float, default=[0.0, 0.1, 0.2, 0.3, 0.5])
    p.add_argument("--seeds", nargs="+", type=int, default=[0])
    p.add_argument("--env-steps", type=float, default=300_000)
    p.add_argument("--episodes", type=int, default=200)
    p.add_argument("--log-dir", default="marl_runs")
    p.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE", help="config overrides, e.g. gamma=0.99")
    args = p.parse_args()
    overrides = parse_cli_overrides(args.set)
    family, _, scenario = args.env.partition(":")
    kw = {"N": args.N} if family == "mpe" else {}
    print("mode seed | " + " | ".join(f"p={r:g}" for r in args.rates) + " | mean", flush=True)
    for mode in args.modes:
        crash = MODES[mode]
        if isinstance(crash, dict) and crash.get("strategy") == "curriculum":
            crash = {**crash, "coach": {**crash["coach"], "T_curr": args.env_steps / 2}}
        for seed in args.seeds:
            env = marl.make_env(family, scenario, num_envs=64, seed=seed, crash=crash, **kw)
            res = env.fit(
                args.algo,
                stop={"env_steps": args.env_steps},
                seed=seed,
                progress=False,
                log_dir=args.log_dir,
                eval_episodes=0,
                **overrides,
            )
            rows = evaluate_crashes(res, rates=args.rates, episodes=args.episodes)
            key = "win_rate_mean" if "win_rate_mean" in rows[0] else "episode_return_mean"
            vals = [r[key] for r in rows]
            print(
                f"{mode} {seed} | " + " | ".join(f"{v:.2f}" for v in vals) + f" | {sum(vals) / len(vals):.2f}",
                flush=True,
            )


if __name__ == "__main__":
    main()
