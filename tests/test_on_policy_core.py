"""The on-policy core (marl/engine/on_policy.py) on hand-computed values and properties: critic kinds and
``auto``, rollout -> sequences, GAE and the advantage estimator hook, training rows, minibatches, the
learner's loss plumbing. No Ray: the learner's data path runs on a learner built without RLlib's setup."""

from types import SimpleNamespace

import pytest
import torch

from marl.config import load_config, restore_config
from marl.engine.on_policy import (
    OnPolicyLearner,
    OnPolicyTrainer,
    critic_inputs,
    critic_model_config,
    final_values,
    gae,
    next_values,
    normalize_advantages,
    resolve_critic,
    rollout_to_sequences,
)
from marl.env import MarlError
from marl.errors import TrainingDiverged
from marl.mapping import PolicyMapping
from run_helpers import ppo_module as small_ppo_module
from toy_envs import MatchEnv


# ---------------------------------------------------------------- helpers
class Recorder:
    """Stands in for RLlib's ``MetricsLogger``: keeps the last value logged under each key."""

    def __init__(self):
        self.logged = {}

    def log_value(self, key, value, window=None):
        self.logged[key] = value


class Bare(OnPolicyLearner):
    """An ``OnPolicyLearner`` without RLlib's ``Learner`` setup: config and modules given directly, and the
    gradient step records its minibatch instead of stepping. Only the core's data path runs on it."""

    def __init__(self, modules, **cfg):  # no super().__init__: nothing of RLlib's setup is needed here
        self.test_cfg, self.test_modules, self.steps = SimpleNamespace(**cfg), modules, []
        self.metrics = Recorder()
        if hasattr(type(self), "loss_terms"):  # what build() sets, without compiling
            self._loss_terms, self._loss_params = type(self).loss_terms, self.loss_params()

    cfg = property(lambda self: self.test_cfg)
    module = property(lambda self: self.test_modules)

    def gradient_step(self, batch):
        self.steps.append(batch)


CFG = dict(
    gamma=0.9, gae_lambda=0.8, value_norm=False, advantage_norm=False, chunk_length=3, epochs=1, num_minibatches=1
)


class FeatureCritic(torch.nn.Module):
    """A per-agent critic whose value is the first feature of its input (values known by construction)."""

    team = recurrent = False
    value_norm = None

    def values(self, critic_in):
        return critic_in[..., 0]

    def unwrapped(self):
        return self


def one_sequence(rewards, values, final=None, terminated=None, truncated=None):
    """Sequence columns ``[1, T(+1), ...]`` of one (env copy, agent) with the values of :class:`FeatureCritic`."""
    T = len(rewards)
    z = torch.zeros(1, T, dtype=torch.bool)
    return {
        "obs": torch.zeros(1, T + 1, 2),
        "critic_in": torch.tensor([values]).unsqueeze(-1),
        "final_critic_in": torch.tensor([final or [0.0] * T]).unsqueeze(-1),
        "rewards": torch.tensor([rewards]),
        "actions": torch.zeros(1, T),
        "logp": torch.zeros(1, T),
        "alive": torch.ones(1, T, dtype=torch.bool),
        "terminated": z if terminated is None else torch.tensor([terminated]),
        "truncated": z if truncated is None else torch.tensor([truncated]),
    }


def layout(team=False, recurrent=False, **extra):
    """A module stand-in that only tells the core its layout."""
    module = SimpleNamespace(team=team, recurrent=recurrent, unwrapped=lambda: module, **extra)
    return module


def ppo_module(team=False, recurrent=False, n_agents=3, critic_dim=6):
    return small_ppo_module(team=team, recurrent=recurrent, n_agents=n_agents, critic_dim=critic_dim)


