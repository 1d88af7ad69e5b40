"""HPN / DPN / ASN agent networks: the properties of docs/algorithms/entity_networks.md ("Tests"),
their use inside QMIX and MAPPO modules, and transfer across entity counts."""

import math

import pytest
import torch

from marl.algos.networks.entity import EntityInputs
from marl.algos.networks.hpn import Merger
from marl.algos.networks.registry import build_agent_net, check_agent
from marl.env import MarlError

OWN, D_ALLY, D_ENEMY, N_NORMAL = 4, 3, 5, 6


def layout(m_ally=2, m_enemy=3, unit_type=True):
    """own [0,4) | m_ally x 3 ally features | m_enemy x 5 enemy features (last 2 = unit-type one-hot)."""
    s_enemy = OWN + m_ally * D_ALLY
    enemy = {"start": s_enemy, "count": m_enemy, "dim": D_ENEMY}
    if unit_type:
        enemy["unit_type"] = (3, 5)
    return {
        "own": [(0, OWN)],
        "entities": {"ally": {"start": OWN, "count": m_ally, "dim": D_ALLY}, "enemy": enemy},
        "n_normal_actions": N_NORMAL,
        "action_targets": {"enemy": (N_NORMAL, m_enemy)},
    }


def obs_dim(m_ally=2, m_enemy=3):
    return OWN + m_ally * D_ALLY + m_enemy * D_ENEMY


def make(kind, m_ally=2, m_enemy=3, id_dim=0, last=False, **kw):
    cfg = {
        "entity_layout": layout(m_ally, m_enemy),
        "group_obs_dim": obs_dim(m_ally, m_enemy),
        "id_dim": id_dim,
        "last_action_dim": (N_NORMAL + m_enemy) if last else 0,
        **kw,
    }
    torch.manual_seed(0)
    return build_agent_net(kind, cfg, N_NORMAL + m_enemy)


def random_obs(*lead, m_ally=2, m_enemy=3):
    x = torch.randn(*lead, obs_dim(m_ally, m_enemy))
    s = OWN + m_ally * D_ALLY
    types = torch.randint(0, 2, (*lead, m_enemy))  # a valid unit-type one-hot in each enemy block
    for j in range(m_enemy):
        x[..., s + j * D_ENEMY + 3 : s + j * D_ENEMY + 5] = torch.nn.functional.one_hot(types[..., j], 2).float()
    return x


def permute(x, perm_ally, perm_enemy, m_ally=2, m_enemy=3):
    """Reorder the entity blocks of ``x [..., D]`` (same permutation for every leading index)."""
    s = OWN + m_ally * D_ALLY
    ally = x[..., OWN:s].reshape(*x.shape[:-1], m_ally, D_ALLY)[..., perm_ally, :]
    enemy = x[..., s:].reshape(*x.shape[:-1], m_enemy, D_ENEMY)[..., perm_enemy, :]
    return torch.cat([x[..., :OWN], ally.flatten(-2), enemy.flatten(-2)], -1)


HPN_KINDS = [("hpn", {}), ("hpn", {"hpn_heads": 2}), ("dpn", {}), ("dpn", {"dpn_hard": True})]


# ------------------------------------------------------------------ HPN / DPN
@pytest.mark.parametrize("kind,kw", HPN_KINDS)
def test_hpn_normal_outputs_and_state_are_permutation_invariant_every_step(kind, kw):
    net = make(kind, **kw)
    x = random_obs(7, 6)  # 7 sequences of 6 steps
    h, h_perm = torch.zeros(7, 64), torch.zeros(7, 64)
    g = torch.Generator().manual_seed(1)
    for t in range(6):  # a new permutation at every step
        pa, pe = torch.randperm(2, generator=g), torch.randperm(3, generator=g)
        q, h = net.step(x[:, t], h)
        qp, h_perm = net.step(permute(x[:, t], pa, pe), h_perm)
        assert torch.allclose(q[:, :N_NORMAL], qp[:, :N_NORMAL], atol=1e-5)
        assert torch.allclose(h, h_perm, atol=1e-5)
        assert torch.allclose(qp[:, N_NORMAL:], q[:, N_NORMAL:][:, pe], atol=1e-5)  # attack j follows enemy j


