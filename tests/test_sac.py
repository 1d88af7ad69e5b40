"""ISAC / MASAC (algos/sac.py): the tanh-Gaussian log-likelihood with its correction, the discrete soft target and
actor loss as exact expectations (masks included), the temperature's gradient sign, the twin-min in the soft target,
an actor loss that never moves the critics, learning a continuous and a discrete task random play cannot solve,
and every share mode (exact resume: tests/test_ddpg.py, beside MATD3's and FACMAC's)."""

import math

import gymnasium as gym
import numpy as np
import pytest
import torch

from marl.algos.ddpg import JOINT
from marl.algos.sac import SACModule, sac_losses, squashed_log_prob, target_entropy
from marl.config import load_config
from test_ddpg import BOX, LEARN, _AnyIn, _random_batch, brief_fit, cfg, linear, one_step, per_module
from toy_envs import MatchEnv, TargetEnv


def module(obs_dim, critic_dim, action_space, alpha=1.0):
    return SACModule(
        observation_space=gym.spaces.Box(-1, 1, (obs_dim,)),
        action_space=action_space,
        model_config=dict(
            obs_dim=obs_dim, critic_dim=critic_dim, hidden=8, layers=1, activation="tanh", twin=True, alpha_init=alpha
        ),
    )


def sac_cfg(**kw):
    base = dict(target_entropy="auto", discrete_target_entropy_weight=0.2, fixed_alpha=False)
    return cfg(**{**base, **kw})


def constant(outputs):
    """A network whose output is ``outputs`` whatever the input."""
    lin = torch.nn.Linear(1, len(outputs))
    with torch.no_grad():
        lin.weight.zero_()
        lin.bias.copy_(torch.tensor(outputs))
    return _AnyIn(lin)


def critics(*rows):
    """Linear critics, each ``(weights, bias)``."""
    return torch.nn.ModuleList([linear(w, b) for w, b in rows])


# ---------------------------------------------------------------- the squashed Gaussian
def test_tanh_gaussian_log_prob_has_the_tanh_and_bounds_correction():
    """Haarnoja et al. 2018, Appendix C: log pi(a) = log N(z; m, s) - log(1 - tanh(z)^2), and - log h for the map of
    [-1, 1] onto [low, high] (h = 2 for [-2, 2]). At z = 0.5, m = 0, s = 1:
    -0.5 log(2 pi) - 0.125 - log(1 - tanh(0.5)^2) - log 2 = -0.9189 - 0.125 + 0.2402 - 0.6931 = -1.4969."""
    z, mean, std, half = torch.tensor([0.5]), torch.tensor([0.0]), torch.tensor([1.0]), torch.tensor([2.0])
    by_hand = -0.5 * math.log(2 * math.pi) - 0.125 - math.log(1 - math.tanh(0.5) ** 2) - math.log(2.0)
    assert float(squashed_log_prob(z, mean, std, half)) == pytest.approx(by_hand, abs=1e-6)
    assert by_hand == pytest.approx(-1.4969, abs=1e-4)
    # the same density as torch's change of variables, for K = 2, bounds [-1, 1] x [0, 3]
    low, high = torch.tensor([-1.0, 0.0]), torch.tensor([1.0, 3.0])
    m, s, z = torch.tensor([0.3, -1.0]), torch.tensor([0.5, 2.0]), torch.tensor([[0.2, -0.7], [1.5, 3.0]])
    h = (high - low) / 2
    dist = torch.distributions.TransformedDistribution(
        torch.distributions.Normal(m, s),
        [torch.distributions.TanhTransform(), torch.distributions.AffineTransform(low + h, h)],
    )
    a = low + (torch.tanh(z) + 1) * h
    assert torch.allclose(squashed_log_prob(z, m, s, h), dist.log_prob(a).sum(-1), atol=1e-5)
    # finite where tanh(z) rounds to 1 (the naive log(1 - tanh^2) is -inf there)
    assert torch.isfinite(squashed_log_prob(torch.tensor([20.0]), mean, std, half)).all()


