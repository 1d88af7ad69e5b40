"""IPPO on Overcooked cramped_room: JaxMARL's own feed-forward baseline and marl at its hyperparameters.

usage:
  python examples/overcooked_vs_jaxmarl.py jaxmarl --src JAXMARL_CHECKOUT [--steps 5e6]
  python examples/overcooked_vs_jaxmarl.py marl [--iterations 489] [--seed 0] [--out result.json] [--image]

``jaxmarl`` runs ``make_train`` of JaxMARL's feed-forward Overcooked IPPO script unchanged
(https://github.com/FLAIROx/JaxMARL/blob/c793d095618c6d3edfb5632802348f57b70a4b94/baselines/IPPO/ippo_ff_overcooked.py), at its YAML config (the layout set to ``cramped_room``, ``TOTAL_TIMESTEPS`` from
``--steps``), and prints the metrics the script sends to wandb, one JSON line per update:
``returned_episode_returns`` is the sparse return of one cook (20 per soup, no shaping) of the last
finished training episode, averaged over the rollout and the 16 env copies. The baselines are not in
the jaxmarl wheel: clone https://github.com/FLAIROx/JaxMARL and ``pip install distrax hydra-core``.

``marl`` trains marl's IPPO on ``make_env("overcooked", "cramped_room", flat_obs=True)`` with the
same hyperparameters (table ``JAXMARL_IPPO_FF`` below) for ``--iterations`` rollouts of 16 x 128 env
steps, then plays 64 episodes greedy and 64 sampled without shaping and prints the returns. The
learning rate decays linearly to 0 at 5M env steps, the shaped reward's weight at 2.5M (JaxMARL's
``TOTAL_TIMESTEPS`` and ``REW_SHAPING_HORIZON``), whatever ``--iterations`` is. ``--image`` keeps
the ``[4, 5, 26]`` uint8 grids (marl's CNN encoder) instead of ``flat_obs=True``.

Source: Rutherford et al. 2023, "JaxMARL: Multi-Agent RL Environments and Algorithms in JAX",
arXiv:2311.10090 (IPPO: de Witt et al. 2020, arXiv:2011.09533).
"""

from __future__ import annotations

import argparse
import json
import sys
import time

JAXMARL_TOTAL_STEPS = 5_000_000  # TOTAL_TIMESTEPS of JaxMARL's config
SHAPING_HORIZON = 2_500_000  # REW_SHAPING_HORIZON
JAXMARL_IPPO_FF = dict(  # JaxMARL's config / its ActorCritic, as marl's IPPO keys
    num_envs=16,  # NUM_ENVS
    rollout_length=128,  # NUM_STEPS
    lr=2.5e-4,  # LR
    lr_schedule="linear",  # ANNEAL_LR (to 0 at TOTAL_TIMESTEPS)
    epochs=4,  # UPDATE_EPOCHS
    num_minibatches=4,  # NUM_MINIBATCHES (marl splits along the env copies, JaxMARL shuffles rows)
    clip=0.2,  # CLIP_EPS
    value_clip=0.2,  # the value clip of its loss, also CLIP_EPS
    entropy_coef=0.01,  # ENT_COEF
    value_loss_coef=0.5,  # VF_COEF (both losses are 0.5 * squared error)
    max_grad_norm=0.5,  # MAX_GRAD_NORM
    adam_eps=1e-5,
    gamma=0.99,  # GAMMA
    gae_lambda=0.95,  # GAE_LAMBDA
    huber_delta=0.0,  # squared error, no Huber loss
    value_norm=False,
    advantage_norm=True,  # per minibatch in JaxMARL, per batch in marl
    hidden=64,  # Dense(64) x 2 in actor and critic
    layers=2,
    activation="tanh",  # ACTIVATION
    layer_norm=False,
    policy_gain=0.01,  # orthogonal(0.01) policy head
    agent_id=False,  # one network for both cooks, no agent index
    num_env_runners=0,  # one env object: its clock drives the shaping anneal
)


