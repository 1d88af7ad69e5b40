"""Structured observations (image ``Box`` / ``Dict``) in the off-policy actor-critics (issue 32): IDDPG, MADDPG,
MATD3, FACMAC (algos/ddpg.py, algos/facmac.py), ISAC, MASAC (algos/sac.py).

Hand-computed network sizes (the actor's encoder in front of its MLP, the critics' own encoders), the actor loss
never moving the critics' encoders, target copies of the encoders, every algorithm and critic training on
``ImageTargetEnv`` (continuous actions, tests/toy_envs.py) and ``image_cue`` (discrete, envs/cue.py), learning that
reads the image (MADDPG, MASAC), the refusals left, and the learner's metrics (0-d tensors, one host transfer).
Exact resume: tests/test_ddpg.py.
"""

from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch

import marl
from marl.algos.actor_critic_parts import CriticEncoders
from marl.algos.ddpg import DDPG, JOINT, DDPGLearner, DDPGModule, ddpg_losses
from marl.algos.facmac import FACMACLayout, facmac_losses
from marl.algos.networks.encoders import Encoded
from marl.algos.sac import SAC, SACModule, sac_losses
from marl.checkpoint import module_states
from marl.config import load_config
from marl.errors import MarlError, TrainingDiverged
from marl.mapping import PolicyMapping
from test_ddpg import LEARN as VECTOR_LEARN
from toy_envs import ImageTargetEnv, MultiDiscreteEnv

# a small encoder: image conv 8 3x3 stride 1 + fc 16; each vector key (the 2 noise values, the agent one-hot) an
# MLP with one hidden layer of 4 -> F = 16 + 4 + 4 = 24 features per agent
SMALL = {"cnn": {"channels": [8], "kernels": [3], "strides": [1], "fc": [16]}, "mlp": {"hidden": [4]}}
F = 24
CUE = dict(size=8, patch=2)  # image_cue with 8x8 images (4 bands of 2 rows)


def image_cue(num_envs=4):
    return marl.make_env("image_cue", num_envs=num_envs, **CUE)


# ---------------------------------------------------------------- networks and losses, by hand
def build(algo, env, critic, share="all", **over):
    """The mapping, config and learner modules of ``algo`` on ``env`` with ``critic``."""
    cfg = load_config(algo, None, {"critic": critic, "encoder": SMALL, "hidden": 8, "layers": 1, **over})
    mapping = PolicyMapping(env.info, share)
    trainer = SAC if algo in ("isac", "masac") else DDPG
    cls = SACModule if trainer is SAC else DDPGModule
    mods = {}
    for m in mapping.modules:
        mods[m] = cls(
            observation_space=mapping.obs_space(m),
            action_space=mapping.group_info(m).action_space,
            model_config=trainer.module_config(cfg, mapping, m),
        )
    return mapping, cfg, mods


def random_batch(mapping, state_dim, B=16, seed=0):
    """A learner batch of ``B`` random transitions in the buffer's dtypes (uint8 images)."""
    g = torch.Generator().manual_seed(seed)

    def obs(m, n):
        cols = {}
        for col, (shape, dtype) in mapping.obs_columns(m).items():
            size, key = (B, n, *shape), col.split("/", 1)[1]
            if dtype == np.uint8:
                cols[key] = torch.randint(0, 256, size, generator=g, dtype=torch.uint8)
            else:
                cols[key] = torch.rand(size, generator=g)
        return cols

    out = {}
    for m in mapping.modules:
        n, gi = mapping.n_agents(m), mapping.group_info(m)
        b = dict(
            obs=obs(m, n), next_obs=obs(m, n), rewards=torch.rand(B, n, generator=g), alive=torch.ones(B, n, dtype=bool)
        )
        if gi.discrete:
            b["actions"] = torch.randint(0, gi.n_actions, (B, n), generator=g)
            b["avail"] = b["next_avail"] = torch.ones(B, n, gi.n_actions, dtype=torch.bool)
        else:
            b["actions"] = torch.rand(B, n, gi.n_actions, generator=g) * 2 - 1
        out[m] = b
    s = lambda: torch.rand(B, state_dim, generator=g)  # noqa: E731
    out[JOINT] = dict(state=s(), next_state=s(), terminated=torch.rand(B, generator=g) < 0.3)
    return out


