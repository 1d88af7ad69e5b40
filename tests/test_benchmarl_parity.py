"""One gradient step of marl's MADDPG and IDDPG against BenchMARL's (torchrl's ``DDPGLoss``) on the same weights and
the same batch, in the suite ``benchmarl_vmas``'s form (one shared critic value per sample without the agent index,
the actor loss on every agent's current action, actors without the agent index).

BenchMARL's layout: its MLPs are ``params.{0,2,4}`` (``Linear, Tanh, Linear, Tanh, Linear``, as marl's ``net.{0,2,4}``);
a centralised critic reads ``[o_1 a_1 ... o_N a_N]`` where marl's reads ``[o_1 .. o_N a_1 .. a_N]``, so its first
layer's columns are permuted; its target actions come from the online actor (``DDPGLoss(delay_actor=False)``), so
marl's target actor gets the actor's weights. The reference below writes those losses out by hand; with BenchMARL's
environment (``$MARL_BENCHMARL_PYTHON``, docs/benchmarks.md) the last test compares with BenchMARL itself through
``benchmarks/benchmarl_train_child.py --one-step``.
"""

import subprocess
import types

import gymnasium as gym
import numpy as np
import pytest
import torch

from marl.algos.actor_critic_parts import JOINT
from marl.algos.ddpg import DDPGModule, ddpg_losses
from marl.benchmarks import benchmarl_train_child
from marl.benchmarks.benchmarl_anchor import ENV_VAR, benchmarl_python

CHILD = benchmarl_train_child.__file__  # runs in BenchMARL's environment
GAMMA = 0.99
LAYERS = (0, 2, 4)
FIRST = {loss: f"{loss}/{net}_network_params.module.0.mlp.params.0.weight" for loss, net in (("loss_actor", "actor"), ("loss_value", "value"))}  # fmt: skip


def layer_key(name: str, sep: str) -> str:
    """BenchMARL's ``<net>_network_params.module.0.mlp.params.<j>.<weight|bias>`` -> ``<net><sep><j>.<...>``."""
    return name.split("_network_params")[0] + sep + name.rsplit("params.", 1)[1]


def critic_columns(n: int, d: int, k: int, centralised: bool) -> list:
    """BenchMARL's critic input column of each of marl's critic input columns."""
    if not centralised:
        return list(range(d + k))
    return [i * (d + k) + j for i in range(n) for j in range(d)] + [
        i * (d + k) + d + j for i in range(n) for j in range(k)
    ]


def marl_step(dump: dict, algo: str):
    """marl's losses and first-layer gradients (in BenchMARL's column order) on a BenchMARL-layout ``dump``."""
    state, (b, n, d), k = dump["state"], dump["obs"].shape, dump["actions"].shape[-1]
    centralised = algo == "maddpg"
    # not torchrl's other buffers (the value estimator's gamma)
    weight = {layer_key(name, "/"): v for name, v in state.items() if "mlp.params." in name}
    hidden, critic_in = weight["actor/0.weight"].shape[0], weight["value/0.weight"].shape[1]
    mod = DDPGModule(
        observation_space=gym.spaces.Box(-np.inf, np.inf, (d,)),
        action_space=gym.spaces.Box(-1.0, 1.0, (k,)),
        inference_only=False,
        model_config=dict(obs_dim=d, hidden=hidden, layers=2, activation="tanh", critic_dim=critic_in, twin=False),
    )
    cols = critic_columns(n, d, k, centralised)
    with torch.no_grad():
        for net, src in ((mod.actor, "actor"), (mod.actor_target, "actor"), (mod.critics[0], "value"),
                         (mod.critic_targets[0], "target_value")):  # fmt: skip
            for j in LAYERS:
                w = weight[f"{src}/{j}.weight"]
                net.net[j].weight.copy_(w[:, cols] if j == 0 and src != "actor" else w)
                net.net[j].bias.copy_(weight[f"{src}/{j}.bias"])
    batch = {
        "shared": {"obs": dump["obs"], "actions": dump["actions"], "rewards": dump["rewards"],
                   "alive": torch.ones(b, n, dtype=torch.bool), "next_obs": dump["next_obs"]},
        JOINT: {"state": torch.zeros(b, 0), "next_state": torch.zeros(b, 0), "terminated": dump["terminated"]},
    }  # fmt: skip
    cfg = types.SimpleNamespace(
        critic="joint_obs" if centralised else "obs", critic_agent_id=False, policy_gradient="joint" if centralised else "own",
        gamma=GAMMA, target_noise=0.0, target_noise_clip=0.5,
    )  # fmt: skip
    total, metrics = ddpg_losses({"shared": mod}, batch, cfg, True)
    total.backward()
    critic_grad = torch.zeros(hidden, critic_in)
    critic_grad[:, cols] = mod.critics[0].net[0].weight.grad
    losses = {
        "loss_value": float(metrics["shared"]["critic_loss"]),
        "loss_actor": float(metrics["shared"]["actor_loss"]),
    }
    return losses, {"loss_actor": mod.actor.net[0].weight.grad, "loss_value": critic_grad}


