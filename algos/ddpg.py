"""IDDPG, MADDPG and MATD3: deterministic actors with Q critics on the off-policy core.

Sources: Lillicrap et al. 2016 (DDPG, arXiv 1509.02971, Algorithm 1; per agent: IDDPG); Lowe et al. 2017
(MADDPG, arXiv 1706.02275, Sec. 4.1, Eq. 5-6: a centralised critic ``Q_i(x, a_1..a_N)`` per agent; discrete
actions through the Gumbel-softmax, Jang et al. 2017, arXiv 1611.01144); Fujimoto et al. 2018 (TD3, arXiv
1802.09477, Algorithm 1: clipped double-Q, target policy smoothing, delayed updates), on MADDPG's critics as
MATD3 (Ackermann et al. 2019, arXiv 1910.01465). Equations, keys, limits: ``docs/algorithms/ddpg.md``.

``critic: obs`` is IDDPG, ``joint_obs`` / ``state`` MADDPG, and with ``twin_critics`` and ``policy_delay: 2``
MATD3. Rollouts go into a :class:`~marl.engine.replay.TransitionBuffer` (one row per env step, all agents side
by side); a gradient step is one joint batch under one module id (:func:`~marl.engine.off_policy.batch_module_id`).
"""

from __future__ import annotations

import math
from typing import Any, Dict, Optional

import gymnasium as gym
import numpy as np
import torch

from ray.rllib.core.rl_module.apis import InferenceOnlyAPI
from ray.rllib.core.rl_module.torch import TorchRLModule

from marl.algos.actor_critic_parts import CriticEncoders, RecurrentActor, actor_critic_inputs, actor_network
from marl.algos.actor_critic_parts import DDPGLayout, check_recurrent, critic_inputs, episode_rows
from marl.algos.actor_critic_parts import critic_dim, critic_target, detached, encoder_config, frozen, q_values
from marl.algos.actor_critic_parts import gumbel_softmax_st, policy_action, smoothed, target_action, uniform_actions
from marl.algos.actor_critic_parts import JOINT, action_input, batch_views  # noqa: F401  (part of this family's API)
from marl.algos.actor_critic_parts import joint_actions  # noqa: F401  (part of this family's API)
from marl.algos.ddpg_config import CRITICS, DDPGConfig  # noqa: F401
from marl.algos.networks.mlp import MLP
from marl.algos.policy_gradient import masked_mean
from marl.algos.q_learning import epsilon_at
from marl.config import config_view
from marl.env import map_obs, nest_columns
from marl.engine.off_policy import OffPolicyLearner, OffPolicyTrainer, UpdateSchedule
from marl.engine.off_policy import batch_module_id, make_target, mean_over_learners
from marl.engine.replay import JointEpisodeBuffer, TransitionBuffer
from marl.errors import MarlError, TrainingDiverged

MASKED = -1e10  # logit of an unavailable discrete action (finite: no NaN in the soft sample's gradient)


