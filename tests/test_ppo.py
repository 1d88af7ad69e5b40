"""IPPO/MAPPO math on hand-computed values and properties (docs/algorithms/ppo.md). No Ray."""
import gymnasium as gym
import numpy as np
import pytest
import torch

from marl.algos.policy_gradient import ValueNorm, gae, masked_mean, next_values, normalize_advantages, ppo_losses
from marl.algos.ppo import PPOModule, critic_inputs


def test_value_norm_roundtrip_and_first_update_exact():
    vn = ValueNorm()
    x = torch.tensor([1.0, 2.0, 3.0, 10.0])
    vn.update(x)
    mean, var = vn.stats()
    assert mean.item() == pytest.approx(4.0, rel=1e-5)  # debiasing makes the first update exact
    assert var.item() == pytest.approx(float(((x - 4.0) ** 2).mean()), rel=1e-4)
    y = torch.randn(100) * 7 + 3
    assert torch.allclose(vn.denormalize(vn.normalize(y)), y, atol=1e-4)


def test_value_norm_converges_and_var_floor():
    torch.manual_seed(0)
    vn = ValueNorm(beta=0.99)
    for _ in range(2000):
        vn.update(torch.randn(256) * 3.0 + 5.0)
    mean, var = vn.stats()
    assert mean.item() == pytest.approx(5.0, abs=0.1)
    assert var.item() == pytest.approx(9.0, rel=0.05)
    const = ValueNorm()
    const.update(torch.full((10,), 2.0))
    assert const.stats()[1].item() >= 1e-2 * (1 - 1e-6)  # floor (float32)


def test_value_norm_mask_ignores_inactive():
    vn = ValueNorm()
    vn.update(torch.tensor([1.0, 1000.0]), mask=torch.tensor([True, False]))
    assert vn.stats()[0].item() == pytest.approx(1.0)


def test_gae_lambda_one_gamma_one_is_return_minus_value():
    r = torch.tensor([1.0, 2.0, 3.0])
    v = torch.tensor([0.5, 0.2, 0.1, 4.0])  # V_0..V_3 (V_3 bootstraps)
    done = torch.zeros(3, dtype=torch.bool)
    adv = gae(r, v[:-1], v[1:], done, gamma=1.0, lam=1.0)
    expected = torch.tensor([1 + 2 + 3 + 4.0 - 0.5, 2 + 3 + 4.0 - 0.2, 3 + 4.0 - 0.1])
    assert torch.allclose(adv, expected)


def test_gae_lambda_zero_is_td_error_and_hand_computed():
    r = torch.tensor([1.0, 0.0, 2.0])
    v = torch.tensor([0.5, 1.0, -1.0, 2.0])
    done = torch.zeros(3, dtype=torch.bool)
    g = 0.9
    assert torch.allclose(gae(r, v[:-1], v[1:], done, g, 0.0), r + g * v[1:] - v[:-1])
    lam = 0.8
    d = r + g * v[1:] - v[:-1]
    a2 = d[2]
    a1 = d[1] + g * lam * a2
    a0 = d[0] + g * lam * a1
    assert torch.allclose(gae(r, v[:-1], v[1:], done, g, lam), torch.stack([a0, a1, a2]))


def test_gae_stops_at_episode_end_and_truncation_bootstraps():
    r = torch.tensor([1.0, 1.0, 1.0, 1.0])
    v = torch.tensor([0.0, 0.0, 0.0, 0.0, 5.0])
    v_final = torch.tensor([0.0, 7.0, 0.0, 0.0])
    term = torch.tensor([False, False, False, False])
    trunc = torch.tensor([False, True, False, False])  # time limit after step 1
    nv = next_values(v, v_final, term, trunc)
    assert nv.tolist() == [0.0, 7.0, 0.0, 5.0]  # bootstraps from the final observation
    adv = gae(r, v[:-1], nv, term | trunc, 1.0, 1.0)
    assert adv.tolist() == [1.0 + 1.0 + 7.0, 1.0 + 7.0, 1.0 + 1.0 + 5.0, 1.0 + 5.0]
    term2 = torch.tensor([False, True, False, False])
    nv2 = next_values(v, v_final, term2, torch.zeros(4, dtype=torch.bool))
    assert nv2[1] == 0.0  # termination: no bootstrap


