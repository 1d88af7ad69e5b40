"""ISAC and MASAC: soft actor-critics with automatic entropy tuning on the off-policy core, continuous and
discrete actions.

Sources: Haarnoja et al. 2018 ("Soft Actor-Critic Algorithms and Applications", arXiv 1812.05905): the
tanh-squashed Gaussian policy and its log-likelihood (Appendix C, Eq. 21), twin Q-functions and the min of
the two (Sec. 5, Algorithm 1), the soft Q target (Eq. 2-3), the policy loss (Eq. 7 with the
reparameterisation of Eq. 11) and the temperature loss (Eq. 18); Christodoulou 2019 ("Soft Actor-Critic for
Discrete Action Settings", arXiv 1910.07207): discrete actions, the expectations over the action
distribution computed exactly instead of sampled (Eq. 10-12). ``critic: obs`` is ISAC, ``joint_obs`` /
``state`` MASAC (a centralised critic on all agents' actions, as MADDPG's, Lowe et al. 2017, arXiv
1706.02275, Sec. 4.1). Defaults: BenchMARL's (Bettini et al. 2024, arXiv 2312.01472). Equations, keys,
limits: ``docs/algorithms/sac.md``.

The networks, critic inputs, batches, targets, Polyak updates, action bounds and masks are the DDPG family's
(:mod:`marl.algos.ddpg`); this module adds the stochastic actor, the temperature and the soft losses.
"""

from __future__ import annotations

import math
from typing import Any, Dict, List, Optional, Tuple

import torch
from torch.nn import functional as F

from marl.algos.actor_critic_parts import actor_critic_inputs, actor_obs, detached
from marl.algos.ddpg import DDPG, DDPGLearner, DDPGModule, batch_views, critic_inputs, critic_regression
from marl.algos.ddpg import critic_target, frozen, gumbel_softmax_st, q_values
from marl.algos.policy_gradient import masked_mean
from marl.algos.sac_config import AUTO, SACConfig
from marl.config import config_view

# the smallest standard deviation of the pre-tanh Gaussian: the min_val of tensordict's biased_softplus, which
# BenchMARL's scale mapping uses (its NormalParamExtractor's own floor, scale_lb 1e-4, never binds above it)
MIN_STD = 0.01
# softplus(x + STD_BIAS) + MIN_STD is 1 at x = 0: the initial policy's std is 1 (BenchMARL's scale_mapping
# "biased_softplus_1.0", Bettini et al. 2024, arXiv 2312.01472), and it grows only linearly for large x
STD_BIAS = math.log(math.expm1(1.0 - MIN_STD))


# ============================================================ the squashed Gaussian
def squashed_log_prob(z: torch.Tensor, mean: torch.Tensor, std: torch.Tensor, half: torch.Tensor) -> torch.Tensor:
    """``log pi(a | o)`` of the action ``a = low + (tanh(z) + 1) h`` for ``z ~ N(mean, std^2)`` (Haarnoja et al.
    2018, arXiv 1812.05905, Appendix C, Eq. 21, with the affine map to the bounds):
    ``sum_k [log N(z_k; mean_k, std_k) - log(1 - tanh(z_k)^2) - log h_k]``, in nats.

    ``z``, ``mean``, ``std [..., K]``; ``half``: ``h = (high - low) / 2``, ``[K]``. Returns ``[...]``.
    ``log(1 - tanh(z)^2)`` is computed as ``2 (log 2 - z - softplus(-2 z))``, finite where ``tanh(z)`` rounds to
    ``+-1``."""
    log_det = 2.0 * (math.log(2.0) - z - F.softplus(-2.0 * z))
    normal = torch.distributions.Normal(mean, std).log_prob(z)
    return (normal - log_det - torch.log(half)).sum(-1)