def random_rollout(T=6, B=2, N=3, S=6, D=4, recurrent=False, seed=1):
    g = torch.Generator().manual_seed(seed)
    term, trunc = torch.zeros(T, B, dtype=torch.bool), torch.zeros(T, B, dtype=torch.bool)
    term[2, 0], trunc[4, 1] = True, True
    mod = {
        "obs": torch.randn(T + 1, B, N, D, generator=g),
        "final_obs": torch.randn(T, B, N, D, generator=g),
        "actions": torch.randint(0, 3, (T, B, N), generator=g),
        "logp": torch.randn(T, B, N, generator=g),
        "rewards": torch.randn(T, B, N, generator=g),
        "alive": torch.ones(T, B, N, dtype=torch.bool),
    }
    starts = torch.zeros(T, B, dtype=torch.bool)
    starts[0] = True
    if recurrent:
        mod["h"] = torch.randn(T, B, N, 5, generator=g)
    return {
        "state": torch.randn(T + 1, B, S, generator=g),
        "final_state": torch.randn(T, B, S, generator=g),
        "terminated": term,
        "truncated": trunc,
        "starts": starts,
        "modules": {"shared": mod},
    }


def sequences(rollout, critic):
    return {k: torch.as_tensor(v) for k, v in rollout_to_sequences(rollout, critic).policy_batches["shared"].items()}


# ---------------------------------------------------------------- critic kinds
def test_auto_resolves_once_and_the_key_keeps_auto():
    cfg = load_config("mappo", "mpe")
    assert cfg.critic == "auto" and cfg.critic_kind == "team"  # MLP actors
    assert cfg.replace(recurrent=True).critic_kind == "state"  # GRU actors: team does not serve them
    assert load_config("ippo", "mpe", {"recurrent": True}).critic_kind == "obs"
    assert cfg.to_dict()["critic"] == "auto" and "critic_kind" not in cfg.to_dict()  # not a key
    old = {**load_config("mappo", "mpe").to_dict(), "recurrent": True}  # a checkpoint's saved config said auto
    assert restore_config("mappo", old).critic_kind == "state"
    assert [resolve_critic(c, False) for c in ("state", "team", "obs", "auto")] == ["state", "team", "obs", "team"]
    with pytest.raises(MarlError, match="critic=team evaluates the critic once per env step.*critic=state"):
        load_config("mappo", "mpe", {"critic": "team", "recurrent": True})


def test_critic_inputs_ippo_vs_mappo():
    obs = torch.randn(5, 3, 7)
    state = torch.randn(5, 21)
    assert critic_inputs("obs", obs, state, 3).shape == (5, 3, 7)
    c = critic_inputs("state", obs, state, 3)
    assert c.shape == (5, 3, 21 + 3)
    assert torch.equal(c[:, 1, :21], state) and torch.equal(c[:, 1, 21:], torch.tensor([0.0, 1.0, 0.0]).expand(5, 3))


def test_critic_model_config_widths_and_heads():
    mapping = PolicyMapping(MatchEnv(num_envs=2, N=3, A=4).info, "all")  # obs 4 + one-hot of 3 agents, state 12
    assert critic_model_config("state", mapping, "shared") == {
        "critic_dim": 15,
        "critic_heads": 1,
        "team_critic": False,
    }
    assert critic_model_config("team", mapping, "shared") == {"critic_dim": 12, "critic_heads": 3, "team_critic": True}
    assert critic_model_config("obs", mapping, "shared")["critic_dim"] == mapping.obs_dim("shared")


def test_minibatches_above_the_rows_are_refused_team_counts_env_steps():
    mapping = PolicyMapping(MatchEnv(num_envs=2, N=3, A=4).info, "all")
    for critic, rows in (("state", 2 * 3 * 5), ("team", 2 * 5)):  # env copies x agents x steps; team: no agents
        cfg = load_config("mappo", None, {"critic": critic, "rollout_length": 5, "num_minibatches": rows})
        OnPolicyTrainer.check_mapping(cfg, mapping)
        with pytest.raises(MarlError, match=f"num_minibatches={rows + 1} is more than the {rows} rows"):
            OnPolicyTrainer.check_mapping(cfg.replace(num_minibatches=rows + 1), mapping)


