"""Train an HPN agent on a small scenario, then run it on bigger ones: zero-shot, fine-tuned, and from scratch.

    python examples/transfer_hpn.py                                    # SMAX 3m -> 8m, HPN-QMIX
    python examples/transfer_hpn.py --env mpe:simple_spread --algo mappo --source N=3 --targets N=4 N=5

HPN's weights do not depend on the number of agents or entities, so
``marl.load(checkpoint, env=bigger_env)`` acts on the bigger scenario and
``init_from=checkpoint`` starts a run there (docs/algorithms/entity_networks.md).
Fine-tuning QMIX starts epsilon at ``--ft-epsilon`` (the default schedule
starts at 1.0 and unlearns the pretrained agents while the new mixer trains).
"""

import argparse

import numpy as np

import marl
from marl.config import parse_cli_overrides
from marl.env import EpisodeStats


def random_play(env, episodes: int, seed: int = 7) -> dict:
    """Mean episode statistics of uniformly random legal actions."""
    step, stats = env.reset(seed=seed), EpisodeStats(env.info)
    while len(stats.done["episode_return"]) < episodes:
        step = env.step(env.random_actions(step))
        stats.update(step)
    return {k: float(np.mean(v[:episodes])) for k, v in stats.pop().items()}


def scenario(env_name: str, spec: str):
    """``"3m"`` (a scenario) or ``"N=4"`` (a keyword of ``env_name``'s scenario) -> ``make_env`` arguments."""
    family, _, default = env_name.partition(":")
    if "=" in spec:
        k, _, v = spec.partition("=")
        return family, default, {k: int(v)}
    return family, spec, {}


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--env", default="smax", help="family or family:scenario (default smax)")
    p.add_argument("--algo", default="qmix")
    p.add_argument("--agent", default="hpn", choices=["hpn", "dpn"])
    p.add_argument("--source", default="3m", help="scenario, or key=value of the scenario (N=3)")
    p.add_argument("--targets", nargs="+", default=["8m"])
    p.add_argument("--env-steps", type=float, default=3e5)
    p.add_argument("--ft-steps", type=float, default=1e5)
    p.add_argument("--ft-epsilon", type=float, default=0.1, help="epsilon_start of value-decomposition fine-tunes")
    p.add_argument("--num-envs", type=int, default=64)
    p.add_argument("--episodes", type=int, default=200)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE", help="config overrides, e.g. gamma=0.99")
    args = p.parse_args()

    fam, scen, kw = scenario(args.env, args.source)
    common = {"agent": args.agent, "seed": args.seed, "eval_episodes": args.episodes, **parse_cli_overrides(args.set)}
    src = marl.make_env(fam, scen, num_envs=args.num_envs, **kw).fit(
        args.algo, stop={"env_steps": int(args.env_steps)}, **common
    )
    print(f"source {args.source}: {src.eval}  ({src.metrics['time_s']:.0f} s)  checkpoint {src.checkpoint}")
    for target in args.targets:
        fam_t, scen_t, kw_t = scenario(args.env, target)
        env = marl.make_env(fam_t, scen_t, num_envs=min(args.episodes, 50), **kw_t)
        print(f"{target} zero-shot: {marl.load(src.checkpoint, env=env).evaluate(args.episodes, env=env)}")
        print(f"{target} random play: {random_play(env, args.episodes)}")
    fam_t, scen_t, kw_t = scenario(args.env, args.targets[0])
    ft_env = marl.make_env(fam_t, scen_t, num_envs=args.num_envs, **kw_t)
    extra = {"epsilon_start": args.ft_epsilon} if args.algo in ("qmix", "vdn", "iql") else {}
    stop = {"env_steps": int(args.ft_steps)}
    tuned = ft_env.fit(args.algo, init_from=src.checkpoint, stop=stop, **common, **extra)
    scratch = ft_env.fit(args.algo, stop=stop, **common)
    print(
        f"{args.targets[0]} after {args.ft_steps:.0f} steps: fine-tuned {tuned.eval}\n    from scratch {scratch.eval}"
    )


if __name__ == "__main__":
    main()