def target_entropy(mod: DDPGModule, cfg: Any) -> float:
    """The temperature's target entropy, nats: ``target_entropy`` when a number; ``auto``: ``-K`` for ``K``
    continuous action dimensions (Haarnoja et al. 2018, arXiv 1812.05905, Sec. 5), ``w log A`` for ``A``
    discrete actions with ``w = discrete_target_entropy_weight`` (Christodoulou 2019, arXiv 1910.07207, Sec. 4
    targets a fraction of the maximum entropy ``log A``; BenchMARL's weight)."""
    if cfg.target_entropy != AUTO:
        return float(cfg.target_entropy)
    if mod.discrete:
        return float(cfg.discrete_target_entropy_weight) * math.log(mod.action_dim)
    return -float(mod.action_dim)


# ============================================================ networks
class SACModule(DDPGModule):
    """The stochastic actor ``pi(a | o)`` of one policy-mapping module and, on the learners, its critic(s)
    ``Q(x, a)``, their targets (no target actor: SAC samples its next actions from ``pi``) and the temperature
    ``log_alpha`` (a scalar parameter).

    ``model_config``: :class:`~marl.algos.ddpg.DDPGModule`'s and ``alpha_init``. Continuous actions in
    ``Box(low, high, (K,))``: the actor outputs the mean and the pre-softplus scale of a Gaussian over
    ``z [K]``, the action is ``low + (tanh(z) + 1) h``. ``Discrete(A)``: the actor outputs ``A`` logits,
    unavailable actions masked.
    """

    actor_target_kept = False

    def setup(self):
        super().setup()
        if not self.inference_only:
            alpha = float(self.model_config.get("alpha_init", 1.0))
            self.log_alpha = torch.nn.Parameter(torch.tensor(math.log(alpha)))

    def actor_outputs(self) -> int:
        """``A`` logits, or ``2 K``: the mean and the scale of each pre-tanh dimension."""
        return self.action_dim if self.discrete else 2 * self.action_dim

    def get_non_inference_attributes(self):
        return super().get_non_inference_attributes() + ["log_alpha"]

    def gaussian(self, obs: Any, out: Optional[torch.Tensor] = None) -> Tuple[torch.Tensor, torch.Tensor]:
        """``obs [..., D]`` (structured: key -> ``[..., *shape_k]``; a recurrent actor's: an
        :class:`~marl.algos.actor_critic_parts.EpisodeObs`) -> the pre-tanh Gaussian's ``mean, std [..., K]``
        (``std >= MIN_STD``); ``out``: the actor's outputs at ``obs`` when already computed (an acting step)."""
        mean, scale = (self.actor(obs) if out is None else out).chunk(2, -1)
        return mean, F.softplus(scale + STD_BIAS) + MIN_STD

    def sample(
        self, obs: Any, eps: Optional[torch.Tensor] = None, out: Optional[torch.Tensor] = None
    ) -> Tuple[torch.Tensor, torch.Tensor]:
        """A reparameterised action ``a [..., K]`` in the bounds (``z = mean + std eps``, Haarnoja et al. 2018,
        Eq. 11) and ``log pi(a | o) [...]`` (:func:`squashed_log_prob`). ``eps``: standard normal noise
        (default: fresh); ``out``: as :meth:`gaussian`."""
        mean, std = self.gaussian(obs, out)
        z = mean + std * (torch.randn_like(mean) if eps is None else eps)
        return self.to_bounds(torch.tanh(z)), squashed_log_prob(z, mean, std, (self.high - self.low) / 2)

    def probs(self, obs: Any, avail: Optional[torch.Tensor] = None) -> Tuple[torch.Tensor, torch.Tensor]:
        """Discrete: ``pi, log pi [..., A]`` of the masked logits (an unavailable action has probability 0)."""
        logp = torch.log_softmax(self.mu(self.actor, obs, avail), -1)
        return logp.exp(), logp

    @torch.no_grad()
    def act(self, obs, avail, h, explore: bool = True, random_actions: float = 0.0, **unused):
        """Actions for ``obs [B, N, D]``: continuous ``[B, N, K]``, a sample of ``pi`` (``explore``) or the
        squashed mean ``low + (tanh(mean) + 1) h``; discrete ``[B, N]`` int64, a sample of the masked
        categorical (Gumbel-max) or its argmax. With ``explore`` and ``random_actions``: uniformly random
        actions (:meth:`DDPGModule.act`). Also ``log pi(a | o) [B, N]`` of a continuous sample (zeros
        otherwise) and the actor's next state (``None`` for an MLP actor)."""
        if self.discrete or (explore and random_actions):
            return super().act(obs, avail, h, explore=explore, random_actions=random_actions)
        out, h = self.actor_step(obs, h)
        if explore:
            a, logp = self.sample(obs, out=out)
            return a, logp, h
        mean, _ = self.gaussian(obs, out)
        return self.to_bounds(torch.tanh(mean)), torch.zeros(mean.shape[:2]), h


