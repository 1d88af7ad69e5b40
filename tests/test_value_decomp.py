"""IQL / VDN / QMIX: unit properties (docs/algorithms/value_decomposition.md, "Tests"), the joint
episode buffer, and engine integration (mixers per team, checkpoints, errors)."""

import itertools

import numpy as np
import pytest
import torch

import marl
from marl import api
from marl.algos.networks.mixers import QMixer
from marl.algos.networks.rnn import RNNAgent
from marl.algos.q_learning import double_q_next, epsilon_at, epsilon_greedy, masked_td_loss, td_lambda_targets
from marl.algos.value_decomp import QAgentModule, ValueDecomp, split_joint
from marl.algos.value_decomp_inputs import PackedEpisodes, agent_inputs
from marl.engine.replay import JointEpisodeBuffer
from marl.engine.rllib_seam import local_learner
from marl.env import MarlError
from marl.policy import Policy


# --------------------------------------------------------------------------- mixer
@pytest.mark.parametrize("layers", [1, 2])
def test_qmix_mixer_is_monotonic_for_random_parameters(layers):
    torch.manual_seed(0)
    for _ in range(5):
        mixer = QMixer(n_agents=4, state_dim=7, embed=8, hypernet_layers=layers)
        for p in mixer.parameters():
            torch.nn.init.normal_(p, std=2.0)  # random, untrained parameters of both signs
        q = torch.randn(64, 4, requires_grad=True)
        s = torch.randn(64, 7)
        (grad,) = torch.autograd.grad(mixer(q, s).sum(), q)
        assert (grad >= -1e-7).all()
        for a in range(4):
            bumped = q.detach().clone()
            bumped[:, a] += 0.5
            assert (mixer(bumped, s) >= mixer(q.detach(), s) - 1e-6).all()


def test_qmix_argmax_of_q_tot_equals_per_agent_argmax():
    torch.manual_seed(1)
    mixer = QMixer(n_agents=3, state_dim=5, embed=16)
    s = torch.randn(5)
    q = torch.randn(3, 4)  # 3 agents, 4 actions
    joint = list(itertools.product(range(4), repeat=3))
    qs = torch.stack([q[torch.arange(3), torch.tensor(u)] for u in joint])
    q_tot = mixer(qs, s.expand(len(joint), 5))
    assert joint[int(q_tot.argmax())] == tuple(q.argmax(-1).tolist())


def test_mixer_shapes_and_time_flattening():
    torch.manual_seed(2)
    mixer = QMixer(n_agents=3, state_dim=6)
    q, s = torch.randn(4, 9, 3), torch.randn(4, 9, 6)
    out = mixer(q, s)
    assert out.shape == (4, 9)
    per_t = torch.stack([mixer(q[:, t], s[:, t]) for t in range(9)], 1)
    assert torch.allclose(out, per_t, atol=1e-6)


# --------------------------------------------------------------------------- targets
def test_td_lambda_zero_is_one_step_target():
    r = torch.tensor([[1.0, 2.0, 3.0, 0.0]])
    nq = torch.tensor([[10.0, 20.0, 30.0, 99.0]])
    filled = torch.tensor([[True, True, True, False]])
    term = torch.tensor([[False, False, True, False]])
    y = td_lambda_targets(r, term, filled, nq, gamma=0.5, lam=0.0)
    assert torch.allclose(y[0, :3], torch.tensor([1 + 0.5 * 10, 2 + 0.5 * 20, 3.0]))


def test_td_lambda_one_is_monte_carlo_return_on_terminated_episode():
    r = torch.tensor([[1.0, 2.0, 4.0]])
    nq = torch.tensor([[100.0, 100.0, 100.0]])  # must not matter
    y = td_lambda_targets(r, torch.tensor([[False, False, True]]), torch.ones(1, 3, dtype=torch.bool), nq, 0.9, 1.0)
    assert torch.allclose(y[0], torch.tensor([1 + 0.9 * 2 + 0.81 * 4, 2 + 0.9 * 4, 4.0]))