def losses(algo, mods, batch, cfg, actor_due):
    if algo == "facmac":  # VDN's sum over the team: no mixer module
        layout = FACMACLayout(list(mods), {}, 0, 0, {"team": [("shared", 0), ("shared", 1)]}, "mean")
        return facmac_losses(mods, {"team": None}, {"team": None}, batch, cfg, layout, actor_due)
    return (sac_losses if algo in ("isac", "masac") else ddpg_losses)(mods, batch, cfg, actor_due)


# ImageTargetEnv: 2 agents (one shared module: an agent one-hot of 2), actions K = 2, state N K = 4.
# Critic inputs: obs F + K = 26; joint_obs 2 F + 2 K + 2 (agent one-hot of a shared critic) = 54; state 4 + 4 + 2 = 10.
CRITIC_IN = {"obs": F + 2, "joint_obs": 2 * F + 2 * 2 + 2, "state": 4 + 2 * 2 + 2}
UNIT = [(a, c) for a in ("maddpg", "matd3", "masac") for c in CRITIC_IN] + [("facmac", "obs")]


@pytest.mark.parametrize("algo, critic", UNIT)
def test_networks_read_images_through_encoders_of_hand_computed_sizes(algo, critic):
    over = {"mixer": "vdn"} if algo == "facmac" else {}
    mapping, cfg, mods = build(algo, ImageTargetEnv(num_envs=2), critic, **over)
    mod = mods["shared"]
    assert isinstance(mod.actor, Encoded) and mod.actor.encoder.out_dim == F
    assert isinstance(mod.actor_target if algo != "masac" else mod.actor, Encoded)
    assert all(c.net[0].in_features == CRITIC_IN[critic] for c in mod.critics)
    if critic == "state":  # the state vector needs no encoder
        assert mod.critic_encoder is None
        return
    assert isinstance(mod.critic_encoder, CriticEncoders) and mod.critic_encoder.out_dim == CRITIC_IN[critic] - (
        2 if critic == "obs" else 6
    )
    # the critics' encoder is their own (not the actor's), its target a frozen copy
    actor_params = {id(p) for p in mod.actor.parameters()}
    assert not actor_params & {id(p) for p in mod.critic_encoder.parameters()}
    online, target = mod.critic_encoder.state_dict(), mod.critic_encoder_target.state_dict()
    assert online.keys() == target.keys() and all(torch.equal(online[k], target[k]) for k in online)
    assert not any(p.requires_grad for p in mod.critic_encoder_target.parameters())
    assert (mod.critic_encoder, mod.critic_encoder_target) in mod.target_pairs()


def _grads(algo, critic, actor_due):
    torch.manual_seed(0)
    over = {"mixer": "vdn"} if algo == "facmac" else {}
    mapping, cfg, mods = build(algo, ImageTargetEnv(num_envs=2), critic, **over)
    loss, metrics = losses(algo, mods, random_batch(mapping, 4), cfg, actor_due)
    loss.backward()
    named = mods["shared"].named_parameters()
    return {n: None if p.grad is None else p.grad.clone() for n, p in named}, metrics


@pytest.mark.parametrize("algo, critic", [u for u in UNIT if u[1] != "state"])
def test_actor_loss_moves_the_actors_encoder_and_never_the_critics(algo, critic):
    with_actor, metrics = _grads(algo, critic, True)
    without, _ = _grads(algo, critic, False)
    critic_side = [n for n in with_actor if n.startswith(("critics.", "critic_encoder."))]
    assert any(n.startswith("critic_encoder.") for n in critic_side)
    for n in critic_side:  # the critic loss alone moves them: the same gradient with and without the actor loss
        assert with_actor[n] is not None and torch.equal(with_actor[n], without[n]), n
    assert any(with_actor[n].abs().sum() > 0 for n in critic_side if n.startswith("critic_encoder."))
    actor_enc = [n for n in with_actor if n.startswith("actor.encoder.")]
    assert actor_enc and any(with_actor[n] is not None and with_actor[n].abs().sum() > 0 for n in actor_enc)
    assert all(without[n] is None for n in actor_enc)  # an off-step (policy_delay) leaves the actor
    team = next(iter(metrics.values()))  # 0-d tensors: the learner reads them all with one host sync
    assert all(isinstance(v, torch.Tensor) and v.dim() == 0 and torch.isfinite(v) for v in team.values())