# ============================================================ networks
class DDPGModule(TorchRLModule, InferenceOnlyAPI):
    """The deterministic actor ``mu(o)`` of one policy-mapping module and, on the learners, its critic(s)
    ``Q(x, a)`` and the targets of both.

    ``model_config``: ``obs_dim``, ``hidden``, ``layers``, ``activation``, ``critic_dim`` (the critic's input size,
    less the features of structured observations), ``twin`` (two critics). The action space is ``Box(low, high,
    (K,))`` (the actor's ``tanh`` is scaled to the bounds) or ``Discrete(A)`` (the actor's outputs are logits).
    Structured observations (image ``Box`` or ``Dict`` spaces, ``docs/observations.md``): ``obs_space`` (the
    module's ``Dict``) puts an :class:`~marl.algos.networks.encoders.ObsEncoder` in front of the actor MLP
    (:func:`~marl.algos.actor_critic_parts.actor_network`), ``critic_spaces`` (module -> ``(R_m, space)``:
    :func:`~marl.algos.actor_critic_parts.critic_spaces`) gives the critics their own encoders, ``critic_encoder``
    (:class:`~marl.algos.actor_critic_parts.CriticEncoders`; layers of both: ``encoder``).
    """

    def setup(self):
        c, space = self.model_config, self.action_space
        self.discrete = isinstance(space, gym.spaces.Discrete)
        self.action_dim = int(space.n) if self.discrete else int(np.prod(space.shape))
        if not self.discrete:
            self.register_buffer("low", torch.as_tensor(space.low, dtype=torch.float32), persistent=False)
            self.register_buffer("high", torch.as_tensor(space.high, dtype=torch.float32), persistent=False)
        net = dict(hidden=int(c["hidden"]), layers=int(c["layers"]), activation=c["activation"], layer_norm=False)
        self.actor = actor_network(c, self.actor_outputs(), **net)  # make_target's deepcopy copies its encoder
        self.critic_encoder: Optional[CriticEncoders] = None
        if not self.inference_only:
            n, dim = 2 if c.get("twin") else 1, int(c["critic_dim"])
            if c.get("critic_spaces"):
                self.critic_encoder = CriticEncoders(c["critic_spaces"], c.get("encoder"))
                self.critic_encoder_target = make_target(self.critic_encoder)
                dim += self.critic_encoder.out_dim
            self.critics = torch.nn.ModuleList([MLP(dim, 1, init="torch", **net) for _ in range(n)])
            if self.actor_target_kept:
                self.actor_target = make_target(self.actor)
            self.critic_targets = make_target(self.critics)

    # a target actor mu' (DDPG's target actions); a stochastic actor (SAC) samples its next actions itself
    actor_target_kept = True

    def actor_outputs(self) -> int:
        """Outputs of the actor MLP: ``K`` pre-tanh actions or ``A`` logits."""
        return self.action_dim

    def get_non_inference_attributes(self):
        encoders = ["critic_encoder", "critic_encoder_target"] if self.model_config.get("critic_spaces") else []
        actor = ["actor_target"] if self.actor_target_kept else []
        return ["critics", *actor, "critic_targets", *encoders]

    def target_pairs(self):
        """``[(actor, actor_target), (critics, critic_targets), (critic_encoder, critic_encoder_target)]`` (learner
        copies only; no actor pair when ``actor_target_kept`` is false, no encoder pair without structured
        observations)."""
        if self.inference_only:
            return []
        actor = [(self.actor, self.actor_target)] if self.actor_target_kept else []
        encoders = [] if self.critic_encoder is None else [(self.critic_encoder, self.critic_encoder_target)]
        return actor + [(self.critics, self.critic_targets)] + encoders

    def critic_obs(self, obs: Dict[str, Any], target: bool = False) -> Dict[str, Any]:
        """Module -> observation as this module's critics read it (:func:`critic_inputs`' ``obs``): flat ones
        ``[B, N_m, D_m]`` as they are, structured ones as the features ``[B, N_m, F_m]`` of the critic-side
        encoders (``target``: of their target copies)."""
        if self.critic_encoder is None:
            return obs
        return (self.critic_encoder_target if target else self.critic_encoder)(obs)

    def to_bounds(self, u: torch.Tensor) -> torch.Tensor:
        """``u [..., K]`` in ``[-1, 1]`` -> ``low + (u + 1) h`` in ``[low, high]``, ``h = (high - low) / 2``."""
        return self.low + (u + 1.0) * (self.high - self.low) / 2

    def initial_state(self, batch_shape) -> Optional[torch.Tensor]:
        """The actor's zero state ``[*batch_shape, H]`` (a :class:`RecurrentActor`); ``None`` for an MLP actor."""
        return self.actor.initial_state(batch_shape) if isinstance(self.actor, RecurrentActor) else None

    def actor_step(self, obs: Any, h: Optional[torch.Tensor]):
        """One acting step of the actor on ``obs [B, N, D]``: its raw outputs ``[B, N, outputs]`` and the next
        state ``[B, N, H]`` (``None`` for an MLP actor, whose ``h`` is ``None``)."""
        return (self.actor(obs), None) if h is None else self.actor.step(obs, h)

    def head(self, out: torch.Tensor, avail: Optional[torch.Tensor] = None) -> torch.Tensor:
        """The actor's raw outputs ``[..., K]`` -> continuous actions in ``[low, high]`` (``low + (tanh + 1) h``), or
        logits ``[..., A]`` -> the same with unavailable actions at ``MASKED``."""
        if self.discrete:
            return out if avail is None else out.masked_fill(~avail.bool(), MASKED)
        return self.to_bounds(torch.tanh(out))

    def mu(self, net: torch.nn.Module, obs: Any, avail: Optional[torch.Tensor] = None) -> torch.Tensor:
        """``obs [..., D]`` (structured: key -> ``[..., *shape_k]``; a recurrent actor's: an
        :class:`~marl.algos.actor_critic_parts.EpisodeObs`) -> :meth:`head` of ``net``'s outputs."""
        return self.head(net(obs), avail)

    @torch.no_grad()
    def act(self, obs, avail, h, explore: bool = True, noise: float = 0.0, random_actions: float = 0.0, **unused):
        """Actions for ``obs [B, N, D]``: continuous ``[B, N, K]`` float, ``mu(o)`` plus (``explore``) Gaussian
        noise of std ``noise`` half action ranges, clipped to the bounds; discrete ``[B, N]`` int64, a Gumbel-max
        sample of the masked logits (``explore``) or their argmax. With ``explore`` and ``random_actions`` (1.0
        during the first ``random_steps`` env steps) uniformly random actions instead (:func:`uniform_actions`; the
        actor still steps, so a recurrent actor's state follows the episode). Also ``logp [B, N]`` zeros
        (deterministic policies) and the actor's next state (``None`` for an MLP actor)."""
        out, h = self.actor_step(obs, h)
        if explore and random_actions:
            a = (
                uniform_actions(self.head(out, avail), True)
                if self.discrete
                else uniform_actions(out, False, self.low, self.high)
            )
            return a, torch.zeros(out.shape[:2]), h
        x = self.head(out, avail)
        if self.discrete:
            a = gumbel_softmax_st(x).argmax(-1) if explore else x.argmax(-1)
        else:  # Gaussian exploration noise, unclipped, then the action clipped to the bounds
            a = smoothed(x, self.low, self.high, noise, float("inf")) if explore and noise > 0 else x
        return a, torch.zeros(a.shape[:2]), h

    def _forward(self, batch, **kwargs):  # RLlib's generic inference path (not used by our runner)
        obs = map_obs(lambda x: x.unsqueeze(1), batch["obs"])
        h = self.initial_state((obs.shape[0], 1)) if torch.is_tensor(obs) else None  # structured: MLP actors only
        a, _, _ = self.act(obs, None, h, explore=False)
        return {"actions": a.squeeze(1)}

    def _forward_train(self, batch, **kwargs):
        return {}  # the losses call the networks (ddpg_losses): the critic input spans modules


