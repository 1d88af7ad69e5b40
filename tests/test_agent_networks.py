"""The agent-network protocol (algos/networks/base.py) for every registered network, the
registry, and the MAPPO GRU actor's move from an nn.GRUCell loop to the shared nn.GRU unroll."""

import pytest
import torch
from torch import nn

from marl.algos.networks import registry
from marl.algos.networks.base import AgentNetwork
from marl.algos.networks.mlp import MLP, MAPPOActor
from marl.algos.networks.registry import FAMILIES, agent_networks, build_agent_net, check_agent, register_agent_network
from marl.errors import MarlError
from run_helpers import ppo_module as small_ppo_module
from test_entity_nets import N_NORMAL, layout, obs_dim, random_obs

N_ID, N_ACT = 3, N_NORMAL + 3  # agent one-hot size; actions of the test layout (6 normal + 3 enemies)
VARIANTS = {
    "hpn": [{}, {"hpn_heads": 2}],
    "dpn": [{"dpn_hard": True}],
    "asn": [{}, {"asn_entity_modules": "separate"}, {"asn_entity_modules": "unit_type", "asn_env_input": "non_target"}],
}
CASES = [
    (family, name, recurrent, kw)
    for family in FAMILIES
    for name in agent_networks(family)
    for recurrent in (True, False)
    for kw in VARIANTS.get(name, [{}])
]


def last_dim(family):
    return N_ACT if family == "value_decomp" else 0  # value decomposition appends the last action


def model_config(family, name, recurrent, **kw):
    """One model_config that every built-in network reads what it needs from."""
    return {
        "agent": name,
        "obs_dim": obs_dim() + N_ID,
        "hidden": 16,
        "layers": 2,
        "activation": "relu",
        "layer_norm": True,
        "policy_gain": 0.01,
        "recurrent": recurrent,
        "entity_layout": layout(),
        "group_obs_dim": obs_dim(),
        "id_dim": N_ID,
        "last_action_dim": last_dim(family),
        "hpn_hyper_dim": 8,
        "asn_hidden": 8,
        **kw,
    }


def inputs(family, *lead, seed=0):
    """``[*lead, D]``: observation (valid unit-type one-hots), agent one-hot, last-action one-hot."""
    torch.manual_seed(seed)
    parts = [random_obs(*lead), nn.functional.one_hot(torch.randint(0, N_ID, lead), N_ID).float()]
    if last_dim(family):
        parts.append(nn.functional.one_hot(torch.randint(0, N_ACT, lead), N_ACT).float())
    return torch.cat(parts, -1)


def build(family, name, recurrent, **kw):
    torch.manual_seed(0)
    return build_agent_net(name, model_config(family, name, recurrent, **kw), N_ACT, family)


def step_through(net, x, h0, starts):
    """Reference unroll: one :meth:`step` per time step, state zeroed where ``starts``."""
    h, outs = h0, []
    for t in range(x.shape[1]):
        if h is not None:
            h = h * (~starts[:, t]).unsqueeze(-1).to(h.dtype)
        out, h = net.step(x[:, t], h)
        outs.append(out)
    return torch.stack(outs, 1)


def check_protocol(net, x):
    """Shapes of initial_state/step/unroll and unroll == stepping with resets; ``x [M, L, D]``."""
    M, L, _ = x.shape
    S = net.state_size
    assert isinstance(net, AgentNetwork) and isinstance(S, int) and S >= 0
    h_init = net.initial_state((2, M))
    assert (h_init is None) if S == 0 else (h_init.shape == (2, M, S) and not h_init.any())
    h0 = None if S == 0 else torch.randn(M, S)
    out, h1 = net.step(x[:, 0], h0)
    assert out.shape == (M, N_ACT) and (h1 is None if S == 0 else h1.shape == (M, S))
    quiet = torch.zeros(M, L, dtype=torch.bool)  # no reset: one fused GRU call
    resets = quiet.clone()
    resets[0, 0] = resets[1, 2] = resets[2, L - 1] = resets[3, 1] = resets[3, 2] = True
    for starts in (quiet, resets):
        seq = net.unroll(x, h0, starts)
        assert seq.shape == (M, L, N_ACT)
        assert torch.allclose(seq, step_through(net, x, h0, starts), atol=1e-6, rtol=0)
    zero = None if S == 0 else torch.zeros(M, S)
    assert torch.allclose(net.unroll(x), net.unroll(x, zero, quiet), atol=1e-6, rtol=0)  # h0=None: zero state
    assert torch.equal(net.sequence(x), net.unroll(x))
    if S == 0:  # feed-forward: the state is ignored
        out_h, h_out = net.step(x[:, 0], torch.randn(M, 5))
        assert h_out is None and torch.equal(out_h, out)
        assert torch.equal(net.unroll(x, torch.randn(M, 5), resets), net.unroll(x))