@pytest.mark.parametrize("kind,kw", HPN_KINDS)
def test_hpn_targeted_outputs_ignore_ally_order(kind, kw):
    net = make(kind, **kw)
    x = random_obs(9)
    q, _ = net.step(x, torch.zeros(9, 64))
    qp, _ = net.step(permute(x, torch.tensor([1, 0]), torch.arange(3)), torch.zeros(9, 64))
    assert torch.allclose(q, qp, atol=1e-5)


@pytest.mark.parametrize("kind,kw", HPN_KINDS)
def test_hpn_zero_padded_entities_change_nothing_and_any_count_runs(kind, kw):
    net = make(kind, **kw)
    big = make(kind, m_ally=4, m_enemy=5, **kw)
    big.load_state_dict(net.state_dict())  # the parameters do not depend on the entity counts
    x = random_obs(5)
    s = OWN + 2 * D_ALLY
    padded = torch.cat([x[:, :s], torch.zeros(5, 2 * D_ALLY), x[:, s:], torch.zeros(5, 2 * D_ENEMY)], -1)
    q, h = net.step(x, torch.zeros(5, 64))
    qb, hb = big.step(padded, torch.zeros(5, 64))
    assert qb.shape == (5, N_NORMAL + 5)
    assert torch.allclose(q, qb[:, : N_NORMAL + 3], atol=1e-5)
    assert torch.allclose(h, hb, atol=1e-5)
    one = make(kind, m_ally=0, m_enemy=1, **kw)
    one.load_state_dict(net.state_dict())
    assert one.step(random_obs(3, m_ally=0, m_enemy=1), None)[0].shape == (3, N_NORMAL + 1)


@pytest.mark.parametrize("kind", ["hpn", "dpn"])
def test_pooled_input_layer_equals_explicit_generated_weights(kind):
    """sum_j x_j^T W_in(x_j), computed without building W_in, equals the explicit hypernetwork form."""
    hyper = make(kind, hpn_heads=2).hyper["enemy"]
    x = torch.randn(4, 3, D_ENEMY)
    z = hyper.codes(x)
    explicit = torch.einsum("bmd,bmdo->bo", x, hyper.input_weights(z)).view(4, 2, 64)
    assert torch.allclose(hyper.pool(x, z), explicit, atol=1e-4)
    w_out = hyper.w_out(z).view(4, 3, 64, 2)
    h = torch.randn(4, 64)
    explicit_q = (torch.einsum("bo,bmoh->bmh", h, w_out) + hyper.b_out(z)).mean(-1)
    assert torch.allclose(hyper.targeted_values(h, z), explicit_q, atol=1e-4)


def test_merger_identity_for_one_head_and_convex_for_several():
    x = torch.randn(5, 1, 8)
    assert torch.equal(Merger(1, 8)(x), x.squeeze(1))
    m = Merger(3, 8)
    with torch.no_grad():
        m.weight.copy_(torch.randn(1, 3, 8))
    x = torch.randn(5, 3, 8)
    w = torch.softmax(m.weight, 1)
    assert torch.allclose(w.sum(1), torch.ones(1, 8))
    assert torch.allclose(m(x), (w * x).sum(1))
    assert torch.all(m(x) <= x.max(1).values + 1e-6) and torch.all(m(x) >= x.min(1).values - 1e-6)


def test_hard_dpn_selects_one_module_per_entity_from_its_own_features():
    hyper = make("dpn", dpn_hard=True).hyper["enemy"]
    x = torch.randn(6, 3, D_ENEMY)
    z = hyper.codes(x).detach()
    assert torch.allclose(z, torch.nn.functional.one_hot(z.argmax(-1), 4).float(), atol=1e-6)
    perm = torch.tensor([2, 0, 1])
    assert torch.allclose(hyper.codes(x[:, perm]).detach(), z[:, perm])  # the choice moves with the entity


def test_hpn_agent_id_embedding_sized_for_transfer():
    net = make("hpn", id_dim=3, hpn_id_table=10)
    assert net.agent_embedding.num_embeddings == 10
    big = make("hpn", id_dim=12, hpn_id_table=10)  # raised to the team size
    assert big.agent_embedding.num_embeddings == 12
    same_obs = random_obs(1).expand(3, -1)
    q, _ = net.step(torch.cat([same_obs, torch.eye(3)[[0, 1, 1]]], -1), None)
    assert not torch.allclose(q[0], q[1]) and torch.allclose(q[1], q[2])  # the id embedding tells agents apart


