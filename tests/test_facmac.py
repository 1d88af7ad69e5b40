"""FACMAC (algos/facmac.py): hand-computed team targets through the VDN sum and through monotonic and
non-monotonic QMIX mixers, the centralised policy gradient (every agent's action from its current policy),
the actor's action regulariser, learning a continuous and a discrete task random play cannot solve, and every
share mode (exact resume: tests/test_ddpg.py, beside MATD3's and SAC's)."""

import math
from types import SimpleNamespace

import gymnasium as gym
import numpy as np
import pytest
import torch

from marl.algos.ddpg import JOINT, DDPGModule
from marl.algos.facmac import FACMACLayout, action_penalty, facmac_losses, mix
from marl.algos.networks.mixers import QMixer
from test_ddpg import LEARN as DDPG_LEARN
from test_ddpg import brief_fit, constant_actor, linear, per_module
from toy_envs import MatchEnv, TargetEnv

BOX = gym.spaces.Box(-2.0, 2.0, (1,), np.float32)
LAYOUT = FACMACLayout(["shared"], {}, 1, 0, {"team": [("shared", 0), ("shared", 1)]}, "sum")


ACT_ONE = math.atanh(0.5)  # pre-tanh output of an action of 1 in Box(-2, 2)


def two_agents(actor_pre_tanh=ACT_ONE):
    """Two agents in one module; actor and target actor act 1 in Box(-2, 2) (-2 + (0.5 + 1) * 2); the critic and
    its target are ``Q(o, a) = o + 2 a + 0.5``."""
    m = DDPGModule(
        observation_space=gym.spaces.Box(-5, 5, (1,)),
        action_space=BOX,
        model_config=dict(obs_dim=1, critic_dim=2, hidden=4, layers=1, activation="tanh", twin=False),
    )
    m.actor, m.actor_target = constant_actor(actor_pre_tanh), constant_actor(actor_pre_tanh)
    m.critics = torch.nn.ModuleList([linear([1.0, 2.0], 0.5)])
    m.critic_targets = torch.nn.ModuleList([linear([1.0, 2.0], 0.5)])
    return m


def batch(terminated=False, stored_action=1.0):
    """One transition: o = 0, o' = 3, rewards 1 and 1, both agents' stored action ``stored_action``."""
    return {
        "shared": dict(
            obs=torch.zeros(1, 2, 1),
            next_obs=torch.full((1, 2, 1), 3.0),
            actions=torch.full((1, 2, 1), stored_action),
            rewards=torch.ones(1, 2),
        ),
        JOINT: dict(state=torch.ones(1, 1), next_state=torch.ones(1, 1), terminated=torch.tensor([terminated])),
    }


def hand_mixer(monotonic):
    """QMixer(n=2, S=1, embed=1, one-layer hypernetworks) whose weights do not depend on the state: hyper_w1 gives
    [-1, 2], hyper_b1 0, hyper_w2 -1, V(s) = 0.5. Monotonic: Q_tot = elu(|-1| q1 + 2 q2) * |-1| + 0.5;
    non-monotonic: elu(-q1 + 2 q2) * -1 + 0.5."""
    mixer = QMixer(2, 1, embed=1, hypernet_layers=1, monotonic=monotonic)
    with torch.no_grad():
        for lin, bias in ((mixer.hyper_w1, [-1.0, 2.0]), (mixer.hyper_b1, [0.0]), (mixer.hyper_w2, [-1.0])):
            lin.weight.zero_()
            lin.bias.copy_(torch.tensor(bias))
        mixer.value[2].weight.zero_()
        mixer.value[2].bias.fill_(0.5)
    return mixer


CFG = SimpleNamespace(gamma=0.9, target_noise=0.0, target_noise_clip=0.5, actor_reg=0.0)


# ---------------------------------------------------------------- targets
@pytest.mark.parametrize(
    "mixer, terminated, expected",
    [
        # Q'_a(3, 1) = 3 + 2 + 0.5 = 5.5 for both agents; team reward 1 + 1 = 2
        (None, False, 2 + 0.9 * 11.0),  # VDN: 5.5 + 5.5
        (None, True, 2.0),
        (True, False, 2 + 0.9 * (16.5 + 0.5)),  # elu(5.5 + 11) * 1 + 0.5
        (False, False, 2 + 0.9 * (-5.5 + 0.5)),  # elu(-5.5 + 11) * -1 + 0.5
    ],
    ids=["vdn", "vdn-terminal", "qmix", "qmix-nonmonotonic"],
)
def test_team_target_on_known_networks(mixer, terminated, expected):
    """y = r_team + gamma (1 - d) Q_tot'(o', mu'(o'), s') with the target critics and target mixer (Peng et al.
    2021, Sec. 4.1); the critic loss is (Q_tot(o, u, s) - y)^2 with the stored actions."""
    net = None if mixer is None else hand_mixer(mixer)
    mods = {"shared": two_agents()}
    _, metrics = facmac_losses(mods, {"team": net}, {"team": net}, batch(terminated), CFG, LAYOUT, actor_due=False)
    assert float(metrics["team"]["target_mean"]) == pytest.approx(expected, rel=1e-6)
    q_tot = 5.0 if mixer is None else net(torch.tensor([[2.5, 2.5]]), torch.ones(1, 1)).item()  # Q_a(0, 1) = 2.5
    assert float(metrics["team"]["critic_loss"]) == pytest.approx((q_tot - expected) ** 2, rel=1e-5)