# ============================================================ losses
def critic_regression(mod: DDPGModule, cfg: Any, obs, state, acts, mid: str, y: torch.Tensor, alive: torch.Tensor):
    """The critic loss ``sum_k mean_alive (Q_k(x, a) - y)^2`` of module ``mid``'s critics on the stored actions
    (inputs :func:`critic_inputs` of ``cfg.critic``, ``obs`` as the critics read them, :meth:`DDPGModule.critic_obs`,
    ``state``, ``acts``), targets ``y [B, N]`` and the agents alive at ``t`` (``alive [B, N]`` bool), and its
    metrics ``critic_loss``, ``q_mean`` (the first critic's) and ``target_mean``: 0-d detached tensors, which the
    learner turns into numbers with one host sync for all (:meth:`DDPGLearner.compute_losses`)."""
    qs = q_values(mod.critics, critic_inputs(cfg.critic, obs, state, acts, mid, agent_id=cfg.critic_agent_id))
    loss = sum(masked_mean((q - y) ** 2, alive) for q in qs)
    q_mean, y_mean = masked_mean(qs[0].detach(), alive), masked_mean(y, alive)
    return loss, {"critic_loss": loss.detach(), "q_mean": q_mean, "target_mean": y_mean}


def td_target(mod: DDPGModule, cfg: Any, b, j, next_obs, nxt, m: str) -> torch.Tensor:
    """``y [B, N]`` of module ``m``: :func:`critic_target` of its target critics at ``(x', mu'(o'))``, ``next_obs`` as
    they read them (:meth:`DDPGModule.critic_obs` of the targets), ``nxt``: module -> the target actions ``mu'(o')``;
    ``b``: the module's batch, ``j``: the ``JOINT`` one."""
    x = critic_inputs(cfg.critic, mod.critic_obs(next_obs, True), j["next_state"], nxt, m, None, cfg.critic_agent_id)
    return critic_target(b["rewards"], j["terminated"].bool(), q_values(mod.critic_targets, x), cfg.gamma)