def test_hpn_sequence_equals_step_by_step():
    net = make("hpn", last=True)
    x = torch.cat(
        [random_obs(4, 5), torch.nn.functional.one_hot(torch.randint(0, N_NORMAL + 3, (4, 5)), N_NORMAL + 3).float()],
        -1,
    )
    seq = net.sequence(x)
    h = None
    for t in range(5):
        q, h = net.step(x[:, t], h)
        assert torch.allclose(seq[:, t], q, atol=1e-5)


@pytest.mark.parametrize(
    "kind,kw",
    HPN_KINDS
    + [
        ("hpn", {"recurrent": False}),
        ("asn", {}),
        ("asn", {"asn_entity_modules": "separate", "asn_env_input": "non_target"}),
        ("asn", {"recurrent": False}),
    ],
)
def test_entity_net_packed_episodes_equal_the_unroll_on_used_steps(kind, kw):
    """HPN/DPN/ASN skip padding (value decomposition's packed path): on the used steps of episodes of
    different lengths the packed pass equals the padded unroll, and padding (NaN here) never leaks."""
    net = make(kind, last=True, **kw)
    assert net.skips_padding
    x = torch.cat(
        [random_obs(5, 7), torch.nn.functional.one_hot(torch.randint(0, N_NORMAL + 3, (5, 7)), N_NORMAL + 3).float()],
        -1,
    )
    x[1, :, OWN : OWN + D_ALLY] = 0  # an ally slot empty all episode: rows without that entity
    lengths = torch.tensor([7, 1, 4, 7, 3])
    used = torch.arange(7) < lengths.unsqueeze(-1)
    fast = net.sequence(torch.where(used.unsqueeze(-1), x, float("nan")), lengths)
    assert torch.allclose(fast[used], net.unroll(x)[used], atol=1e-5, rtol=0)
    assert (fast[~used] == 0).all()


# ------------------------------------------------------------------ ASN
def test_asn_targeted_value_is_the_pairing_of_the_two_embeddings():
    net = make("asn")
    x = random_obs(8)
    q, h = net.step(x, None)
    A = net.hidden
    assert h.shape == (8, A * (1 + 3))  # hidden layout: h_env then one h_j per enemy
    h_env, h_ent = h[:, :A], h[:, A:].view(8, 3, A)
    assert torch.allclose(q[:, N_NORMAL:], torch.einsum("ba,bja->bj", h_env, h_ent), atol=1e-5)
    assert torch.allclose(q[:, :N_NORMAL], net.normal(h_env), atol=1e-5)


def test_asn_targeted_value_does_not_depend_on_other_targets_features():
    net = make("asn", asn_env_input="non_target")
    x = random_obs(5).requires_grad_(True)
    q, _ = net.step(x, None)
    s = OWN + 2 * D_ALLY
    for j in range(3):
        (g,) = torch.autograd.grad(q[:, N_NORMAL + j].sum(), x, retain_graph=True)
        for k in range(3):
            block = g[:, s + k * D_ENEMY : s + (k + 1) * D_ENEMY]
            assert (block.abs().sum() > 0) == (k == j)


@pytest.mark.parametrize("modules", ["shared", "unit_type"])
def test_asn_entity_stream_is_permutation_equivariant(modules):
    net = make("asn", asn_env_input="non_target", asn_entity_modules=modules)
    x = random_obs(6, 4)
    perm = torch.tensor([2, 0, 1])
    A = net.hidden
    h, hp = None, None
    for t in range(4):
        q, h = net.step(x[:, t], h)
        qp, hp = net.step(permute(x[:, t], torch.arange(2), perm), hp)
        assert torch.allclose(qp[:, N_NORMAL:], q[:, N_NORMAL:][:, perm], atol=1e-5)
        assert torch.allclose(hp[:, A:].view(6, 3, A), h[:, A:].view(6, 3, A)[:, perm], atol=1e-5)