# ---------------------------------------------------------------- rollout -> sequences
@pytest.mark.parametrize("critic", ["state", "obs"])
def test_sequences_are_env_copy_agent_rows(critic):
    T, B, N, S, D = 6, 2, 3, 6, 4
    rollout = random_rollout(T, B, N, S, D, recurrent=True)
    cols = sequences(rollout, critic)
    C = S + N if critic == "state" else D
    shapes = {
        "obs": (B * N, T + 1, D),
        "critic_in": (B * N, T + 1, C),
        "final_critic_in": (B * N, T, C),
        "rewards": (B * N, T),
        "h": (B * N, T, 5),
        "starts": (B * N, T),
        "terminated": (B * N, T),
    }
    assert {k: tuple(cols[k].shape) for k in shapes} == shapes
    mod = rollout["modules"]["shared"]
    b, n = 1, 2
    assert torch.equal(cols["rewards"][b * N + n], mod["rewards"][:, b, n])  # row b*N + n: copy b, agent n
    assert torch.equal(cols["truncated"][b * N + n], rollout["truncated"][:, b])
    if critic == "state":
        assert torch.equal(cols["critic_in"][b * N + n, :, :S], rollout["state"][:, b])
        assert torch.equal(cols["critic_in"][b * N + n, 0, S:], torch.eye(N)[n])
    else:
        assert torch.equal(cols["final_critic_in"][b * N + n], mod["final_obs"][:, b, n])


def test_final_values_only_where_truncated():
    torch.manual_seed(0)
    m = ppo_module()
    final_in = torch.randn(5, 7, 6)
    trunc = torch.zeros(5, 7, dtype=torch.bool)
    trunc[1, 3] = trunc[4, 6] = True
    v = final_values(m, final_in, trunc, torch.empty(5, 7))
    full = m.values(final_in)
    assert torch.allclose(v[trunc], full[trunc]) and bool((v[~trunc] == 0).all())
    assert bool((final_values(m, final_in, torch.zeros_like(trunc), torch.empty(5, 7)) == 0).all())
    t = ppo_module(team=True)  # team critic: [B, T, S] inputs, [B, T, N] values
    tv = final_values(t, final_in, trunc, torch.empty(5, 7, 3))
    assert torch.allclose(tv[trunc], t.values(final_in)[trunc]) and bool((tv[~trunc] == 0).all())


# ---------------------------------------------------------------- GAE and the estimator
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


def test_learner_gae_by_hand_with_truncation_and_termination():
    """r = [1, 0, 2], V = [0.5, 1, -1], V_3 = 2, gamma 0.9, lambda 0.8. Truncated after step 1 with final value 4:
    deltas 1.4, 2.6, 4.8; A_2 = 4.8, A_1 = 2.6 (the recursion stops), A_0 = 1.4 + 0.72 * 2.6 = 3.272.
    Terminated there instead: next value 0, delta_1 = -1, A_1 = -1, A_0 = 1.4 - 0.72 = 0.68."""
    learner = Bare({"m": FeatureCritic()}, **CFG)
    trunc = one_sequence([1.0, 0.0, 2.0], [0.5, 1.0, -1.0, 2.0], final=[0.0, 4.0, 0.0], truncated=[False, True, False])
    out = learner.prepare("m", trunc)
    assert torch.allclose(out["advantages"][0], torch.tensor([3.272, 2.6, 4.8]), atol=1e-6)
    assert torch.allclose(out["returns"][0], torch.tensor([3.772, 3.6, 3.8]), atol=1e-6)  # A + V
    assert torch.equal(out["values_old"][0], torch.tensor([0.5, 1.0, -1.0]))
    assert out["obs"].shape == (1, 3, 2) and out["critic_in"].shape == (1, 3, 1)  # the bootstrap step dropped
    term = one_sequence([1.0, 0.0, 2.0], [0.5, 1.0, -1.0, 2.0], final=[0.0, 4.0, 0.0], terminated=[False, True, False])
    assert torch.allclose(learner.prepare("m", term)["advantages"][0], torch.tensor([0.68, -1.0, 4.8]), atol=1e-6)
    assert ("m", "explained_variance") in learner.metrics.logged


