"""HAPPO and HATRPO: heterogeneous-agent PPO and TRPO, agents updated one after another in a random order.

Sources: Kuba et al. 2022, "Trust Region Policy Optimisation in Multi-Agent Reinforcement Learning"
(ICLR 2022, arXiv 2109.11251): the multi-agent advantage decomposition (Lemma 1), the sequential
update scheme and HAPPO's objective (eq. 11 and Algorithm 2 of the appendix); Zhong et al. 2024,
"Heterogeneous-Agent Reinforcement Learning" (JMLR, arXiv 2304.09870) and its code HARL (the
on-policy HA runner and HAPPO actor: the factor ``M`` is the plain product of the earlier agents'
ratios, not clamped; one centralised V critic; defaults in ``configs/algos/happo.yaml``).

Each update draws a random order ``i_1 .. i_n`` of the agents. Agent ``i_m`` maximises PPO's clipped
surrogate of its own ratio ``r = pi_new(a|o) / pi_old(a|o)`` on the advantage weighted by

    ``M^{i_1:m-1}(s, a) = prod_{j<m} pi_new^{i_j}(a^{i_j}|o^{i_j}) / pi_old^{i_j}(a^{i_j}|o^{i_j})``

(1 for the first agent), the ratios of the agents updated before it, computed once each has finished
its update and held constant (no gradient) while ``i_m`` trains. Every agent has its own module (the
``share='individual'`` mapping; a module shared by several agents is refused, :mod:`marl.algos.happo_config`).

What is PPO's is imported: the module (:class:`~marl.algos.ppo.PPOModule`: actor and MAPPO's centralised
critic), the minibatch loss (:func:`~marl.algos.ppo.ppo_loss_terms`: clipped surrogate, clipped Huber
value loss, entropy) and the rest of the on-policy core (GAE, value and advantage normalisation,
training rows, minibatches: :mod:`marl.engine.on_policy`). This file holds the update order, the
factor, the weighted loss and the sequential update (:meth:`HAPPOLearner.run_epochs`), whose
per-agent step (:meth:`HAPPOLearner.agent_step`) HATRPO (:class:`HATRPOLearner`, Kuba et al. 2022,
Algorithm 1) replaces with one trust-region step of the agent's policy on ``M * A``
(:func:`marl.algos.trpo.policy_trust_region_step`) followed by its critic's Adam steps.
"""

from __future__ import annotations

from typing import Any, Dict, List, Sequence, Tuple

import numpy as np
import torch
from ray.rllib.utils.metrics import NUM_ENV_STEPS_SAMPLED_LIFETIME

from marl.algos.happo_config import HAPPOConfig, HATRPOConfig
from marl.algos.policy_gradient import masked_mean
from marl.algos.ppo import PPO, PPOLearner, PPOModule, ppo_loss_terms
from marl.algos.trpo import TRPO, TRPOLearner, critic_loss_terms
from marl.engine.on_policy import MODEL_INPUTS, loss_rows


# ============================================================ order and factor
def update_order(modules: Sequence[str], seed: int, sampled_steps: int, fixed: bool = False) -> List[str]:
    """The order in which one update trains ``modules`` (one per agent).

    A random permutation (Kuba et al. 2022, arXiv 2109.11251, Algorithm 2: "draw a random permutation
    of agents"; HARL's ``fixed_order: False``) from a generator seeded with ``(seed, sampled_steps)``:
    every learner of a run draws the same order (DDP steps the same module everywhere), a new one each
    update (the lifetime env-step count grows), and a resumed run draws the orders it would have drawn
    (the count is in the checkpoint). ``fixed``: ``modules`` as given, every update.

    Args:
        modules: module ids in the env's agent order; seed: the run's ``seed``; sampled_steps: env steps
            sampled before this update (RLlib's ``NUM_ENV_STEPS_SAMPLED_LIFETIME``).
    Returns:
        A permutation of ``modules``.
    """
    if fixed:
        return list(modules)
    gen = torch.Generator().manual_seed(int(np.random.SeedSequence([seed, sampled_steps]).generate_state(1)[0]))
    return [modules[i] for i in torch.randperm(len(modules), generator=gen).tolist()]


def next_factor(
    factor: torch.Tensor, logp_new: torch.Tensor, logp_old: torch.Tensor, active: torch.Tensor
) -> torch.Tensor:
    """The factor of the next agent: ``factor`` times the ratio ``exp(logp_new - logp_old)`` of the agent
    just updated (Kuba et al. 2022, arXiv 2109.11251, eq. 11: ``M^{i_1:m} = M^{i_1:m-1} * r^{i_m}``).

    Args:
        factor, logp_new, logp_old: ``[...]`` per row (env step); active: ``[...]`` bool, the agent
            was alive at that step.
    Returns:
        ``[...]``, without gradient. Where the agent was not alive its action changed nothing, so its
        ratio counts as 1 (ours; HARL multiplies the ratio of the dead agent's no-op action in).
    """
    ratio = torch.exp(logp_new.detach() - logp_old)
    return factor * torch.where(active, ratio, torch.ones_like(ratio))