def test_td_lambda_hand_computed_truncated_episode_bootstraps():
    # two steps, truncated (not terminated) after the 2nd: G_1 = r1 + g*q2, G_0 = r0 + g*((1-l) q1 + l G_1)
    r = torch.tensor([[1.0, 2.0]])
    nq = torch.tensor([[3.0, 5.0]])
    y = td_lambda_targets(r, torch.zeros(1, 2, dtype=torch.bool), torch.ones(1, 2, dtype=torch.bool), nq, 0.5, 0.5)
    g1 = 2 + 0.5 * 5
    g0 = 1 + 0.5 * (0.5 * 3 + 0.5 * g1)
    assert torch.allclose(y[0], torch.tensor([g0, g1]))


def test_td_lambda_broadcasts_over_agents_for_iql():
    r = torch.ones(2, 3, 4)
    nq = torch.randn(2, 3, 4)
    term = torch.zeros(2, 3, dtype=torch.bool)
    y = td_lambda_targets(r, term, torch.ones(2, 3, dtype=torch.bool), nq, 0.9, 0.3)
    for a in range(4):
        ya = td_lambda_targets(r[..., a], term, torch.ones(2, 3, dtype=torch.bool), nq[..., a], 0.9, 0.3)
        assert torch.allclose(y[..., a], ya)


def test_double_q_takes_argmax_from_online_and_value_from_target():
    online = torch.tensor([[1.0, 5.0, 3.0]])
    target = torch.tensor([[10.0, 20.0, 30.0]])
    assert double_q_next(online, target, None).item() == 20.0
    avail = torch.tensor([[True, False, True]])  # the online argmax is illegal: next best legal (index 2)
    assert double_q_next(online, target, avail).item() == 30.0


def test_masked_loss_ignores_padding_even_nan():
    q = torch.tensor([[1.0, 2.0, float("nan")]], requires_grad=True)
    nq = torch.tensor([[0.5, 0.0, float("nan")]])
    r = torch.tensor([[0.0, 1.0, float("nan")]])
    filled = torch.tensor([[True, True, False]])
    term = torch.tensor([[False, True, False]])
    loss, y = masked_td_loss(q, nq, r, term, filled, filled, gamma=1.0, lam=0.0)
    # y = [0 + 0.5, 1.0]; td = [0.5, 1.0]; mean of squares = (0.25 + 1) / 2
    assert loss.item() == pytest.approx(0.625)
    loss.backward()
    assert torch.isfinite(q.grad).all() and q.grad[0, 2] == 0


def test_split_joint_makes_views_and_counts_used_steps():
    cols = {
        "filled": torch.tensor([[True, False, False], [True, True, True]]),
        "terminated": torch.tensor([[True, False, False], [False, False, False]]),
        "state": torch.full((2, 4, 2), float("nan")),
        "m/obs": torch.full((2, 4, 2, 3), float("nan")),
        "m/actions": torch.zeros(2, 3, 2, dtype=torch.long),
    }
    out = split_joint(cols, ["m"])
    assert out["m"]["steps"].tolist() == [2, 4]  # observations up to and including index length
    assert out["m"]["obs"] is cols["m/obs"] and out["__joint__"]["state"] is cols["state"]  # no copies


# ------------------------------------------------------------- fast learner == straightforward reference
def _unroll(net, x):
    """``x [E, T+1, N, D]`` through the recurrent ``net`` along time, one sequence per agent -> ``[E, T+1, N, A]``."""
    E, T1, N, _ = x.shape
    return net.unroll(x.permute(0, 2, 1, 3).reshape(E * N, T1, -1)).reshape(E, N, T1, -1).permute(0, 2, 1, 3)


