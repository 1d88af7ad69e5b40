"""VDA2C and VDPPO (algos/vd_actor_critic.py): the mixing on hand-computed values (VDN: the sum; QMIX: a
hand-set mixer, and dV_tot/dV_i >= 0 by autograd), the team advantage of a hand-computed 3-step example
through the learner's ``prepare``, the loss on the mixed value, learning on the cue-matching toy env
(beyond random play) and exact resume."""

from types import SimpleNamespace

import numpy as np
import pytest
import torch

import marl
from marl.algos.networks.mixers import QMixer
from marl.algos.policy_gradient import masked_mean
from marl.algos.vd_actor_critic import VDLayout, VDLearner, VDModule, mix_values, vd_loss_terms
from marl.engine.on_policy import gae
from test_exact_resume import _one_go_vs_resumed
from run_helpers import ppo_module
from test_on_policy_core import CFG, Bare, FeatureCritic, random_rollout
from toy_envs import MatchEnv


# ---------------------------------------------------------------- helpers
VD_CFG = dict(CFG, actor_loss="a2c", clip=0.2, value_clip=0.0, huber_delta=0.0, entropy_coef=0.0, value_loss_coef=1.0)


class BareVD(VDLearner, Bare):
    """:class:`VDLearner`'s data path without RLlib's setup (:class:`Bare`), with a team reward of its own."""

    def __init__(self, modules, team_reward="sum", **cfg):
        super().__init__(modules, **cfg)
        self.test_run = SimpleNamespace(family=VDLayout(team_reward))

    run = property(lambda self: self.test_run)


class SumCritic(FeatureCritic):
    """Per-agent values are the first feature of the critic input; ``V_tot`` is their sum (VDN)."""

    n_agents = 2

    def mix(self, values, state):
        return mix_values(values, state, None)


def two_agent_sequences(truncated_at_1=True):
    """Rows (env copy 0, agent 0) and (env copy 0, agent 1) of 3 steps: V_1 = [0.5, 1, -1, 2], V_2 = [0, 0.5, 0.5, -1],
    final values (step 1) 4 and 1; rewards [1, 0, 2] and [0, 1, 0]."""
    trunc = torch.tensor([[False, truncated_at_1, False]] * 2)
    return {
        "obs": torch.zeros(2, 4, 2),
        "critic_in": torch.tensor([[0.5, 1.0, -1.0, 2.0], [0.0, 0.5, 0.5, -1.0]]).unsqueeze(-1),
        "final_critic_in": torch.tensor([[0.0, 4.0, 0.0], [0.0, 1.0, 0.0]]).unsqueeze(-1),
        "mix_state": torch.zeros(2, 4, 1),
        "final_mix_state": torch.zeros(2, 3, 1),
        "rewards": torch.tensor([[1.0, 0.0, 2.0], [0.0, 1.0, 0.0]]),
        "actions": torch.zeros(2, 3),
        "logp": torch.zeros(2, 3),
        "alive": torch.ones(2, 3, dtype=torch.bool),
        "terminated": torch.zeros(2, 3, dtype=torch.bool),
        "truncated": trunc,
    }


def vd_module(mixer="qmix", n_agents=3, obs_dim=4, state_dim=6):
    """A small learner-side :class:`VDModule` (hidden 16): PPO's test module's networks, its critic on the
    observation, and a mixer of ``n_agents`` values."""
    base = ppo_module(obs_dim=obs_dim, critic_dim=obs_dim, n_agents=n_agents)
    mix = dict(n_agents=n_agents, state_dim=state_dim, mixer=mixer, mixing_embed=8, hypernet_layers=1, hypernet_embed=8)
    return VDModule(
        observation_space=base.observation_space,
        action_space=base.action_space,
        model_config={**base.model_config, **mix},
    )


# ---------------------------------------------------------------- mixing
def test_vdn_team_value_is_the_sum():
    v = torch.tensor([[1.0, -2.0, 0.5], [0.25, 0.25, 3.0]])
    assert torch.equal(mix_values(v, torch.zeros(2, 4), None), torch.tensor([-0.5, 3.5]))