def ddpg_losses(mods: Dict[str, DDPGModule], batch: Dict[str, Any], cfg: Any, actor_due: bool):
    """The critic loss ``mean (Q_k(x, a) - y)^2`` of every critic ``k`` and, when ``actor_due``, the actor
    loss ``-mean Q_1(x, a_1..mu_i(o_i)..a_N)`` (``policy_gradient: own``; ``joint``: ``-mean Q_1(x, mu_1(o_1)..
    mu_N(o_N))``, :func:`~marl.algos.actor_critic_parts.actor_critic_inputs`), masked by the agents alive at ``t``,
    summed over modules. Without ``critic_agent_id`` a centralised critic's ``Q`` is ``[B, 1]``, one per sample.

    ``batch``: module -> ``{obs [B, N, D] (structured: key -> [B, N, *shape_k]), actions, rewards [B, N], alive
    [B, N], next_obs, avail, next_avail}`` and ``JOINT -> {state, next_state [B, S], terminated [B]}``. Returns the
    total loss and per-module metrics ``{mid: {critic_loss, actor_loss, q_mean, target_mean}}`` (0-d tensors).
    """
    mids = list(mods)
    j, obs, acts, next_obs = batch_views(mods, batch)
    with torch.no_grad():  # target actions mu'(o') (smoothed in TD3), then y per module
        nxt = {m: target_action(mods[m], batch[m], cfg) for m in mids}
        y = {m: td_target(mods[m], cfg, batch[m], j, next_obs, nxt, m) for m in mids}
    with torch.set_grad_enabled(actor_due):  # off a delayed step the actor loss is a metric only
        current = {m: policy_action(mods[m], batch[m]) for m in mids}
    total, metrics = 0.0, {}
    for m in mids:
        mod, alive = mods[m], batch[m]["alive"].bool()
        seen = mod.critic_obs(obs)  # encoded once: the critic loss trains the encoders, the actor loss reads them
        critic_loss, metrics[m] = critic_regression(mod, cfg, seen, j["state"], acts, m, y[m], alive)
        with torch.set_grad_enabled(actor_due):
            x = actor_critic_inputs(cfg, detached(seen), j["state"], acts, current, m)
            actor_loss = -masked_mean(frozen(mod.critics[0], x).squeeze(-1), alive)
        metrics[m]["actor_loss"] = actor_loss.detach()
        total = total + critic_loss + (actor_loss if actor_due else 0.0)
    return total, metrics


# ============================================================ learner
def actor_step_due(tau: float) -> bool:
    """Whether a gradient step also steps the actors: exactly when the trainer's schedule updates the targets
    after it (``tau > 0``; ``target_interval = policy_delay`` gradient steps; TD3's ``t mod d = 0``)."""
    return float(tau) > 0