def _reference_loss(learner, split):
    """The learner's loss as written before the speed-ups: padding zeroed, every padded step through
    the GRU (``unroll``), the mixers on the whole padded batch with an einsum."""
    layout, cfg, j = learner.run.family, learner.cfg, split["__joint__"]
    filled, term = j["filled"], j["terminated"].bool()
    valid = torch.cat([torch.ones_like(filled[:, :1]), filled], 1)
    state = torch.where(valid.unsqueeze(-1), j["state"], 0.0)
    terms = {}
    for mid in layout.modules:
        mod, b = learner.module[mid].unwrapped(), split[mid]
        obs = torch.where(valid[..., None, None], b["obs"], 0.0)
        last = torch.nn.functional.one_hot(b["actions"].long(), mod.n_actions).float()
        x = torch.cat([obs, torch.cat([torch.zeros_like(last[:, :1]), last], 1)], -1)
        q, qt = _unroll(mod.net, x), _unroll(mod.target, x).detach()
        q_taken = q[:, :-1].gather(-1, b["actions"].long().unsqueeze(-1)).squeeze(-1)
        q_next = double_q_next(q[:, 1:].detach(), qt[:, 1:], b["avail"][:, 1:].bool())
        terms[mid] = (q_taken, q_next, b["rewards"])

    def mix(m, qs, s):
        w1 = m.hyper_w1(s).abs().view(*s.shape[:-1], m.n, m.embed)
        h = torch.nn.functional.elu(torch.einsum("...n,...ne->...e", qs, w1) + m.hyper_b1(s))
        return (h * m.hyper_w2(s).abs()).sum(-1) + m.value(s).squeeze(-1)

    total = 0.0
    for team, members in layout.teams.items():
        q_taken, q_next, r = (torch.stack([terms[mid][k][..., i] for mid, i in members], -1) for k in range(3))
        r = torch.where(filled.unsqueeze(-1), r, 0.0)
        r = r.mean(-1) if layout.team_reward == "mean" else r.sum(-1)
        mixer = learner.module[f"mixer_{team}"].unwrapped()
        q_tot, next_tot = mix(mixer.net, q_taken, state[:, :-1]), mix(mixer.target, q_next, state[:, 1:])
        total = total + masked_td_loss(q_tot, next_tot, r, term, filled, filled, cfg.gamma, cfg.td_lambda)[0]
    return total


def _random_joint_batch(layout, E, seed):
    """Joint columns of ``E`` episodes of random lengths; NaN everywhere past an episode's end."""
    g = torch.Generator().manual_seed(seed)
    L = layout.episode_limit
    lengths = torch.randint(1, L + 1, (E,), generator=g)
    lengths[0] = L
    filled = torch.arange(L) < lengths.unsqueeze(-1)
    valid = torch.cat([torch.ones(E, 1, dtype=torch.bool), filled], 1)
    term = filled & ~torch.cat([filled[:, 1:], torch.zeros(E, 1, dtype=torch.bool)], 1) & (lengths < L).unsqueeze(-1)

    def pad(x, mask):
        return torch.where(mask.view(*mask.shape, *[1] * (x.dim() - 2)), x, float("nan"))

    cols = {
        "filled": filled,
        "terminated": term,
        "state": pad(torch.randn(E, L + 1, layout.state_dim, generator=g), valid),
    }
    for m, s in layout.shapes.items():
        n, A = s["n"], s["n_actions"]
        cols[f"{m}/obs"] = pad(torch.randn(E, L + 1, n, s["obs_dim"], generator=g), valid)
        avail = torch.rand(E, L + 1, n, A, generator=g) < 0.7
        avail[..., 0] = True
        cols[f"{m}/avail"] = avail
        cols[f"{m}/actions"] = torch.randint(0, A, (E, L, n), generator=g)
        cols[f"{m}/rewards"] = pad(torch.randn(E, L, n, generator=g), filled)
        cols[f"{m}/alive"] = torch.ones(E, L, n, dtype=torch.bool)
    return cols


