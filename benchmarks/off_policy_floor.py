"""The eager-PyTorch floor of an off-policy gradient step: MADDPG's step in BenchMARL's form, written in plain
PyTorch with no RLlib, no marl and no BenchMARL, timed on one thread.

What ``marl bench vs-benchmarl --algo maddpg`` times per gradient step, minus every library: a shared actor
``mu(o)`` on the ``B x N`` agent rows, a shared centralised critic ``Q(o_1..o_N, a_1..a_N)`` run once per sample
(BenchMARL's shared critic; marl's ``critic_agent_id: false``), the TD target from the target actor and critic
(Lowe et al. 2017, arXiv:1706.02275, Eq. 6), the actor loss on every agent's current action
(``policy_gradient: joint``) through the critic with detached parameters, one backward pass, each network's
gradient clipped to norm 5, fused Adam, Polyak averaging of both targets (``torch._foreach_lerp_``). A library's
step costs at least this much on the same machine: the difference is its overhead. Sizes default to VMAS
balance's in that benchmark (4 agents, 16-d observations, 2-d actions, 128 transitions, 2x256 Tanh MLPs).

    python -m marl.benchmarks.off_policy_floor [--steps 500] [--agents 4] [--obs-dim 16] ... [--compile]
"""

from __future__ import annotations

import argparse
import copy
import time
from typing import Dict, Optional, Sequence


def _mlp(i: int, o: int, h: int):
    """BenchMARL's MLP: ``i -> h -> h -> o``, Tanh between."""
    import torch

    return torch.nn.Sequential(
        torch.nn.Linear(i, h), torch.nn.Tanh(), torch.nn.Linear(h, h), torch.nn.Tanh(), torch.nn.Linear(h, o)
    )


def floor_ms_per_step(
    steps: int = 500,
    warmup: int = 50,
    agents: int = 4,
    obs_dim: int = 16,
    action_dim: int = 2,
    batch: int = 128,
    hidden: int = 256,
    compile: bool = False,
) -> Dict[str, float]:
    """Milliseconds per gradient step of the plain-PyTorch MADDPG step above (one thread), after ``warmup``
    untimed steps (with ``compile``, the losses go through ``torch.compile`` and the warm-up compiles them);
    returns ``{"ms_per_step", "steps", "compile", ...sizes}``."""
    import torch

    torch.set_num_threads(1)
    torch.manual_seed(0)
    B, N, D, K, H = batch, agents, obs_dim, action_dim, hidden
    actor, critic = _mlp(D, K, H), _mlp(N * (D + K), 1, H)
    actor_t, critic_t = copy.deepcopy(actor), copy.deepcopy(critic)
    opts = [torch.optim.Adam(n.parameters(), lr=5e-5, eps=1e-6, fused=True) for n in (actor, critic)]
    obs, next_obs, act, rew = torch.randn(B, N, D), torch.randn(B, N, D), torch.randn(B, N, K), torch.randn(B, N)
    frozen = {k: v.detach() for k, v in critic.named_parameters()}

    def losses() -> torch.Tensor:
        with torch.no_grad():
            q_next = critic_t(torch.cat([next_obs.flatten(1), torch.tanh(actor_t(next_obs)).flatten(1)], -1))
            y = rew + 0.99 * q_next  # [B, N]: one Q per sample, broadcast over the agents' rewards
        critic_loss = ((critic(torch.cat([obs.flatten(1), act.flatten(1)], -1)) - y) ** 2).mean()
        x = torch.cat([obs.flatten(1), torch.tanh(actor(obs)).flatten(1)], -1)
        actor_loss = -torch.func.functional_call(critic, frozen, (x,)).mean()
        return critic_loss + actor_loss

    loss_fn = torch.compile(losses) if compile else losses  # inductor: forward and backward of the losses

    def step() -> None:
        loss = loss_fn()
        for o in opts:
            o.zero_grad(set_to_none=True)
        loss.backward()
        for net, o in zip((actor, critic), opts):
            torch.nn.utils.clip_grad_norm_(net.parameters(), 5.0)
            o.step()
        with torch.no_grad():
            for target, online in ((actor_t, actor), (critic_t, critic)):
                torch._foreach_lerp_(list(target.parameters()), list(online.parameters()), 0.005)

    for _ in range(warmup):
        step()
    t0 = time.perf_counter()
    for _ in range(steps):
        step()
    ms = 1000 * (time.perf_counter() - t0) / steps
    return {
        "ms_per_step": ms,
        "steps": steps,
        "compile": compile,
        "agents": N,
        "obs_dim": D,
        "action_dim": K,
        "batch": B,
        "hidden": H,
    }


def main(argv: Optional[Sequence[str]] = None) -> Dict[str, float]:
    p = argparse.ArgumentParser(prog="python -m marl.benchmarks.off_policy_floor", description=__doc__.split("\n")[0])
    p.add_argument("--steps", type=int, default=500, help="timed gradient steps (default 500)")
    p.add_argument("--warmup", type=int, default=50, help="untimed steps first (default 50)")
    p.add_argument("--agents", type=int, default=4)
    p.add_argument("--obs-dim", type=int, default=16)
    p.add_argument("--action-dim", type=int, default=2)
    p.add_argument("--batch", type=int, default=128, help="transitions per gradient step")
    p.add_argument("--hidden", type=int, default=256)
    p.add_argument("--compile", action="store_true", help="the losses through torch.compile (inductor)")
    a = p.parse_args(argv)
    out = floor_ms_per_step(a.steps, a.warmup, a.agents, a.obs_dim, a.action_dim, a.batch, a.hidden, a.compile)
    how = "torch.compile" if a.compile else "eager"
    print(f"plain-PyTorch MADDPG gradient step (BenchMARL's form, one thread, {how}): {out['ms_per_step']:.2f} ms")
    print("sizes: " + ", ".join(f"{k}={v}" for k, v in out.items() if k not in ("ms_per_step", "compile")))
    return out


if __name__ == "__main__":
    main()