class DDPGLearner(OffPolicyLearner):
    """One gradient step of :func:`ddpg_losses` on a joint batch of transitions; the actor loss only on the
    steps the trainer's schedule updates targets on (every ``policy_delay``-th: TD3's delayed policy
    updates, Fujimoto et al. 2018, arXiv 1802.09477, Algorithm 1). One Adam per module; the actor's and the
    critics' gradients are clipped to ``max_grad_norm`` each (BenchMARL's per-loss optimisers, Bettini et al.
    2024, arXiv 2312.01472)."""

    actor_due = True
    losses = staticmethod(ddpg_losses)  # (modules, batch, cfg, actor_due) -> (total loss, per-module metrics)

    def configure_optimizers_for_module(self, module_id, config=None):
        params = self.get_parameters(self.module_for_optimizer(module_id))
        opt = torch.optim.Adam(params, eps=self.cfg.adam_eps, fused=True)  # one kernel per step: ~9% of a step here
        self.register_optimizer(module_id=module_id, optimizer=opt, params=params, lr_or_lr_schedule=config.lr)

    def clip_groups(self, module_id: str):
        """Parameters clipped together: ``actor`` (with its encoder), ``critic`` (the critics and their encoders)
        and each other trainable part on its own (a mixer module's ``net``, SAC's ``log_alpha``), as BenchMARL's
        one optimiser per loss."""
        return self.groups_by_head(module_id, {"actor": "actor", "critics": "critic", "critic_encoder": "critic"})

    def step(self, batch, tau: float) -> None:
        self.actor_due = actor_step_due(tau)
        super().step(batch, tau)

    def gradient_step(self, batch) -> None:
        """One gradient step: the joint loss, backward, clipping, optimiser steps; RLlib's ``forward_train`` is not
        called. The losses call the networks themselves (across modules), so a DDP-wrapped module's forward would
        only arm DDP's gradient hooks for the batch's module, and stall them on a step that leaves parameters without
        a gradient (MATD3's delayed actor). :meth:`compute_gradients` averages over the learners instead."""
        losses = self.compute_losses(fwd_out={}, batch=batch)
        self.apply_gradients(self.postprocess_gradients(self.compute_gradients(losses)))

    def compute_gradients(self, loss_per_module, **kwargs):
        """RLlib's backward pass; with several learners each gradient is then averaged over them
        (:func:`~marl.engine.off_policy.mean_over_learners`, once per step for every module), so every learner's
        shard of the batch counts alike and the learners keep identical weights."""
        return mean_over_learners(super().compute_gradients(loss_per_module, **kwargs))

    def learner_batch(self, columns):
        """The one policy batch ``"<m>/<col>"`` -> ``{m: {col: ...}, JOINT: {state, next_state, terminated}}``;
        a structured observation's ``"<m>/obs/<key>"`` columns -> ``{m: {obs: {key: ...}}}`` (a module id holds
        no ``/``). A batch of whole episodes (recurrent actors) becomes transition rows (:func:`episode_rows`)."""
        out: Dict[str, Dict[str, Any]] = {m: {} for m in self.run.family.modules}
        out[JOINT] = {}
        for k, v in next(iter(columns.values())).items():
            m, _, col = k.partition("/") if "/" in k else ("", "", k)
            out[m or JOINT][col] = v
        nested = {m: nest_columns(c) for m, c in out.items()}
        return episode_rows(nested) if "filled" in nested[JOINT] else nested

    def compute_losses(self, *, fwd_out, batch):
        """The joint loss of :meth:`joint_losses`, its metrics logged: the loss and every metric (floats or 0-d
        tensors) reach the host in one transfer, which the finite check reads too.

        Raises:
            TrainingDiverged: the loss is NaN or infinite.
        """
        total, metrics = self.joint_losses(batch)
        names = [(key, name) for key, values in metrics.items() for name in values]
        parts = [total.detach()] + [v for values in metrics.values() for v in values.values()]
        numbers = torch.stack([torch.as_tensor(v, dtype=torch.float32, device=total.device) for v in parts]).tolist()
        if not math.isfinite(numbers[0]):
            raise TrainingDiverged(f"{self.cfg.algo} loss is {numbers[0]} (not finite)")
        for name, v in zip(names, numbers[1:]):
            self.metrics.log_value(name, v, window=1)
        return {batch_module_id(self.run): total}

    def joint_losses(self, batch):
        """``(total loss, {module or team: {metric: value}})`` of one joint batch: :attr:`losses` of the
        policy-mapping modules (a family with more parts, e.g. FACMAC's mixers, overrides this)."""
        mods = {m: self.module[m].unwrapped() for m in self.run.family.modules}
        return self.losses(mods, batch, self.cfg, self.actor_due)

    def compute_loss_for_module(self, *, module_id, config, batch, fwd_out):
        raise NotImplementedError("the loss is joint over modules: see compute_losses")


