"""VDA2C and VDPPO (algos/vd_actor_critic.py): the mixing on hand-computed values (VDN: the sum; QMIX: a
hand-set mixer, and dV_tot/dV_i >= 0 by autograd), the team advantage of a hand-computed 3-step example
through the learner's ``prepare``, the loss on the mixed value, learning on the cue-matching toy env
(beyond random play), exact resume, and RLlib PPO's adaptive KL penalty (hand-computed KL, the weight's update
rule, the unchanged loss with ``kl_coeff: 0``, the weight's update after a learner's epochs)."""

import math

from types import SimpleNamespace

import numpy as np
import pytest
import torch

import marl
from marl.algos.networks.mixers import QMixer
from marl.algos.policy_gradient import masked_mean
from marl.algos.ppo import ppo_loss_terms
from marl.algos.vd_actor_critic import (
    VDLayout,
    VDLearner,
    VDModule,
    adapt_kl_coeff,
    mix_values,
    old_policy_columns,
    vd_loss_terms,
)
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


def vd_module(mixer="qmix", n_agents=3, obs_dim=4, state_dim=6, kl_coeff=0.0, **net):
    """A small learner-side :class:`VDModule` (hidden 16): PPO's test module's networks (``net``: ``n_actions``,
    ``discrete``, ``recurrent``), its critic on the observation, a mixer of ``n_agents`` values and the KL
    penalty's weight ``kl_coeff``."""
    base = ppo_module(obs_dim=obs_dim, critic_dim=obs_dim, n_agents=n_agents, **net)
    mix = dict(n_agents=n_agents, state_dim=state_dim, mixer=mixer, mixing_embed=8, hypernet_layers=1, hypernet_embed=8)
    mix["kl_coeff"] = kl_coeff
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
    """With the KL penalty at a non-default weight (0.35): the second half starts from a weight the first half's
    updates adapted, which the checkpoint must restore (the final learner state and every logged kl_coeff match)."""
    whole = _one_go_vs_resumed(
        lambda: marl.make_env("stag_hunter", num_envs=3, episode_limit=7),
        "vdppo",
        4,
        run_dir,
        rollout_length=5,
        epochs=2,
        num_minibatches=2,
        recurrent=True,
        chunk_length=5,
        kl_coeff=0.35,
    )
    used = [h[k] for h in whole.history for k in h if k.endswith("/kl_coeff")]
    assert len(used) == 4 and used[0] == pytest.approx(0.35) and used[2] != pytest.approx(0.35), used


# ---------------------------------------------------------------- the adaptive KL penalty
PPO_PARAMS = ("ppo", False, 0.2, 0.0, 0.0, 0.01, 1.0)  # actor_loss, value_norm, clip, value_clip, huber, c_H, c_V


def two_rows(active=(True, True)):
    """Two rows of a 2-agent VDN module (one per agent of one env step), 2 actions: old logits (0, 0) and
    (ln 3, 0), new logits (ln 3, 0) and (0, 0); fwd_out and loss rows as :func:`vd_loss_terms` reads them."""
    ln3 = math.log(3.0)
    fwd = {"dist_in": torch.tensor([[ln3, 0.0], [0.0, 0.0]]), "values": torch.tensor([0.5, -0.25])}
    rows = {
        "actions": torch.tensor([0, 1]),
        "logp_old": torch.log(torch.tensor([0.5, 0.25])),
        "advantages": torch.tensor([1.0, -2.0]),
        "returns": torch.tensor([1.0, 1.0]),
        "values_old": torch.tensor([0.25, 0.25]),
        "others": torch.tensor([[0.5, -0.25], [0.5, -0.25]]),
        "agent_index": torch.tensor([0, 1]),
        "mix_state": torch.zeros(2, 1),
        "active": torch.tensor(active),
    }
    return fwd, rows, torch.tensor([[0.0, 0.0], [ln3, 0.0]])


ROW_KL = (0.5 * math.log(4 / 3), 0.75 * math.log(1.5) + 0.25 * math.log(0.5))  # KL(pi_old || pi) of two_rows()