def test_std_is_one_at_a_zero_scale_and_never_below_benchmarls_floor():
    """BenchMARL's ``biased_softplus_1.0``: ``softplus(s + b) + 0.01`` is 1 at ``s = 0``, ``0.01 + softplus(b)`` at
    ``s = -b`` (hand-computed: ``b = log(e^0.99 - 1)``), and tends to its ``min_val`` 0.01 for a very negative ``s``."""
    m = module(3, 5, BOX)
    m.actor = constant([0.0, 0.0])  # mean 0, scale 0
    _, std = m.gaussian(torch.zeros(1, 1, 3))
    assert std.item() == pytest.approx(1.0, abs=1e-6)
    b = math.log(math.expm1(0.99))
    m.actor = constant([0.0, -b])
    assert m.gaussian(torch.zeros(1, 1, 3))[1].item() == pytest.approx(0.01 + math.log(2.0), abs=1e-6)
    m.actor = constant([0.0, -1e4])
    assert m.gaussian(torch.zeros(1, 1, 3))[1].item() == pytest.approx(0.01, abs=1e-9)


def test_policy_samples_within_bounds_and_acts_with_the_squashed_mean():
    torch.manual_seed(0)
    space = gym.spaces.Box(np.array([-1.0, 0.0], np.float32), np.array([1.0, 3.0], np.float32))
    m = module(3, 5, space)
    obs = torch.rand(256, 2, 3) * 10
    a, logp, h = m.act(obs, None, None, explore=True)
    assert a.shape == (256, 2, 2) and logp.shape == (256, 2) and h is None
    assert (a[..., 0] >= -1).all() and (a[..., 0] <= 1).all() and (a[..., 1] >= 0).all() and (a[..., 1] <= 3).all()
    mean, std = m.gaussian(obs)
    assert (std > 0).all()
    greedy = m.act(obs, None, None, explore=False)[0]
    assert torch.allclose(greedy, m.to_bounds(torch.tanh(mean)))
    assert not torch.allclose(a, greedy)  # exploration samples
    eps = torch.randn(256, 2, 2)  # the reparameterised sample and its log-likelihood
    sample, logp = m.sample(obs, eps)
    assert torch.allclose(sample, m.to_bounds(torch.tanh(mean + std * eps)))
    assert torch.allclose(logp, squashed_log_prob(mean + std * eps, mean, std, torch.tensor([1.0, 1.5])))
    m.actor = constant([4.0, 4.0, -5.0, -5.0])  # mean tanh(4) near the upper bounds, std e^-5
    uniform, logp, _ = m.act(torch.rand(4096, 2, 3), None, None, explore=True, random_actions=1.0)  # random_steps
    flat = uniform.reshape(-1, 2)
    assert (flat >= torch.tensor([-1.0, 0.0])).all() and (flat <= torch.tensor([1.0, 3.0])).all()
    assert torch.allclose(flat.mean(0), torch.tensor([0.0, 1.5]), atol=0.03) and torch.equal(logp, torch.zeros(4096, 2))


# ---------------------------------------------------------------- discrete: exact expectations
PI = [0.5, 0.25, 0.25]
H = -sum(p * math.log(p) for p in PI)  # 1.5 log 2 = 1.0397 nats


def discrete_module():
    """A = 3, critic: obs (x = (o, one-hot a)), actor logits log(0.5, 0.25, 0.25), alpha 0.5; Q1 = (1, 2, 3),
    Q2 = (2, 1, 4) per action at o = 0, so min_k Q_k = (1, 1, 3); targets and online critics alike."""
    m = module(1, 4, gym.spaces.Discrete(3), alpha=0.5)
    m.actor = constant([math.log(p) for p in PI])
    rows = (([0.0, 1.0, 2.0, 3.0], 0.0), ([0.0, 2.0, 1.0, 4.0], 0.0))
    m.critics, m.critic_targets = critics(*rows), critics(*rows)
    return m


def discrete_batch(avail=None):
    b = one_step(1, torch.zeros(1, 1, 1), torch.zeros(1, 1, 1), torch.ones(1, 1), torch.tensor([False]), None)
    b["shared"]["actions"] = torch.tensor([[0]])
    if avail is not None:
        b["shared"]["avail"] = b["shared"]["next_avail"] = torch.tensor([[avail]])
    return b


