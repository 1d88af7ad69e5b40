"""The two forms of the centralised critic and policy gradient of MADDPG and MASAC (``critic_agent_id``,
``policy_gradient``; algos/actor_critic_parts.py): a shared critic without the agent index reads one row per sample
and gives the losses and gradients of identical per-agent rows; the joint policy gradient reaches every agent's
current action (hand-computed), the other modules' not at all; FACMAC refuses ``own``; both forms learn a task
random play cannot solve."""

from types import SimpleNamespace

import gymnasium as gym
import numpy as np
import pytest
import torch

from marl.algos.actor_critic_parts import actor_critic_inputs, critic_inputs, frozen
from marl.algos.ddpg import ddpg_losses
from marl.algos.policy_gradient import masked_mean
from marl.algos.sac import sac_losses
from marl.config import load_config
from marl.errors import MarlError
from test_ddpg import LEARN, _random_batch, linear, module
from test_ddpg import cfg as ddpg_cfg
from test_sac import SAC_LEARN, sac_cfg
from test_sac import module as sac_module
from toy_envs import TargetEnv

BENCHMARL_FORM = {"critic_agent_id": False, "policy_gradient": "joint"}
BOX2 = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)


# ---------------------------------------------------------------- one row per sample
def test_shared_critic_without_agent_index_reads_one_row_per_sample():
    """Two agents of one module, 1-d observations and actions: without ``own`` every agent's input is the same
    (observations, then actions), so one row; with ``own`` agent i's row still replaces its own action."""
    obs = {"m": torch.tensor([[[1.0], [2.0]]])}
    stored, own = {"m": torch.tensor([[[10.0], [20.0]]])}, torch.tensor([[[-1.0], [-2.0]]])
    assert critic_inputs("joint_obs", obs, None, stored, "m", agent_id=False).tolist() == [[[1, 2, 10, 20]]]
    with_index = critic_inputs("joint_obs", obs, None, stored, "m")
    assert with_index.tolist() == [[[1, 2, 10, 20, 1, 0], [1, 2, 10, 20, 0, 1]]]
    rows = critic_inputs("joint_obs", obs, None, stored, "m", own, agent_id=False)
    assert rows.tolist() == [[[1, 2, -1, 20], [1, 2, 10, -2]]]
    state = torch.tensor([[7.0, 8.0]])
    assert critic_inputs("state", obs, state, stored, "m", agent_id=False).tolist() == [[[7, 8, 10, 20]]]


def _index_blind_twin(algo, critic_dim):
    """A module with the agent index in its critics' input (``critic_dim + 2`` for 2 agents) and one without,
    with the same weights and zero weight on the index columns: the same Q for every agent."""
    torch.manual_seed(0)
    make = sac_module if algo == "masac" else module
    blind, indexed = make(3, critic_dim, BOX2), make(3, critic_dim + 2, BOX2)
    indexed.load_state_dict({k: v for k, v in blind.state_dict().items() if "critic" not in k}, strict=False)
    pairs = [(blind.critics, indexed.critics), (blind.critic_targets, indexed.critic_targets)]
    for source, dest in pairs:
        for s, d in zip(source.modules(), dest.modules()):
            if isinstance(s, torch.nn.Linear):
                with torch.no_grad():
                    d.weight.zero_()
                    d.weight[:, : s.weight.shape[1]].copy_(s.weight)
                    d.bias.copy_(s.bias)
    return blind, indexed


@pytest.mark.parametrize("algo", ["maddpg", "masac"])
@pytest.mark.parametrize("gradient", ["own", "joint"])
def test_one_row_critic_gives_the_losses_and_gradients_of_identical_agent_rows(algo, gradient):
    """MADDPG and MASAC on a joint_obs critic: the critic without the agent index (one row per sample, broadcast
    over agents) and the critic with it whose index weights are zero (N identical rows) give the same loss,
    metrics and gradients of every shared parameter (actor, critics, temperature)."""
    dim = 2 * 3 + 2 * 2  # two agents' 3-d observations and 2-d actions
    blind, indexed = _index_blind_twin(algo, dim)
    losses, config = (sac_losses, sac_cfg) if algo == "masac" else (ddpg_losses, ddpg_cfg)
    out = {}
    for name, mod, agent_id in (("blind", blind, False), ("indexed", indexed, True)):
        c = config(critic="joint_obs", critic_agent_id=agent_id, policy_gradient=gradient)
        torch.manual_seed(1)
        batch = _random_batch()
        torch.manual_seed(2)
        loss, metrics = losses({"shared": mod}, batch, c, True)
        loss.backward()
        out[name] = (loss.detach(), metrics["shared"], dict(mod.named_parameters()))
    assert out["blind"][0] == pytest.approx(float(out["indexed"][0]), rel=1e-5)
    for k, v in out["blind"][1].items():
        assert float(v) == pytest.approx(float(out["indexed"][1][k]), rel=1e-5, abs=1e-7), k
    for n, p in out["blind"][2].items():
        q = out["indexed"][2][n]
        if p.grad is None:
            assert q.grad is None, n
            continue
        g = q.grad[..., : p.grad.shape[-1]] if p.grad.dim() == 2 else q.grad  # the index columns aside
        torch.testing.assert_close(p.grad, g, rtol=1e-4, atol=1e-6, msg=n)