@pytest.mark.parametrize("active, mean_kl", [((True, True), sum(ROW_KL) / 2), ((True, False), ROW_KL[0])])
def test_kl_penalty_by_hand_on_two_rows_of_two_actions(active, mean_kl):
    """Row 1: pi_old = (1/2, 1/2), pi = (3/4, 1/4): KL = 1/2 ln(2/3) + 1/2 ln 2 = 1/2 ln(4/3) = 0.143841. Row 2:
    pi_old = (3/4, 1/4), pi = (1/2, 1/2): KL = 3/4 ln(3/2) + 1/4 ln(1/2) = 0.130812. The loss grows by
    kl_coeff * the mean over active rows (both: 0.137327; only row 1: 0.143841), with kl_coeff 0.4."""
    m = vd_module("vdn", n_agents=2, obs_dim=2, state_dim=1, kl_coeff=0.4, n_actions=2)
    fwd, rows, dist_old = two_rows(active)
    plain, parts = vd_loss_terms(m, fwd, rows, *PPO_PARAMS)
    penalised, parts_kl = vd_loss_terms(m, fwd, {**rows, "dist_old": dist_old}, *PPO_PARAMS)
    assert penalised.item() - plain.item() == pytest.approx(0.4 * mean_kl, abs=1e-6)
    assert parts_kl.pop("kl_step").item() == pytest.approx(mean_kl, abs=1e-6)  # the value the weight adapts to
    assert parts_kl == parts  # the other logged parts are the clipped loss's, unchanged


def test_kl_penalty_of_a_gaussian_policy_by_hand():
    """One action dimension, log std -0.5 before and now: KL(N(0, s) || N(1, s)) = 1 / (2 s^2) = e / 2 = 1.359141;
    a second row with the same mean has KL 0; kl_coeff 0.2: the loss grows by 0.2 * e / 4."""
    m = vd_module("vdn", n_agents=2, obs_dim=2, state_dim=1, kl_coeff=0.2, n_actions=1, discrete=False)
    fwd, rows, _ = two_rows()
    fwd["dist_in"] = torch.tensor([[1.0], [0.0]])
    rows["actions"] = torch.tensor([[0.5], [0.0]])
    old = {"dist_old": torch.zeros(2, 1), "log_std_old": m.log_std.detach().expand(2, 1)}
    plain, _ = vd_loss_terms(m, fwd, rows, *PPO_PARAMS)
    penalised, _ = vd_loss_terms(m, fwd, {**rows, **old}, *PPO_PARAMS)
    assert penalised.item() - plain.item() == pytest.approx(0.2 * math.e / 4, rel=1e-5)


@pytest.mark.parametrize(
    "kl, expected",
    [(0.0201, 0.3), (0.05, 0.3), (0.02, 0.2), (0.01, 0.2), (0.005, 0.2), (0.0049, 0.1), (0.0, 0.1)],
)
def test_kl_coeff_update_rule(kl, expected):
    """RLlib PPO's rule with kl_target 0.01 from 0.2: x1.5 strictly above 0.02, x0.5 strictly below 0.005."""
    assert adapt_kl_coeff(0.2, kl, 0.01) == pytest.approx(expected, rel=1e-12)


def test_kl_coeff_zero_gives_exactly_the_loss_before():
    """Without the old policy's columns (what kl_coeff 0 trains on) the loss is PPO's loss on the mixed value,
    bit for bit; a learner with kl_coeff 0 adds no columns and leaves the weight alone."""
    m = vd_module("vdn", n_agents=2, obs_dim=2, state_dim=1, n_actions=2)
    fwd, rows, _ = two_rows()
    loss, _ = vd_loss_terms(m, fwd, rows, *PPO_PARAMS)
    own = rows["others"].scatter(-1, rows["agent_index"].unsqueeze(-1), fwd["values"].unsqueeze(-1))
    v_tot = mix_values(own, None, None)
    before, _ = ppo_loss_terms(m, {**fwd, "values": v_tot}, rows, *PPO_PARAMS[1:])
    assert torch.equal(loss, before)
    learner = SteppingVD({"m": m}, kl_coeff=0.0, kl_target=0.01, **VD_CFG)
    learner.run_epochs({"m": {"obs": torch.zeros(2, 2), "critic_in": torch.zeros(2, 2), **rows}})
    assert "dist_old" not in learner.steps[0]["m"] and m.kl_coeff.item() == 0.0
    assert ("m", "policy_loss") in learner.metrics.logged and ("m", "kl") not in learner.metrics.logged


