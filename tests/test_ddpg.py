"""IDDPG / MADDPG / MATD3 (algos/ddpg.py): hand-computed targets, TD3's smoothing and clipped double-Q, the
Gumbel-softmax straight-through estimator, an actor loss that never moves the critic, delayed actor steps,
learning a continuous task random play cannot solve, and exact resume with the replay buffer."""

import math
from types import SimpleNamespace

import gymnasium as gym
import numpy as np
import pytest
import torch

from marl.algos.ddpg import (
    JOINT,
    DDPG,
    DDPGModule,
    actor_step_due,
    critic_inputs,
    critic_target,
    ddpg_losses,
    gumbel_softmax_st,
    smoothed,
)
from marl.config import load_config
from test_exact_resume import _one_go_vs_resumed
from toy_envs import ImageMatchEnv, ImageTargetEnv, MatchEnv, TargetEnv


def module(obs_dim, critic_dim, action_space, twin=False):
    return DDPGModule(
        observation_space=gym.spaces.Box(-1, 1, (obs_dim,)),
        action_space=action_space,
        model_config=dict(obs_dim=obs_dim, critic_dim=critic_dim, hidden=8, layers=1, activation="tanh", twin=twin),
    )


def linear(weights, bias):
    lin = torch.nn.Linear(len(weights), 1)
    with torch.no_grad():
        lin.weight.copy_(torch.tensor([weights]))
        lin.bias.fill_(bias)
    return lin


def constant_actor(pre_tanh, k=1):
    """A target actor whose pre-tanh output is ``pre_tanh`` whatever the observation."""
    lin = torch.nn.Linear(1, k)
    with torch.no_grad():
        lin.weight.zero_()
        lin.bias.fill_(pre_tanh)
    return _AnyIn(lin)


class _AnyIn(torch.nn.Module):
    """``lin`` of a zero input: a constant output for observations of any size."""

    def __init__(self, lin):
        super().__init__()
        self.lin = lin

    def forward(self, x):
        return self.lin(x[..., :1] * 0)


BOX = gym.spaces.Box(-2.0, 2.0, (1,), np.float32)


def one_step(N, obs, next_obs, rewards, terminated, actions):
    B = obs.shape[0]
    return {
        "shared": dict(
            obs=obs, next_obs=next_obs, actions=actions, rewards=rewards, alive=torch.ones(B, N, dtype=torch.bool)
        ),
        JOINT: dict(state=torch.zeros(B, 0), next_state=torch.zeros(B, 0), terminated=terminated),
    }


FORMS = {"critic_agent_id": True, "policy_gradient": "own"}  # MADDPG's defaults (configs/algos/maddpg.yaml)


def cfg(**kw):
    base = {"critic": "obs", "gamma": 0.9, "target_noise": 0.0, "target_noise_clip": 0.5, **FORMS}
    return SimpleNamespace(**{**base, **kw})


# ---------------------------------------------------------------- targets
@pytest.mark.parametrize("terminated, expected", [(False, 1 + 0.9 * 5.5), (True, 1.0)], ids=["truncation", "terminal"])
def test_iddpg_target_on_known_networks(terminated, expected):
    """mu'(o') = -2 + (tanh(atanh 0.5) + 1) * 2 = 1; Q'(o', a') = o' + 2 a' + 0.5 = 5.5 at o' = 3;
    y = r + gamma (1 - terminated) Q' (a truncation is not terminated: it bootstraps)."""
    m = module(1, 2, BOX)
    m.actor_target = constant_actor(math.atanh(0.5))
    m.critic_targets = torch.nn.ModuleList([linear([1.0, 2.0], 0.5)])
    b = one_step(
        1,
        torch.zeros(1, 1, 1),
        torch.full((1, 1, 1), 3.0),
        torch.ones(1, 1),
        torch.tensor([terminated]),
        torch.zeros(1, 1, 1),
    )
    _, metrics = ddpg_losses({"shared": m}, b, cfg(), actor_due=False)
    assert metrics["shared"]["target_mean"] == pytest.approx(expected, rel=1e-6)


