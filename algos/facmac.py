"""FACMAC: factored multi-agent centralised policy gradients on the DDPG family's off-policy core.

Source: Peng et al. 2021, "FACMAC: Factored Multi-Agent Centralised Policy Gradients" (NeurIPS 2021, arXiv
2003.06709). Each agent ``a`` has a deterministic actor ``mu_a(o_a)`` and a critic ``Q_a(o_a, u_a)`` that reads
its own observation and action; a mixer makes the team's ``Q_tot = g(Q_1..Q_N, s)`` (Sec. 4.1: QMIX's
monotonic hypernetwork mixer, the same without the monotonicity constraint, or VDN's sum). The critics and
the mixer learn one TD target per transition, ``y = r + gamma (1 - d) Q_tot'(o', mu'(o'), s')`` with target
actors, critics and mixer. The actors follow the centralised policy gradient (Sec. 4.2, Eq. 5): every agent's
action is its current policy's, ``-Q_tot(s, mu_1(o_1)..mu_N(o_N))``, not one agent's action with the others'
from the buffer as in MADDPG. Discrete actions use the Gumbel-softmax as the DDPG family does (Sec. 4.3).

Everything else (actors, critics, replay, exploration, targets, schedule) is the DDPG family's
(:mod:`marl.algos.ddpg`). Equations, keys, limits: ``docs/algorithms/facmac.md``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Tuple

import torch
from ray.rllib.core.rl_module.rl_module import RLModuleSpec

from marl.algos.actor_critic_parts import detached
from marl.algos.ddpg import (
    DDPG,
    JOINT,
    DDPGLayout,
    DDPGLearner,
    DDPGModule,
    action_input,
    critic_inputs,
    frozen,
    gumbel_softmax_st,
    target_action,
)
from marl.algos.actor_critic_parts import actor_obs
from marl.algos.facmac_config import FACMACConfig  # noqa: F401
from marl.algos.networks.mixers import team_reward_rule, team_rewards
from marl.algos.value_decomp import ValueDecomp
from marl.algos.value_decomp_inputs import mixer_specs
from marl.config import config_view
from marl.errors import MarlError

Members = List[Tuple[str, int]]  # a team's agents as (module id, index in the module), in env agent order


@dataclass(frozen=True)
class FACMACLayout(DDPGLayout):
    """The DDPG family's layout plus ``teams`` (team -> :data:`Members`; one mixer each) and ``team_reward``
    (``"mean"`` or ``"sum"`` of the agents' rewards: :func:`~marl.algos.networks.mixers.team_reward_rule`)."""

    teams: Dict[str, Members]
    team_reward: str


def team_stack(per_module: Dict[str, torch.Tensor], members: Members) -> torch.Tensor:
    """Module id -> ``[B, N_m]`` values -> the team's ``[B, n]`` in ``members`` order."""
    return torch.stack([per_module[m][:, i] for m, i in members], -1)


def mix(qs: torch.Tensor, state: torch.Tensor, mixer: Optional[torch.nn.Module], freeze: bool = False):
    """``Q_tot [B]`` of the agents' ``qs [B, n]`` and ``state [B, S]``: VDN's sum without a mixer, else
    ``mixer(qs, state)``; ``freeze``: the mixer's parameters get no gradient (the actor loss)."""
    if mixer is None:
        return qs.sum(-1)
    return frozen(mixer, qs, state) if freeze else mixer(qs, state)


def action_penalty(mods: Dict[str, DDPGModule], own: Dict[str, torch.Tensor]) -> torch.Tensor:
    """``mean(pi^2)`` over the continuous modules' actions in half action ranges (``pi`` = the actor's tanh
    output), the regulariser of FACMAC's official continuous learner; 0 without continuous modules."""
    terms = [
        (((own[m] - mod.low) / (mod.high - mod.low) * 2 - 1) ** 2).mean() for m, mod in mods.items() if not mod.discrete
    ]
    return torch.stack(terms).mean() if terms else torch.zeros(())


def facmac_losses(
    mods: Dict[str, DDPGModule],
    mixers: Dict[str, Optional[torch.nn.Module]],
    targets: Dict[str, Optional[torch.nn.Module]],
    batch: Dict[str, Any],
    cfg: Any,
    layout: FACMACLayout,
    actor_due: bool,
):
    """FACMAC's critic loss ``mean (Q_tot(o, u, s) - y)^2`` per team and, when ``actor_due``, its actor loss
    ``-mean Q_tot(s, mu(o)) + actor_reg mean(pi^2)`` (Peng et al. 2021, arXiv 2003.06709, Sec. 4.1-4.2, Eq. 5).

    ``mods``: module id -> :class:`~marl.algos.ddpg.DDPGModule`; ``mixers`` / ``targets``: team -> its mixer
    and target mixer (``None``: VDN's sum). ``batch``: as :func:`~marl.algos.ddpg.ddpg_losses` reads it
    (module -> ``{obs [B, N, D], actions, rewards [B, N], next_obs, avail, next_avail}``, ``JOINT -> {state,
    next_state [B, S], terminated [B]}``). The team reward is the mean or sum of its agents' rewards
    (``layout.team_reward``). Returns the total loss and ``{team: {critic_loss, actor_loss, q_mean,
    target_mean}}`` (tensors, detached).
    """
    j, mids = batch[JOINT], list(mods)
    obs = {m: batch[m]["obs"] for m in mids}
    acts = {m: action_input(mods[m], batch[m]["actions"]) for m in mids}
    with torch.no_grad():
        next_obs = {m: batch[m]["next_obs"] for m in mids}
        nxt = {m: target_action(mods[m], batch[m], cfg) for m in mids}
        seen_next = {m: mods[m].critic_obs(next_obs, target=True) for m in mids}
        q_next = {
            m: mods[m].critic_targets[0](critic_inputs("obs", seen_next[m], None, nxt, m)).squeeze(-1) for m in mids
        }
    seen = {m: mods[m].critic_obs(obs) for m in mids}  # each module's critic reads its own obs (through its encoder)
    q = {m: mods[m].critics[0](critic_inputs("obs", seen[m], None, acts, m)).squeeze(-1) for m in mids}
    with torch.set_grad_enabled(actor_due):  # off a delayed step the actor loss is a metric only
        own = {m: mods[m].mu(mods[m].actor, actor_obs(batch[m]), batch[m].get("avail")) for m in mids}
        own = {m: gumbel_softmax_st(a) if mods[m].discrete else a for m, a in own.items()}
        q_pi = {
            m: frozen(mods[m].critics[0], critic_inputs("obs", detached(seen[m]), None, acts, m, own[m])).squeeze(-1)
            for m in mids
        }
    term = (~j["terminated"].bool()).float()
    total: Any = 0.0
    metrics = {}
    for team, members in layout.teams.items():
        r = team_rewards(team_stack({m: batch[m]["rewards"] for m in mids}, members), layout.team_reward, -1)
        with torch.no_grad():
            y = r + cfg.gamma * term * mix(team_stack(q_next, members), j["next_state"], targets[team])
        q_tot = mix(team_stack(q, members), j["state"], mixers[team])
        critic_loss = ((q_tot - y) ** 2).mean()
        with torch.set_grad_enabled(actor_due):
            actor_loss = -mix(team_stack(q_pi, members), j["state"], mixers[team], freeze=True).mean()
        metrics[team] = {
            "critic_loss": critic_loss.detach(),
            "actor_loss": actor_loss.detach(),
            "q_mean": q_tot.detach().mean(),
            "target_mean": y.mean(),
        }
        total = total + critic_loss + (actor_loss if actor_due else 0.0)
    if actor_due and cfg.actor_reg > 0:
        total = total + cfg.actor_reg * action_penalty(mods, own)
    return total, metrics


class FACMACLearner(DDPGLearner):
    """One gradient step of :func:`facmac_losses`: the DDPG family's learner (one Adam per module, the actor's
    and the critics' gradients clipped each; a mixer module counts as critic) with FACMAC's losses."""

    def joint_losses(self, batch):
        layout = self.run.family
        mods = {m: self.module[m].unwrapped() for m in layout.modules}
        mixers: Dict[str, Optional[torch.nn.Module]] = {t: None for t in layout.teams}
        targets: Dict[str, Optional[torch.nn.Module]] = {t: None for t in layout.teams}
        for team in layout.teams:
            if f"mixer_{team}" in self.module.keys():
                mixer = self.module[f"mixer_{team}"].unwrapped()
                mixers[team], targets[team] = mixer.net, mixer.target
        return facmac_losses(mods, mixers, targets, batch, self.cfg, layout, self.actor_due)


class FACMAC(DDPG):
    """FACMAC on the DDPG family's off-policy core: the same actors, critics (``critic: obs``), replay,
    exploration and schedule, plus one learner-only mixer module per team (``mixer_<team>``; none for
    ``mixer: vdn``) and :func:`facmac_losses`."""

    learner_class = FACMACLearner
    config_class = FACMACConfig

    @classmethod
    def check_env(cls, cfg, info) -> None:
        """The DDPG family's checks, and a global state for the ``qmix`` mixers.

        Raises:
            MarlError: naming the env and the mixers that need no state.
        """
        super().check_env(cfg, info)
        c = config_view(cfg)
        if c.mixer != "vdn" and info.state_dim <= 0:
            raise MarlError(
                f"{c.algo}: mixer={c.mixer} mixes on the global state, but {info.family}:{info.scenario} has "
                f"state_dim=0; use mixer: vdn."
            )

    @classmethod
    def extra_module_specs(cls, cfg, mapping) -> Dict[str, RLModuleSpec]:
        """One learner-only mixer module per team, ``mixer_<team>`` (none for ``mixer: vdn``)."""
        c = config_view(cfg)
        if c.mixer == "vdn":
            return {}
        return mixer_specs(ValueDecomp.team_layout(mapping), mapping.info.state_dim, c, monotonic=c.mixer == "qmix")

    @classmethod
    def family_context(cls, cfg, env, mapping) -> FACMACLayout:
        base = super().family_context(cfg, env, mapping)
        return FACMACLayout(
            base.modules,
            base.shapes,
            base.state_dim,
            base.episode_limit,
            ValueDecomp.team_layout(mapping),
            team_reward_rule(env.info),
        )
