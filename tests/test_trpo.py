"""ITRPO/MATRPO (algos/trpo.py, docs/algorithms/trpo.md): the trust-region math on hand-computed values and
properties (no Ray), then learning and exact resume through ``fit``."""

import pytest
import torch

from marl.algos.trpo import (
    actor_parameters,
    conjugate_gradient,
    flat,
    policy_kl,
    policy_snapshot,
    policy_trust_region_step,
    surrogate_objective,
    trust_region_step,
)
from run_helpers import ppo_module
from test_exact_resume import _one_go_vs_resumed
from toy_envs import MatchEnv


# ============================================================ conjugate gradient
def test_conjugate_gradient_solves_spd_systems():
    """2x2 by hand: [[4, 1], [1, 3]] x = [1, 2] has x = [1/11, 7/11], reached in 2 iterations (exact in n
    steps); a random 6x6 SPD system in 6 iterations equals the direct solve."""
    A = torch.tensor([[4.0, 1.0], [1.0, 3.0]], dtype=torch.float64)
    x = conjugate_gradient(lambda v: A @ v, torch.tensor([1.0, 2.0], dtype=torch.float64), iters=2)
    assert torch.allclose(x, torch.tensor([1 / 11, 7 / 11], dtype=torch.float64), atol=1e-12)
    g = torch.Generator().manual_seed(0)
    M = torch.randn(6, 6, generator=g, dtype=torch.float64)
    A, b = M @ M.T + 0.5 * torch.eye(6, dtype=torch.float64), torch.randn(6, generator=g, dtype=torch.float64)
    assert torch.allclose(conjugate_gradient(lambda v: A @ v, b, iters=6), torch.linalg.solve(A, b), atol=1e-8)
    one = conjugate_gradient(lambda v: A @ v, b, iters=1)  # one step: the exact line minimum along b
    assert torch.allclose(one, b * b.dot(b) / b.dot(A @ b), atol=1e-12)


# ============================================================ trust_region_step on a small categorical policy
def _softmax_policy(seed=0, M=32, D=3, A=4):
    """Logits ``obs @ W`` of a linear categorical policy, W ``[D, A]`` (float64); sampled actions, their
    log-probs before the step, random advantages. Returns W, surrogate(), kl(), the old log-probs, obs."""
    g = torch.Generator().manual_seed(seed)
    W = torch.randn(D, A, generator=g, dtype=torch.float64).requires_grad_(True)
    obs = torch.randn(M, D, generator=g, dtype=torch.float64)
    with torch.no_grad():
        lp0 = torch.log_softmax(obs @ W, -1)
        a = torch.multinomial(lp0.exp(), 1, generator=g).squeeze(-1)
    adv = torch.randn(M, generator=g, dtype=torch.float64)

    def logp_all(w):
        return torch.log_softmax(obs @ w, -1)

    def surrogate(w=W):
        return (
            torch.exp(logp_all(w).gather(-1, a[:, None]).squeeze(-1) - lp0.gather(-1, a[:, None]).squeeze(-1)) * adv
        ).mean()

    def kl(w=W):
        return (lp0.exp() * (lp0 - logp_all(w))).sum(-1).mean()

    return W, surrogate, kl, lp0, obs