def test_fast_learner_loss_and_gradients_equal_the_padded_reference(ray_session, tmp_path):
    """Packed GRU over the used steps only, mixers on filled steps only, no zeroing copies: the same
    loss and gradients (1e-5) as the straightforward padded computation, on random episodes whose
    padding is NaN."""
    env = marl.make_env("mpe", "simple_spread", num_envs=2)
    trainer, *_ = api.build_trainer(
        env, "qmix", rollout_length=4, buffer_size=20, batch_size=4, log_dir=str(tmp_path), progress=False
    )
    try:
        learner = local_learner(trainer.learner_group)
        params = [
            p for mid in learner.module.keys() for p in learner.module[mid].unwrapped().parameters() if p.requires_grad
        ]
        for seed in range(3):
            for p in params:  # random weights (targets too) so that online and target nets differ
                torch.nn.init.normal_(p, std=0.2)
            for mid in learner.module.keys():
                mod = learner.module[mid].unwrapped()
                for t in mod.target.parameters():
                    torch.nn.init.normal_(t, std=0.2)
            split = split_joint(_random_joint_batch(learner.run.family, 16, seed), list(learner.run.family.modules))
            fast = learner.compute_losses(fwd_out=learner.module.forward_train(split), batch=split)
            fast = next(iter(fast.values()))
            g_fast = torch.autograd.grad(fast, params)
            ref = _reference_loss(learner, split)
            g_ref = torch.autograd.grad(ref, params)
            assert torch.isfinite(fast) and abs(fast.item() - ref.item()) <= 1e-5 * max(1.0, abs(ref.item()))
            for a, b in zip(g_fast, g_ref):  # float32 sums in another order: 1e-5 of the gradient's scale
                assert (a - b).abs().max() <= 1e-5 * max(1.0, b.abs().max().item())
    finally:
        trainer.stop()


@pytest.mark.parametrize("n_actions", [0, 4])
def test_packed_episode_inputs_equal_the_padded_inputs_at_used_steps(n_actions):
    torch.manual_seed(5)
    E, T, N, D = 5, 7, 3, 2
    obs, actions = torch.randn(E, T + 1, N, D), torch.randint(0, 4, (E, T, N))
    steps = torch.tensor([8, 1, 4, 8, 2])
    packed = PackedEpisodes(steps, N, T + 1)
    padded = agent_inputs(obs, actions, n_actions).view(E, N, T + 1, -1).transpose(1, 2)
    used = (torch.arange(T + 1) < steps.unsqueeze(-1)).view(E, T + 1, 1, 1)
    assert packed.batch_sizes.tolist() == [15, 12, 9, 9, 6, 6, 6, 6]  # rows still running at each step
    assert torch.equal(packed.unpack(packed.inputs(obs, actions, n_actions)), torch.where(used, padded, 0.0))


def test_packed_sequence_equals_unroll_on_used_steps():
    torch.manual_seed(4)
    for recurrent in (True, False):
        net = RNNAgent(5, 3, 8, recurrent=recurrent)
        x, lengths = torch.randn(6, 9, 5), torch.tensor([9, 1, 4, 9, 2, 7])
        used = torch.arange(9) < lengths.unsqueeze(-1)
        fast = net.sequence(torch.where(used.unsqueeze(-1), x, float("nan")), lengths)
        assert torch.allclose(fast[used], net.unroll(x)[used], atol=1e-6, rtol=0)
        assert (fast[~used] == 0).all()


# --------------------------------------------------------------------------- exploration
def test_epsilon_schedule_is_linear_then_flat():
    assert epsilon_at(0, 1.0, 0.05, 1000) == 1.0
    assert epsilon_at(500, 1.0, 0.05, 1000) == pytest.approx(0.525)
    assert epsilon_at(1000, 1.0, 0.05, 1000) == pytest.approx(0.05)
    assert epsilon_at(10**9, 1.0, 0.05, 1000) == pytest.approx(0.05)


@pytest.mark.parametrize("eps", [0.0, 0.3, 1.0])
def test_epsilon_greedy_never_picks_unavailable_actions(eps):
    g = torch.Generator().manual_seed(0)
    q = torch.randn(2000, 5, generator=g)
    avail = torch.rand(2000, 5, generator=g) < 0.5
    avail[:, 3] = True  # at least one legal action per row
    a = epsilon_greedy(q, avail, eps, generator=g)
    assert avail.gather(1, a.unsqueeze(1)).all()
    if eps == 1.0:  # uniform over the legal actions: every legal action shows up
        assert len(set(a.tolist())) == 5


