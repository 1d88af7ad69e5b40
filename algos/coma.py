"""COMA: counterfactual multi-agent policy gradients with a centralised Q critic.

Source: Foerster et al. 2018, "Counterfactual Multi-Agent Policy Gradients" (AAAI 2018, arXiv
1705.08926). Decentralised actors (PPO's actor, :class:`~marl.algos.ppo.PPOModule`) are trained with
the counterfactual advantage of eq. 4,

    ``A^a(s, u) = Q(s, u) - sum_{u'} pi^a(u'|tau^a) Q(s, (u^{-a}, u'))``,

from one critic pass that outputs ``Q(s, (u^{-a}, u'))`` for every action ``u'`` of agent ``a``
(section 4: the critic's input is the state, the other agents' actions and the agent's id). The
critic is fitted to TD(lambda) targets of a target network that is copied from it every
``target_update_interval`` updates (section 4 and appendix). EPyMARL's implementation
(Papoudakis et al. 2021, arXiv 2006.07869; https://github.com/uoe-agents/epymarl/blob/main/src/learners/coma_learner.py
and https://github.com/uoe-agents/epymarl/blob/main/src/modules/critics/coma.py) set the
defaults of ``configs/algos/coma.yaml``.

This file holds, top to bottom: the critic's inputs (:func:`coma_critic_inputs`), the math
(:func:`counterfactual_advantage`, :func:`td_lambda_targets`), the module (:class:`COMAModule`:
PPO's actor, a Q critic and its target), the loss (:func:`coma_loss_terms`) and the classes that
plug them into the on-policy core (:class:`COMALearner` overrides ``prepare`` and ``run_epochs``;
:class:`COMA` overrides ``sequences``).
"""

from __future__ import annotations

import copy
from typing import Any, Dict, List, Tuple

import gymnasium as gym
import torch
import torch.nn.functional as F
from ray.rllib.policy.sample_batch import MultiAgentBatch

from marl.algos.coma_config import COMAConfig
from marl.algos.ppo_config import network_model_config
from marl.algos.networks.registry import agent_model_config, check_agent
from marl.algos.policy_gradient import masked_mean
from marl.algos.ppo import PPO, PPOModule, masked_log_softmax
from marl.config import config_view
from marl.engine.on_policy import OnPolicyLearner, rollout_to_sequences
from marl.env import MarlError, map_obs


# ============================================================ critic inputs
def coma_critic_inputs(
    state: torch.Tensor, actions: Dict[str, torch.Tensor], n_actions: Dict[str, int]
) -> Dict[str, torch.Tensor]:
    """The COMA critic's input of every agent of every module (Foerster et al. 2018, section 4).

    Args:
        state: ``[T, B, S]`` global state of the steps that have actions.
        actions: module id -> ``[T, B, N_m]`` int actions; the joint action is their one-hots
            concatenated in this order (module by module, agents in module order).
        n_actions: module id -> its agents' number of actions ``A_m``.
    Returns:
        module id -> ``[T, B, N_m, S + J + N]`` float32: the state, the joint one-hot action
        (``J = sum_m N_m A_m``) with the agent's own block zeroed, and the agent's one-hot index
        among all ``N = sum_m N_m`` agents (as EPyMARL's ``COMACritic._build_inputs``).
    """
    onehots = {m: F.one_hot(a.long(), n_actions[m]).float() for m, a in actions.items()}  # [T, B, N_m, A_m]
    joint = torch.cat([oh.flatten(-2) for oh in onehots.values()], -1)  # [T, B, J]
    n_total = sum(oh.shape[-2] for oh in onehots.values())
    out, col, row = {}, 0, 0
    for mid, oh in onehots.items():
        n, a = oh.shape[-2:]
        keep = torch.ones(n, joint.shape[-1])
        for i in range(n):  # the agent's own action is what the critic's output ranges over
            keep[i, col + i * a : col + (i + 1) * a] = 0
        lead = (*joint.shape[:-1], n)
        ids = torch.eye(n_total)[row : row + n].expand(*lead, n_total)
        s = state.unsqueeze(-2).expand(*lead, state.shape[-1])
        out[mid] = torch.cat([s, joint.unsqueeze(-2) * keep, ids], -1)
        col, row = col + n * a, row + n
    return out


