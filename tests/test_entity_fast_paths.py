"""The fast paths of the entity-aware networks against straightforward reference forwards.

``algos/networks/hpn.py`` skips all-zero entity rows, pools entities before the
hypernetwork matmul and folds the output hypernetworks and the head mean into one
matrix; ``asn.py`` runs each unit-type module on its own rows; ``entity.py`` reads
contiguous entity blocks as views. The references here are written from the
papers' equations (HPN: Hao et al. 2023, arXiv:2203.05285; ASN: Wang et al. 2020,
arXiv:1907.11461) on the same parameters: one generated weight matrix per entity,
every entity computed, a GRU cell stepped by hand. Outputs, states and every
parameter's gradient must agree, with padded / zero entities and recurrent unrolls.
"""

import pytest
import torch
from torch.nn import functional as F

from test_entity_nets import D_ALLY, D_ENEMY, N_NORMAL, OWN, make, obs_dim, random_obs

N_ID = 3
ATOL, RTOL = 1e-5, 1e-4


# ------------------------------------------------------------------ references
def core_ref(core, z, h0, starts):
    """``RecurrentCore`` by hand: a GRU cell stepped with resets (r, z, n gate order of nn.GRU),
    or ``ReLU(FC(z))`` without recurrence. ``z [M, L, H]`` -> ``[M, L, H]``."""
    cell = core.cell
    if isinstance(cell, torch.nn.Linear):
        return F.relu(F.linear(z, cell.weight, cell.bias))
    M, L, H = z.shape
    h = torch.zeros(M, H) if h0 is None else h0
    outs = []
    for t in range(L):
        if starts is not None:
            h = h * (~starts[:, t]).unsqueeze(-1).float()
        gi = F.linear(z[:, t], cell.weight_ih_l0, cell.bias_ih_l0).chunk(3, -1)
        gh = F.linear(h, cell.weight_hh_l0, cell.bias_hh_l0).chunk(3, -1)
        r, u = torch.sigmoid(gi[0] + gh[0]), torch.sigmoid(gi[1] + gh[1])
        n = torch.tanh(gi[2] + r * gh[2])
        h = (1 - u) * n + u * h
        outs.append(h)
    return torch.stack(outs, 1)


def code_ref(hyper, x):
    """``g(x_j)`` per entity: ReLU code (HPN) or softmax module weights (DPN; hard: straight-through one-hot)."""
    s = F.linear(x, hyper.code.weight, hyper.code.bias)
    if hyper.generator == "mlp":
        return F.relu(s)
    p = F.softmax(s, -1)
    return F.one_hot(p.argmax(-1), p.shape[-1]).float() + p - p.detach() if hyper.hard else p


def hpn_ref(net, x, h0=None, starts=None):
    """HPN/DPN from its equations: ``W_in(x_j)`` built for every entity, ``e = sum_j x_j^T W_in(x_j)``,
    ``q_j = mean_heads(h . w_out(x_j) + b_out(x_j))``. ``x [M, L, D]`` -> outputs, states."""
    inp = net.inputs
    e = F.linear(x[..., inp.own_idx], net.own.weight, net.own.bias)
    if net.agent_embedding is not None:
        e = e + net.agent_embedding.weight[x[..., inp.obs_dim : inp.obs_dim + inp.id_dim].argmax(-1)]
    if net.last_action is not None:
        last = x[..., inp.obs_dim + inp.id_dim :]
        summary = [last[..., : inp.n_normal]] + [last[..., f : f + m].sum(-1, keepdim=True) for _, f, m in inp.targets]
        e = e + F.linear(torch.cat(summary, -1), net.last_action.weight)
    pooled, codes = 0, {}
    for t in inp.types:
        hyper, ents = net.hyper[t], x[..., getattr(inp, f"idx_{t}")]  # gathered, [M, L, m, d]
        codes[t] = z = code_ref(hyper, ents)
        w_in = F.linear(z, hyper.w_in.weight, hyper.w_in.bias).view(*z.shape[:-1], hyper.d, -1)
        pooled = pooled + torch.einsum("...md,...mdo->...o", ents, w_in)
    heads = net.merger.heads
    pooled = pooled.view(*x.shape[:-1], heads, net.hidden)
    merged = pooled[..., 0, :] if heads == 1 else (F.softmax(net.merger.weight, 1) * pooled).sum(-2)
    h = core_ref(net.core, F.relu(e + merged), h0, starts)
    parts = [F.linear(h, net.normal.weight, net.normal.bias)]
    for t, _, _ in inp.targets:
        hyper, z = net.hyper[t], codes[t]
        w_out = F.linear(z, hyper.w_out.weight, hyper.w_out.bias).view(*z.shape[:-1], net.hidden, heads)
        b_out = F.linear(z, hyper.b_out.weight, hyper.b_out.bias)
        parts.append((torch.einsum("mlo,mljoh->mljh", h, w_out) + b_out).mean(-1))
    return torch.cat(parts, -1), h