def run_jaxmarl(src: str, steps: float) -> None:
    """JaxMARL's ``make_train`` at its config; its wandb metrics printed as JSON lines."""
    import jax
    from omegaconf import OmegaConf

    sys.path.insert(0, f"{src}/baselines/IPPO")
    import ippo_ff_overcooked as baseline
    from jaxmarl.environments.overcooked import overcooked_layouts

    cfg = OmegaConf.to_container(OmegaConf.load(f"{src}/baselines/IPPO/config/ippo_ff_overcooked.yaml"))
    cfg["ENV_KWARGS"]["layout"] = overcooked_layouts["cramped_room"]
    cfg["TOTAL_TIMESTEPS"] = steps
    t0 = time.time()

    def log(metrics):  # the script's wandb.log callback
        row = {k: float(v) for k, v in metrics.items()}
        print(json.dumps({**row, "wall_s": round(time.time() - t0, 1)}), flush=True)

    baseline.wandb.log = log
    rngs = jax.random.split(jax.random.PRNGKey(cfg["SEED"]), cfg["NUM_SEEDS"])
    jax.block_until_ready(jax.vmap(jax.jit(baseline.make_train(cfg)))(rngs))


def run_marl(iterations: int, seed: int, out: str, image: bool = False) -> None:
    """marl's IPPO at ``JAXMARL_IPPO_FF``; greedy and sampled returns without shaping."""
    import ray
    import torch

    from marl.env import make_env

    torch.set_num_threads(1)
    ray.init(num_cpus=2, include_dashboard=False)
    flat = not image
    env = make_env(
        "overcooked",
        "cramped_room",
        num_envs=16,
        seed=seed,
        flat_obs=flat,
        shaped_reward=True,
        shaping_horizon=SHAPING_HORIZON,
    )
    t0 = time.time()
    stop = {"env_steps": JAXMARL_TOTAL_STEPS, "iterations": iterations}  # lr reaches 0 at the first
    res = env.fit("ippo", stop=stop, seed=seed, **JAXMARL_IPPO_FF)
    wall = time.time() - t0
    sparse = make_env("overcooked", "cramped_room", num_envs=32, seed=1000, flat_obs=flat)
    greedy = res.evaluate(episodes=64, env=sparse)
    res.policy.explore = True
    sampled = res.evaluate(episodes=64, env=sparse)
    keys = ("env_steps", "time_s", "episode_return_mean", "soups_mean")
    history = [{k: h.get(k) for k in keys} for h in res.history]
    result = {"wall_s": wall, "greedy": greedy, "sampled": sampled, "history": history}
    with open(out, "w") as f:
        json.dump(result, f, indent=1)
    # episode_return is the team's sum: 40 per soup; JaxMARL reports one cook's 20 per soup
    for name, r in (("greedy", greedy), ("sampled", sampled)):
        print(f"{name}: return per cook {r['episode_return_mean'] / 2:.2f}, soups {r['soups_mean']:.2f}")
    print(f"trained {res.metrics.get('env_steps')} env steps in {wall:.0f} s")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="side", required=True)
    j = sub.add_parser("jaxmarl", help="JaxMARL's baselines/IPPO/ippo_ff_overcooked.py")
    j.add_argument("--src", required=True, help="a JaxMARL checkout (holds baselines/IPPO)")
    j.add_argument("--steps", type=float, default=JAXMARL_TOTAL_STEPS, help="TOTAL_TIMESTEPS")
    m = sub.add_parser("marl", help="marl's IPPO at JaxMARL's hyperparameters")
    m.add_argument("--iterations", type=int, default=489, help="rollouts of 2048 env steps (489: 1M)")
    m.add_argument("--seed", type=int, default=0)
    m.add_argument("--out", default="overcooked_ippo.json")
    m.add_argument("--image", action="store_true", help="the uint8 grids through the CNN, not flat_obs=True")
    a = p.parse_args()
    if a.side == "jaxmarl":
        run_jaxmarl(a.src, a.steps)
    else:
        run_marl(a.iterations, a.seed, a.out, a.image)


if __name__ == "__main__":
    main()