# ============================================================ losses
def each_action_q(nets: torch.nn.ModuleList, cfg: Any, obs, state, acts, mid: str, n_actions: int) -> torch.Tensor:
    """``min_k Q_k(x, a_1..a_i = e_b..a_N)`` for every own action ``b`` of module ``mid``'s agents:
    ``[B, N, A]`` (discrete SAC's critic read for all actions, Christodoulou 2019, arXiv 1910.07207, Sec. 4;
    a critic that takes the action as a one-hot input is evaluated once per action, the other agents'
    actions as given in ``acts``). ``obs`` (as the critics read them: :meth:`~marl.algos.ddpg.DDPGModule.critic_obs`),
    ``state``, ``acts``: as :func:`~marl.algos.ddpg.critic_inputs`."""
    b, n = acts[mid].shape[:2]
    eye = torch.eye(n_actions, device=acts[mid].device)
    per_action = []
    for a in range(n_actions):
        x = critic_inputs(cfg.critic, obs, state, acts, mid, eye[a].expand(b, n, n_actions), cfg.critic_agent_id)
        per_action.append(torch.stack(q_values(nets, x)).min(0).values)
    return torch.stack(per_action, -1)


def soft_value(q: torch.Tensor, logp: torch.Tensor, alpha: torch.Tensor, pi: Optional[torch.Tensor] = None):
    """The soft state value ``V = E_pi[Q - alpha log pi]`` (Haarnoja et al. 2018, arXiv 1812.05905, Eq. 3):
    with ``pi [..., A]`` the exact expectation over discrete actions ``sum_a pi(a) (Q(a) - alpha log pi(a))``
    (Christodoulou 2019, arXiv 1910.07207, Eq. 10; ``q``, ``logp [..., A]``), else the one-sample estimate
    ``Q - alpha log pi(a)`` (``q``, ``logp [...]``)."""
    v = q - alpha * logp
    return v if pi is None else (pi * v).sum(-1)


def policy_sample(mod: SACModule, obs: Any, avail: Optional[torch.Tensor], one_hot: bool = True) -> Dict[str, Any]:
    """The current policy at ``obs`` (at ``o'`` the target's next actions: SAC has no target actor): ``a`` (critic
    input: continuous ``[B, N, K]``, reparameterised; discrete, when ``one_hot``, a sampled straight-through one-hot
    ``[B, N, A]``, read by the other agents' centralised critics) and ``logp`` (``[B, N]``; discrete: ``[B, N, A]``,
    with ``pi``)."""
    if mod.discrete:
        pi, logp = mod.probs(obs, avail)
        return {"a": gumbel_softmax_st(logp), "pi": pi, "logp": logp} if one_hot else {"pi": pi, "logp": logp}
    a, logp = mod.sample(obs)
    return {"a": a, "logp": logp}