def test_actor_loss_takes_every_agents_action_from_its_current_policy():
    """The centralised policy gradient (Eq. 5): Q_tot(s, mu_1(o_1), mu_2(o_2)). The buffer holds action -2 for both
    agents (Q = -3.5 each); the policies act 1 (Q = 2.5 each), so the actor loss is -(2.5 + 2.5) = -5 under VDN;
    MADDPG's form (one agent's action from its policy, the other's from the buffer) would give -(2.5 - 3.5)."""
    mods = {"shared": two_agents()}
    _, metrics = facmac_losses(mods, {"team": None}, {"team": None}, batch(stored_action=-2.0), CFG, LAYOUT, True)
    assert float(metrics["team"]["actor_loss"]) == pytest.approx(-5.0, rel=1e-6)


def test_actor_loss_moves_only_the_actors():
    """The actor loss reaches the actions through frozen critics and a frozen mixer: one backward of it alone
    leaves the critic and the mixer without gradients and gives the actor one."""
    mods, net = {"shared": two_agents(0.1)}, hand_mixer(True)
    cfg = SimpleNamespace(**{**vars(CFG), "gamma": 0.0})
    total_with, _ = facmac_losses(mods, {"team": net}, {"team": net}, batch(), cfg, LAYOUT, actor_due=True)
    total_without, _ = facmac_losses(mods, {"team": net}, {"team": net}, batch(), cfg, LAYOUT, actor_due=False)
    (total_with - total_without).backward()  # the critic loss's gradients cancel: the same computation twice
    critic_grads = [p.grad for p in list(mods["shared"].critics.parameters()) + list(net.parameters())]
    assert all(g is None or torch.count_nonzero(g) == 0 for g in critic_grads)
    assert mods["shared"].actor.lin.bias.grad is not None and mods["shared"].actor.lin.bias.grad.abs() > 0


def test_monotonic_mixer_has_nonnegative_slopes_and_the_nonmonotonic_one_not_always():
    """dQ_tot/dQ_a >= 0 for any weights of the QMIX mixer (abs on the hypernetworks' weights); without abs a
    random mixer has negative slopes somewhere."""
    torch.manual_seed(0)
    qs, state = torch.randn(256, 3, requires_grad=True), torch.randn(256, 4)
    for monotonic in (True, False):
        (grad,) = torch.autograd.grad(mix(qs, state, QMixer(3, 4, monotonic=monotonic)).sum(), qs)
        assert (grad >= 0).all() if monotonic else (grad < 0).any()


def test_action_penalty_is_the_squared_action_in_half_ranges():
    """Box(-2, 2): actions 2, 0 and 1 are 1, 0 and 0.5 half ranges from the centre: mean(1, 0, 0.25)."""
    m = two_agents()
    own = torch.tensor([[[2.0], [0.0]], [[1.0], [0.0]]])
    assert float(action_penalty({"shared": m}, {"shared": own})) == pytest.approx((1 + 0.25) / 4)


# ---------------------------------------------------------------- runs
# the DDPG family's short-run keys, with the DDPG family's optimiser settings instead of FACMAC's MaMuJoCo ones
LEARN = {**DDPG_LEARN, "adam_eps": 1e-8, "max_grad_norm": 5.0, "learning_starts": 0}


@pytest.mark.parametrize("mixer", ["qmix", "vdn"])
def test_learns_to_hit_continuous_targets(tmp_path, mixer):
    """TargetEnv: 2 agents x 5 steps, reward -mean (a - c)^2. Random play returns about -16.7 per episode, the best
    blind action (a = 0) -3.3; a learned policy must beat -1 (measured: qmix -0.083, vdn -0.037)."""
    res = TargetEnv(num_envs=8).fit("facmac", mixer=mixer, stop={"iterations": 80}, log_dir=str(tmp_path), **LEARN)
    assert res.eval["episode_return_mean"] > -1.0, res.eval


def test_discrete_facmac_learns_the_cued_actions(tmp_path):
    """MatchEnv, Gumbel-softmax actors, non-monotonic mixer: random play returns 5 * 2 / 3 = 3.3 per episode, the
    optimum 10; a learned policy must beat 8."""
    res = MatchEnv(num_envs=8).fit(
        "facmac", mixer="qmix_nonmonotonic", stop={"iterations": 80}, log_dir=str(tmp_path), **LEARN
    )
    assert res.eval["episode_return_mean"] > 8.0, res.eval


@pytest.mark.parametrize("share", ["individual", "group"])
def test_facmac_runs_with_every_share_mode(tmp_path, share):
    """Gumbel-softmax actors on MatchEnv: one module per agent (individual) or one (group), one mixer and so one
    critic loss for the team either way, finite."""
    res = brief_fit(MatchEnv(num_envs=4), "facmac", share, tmp_path)
    assert len(res.policy.modules) == (2 if share == "individual" else 1)
    assert len(per_module(res, "critic_loss")) == len(per_module(res, "actor_loss")) == 1