# ============================================================ algorithm
class DDPG(OffPolicyTrainer):
    """IDDPG / MADDPG / MATD3 on the off-policy core: each iteration samples ``T x B`` noisy actions per env
    runner, stores the transitions, and takes ``gradient_steps`` gradient steps per ``per_env_steps`` new env
    steps once the buffer holds ``max(batch_size, learning_starts)``; targets take ``tau`` of the online
    weights after every ``policy_delay``-th step. The buffer is saved in checkpoints. With ``recurrent`` the
    actors are GRUs, the buffer keeps whole episodes and ``batch_size`` / ``buffer_size`` / ``learning_starts``
    count episodes (each gradient step on ``batch_size`` episodes' steps)."""

    learner_class = DDPGLearner
    module_class = DDPGModule
    config_class = DDPGConfig
    learner_metrics = ("critic_loss", "actor_loss", "q_mean", "target_mean")
    transform_hooks = ("on_rollout", "on_batch")  # the buffer commits single steps, not episodes

    @classmethod
    def module_config(cls, cfg, mapping, mid: str) -> Dict[str, Any]:
        """The sizes of module ``mid``'s networks. ``critic_dim`` counts flat observations, actions and the agent
        one-hot; a structured module's observation enters the actor and the critics through encoders (``obs_space``,
        ``critic_spaces``, ``encoder``), whose feature sizes the module adds when it builds them."""
        c = config_view(cfg)
        nets = {"hidden": c.hidden, "layers": c.layers, "activation": c.activation}
        out = {
            "obs_dim": mapping.obs_dim(mid),
            "critic_dim": critic_dim(c.critic, mapping, mid, c.critic_agent_id),
            "twin": c.twin_critics,
            "recurrent": c.recurrent,
        }
        return {**out, **nets, **encoder_config(c.critic, c.encoder, mapping, mid)}

    @classmethod
    def check_env(cls, cfg, info) -> None:
        """Continuous actions in a 1-D ``Box`` with finite bounds, or ``Discrete``; a state for ``critic: state``.
        Observations: 1-D ``Box`` vectors, or structured (an image ``Box``, a ``Dict`` of Boxes), read through the
        encoders (``docs/observations.md``). Recurrent actors: flat observations and a finite episode limit (the
        buffer keeps whole episodes).

        Raises:
            MarlError: naming the group and its space or bounds, and what is supported.
        """
        c = config_view(cfg)
        if c.recurrent:
            check_recurrent(c.algo, info)
        for g in info.groups.values():
            space, where = g.action_space, f"group '{g.name}' of {info.family}:{info.scenario}"
            if isinstance(space, gym.spaces.Box):
                if len(space.shape) != 1:
                    raise MarlError(f"{c.algo}: {where} has actions {space}; supported: a 1-D Box or Discrete.")
                if not (np.isfinite(space.low).all() and np.isfinite(space.high).all()):
                    raise MarlError(
                        f"{c.algo}: {where} has an action Box with infinite bounds (low={space.low.tolist()}, "
                        f"high={space.high.tolist()}); the actor's tanh is scaled to finite bounds: give the env "
                        f"finite low/high."
                    )
            elif not isinstance(space, gym.spaces.Discrete):
                raise MarlError(f"{c.algo}: {where} has actions {space}; supported: a 1-D Box or Discrete.")
        if c.critic == "state" and info.state_dim <= 0:
            raise MarlError(
                f"{c.algo}: critic='state' needs a global state; {info.family}:{info.scenario} has state_dim=0: use joint_obs."
            )

    @classmethod
    def family_context(cls, cfg, env, mapping) -> DDPGLayout:
        shapes = mapping.buffer_shapes()
        for m, s in shapes.items():
            if not mapping.group_info(m).discrete:  # the TransitionBuffer's name of a continuous dimension
                s["action_dim"] = s.pop("n_actions")
        return DDPGLayout(list(mapping.modules), shapes, int(env.info.state_dim), int(env.info.episode_limit or 0))

    def steps_per_call(self) -> int:
        if self.cfg.recurrent:
            return 1  # episode batches pad to their longest episode: one gradient step's per call
        return self.chunked_steps()  # a transition buffer: one draw for many gradient steps samples alike

    def make_buffer(self) -> Any:
        """A :class:`TransitionBuffer` of ``buffer_size`` transitions; with recurrent actors a
        :class:`JointEpisodeBuffer` of ``buffer_size`` whole episodes (every env copy of every runner writes one)."""
        c, layout = self.cfg, self.run.family
        if c.recurrent:
            copies = self.run.num_envs * max(1, c.num_env_runners)
            return JointEpisodeBuffer(c.buffer_size, layout.episode_limit, copies, layout.shapes, layout.state_dim)
        return TransitionBuffer(c.buffer_size, layout.shapes, layout.state_dim)

    def update_schedule(self) -> UpdateSchedule:
        c = self.cfg
        return UpdateSchedule(
            updates=c.gradient_steps,
            per=c.per_env_steps,
            unit="env_step",
            learning_starts=max(c.batch_size, c.learning_starts),
            target_interval=c.policy_delay,
            target_unit="gradient_step",
            tau=c.tau,
        )

    def act_kwargs(self) -> Dict[str, float]:
        """The exploration ``noise`` (std, half action ranges; linear decay) and ``random_actions``: 1.0 (act
        uniformly, :func:`uniform_actions`) below ``random_steps`` env steps, else 0.0."""
        c, steps = self.cfg, self.progress["env_steps"]
        noise = epsilon_at(steps, c.exploration_noise_start, c.exploration_noise_end, c.exploration_anneal_steps)
        return {"noise": noise, "random_actions": float(steps < c.random_steps)}