# ---------------------------------------------------------------- the joint policy gradient
def _linear_critic_gradient(gradient, agent_id):
    """Two agents, 1-d actions, a frozen linear critic Q = 3 a_1 + 5 a_2 (observations and index weighted 0):
    the gradient of the actor loss ``-mean_i Q_i`` with respect to the current actions (mu_1, mu_2)."""
    cfg = SimpleNamespace(critic="joint_obs", critic_agent_id=agent_id, policy_gradient=gradient)
    obs = {"m": torch.zeros(1, 2, 1)}
    stored = {"m": torch.tensor([[[0.7], [-0.4]]])}
    mu = torch.tensor([[[0.1], [0.2]]], requires_grad=True)
    critic = linear([0.0, 0.0, 3.0, 5.0] + ([0.0, 0.0] if agent_id else []), 0.0)
    x = actor_critic_inputs(cfg, obs, None, stored, {"m": mu}, "m")
    loss = -masked_mean(frozen(critic, x).squeeze(-1), torch.ones(1, 2, dtype=torch.bool))
    loss.backward()
    return mu.grad.flatten().tolist()


@pytest.mark.parametrize("agent_id", [True, False])
def test_joint_policy_gradient_reaches_every_agents_action(agent_id):
    """joint: every row holds both current actions, so d(-mean_i Q)/d mu = -(3, 5); own: agent i's row holds only
    its own current action (the other's stored, Lowe et al. 2017, Eq. 5), so each gets half: -(1.5, 2.5)."""
    assert _linear_critic_gradient("joint", agent_id) == pytest.approx([-3.0, -5.0])
    assert _linear_critic_gradient("own", agent_id) == pytest.approx([-1.5, -2.5])


def test_joint_policy_gradient_moves_only_the_modules_own_actors():
    """Two modules of one agent each (share: individual): module a's actor loss reads b's current action, detached."""
    cfg = SimpleNamespace(critic="joint_obs", critic_agent_id=False, policy_gradient="joint")
    obs = {"a": torch.zeros(1, 1, 1), "b": torch.zeros(1, 1, 1)}
    current = {m: torch.tensor([[[0.5]]], requires_grad=True) for m in ("a", "b")}
    x = actor_critic_inputs(cfg, obs, None, {m: torch.zeros(1, 1, 1) for m in obs}, current, "a")
    assert x.tolist() == [[[0, 0, 0.5, 0.5]]]
    (-frozen(linear([0.0, 0.0, 3.0, 5.0], 0.0), x).sum()).backward()
    assert current["a"].grad.item() == pytest.approx(-3.0) and current["b"].grad is None


# ---------------------------------------------------------------- config
def test_facmac_refuses_the_per_agent_policy_gradient_and_a_bad_form_names_the_choices():
    assert load_config("facmac", None).policy_gradient == "joint"
    with pytest.raises(MarlError, match="policy_gradient='own'.*FACMAC"):
        load_config("facmac", None, {"policy_gradient": "own"})
    with pytest.raises(MarlError, match="policy_gradient .team.*joint, own"):
        load_config("maddpg", None, {"policy_gradient": "team"})
    c = load_config("maddpg", None)
    assert (c.critic_agent_id, c.policy_gradient) == (True, "own")  # Lowe et al. 2017


# ---------------------------------------------------------------- learning
@pytest.mark.parametrize("algo", ["maddpg", "masac"])
def test_benchmarl_form_learns_to_hit_continuous_targets(tmp_path, algo):
    """TargetEnv (2 agents x 5 steps, reward -mean (a - c)^2): random play about -16.7 per episode, the best blind
    action -3.3; with one Q per sample and the joint policy gradient the greedy policy must beat -1."""
    learn = SAC_LEARN if algo == "masac" else LEARN
    iters = 40 if algo == "masac" else 80
    res = TargetEnv(num_envs=8).fit(
        algo, stop={"iterations": iters}, log_dir=str(tmp_path), critic="joint_obs", **BENCHMARL_FORM, **learn
    )
    assert res.eval["episode_return_mean"] > -1.0, res.eval