def test_maddpg_target_reads_every_agents_observation_action_and_index():
    """Two agents, x' = (o'_1, o'_2, a'_1, a'_2, one-hot i): Q'_i = 1 o'_1 + 10 o'_2 + 100 a'_1 + 1000 a'_2 +
    (0.5, 0.25)_i with o' = (1, 2), a' = (1, 1); y_i = r_i + 0.9 Q'_i with r = (1, 0)."""
    m = module(1, 6, BOX)
    m.actor_target = constant_actor(math.atanh(0.5))
    m.critic_targets = torch.nn.ModuleList([linear([1.0, 10.0, 100.0, 1000.0, 0.5, 0.25], 0.0)])
    b = one_step(
        2,
        torch.zeros(1, 2, 1),
        torch.tensor([[[1.0], [2.0]]]),
        torch.tensor([[1.0, 0.0]]),
        torch.tensor([False]),
        torch.zeros(1, 2, 1),
    )
    _, metrics = ddpg_losses({"shared": m}, b, cfg(critic="joint_obs"), actor_due=False)
    y = [1 + 0.9 * 1121.5, 0.9 * 1121.25]
    assert metrics["shared"]["target_mean"] == pytest.approx(sum(y) / 2, rel=1e-6)


def test_critic_input_replaces_only_the_agents_own_action():
    """MADDPG's policy gradient (Lowe et al. 2017, Eq. 5): agent i's critic sees mu_i(o_i) for itself, the stored
    actions of the others."""
    obs = {"m": torch.tensor([[[1.0], [2.0]]])}
    stored, own = {"m": torch.tensor([[[10.0], [20.0]]])}, torch.tensor([[[-1.0], [-2.0]]])
    x = critic_inputs("joint_obs", obs, None, stored, "m", own)
    assert x.tolist() == [[[1, 2, -1, 20, 1, 0], [1, 2, 10, -2, 0, 1]]]
    assert critic_inputs("obs", obs, None, stored, "m", own).tolist() == [[[1, -1], [2, -2]]]


def test_td3_smoothing_clips_the_noise_then_the_action_and_the_target_takes_the_min():
    """Half range h = 2, std 0.2 -> noise 0.4 eps, clipped to +-0.5 h = +-1; then the action to [-2, 2]."""
    a = torch.tensor([1.9, 0.0, -1.0])
    out = smoothed(a, torch.tensor(-2.0), torch.tensor(2.0), 0.2, 0.5, eps=torch.tensor([1.0, 10.0, -0.5]))
    assert out.tolist() == pytest.approx([2.0, 1.0, -1.2])
    y = critic_target(
        torch.tensor([[1.0, 1.0]]), torch.tensor([False]), [torch.tensor([[3.0, 5.0]]), torch.tensor([[4.0, 2.0]])], 0.5
    )
    assert y.tolist() == [[2.5, 2.0]]  # 1 + 0.5 min(3, 4), 1 + 0.5 min(5, 2)


def test_gumbel_softmax_straight_through_forward_is_one_hot_backward_is_the_soft_sample():
    logits = torch.tensor([[0.5, 1.0, -0.3]], requires_grad=True)
    g = torch.tensor([[1.0, -0.2, 0.1]])
    w = torch.tensor([[1.0, 2.0, 3.0]])
    out = gumbel_softmax_st(logits, g, temperature=0.5)
    assert out.tolist() == [[1.0, 0.0, 0.0]]  # argmax(0.5 + 1.0, 1.0 - 0.2, -0.3 + 0.1)
    (out * w).sum().backward()
    ref = logits.detach().clone().requires_grad_(True)
    (torch.softmax((ref + g) / 0.5, -1) * w).sum().backward()
    assert torch.allclose(logits.grad, ref.grad)


# ---------------------------------------------------------------- the actor step
def _random_batch(N=2, D=3, K=2, B=16, seed=0):
    g = torch.Generator().manual_seed(seed)
    r = lambda *s: torch.rand(*s, generator=g) * 2 - 1  # noqa: E731
    return one_step(N, r(B, N, D), r(B, N, D), r(B, N), torch.rand(B, generator=g) < 0.3, r(B, N, K))


def _grads(critic, actor_due, twin=False):
    torch.manual_seed(0)
    space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
    m = module(3, 3 + 2 if critic == "obs" else 2 * 3 + 2 * 2 + 2, space, twin)
    loss, _ = ddpg_losses({"shared": m}, _random_batch(), cfg(critic=critic, target_noise=0.2), actor_due)
    loss.backward()
    return {n: None if p.grad is None else p.grad.clone() for n, p in m.named_parameters()}


@pytest.mark.parametrize("critic, twin", [("obs", False), ("joint_obs", True)])
def test_actor_loss_never_moves_the_critic_and_skipped_actor_steps_leave_the_actor(critic, twin):
    with_actor, without = _grads(critic, True, twin), _grads(critic, False, twin)
    critic_names = [n for n in with_actor if n.startswith("critics.")]
    assert critic_names and all(torch.equal(with_actor[n], without[n]) for n in critic_names)
    actor_names = [n for n in with_actor if n.startswith("actor.")]
    assert all(with_actor[n] is not None and with_actor[n].abs().sum() > 0 for n in actor_names)
    assert all(without[n] is None for n in actor_names)
    assert all(g is None for n, g in with_actor.items() if "target" in n)