def test_discrete_soft_target_and_actor_loss_are_expectations_over_the_policy():
    """Christodoulou 2019, Eq. 10 and 12, alpha = 0.5: V = sum_a pi (min Q - alpha log pi)
    = 0.5 * 1 + 0.25 * 1 + 0.25 * 3 + 0.5 H = 1.5 + 0.5 * 1.0397 = 2.0199; y = 1 + 0.9 V = 2.8179;
    actor loss = sum_a pi (alpha log pi - min Q) = -V (same critics, same observation); entropy H = 1.0397."""
    _, metrics = sac_losses({"shared": discrete_module()}, discrete_batch(), sac_cfg(), actor_due=True)
    v = 1.5 + 0.5 * H
    assert v == pytest.approx(2.0199, abs=1e-4)
    assert metrics["shared"]["target_mean"] == pytest.approx(1 + 0.9 * v, abs=1e-5)
    assert metrics["shared"]["actor_loss"] == pytest.approx(-v, abs=1e-5)
    assert metrics["shared"]["entropy"] == pytest.approx(H, abs=1e-6)
    assert metrics["shared"]["q_mean"] == pytest.approx(1.0)  # Q1 of the stored action 0


def test_discrete_unavailable_action_has_no_weight():
    """Action 2 unavailable: pi = (2/3, 1/3, 0), V = 2/3 * (1 - 0.5 log 2/3) + 1/3 * (1 - 0.5 log 1/3)
    = 1 + 0.5 H2 with H2 = 0.6365: the best (masked) action's Q = 3 counts for nothing."""
    _, metrics = sac_losses({"shared": discrete_module()}, discrete_batch([True, True, False]), sac_cfg(), True)
    h2 = -(2 / 3 * math.log(2 / 3) + 1 / 3 * math.log(1 / 3))
    assert metrics["shared"]["target_mean"] == pytest.approx(1 + 0.9 * (1 + 0.5 * h2), abs=1e-5)
    assert metrics["shared"]["entropy"] == pytest.approx(h2, abs=1e-5)


def test_discrete_target_entropy_is_a_fraction_of_log_a_and_continuous_minus_k():
    assert target_entropy(discrete_module(), sac_cfg()) == pytest.approx(0.2 * math.log(3))
    assert target_entropy(module(1, 3, gym.spaces.Box(-1, 1, (2,))), sac_cfg()) == -2.0
    assert target_entropy(discrete_module(), sac_cfg(target_entropy=0.7)) == 0.7


@pytest.mark.parametrize("target, up", [(0.2 * math.log(3), False), (1.09, True)], ids=["above", "below"])
def test_temperature_rises_when_entropy_is_below_target_and_falls_when_above(target, up):
    """Haarnoja et al. 2018, Eq. 18: d/d log_alpha of -log_alpha (log pi + H_target) is H - H_target (here
    H = 1.0397, exactly); one SGD step moves alpha up when H < H_target, down when H > H_target."""
    m = discrete_module()
    loss, _ = sac_losses({"shared": m}, discrete_batch(), sac_cfg(target_entropy=target), actor_due=True)
    loss.backward()
    assert float(m.log_alpha.grad) == pytest.approx(H - target, abs=1e-6)
    before = float(m.log_alpha.detach().exp())
    torch.optim.SGD([m.log_alpha], lr=0.1).step()
    assert (float(m.log_alpha.detach().exp()) > before) == up


def test_fixed_alpha_leaves_the_temperature():
    m = discrete_module()
    loss, _ = sac_losses({"shared": m}, discrete_batch(), sac_cfg(fixed_alpha=True), actor_due=True)
    loss.backward()
    assert m.log_alpha.grad is None


