"""Train a StarCraft-style team on SMAX (JaxMARL; no game binary needed) and print its win rate.

    pip install "torch==2.13.0" -e ".[smax]"
    python examples/train_smax.py                       # QMIX on 3m
    python examples/train_smax.py --map 2s3z --env-steps 2e6
    python examples/train_smax.py --algo mappo --map 3m
    python examples/train_smax.py --map 5m_vs_6m --agent hpn   # HPN-QMIX

Random play wins 3m almost never; pymarl2's QMIX wins SMAC's 3m and 2s3z
(difficulty 7) close to 100% of test episodes. What this script measured: the SMAX table of
docs/algorithms/value_decomposition.md, "Measured"; 3 seeds at 200k env steps with the benchmark
protocol: docs/benchmarks.md, "smax_short".
"""

import argparse

import marl
from marl.config import parse_cli_overrides


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--map", default="3m", help="SMAX scenario (marl.list_envs(True)['smax'])")
    p.add_argument("--algo", default="qmix", choices=sorted(marl.list_algos()))
    p.add_argument("--env-steps", type=float, default=1e6)
    p.add_argument("--num-envs", type=int, default=64)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--agent", default="mlp", choices=["mlp", "hpn", "dpn", "asn"], help="agent network")
    p.add_argument("overrides", nargs="*", help="config overrides key=value (e.g. lr=5e-4)")
    args = p.parse_args()
    overrides = parse_cli_overrides(args.overrides)

    env = marl.make_env("smax", args.map, num_envs=args.num_envs)
    result = env.fit(
        args.algo,
        stop={"env_steps": int(args.env_steps)},
        eval_episodes=200,
        seed=args.seed,
        agent=args.agent,
        **overrides,
    )

    print("\nLearning curve (training episodes, exploration on):")
    every = max(1, len(result.history) // 15)
    for m in result.history[::every] + result.history[-1:]:
        print(
            f"  {m['env_steps']:>9,d} env steps  win rate {m.get('win_rate_mean', float('nan')):5.2f}  "
            f"return {m.get('episode_return_mean', float('nan')):6.2f}  ({m['env_steps_per_s']:.0f} steps/s)"
        )
    ev = result.eval
    print(
        f"\nGreedy evaluation, 200 episodes: win rate {ev.get('win_rate_mean', float('nan')):.3f}, "
        f"return {ev['episode_return_mean']:.2f}"
    )
    print(f"Training time: {result.metrics['time_s']:.0f} s for {result.metrics['env_steps']:,} env steps")
    print(f"TensorBoard:  tensorboard --logdir {result.log_dir}/tb")
    print(f"Checkpoint:   {result.checkpoint}")


if __name__ == "__main__":
    main()
