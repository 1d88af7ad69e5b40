"""Scripted yardsticks for MPE simple_spread: how good can a team-sum return get?

    python examples/spread_scripted.py              # 100 episodes per controller

Two hand-written controllers play mpe2's own ``simple_spread_v3`` (N=3, 25 steps,
local_ratio 0.5, discrete actions) with full knowledge of the world:

* ``fixed``: agent i drives to landmark i, a convention a shared policy with a
  one-hot agent id can learn;
* ``assigned``: agents drive to the landmarks of the assignment with the least
  total distance at reset (brute force over the N! permutations).

Each agent picks the discrete move (no-op, left, right, down, up) best aligned
with a PD command ``(landmark - position) - kd * velocity``; ``kd`` trades speed
for overshoot and is swept here. The numbers put a learned policy in context:
random play scores about -81. Measured yardsticks beside the learned ones: docs/algorithms/ppo.md,
"Measured results".
"""

import argparse
import itertools

import numpy as np
from mpe2 import simple_spread_v3

MOVES = np.array([[0, 0], [-1, 0], [1, 0], [0, -1], [0, 1]], dtype=float)  # mpe2 discrete action order


def assignment(world, mode: str) -> list:
    """Landmark index per agent: identity (``fixed``) or the least-total-distance matching."""
    n = len(world.agents)
    if mode == "fixed":
        return list(range(n))
    pos = np.array([a.state.p_pos for a in world.agents])
    lm = np.array([l.state.p_pos for l in world.landmarks])
    cost = np.linalg.norm(pos[:, None] - lm[None], axis=-1)
    return list(min(itertools.permutations(range(n)), key=lambda p: cost[range(n), p].sum()))


def episode_return(env, seed: int, mode: str, kd: float) -> float:
    env.reset(seed=seed)
    world = env.unwrapped.world
    target = assignment(world, mode)
    total = 0.0
    for _ in range(env.unwrapped.max_cycles):
        actions = {}
        for i, name in enumerate(env.agents):
            agent = world.agents[i]
            command = world.landmarks[target[i]].state.p_pos - agent.state.p_pos - kd * agent.state.p_vel
            actions[name] = 0 if np.linalg.norm(command) < 0.02 else int(np.argmax(MOVES @ command))
        _, rewards, _, _, _ = env.step(actions)
        total += sum(rewards.values())
    return total


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--episodes", type=int, default=100)
    p.add_argument("--kd", type=float, nargs="+", default=[0.1, 0.25, 0.5])
    args = p.parse_args()
    env = simple_spread_v3.parallel_env(N=3, local_ratio=0.5, max_cycles=25, continuous_actions=False)
    for mode in ("fixed", "assigned"):
        for kd in args.kd:
            returns = [episode_return(env, s, mode, kd) for s in range(args.episodes)]
            print(f"{mode:>8}  kd={kd:<5}  team-sum return {np.mean(returns):7.2f}  ({args.episodes} episodes)")


if __name__ == "__main__":
    main()