def test_learner_runs_gae_on_denormalised_values_and_an_overridden_estimator():
    class Affine:  # normalised v -> raw 2v + 1
        def denormalize(self, x):
            return 2 * x + 1

    critic = FeatureCritic()
    critic.value_norm = Affine()
    seq = one_sequence([1.0, 0.0, 2.0], [0.5, 1.0, -1.0, 2.0])
    out = Bare({"m": critic}, **{**CFG, "value_norm": True}).prepare("m", seq)
    raw = torch.tensor([2.0, 3.0, -1.0, 5.0])  # 2V + 1
    no_end = torch.zeros(3, dtype=torch.bool)
    assert torch.allclose(out["advantages"][0], gae(seq["rewards"][0], raw[:-1], raw[1:], no_end, 0.9, 0.8))
    assert torch.equal(out["values_old"][0], torch.tensor([0.5, 1.0, -1.0]))  # the loss compares normalised values

    class TD0(Bare):  # another estimator: one-step TD errors
        def advantages(self, rewards, values, next_values, dones):
            return rewards + self.cfg.gamma * next_values - values

    adv = TD0({"m": FeatureCritic()}, **CFG).prepare("m", seq)["advantages"][0]
    assert torch.allclose(adv, torch.tensor([1.4, -1.9, 4.8]))  # 1 + 0.9 - 0.5, 0 - 0.9 - 1, 2 + 1.8 + 1


def test_team_critic_rows_and_advantages_by_hand():
    """Team layout: one critic row per env step; GAE per agent on the team critic's head of that agent."""
    T, B, N, S = 6, 2, 3, 6
    rollout = random_rollout(T, B, N, S)
    mod, term, trunc = rollout["modules"]["shared"], rollout["terminated"], rollout["truncated"]
    cols = sequences(rollout, "team")
    assert cols["critic_in"].shape == (B, T + 1, S) and cols["obs"].shape == (B, N, T + 1, 4)
    assert torch.equal(cols["rewards"][1, 2], mod["rewards"][:, 1, 2])  # [B, N, T]: copy 1, agent 2
    m = ppo_module(team=True, n_agents=N, critic_dim=S)
    learner = Bare({"shared": m}, **CFG)
    out = learner.training_rows("shared", learner.prepare("shared", cols))
    assert out["obs"].shape == (B * T, N, 4) and out["critic_in"].shape == (B * T, S)
    with torch.no_grad():  # by hand for copy b=1, agent n=2 (its episode truncated at t=4)
        v = m.values(rollout["state"][:, 1])[:, 2]  # [T+1]
        vf = torch.zeros(T)
        vf[4] = m.values(rollout["final_state"][4, 1])[2]
        adv = gae(
            mod["rewards"][:, 1, 2],
            v[:-1],
            next_values(v, vf, term[:, 1], trunc[:, 1]),
            term[:, 1] | trunc[:, 1],
            0.9,
            0.8,
        )
    rows = torch.arange(T) + T * 1  # env-step rows of copy 1
    assert torch.allclose(out["advantages"][rows, 2], adv, atol=1e-6)
    assert torch.allclose(out["returns"][rows, 2], adv + v[:-1], atol=1e-6)
    assert torch.equal(out["critic_in"][rows], rollout["state"][:T, 1])
    fwd = m._forward_train({"obs": out["obs"][:4], "critic_in": out["critic_in"][:4]})
    assert fwd["dist_in"].shape == (4 * N, 3) and fwd["values"].shape == (4 * N,)
    assert torch.allclose(fwd["values"].view(4, N), out["values_old"][:4], atol=1e-6)