def test_actor_steps_every_policy_delay_th_gradient_step():
    """The schedule's targets (and with them the actor) come after every policy_delay-th gradient step."""
    for algo, delay in (("matd3", 2), ("maddpg", 1)):
        c = load_config(algo, None)
        assert c.policy_delay == delay
        schedule = DDPG.update_schedule(SimpleNamespace(cfg=c))
        progress = schedule.initial_progress()
        due = []
        for _ in range(6):
            progress["updates"] += 1
            due.append(actor_step_due(schedule.target_tau(progress, False, 0)))
        assert due == [(i + 1) % delay == 0 for i in range(6)], (algo, due)


def test_acting_explores_within_bounds_and_evaluates_greedily():
    torch.manual_seed(0)
    space = gym.spaces.Box(np.array([-1.0, 0.0], np.float32), np.array([1.0, 3.0], np.float32))
    m = module(3, 5, space)
    obs = torch.rand(64, 2, 3)
    a, logp, h = m.act(obs, None, None, explore=True, noise=5.0)
    assert a.shape == (64, 2, 2) and h is None and torch.equal(logp, torch.zeros(64, 2))
    assert (a[..., 0] >= -1).all() and (a[..., 0] <= 1).all() and (a[..., 1] >= 0).all() and (a[..., 1] <= 3).all()
    assert (a == torch.tensor([1.0, 3.0])).any()  # large noise is clipped onto the bounds
    greedy = m.act(obs, None, None, explore=False, noise=5.0)[0]
    assert torch.equal(greedy, m.act(obs, None, None, explore=False)[0])
    d = module(3, 5, gym.spaces.Discrete(4))
    avail = torch.tensor([False, True, False, True]).expand(64, 2, 4)
    sampled = d.act(obs, avail, None, explore=True)[0]
    assert sampled.dtype == torch.int64 and set(sampled.unique().tolist()) <= {1, 3}
    assert set(d.act(obs, avail, None, explore=False)[0].unique().tolist()) <= {1, 3}


def test_random_actions_are_uniform_in_the_bounds_or_over_the_available_actions():
    """``random_actions`` (the first ``random_steps``): actions uniform in each dimension's bounds whatever the
    actor says (mean and std of U(low, high): (low + high) / 2 and (high - low) / sqrt(12)), uniform over the
    available discrete actions although the actor strongly prefers one; greedy evaluation ignores it."""
    torch.manual_seed(0)
    space = gym.spaces.Box(np.array([-1.0, 0.0], np.float32), np.array([1.0, 3.0], np.float32))
    m = module(3, 5, space)
    m.actor = constant_actor(5.0, k=2)  # tanh(5) = 0.9999: the actor's actions sit on the upper bounds
    obs = torch.rand(4096, 2, 3)
    a, logp, _ = m.act(obs, None, None, explore=True, noise=0.1, random_actions=1.0)
    flat = a.reshape(-1, 2)
    assert torch.equal(logp, torch.zeros(4096, 2))
    assert (flat >= torch.tensor([-1.0, 0.0])).all() and (flat <= torch.tensor([1.0, 3.0])).all()
    assert torch.allclose(flat.mean(0), torch.tensor([0.0, 1.5]), atol=0.03)
    assert torch.allclose(flat.std(0), torch.tensor([2.0, 3.0]) / math.sqrt(12), rtol=0.03)
    greedy = m.act(obs, None, None, explore=False, random_actions=1.0)[0]
    assert torch.equal(greedy, m.act(obs, None, None, explore=False)[0])
    assert (greedy > torch.tensor([0.99, 2.99])).all()
    d = module(3, 5, gym.spaces.Discrete(4))
    prefers_3 = torch.nn.Linear(1, 4)
    with torch.no_grad():
        prefers_3.weight.zero_()
        prefers_3.bias.copy_(torch.tensor([0.0, 0.0, 0.0, 20.0]))
    d.actor = _AnyIn(prefers_3)
    avail = torch.tensor([True, True, False, True]).expand(4096, 2, 4)
    counts = torch.bincount(d.act(obs, avail, None, explore=True, random_actions=1.0)[0].flatten(), minlength=4)
    assert counts[2] == 0 and torch.allclose(counts[[0, 1, 3]] / counts.sum(), torch.full((3,), 1 / 3), atol=0.02)
    assert (d.act(obs, avail, None, explore=True)[0] == 3).float().mean() > 0.99  # the actor's own sample