def test_greedy_act_takes_masked_argmax():
    module = QAgentModule(
        observation_space=None,
        action_space=None,
        inference_only=True,
        model_config={"obs_dim": 3, "n_actions": 4, "hidden": 8, "recurrent": True, "last_action": True},
    )
    obs = torch.randn(5, 2, 3)
    h = module.initial_state((5, 2))
    avail = torch.tensor([True, False, True, False]).expand(5, 2, 4)
    a, _, _ = module.act(obs, avail, h, explore=True, epsilon=0.0)
    assert set(a.flatten().tolist()) <= {0, 2}


def test_stepwise_acting_equals_training_unroll():
    """The runner's step-by-step acting (GRU state + last action carried in ``h``)
    computes the same Q-values as the learner's whole-episode unroll."""
    torch.manual_seed(3)
    cfg = {"obs_dim": 4, "n_actions": 3, "hidden": 16, "recurrent": True, "last_action": True}
    module = QAgentModule(observation_space=None, action_space=None, inference_only=False, model_config=cfg)
    E, T, N = 2, 6, 3
    obs = torch.randn(E, T + 1, N, 4)
    h = module.initial_state((E, N))
    acts, qs = [], []
    for t in range(T + 1):
        x = obs[:, t].reshape(E * N, 4)
        H = module.net.hidden
        q, hid = module.net.step(torch.cat([x, h.reshape(E * N, -1)[:, H:]], -1), h.reshape(E * N, -1)[:, :H])
        qs.append(q.reshape(E, N, 3))
        a, _, h = module.act(obs[:, t], None, h, explore=True, epsilon=0.5)
        acts.append(a)
    q_seq = module.q_sequence(module.net, obs, torch.stack(acts[:T], 1))
    assert torch.allclose(q_seq, torch.stack(qs, 1), atol=1e-5)


def test_agent_net_mlp_variant_shapes():
    net = RNNAgent(5, 3, 8, recurrent=False)
    q, h = net.step(torch.randn(4, 5), None)
    assert q.shape == (4, 3) and h is None
    assert net.sequence(torch.randn(2, 7, 5)).shape == (2, 7, 3)


# --------------------------------------------------------------------------- buffer
def _rollout(T, B, starts, done, term, t0=0):
    """A fake runner rollout for one module ``m`` (N=2, D=1, A=3): obs value = global time."""
    t = torch.arange(t0, t0 + T + 1, dtype=torch.float32)
    obs = t.view(-1, 1, 1, 1).expand(T + 1, B, 2, 1).clone()
    return {
        "starts": torch.tensor(starts),
        "terminated": torch.tensor(term),
        "truncated": torch.tensor(done) & ~torch.tensor(term),
        "state": t.view(-1, 1, 1).expand(T + 1, B, 1).clone(),
        "final_state": torch.full((T, B, 1), -1.0),
        "modules": {
            "m": {
                "obs": obs,
                "final_obs": torch.full((T, B, 2, 1), -1.0),
                "actions": t[:T].long().view(-1, 1, 1).expand(T, B, 2).clone(),
                "rewards": torch.ones(T, B, 2),
                "alive": torch.ones(T, B, 2, dtype=torch.bool),
                "avail": torch.ones(T, B, 2, 3, dtype=torch.bool),
                "final_avail": torch.zeros(T, B, 2, 3, dtype=torch.bool),
            }
        },
    }


def _buffer(capacity=8, B=2, limit=4):
    return JointEpisodeBuffer(capacity, limit, B, {"m": {"n": 2, "obs_dim": 1, "n_actions": 3}}, 1)