# ---------------------------------------------------------------- training rows and minibatches
@pytest.mark.parametrize(
    "T,chunk,L", [(6, 3, 3), (5, 3, 5), (6, 0, 6)], ids=["chunks", "whole_rollout", "chunk_length_0"]
)
def test_gru_rows_are_chunks_from_the_stored_state(T, chunk, L):
    """chunk_length 3: T=6 gives two chunks per sequence; T=5 (3 does not divide it) one chunk of the whole
    rollout; chunk_length 0 always one chunk of the whole rollout (EPyMARL's whole-episode backpropagation)."""
    B, N = 2, 3
    cols = sequences(random_rollout(T, B, N, recurrent=True), "state")
    module = layout(recurrent=True)
    data = {"actions": cols["actions"], "h": cols["h"], "starts": torch.ones(B * N, T, dtype=torch.bool)}
    rows = Bare({"m": module}, **{**CFG, "chunk_length": chunk}).training_rows("m", dict(data))
    n = B * N * (T // L)
    assert rows["actions"].shape == (n, L) and rows["h0"].shape == (n, 5) and "h" not in rows
    assert torch.equal(rows["h0"], cols["h"][:, ::L].reshape(n, 5))  # the stored state at each chunk's first step
    assert not rows["starts"][:, 0].any() and rows["starts"][:, 1:].all()  # h0 already is the chunk's start state
    assert torch.equal(rows["actions"].reshape(B * N, T), cols["actions"])  # chunks in order, nothing dropped


def test_minibatches_cover_every_row_once_per_epoch():
    torch.manual_seed(0)
    module = layout()
    learner = Bare({"a": module, "b": module}, **{**CFG, "epochs": 2, "num_minibatches": 3})
    data = {
        mid: {"actions": torch.arange(10) + off, "twice": 2 * (torch.arange(10) + off)}
        for mid, off in (("a", 0), ("b", 100))
    }
    learner.run_epochs(data)
    assert len(learner.steps) == 2 * 3 and all(set(s) == {"a", "b"} for s in learner.steps)  # every module, every step
    for epoch in (learner.steps[:3], learner.steps[3:]):
        for mid, off in (("a", 0), ("b", 100)):
            parts = [s[mid]["actions"] for s in epoch]
            assert sorted(len(p) for p in parts) == [3, 3, 4]
            assert sorted(torch.cat(parts).tolist()) == list(range(off, off + 10))  # each row exactly once
            assert all(torch.equal(s[mid]["twice"], 2 * s[mid]["actions"]) for s in epoch)  # columns stay aligned
    one = Bare({"a": module}, **CFG)
    assert list(one.minibatches(data["a"])) == [data["a"]]  # one minibatch: the whole batch, unshuffled


# ---------------------------------------------------------------- the loss plumbing
def test_loss_sees_flat_rows_after_the_value_normaliser_update():
    """Nested ``[M, L, ...]`` columns reach the loss as ``[M*L]`` rows, without the forward-only columns;
    the normaliser folds in the returns of active rows first; a non-finite loss part stops the run."""
    seen, folded = {}, []

    class Norm:
        def update(self, x, mask):
            folded.append(x[mask].clone())

    def scaled_values(module, fwd_out, rows, scale):
        seen.update(rows)
        loss = scale * fwd_out["values"].sum()
        return loss, {"policy_loss": loss, "value_loss": loss * float("inf") if scale < 0 else loss}

    class Learner(Bare):
        loss_terms = staticmethod(scaled_values)

        def loss_params(self):
            return (self.cfg.scale,)

    module = layout(recurrent=True, value_norm=Norm())
    learner = Learner({"m": module}, **{**CFG, "value_norm": True, "scale": 2.0})
    active = torch.tensor([[True, False], [True, True]])
    batch = {
        "returns": torch.tensor([[1.0, 2.0], [3.0, 4.0]]),
        "active": active,
        "h0": torch.zeros(2, 5),
        "starts": torch.zeros(2, 2, dtype=torch.bool),
        "critic_in": torch.zeros(2, 2, 3),
    }
    loss = learner.compute_loss_for_module(module_id="m", config=None, batch=batch, fwd_out={"values": torch.ones(4)})
    assert loss.item() == 8.0 and set(seen) == {"returns", "active"} and seen["returns"].shape == (4,)
    assert folded[0].tolist() == [1.0, 3.0, 4.0] and learner.metrics.logged[("m", "policy_loss")] == 8.0
    learner.test_cfg.scale = -1.0
    learner = Learner({"m": module}, **vars(learner.test_cfg))
    with pytest.raises(TrainingDiverged, match="value_loss of module 'm' is .*inf.*not finite"):
        learner.compute_loss_for_module(module_id="m", config=None, batch=batch, fwd_out={"values": torch.ones(4)})