@pytest.mark.parametrize("algo", ["maddpg", "masac"])
def test_random_steps_act_at_random_until_the_run_has_taken_them(tmp_path, algo):
    """20 env steps per iteration (4 copies x 5 steps) and ``random_steps=30``: the iterations that start at 0
    and 20 env steps act at random, the one at 40 and later with the actors (``random_actions`` in the metrics)."""
    kw = dict(rollout_length=5, batch_size=8, gradient_steps=2, per_env_steps=20, learning_starts=0, random_steps=30)
    res = TargetEnv(num_envs=4).fit(
        algo, stop={"iterations": 4}, log_dir=str(tmp_path), progress=False, checkpoint_every=0, eval_episodes=2, **kw
    )
    assert [h["random_actions"] for h in res.history] == [1.0, 1.0, 0.0, 0.0]


# ---------------------------------------------------------------- runs
LEARN = dict(
    rollout_length=5,
    batch_size=64,
    gradient_steps=20,
    per_env_steps=40,
    lr=1e-3,
    gamma=0.5,
    hidden=64,
    tau=0.01,
    exploration_noise_start=1.0,
    exploration_noise_end=0.1,
    exploration_anneal_steps=2400,
    progress=False,
    checkpoint_every=0,
    eval_episodes=16,
)


@pytest.mark.parametrize("algo", ["maddpg", "iddpg", "matd3"])
def test_learns_to_hit_continuous_targets(tmp_path, algo):
    """TargetEnv: 2 agents x 5 steps, reward -mean (a - c)^2. Random play returns about -16.7 per episode, the best
    blind action (a = 0) -3.3; a learned policy must beat -1 (measured: maddpg -0.045, iddpg -0.023, matd3 -0.033)."""
    res = TargetEnv(num_envs=8).fit(algo, stop={"iterations": 80}, log_dir=str(tmp_path), **LEARN)
    assert res.eval["episode_return_mean"] > -1.0, res.eval


def test_discrete_maddpg_learns_the_cued_actions(tmp_path):
    """MatchEnv, Gumbel-softmax actors: random play returns 5 * 2 / 3 = 3.3 per episode, the optimum 10; a learned
    policy must beat 8 (it reached 10.0 when measured)."""
    res = MatchEnv(num_envs=8).fit("maddpg", stop={"iterations": 120}, log_dir=str(tmp_path), **LEARN)
    assert res.eval["episode_return_mean"] > 8.0, res.eval


def brief_fit(env, algo, share, tmp_path):
    """3 iterations of 2 gradient steps each on ``env`` with policy mapping ``share``; the result."""
    kw = dict(rollout_length=5, batch_size=8, gradient_steps=2, per_env_steps=20, learning_starts=0, eval_episodes=4)
    return env.fit(
        algo, share=share, stop={"iterations": 3}, log_dir=str(tmp_path), progress=False, checkpoint_every=0, **kw
    )


def per_module(res, metric):
    """The learner metric ``metric`` of every module (``"<module>/<metric>"``), each finite."""
    values = [v for k, v in res.metrics.items() if k.endswith(f"/{metric}")]
    assert all(np.isfinite(values)), (metric, values)
    return values


@pytest.mark.parametrize("share", ["individual", "group"])
def test_discrete_maddpg_runs_with_every_share_mode(tmp_path, share):
    """Gumbel-softmax actors on MatchEnv: finite losses, one module per agent (individual) or one (group)."""
    res = brief_fit(MatchEnv(num_envs=4), "maddpg", share, tmp_path)
    assert len(per_module(res, "critic_loss")) == (2 if share == "individual" else 1)
    assert len(per_module(res, "actor_loss")) == (2 if share == "individual" else 1)


@pytest.mark.parametrize(
    "algo, env",
    [
        ("matd3", TargetEnv),
        ("facmac", TargetEnv),
        ("masac", TargetEnv),
        ("isac", MatchEnv),
        ("maddpg", ImageTargetEnv),
        ("facmac", ImageTargetEnv),
        ("masac", ImageMatchEnv),
    ],
    ids=["matd3", "facmac", "masac-box", "isac-discrete", "maddpg-image", "facmac-image", "masac-image-discrete"],
)
def test_off_policy_actor_critic_resume_is_exact_with_the_replay_buffer(ray_session, run_dir, algo, env):
    """The buffer and its sampler, and each family's own state, continue exactly: MATD3's twin critics, smoothing
    noise and delayed actor steps; FACMAC's mixer (through the losses); SAC's policy sampling and temperature;
    with structured observations, the uint8 images in the buffer and the actor's and critics' encoders."""
    _one_go_vs_resumed(
        lambda: env(num_envs=4),
        algo,
        4,
        run_dir,
        rollout_length=5,
        batch_size=8,
        gradient_steps=3,
        per_env_steps=20,
        hidden=16,
        learning_starts=0,
    )