def test_buffer_reassembles_episodes_spanning_rollouts():
    buf = _buffer()
    # env 0: episode of 3 steps (t=0..2, terminated); env 1: 2 steps truncated then a new one
    r1 = _rollout(
        2,
        2,
        starts=[[True, True], [False, False]],
        done=[[False, False], [False, True]],
        term=[[False, False], [False, False]],
    )
    assert buf.add_rollout(r1) == 1
    r2 = _rollout(
        2,
        2,
        starts=[[False, True], [False, False]],
        done=[[True, False], [False, False]],
        term=[[True, False], [False, False]],
        t0=2,
    )
    assert buf.add_rollout(r2) == 1
    assert len(buf) == 2
    lengths = sorted(buf.lengths[buf.committed].tolist())
    assert lengths == [2, 3]
    s = np.flatnonzero(buf.committed & (buf.lengths == 3))[0]
    d = buf.data
    assert d["m/obs"][s, :3, 0, 0].tolist() == [0, 1, 2]  # aligned across the two rollouts
    assert d["m/obs"][s, 3, 0, 0] == -1  # the final observation sits at index length
    assert not d["m/final_avail" if "m/final_avail" in d else "m/avail"][s, 3].any()
    assert d["terminated"][s].tolist() == [False, False, True, False]
    s2 = np.flatnonzero(buf.committed & (buf.lengths == 2))[0]
    assert not d["terminated"][s2].any()  # truncation is not termination
    assert d["filled"][s2].tolist() == [True, True, False, False]


def test_buffer_capacity_evicts_oldest_and_samples_shapes():
    buf = _buffer(capacity=5, B=1, limit=2)
    for k in range(9):  # nine one-step episodes
        buf.add_rollout(_rollout(1, 1, [[True]], [[True]], [[True]], t0=k))
    assert len(buf) == 5
    kept = sorted(buf.data["m/obs"][buf.committed, 0, 0, 0].tolist())
    assert kept == list(range(9 - len(buf), 9))  # the newest ones
    b = buf.sample(3, np.random.default_rng(0))
    assert b["m/obs"].shape == (3, 2, 2, 1) and b["m/actions"].shape == (3, 1, 2) and b["state"].shape == (3, 2, 1)


def test_buffer_rejects_episode_longer_than_limit_and_tiny_capacity():
    with pytest.raises(MarlError, match="buffer_size"):
        _buffer(capacity=4, B=2)
    buf = _buffer(capacity=8, B=1, limit=2)
    with pytest.raises(MarlError, match="episode_limit"):
        buf.add_rollout(_rollout(3, 1, [[True], [False], [False]], [[False]] * 3, [[False]] * 3))


def test_buffer_state_round_trip():
    buf = _buffer(capacity=8, B=1, limit=2)
    for k in range(4):
        buf.add_rollout(_rollout(1, 1, [[True]], [[True]], [[k % 2 == 0]], t0=k))
    other = _buffer(capacity=8, B=1, limit=2)
    other.set_state(buf.get_state())
    assert len(other) == len(buf) == 4
    a = sorted(buf.data["m/obs"][buf.committed, 0, 0, 0].tolist())
    assert sorted(other.data["m/obs"][other.committed, 0, 0, 0].tolist()) == a
    assert other.episodes_added == 4
    with pytest.raises(MarlError):
        _buffer(capacity=8, B=1, limit=3).set_state(buf.get_state())


# --------------------------------------------------------------------------- engine
def test_value_decomposition_rejects_continuous_actions():
    env = marl.make_env("mpe", "simple_spread", num_envs=2, continuous_actions=True)
    with pytest.raises(MarlError, match="discrete actions"):
        api.prepare(env, "qmix", {})


def test_unknown_mixer_is_an_error():
    env = marl.make_env("matrix", "climbing", num_envs=2)
    with pytest.raises(MarlError, match="Unknown mixer 'qmx'.*qmix"):
        api.prepare(env, "qmix", {"mixer": "qmx"})


def test_competitive_env_gets_one_mixer_per_team():
    env = marl.make_env("mpe", "simple_tag", num_envs=2)
    cfg, algo_cls, env, mapping = api.prepare(env, "qmix", {})
    layout = ValueDecomp.team_layout(mapping)
    assert len(layout) == 2  # adversaries and good agents are separate teams
    specs = ValueDecomp.extra_module_specs(cfg, mapping)
    assert sorted(specs) == sorted(f"mixer_{t}" for t in layout)
    for team, members in layout.items():
        assert specs[f"mixer_{team}"].model_config["n_agents"] == len(members)


