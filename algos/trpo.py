"""ITRPO and MATRPO: multi-agent TRPO with decentralised actors.

Sources: Schulman et al. 2015, "Trust Region Policy Optimization" (arXiv 1502.05477; sec. 6: the
surrogate and the mean-KL constraint; appendix C: conjugate gradient on Fisher-vector products, the
step length ``sqrt(2 delta / s^T A s)``, the backtracking line search); Hu et al. 2023, MARLlib
(arXiv 2210.13708): ITRPO (critic on the agent's own observation) and MATRPO (centralised critic);
Zhong et al. 2024, HARL (arXiv 2304.09870) and its official code's HATRPO actor: one
trust-region step of the actor per update on the whole batch, the accept ratio of the line search,
a critic trained apart with Adam (MAPPO's value loss).

This file holds, top to bottom, the trust-region math as small functions free of RLlib
(:func:`conjugate_gradient`, :func:`kl_hessian_product`, :func:`trust_region_step`), the policy's
surrogate and KL on PPO's module (:func:`surrogate_objective`, :func:`policy_kl`,
:func:`policy_trust_region_step`, which HATRPO calls agent by agent with its weighted advantages),
and the classes that plug them into the on-policy core (:class:`TRPOLearner`, :class:`TRPO`). The
networks are PPO's (:class:`~marl.algos.ppo.PPOModule`), and so is the critic's loss.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Sequence, Tuple

import torch

from marl.algos.policy_gradient import masked_mean
from marl.algos.ppo import PPO, PPOLearner, masked_log_softmax, ppo_loss_terms
from marl.algos.trpo_config import TRPOConfig
from marl.engine.on_policy import loss_rows
from marl.errors import TrainingDiverged

Tensors = Dict[str, torch.Tensor]


# ============================================================ trust-region math
def flat(tensors: Sequence[torch.Tensor]) -> torch.Tensor:
    """The tensors concatenated into one vector ``[P]`` (P: their total number of elements)."""
    return torch.cat([t.reshape(-1) for t in tensors])


@torch.no_grad()
def set_flat(params: Sequence[torch.Tensor], vec: torch.Tensor) -> None:
    """Write the vector ``vec [P]`` into ``params`` in place (the inverse of :func:`flat`)."""
    i = 0
    for p in params:
        p.copy_(vec[i : i + p.numel()].view_as(p))
        i += p.numel()


def conjugate_gradient(
    mvp: Callable[[torch.Tensor], torch.Tensor], b: torch.Tensor, iters: int, residual_tol: float = 1e-10
) -> torch.Tensor:
    """Approximate solution ``x [P]`` of ``A x = b`` for a symmetric positive definite ``A`` known only
    through products ``mvp(v) = A v`` (Hestenes and Stiefel 1952; Schulman et al. 2015, arXiv 1502.05477,
    appendix C). Exact after ``P`` iterations in exact arithmetic; stops early once ``|r|^2 <= residual_tol``.

    Args:
        mvp: ``v [P] -> A v [P]``; b: ``[P]``; iters: most products to take (>= 1).
    """
    x = torch.zeros_like(b)
    r, p = b.clone(), b.clone()
    rr = r.dot(r)
    for _ in range(iters):
        if rr <= residual_tol:  # also b = 0: x = 0 without a 0/0
            break
        Ap = mvp(p)
        alpha = rr / p.dot(Ap)
        x += alpha * p
        r -= alpha * Ap
        rr, rr_old = r.dot(r), rr
        p = r + (rr / rr_old) * p
    return x


def kl_hessian_product(
    kl_fn: Callable[[], torch.Tensor], params: Sequence[torch.Tensor], damping: float
) -> Callable[[torch.Tensor], torch.Tensor]:
    """``v [P] -> (H + damping I) v``, ``H`` the Hessian of the scalar ``kl_fn()`` in ``params`` at their
    current values: the Fisher information of the policy when ``kl_fn`` is the mean
    ``KL(pi_old || pi)`` and ``pi = pi_old`` (Schulman et al. 2015, arXiv 1502.05477, appendix C.1:
    Fisher-vector products by differentiating the KL twice; damping as in HARL's
    official code). The KL's gradient graph is built once and serves every product.
    """
    grads = torch.autograd.grad(kl_fn(), params, create_graph=True, allow_unused=True, materialize_grads=True)
    g = flat(grads)

    def product(v: torch.Tensor) -> torch.Tensor:
        hv = torch.autograd.grad(g.dot(v), params, retain_graph=True, allow_unused=True, materialize_grads=True)
        return flat(hv).detach() + damping * v

    return product


@dataclass(frozen=True)
class TrustRegionStep:
    """What :func:`trust_region_step` did. ``accepted``: the parameters moved; ``step_fraction``: the
    share of the full step taken (0 if rejected); ``kl`` and ``surrogate_gain``: the mean KL to the old
    policy and ``L(new) - L(old)`` of the accepted parameters (0 if rejected); ``expected_gain``: the
    linear prediction ``g . s`` of the full step ``s``; ``full_step_norm``: ``|s|``, the first step tried;
    ``tries``: step lengths evaluated."""

    accepted: bool
    step_fraction: float
    kl: float
    surrogate_gain: float
    expected_gain: float
    full_step_norm: float
    tries: int


def trust_region_step(
    params: Sequence[torch.Tensor],
    surrogate_fn: Callable[[], torch.Tensor],
    kl_fn: Callable[[], torch.Tensor],
    max_kl: float,
    cg_iters: int = 10,
    damping: float = 0.1,
    backtrack_coef: float = 0.8,
    line_search_steps: int = 10,
    accept_ratio: float = 0.5,
) -> TrustRegionStep:
    """One TRPO step on ``params`` in place (Schulman et al. 2015, arXiv 1502.05477, sec. 6 and appendix C).

    ``g`` is the gradient of the surrogate ``L = surrogate_fn()`` (to maximise), ``x`` the conjugate-gradient
    solution of ``A x = g`` with ``A = H + damping I`` (:func:`kl_hessian_product` of ``kl_fn``), and the
    full step ``s = sqrt(2 max_kl / x^T A x) x``, the largest step along ``x`` whose quadratic KL model is
    ``max_kl``. The line search tries ``backtrack_coef^i s`` for ``i = 0 .. line_search_steps-1`` and takes
    the first with measured ``kl_fn() <= max_kl``, ``L`` gain ``> 0`` and gain ``> accept_ratio`` times its
    linear prediction ``g . s backtrack_coef^i`` (HARL's accept ratio, Zhong et al. 2024, arXiv 2304.09870);
    if none passes, ``params`` keep their values exactly. Defaults: HARL's official code (its HATRPO config).

    Args:
        params: the tensors to move (leaves with ``requires_grad``), e.g. one agent's actor parameters.
        surrogate_fn: ``() -> L`` scalar at the current ``params``, differentiable in them.
        kl_fn: ``() -> mean KL(pi_old || pi)`` scalar at the current ``params`` (0 at the start), twice
            differentiable in them; ``max_kl``: the trust region's radius (delta, nats).
    Returns:
        :class:`TrustRegionStep`.
    Raises:
        TrainingDiverged: ``L`` or its gradient is NaN or infinite.
    """
    params = list(params)
    surrogate = surrogate_fn()
    g = flat(torch.autograd.grad(surrogate, params, allow_unused=True, materialize_grads=True))
    if not (torch.isfinite(surrogate) and torch.isfinite(g).all()):
        raise TrainingDiverged(f"the trust-region surrogate ({surrogate.item()}) or its gradient is not finite")
    nothing = TrustRegionStep(False, 0.0, 0.0, 0.0, 0.0, 0.0, 0)
    if not bool(g.any()):  # a flat surrogate (e.g. all advantages 0): no direction to step in
        return nothing
    product = kl_hessian_product(kl_fn, params, damping)
    x = conjugate_gradient(product, g, cg_iters)
    xAx = x.dot(product(x))
    if not (torch.isfinite(xAx) and xAx > 0):
        return nothing
    full = x * torch.sqrt(2 * max_kl / xAx)
    expected, norm = float(g.dot(full)), float(full.norm())
    old, start, frac = flat([p.detach() for p in params]).clone(), float(surrogate.detach()), 1.0
    for i in range(line_search_steps):
        set_flat(params, old + frac * full)
        with torch.no_grad():
            gain, kl = float(surrogate_fn()) - start, float(kl_fn())
        if kl <= max_kl and gain > 0 and gain > accept_ratio * expected * frac:
            return TrustRegionStep(True, frac, kl, gain, expected, norm, i + 1)
        frac *= backtrack_coef
    set_flat(params, old)
    return TrustRegionStep(False, 0.0, 0.0, 0.0, expected, norm, line_search_steps)


# ============================================================ the policy's surrogate and KL (PPO's module)
def actor_parameters(module: Any) -> List[torch.nn.Parameter]:
    """The policy's parameters of a :class:`~marl.algos.ppo.PPOModule`: all but the critic's (the actor
    network and, for continuous actions, ``log_std``)."""
    return [p for name, p in module.named_parameters() if not name.startswith("critic.")]


def surrogate_objective(module: Any, dist_in: torch.Tensor, rows: Dict[str, Any], entropy_coef: float) -> torch.Tensor:
    """``mean over active rows of pi(a|o) / pi_old(a|o) * A + c_H H(pi(.|o))`` (Schulman et al. 2015,
    arXiv 1502.05477, eq. 14, plus an entropy bonus that is 0 in the sources' defaults).

    Args:
        dist_in: the policy's outputs ``[M, A]`` (``_forward_train``'s ``dist_in``); rows: ``actions [M]``
            (``[M, A]`` continuous), ``avail [M, A]`` (optional), ``logp_old [M]``, ``advantages [M]``
            (HATRPO passes its weighted ones), ``active [M]`` bool.
    """
    logp, ent = module.log_prob_entropy(dist_in, rows["actions"], rows.get("avail"))
    ratio = torch.exp(logp - rows["logp_old"])
    return masked_mean(ratio * rows["advantages"], rows["active"]) + entropy_coef * masked_mean(ent, rows["active"])


def policy_kl(module: Any, old: Dict[str, torch.Tensor], dist_in: torch.Tensor, rows: Dict[str, Any]) -> torch.Tensor:
    """Mean ``KL(pi_old(.|o) || pi(.|o))`` over active rows, a scalar: categorical over the masked logits, or
    diagonal Gaussian (summed over action dimensions, closed form). ``old``: :func:`policy_snapshot`;
    ``dist_in [M, A]``: the policy's outputs now; ``rows``: ``avail`` (optional) and ``active``."""
    if module.discrete:
        lp_old, lp = (
            masked_log_softmax(old["dist_in"], rows.get("avail")),
            masked_log_softmax(dist_in, rows.get("avail")),
        )
        kl = (lp_old.exp() * (lp_old - lp)).sum(-1)  # unavailable actions: probability exactly 0
    else:
        normal = torch.distributions.Normal
        before = normal(old["dist_in"], old["log_std"].exp().expand_as(dist_in))
        kl = torch.distributions.kl_divergence(before, normal(dist_in, module.log_std.exp().expand_as(dist_in))).sum(-1)
    return masked_mean(kl, rows["active"])


def policy_snapshot(module: Any, dist_in: torch.Tensor) -> Dict[str, torch.Tensor]:
    """The policy before a step, detached: ``dist_in [M, A]`` and, for continuous actions, ``log_std [A]``."""
    old = {"dist_in": dist_in.detach()}
    if not module.discrete:
        old["log_std"] = module.log_std.detach().clone()
    return old


def policy_trust_region_step(module: Any, batch: Dict[str, Any], entropy_coef: float, **step: Any) -> TrustRegionStep:
    """One :func:`trust_region_step` of a :class:`~marl.algos.ppo.PPOModule`'s policy on a whole batch of
    training rows (the on-policy core's ``training_rows``: steps, GRU chunks or team env steps).

    ``step``: :func:`trust_region_step`'s keywords (``max_kl``, ``cg_iters``, ...; :func:`step_keywords`).
    HATRPO calls it per agent with ``batch["advantages"]`` weighted by the earlier agents' ratio product.
    """
    rows = loss_rows(module, batch)

    def dist_in() -> torch.Tensor:
        return module._forward_train(batch)["dist_in"]

    old = policy_snapshot(module, dist_in())
    with torch.backends.cudnn.flags(enabled=False):  # cuDNN's GRU has no double backward (HARL does the same)
        return trust_region_step(
            actor_parameters(module),
            lambda: surrogate_objective(module, dist_in(), rows, entropy_coef),
            lambda: policy_kl(module, old, dist_in(), rows),
            **step,
        )


def step_keywords(cfg: TRPOConfig) -> Dict[str, Any]:
    """:func:`trust_region_step`'s keywords from a config's trust-region keys."""
    return dict(
        max_kl=cfg.kl_threshold,
        cg_iters=cfg.cg_iters,
        damping=cfg.cg_damping,
        backtrack_coef=cfg.backtrack_coef,
        line_search_steps=cfg.line_search_steps,
        accept_ratio=cfg.accept_ratio,
    )


# ============================================================ learner and algorithm
TRUST_REGION_METRICS = ("kl", "surrogate_gain", "expected_gain", "step_fraction", "accepted")  # logged per module


def critic_loss_terms(module: Any, fwd_out: Tensors, rows: Tensors, *value_params: Any) -> Tuple[torch.Tensor, Tensors]:
    """The critic's minibatch loss ``c_V L_V``: MAPPO's clipped Huber value loss, the value part of
    :func:`~marl.algos.ppo.ppo_loss_terms` (Yu et al. 2022, arXiv 2103.01955; HARL's TRPO critic).
    ``value_params``: ``value_norm, value_clip, huber_delta, value_loss_coef`` (:meth:`TRPOLearner.loss_params`)."""
    value_norm, value_clip, huber_delta, value_loss_coef = value_params
    _, parts = ppo_loss_terms(module, fwd_out, rows, value_norm, 1.0, value_clip, huber_delta, 0.0, value_loss_coef)
    return value_loss_coef * parts["value_loss"], {"value_loss": parts["value_loss"]}


class TRPOLearner(PPOLearner):
    """ITRPO/MATRPO learner on the on-policy core: per update, one :func:`policy_trust_region_step` of each
    module's policy on the whole batch, then ``epochs`` x ``num_minibatches`` Adam steps of the critic alone
    (:func:`critic_loss_terms`; the optimiser holds only the critic's parameters). Logs per module ``kl``,
    ``surrogate_gain``, ``expected_gain``, ``step_fraction`` and ``accepted`` (1 or 0)."""

    loss_terms = staticmethod(critic_loss_terms)
    finite_terms = ("value_loss",)

    def loss_params(self) -> Tuple[Any, ...]:
        c = self.cfg
        return c.value_norm, c.value_clip, c.huber_delta, c.value_loss_coef

    def configure_optimizers_for_module(self, module_id, config=None):
        params = list(self.module_for_optimizer(module_id).critic.parameters())  # the actor moves by trust region
        opt = torch.optim.Adam(params, eps=self.cfg.adam_eps, fused=True)
        self.register_optimizer(module_id=module_id, optimizer=opt, params=params, lr_or_lr_schedule=config.lr)

    def run_epochs(self, data: Dict[str, Dict[str, torch.Tensor]]) -> None:
        """The policies' trust-region steps (advantages from the critic before its update), then the critic's epochs."""
        for mid, rows in data.items():
            self.policy_step(mid, rows)
        super().run_epochs(data)

    def policy_step(self, mid: str, rows: Dict[str, torch.Tensor]) -> None:
        """One :func:`policy_trust_region_step` of module ``mid``'s policy on its training rows, logged.

        Raises:
            TrainingDiverged: the surrogate is not finite (names the module).
        """
        try:
            done = policy_trust_region_step(
                self.module[mid].unwrapped(), rows, self.cfg.entropy_coef, **step_keywords(self.cfg)
            )
        except TrainingDiverged as e:
            raise TrainingDiverged(f"module '{mid}': {e}") from e
        for name in TRUST_REGION_METRICS:
            self.metrics.log_value((mid, name), float(getattr(done, name)), window=1)


class TRPO(PPO):
    """ITRPO / MATRPO: PPO's networks, critic choice and training step with :class:`TRPOLearner`."""

    learner_class = TRPOLearner
    config_class = TRPOConfig
    learner_metrics = ("value_loss", "explained_variance", "value_mean") + TRUST_REGION_METRICS