class SteppingVD(BareVD):
    """:class:`BareVD` whose gradient step runs the learner's loss on each module's forward, then moves the
    actor's output bias of every module by ``shift`` (a stand-in for an optimiser step of known size)."""

    shift = 0.0

    def gradient_step(self, batch):
        self.steps.append(batch)
        for mid, b in batch.items():
            m = self.module[mid]
            self.compute_loss_for_module(module_id=mid, config=None, batch=b, fwd_out=m._forward_train(b))
            with torch.no_grad():
                bias = m.actor.head.net[-1].bias
                bias.add_(self.shift * torch.arange(bias.numel()))


@pytest.mark.parametrize("shift, kl_coeff_after", [(0.0, 0.1), (1.0, 0.3)])
def test_kl_coeff_adapts_once_after_the_epochs(shift, kl_coeff_after):
    """3 epochs x 2 minibatches from kl_coeff 0.2 (target 0.01). Without a parameter change every step's KL is 0:
    the weight halves once (0.1), not once per step. Shifting the logits by (0, 1, 2) after each step makes the
    mean KL over the 6 steps far above 2 * 0.01: the weight grows once, to 0.3. Logged: kl and the weight used."""
    torch.manual_seed(0)
    m = vd_module("vdn", n_agents=2, obs_dim=4, state_dim=6, kl_coeff=0.2)
    seq = {k: torch.as_tensor(v) for k, v in _sequences(random_rollout(T=6, B=2, N=2, S=6, D=4)).items()}
    learner = SteppingVD({"shared": m}, kl_coeff=0.2, kl_target=0.01, **dict(VD_CFG, epochs=3, num_minibatches=2))
    learner.shift = shift
    learner.run_epochs({"shared": learner.training_rows("shared", learner.prepare("shared", seq))})
    assert len(learner.steps) == 6 and "dist_old" in learner.steps[0]["shared"]
    assert m.kl_coeff.item() == pytest.approx(kl_coeff_after, rel=1e-6)  # a float32 buffer
    logged = learner.metrics.logged
    assert logged[("shared", "kl_coeff")] == pytest.approx(0.2, rel=1e-6)
    assert (logged[("shared", "kl")] == pytest.approx(0.0, abs=1e-6)) == (shift == 0.0)
    assert shift == 0.0 or logged[("shared", "kl")] > 0.02


def test_old_policy_columns_of_gru_chunks_and_gaussians():
    """GRU chunks [M, L]: the old policy's logits are [M, L, A], equal to the training forward's; a Gaussian
    policy's columns add its log std on every row."""
    torch.manual_seed(0)
    m = vd_module("vdn", n_agents=2, obs_dim=4, state_dim=6, n_actions=2, discrete=False, recurrent=True)
    rows = {
        "obs": torch.randn(3, 5, 4),
        "critic_in": torch.randn(3, 5, 4),
        "h0": torch.zeros(3, m.state_size),
        "starts": torch.zeros(3, 5, dtype=torch.bool),
        "active": torch.ones(3, 5, dtype=torch.bool),
    }
    cols = old_policy_columns(m, rows)
    assert cols["dist_old"].shape == (3, 5, 2) and cols["log_std_old"].shape == (3, 5, 2)
    assert torch.equal(cols["dist_old"].reshape(15, 2), m._forward_train(rows)["dist_in"].detach())
    assert torch.equal(cols["log_std_old"][2, 4], m.log_std.detach())