def test_learners_and_runners_get_the_typed_config_and_run_context_and_both_pickle():
    """RLlib deep-copies learner_config_dict into remote runners and learners: the typed config and
    the RunContext (with the family's ValueDecompLayout) must survive pickling."""
    import pickle

    from marl.algos.value_decomp import ValueDecompConfig, ValueDecompLayout

    env = marl.make_env("mpe", "simple_tag", num_envs=2)
    cfg, algo_cls, env, mapping = api.prepare(env, "qmix", {"batch_size": 8})
    carried = pickle.loads(pickle.dumps(algo_cls.build_config(cfg, env, mapping).learner_config_dict))
    assert set(carried) == {"config", "run"} and isinstance(carried["config"], ValueDecompConfig)
    assert carried["config"] == cfg and carried["config"].batch_size == 8
    run = carried["run"]
    assert run.agent_to_module == dict(mapping.agent_to_module) and run.num_envs == 2 and run.env_spec == env.spec
    assert isinstance(run.family, ValueDecompLayout) and run.family.teams == ValueDecomp.team_layout(mapping)
    assert run.family.modules == list(mapping.modules) and set(run.module_spaces) == set(mapping.modules)


def test_module_spanning_teams_is_an_error():
    env = marl.make_env("matrix", "climbing", num_envs=2)
    cfg, algo_cls, env, mapping = api.prepare(env, "qmix", {})
    env.info.groups["agent"].team = "a"  # pretend a two-team env with one shared module
    from marl.env import GroupInfo
    import copy

    info = copy.deepcopy(env.info)
    g = info.groups.pop("agent")
    info.groups["a"] = GroupInfo("a", [g.agents[0]], g.obs_space, g.action_space, team="red")
    info.groups["b"] = GroupInfo("b", [g.agents[1]], g.obs_space, g.action_space, team="blue")
    mapping = marl.PolicyMapping(info, share="all")
    with pytest.raises(MarlError, match="teams.*share='group'"):
        ValueDecomp.check_mapping(cfg, mapping)


def test_target_sync_schedule_and_buffer_checkpoint(ray_session, tmp_path):
    env = marl.make_env("matrix", "climbing", num_envs=8)
    trainer, env, mapping, cfg = api.build_trainer(
        env,
        "vdn",
        rollout_length=4,
        batch_size=16,
        episodes_per_update=8,
        target_update_interval=40,
        buffer_size=200,
        log_dir=str(tmp_path),
        progress=False,
    )
    try:
        learner = local_learner(trainer.learner_group)
        mod = learner.module["shared"].unwrapped()

        def same():
            return all(
                torch.equal(a, b) for a, b in zip(mod.net.state_dict().values(), mod.target.state_dict().values())
            )

        synced, equal = [], []
        for _ in range(6):  # 8 copies x 4 steps = 32 one-step episodes per iteration, 4 updates each
            before = trainer.progress["last_target_sync"]
            trainer.train()
            synced.append(trainer.progress["last_target_sync"] != before)
            equal.append(same())
        # 40 episodes since the last copy are first reached at 64 episodes (iteration 2), then at 128, 192
        assert synced == [False, True, False, True, False, True]
        assert equal == synced  # right after a copy the target equals the online net; before it, it lags
        assert trainer.progress["last_target_sync"] == 192
        n = len(trainer.buffer)
        path = trainer.save_to_path(str(tmp_path / "ckpt"))
        trainer2, *_ = api.build_trainer(
            marl.make_env("matrix", "climbing", num_envs=8),
            "vdn",
            rollout_length=4,
            buffer_size=200,
            log_dir=str(tmp_path),
            progress=False,
        )
        try:
            trainer2.restore_from_path(path)
            assert len(trainer2.buffer) == n
            assert trainer2.progress["updates"] == trainer.progress["updates"]
        finally:
            trainer2.stop()
    finally:
        trainer.stop()