def mlp(x, w: dict, prefix: str):
    for j in LAYERS:
        x = torch.nn.functional.linear(x, w[f"{prefix}.{j}.weight"], w[f"{prefix}.{j}.bias"])
        x = torch.tanh(x) if j < 4 else x
    return x


def reference_dump(algo: str, n: int = 3, d: int = 5, k: int = 2, b: int = 16, hidden: int = 8) -> dict:
    """BenchMARL's DDPG losses written out by hand, in its layout: ``Q(x, a)`` of a centralised critic reads
    ``[o_1 a_1 ... o_N a_N]`` and gives every agent that one value; ``y = r_i + gamma (1 - terminated) Q'(x',
    mu(o'))`` with the online actor ``mu``; ``loss_value = mean_(b, i) (Q - y)^2``; ``loss_actor = -mean_(b, i)
    Q(x, mu(o_1) .. mu(o_N))``."""
    g = torch.Generator().manual_seed(5)
    critic_in = n * (d + k) if algo == "maddpg" else d + k
    state = {}
    for prefix, fan_in, out in (("actor", d, k), ("value", critic_in, 1), ("target_value", critic_in, 1)):
        for j, (i, o) in zip(LAYERS, ((fan_in, hidden), (hidden, hidden), (hidden, out))):
            state[f"{prefix}_network_params.module.0.mlp.params.{j}.weight"] = torch.randn(o, i, generator=g) * 0.5
            state[f"{prefix}_network_params.module.0.mlp.params.{j}.bias"] = torch.randn(o, generator=g) * 0.1
    w = {layer_key(name, "."): v.clone().requires_grad_() for name, v in state.items()}
    obs, next_obs = torch.randn(b, n, d, generator=g), torch.randn(b, n, d, generator=g)
    actions, rewards = torch.rand(b, n, k, generator=g) * 2 - 1, torch.randn(b, n, generator=g)
    terminated = torch.arange(b) < 4

    def q(o, a, prefix, weights=w):  # [B, N]: per agent, or the centralised value given to every agent
        x = torch.cat([o, a], -1)
        if algo == "maddpg":
            return mlp(x.flatten(1), weights, prefix).expand(b, n)
        return mlp(x, weights, prefix).squeeze(-1)

    with torch.no_grad():
        next_q = q(next_obs, torch.tanh(mlp(next_obs, w, "actor")), "target_value")
    y = rewards + GAMMA * (~terminated).float().unsqueeze(-1) * next_q
    loss_value = ((q(obs, actions, "value") - y) ** 2).mean()
    frozen = {key: v.detach() for key, v in w.items() if key.startswith("value")}
    loss_actor = -q(obs, torch.tanh(mlp(obs, w, "actor")), "value", frozen).mean()
    grads = {
        FIRST["loss_actor"]: torch.autograd.grad(loss_actor, w["actor.0.weight"])[0],
        FIRST["loss_value"]: torch.autograd.grad(loss_value, w["value.0.weight"])[0],
    }
    dump = dict(obs=obs, next_obs=next_obs, actions=actions, rewards=rewards, terminated=terminated, state=state)
    losses = {"loss_value": float(loss_value.detach()), "loss_actor": float(loss_actor.detach())}
    return {**dump, "losses": losses, "grads": grads}


def assert_same_step(dump: dict, algo: str, rtol: float) -> None:
    losses, grads = marl_step(dump, algo)
    for name, want in dump["losses"].items():
        assert losses[name] == pytest.approx(want, rel=rtol, abs=1e-8), name
    for name in ("loss_actor", "loss_value"):
        # the first layers' gradients: an error anywhere in either network shows there
        want = dump["grads"][FIRST[name]]
        assert (grads[name] - want).norm() <= rtol * want.norm(), name


@pytest.mark.parametrize("algo", ["maddpg", "iddpg"])
def test_one_step_equals_benchmarls_losses_written_by_hand(algo):
    assert_same_step(reference_dump(algo), algo, rtol=1e-5)


def test_the_comparison_sees_other_rewards():
    dump = reference_dump("maddpg")
    losses, _ = marl_step({**dump, "rewards": dump["rewards"] * 1.01}, "maddpg")
    assert losses["loss_value"] != pytest.approx(dump["losses"]["loss_value"], rel=1e-5)


@pytest.mark.skipif(benchmarl_python(None) is None, reason=f"BenchMARL's environment is not set up (${ENV_VAR})")
@pytest.mark.parametrize("algo", ["maddpg", "iddpg"])
def test_one_step_equals_benchmarl_itself(algo, tmp_path):
    out = tmp_path / "step.pt"
    argv = [benchmarl_python(None), CHILD, "--algo", algo, "--task", "navigation", "--one-step", str(out)]
    subprocess.run(argv, check=True, capture_output=True)
    assert_same_step(torch.load(out), algo, rtol=1e-5)