def test_asn_module_sharing_modes():
    count = lambda net: sum(p.numel() for p in net.entity.parameters())  # noqa: E731
    assert count(make("asn", m_enemy=3)) == count(make("asn", m_enemy=7))  # shared: independent of m
    assert count(make("asn", m_enemy=6, asn_entity_modules="separate")) == 2 * count(
        make("asn", m_enemy=3, asn_entity_modules="separate")
    )
    assert len(make("asn", asn_entity_modules="unit_type").entity["enemy"]) == 2
    assert not make("asn", asn_entity_modules="unit_type").skips_padding  # types may change inside an episode
    seq_net = make("asn", asn_entity_modules="separate")
    x = random_obs(2, 3)
    h = None
    for t in range(3):
        q, h = seq_net.step(x[:, t], h)
    assert torch.allclose(seq_net.sequence(x)[:, -1], q, atol=1e-5)


def test_entity_net_errors_name_the_problem():
    with pytest.raises(MarlError, match="Valid choices: hpn, dpn, asn"):
        build_agent_net("transformer", {"entity_layout": layout(), "group_obs_dim": obs_dim()}, 9)
    with pytest.raises(MarlError, match="describes 9 actions"):
        build_agent_net("hpn", {"entity_layout": layout(), "group_obs_dim": obs_dim()}, 11)
    with pytest.raises(MarlError, match="needs 'unit_type'"):
        cfg = {"entity_layout": layout(unit_type=False), "group_obs_dim": obs_dim(), "asn_entity_modules": "unit_type"}
        build_agent_net("asn", cfg, 9)
    with pytest.raises(MarlError, match="asn_env_input"):
        make("asn", asn_env_input="everything")
    bad = layout()
    bad["action_targets"] = {"enemy": (N_NORMAL + 1, 3)}
    with pytest.raises(MarlError, match="contiguously"):
        EntityInputs(bad, obs_dim())


def test_check_agent_before_ray():
    import marl

    info = marl.make_env("mpe", "simple_tag", num_envs=1).info
    with pytest.raises(MarlError, match="entity_layout="):
        check_agent({"agent": "hpn"}, info)
    with pytest.raises(MarlError, match="Valid choices: mlp, hpn, dpn, asn"):
        check_agent({"agent": "hnp"}, info)
    check_agent({"agent": "mlp"}, info)


# ------------------------------------------------------------------ inside QMIX and MAPPO modules
def module_cfg(agent, **kw):
    return {
        "obs_dim": obs_dim() + 3,
        "n_actions": N_NORMAL + 3,
        "hidden": 16,
        "recurrent": True,
        "agent": agent,
        "entity_layout": layout(),
        "group_obs_dim": obs_dim(),
        "id_dim": 3,
        **kw,
    }


@pytest.mark.parametrize("agent", ["hpn", "dpn", "asn"])
def test_q_module_acting_equals_training_unroll(agent):
    from marl.algos.value_decomp import QAgentModule

    torch.manual_seed(0)
    module = QAgentModule(
        observation_space=None,
        action_space=None,
        inference_only=False,
        model_config=module_cfg(agent, last_action=True),
    )
    E, T, N = 2, 5, 3
    obs = torch.cat([random_obs(E, T + 1, N), torch.eye(N).expand(E, T + 1, N, N)], -1)
    h, acts = module.initial_state((E, N)), []
    for t in range(T + 1):
        a, _, h = module.act(obs[:, t], None, h, explore=False)
        acts.append(a)
    q = module.q_sequence(module.net, obs, torch.stack(acts[:T], 1))
    assert torch.equal(q.argmax(-1), torch.stack(acts, 1))  # greedy acting = argmax of the unrolled Q