def stream_ref(stream, x, h):
    """One step of an ASN stream by hand: ``FC -> ReLU -> FC -> GRU cell`` (or ``-> ReLU(FC)``)."""
    z = F.linear(F.relu(F.linear(x, stream.fc1.weight, stream.fc1.bias)), stream.fc2.weight, stream.fc2.bias)
    return core_ref(stream.core, z.unsqueeze(1), h, None)[:, 0]


def asn_ref(net, x, h0=None, starts=None):
    """ASN stepped per entity and per step, each entity's module picked at that step (shared: one;
    separate: the slot's; unit_type: the argmax of the entity's unit-type bits), continuing from the
    entity's previous state. ``x [M, L, D]`` -> outputs, states ``[M, L, S]``."""
    inp, A = net.inputs, net.hidden
    M, L, _ = x.shape
    ((t_name, _, m),) = inp.targets
    idx = getattr(inp, f"idx_{t_name}")
    h_env = torch.zeros(M, A) if h0 is None else h0[:, :A]
    h_ent = [torch.zeros(M, A) if h0 is None else h0[:, A * (1 + j) : A * (2 + j)] for j in range(m)]
    outs, states = [], []
    for t in range(L):
        keep = torch.ones(M, 1) if starts is None else (~starts[:, t]).unsqueeze(-1).float()
        xt = x[:, t]
        env_x = xt * inp.non_target_mask if net.env_input == "non_target" else xt
        h_env = stream_ref(net.env, env_x, h_env * keep)
        q = [F.linear(h_env, net.normal.weight, net.normal.bias)]
        for j in range(m):
            xj = xt[:, idx[j]]
            h_ent[j] = entity_step(net, t_name, j, xj, h_ent[j] * keep)
            q.append((h_env * h_ent[j]).sum(-1, keepdim=True))
        outs.append(torch.cat(q, -1))
        states.append(torch.cat([h_env] + h_ent, -1))
    return torch.stack(outs, 1), torch.stack(states, 1)


def entity_step(net, t_name, j, xj, h):
    """Entity ``j``'s stream step with the module its sharing mode picks, row by row for unit types."""
    mods = net.entity[t_name]
    if net.entity_modules == "shared":
        return stream_ref(mods[0], xj, h)
    if net.entity_modules == "separate":
        return stream_ref(mods[j], xj, h)
    a, b = net.inputs.unit_types[t_name]
    kind = xj[:, a:b].argmax(-1)
    return torch.stack([stream_ref(mods[int(kind[r])], xj[r : r + 1], h[r : r + 1])[0] for r in range(len(xj))])


# ------------------------------------------------------------------ data
def inputs(M=6, L=5, last=True, seed=0, fixed_types=False):
    """``[M, L, D]`` agent inputs with the zero rows of a real batch: no ally in sight, no
    enemy in sight, single dead entities, padding past an episode's end, an all-zero sequence.
    ``fixed_types``: every enemy keeps its unit type over the sequence (zeroed entities for
    the whole sequence), so the ASN unit-type modules unroll without switching."""
    torch.manual_seed(seed)
    x = random_obs(M, L)
    enemy = OWN + 2 * D_ALLY
    if fixed_types:
        for j in range(3):
            bits = slice(enemy + j * D_ENEMY + 3, enemy + j * D_ENEMY + 5)
            x[:, :, bits] = x[:, :1, bits]
    step = (lambda t: slice(None)) if fixed_types else (lambda t: min(t, L - 1))  # noqa: E731
    x[0, step(1), OWN:enemy] = 0  # no ally in sight
    x[1, :, enemy:] = 0  # no enemy in sight, whole sequence
    x[2, step(2), OWN + D_ALLY : enemy] = 0  # one dead ally
    x[3, step(0), enemy + D_ENEMY : enemy + 2 * D_ENEMY] = 0  # one dead enemy
    if not fixed_types:
        x[4, max(L - 2, 0) :] = 0  # padding
    x[5] = 0  # a padded sequence
    parts = [x, F.one_hot(torch.arange(M * L).view(M, L) % N_ID, N_ID).float()]
    if last:
        parts.append(F.one_hot(torch.randint(0, N_NORMAL + 3, (M, L)), N_NORMAL + 3).float())
    return torch.cat(parts, -1)