def coma_critic_dim(mapping: Any) -> int:
    """Width of :func:`coma_critic_inputs`: state + joint one-hot action + agent index."""
    mids = list(mapping.modules)
    joint = sum(mapping.n_agents(m) * mapping.group_info(m).n_actions for m in mids)
    return mapping.info.state_dim + joint + sum(mapping.n_agents(m) for m in mids)


# ============================================================ math
def counterfactual_advantage(q: torch.Tensor, pi: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
    """COMA's counterfactual advantage (Foerster et al. 2018, eq. 4).

    Args:
        q: ``[..., A]`` ``Q(s, (u^{-a}, u'))`` for every action ``u'`` of the agent.
        pi: ``[..., A]`` the agent's policy ``pi^a(u'|tau^a)``.
        actions: ``[...]`` int, the agent's action ``u^a``.
    Returns:
        ``[...]``: ``Q(s, u) - sum_{u'} pi^a(u') Q(s, (u^{-a}, u'))``.
    """
    q_taken = q.gather(-1, actions.long().unsqueeze(-1)).squeeze(-1)
    return q_taken - (pi * q).sum(-1)


def td_lambda_targets(
    rewards: torch.Tensor, q: torch.Tensor, terminated: torch.Tensor, cut: torch.Tensor, gamma: float, lam: float
) -> torch.Tensor:
    """TD(lambda) targets of a Q critic (Sutton and Barto 2018, eq. 12.18; COMA section 4), time last.

    ``G_t = r_t + gamma ((1 - lam) q_{t+1} + lam G_{t+1})``, with ``G_t = r_t`` where the episode
    terminated at ``t``, and ``G_t = q_t`` where the next step's Q is not in the rollout (``cut``: a
    time limit, or the rollout's last step): ``q_{t+1}`` needs the action taken at ``t+1``, so such
    a step gives its target to the steps before it and none to itself (its critic loss is masked).
    Past the last step ``q`` and ``G`` count as 0.

    Args:
        rewards, q: ``[..., T]``; ``q`` the target network's Q of the actions taken.
        terminated, cut: ``[..., T]`` bool (``cut`` is never set where ``terminated`` is).
        gamma, lam: discount and lambda.
    Returns:
        ``[..., T]`` targets.
    """
    out = torch.empty_like(q)
    q_next = torch.cat([q[..., 1:], torch.zeros_like(q[..., :1])], -1)
    nxt = torch.zeros_like(q[..., 0])
    for t in range(q.shape[-1] - 1, -1, -1):
        boot = rewards[..., t] + gamma * ((1 - lam) * q_next[..., t] + lam * nxt)
        g = torch.where(terminated[..., t], rewards[..., t], torch.where(cut[..., t], q[..., t], boot))
        out[..., t] = nxt = g
    return out


# ============================================================ RL module
class COMAModule(PPOModule):
    """PPO's decentralised actor (categorical head, MLP or GRU) with COMA's critic: an MLP on
    :func:`coma_critic_inputs` with one output per action of the agent (``critic_heads = A``), and
    its target network. The critic, its target and the count of updates (``critic_updates``, a
    buffer, saved in checkpoints) exist only on learners."""

    def setup(self):
        super().setup()
        if not self.inference_only:
            self.target_critic = copy.deepcopy(self.critic).requires_grad_(False)
            self.register_buffer("critic_updates", torch.zeros((), dtype=torch.int64))

    def get_non_inference_attributes(self):
        return [*super().get_non_inference_attributes(), "target_critic", "critic_updates"]

    def _forward_train(self, batch: Dict[str, torch.Tensor], **kwargs) -> Dict[str, torch.Tensor]:
        """``dist_in [M', A]`` of the actor and ``q [M', A]`` of the critic (``M'`` steps: ``M`` for
        MLPs, ``M*L`` for GRU chunks of ``L`` steps; ``critic_in [M(, L), C]``)."""
        dist_in = self._actor_train(batch)
        return {"dist_in": dist_in, "q": self.critic(batch["critic_in"]).reshape(dist_in.shape)}

    def policy(self, b: Dict[str, Any], avail: Any) -> torch.Tensor:
        """``pi^a(.|tau^a)`` ``[R, T, A]`` on sequences ``obs [R, T, ...]`` (GRU: from ``h [R, T, H]``'s
        first step, resetting at ``starts [R, T]``), unavailable actions at probability 0."""
        R, T = b["actions"].shape[:2]
        obs = map_obs(lambda x: x[:, :T], b["obs"])
        if self.recurrent:
            starts = b["starts"].clone()
            starts[:, 0] = False  # h[:, 0] already is the state at the first step
            dist_in = self._actor_train({"obs": obs, "h0": b["h"][:, 0], "starts": starts})
        else:
            dist_in = self._actor_train({"obs": map_obs(lambda x: x.reshape(R * T, *x.shape[2:]), obs)})
        av = None if avail is None else avail.reshape(R * T, -1)
        return masked_log_softmax(dist_in, av).exp().reshape(R, T, -1)


# ============================================================ loss
def coma_loss_terms(
    module: COMAModule,
    fwd_out: Dict[str, torch.Tensor],
    rows: Dict[str, torch.Tensor],
    entropy_coef: float,
    value_loss_coef: float,
) -> Tuple[torch.Tensor, Dict[str, torch.Tensor]]:
    """``L = -mean(A log pi(u^a|tau^a)) - c_H H + c_V mean((Q(s, u) - G)^2)`` over active rows
    (Foerster et al. 2018, eq. 4 and section 4; EPyMARL's ``COMALearner``: entropy bonus, squared TD error).

    ``fwd_out``: ``dist_in [M, A]``, ``q [M, A]``; ``rows``: ``actions``, ``avail``, ``advantages``,
    ``returns`` (TD(lambda) targets), ``active`` and ``critic_active`` (steps with a target), all ``[M]``.
    """
    logp, ent = module.log_prob_entropy(fwd_out["dist_in"], rows["actions"], rows.get("avail"))
    q_taken = fwd_out["q"].gather(-1, rows["actions"].long().unsqueeze(-1)).squeeze(-1)
    active = rows["active"]
    parts = {
        "policy_loss": -masked_mean(logp * rows["advantages"], active),
        "value_loss": masked_mean((q_taken - rows["returns"]) ** 2, active & rows["critic_active"]),
        "entropy": masked_mean(ent, active),
    }
    return parts["policy_loss"] - entropy_coef * parts["entropy"] + value_loss_coef * parts["value_loss"], parts


# ============================================================ learner and algorithm
class COMALearner(OnPolicyLearner):
    """COMA's learner on the on-policy core: :meth:`prepare` computes the critic's TD(lambda) targets
    and the counterfactual advantages once per rollout (with the critic and policy before the update,
    as EPyMARL does), :meth:`run_epochs` adds the target network's hard copy."""

    loss_terms = staticmethod(coma_loss_terms)

    def loss_params(self) -> Tuple[Any, ...]:
        return self.cfg.entropy_coef, self.cfg.value_loss_coef

    def value_normalizer(self, module: Any) -> None:
        return None  # Q targets stay in raw units

    @torch.no_grad()
    def prepare(self, mid: str, b: Dict[str, torch.Tensor]) -> Dict[str, torch.Tensor]:
        """Training columns ``[R, T, ...]`` of one module's sequences: ``advantages`` (eq. 4),
        ``returns`` (:func:`td_lambda_targets` of the target critic), ``critic_active``; logs
        ``q_taken_mean`` and ``advantage_mean``."""
        module: Any = self.module[mid].unwrapped()
        actions, term, active = b["actions"], b["terminated"], b["alive"]
        last = torch.zeros_like(term)
        last[:, -1] = True
        cut = ~term & (b["truncated"] | last)
        q = module.critic(b["critic_in"])  # [R, T, A]
        q_target = module.target_critic(b["critic_in"]).gather(-1, actions.long().unsqueeze(-1)).squeeze(-1)
        returns = td_lambda_targets(b["rewards"], q_target, term, cut, self.cfg.gamma, self.cfg.td_lambda)
        adv = counterfactual_advantage(q, module.policy(b, b.get("avail")), actions)
        q_taken = q.gather(-1, actions.long().unsqueeze(-1)).squeeze(-1)
        self.metrics.log_value((mid, "q_taken_mean"), float(masked_mean(q_taken, active)), window=1)
        self.metrics.log_value((mid, "advantage_mean"), float(masked_mean(adv, active)), window=1)
        out = {
            "obs": map_obs(lambda x: x[:, : actions.shape[1]], b["obs"]),
            "critic_in": b["critic_in"],
            "actions": actions,
            "advantages": adv,
            "returns": returns,
            "active": active,
            "critic_active": ~cut,
        }
        return {**out, **{k: b[k] for k in ("avail", "h", "starts") if k in b}}

    def run_epochs(self, data: Dict[str, Dict[str, torch.Tensor]]) -> None:
        """The core's epochs, then one more update on each module's count: its critic is copied
        into the target every ``target_update_interval`` updates (EPyMARL ``target_update_interval_or_tau``)."""
        super().run_epochs(data)
        with torch.no_grad():
            for mid in data:
                module: Any = self.module[mid].unwrapped()
                module.critic_updates += 1
                if int(module.critic_updates) % self.cfg.target_update_interval == 0:
                    module.target_critic.load_state_dict(module.critic.state_dict())


class COMA(PPO):
    """COMA on the on-policy core: PPO's training step and actor with :class:`COMAModule` and
    :class:`COMALearner`; the learners' batch carries the COMA critic's inputs (:meth:`sequences`)."""

    learner_class = COMALearner
    module_class = COMAModule
    config_class = COMAConfig

    def sequences(self, rollout: Dict[str, Any]) -> MultiAgentBatch:
        """:func:`~marl.engine.on_policy.rollout_to_sequences` rows (one per env copy and agent) whose
        ``critic_in`` ``[B*N, T, C]`` is :func:`coma_critic_inputs` of the steps with actions."""
        batch = rollout_to_sequences(rollout, "state")
        modules = rollout["modules"]
        n_actions = {m: int(self.run.module_spaces[m].action_space.n) for m in modules}
        inputs = coma_critic_inputs(rollout["state"][:-1], {m: v["actions"] for m, v in modules.items()}, n_actions)
        for mid, x in inputs.items():
            rows = batch.policy_batches[mid]
            rows["critic_in"] = x.movedim(0, 2).reshape(-1, x.shape[0], x.shape[-1]).contiguous().numpy()
            del rows["final_critic_in"]
        return batch

    @classmethod
    def module_config(cls, cfg: COMAConfig, mapping, mid: str) -> Dict[str, Any]:
        g = mapping.group_info(mid)
        return {
            "obs_dim": mapping.obs_dim(mid),
            "critic_dim": coma_critic_dim(mapping),
            "critic_heads": g.n_actions,
            "n_actions": g.n_actions,
            "discrete": True,
            **network_model_config(cfg),
            **agent_model_config(cfg, mapping, mid),
        }

    @classmethod
    def check_env(cls, cfg, info) -> None:
        """COMA's critic outputs one Q value per action: ``Discrete`` actions only (Foerster et al. 2018, section 4).

        Raises:
            MarlError: a group's action space is not ``Discrete`` (named, with the supported one).
        """
        cfg = config_view(cfg)
        bad: List[str] = [g.name for g in info.groups.values() if not isinstance(g.action_space, gym.spaces.Discrete)]
        if bad:
            g = info.groups[bad[0]]
            raise MarlError(
                f"{cfg.algo} cannot handle the action space {g.action_space} of group '{g.name}' "
                f"({info.family}:{info.scenario}); supported: Discrete (COMA's critic has one output per action)."
            )
        check_agent(cfg, info, family="ppo")