def test_qmix_team_value_of_a_hand_set_mixer():
    """Weights 0, biases set: |W1| = [2, 3] (hyper_w1 bias [-2, 3]), b1 = 0.5, |W2| = 4, V(s) = 1, so
    V_tot = 4 elu(2 V_1 + 3 V_2 + 0.5) + 1: (1, -1) -> 4 (e^-0.5 - 1) + 1 = -0.573877; (0.5, 0.25) -> 10."""
    mixer = QMixer(n_agents=2, state_dim=3, embed=1, hypernet_layers=1)
    with torch.no_grad():
        for p in mixer.parameters():
            p.zero_()
        mixer.hyper_w1.bias.copy_(torch.tensor([-2.0, 3.0]))
        mixer.hyper_b1.bias.fill_(0.5)
        mixer.hyper_w2.bias.fill_(-4.0)
        mixer.value[2].bias.fill_(1.0)
    v_tot = mix_values(torch.tensor([[1.0, -1.0], [0.5, 0.25]]), torch.randn(2, 3), mixer)
    assert torch.allclose(v_tot, torch.tensor([4 * (np.exp(-0.5) - 1) + 1, 10.0], dtype=torch.float32), atol=1e-5)


@pytest.mark.parametrize("layers", [1, 2])
def test_qmix_team_value_is_monotonic_in_every_agent_value(layers):
    for seed in range(5):
        torch.manual_seed(seed)
        mixer = QMixer(n_agents=4, state_dim=5, embed=8, hypernet_layers=layers, hypernet_embed=16)
        v = (3 * torch.randn(256, 4)).requires_grad_(True)
        (grad,) = torch.autograd.grad(mix_values(v, torch.randn(256, 5), mixer).sum(), v)
        assert (grad >= 0).all() and (grad > 0).any()


# ---------------------------------------------------------------- the team advantage
def test_team_advantage_by_hand_on_three_steps():
    """V_tot = V_1 + V_2 = [0.5, 1.5, -0.5, 1.0]; team reward (sum) [1, 1, 2]; truncated after step 1 with final
    V_tot 4 + 1 = 5; gamma 0.9, lambda 0.8. Deltas: 1 + 1.35 - 0.5 = 1.85, 1 + 4.5 - 1.5 = 4.0, 2 + 0.9 + 0.5 = 3.4;
    A = [1.85 + 0.72 * 4.0, 4.0, 3.4] = [4.73, 4.0, 3.4] (the recursion stops at the truncation); R = A + V_tot."""
    out = BareVD({"m": SumCritic()}, **VD_CFG).prepare("m", two_agent_sequences())
    adv, ret = torch.tensor([4.73, 4.0, 3.4]), torch.tensor([5.23, 5.5, 2.9])
    for row in range(2):  # both agents train on the team's advantage, return and V_tot
        assert torch.allclose(out["advantages"][row], adv, atol=1e-6)
        assert torch.allclose(out["returns"][row], ret, atol=1e-6)
        assert torch.equal(out["values_old"][row], torch.tensor([0.5, 1.5, -0.5]))
        assert torch.equal(out["others"][row], torch.tensor([[0.5, 0.0], [1.0, 0.5], [-1.0, 0.5]]))
        assert torch.equal(out["agent_index"][row], torch.full((3,), row))
    shared = BareVD({"m": SumCritic()}, team_reward="mean", **VD_CFG).prepare("m", two_agent_sequences(False))
    v_tot, r = torch.tensor([0.5, 1.5, -0.5, 1.0]), torch.tensor([0.5, 0.5, 1.0])  # mean reward of a shared-reward env
    expect = gae(r, v_tot[:-1], v_tot[1:], torch.zeros(3, dtype=torch.bool), 0.9, 0.8)
    assert torch.allclose(shared["advantages"][1], expect, atol=1e-6)


