"""Train MAPPO on MPE simple_spread (3 agents, 25 steps) and print the learning curve.

    python examples/train_mappo_spread.py                   # 1M env steps (the benchmark budget), 2-3 min on 2 cores
    python examples/train_mappo_spread.py --env-steps 3e5   # a shorter run; it ends short of the goal

Random play scores about -81 (team sum over 3 agents and 25 steps); the goal at
1M env steps is -40 or better. What this script measured, per seed: docs/algorithms/ppo.md,
"Measured results"; 3 seeds at 200k env steps with the benchmark protocol: docs/benchmarks.md, "mpe_short".
Config overrides go after --set, e.g. --set gamma=0.99 epochs=10.
"""

import argparse

import marl
from marl.config import parse_cli_overrides


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--env-steps", type=float, default=1e6)
    p.add_argument("--num-envs", type=int, default=128)
    p.add_argument("--algo", default="mappo", choices=sorted(marl.list_algos()))
    p.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE", help="config overrides, e.g. gamma=0.99")
    args = p.parse_args()

    env = marl.make_env("mpe", "simple_spread", num_envs=args.num_envs)
    result = env.fit(
        args.algo, stop={"env_steps": int(args.env_steps)}, eval_episodes=100, **parse_cli_overrides(args.set)
    )

    print("\nLearning curve (mean team-sum return of training episodes):")
    every = max(1, len(result.history) // 15)
    rows = result.history[::every]
    if rows and rows[-1] is not result.history[-1]:  # the last iteration once, even when the stride lands on it
        rows.append(result.history[-1])
    for m in rows:
        r = m.get("episode_return_mean", float("nan"))
        print(f"  {m['env_steps']:>9,d} env steps  {r:8.2f}  ({m['env_steps_per_s']:.0f} steps/s)")
    print(f"\nGreedy evaluation, 100 episodes: {result.eval['episode_return_mean']:.2f} (random play: about -81)")
    print(f"TensorBoard:  tensorboard --logdir {result.log_dir}/tb")
    print(f"Checkpoint:   {result.checkpoint}   (reload: marl.load(path), or: marl eval {result.checkpoint})")


if __name__ == "__main__":
    main()