# ============================================================ loss
def happo_loss_terms(
    module: PPOModule, fwd_out: Dict[str, torch.Tensor], rows: Dict[str, torch.Tensor], *ppo_params: Any
) -> Tuple[torch.Tensor, Dict[str, torch.Tensor]]:
    """HAPPO's minibatch loss: :func:`~marl.algos.ppo.ppo_loss_terms` with the advantage ``A`` replaced by
    ``M * A`` (Kuba et al. 2022, arXiv 2109.11251, eq. 11). ``M > 0``, so
    ``min(r M A, clip(r, 1-e, 1+e) M A) = M min(r A, clip(r, 1-e, 1+e) A)``, HARL's form.

    Args:
        rows: PPO's columns plus ``factor`` ``[M]``, the agent's ``M`` per row; ppo_params: as
            :meth:`~marl.algos.ppo.PPOLearner.loss_params`.
    Returns:
        ``(loss, parts)`` as :func:`~marl.algos.ppo.ppo_loss_terms`.
    """
    return ppo_loss_terms(module, fwd_out, {**rows, "advantages": rows["factor"] * rows["advantages"]}, *ppo_params)


# ============================================================ learner and algorithm
class HAPPOLearner(PPOLearner):
    """The on-policy core's learner with HAPPO's sequential update (:meth:`run_epochs`): PPO's values,
    advantages and training rows, then one agent at a time, in the order of :func:`update_order`.

    Logs per module ``update_position`` (0 for the first agent of this update) and ``factor_mean`` (the
    mean ``M`` over the agent's active rows when its turn came; 1 for the first).
    """

    loss_terms = staticmethod(happo_loss_terms)
    sampled_steps = 0  # env steps sampled before this update (set by before_gradient_based_update)

    def before_gradient_based_update(self, *, timesteps: Dict[str, Any]) -> None:
        super().before_gradient_based_update(timesteps=timesteps)
        self.sampled_steps = int(timesteps.get(NUM_ENV_STEPS_SAMPLED_LIFETIME, 0))

    def run_epochs(self, data: Dict[str, Dict[str, torch.Tensor]]) -> None:
        """Train the modules of ``data`` (module id -> training rows) one after another: each with the
        factor ``M`` of the modules trained before it as a column ``factor`` (shaped like ``active``: one
        value per row, the rows of all modules are the same env steps in the same order), then
        multiply its new ratios into ``M`` (:func:`next_factor`)."""
        order = update_order(list(data), self.cfg.seed, self.sampled_steps, self.cfg.fixed_order)
        factor = torch.ones_like(next(iter(data.values()))["active"], dtype=torch.float32)
        for position, mid in enumerate(order):
            rows = {**data[mid], "factor": factor}
            self.metrics.log_value((mid, "update_position"), float(position), window=1)
            self.metrics.log_value((mid, "factor_mean"), float(masked_mean(factor, rows["active"])), window=1)
            self.agent_step(mid, rows)
            factor = next_factor(factor, self.log_probs(mid, rows), rows["logp_old"], rows["active"])

    def agent_step(self, mid: str, rows: Dict[str, torch.Tensor]) -> None:
        """The update of one agent's module on its training rows (with their ``factor`` column): PPO's
        ``epochs`` passes of ``num_minibatches`` gradient steps on :func:`happo_loss_terms`, actor and
        critic together. HATRPO overrides this one method with a trust-region step."""
        for _ in range(self.cfg.epochs):
            for minibatch in self.minibatches(rows):
                self.gradient_step({mid: minibatch})

    @torch.no_grad()
    def log_probs(self, mid: str, rows: Dict[str, torch.Tensor]) -> torch.Tensor:
        """``log pi(a|o)`` of module ``mid``'s current policy on all its training rows, shaped like
        ``rows["active"]`` (``[M]``, GRU chunks ``[M, L]``, team critic ``[M, 1]``)."""
        module: Any = self.module[mid].unwrapped()
        out = module.forward_train({k: v for k, v in rows.items() if k in MODEL_INPUTS or k == "obs"})
        flat = loss_rows(module, rows)  # one row per step and agent, as the loss reads them
        logp, _ = module.log_prob_entropy(out["dist_in"], flat["actions"], flat.get("avail"))
        return logp.reshape(rows["active"].shape)


class HAPPO(PPO):
    """HAPPO: the on-policy core's training step with :class:`~marl.algos.ppo.PPOModule` (one per agent) and
    :class:`HAPPOLearner`; everything else as MAPPO (:class:`~marl.algos.ppo.PPO`)."""

    learner_class = HAPPOLearner
    config_class = HAPPOConfig
    learner_metrics = PPO.learner_metrics + ("update_position", "factor_mean")


class HATRPOLearner(HAPPOLearner, TRPOLearner):
    """HATRPO (Kuba et al. 2022, arXiv 2109.11251, Algorithm 1): HAPPO's sequential update and factor
    (:meth:`HAPPOLearner.run_epochs`) with each agent's turn (:meth:`agent_step`) a trust-region step of
    its policy on the weighted advantage ``M * A`` (:meth:`TRPOLearner.policy_step`: KL-bounded, conjugate
    gradient and line search), then its critic's ``epochs`` x ``num_minibatches`` Adam steps on TRPO's
    critic loss (the optimiser holds the critic only)."""

    loss_terms = staticmethod(critic_loss_terms)

    def agent_step(self, mid: str, rows: Dict[str, torch.Tensor]) -> None:
        self.policy_step(mid, {**rows, "advantages": rows["factor"] * rows["advantages"]})
        super().agent_step(mid, rows)  # HAPPO's epochs x minibatches, here on the critic loss alone


class HATRPO(HAPPO):
    """HATRPO: :class:`HAPPO` with :class:`HATRPOLearner`."""

    learner_class = HATRPOLearner
    config_class = HATRPOConfig
    learner_metrics = TRPO.learner_metrics + ("update_position", "factor_mean")