def test_joint_obs_critics_of_separate_modules_own_encoders_of_every_module():
    """share='individual': each module's critic encodes both agents' observations with encoders of its own, so one
    module's critic loss moves none of the other module's parameters."""
    mapping, cfg, mods = build("maddpg", image_cue(2), "joint_obs", share="individual")
    assert list(mods) == ["agent_0", "agent_1"]
    # image_cue 8x8x3 uint8 + vector 4 (no agent one-hot: one agent per module): 16 + 4 features per agent
    for mod in mods.values():
        assert mod.actor.encoder.out_dim == 20 and mod.critic_encoder.out_dim == 2 * 20
        assert mod.critics[0].net[0].in_features == 2 * 20 + 2 * 4  # + both agents' one-hot actions
    batch = random_batch(mapping, image_cue(2).info.state_dim)
    mods["agent_1"].requires_grad_(False)
    loss, _ = ddpg_losses(mods, batch, cfg, True)
    loss.backward()
    assert all(p.grad is None for p in mods["agent_1"].parameters())
    assert all(p.grad is not None for p in mods["agent_0"].critic_encoder.parameters())


# ---------------------------------------------------------------- every algorithm and critic trains
def brief_fit(env, algo, run_dir, **kw):
    """3 iterations of 2 gradient steps each; the result."""
    base = dict(rollout_length=5, batch_size=8, gradient_steps=2, per_env_steps=20, learning_starts=0, hidden=16)
    base.update(eval_episodes=4, encoder=SMALL, progress=False, checkpoint_every=0)
    return env.fit(algo, stop={"iterations": 3}, log_dir=run_dir, **{**base, **kw})


FITS = [(a, {"critic": c}) for a in ("iddpg", "maddpg", "matd3", "isac", "masac") for c in CRITIC_IN]
FITS += [("facmac", {"mixer": "qmix"}), ("facmac", {"mixer": "vdn"})]


@pytest.mark.parametrize("algo, kw", FITS, ids=[f"{a}-{next(iter(k.values()))}" for a, k in FITS])
def test_every_algorithm_and_critic_trains_on_images(ray_session, run_dir, algo, kw):
    """Continuous actions on ImageTargetEnv: finite losses, and the learner's critic has the hand-computed input."""
    res = brief_fit(ImageTargetEnv(num_envs=4), algo, run_dir, **kw)
    for name in ("critic_loss", "actor_loss", "q_mean"):
        values = [v for k, v in res.metrics.items() if k.endswith(f"/{name}")]
        assert values and np.isfinite(values).all(), (name, res.metrics)
    assert res.eval["episodes"] == 4 and np.isfinite(res.eval["episode_return_mean"])
    state = module_states(Path(res.checkpoint), ["shared"])["shared"]
    critic = kw.get("critic", "obs")
    # F = 24 per agent, as above (hidden 16 does not change the inputs)
    assert state["critics.0.net.0.weight"].shape[1] == CRITIC_IN[critic]
    assert any(k.startswith("critic_encoder.") for k in state) == (critic != "state")
    assert any(k.startswith("actor.encoder.") for k in state)


@pytest.mark.parametrize("algo", ["maddpg", "masac", "facmac"])
def test_discrete_actions_on_image_cue_with_one_module_per_agent(ray_session, run_dir, algo):
    """Gumbel-softmax (MADDPG, FACMAC) and discrete SAC actors on image_cue's Dict observations, share='individual'."""
    kw = {"mixer": "vdn"} if algo == "facmac" else {}
    res = brief_fit(image_cue(), algo, run_dir, share="individual", **kw)
    losses_ = [v for k, v in res.metrics.items() if k.endswith("/critic_loss")]
    assert len(losses_) == (1 if algo == "facmac" else 2) and np.isfinite(losses_).all(), res.metrics
    assert set(res.policy.modules) == {"agent_0", "agent_1"}


# ---------------------------------------------------------------- learning that reads the image
NOISE = ("exploration_noise_start", "exploration_noise_end", "exploration_anneal_steps")  # the DDPG family's keys
# test_ddpg's learning keys on TargetEnv, with the small encoder
LEARN = {**{k: v for k, v in VECTOR_LEARN.items() if k not in NOISE}, "encoder": SMALL, "seed": 0}