# ---------------------------------------------------------------- continuous: the twin-min soft target
def test_continuous_soft_target_takes_the_min_of_the_twin_critics_per_agent():
    """Two agents, critic: obs, Q1' = o' + 1 and Q2' = 2 o' (blind to the action) at o' = (3, -1): Q1' = (4, 0),
    Q2' = (6, -2), min = (4, -2), each from another critic; y_i = r_i + 0.9 (min_i - alpha log pi(a'_i | o'_i))
    with the next action sampled from the policy (the same noise drawn again for log pi)."""
    m = module(1, 2, BOX, alpha=0.5)
    m.critic_targets = critics(([1.0, 0.0], 1.0), ([2.0, 0.0], 0.0))
    next_obs = torch.tensor([[[3.0], [-1.0]]])
    b = one_step(
        2, torch.zeros(1, 2, 1), next_obs, torch.tensor([[1.0, 0.0]]), torch.tensor([False]), torch.zeros(1, 2, 1)
    )
    torch.manual_seed(3)
    logp = m.sample(next_obs)[1].detach()
    torch.manual_seed(3)
    _, metrics = sac_losses({"shared": m}, b, sac_cfg(), actor_due=False)
    y = torch.tensor([1.0, 0.0]) + 0.9 * (torch.tensor([4.0, -2.0]) - 0.5 * logp[0])
    assert metrics["shared"]["target_mean"] == pytest.approx(float(y.mean()), abs=1e-5)
    b[JOINT]["terminated"] = torch.tensor([True])  # a terminal step: y = r
    _, metrics = sac_losses({"shared": m}, b, sac_cfg(), actor_due=False)
    assert metrics["shared"]["target_mean"] == pytest.approx(0.5)


@pytest.mark.parametrize("critic", ["obs", "joint_obs"])
def test_actor_and_temperature_losses_never_move_the_critics(critic):
    def grads(actor_due):
        torch.manual_seed(0)
        m = module(3, 3 + 2 if critic == "obs" else 2 * 3 + 2 * 2 + 2, gym.spaces.Box(-1.0, 1.0, (2,), np.float32))
        torch.manual_seed(1)
        loss, _ = sac_losses({"shared": m}, _random_batch(), sac_cfg(critic=critic), actor_due)
        loss.backward()
        return {n: None if p.grad is None else p.grad.clone() for n, p in m.named_parameters()}

    with_actor, without = grads(True), grads(False)
    names = [n for n in with_actor if n.startswith("critics.")]
    assert names and all(torch.equal(with_actor[n], without[n]) for n in names)
    assert all(with_actor[n].abs().sum() > 0 for n in with_actor if n.startswith("actor."))
    assert with_actor["log_alpha"] is not None and without["log_alpha"] is None
    assert all(without[n] is None for n in without if n.startswith("actor."))
    assert not any(n.startswith("actor_target") for n in with_actor)  # no target actor: pi samples a'


# ---------------------------------------------------------------- runs
SAC_LEARN = {k: v for k, v in LEARN.items() if not k.startswith("exploration")}


@pytest.mark.parametrize("algo", ["masac", "isac"])
def test_learns_to_hit_continuous_targets(tmp_path, algo):
    """TargetEnv (2 agents x 5 steps, reward -mean (a - c)^2): random play about -16.7 per episode, the best blind
    action -3.3; the greedy policy must beat -1."""
    res = TargetEnv(num_envs=8).fit(algo, stop={"iterations": 40}, log_dir=str(tmp_path), **SAC_LEARN)
    assert res.eval["episode_return_mean"] > -1.0, res.eval


@pytest.mark.parametrize("algo", ["masac", "isac"])
def test_discrete_sac_learns_the_cued_actions(tmp_path, algo):
    """MatchEnv: random play returns 5 * 2 / 3 = 3.3 per episode, the optimum 10; the greedy policy must beat 8."""
    res = MatchEnv(num_envs=8).fit(algo, stop={"iterations": 25}, log_dir=str(tmp_path), **SAC_LEARN)
    assert res.eval["episode_return_mean"] > 8.0, res.eval


@pytest.mark.parametrize("share", ["auto", "all", "group", "individual"])
@pytest.mark.parametrize("env", [TargetEnv, MatchEnv], ids=["continuous", "discrete"])
def test_runs_with_every_share_mode(tmp_path, share, env):
    """Finite losses and a temperature per module: one module per agent (individual) or one (auto, all, group)."""
    res = brief_fit(env(num_envs=4), "masac", share, tmp_path)
    alphas = per_module(res, "alpha")
    assert len(per_module(res, "critic_loss")) == len(alphas) == (2 if share == "individual" else 1)
    assert all(a != 1.0 for a in alphas)  # the temperature was tuned from alpha_init 1


def test_defaults_are_benchmarls():
    c = load_config("masac", None)
    assert (c.critic, c.twin_critics, c.alpha_init, c.target_entropy, c.discrete_target_entropy_weight) == (
        "joint_obs",
        True,
        1.0,
        "auto",
        0.2,
    )
    assert load_config("isac", None).critic == "obs"