@pytest.mark.parametrize("family,name,recurrent,kw", CASES)
def test_every_registered_network_satisfies_the_protocol(family, name, recurrent, kw):
    net = build(family, name, recurrent, **kw)
    assert (net.state_size > 0) == recurrent
    check_protocol(net, inputs(family, 5, 4))


def test_entity_network_state_carries_across_calls():
    """Two unrolls chained through the last state equal one unroll of the whole sequence."""
    for name in ("hpn", "asn"):
        net = build("ppo", name, True)
        x = inputs("ppo", 3, 6)
        h = None
        for t in range(3):
            _, h = net.step(x[:, t], h)
        assert torch.allclose(net.unroll(x[:, 3:], h), net.unroll(x)[:, 3:], atol=1e-6, rtol=0)


# ------------------------------------------------------------------ the MAPPO GRU actor before and after
class GRUCellTrunk(nn.Module):
    """The MAPPO GRU trunk as it was before the protocol: an nn.GRUCell stepped in a Python loop."""

    def __init__(self, in_dim, hidden, activation="relu", layer_norm=True):
        super().__init__()
        self.encoder = MLP(in_dim, None, hidden, 1, activation, layer_norm)
        self.cell = nn.GRUCell(hidden, hidden)

    def unroll(self, x, h0, starts):
        z, h, outs = self.encoder(x), h0, []
        for t in range(x.shape[1]):
            h = self.cell(z[:, t], h * (~starts[:, t]).unsqueeze(-1).to(h.dtype))
            outs.append(h)
        return torch.stack(outs, 1)


class OldActor(nn.Module):
    """PPOModule's actor parameters as they were named before the protocol (``trunk.*``, ``head.*``)."""

    def __init__(self, recurrent, in_dim=10, n_actions=4, hidden=16, activation="relu", layer_norm=True):
        super().__init__()
        if recurrent:
            self.trunk = GRUCellTrunk(in_dim, hidden, activation, layer_norm)
        else:
            self.trunk = MLP(in_dim, None, hidden, 2, activation, layer_norm)
        self.head = MLP(hidden, n_actions, layers=0, layer_norm=False, out_gain=0.01)


@pytest.mark.parametrize("activation,layer_norm", [("relu", True), ("tanh", False)])
def test_gru_actor_equals_the_old_gru_cell_actor_from_the_same_seed(activation, layer_norm):
    torch.manual_seed(7)
    old = OldActor(True, activation=activation, layer_norm=layer_norm)
    torch.manual_seed(7)
    new = MAPPOActor(10, 4, 16, activation=activation, layer_norm=layer_norm, recurrent=True)
    old_params, new_params = list(old.parameters()), list(new.parameters())
    assert len(old_params) == len(new_params)
    assert all(torch.equal(a, b) for a, b in zip(old_params, new_params))  # same RNG draws, same order
    x, h0 = torch.randn(6, 9, 10), torch.randn(6, 16)
    for starts in (torch.zeros(6, 9, dtype=torch.bool), torch.rand(6, 9) < 0.3):
        ref = old.head(old.trunk.unroll(x, h0, starts))
        assert torch.allclose(new.unroll(x, h0, starts), ref, atol=1e-6, rtol=0)
    out, h = new.step(x[:, 0], h0)
    h_ref = old.trunk.cell(old.trunk.encoder(x[:, 0]), h0)
    assert torch.allclose(h, h_ref, atol=1e-6, rtol=0) and torch.allclose(out, old.head(h_ref), atol=1e-6, rtol=0)


def ppo_module(recurrent, seed, inference_only=False):
    torch.manual_seed(seed)
    return small_ppo_module(
        obs_dim=10, n_actions=4, recurrent=recurrent, policy_gain=0.01, inference_only=inference_only
    )


@pytest.mark.parametrize("recurrent", [True, False])
def test_ppo_checkpoints_from_before_the_protocol_still_load(recurrent):
    """Old PPOModule state dicts (``trunk.*``/``head.*``, GRUCell ``cell.*``) load into the new module."""
    torch.manual_seed(3)
    old_actor = OldActor(recurrent)
    learner_only = {
        k: v for k, v in ppo_module(recurrent, 4).state_dict().items() if k.startswith(("critic.", "value_norm."))
    }
    old_state = {**old_actor.state_dict(), **learner_only}
    if recurrent:
        assert "trunk.cell.weight_ih" in old_state
    module = ppo_module(recurrent, 5)
    assert not module.load_state_dict(old_state, strict=True).missing_keys  # strict: every key maps
    fresh = ppo_module(recurrent, 6, inference_only=True)
    fresh.set_state(old_state)  # RLlib's path: load_state_dict(strict=False), so a missed key would pass silently
    for m in (module, fresh):
        assert all(torch.equal(a, b) for a, b in zip(m.actor.parameters(), old_actor.parameters()))
    x, h0 = torch.randn(4, 5, 10), torch.randn(4, 16) if recurrent else None
    starts = torch.zeros(4, 5, dtype=torch.bool)
    starts[1, 2] = True
    ref = old_actor.head(old_actor.trunk.unroll(x, h0, starts) if recurrent else old_actor.trunk(x))
    assert torch.allclose(fresh.actor.unroll(x, h0, starts), ref, atol=1e-6, rtol=0)
    keys = set(module.state_dict())
    assert "actor.head.net.0.weight" in keys and not any(k.startswith(("trunk.", "head.")) for k in keys)