def check_equal(net, ref, x, h0=None, starts=None):
    """Outputs, states and the gradients of every parameter of ``net(x, h0, starts)`` equal ``ref``'s."""
    out, states = net(x, h0, starts)
    want_out, want_states = ref(net, x, h0, starts)
    assert torch.allclose(out, want_out, atol=ATOL, rtol=RTOL)
    if states is not None:
        assert torch.allclose(states, want_states, atol=ATOL, rtol=RTOL)
    torch.manual_seed(1)
    w_out, w_states = torch.randn_like(out), torch.randn_like(want_states)

    def grads(o, s):
        loss = (o * w_out).sum() + ((s * w_states).sum() if states is not None else 0)
        params = [p for p in net.parameters() if p.requires_grad]
        return torch.autograd.grad(loss, params, allow_unused=True)

    names = [n for n, p in net.named_parameters() if p.requires_grad]
    for name, g, g_ref in zip(names, grads(out, states), grads(want_out, want_states)):
        if g is None or g_ref is None:
            assert g is None or not g.any(), name
            assert g_ref is None or not g_ref.any(), name
            continue
        assert torch.allclose(g, g_ref, atol=ATOL, rtol=RTOL), name


def resets(M, L):
    starts = torch.zeros(M, L, dtype=torch.bool)
    starts[0, 2] = starts[3, 1] = starts[2, 0] = True
    return starts


HPN_KINDS = [("hpn", {}), ("hpn", {"hpn_heads": 2}), ("dpn", {}), ("dpn", {"dpn_hard": True})]


# ------------------------------------------------------------------ HPN / DPN
@pytest.mark.parametrize("kind,kw", HPN_KINDS)
@pytest.mark.parametrize("recurrent", [True, False])
def test_hpn_unroll_and_gradients_equal_the_per_entity_reference(kind, kw, recurrent):
    net = make(kind, id_dim=N_ID, last=True, recurrent=recurrent, **kw)
    x = inputs()
    h0 = torch.randn(6, 64) if recurrent else None
    check_equal(net, hpn_ref, x, h0, resets(6, 5) if recurrent else None)
    check_equal(net, hpn_ref, x)


@pytest.mark.parametrize("kind,kw", HPN_KINDS)
def test_hpn_acting_step_and_edge_batches(kind, kw):
    """One acting step; a batch with no zero row (nothing skipped); a batch of zeros only."""
    net = make(kind, id_dim=N_ID, last=True, **kw)
    check_equal(net, hpn_ref, inputs(L=1, seed=2), torch.randn(6, 64))
    full = inputs(M=6, L=3, seed=3)
    full[..., : obs_dim()] = random_obs(6, 3)  # every entity present
    check_equal(net, hpn_ref, full)
    empty = inputs(L=3, seed=4)
    empty[..., : obs_dim()] = 0
    check_equal(net, hpn_ref, empty, torch.randn(6, 64))


def test_hpn_entity_views_equal_the_gather():
    """Contiguous entity types are read as views; a ``fields`` layout still gathers; both equal indexing."""
    from marl.algos.networks.entity import EntityInputs

    from test_entity_nets import layout

    lay = layout()
    x = random_obs(4, 2)
    inp = EntityInputs(lay, obs_dim())
    own, ents, _, _ = inp.split(x)
    assert torch.equal(own, x[..., inp.own_idx])
    for t in inp.types:
        assert torch.equal(ents[t], x[..., getattr(inp, f"idx_{t}")])
        assert ents[t].data_ptr() >= x.data_ptr() and ents[t]._base is not None  # a view, no copy
    split = dict(lay, entities=dict(lay["entities"], ally={"fields": [(OWN, 2), (OWN + 4, 1)], "count": 2}))
    inp = EntityInputs(split, obs_dim())
    assert torch.equal(inp.split(x)[1]["ally"], x[..., inp.idx_ally])