@pytest.mark.parametrize("actor_loss", ["a2c", "ppo"])
def test_loss_mixes_the_rows_own_value_with_the_others(actor_loss):
    """Before any step the loss's V_tot equals values_old (the row's own V_i is the one in ``others``): the value
    loss is 0.5 mean (R - V_tot)^2; a2c's policy loss is -mean(log pi A); the value gradient reaches the mixer."""
    torch.manual_seed(0)
    m = vd_module("qmix", n_agents=3, obs_dim=4, state_dim=6)
    seq = {k: torch.as_tensor(v) for k, v in _sequences(random_rollout(T=6, B=2, N=3, S=6, D=4)).items()}
    learner = BareVD({"shared": m}, **VD_CFG)
    rows = learner.training_rows("shared", learner.prepare("shared", seq))
    fwd = m._forward_train({"obs": rows["obs"], "critic_in": rows["critic_in"]})
    rows = {k: v for k, v in rows.items() if k not in ("obs", "critic_in")}
    loss, parts = vd_loss_terms(m, fwd, rows, actor_loss, False, 0.2, 0.0, 0.0, 0.0, 1.0)
    err = rows["returns"] - rows["values_old"]
    assert parts["value_loss"].item() == pytest.approx(float((0.5 * err**2).mean()), rel=1e-5)
    logp, _ = m.log_prob_entropy(fwd["dist_in"], rows["actions"], None)
    if actor_loss == "a2c":
        a2c = -masked_mean(logp * rows["advantages"], rows["active"])
        assert parts["policy_loss"].item() == pytest.approx(a2c.item(), rel=1e-6)
    loss.backward()
    assert m.mixer is not None and any(p.grad is not None and p.grad.abs().sum() > 0 for p in m.mixer.parameters())


def _sequences(rollout):
    from marl.algos.vd_actor_critic import VDActorCritic

    trainer = SimpleNamespace(cfg=SimpleNamespace(critic_kind="obs"))
    return VDActorCritic.sequences(trainer, rollout).policy_batches["shared"]


def test_sequences_carry_each_rows_env_state():
    rollout = random_rollout(T=6, B=2, N=3, S=6, D=4)
    seq = _sequences(rollout)
    assert seq["mix_state"].shape == (6, 7, 6) and seq["final_mix_state"].shape == (6, 6, 6)
    for row in range(6):  # rows are (env copy, agent): copy row // 3
        np.testing.assert_array_equal(seq["mix_state"][row], rollout["state"][:, row // 3].numpy())
        np.testing.assert_array_equal(seq["final_mix_state"][row], rollout["final_state"][:, row // 3].numpy())


# ---------------------------------------------------------------- learning and resume
@pytest.mark.parametrize("algo, mixer", [("vda2c", "vdn"), ("vdppo", "qmix")])
def test_vd_actor_critic_solves_cue_matching(ray_session, run_dir, algo, mixer):
    """MatchEnv is cooperative without a shared reward: the team reward is the sum of the agents' matches. Random
    play earns 5 steps * 3 agents / 4 actions = 3.75 per episode (std 1.7), optimal 15; the bar is 12. Greedy return
    after 30 iterations, seeds 0/1/2: vda2c-vdn 15.0/15.0/12.3, vdppo-qmix 15.0/15.0/15.0 (seed 0 runs here)."""
    res = MatchEnv(num_envs=16, N=3, A=4).fit(
        algo,
        stop={"iterations": 30},
        log_dir=run_dir,
        progress=False,
        rollout_length=10,
        eval_episodes=32,
        seed=0,
        mixer=mixer,
    )
    assert res.eval["episode_return_mean"] >= 12.0, res.eval


def test_vda2c_resume_is_exact(ray_session, run_dir):
    _one_go_vs_resumed(
        lambda: marl.make_env("mpe", "simple_spread", num_envs=3, max_cycles=7), "vda2c", 4, run_dir, rollout_length=5
    )


def test_recurrent_vdppo_resume_is_exact(ray_session, run_dir):
    _one_go_vs_resumed(
        lambda: marl.make_env("stag_hunter", num_envs=3, episode_limit=7),
        "vdppo",
        4,
        run_dir,
        rollout_length=5,
        epochs=2,
        num_minibatches=2,
        recurrent=True,
        chunk_length=5,
    )