# ------------------------------------------------------------------ registry
def test_unknown_agent_lists_the_choices_of_the_family():
    cfg = model_config("ppo", "hpm", True)
    with pytest.raises(
        MarlError, match="Unknown agent 'hpm'. Did you mean 'hpn'\\? Valid choices: mlp, hpn, dpn, asn."
    ):
        build_agent_net("hpm", cfg, N_ACT, "ppo")
    with pytest.raises(MarlError, match="Valid choices: hpn, dpn, asn."):  # mlp differs by family: none given
        build_agent_net("mlp", cfg, N_ACT)
    assert agent_networks("ppo") == agent_networks("value_decomp") == ["mlp", "hpn", "dpn", "asn"]
    assert type(build("ppo", "mlp", True)).__name__ == "MAPPOActor"
    assert type(build("value_decomp", "mlp", True)).__name__ == "RNNAgent"


class Probe(AgentNetwork):
    """A research network: a linear map of the input plus a running sum of it (state ``[M, 2]``)."""

    def __init__(self, in_dim, n_actions):
        super().__init__()
        self.state_size = 2
        self.fc = nn.Linear(in_dim, n_actions)

    def forward(self, x, h0=None, starts=None):
        h = torch.zeros(x.shape[0], 2) if h0 is None else h0
        states = []
        for t in range(x.shape[1]):
            if starts is not None:
                h = h * (~starts[:, t]).unsqueeze(-1).float()
            h = h + x[:, t, :2]
            states.append(h)
        states = torch.stack(states, 1)
        return self.fc(x) + states.sum(-1, keepdim=True), states


def test_a_registered_network_plugs_into_both_algorithm_families(monkeypatch):
    from marl.algos.ppo import PPOModule
    from marl.algos.value_decomp import QAgentModule

    monkeypatch.setattr(registry, "_NETWORKS", dict(registry._NETWORKS))  # registrations end with the test
    seen = []

    def build_probe(c, n_actions):
        seen.append(c["probe_width"])
        return Probe(int(c["obs_dim"]) + int(c.get("last_action_dim", 0)), n_actions)

    register_agent_network("probe", build_probe, config_keys=("probe_width",))
    check_protocol(build_probe({"obs_dim": obs_dim() + N_ID, "probe_width": 1}, N_ACT), inputs("ppo", 5, 4))
    assert "probe" in agent_networks() and "probe" in agent_networks("ppo")

    base = {"obs_dim": 6, "n_actions": 3, "hidden": 8, "agent": "probe", "probe_width": 2}
    ppo = PPOModule(
        observation_space=None,
        action_space=None,
        inference_only=False,
        model_config={**base, "critic_dim": 4, "discrete": True, "layers": 1},
    )
    a, _, h = ppo.act(torch.randn(2, 3, 6), None, ppo.initial_state((2, 3)))
    assert a.shape == (2, 3) and h.shape == (2, 3, 2) and ppo.recurrent
    q = QAgentModule(
        observation_space=None, action_space=None, inference_only=True, model_config={**base, "last_action": True}
    )
    a, _, h = q.act(torch.randn(2, 3, 6), None, q.initial_state((2, 3)))
    assert a.shape == (2, 3) and h.shape == (2, 3, 2 + 3)  # the probe's state, then the last action
    assert seen == [1, 2, 2]


def test_registered_entity_network_and_its_check_run_before_ray(monkeypatch):
    import marl

    monkeypatch.setattr(registry, "_NETWORKS", dict(registry._NETWORKS))
    calls = []
    register_agent_network(
        "entity_probe",
        lambda inputs, c: Probe(inputs.obs_dim, inputs.n_actions),
        entity=True,
        check=lambda cfg, info: calls.append(info.scenario),
    )
    info = marl.make_env("mpe", "simple_tag", num_envs=1).info  # no entity layout
    with pytest.raises(MarlError, match="agent='entity_probe' needs an entity layout"):
        check_agent({"agent": "entity_probe"}, info)
    info = marl.make_env("mpe", "simple_spread", num_envs=1).info
    check_agent({"agent": "entity_probe"}, info)
    assert calls == ["simple_spread"]
    net = build_agent_net("entity_probe", model_config("ppo", "entity_probe", True), N_ACT)
    assert isinstance(net, Probe)
    with pytest.raises(MarlError, match="describes 9 actions"):
        build_agent_net("entity_probe", model_config("ppo", "entity_probe", True), N_ACT + 1)