def sac_losses(mods: Dict[str, SACModule], batch: Dict[str, Any], cfg: Any, actor_due: bool):
    """The critic loss ``sum_k mean (Q_k(x, a) - y)^2`` with the soft target
    ``y = r + gamma (1 - terminated) V'(x')``, ``V' = E_{a' ~ pi}[min_k Q'_k(x', a') - alpha log pi(a' | o')]``
    (Haarnoja et al. 2018, arXiv 1812.05905, Eq. 3 and Sec. 5; discrete: the exact expectation, Christodoulou
    2019, arXiv 1910.07207, Eq. 10); and when ``actor_due`` the actor loss ``mean E_pi[alpha log pi - min_k
    Q_k(x, a_1..a_i..a_N)]`` (``policy_gradient: own``: the others' actions stored; ``joint``: sampled from their
    current policies) (Eq. 7 with the reparameterised ``a_i ~ pi_i``, Eq. 11; discrete: the
    expectation, Christodoulou Eq. 12; the critics are not moved by it) and, unless ``fixed_alpha``, the
    temperature loss ``-mean log_alpha (log pi + H_target)`` (Haarnoja et al. Eq. 18; discrete: ``E_pi log pi``,
    Christodoulou Eq. 11); masked by the agents alive at ``t``, summed over modules.

    ``batch``: as :func:`~marl.algos.ddpg.ddpg_losses`. Returns the total loss and per-module metrics
    ``{mid: {critic_loss, actor_loss, q_mean, target_mean, alpha, alpha_loss, entropy}}`` (0-d tensors; ``entropy``:
    the policy's, nats, a one-sample estimate for continuous actions).
    """
    mids = list(mods)
    j, obs, acts, next_obs = batch_views(mods, batch)
    alpha = {m: mods[m].log_alpha.detach().exp() for m in mids}
    with torch.no_grad():
        nxt = {m: policy_sample(mods[m], actor_obs(batch[m], True), batch[m].get("next_avail")) for m in mids}
        next_acts = {m: nxt[m]["a"] for m in mids}
        y = {
            m: soft_target(
                mods[m], cfg, batch[m], j, mods[m].critic_obs(next_obs, True), next_acts, nxt[m], alpha[m], m
            )
            for m in mids
        }
    with torch.set_grad_enabled(actor_due):  # the actor and temperature step with the targets (policy_delay)
        joint = cfg.policy_gradient == "joint"  # the other agents' sampled one-hots are read: draw them
        current = {m: policy_sample(mods[m], actor_obs(batch[m]), batch[m].get("avail"), joint) for m in mids}
    total, metrics = 0.0, {}
    for m, mod in mods.items():
        alive = batch[m]["alive"].bool()
        seen = mod.critic_obs(obs)  # encoded once: the critic loss trains the encoders, the actor loss reads them
        critic_loss, metrics[m] = critic_regression(mod, cfg, seen, j["state"], acts, m, y[m], alive)
        with torch.set_grad_enabled(actor_due):
            actor_loss, entropy = actor_loss_of(mod, cfg, current, detached(seen), j["state"], acts, alpha[m], alive, m)
        # d/d log_alpha = H - H_target: descent raises alpha when the entropy is below the target
        alpha_loss = masked_mean(mod.log_alpha * (entropy.detach() - target_entropy(mod, cfg)), alive)
        metrics[m].update(
            actor_loss=actor_loss.detach(),
            alpha=alpha[m],
            alpha_loss=alpha_loss.detach(),
            entropy=masked_mean(entropy.detach(), alive),
        )
        total = total + critic_loss
        if actor_due:
            total = total + actor_loss + (0.0 if cfg.fixed_alpha else alpha_loss)
    return total, metrics