def test_merge_moments_matches_numpy():
    from marl.algos.q_learning import merge_moments

    x = torch.randn(1000) * 3 + 2
    stats = [0.0, 0.0, 0.0]
    for chunk in x.split(137):
        stats = merge_moments(stats, chunk)
    n, mean, m2 = stats
    assert n == 1000 and mean == pytest.approx(float(x.double().mean()), abs=1e-9)
    assert (m2 / n) ** 0.5 == pytest.approx(float(x.double().std(unbiased=False)), rel=1e-9)


class Scripted(Policy):
    """A hand-written policy, ``rule(step, t) -> actions``, evaluated the way a trained one is."""

    def __init__(self, mapping, rule):
        super().__init__(mapping, {})
        self.rule, self.t = rule, 0

    def reset(self):
        self.t = 0

    def act(self, step, *unused):
        self.t += 1
        return self.rule(step, self.t)


def test_qmix_and_mappo_train_on_smax(ray_session, tmp_path):
    """The StarCraft-style data path end to end: masks, win rate, mixer on the world state. Enemies that
    never shoot make the outcomes of scripted play certain, so the evaluated win rate is known by hand."""
    pytest.importorskip("jaxmarl")
    from marl.envs.smax import STOP_ACTION
    from test_smax import focus_fire

    env = marl.make_env("smax", "3m", num_envs=8, enemy_shoots=False)  # one XLA compile for every run below
    res = env.fit(
        "qmix",
        stop={"iterations": 3},
        rollout_length=50,
        batch_size=8,
        episodes_per_update=4,
        log_dir=str(tmp_path),
        progress=False,
        eval_episodes=4,
    )
    m = res.metrics
    assert m["updates"] > 0 and np.isfinite(m["team/td_loss"])
    assert "win_rate_mean" in m and "win_rate_mean" in res.eval
    # focus fire wins every battle; each ally is paid all enemy health (1) plus the win bonus (1): 3 x 2
    won = Scripted(res.policy.mapping, focus_fire).evaluate_episodes(8, env=env)
    assert won["win_rate_mean"] == 1.0 and won["episode_return_mean"] == pytest.approx(6.0, abs=1e-4), won
    # standing still: nobody is hurt, every battle times out at max_steps (100) without a win
    stop = Scripted(res.policy.mapping, lambda s, t: {"ally": torch.full(s.alive["ally"].shape, STOP_ACTION)})
    idle = stop.evaluate_episodes(8, env=env)
    assert (idle["win_rate_mean"], idle["episode_return_mean"], idle["episode_length_mean"]) == (0.0, 0.0, 100.0), idle
    res = env.fit(
        "mappo",
        stop={"iterations": 1},
        rollout_length=20,
        epochs=1,
        log_dir=str(tmp_path),
        progress=False,
        eval_episodes=2,
    )
    assert np.isfinite(res.metrics["shared/policy_loss"]) and "win_rate_mean" in res.eval


def test_individual_networks_and_one_mixer_per_side_train(ray_session, tmp_path):
    """share='individual' gives every agent its own Q-network under one mixer; a
    competitive env (simple_tag) trains a mixer per side, each on its own reward."""
    env = marl.make_env("matrix", "climbing", num_envs=8)
    res = env.fit(
        "qmix",
        share="individual",
        stop={"iterations": 2},
        rollout_length=4,
        batch_size=16,
        log_dir=str(tmp_path),
        progress=False,
        eval_episodes=2,
    )
    assert np.isfinite(res.metrics["team/td_loss"])
    assert sorted(res.policy.modules) == ["agent_0", "agent_1"]
    env = marl.make_env("mpe", "simple_tag", num_envs=4)
    res = env.fit(
        "qmix",
        stop={"iterations": 3},
        batch_size=8,
        episodes_per_update=4,
        log_dir=str(tmp_path),
        progress=False,
        eval_episodes=2,
    )
    losses = {k for k in res.metrics if k.endswith("/td_loss")}
    assert len(losses) == 2 and all(np.isfinite(res.metrics[k]) for k in losses)