def test_accepted_step_obeys_the_kl_bound_and_its_first_length_is_the_hand_formula():
    """Step s = sqrt(2 delta / x^T A x) x with A = H + damping I (H the KL Hessian) and x = A^-1 g, computed
    here with a dense Hessian and a direct solve; the parameters move by step_fraction * s; the KL measured
    with torch.distributions is under delta and the surrogate rose."""
    W, surrogate, kl, lp0, obs = _softmax_policy()
    max_kl, damping = 0.01, 0.1
    w0 = W.detach().clone()
    g = torch.autograd.grad(surrogate(), W)[0].reshape(-1)
    H = torch.autograd.functional.hessian(lambda w: kl(w.reshape(W.shape)), w0.reshape(-1))
    A = H + damping * torch.eye(H.shape[0], dtype=H.dtype)
    x = torch.linalg.solve(A, g)
    s = torch.sqrt(2 * max_kl / (x @ A @ x)) * x
    before = float(surrogate().detach())

    done = trust_region_step([W], surrogate, kl, max_kl, cg_iters=20, damping=damping)

    assert done.accepted and 0 < done.step_fraction <= 1
    assert done.full_step_norm == pytest.approx(float(s.norm()), rel=1e-6)
    assert done.expected_gain == pytest.approx(float(g @ s), rel=1e-6)
    assert torch.allclose(
        W.detach().reshape(-1) - w0.reshape(-1), done.step_fraction * s, atol=1e-5
    )  # CG stops at |r|^2 <= 1e-10
    with torch.no_grad():
        new = torch.distributions.Categorical(logits=obs @ W)
    measured = torch.distributions.kl_divergence(torch.distributions.Categorical(logits=lp0), new).mean()
    assert float(measured) <= max_kl and float(measured) == pytest.approx(done.kl, rel=1e-9)
    assert (
        float(surrogate().detach()) - before == pytest.approx(done.surrogate_gain, rel=1e-9) and done.surrogate_gain > 0
    )


def test_rejected_step_leaves_the_parameters_unchanged():
    """A KL that never falls under the bound (the true KL plus 1: same Hessian, so the same steps are tried):
    every step is rejected and the parameters are bitwise those before."""
    W, surrogate, kl, _, _ = _softmax_policy(seed=1)
    w0 = W.detach().clone()
    done = trust_region_step([W], surrogate, lambda: kl() + 1.0, 0.01, line_search_steps=4)
    assert not done.accepted and done.step_fraction == 0.0 and done.tries == 4 and done.full_step_norm > 0
    assert torch.equal(W.detach(), w0)


def test_a_flat_surrogate_takes_no_step():
    W, _, kl, _, _ = _softmax_policy(seed=2)
    w0 = W.detach().clone()
    done = trust_region_step([W], lambda: (W * 0).sum(), kl, 0.01)
    assert not done.accepted and done.tries == 0 and torch.equal(W.detach(), w0)


def test_a_non_finite_surrogate_stops_training_and_moves_nothing():
    from marl.errors import TrainingDiverged

    W, surrogate, kl, _, _ = _softmax_policy(seed=3)
    w0 = W.detach().clone()
    with pytest.raises(TrainingDiverged, match="surrogate .*nan.* not finite"):
        trust_region_step([W], lambda: surrogate() * float("nan"), kl, 0.01)
    assert torch.equal(W.detach(), w0)


