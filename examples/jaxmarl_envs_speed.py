"""Raw env steps/s through marl and the return of uniformly random legal play, for the JaxMARL families.

usage: python examples/jaxmarl_envs_speed.py [--batch 1 64] [--steps 400] [family:scenario ...]
(default: overcooked:cramped_room hanabi:2p coin_game:coin_game storm:storm; MABrax, which needs brax:
mabrax:ant_4x2)

Per env and batch size ``B``: one warm-up step (XLA compiles the batched step there; its time is
printed apart), then ``--steps`` timed calls of ``env.step`` with random legal actions drawn from the
masks (continuous actions: uniform in the action space's box); env steps/s = ``B * steps / seconds`` (each of the ``B`` copies takes one step per call). The
random-play return is the mean, over the episodes that ended inside the timed steps, of the summed
per-step reward averaged over the agents of each group (one number per group); the episodes that began
before the timed steps miss the untimed warm-up step's reward.
"""

from __future__ import annotations

import argparse
import time

import torch

from marl.env import make_env

DEFAULT = ["overcooked:cramped_room", "hanabi:2p", "coin_game:coin_game", "storm:storm"]


def random_actions(env, s, gen):
    if any(av is None for av in s.avail_actions.values()):
        return env.random_actions(s, gen)  # a continuous group: uniform in its Box
    out = {}
    for g, av in s.avail_actions.items():
        out[g] = torch.multinomial(av.float().reshape(-1, av.shape[-1]), 1, generator=gen).reshape(av.shape[:-1])
    return out


def measure(name: str, B: int, steps: int) -> str:
    family, scenario = name.split(":")
    env = make_env(family, scenario, num_envs=B, seed=0)
    gen = torch.Generator().manual_seed(0)
    t0 = time.perf_counter()
    s = env.reset(seed=0)
    s = env.step(random_actions(env, s, gen))  # compiles
    compile_s = time.perf_counter() - t0
    ret = {g: torch.zeros(B) for g in s.reward}
    ended = {g: [] for g in s.reward}
    t0 = time.perf_counter()
    for _ in range(steps):
        s = env.step(random_actions(env, s, gen))
        for g, r in s.reward.items():
            ret[g] += r.mean(-1)
            ended[g] += ret[g][s.done].tolist()
            ret[g][s.done] = 0
    sps = B * steps / (time.perf_counter() - t0)
    returns = ", ".join(f"{g} {sum(v) / len(v):.3f} ({len(v)} ep)" if v else f"{g} - (0 ep)" for g, v in ended.items())
    return f"{name:26s} B={B:<4d} {sps:9.0f} env steps/s  compile {compile_s:5.1f}s  random return: {returns}"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("envs", nargs="*", default=DEFAULT)
    p.add_argument("--batch", type=int, nargs="+", default=[1, 64])
    p.add_argument("--steps", type=int, default=400)
    ns = p.parse_args()
    torch.set_num_threads(1)
    for name in ns.envs:
        for B in ns.batch:
            print(measure(name, B, ns.steps), flush=True)


if __name__ == "__main__":
    main()