@pytest.mark.parametrize("agent,recurrent", [("hpn", True), ("asn", True), ("hpn", False)])
def test_ppo_module_acting_equals_training_unroll(agent, recurrent):
    from marl.algos.ppo import PPOModule

    torch.manual_seed(0)
    cfg = module_cfg(agent, recurrent=recurrent, critic_dim=5, discrete=True, layers=1)
    module = PPOModule(observation_space=None, action_space=None, inference_only=False, model_config=cfg)
    B, T, N = 2, 4, 3
    obs = torch.cat([random_obs(B, T, N), torch.eye(N).expand(B, T, N, N)], -1)
    h, acts, logps = module.initial_state((B, N)), [], []
    for t in range(T):
        a, logp, h = module.act(obs[:, t], None, h, explore=True)
        acts.append(a)
        logps.append(logp)
    seq = obs.permute(0, 2, 1, 3).reshape(B * N, T, -1)
    batch = {"obs": seq if recurrent else seq.reshape(B * N * T, -1), "critic_in": torch.zeros(B * N * T, 5)}
    if recurrent:
        batch.update(h0=module.initial_state((B * N,)), starts=torch.zeros(B * N, T, dtype=torch.bool))
    out = module._forward_train(batch)
    actions = torch.stack(acts, 1).permute(0, 2, 1).reshape(-1)
    logp, _ = module.log_prob_entropy(out["dist_in"], actions, None)
    assert torch.allclose(logp, torch.stack(logps, 1).permute(0, 2, 1).reshape(-1), atol=1e-5)


# ------------------------------------------------------------------ training and transfer
def test_hpn_qmix_trains_transfers_and_fine_tunes(tmp_path):
    """fit(agent="hpn") on SMAX 3m; the checkpoint acts on 8m zero-shot and starts an 8m run;
    a plain network refuses to transfer with an error naming the parameter."""
    import marl

    kw = dict(rollout_length=20, batch_size=8, episodes_per_update=4, eval_episodes=0, log_dir=str(tmp_path))
    res = marl.make_env("smax", "3m", num_envs=8).fit("qmix", agent="hpn", stop={"iterations": 2}, **kw)
    env8 = marl.make_env("smax", "8m", num_envs=8)
    moved = marl.load(res.checkpoint, env=env8)
    stats = moved.evaluate(episodes=8, env=env8)
    assert 0.0 <= stats["win_rate_mean"] <= 1.0 and stats["episode_length_mean"] > 0
    tuned = env8.fit("qmix", agent="hpn", init_from=res.checkpoint, stop={"iterations": 1}, **kw)
    assert tuned.metrics["env_steps"] == 20 * 8
    plain = marl.make_env("smax", "3m", num_envs=8).fit("qmix", stop={"iterations": 1}, **kw)
    with pytest.raises(MarlError, match="net.fc1.weight"):
        marl.load(plain.checkpoint, env=env8)


def test_hpn_mappo_on_spread_runs_at_other_team_sizes(tmp_path, capsys):
    import marl

    env3 = marl.make_env("mpe", "simple_spread", N=3, num_envs=8)
    res = env3.fit(
        "mappo",
        agent="hpn",
        stop={"iterations": 2},
        rollout_length=25,
        epochs=2,
        eval_episodes=0,
        log_dir=str(tmp_path),
    )
    for n in (4, 5):
        env = marl.make_env("mpe", "simple_spread", N=n, num_envs=4)
        stats = marl.load(res.checkpoint, env=env).evaluate(episodes=4, env=env)
        assert math.isfinite(stats["episode_return_mean"])
    from marl.cli import main

    assert main(["eval", res.checkpoint, "env=mpe:simple_spread", "env.N=5", "episodes=4"]) == 0
    assert main(["eval", res.checkpoint, "enviroment=mpe:simple_spread"]) != 0
    assert "unknown option(s) ['enviroment']" in capsys.readouterr().err


def test_hpn_ally_targeted_actions_follow_the_allies():
    """Heal-style actions: a layout whose allies are action targets gets ally output weights."""
    lay = layout()
    lay["action_targets"] = {"enemy": (N_NORMAL, 3), "ally": (N_NORMAL + 3, 2)}
    torch.manual_seed(0)
    net = build_agent_net("hpn", {"entity_layout": lay, "group_obs_dim": obs_dim()}, N_NORMAL + 5)
    x = random_obs(6)
    q, _ = net.step(x, None)
    pa, pe = torch.tensor([1, 0]), torch.tensor([2, 0, 1])
    qp, _ = net.step(permute(x, pa, pe), None)
    assert torch.allclose(qp[:, :N_NORMAL], q[:, :N_NORMAL], atol=1e-5)
    assert torch.allclose(qp[:, N_NORMAL : N_NORMAL + 3], q[:, N_NORMAL : N_NORMAL + 3][:, pe], atol=1e-5)
    assert torch.allclose(qp[:, N_NORMAL + 3 :], q[:, N_NORMAL + 3 :][:, pa], atol=1e-5)