def test_advantage_normalisation_over_active_only():
    adv = torch.tensor([1.0, 3.0, 100.0])
    active = torch.tensor([True, True, False])
    out = normalize_advantages(adv, active)
    assert out[:2].mean().item() == pytest.approx(0.0, abs=1e-6)
    assert out[:2].std().item() == pytest.approx(1.0, abs=1e-3)


def _losses(logp, adv, values=None, values_old=None, targets=None, active=None, clip=0.2, value_clip=0.2):
    n = logp.shape[0]
    z = torch.zeros(n)
    return ppo_losses(logp, z, adv, z, z if values is None else values, z if values_old is None else values_old,
                      z if targets is None else targets, torch.ones(n, dtype=torch.bool) if active is None else active,
                      clip, value_clip, 10.0)


def test_ppo_clip_gradient_zero_outside_trust_region():
    # ratio = exp(logp - 0): 1.5 > 1.2 with A > 0, and 0.5 < 0.8 with A < 0 -> no gradient
    logp = torch.log(torch.tensor([1.5, 0.5, 1.1])).requires_grad_()
    adv = torch.tensor([1.0, -1.0, 1.0])
    _losses(logp, adv)["policy_loss"].backward()
    assert logp.grad[0] == 0 and logp.grad[1] == 0
    assert logp.grad[2] != 0  # inside the region the surrogate has gradient


def test_clipped_value_loss_equals_plain_inside_clip():
    v = torch.tensor([0.1, -0.05])
    v_old = torch.tensor([0.0, 0.0])
    tgt = torch.tensor([1.0, 2.0])
    clipped = _losses(torch.zeros(2), torch.zeros(2), v, v_old, tgt)["value_loss"]
    plain = _losses(torch.zeros(2), torch.zeros(2), v, v_old, tgt, value_clip=None)["value_loss"]
    assert clipped.item() == pytest.approx(plain.item())


def test_inactive_rows_give_zero_gradient():
    logp = torch.zeros(3, requires_grad=True)
    values = torch.zeros(3, requires_grad=True)
    out = _losses(logp, torch.tensor([1.0, 2.0, 3.0]), values, torch.zeros(3), torch.ones(3),
                  active=torch.tensor([True, False, True]))
    (out["policy_loss"] + out["value_loss"]).backward()
    assert logp.grad[1] == 0 and values.grad[1] == 0
    assert logp.grad[0] != 0 and values.grad[0] != 0


def _module(discrete=True, recurrent=False, obs_dim=4, n_actions=3):
    space = gym.spaces.Discrete(n_actions) if discrete else gym.spaces.Box(-1, 1, (n_actions,), np.float32)
    cfg = dict(obs_dim=obs_dim, critic_dim=6, n_actions=n_actions, discrete=discrete, hidden=16, layers=2,
               activation="relu", layer_norm=True, recurrent=recurrent, policy_gain=1.0, log_std_init=-0.5)
    return PPOModule(observation_space=gym.spaces.Box(-np.inf, np.inf, (obs_dim,), np.float32),
                     action_space=space, model_config=cfg)


def test_action_mask_gives_zero_probability_and_finite_logp():
    torch.manual_seed(0)
    m = _module()
    obs = torch.randn(64, 2, 4)
    avail = torch.tensor([True, False, True]).expand(64, 2, 3)
    a, logp, _ = m.act(obs, avail, None, explore=True)
    assert not (a == 1).any()
    assert torch.isfinite(logp).all()
    out = m._forward_train({"obs": obs.reshape(-1, 4), "critic_in": torch.zeros(128, 6)})
    lp, _ = m.log_prob_entropy(out["dist_in"], torch.ones(128), avail.reshape(-1, 3))
    assert (lp < -1e5).all()  # the unavailable action has (numerically) zero probability


