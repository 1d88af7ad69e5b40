"""IPPO/MAPPO math on hand-computed values and properties (docs/algorithms/ppo.md). No Ray.

GAE, the time-limit bootstrap, advantage normalisation, critic inputs and the learner's data path are the
on-policy core's (marl/engine/on_policy.py): tests/test_on_policy_core.py."""

import pytest
import torch

from marl.algos.policy_gradient import ValueNorm, masked_mean, ppo_losses
from run_helpers import ppo_module


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


def _losses(logp, adv, values=None, values_old=None, targets=None, active=None, clip=0.2, value_clip=0.2):
    n = logp.shape[0]
    z = torch.zeros(n)
    return ppo_losses(
        logp,
        z,
        adv,
        z,
        z if values is None else values,
        z if values_old is None else values_old,
        z if targets is None else targets,
        torch.ones(n, dtype=torch.bool) if active is None else active,
        clip,
        value_clip,
        10.0,
    )


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
    out = _losses(
        logp,
        torch.tensor([1.0, 2.0, 3.0]),
        values,
        torch.zeros(3),
        torch.ones(3),
        active=torch.tensor([True, False, True]),
    )
    (out["policy_loss"] + out["value_loss"]).backward()
    assert logp.grad[1] == 0 and values.grad[1] == 0
    assert logp.grad[0] != 0 and values.grad[0] != 0


def _module(discrete=True, recurrent=False, obs_dim=4, n_actions=3):
    return ppo_module(obs_dim=obs_dim, n_actions=n_actions, discrete=discrete, recurrent=recurrent)


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


def test_masked_mean_ignores_masked():
    assert masked_mean(torch.tensor([1.0, 100.0]), torch.tensor([True, False])).item() == 1.0


def test_learner_passes_the_config_to_the_loss_in_order():
    """PPOLearner's loss on a minibatch equals ``L_clip - c_H H + c_V L_V`` composed by hand from ``ppo_losses``
    with each key in its place (clip 0.1 and value clip 0.3 both bind: swapping any two changes the loss)."""
    from test_on_policy_core import Bare

    from marl.algos.ppo import PPOLearner

    class BarePPO(Bare, PPOLearner):
        pass

    torch.manual_seed(0)
    m, M = _module(), 32
    cfg = dict(value_norm=True, clip=0.1, value_clip=0.3, huber_delta=0.5, entropy_coef=0.05, value_loss_coef=0.7)
    learner = BarePPO({"m": m}, **cfg)
    rows = {
        "obs": torch.randn(M, 4),
        "critic_in": torch.randn(M, 6),
        "actions": torch.randint(0, 3, (M,)),
        "advantages": torch.randn(M),
        "returns": 3 * torch.randn(M),
        "values_old": torch.randn(M),
        "active": torch.rand(M) > 0.2,
    }
    fwd = m._forward_train(rows)
    rows["logp_old"] = m.log_prob_entropy(fwd["dist_in"], rows["actions"], None)[0].detach() + 0.2 * torch.randn(M)
    loss = learner.compute_loss_for_module(module_id="m", config=None, batch=rows, fwd_out=fwd)
    logp, ent = m.log_prob_entropy(fwd["dist_in"], rows["actions"], None)
    parts = ppo_losses(
        logp,
        rows["logp_old"],
        rows["advantages"],
        ent,
        fwd["values"],
        rows["values_old"],
        m.value_norm.normalize(rows["returns"]),
        rows["active"],
        0.1,
        0.3,
        0.5,
    )
    assert 0 < parts["clip_fraction"] < 1 and m.value_norm.debias > 0  # the clip binds; the normaliser was updated
    assert torch.allclose(loss, parts["policy_loss"] - 0.05 * parts["entropy"] + 0.7 * parts["value_loss"])
