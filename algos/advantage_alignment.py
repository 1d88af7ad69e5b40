"""Advantage Alignment for tensor (neural) policies: PPO on the opponent-aware advantage.

Duque et al. 2025, "Advantage Alignment Algorithms" (ICLR 2025, arXiv 2406.14662), the method section, and its
official code (https://github.com/jduquevan/advantage-alignment/blob/master/train.py): every agent's PPO advantage
``A1_t`` (GAE on its own critic) gets the term ``beta * w_t * A2_t``, where ``w_t = gamma *
sum_{k<t} gamma^(t-k) A1(s_k, a_k, b_k)`` sums the agent's own past advantages in the episode and
``A2_t`` is the co-player's advantage at the same step (the sum over the other agents). ``w_t`` sums
one-step advantages ``r_k + gamma * V(s_k+1) - V(s_k)`` (:meth:`AALearner.extra_columns`): GAE advantages
of past steps would already hold the reward of ``a_t``. An agent makes more likely
the actions that help the co-player after the interaction has gone well for it, and less likely
after it has gone badly (reciprocity). Proximal Advantage Alignment puts ``A*`` into PPO's clipped
surrogate; that is this file. The formula is :func:`marl.algos.opponent_shaping.aa_credit`, the one
the LLM path uses (``algos/llm/batches.py``).

This file holds only what differs from IPPO (:mod:`marl.algos.ppo`: module, loss, trainer are
reused): :class:`AALearner` computes every module's GAE advantages, then the co-player term across
modules (:func:`align`), before the epochs. Agents have independent, non-shared policies and critics
by default (``share: individual``, ``critic: obs``), as in the paper.
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional

import torch

from marl.algos.advantage_alignment_config import AAConfig
from marl.algos.opponent_shaping import aa_credit, others_sum
from marl.algos.ppo import PPO, PPOLearner
from marl.engine.on_policy import normalize_advantages
from marl.env import MarlError


def episode_starts(done: torch.Tensor) -> torch.Tensor:
    """``[..., T]`` bool: True at the first step of the rollout and after every step that ended an episode."""
    starts = torch.ones_like(done)
    starts[..., 1:] = done[..., :-1]
    return starts


def per_agent(x: torch.Tensor, n_agents: int, team: bool) -> torch.Tensor:
    """A module's per-agent column as ``[B, N, T]``: rows ``[B*N, T]`` (env copy major) or the team
    layout, already ``[B, N, T]``."""
    return x if team else x.reshape(-1, n_agents, x.shape[-1])


def align(
    adv: Dict[str, torch.Tensor],
    active: Dict[str, torch.Tensor],
    starts: Dict[str, torch.Tensor],
    agents: Dict[str, int],
    beta: float,
    gamma: float,
    past: Optional[Dict[str, torch.Tensor]] = None,
    mean: bool = False,
) -> Dict[str, torch.Tensor]:
    """The aligned advantages ``A*`` of every module (Duque et al. 2025, arXiv 2406.14662, the A* equation).

    Args:
        adv, active, starts: module id -> ``[B, N_m, T]`` advantages ``A1``, alive mask, episode starts
            (the same ``B`` env copies in every module).
        agents: module id -> ``N_m``, in the order the modules' agents are stacked.
        beta, gamma: the alignment weight and discount (:func:`~marl.algos.opponent_shaping.aa_credit`).
        past: module id -> ``[B, N_m, T]`` the own advantages summed into ``w_t`` (default ``adv``;
            :class:`AALearner` passes one-step TD errors).
        mean: ``w_t`` is the mean of the past own advantages, not their discounted sum
            (:func:`~marl.algos.opponent_shaping.aa_weights`).
    Returns:
        module id -> ``[B, N_m, T]``; ``A2`` of an agent is the sum of the other agents' active advantages.
    """
    mids = list(agents)
    a1 = torch.cat([adv[m] * active[m] for m in mids], 1)  # [B, N, T]: every agent of every module
    a2 = others_sum(a1)
    mask, st = torch.cat([active[m] for m in mids], 1), torch.cat([starts[m] for m in mids], 1)
    own = a1 if past is None else torch.cat([past[m] * active[m] for m in mids], 1)
    B, N, T = a1.shape
    a1, a2, mask, st, own = (x.reshape(B * N, T) for x in (a1, a2, mask, st, own))
    out = aa_credit(a1, a2, mask, beta, gamma, starts=st, past=own, mean=mean)
    return dict(zip(mids, out.reshape(B, N, T).split([agents[m] for m in mids], 1)))


class AALearner(PPOLearner):
    """IPPO's learner (:class:`~marl.algos.ppo.PPOLearner`) whose advantages are aligned across
    modules (:func:`align`) after GAE and its normalisation, before the epochs (as in the official
    code: normalised advantages, then the alignment term)."""

    def extra_columns(
        self, rewards: torch.Tensor, values: torch.Tensor, next_values: torch.Tensor, active: torch.Tensor
    ) -> Dict[str, torch.Tensor]:
        """``td``: the one-step advantages ``r_t + gamma * V(s_t+1) - V(s_t)``, normalised as the GAE ones are.

        ``w_t`` sums them, not the GAE advantages: a GAE advantage of a past step ``k`` is
        ``sum_j (gamma*lambda)^j delta_{k+j}``, so it holds the TD errors of step ``t`` and later, i.e. the
        reward of the very action ``a_t`` that ``w_t`` weighs. Defecting at ``t`` then raises ``w_t``
        and lowers ``A2_t`` together, and ``w_t * A2_t`` penalises defection after any history: the
        agents learned "cooperate after anything" (no retaliation). One-step advantages of steps
        ``k < t`` end at ``V(s_t)``, before ``a_t``, as the paper's ``A1(s_k, a_k, b_k)`` does.
        """
        td = rewards + self.cfg.gamma * next_values - values
        return {"td": normalize_advantages(td, active) if self.cfg.advantage_norm else td}

    def prepare_modules(self, batches: Dict[str, Dict[str, torch.Tensor]]) -> Dict[str, Dict[str, torch.Tensor]]:
        data = super().prepare_modules(batches)
        counts: Dict[str, int] = {}
        for mid in self.run.agent_to_module.values():
            counts[mid] = counts.get(mid, 0) + 1
        agents = {mid: counts[mid] for mid in data}
        team = {mid: bool(self.module[mid].unwrapped().team) for mid in data}

        def view(mid: str, x: torch.Tensor) -> torch.Tensor:
            return per_agent(x, agents[mid], team[mid])

        done = {mid: b["terminated"] | b["truncated"] for mid, b in batches.items()}
        aligned = align(
            {m: view(m, d["advantages"]) for m, d in data.items()},
            {m: view(m, d["active"]).to(d["advantages"].dtype) for m, d in data.items()},
            {m: view(m, episode_starts(done[m])) for m in data},
            agents,
            self.cfg.beta,
            self.cfg.aa_gamma,
            {m: view(m, d.pop("td")) for m, d in data.items()},
            mean=self.cfg.aa_weighting == "mean",
        )
        for mid, d in data.items():
            term = aligned[mid] - view(mid, d["advantages"])  # beta * w_t * A2_t
            d["advantages"] = aligned[mid].reshape(d["advantages"].shape)
            self.metrics.log_value((mid, "aa_term_abs"), float(term.abs().mean()), window=1)
        return data


class AdvantageAlignment(PPO):
    """Advantage Alignment (Proximal Advantage Alignment, Duque et al. 2025) on the on-policy core:
    IPPO's module, loss and training step with :class:`AALearner`. ``fit("advantage_alignment")`` runs
    it on tensor envs and the LLM self-play trainer on text games (the registry's ``variants``)."""

    learner_class = AALearner
    config_class = AAConfig

    @classmethod
    def check_run(cls, cfg: Any, env: Any, mapping: Any) -> None:
        """Advantage Alignment needs two or more agents and every agent's rows on one learner.

        Raises:
            MarlError: an env with one agent (no co-player), or ``num_learners`` above 1 (learners would
                hold different env copies of different modules).
        """
        super().check_run(cfg, env, mapping)
        agents: List[str] = list(env.info.agents)
        if len(agents) < 2:
            raise MarlError(
                f"advantage_alignment needs a co-player: {env.info.family}:{env.info.scenario} has one agent "
                f"({agents[0]}). Use ippo for single-agent tasks."
            )
        if cfg.num_learners > 1:
            raise MarlError(
                f"advantage_alignment needs every agent's advantages on one learner: num_learners="
                f"{cfg.num_learners}; use num_learners=0 or 1."
            )