# ------------------------------------------------------------------ ASN
ASN_CASES = [
    {},
    {"asn_env_input": "non_target"},
    {"asn_entity_modules": "separate"},
    {"asn_entity_modules": "unit_type"},
    {"asn_entity_modules": "unit_type", "asn_env_input": "non_target"},
]


@pytest.mark.parametrize("kw", ASN_CASES)
@pytest.mark.parametrize("fixed_types", [True, False])
def test_asn_unroll_and_gradients_equal_the_per_entity_reference(kw, fixed_types):
    """Unit types fixed over the sequence (each module unrolls its own rows) or changing
    (step by step), with dead and unseen entities and resets."""
    net = make("asn", id_dim=N_ID, last=True, **kw)
    x = inputs(fixed_types=fixed_types)
    check_equal(net, asn_ref, x, torch.randn(6, net.state_size), resets(6, 5))
    check_equal(net, asn_ref, x)


@pytest.mark.parametrize("kw", ASN_CASES[2:])
def test_asn_feed_forward_equals_the_reference(kw):
    net = make("asn", id_dim=N_ID, last=True, recurrent=False, **kw)
    check_equal(net, asn_ref, inputs())


@pytest.mark.parametrize("kind,kw", HPN_KINDS)
def test_hpn_skips_features_zero_in_every_entity(kind, kw):
    """A unit-type slot no enemy uses (a single-type map) and an ally feature zero everywhere are
    left out of the code layer and the pooled matmul, with the reference's outputs and gradients;
    once one enemy has the other type, every feature is read again."""
    from marl.algos.networks.hpn import entity_support

    def live_features(e):
        return entity_support(e.flatten(0, 1))[2]

    net = make(kind, id_dim=N_ID, last=True, **kw)
    x = inputs(M=6, L=4, seed=5)
    s = OWN + 2 * D_ALLY
    for j in range(3):  # every present enemy of type 0; absent ones stay all zero
        bits = slice(s + j * D_ENEMY + 3, s + j * D_ENEMY + 5)
        x[..., bits] = F.one_hot(torch.zeros_like(x[..., 0], dtype=torch.long), 2) * (
            x[..., bits].sum(-1, keepdim=True) > 0
        )
    x[..., OWN + 1 : OWN + 2 * D_ALLY : D_ALLY] = 0.0  # feature 1 of both allies
    _, ents, _, _ = net.inputs.split(x)
    assert live_features(ents["enemy"]).tolist() == [f for f in range(D_ENEMY) if f != 4]
    assert live_features(ents["ally"]).tolist() == [0, 2]
    check_equal(net, hpn_ref, x, torch.randn(6, 64), resets(6, 4))
    x[0, 0, s + 3 : s + 5] = torch.tensor([0.0, 1.0])  # one enemy of type 1: its slot is live again
    assert live_features(net.inputs.split(x)[1]["enemy"]) is None
    check_equal(net, hpn_ref, x)


def test_zero_tests_count_nan_inf_and_denormals_as_present():
    """``entity_support`` sums ``|v|`` instead of testing ``v != 0``: a row or feature
    holding only NaN, inf or a denormal is still present; exact zeros (and -0.0) are not."""
    from marl.algos.networks.hpn import entity_support

    def active_rows(e):
        return entity_support(e)[:2]

    def live_features(e):
        return entity_support(e)[2]

    v = torch.zeros(5, 2, 4)
    v[1, 0, 2] = float("nan")
    v[2, 1, 0] = float("inf")
    v[3, 0, 0] = 1e-40  # denormal
    v[4, 1, 0] = -0.0
    rows, kept = active_rows(v)
    assert rows.tolist() == [1, 2, 3] and torch.equal(kept[1:], v[2:4]) and kept[0, 0, 2].isnan()
    assert live_features(v).tolist() == [0, 2]
    assert live_features(torch.ones(3, 2, 4)) is None and live_features(torch.ones(0, 2, 4)) is None