def soft_target(mod: SACModule, cfg: Any, b, j, next_obs, next_acts, nxt, alpha, m: str) -> torch.Tensor:
    """``y [B, N]`` of module ``m`` (see :func:`sac_losses`; ``next_obs`` as its target critics read them,
    :meth:`~marl.algos.ddpg.DDPGModule.critic_obs`), through the DDPG family's
    :func:`~marl.algos.ddpg.critic_target`: continuous, each target critic's ``Q'_k - alpha log pi`` so that its
    ``min_k`` is the twin-min soft value; discrete, the expected soft value of the twin-min."""
    if mod.discrete:
        q = each_action_q(mod.critic_targets, cfg, next_obs, j["next_state"], next_acts, m, mod.action_dim)
        v: List[torch.Tensor] = [soft_value(q, nxt["logp"], alpha, nxt["pi"])]
    else:
        x = critic_inputs(cfg.critic, next_obs, j["next_state"], next_acts, m, agent_id=cfg.critic_agent_id)
        v = [soft_value(q, nxt["logp"], alpha) for q in q_values(mod.critic_targets, x)]
    return critic_target(b["rewards"], j["terminated"].bool(), v, cfg.gamma)


def actor_loss_of(mod: SACModule, cfg: Any, current, seen, state, acts, alpha, alive, m: str):
    """The actor loss of module ``m`` (see :func:`sac_losses`), the mean over the agents ``alive [B, N]``, and
    the policy's entropy ``[B, N]`` (nats). ``current``: module -> :func:`policy_sample` at ``o``; the other agents'
    actions are the stored ``acts`` (``policy_gradient: own``) or their current samples (``joint``,
    :func:`~marl.algos.actor_critic_parts.actor_critic_inputs`). The critics read ``seen`` (the observations as
    they read them, detached: :meth:`~marl.algos.ddpg.DDPGModule.critic_obs`) with detached parameters
    (:func:`~marl.algos.ddpg.frozen`; discrete: without gradient), so the actor loss never moves them."""
    if mod.discrete:
        pi, logp = current[m]["pi"], current[m]["logp"]
        if cfg.policy_gradient == "joint":
            acts = {o: c["a"].detach() for o, c in current.items()}
        with torch.no_grad():
            q = each_action_q(mod.critics, cfg, seen, state, acts, m, mod.action_dim)
        per_agent = -soft_value(q, logp, alpha, pi)
        entropy = -(pi * logp).sum(-1)
    else:
        logp = current[m]["logp"]
        x = actor_critic_inputs(cfg, seen, state, acts, {o: c["a"] for o, c in current.items()}, m)
        q = torch.stack([frozen(c, x).squeeze(-1) for c in mod.critics]).min(0).values
        per_agent, entropy = -soft_value(q, logp, alpha), -logp
    return masked_mean(per_agent, alive), entropy


# ============================================================ learner and algorithm
class SACLearner(DDPGLearner):
    """One gradient step of :func:`sac_losses` (the DDPG family's learner: one Adam per module over the actor,
    the critics and ``log_alpha``; each of the three clipped to ``max_grad_norm`` on its own, as BenchMARL's
    one optimiser per loss)."""

    losses = staticmethod(sac_losses)


class SAC(DDPG):
    """ISAC / MASAC on the off-policy core, the DDPG family's trainer: the same buffer, schedule (targets take
    ``tau`` after each actor step), environment checks and critic inputs; exploration is the policy's own
    sampling (no noise schedule); evaluation acts with the squashed mean, or the argmax."""

    learner_class = SACLearner
    module_class = SACModule
    config_class = SACConfig
    learner_metrics = DDPG.learner_metrics + ("alpha", "alpha_loss", "entropy")

    @classmethod
    def module_config(cls, cfg, mapping, mid: str) -> Dict[str, Any]:
        return {**super().module_config(cfg, mapping, mid), "alpha_init": config_view(cfg).alpha_init}

    def act_kwargs(self) -> Dict[str, float]:
        """No noise: the actors sample from their policies; ``random_actions`` as :meth:`DDPG.act_kwargs`."""
        return {"random_actions": float(self.progress["env_steps"] < self.cfg.random_steps)}