# ============================================================ the policy step on PPO's module
@pytest.mark.parametrize("discrete, recurrent", [(True, False), (False, False), (True, True)])
def test_policy_step_of_a_ppo_module_obeys_the_kl_bound_and_moves_only_the_actor(discrete, recurrent):
    """One :func:`policy_trust_region_step` on sampled rows (MLP or GRU chunks; categorical with an action
    mask, or Gaussian with its log std): KL measured with torch.distributions <= 0.01, surrogate up, critic
    untouched, log std among the moved parameters."""
    torch.manual_seed(0)
    m = ppo_module(discrete=discrete, recurrent=recurrent)
    R, L = 16, 5
    obs = torch.randn(R, L, 4)
    avail = torch.ones(R * L, 3, dtype=torch.bool)
    avail[::3, 1] = False
    batch = {"obs": obs, "critic_in": torch.zeros(R, L, 6)}
    if recurrent:
        batch.update(h0=torch.zeros(R, m.state_size), starts=torch.zeros(R, L, dtype=torch.bool))
    else:
        batch = {"obs": obs.reshape(R * L, 4), "critic_in": torch.zeros(R * L, 6)}
    with torch.no_grad():
        dist_in = m._forward_train(batch)["dist_in"]
        if discrete:
            a = torch.distributions.Categorical(logits=dist_in.masked_fill(~avail, -1e10)).sample()
        else:
            a = dist_in + 0.3 * torch.randn_like(dist_in)
        logp, _ = m.log_prob_entropy(dist_in, a, avail if discrete else None)
    rows = {"actions": a, "logp_old": logp, "advantages": torch.randn(R * L), "active": torch.rand(R * L) > 0.2}
    if discrete:
        rows["avail"] = avail
    if recurrent:
        rows = {k: v.reshape(R, L, *v.shape[1:]) for k, v in rows.items()}
    batch.update(rows)
    flat_rows = {k: v.reshape(R * L, *v.shape[2:]) if recurrent else v for k, v in rows.items()}
    old = policy_snapshot(m, dist_in)
    critic0 = flat(list(m.critic.parameters())).clone()
    actor0 = flat(actor_parameters(m)).clone()
    before = float(surrogate_objective(m, dist_in, flat_rows, 0.0).detach())

    done = policy_trust_region_step(m, batch, 0.0, max_kl=0.01)

    with torch.no_grad():
        new_in = m._forward_train(batch)["dist_in"]
        if discrete:
            P = torch.distributions.Categorical(logits=dist_in.masked_fill(~avail, -1e10))
            Q = torch.distributions.Categorical(logits=new_in.masked_fill(~avail, -1e10))
            kl_rows = torch.distributions.kl_divergence(P, Q)
        else:
            P = torch.distributions.Normal(dist_in, old["log_std"].exp())
            Q = torch.distributions.Normal(new_in, m.log_std.exp())
            kl_rows = torch.distributions.kl_divergence(P, Q).sum(-1)
        measured = kl_rows[flat_rows["active"]].mean()
        assert done.accepted and float(measured) <= 0.01
        assert float(measured) == pytest.approx(float(policy_kl(m, old, new_in, flat_rows)), rel=1e-4)
        assert float(surrogate_objective(m, new_in, flat_rows, 0.0)) > before
    assert torch.equal(flat(list(m.critic.parameters())), critic0)
    assert not torch.equal(flat(actor_parameters(m)), actor0)
    if not discrete:
        assert any(p is m.log_std for p in actor_parameters(m)) and not torch.equal(m.log_std.detach(), old["log_std"])


# ============================================================ through fit
@pytest.mark.slow
@pytest.mark.parametrize("algo", ["itrpo", "matrpo"])
def test_trpo_solves_cue_matching(algo, ray_session, run_dir):
    """Random play earns 5 steps * 3 agents / 4 actions = 3.75, optimal 15 (tests/test_learning.py's IPPO
    check at the same budget). Greedy return after 40 iterations, seed 0: 15.0 for both."""
    res = MatchEnv(num_envs=16, N=3, A=4).fit(
        algo, stop={"iterations": 40}, log_dir=run_dir, progress=False, rollout_length=10, eval_episodes=32, seed=0
    )
    assert res.eval["episode_return_mean"] >= 14.0, res.eval
    assert res.metrics["shared/accepted"] in (0.0, 1.0) and res.metrics["shared/kl"] <= 0.01


def test_matrpo_resume_is_exact(ray_session, run_dir):
    _one_go_vs_resumed(
        lambda: MatchEnv(num_envs=3), "matrpo", 4, run_dir, rollout_length=5, epochs=2, num_minibatches=2
    )


def test_recurrent_continuous_itrpo_resume_is_exact(ray_session, run_dir):
    import marl

    mpe = dict(num_envs=3, max_cycles=7, continuous_actions=True)
    gru = dict(rollout_length=5, epochs=2, num_minibatches=2, recurrent=True, chunk_length=5)
    _one_go_vs_resumed(lambda: marl.make_env("mpe", "simple_spread", **mpe), "itrpo", 4, run_dir, **gru)
