"""IA2C and MAA2C: multi-agent advantage actor-critic with decentralised actors.

Sources: Mnih et al. 2016, "Asynchronous Methods for Deep Reinforcement Learning" (A3C, arXiv
1602.01783, Section 4 and Algorithm S3: the policy gradient with an n-step advantage, the entropy
bonus, the critic regressed on n-step returns); Papoudakis et al. 2021, "Benchmarking Multi-Agent
Deep Reinforcement Learning Algorithms in Cooperative Tasks" (EPyMARL, arXiv 2006.07869, Section 3:
IA2C with a critic on the agent's observation, MAA2C with a centralised critic on the state) and
its official code's actor-critic learner (n-step returns bootstrapped from a soft-updated target
critic, standardised rewards, one gradient step per batch).

This file holds, top to bottom, the n-step return estimator (:func:`nstep_returns`), the network
(:class:`A2CModule`: PPO's actor and critic, plus the target critic), the minibatch loss
(:func:`a2c_loss_terms`) and the classes that plug them into the on-policy core (:class:`A2CLearner`,
:class:`A2C`). PPO's module, value normalisation, critic inputs and checks are reused from
:mod:`marl.algos.ppo`; rollouts, sequences, training rows and the gradient step are the on-policy
core's (:mod:`marl.engine.on_policy`).
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any, Dict, Optional, Tuple

import torch

from marl.algos.a2c_config import A2CConfig
from marl.algos.policy_gradient import masked_mean
from marl.algos.ppo import PPO, PPOLearner, PPOModule
from marl.algos.q_learning import merge_moments
from marl.engine.off_policy import make_target, update_target
from marl.engine.on_policy import critic_values, next_values

__all__ = ["A2C", "A2CConfig", "A2CLearner", "A2CModule", "a2c_loss_terms", "nstep_returns"]


# ============================================================ n-step returns
def nstep_returns(
    rewards: torch.Tensor, next_values: torch.Tensor, dones: torch.Tensor, gamma: float, n: int
) -> torch.Tensor:
    """n-step returns (Mnih et al. 2016, arXiv 1602.01783, Algorithm S3), time on the last axis.

    Args:
        rewards: ``[..., T]`` reward of step ``t``.
        next_values: ``[..., T]`` value of the state after step ``t`` (denormalised): ``V(s_{t+1})``,
            the value of the final observation where the episode was truncated at ``t`` (a time
            limit bootstraps), 0 where it terminated (:func:`marl.engine.on_policy.next_values`).
        dones: ``[..., T]`` bool, an episode ended at step ``t``: no return reaches past it.
        gamma: discount; n: steps summed before the bootstrap (``n >= 1``; 1 is the TD target).
    Returns:
        ``G_t = sum_{j<k} gamma^j r_{t+j} + gamma^k next_values_{t+k-1}``, ``[..., T]``, with
        ``k = min(n, T - t, steps to the first done at or after t, that step included)``: the
        return stops early at an episode's end and at the rollout's end (EPyMARL's
        ``nstep_returns`` with ``add_value_last_step``).
    """
    T = rewards.shape[-1]
    out = torch.zeros_like(rewards)
    going = torch.ones_like(dones)  # the sum started at t has not bootstrapped yet
    for j in range(min(n, T)):
        w = T - j  # starts t that reach step t + j inside the rollout
        live = going[..., :w]
        out[..., :w] += gamma**j * rewards[..., j:] * live
        stop = live & dones[..., j:]  # done at t + j, or the n-th step, or the rollout's last step
        if j == n - 1:
            stop = live
        stop[..., -1] = live[..., -1]
        out[..., :w] += gamma ** (j + 1) * next_values[..., j:] * stop
        going[..., :w] = live & ~stop
    return out


# ============================================================ RL module
class A2CModule(PPOModule):
    """PPO's actor and critic (:class:`~marl.algos.ppo.PPOModule`) plus, on learners and when
    ``model_config["target_critic"]`` is set, a target copy of the critic (frozen; moved towards the
    critic by :func:`~marl.engine.off_policy.update_target` after every update) whose values bootstrap
    the n-step returns (EPyMARL's actor-critic learner, Papoudakis et al. 2021, arXiv 2006.07869)."""

    def setup(self):
        super().setup()
        self.has_target = not self.inference_only and bool(self.model_config.get("target_critic", False))
        if self.has_target:
            self.target_critic = make_target(self.critic)

    def get_non_inference_attributes(self):
        return super().get_non_inference_attributes() + (["target_critic"] if self.has_target else [])

    def target_values(self, critic_in: torch.Tensor) -> torch.Tensor:
        """Normalised target-critic values, shaped as :meth:`values`."""
        out = self.target_critic(critic_in)
        return out if self.team else out.squeeze(-1)


# ============================================================ loss
def a2c_loss_terms(
    module: PPOModule,
    fwd_out: Dict[str, torch.Tensor],
    rows: Dict[str, torch.Tensor],
    value_norm: bool,
    entropy_coef: float,
    value_loss_coef: float,
) -> Tuple[torch.Tensor, Dict[str, torch.Tensor]]:
    """The A2C minibatch loss ``L = -mean(log pi(a|o) A) - c_H mean(H) + c_V mean((G - V)^2)`` over active
    rows (Mnih et al. 2016, arXiv 1602.01783, Algorithm S3; EPyMARL's actor-critic learner): the
    plain policy gradient with the advantage, no ratio and no clipping.

    ``fwd_out``: ``dist_in [M, A]`` and ``values [M]`` (normalised units) of
    :meth:`~marl.algos.ppo.PPOModule._forward_train`; ``rows``: ``actions [M]`` (or ``[M, A]``),
    ``avail [M, A]`` (optional), ``advantages [M]`` (fixed before the step), ``returns [M]`` (the
    targets ``G``, raw units; normalised first when ``value_norm``) and ``active [M]`` bool.
    Returns the loss and its parts ``policy_loss``, ``value_loss``, ``entropy`` (scalars).
    """
    logp, ent = module.log_prob_entropy(fwd_out["dist_in"], rows["actions"], rows.get("avail"))
    returns, active = rows["returns"], rows["active"]
    targets = module.value_norm.normalize(returns) if value_norm else returns
    parts = {
        "policy_loss": -masked_mean(logp * rows["advantages"], active),
        "value_loss": masked_mean((targets - fwd_out["values"]) ** 2, active),
        "entropy": masked_mean(ent, active),
    }
    return parts["policy_loss"] - entropy_coef * parts["entropy"] + value_loss_coef * parts["value_loss"], parts


# ============================================================ learner and algorithm
class A2CLearner(PPOLearner):
    """IA2C/MAA2C learner on the on-policy core: n-step advantages (:func:`nstep_returns` minus the
    critic's values) bootstrapped from the target critic, one gradient step of :func:`a2c_loss_terms`
    per rollout, then the target critic's soft update with ``target_tau``."""

    loss_terms = staticmethod(a2c_loss_terms)
    _target_next: Optional[torch.Tensor] = None  # bootstrap values of the module prepare() works on

    def loss_params(self) -> Tuple[Any, ...]:
        c = self.cfg
        return c.value_norm, c.entropy_coef, c.value_loss_coef

    @torch.no_grad()
    def prepare(self, mid: str, b: Dict[str, torch.Tensor]) -> Dict[str, torch.Tensor]:
        """The core's :meth:`~marl.engine.on_policy.OnPolicyLearner.prepare`, with the values after each
        step from the target critic (denormalised, time-limit bootstrap included) where there is one."""
        module: Any = self.module[mid].unwrapped()
        self._target_next = None
        if module.has_target:  # the core's critic_values, read through the target critic
            v, vf = critic_values(SimpleNamespace(team=module.team, values=module.target_values), b)
            vn = self.value_normalizer(module)
            if vn is not None:
                v, vf = vn.denormalize(v), vn.denormalize(vf)
            self._target_next = next_values(v, vf, b["terminated"], b["truncated"])
        return super().prepare(mid, b)

    def advantages(
        self, rewards: torch.Tensor, values: torch.Tensor, next_values: torch.Tensor, dones: torch.Tensor
    ) -> torch.Tensor:
        """``G_t - V(s_t)``: :func:`nstep_returns` with ``gamma`` and ``nstep``, all ``[..., T]`` raw units,
        bootstrapped from the target critic when there is one, else from ``next_values``."""
        boot = next_values if self._target_next is None else self._target_next
        return nstep_returns(rewards, boot, dones, self.cfg.gamma, self.cfg.nstep) - values

    def run_epochs(self, data: Dict[str, Dict[str, torch.Tensor]]) -> None:
        """The core's gradient step (one: ``epochs`` and ``num_minibatches`` are 1), then every target
        critic moves towards its critic: ``theta' <- tau theta + (1 - tau) theta'``."""
        super().run_epochs(data)
        for mid in data:
            module: Any = self.module[mid].unwrapped()
            if module.has_target:
                update_target(module.target_critic, module.critic, self.cfg.target_tau)


class A2C(PPO):
    """IA2C / MAA2C: the on-policy core's training step with :class:`A2CModule` and :class:`A2CLearner`,
    rewards standardised with running statistics (``standardise_rewards``) before the learners see them.
    Action spaces and agent networks are checked as PPO's (:meth:`~marl.algos.ppo.PPO.check_env`)."""

    learner_class = A2CLearner
    module_class = A2CModule
    config_class = A2CConfig

    @classmethod
    def module_config(cls, cfg: A2CConfig, mapping, mid: str) -> Dict[str, Any]:
        return {**super().module_config(cfg, mapping, mid), "target_critic": cfg.target_tau < 1.0}

    def setup(self, config):
        super().setup(config)
        self.progress.update(reward_stats=[0.0, 0.0, 0.0])  # count, mean, M2 of the rewards seen (checkpointed)

    def sequences(self, rollout: Dict[str, Any]) -> Any:
        """The learners' batch of a rollout whose rewards are standardised (``standardise_rewards``)."""
        if self.cfg.standardise_rewards:
            rollout = self.standardised(rollout)
        return super().sequences(rollout)

    def standardised(self, rollout: Dict[str, Any]) -> Dict[str, Any]:
        """``rollout`` with every module's rewards ``(r - mean) / std`` (a copy; the sampled rollout keeps
        the env's rewards), after folding the rewards of alive agents into ``progress["reward_stats"]``
        (EPyMARL ``standardise_rewards``: the running statistics first take the batch's rewards)."""
        modules = rollout["modules"]
        for m in modules.values():
            self.progress["reward_stats"] = merge_moments(self.progress["reward_stats"], m["rewards"][m["alive"]])
        n, mean, m2 = self.progress["reward_stats"]
        std = max((m2 / max(n, 1.0)) ** 0.5, 1e-6)
        # only alive agents' rewards: a dead agent's (the env's 0) stay out of the returns of its next life
        scaled = {
            mid: {**m, "rewards": torch.where(m["alive"], (m["rewards"] - mean) / std, m["rewards"])}
            for mid, m in modules.items()
        }
        return {**rollout, "modules": scaled}