def test_categorical_head_matches_torch_distributions():
    """The head's own log-softmax (algos/ppo.py masked_log_softmax) gives Categorical's samples for the same
    generator state, its log-probs and entropy (and their gradients), with and without action masks."""
    torch.manual_seed(0)
    m = _module(n_actions=5)
    obs = torch.randn(256, 3, 4)
    avail = torch.rand(256, 3, 5) > 0.4
    avail[..., 2] = True  # at least one available action per row
    for mask in (None, avail):
        torch.manual_seed(1)
        a, logp, _ = m.act(obs, mask, None, explore=True)
        logits = m.actor.step(obs.reshape(768, -1), None)[0]
        masked = logits if mask is None else logits.masked_fill(~mask.reshape(768, -1), -1e10)
        ref = torch.distributions.Categorical(logits=masked)
        torch.manual_seed(1)
        assert torch.equal(a.reshape(-1), ref.sample())
        assert torch.allclose(logp.reshape(-1), ref.log_prob(a.reshape(-1)), atol=1e-6)
        greedy, _, _ = m.act(obs, mask, None, explore=False)
        assert torch.equal(greedy.reshape(-1), ref.probs.argmax(-1))
        x = logits.detach().requires_grad_(True)
        lp, ent = m.log_prob_entropy(x, a.reshape(-1), None if mask is None else mask.reshape(768, -1))
        y = x.detach().clone().requires_grad_(True)
        d = torch.distributions.Categorical(logits=y if mask is None else y.masked_fill(~mask.reshape(768, -1), -1e10))
        lp_ref, ent_ref = d.log_prob(a.reshape(-1)), d.entropy()
        assert torch.allclose(lp, lp_ref, atol=1e-6) and torch.allclose(ent, ent_ref, atol=1e-6)
        (lp.sum() + 0.3 * ent.sum()).backward()
        (lp_ref.sum() + 0.3 * ent_ref.sum()).backward()
        assert torch.allclose(x.grad, y.grad, atol=1e-6)


@pytest.mark.parametrize("discrete", [True, False])
@pytest.mark.parametrize("recurrent", [False, True])
def test_training_forward_reproduces_rollout_logp(discrete, recurrent):
    """Before any update, ratio = 1: the learner's forward (whole-sequence unroll with
    episode-start resets) gives the log-probs the sampler recorded step by step."""
    torch.manual_seed(1)
    m = _module(discrete=discrete, recurrent=recurrent)
    B, N, T = 3, 2, 6
    obs = torch.randn(T, B, N, 4)
    starts = torch.zeros(T, B, dtype=torch.bool)
    starts[0] = True
    starts[3, 1] = True  # env 1 starts a new episode at t=3
    h = m.initial_state((B, N))
    acts, logps, hs = [], [], []
    for t in range(T):
        if h is not None:
            h = h * (~starts[t]).view(B, 1, 1).float()
            hs.append(h)
        a, lp, h = m.act(obs[t], None, h, explore=True)
        acts.append(a)
        logps.append(lp)
    acts, logps = torch.stack(acts), torch.stack(logps)
    rows = lambda x: x.movedim(0, 2).reshape(B * N, T, *x.shape[3:])  # noqa: E731
    batch = {"obs": rows(obs), "critic_in": torch.zeros(B * N, T, 6)}
    if recurrent:
        batch["h0"] = torch.zeros(B * N, m.state_size)
        batch["starts"] = rows(starts.unsqueeze(-1).expand(T, B, N))
    else:
        batch = {"obs": batch["obs"].reshape(-1, 4), "critic_in": batch["critic_in"].reshape(-1, 6)}
    out = m._forward_train(batch)
    a_rows = rows(acts).reshape(B * N * T, *acts.shape[3:])
    lp, _ = m.log_prob_entropy(out["dist_in"], a_rows, None)
    assert torch.allclose(lp, rows(logps).reshape(-1), atol=1e-5)


def test_critic_inputs_ippo_vs_mappo():
    obs = torch.randn(5, 3, 7)
    state = torch.randn(5, 21)
    assert critic_inputs("obs", obs, state, 3).shape == (5, 3, 7)
    c = critic_inputs("state", obs, state, 3)
    assert c.shape == (5, 3, 21 + 3)
    assert torch.equal(c[:, 1, :21], state) and torch.equal(c[:, 1, 21:], torch.tensor([0.0, 1.0, 0.0]).expand(5, 3))


def test_masked_mean_ignores_masked():
    assert masked_mean(torch.tensor([1.0, 100.0]), torch.tensor([True, False])).item() == 1.0