@pytest.mark.parametrize(
    "algo, iterations, kw",
    [
        ("maddpg", 80, {k: VECTOR_LEARN[k] for k in NOISE}),
        ("masac", 80, dict(alpha_init=0.1)),
    ],
)
def test_learns_targets_shown_only_in_the_image(run_dir, algo, iterations, kw):
    """ImageTargetEnv (2 agents x 5 steps, targets in a 3x3 uint8 image): random play returns about -16.7 per
    episode, the best policy blind to the image (a = 0) -3.3; a learned policy must beat -1, which only reading the
    image allows. Measured after 80 iterations (3,200 env steps), seeds 0 / 1 / 2: MADDPG -0.16 / -0.05 / -0.15,
    MASAC -0.23 / -0.09 / -0.13 (11 to 16 s each on the shared 2-core machine)."""
    res = ImageTargetEnv(num_envs=8).fit(algo, stop={"iterations": iterations}, log_dir=run_dir, **LEARN, **kw)
    assert res.eval["episode_return_mean"] > -1.0, res.eval


# ---------------------------------------------------------------- what is still refused
@pytest.mark.parametrize("algo", ["maddpg", "facmac", "masac"])
def test_a_bad_encoder_is_refused_on_load_naming_the_entry_and_the_choices(algo):
    with pytest.raises(MarlError, match=r"encoder has an unknown entry 'gru'; valid entries: cnn, mlp"):
        load_config(algo, None, {"encoder": {"gru": {"hidden": [8]}}})
    with pytest.raises(MarlError, match=r"encoder\.cnn needs channels, kernels and strides of one length"):
        load_config(algo, None, {"encoder": {"cnn": {"channels": [8, 8]}}})


def test_structured_observations_with_unsupported_actions_are_refused(run_dir):
    env = MultiDiscreteEnv(num_envs=2)
    env.info.groups["agent"].obs_space = ImageTargetEnv().info.groups["agent"].obs_space
    with pytest.raises(MarlError, match=r"has actions MultiDiscrete\(\[2 2\]\); supported: a 1-D Box or Discrete"):
        env.fit("maddpg", stop={"iterations": 1}, log_dir=run_dir, progress=False)


def test_a_state_critic_without_a_state_is_refused_naming_the_choice(run_dir):
    env = ImageTargetEnv(num_envs=2)
    env.info.state_dim = 0
    with pytest.raises(MarlError, match=r"critic='state' needs a global state; .* use joint_obs"):
        env.fit("masac", critic="state", stop={"iterations": 1}, log_dir=run_dir, progress=False)


# ---------------------------------------------------------------- the learner's one host sync
class _Learner(DDPGLearner):
    """DDPGLearner.compute_losses on given losses and metrics, its logging recorded (no RLlib learner around it)."""

    cfg = SimpleNamespace(algo="maddpg")
    run = SimpleNamespace(agent_to_module={"agent_0": "shared"})

    def __init__(self, total, metrics):
        self.out, self.logged = (total, metrics), {}
        self.metrics = SimpleNamespace(log_value=lambda key, v, window: self.logged.__setitem__(key, v))

    def joint_losses(self, batch):
        return self.out


def test_compute_losses_logs_every_tensor_metric_as_a_number_and_refuses_a_non_finite_loss():
    metrics = {"shared": {"critic_loss": torch.tensor(0.5), "alpha": torch.tensor(0.25), "q_mean": 2.0}}
    learner = _Learner(torch.tensor(1.5, requires_grad=True), metrics)
    assert learner.compute_losses(fwd_out={}, batch={})["shared"] is learner.out[0]
    assert learner.logged == {("shared", "critic_loss"): 0.5, ("shared", "alpha"): 0.25, ("shared", "q_mean"): 2.0}
    assert all(type(v) is float for v in learner.logged.values())
    for bad in (float("nan"), float("inf")):
        with pytest.raises(TrainingDiverged, match=r"maddpg loss is (nan|inf) \(not finite\)"):
            _Learner(torch.tensor(bad), metrics).compute_losses(fwd_out={}, batch={})