# ---------------------------------------------------------------- team critic, final values
def _team_module(n_agents=3, state_dim=6):
    cfg = dict(obs_dim=4, critic_dim=state_dim, critic_heads=n_agents, team_critic=True, n_actions=3, discrete=True,
               hidden=16, layers=2, activation="relu", layer_norm=True, recurrent=False, policy_gain=1.0,
               log_std_init=-0.5)
    return PPOModule(observation_space=gym.spaces.Box(-np.inf, np.inf, (4,), np.float32),
                     action_space=gym.spaces.Discrete(3), model_config=cfg)


def test_final_values_only_where_truncated():
    from marl.algos.ppo import final_values

    torch.manual_seed(0)
    m = _module()
    final_in = torch.randn(5, 7, 6)
    trunc = torch.zeros(5, 7, dtype=torch.bool)
    trunc[1, 3] = trunc[4, 6] = True
    v = final_values(m, final_in, trunc, torch.empty(5, 7))
    full = m.values(final_in)
    assert torch.allclose(v[trunc], full[trunc]) and bool((v[~trunc] == 0).all())
    assert bool((final_values(m, final_in, torch.zeros_like(trunc), torch.empty(5, 7)) == 0).all())
    t = _team_module()  # team critic: [B, T, S] inputs, [B, T, N] values
    tv = final_values(t, final_in, trunc, torch.empty(5, 7, 3))
    assert torch.allclose(tv[trunc], t.values(final_in)[trunc]) and bool((tv[~trunc] == 0).all())


def test_team_critic_rows_and_advantages_by_hand():
    """Team layout: one critic row per env step; GAE per agent on the team critic's head of that agent."""
    from types import SimpleNamespace

    from marl.algos.policy_gradient import gae, next_values
    from marl.algos.ppo import PPOLearner, rollout_to_sequences

    torch.manual_seed(1)
    T, B, N, S = 6, 2, 3, 6
    term = torch.zeros(T, B, dtype=torch.bool)
    trunc = torch.zeros(T, B, dtype=torch.bool)
    term[2, 0], trunc[4, 1] = True, True
    mod = {"obs": torch.randn(T + 1, B, N, 4), "final_obs": torch.randn(T, B, N, 4),
           "actions": torch.randint(0, 3, (T, B, N)), "logp": torch.randn(T, B, N), "rewards": torch.randn(T, B, N),
           "alive": torch.ones(T, B, N, dtype=torch.bool)}
    rollout = {"state": torch.randn(T + 1, B, S), "final_state": torch.randn(T, B, S), "terminated": term,
               "truncated": trunc, "modules": {"shared": mod}}
    cols = {k: torch.as_tensor(v) for k, v in rollout_to_sequences(rollout, "team").policy_batches["shared"].items()}
    assert cols["critic_in"].shape == (B, T + 1, S) and cols["obs"].shape == (B, N, T + 1, 4)
    assert torch.equal(cols["rewards"][1, 2], mod["rewards"][:, 1, 2])  # [B, N, T]: copy 1, agent 2
    m = _team_module(N, S)
    cfg = SimpleNamespace(gamma=0.9, gae_lambda=0.8, value_norm=False, advantage_norm=False)
    fake = SimpleNamespace(cfg=cfg, metrics=SimpleNamespace(log_value=lambda *a, **k: None))
    out = PPOLearner._prepare_team(fake, "shared", m, cols)
    assert out["obs"].shape == (B * T, N, 4) and out["critic_in"].shape == (B * T, S)
    with torch.no_grad():  # by hand for copy b=1, agent n=2 (its episode truncated at t=4)
        v = m.values(rollout["state"][:, 1])[:, 2]  # [T+1]
        vf = torch.zeros(T)
        vf[4] = m.values(rollout["final_state"][4, 1])[2]
        adv = gae(mod["rewards"][:, 1, 2], v[:-1], next_values(v, vf, term[:, 1], trunc[:, 1]), term[:, 1] | trunc[:, 1],
                  0.9, 0.8)
    rows = torch.arange(T) + T * 1  # env-step rows of copy 1
    assert torch.allclose(out["advantages"][rows, 2], adv, atol=1e-6)
    assert torch.allclose(out["returns"][rows, 2], adv + v[:-1], atol=1e-6)
    fwd = m._forward_train({"obs": out["obs"][:4], "critic_in": out["critic_in"][:4]})
    assert fwd["dist_in"].shape == (4 * N, 3) and fwd["values"].shape == (4 * N,)
    assert torch.allclose(fwd["values"].view(4, N), out["values_old"][:4], atol=1e-6)
