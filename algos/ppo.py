"""IPPO and MAPPO: multi-agent PPO with decentralised actors.

Sources: Schulman et al. 2017 (PPO clip, arXiv 1707.06347); Schulman et al.
2016 (GAE, arXiv 1506.02438); Yu et al. 2022, "The Surprising Effectiveness of
PPO in Cooperative Multi-Agent Games" (MAPPO, arXiv 2103.01955) and its
official code (value normalisation, Huber value loss, value clipping, death
masking, advantage normalisation over active agents). IPPO (de Witt et al.
2020, arXiv 2011.09533) is the same learner with the critic on the agent's
own observation.

This file holds, top to bottom, the family's networks
(:class:`PPOModule`: actor and critic), its minibatch loss (:func:`ppo_loss_terms`, on the clipped
losses of :mod:`marl.algos.policy_gradient`) and the classes that plug them into the on-policy core
(:class:`PPOLearner`, :class:`PPO`). The core, :mod:`marl.engine.on_policy`, turns rollouts into
sequences, computes values, GAE and returns, cuts minibatches and runs the epochs; the engine in
``marl.engine`` samples, syncs weights, checkpoints and logs.
"""

from __future__ import annotations

from typing import Any, Dict, Optional, Tuple

import gymnasium as gym
import torch
from torch import nn

from ray.rllib.core.rl_module.apis import InferenceOnlyAPI
from ray.rllib.core.rl_module.torch import TorchRLModule

from marl.algos.networks.encoders import Encoded, ObsEncoder, leading, rows_of
from marl.algos.networks.mlp import MLP
from marl.algos.networks.registry import agent_model_config, build_agent_net, check_agent
from marl.algos.policy_gradient import ValueNorm, ppo_losses
from marl.algos.ppo_config import CRITICS, PPOConfig, network_model_config  # noqa: F401  (CRITICS importable from here too)
from marl.config import config_view
from marl.engine.on_policy import OnPolicyLearner, OnPolicyTrainer, critic_model_config
from marl.env import MarlError, map_obs

NEG_INF = -1e10  # logit of an unavailable action (finite so log-probs never become NaN)


def critic_kind(cfg: PPOConfig) -> str:
    """The critic ``cfg`` trains: its ``critic`` key with ``auto`` resolved when the config was built."""
    return cfg.critic_kind


# ============================================================ RL module
def masked_log_softmax(logits: torch.Tensor, avail: Optional[torch.Tensor]) -> torch.Tensor:
    """``log softmax`` of ``logits [M, A]`` with unavailable actions (``avail [M, A]``, 0/False) at
    logit ``NEG_INF``: the log-probabilities of ``torch.distributions.Categorical(logits=...)``
    in one op (the distribution object normalises, then builds probabilities, on every use)."""
    if avail is not None:
        logits = logits.masked_fill(~avail.bool(), NEG_INF)
    return torch.log_softmax(logits, -1)


class PPOModule(TorchRLModule, InferenceOnlyAPI):
    """Actor with a categorical or diagonal-Gaussian head, plus critic.

    ``model_config`` keys: ``obs_dim``, ``critic_dim``, ``n_actions``,
    ``discrete``, ``action_low``/``action_high`` (continuous), ``hidden``,
    ``layers``, ``activation``, ``layer_norm``, ``recurrent``, ``policy_gain``,
    ``log_std_init``, and ``agent``: the actor's registered name
    (:func:`marl.algos.networks.registry.build_agent_net`; ``mlp`` is MAPPO's
    :class:`~marl.algos.networks.mlp.MAPPOActor`, an MLP or GRU trunk and a
    linear head), whose outputs are the logits or the Gaussian mean. The critic
    (an MLP on the critic input: global state plus agent one-hot for MAPPO, the
    agent's observation for IPPO) and its :class:`ValueNorm` exist only on
    learners (``inference_only=False``). Structured observations (``obs_space``, a ``Dict``): the
    actor reads them through per-key encoders (:mod:`marl.algos.networks.encoders`, layers
    ``encoder``), and so does an observation critic (``critic_space``).
    """

    def setup(self):
        c = self.model_config
        self.discrete = bool(c["discrete"])
        hidden, act, ln = int(c["hidden"]), c.get("activation", "relu"), bool(c.get("layer_norm", True))
        init = c.get("init", "orthogonal")
        self.actor = build_agent_net(c.get("agent", "mlp"), c, int(c["n_actions"]), "ppo")
        self.recurrent = self.actor.state_size > 0
        if not self.discrete:
            self.log_std = nn.Parameter(torch.full((c["n_actions"],), float(c.get("log_std_init", -0.5))))
        self.team = bool(c.get("team_critic", False))
        if not self.inference_only:
            space, heads = c.get("critic_space"), int(c.get("critic_heads", 1))
            if space is None:
                self.critic = MLP(c["critic_dim"], heads, hidden, int(c["layers"]), act, ln, init=init)
            else:  # IPPO's critic on a structured observation
                enc = ObsEncoder(space, c.get("encoder"))
                self.critic = Encoded(enc, MLP(enc.out_dim, heads, hidden, int(c["layers"]), act, ln, init=init))
            self.value_norm = ValueNorm()

    def _load_from_state_dict(self, state_dict, prefix, *args, **kwargs):
        # checkpoints from before the actor protocol kept MAPPO's trunk and head on the module itself
        for old in [k for k in state_dict if k.startswith((prefix + "trunk.", prefix + "head."))]:
            state_dict[prefix + "actor." + old[len(prefix) :]] = state_dict.pop(old)
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)

    # --- InferenceOnlyAPI: what env runners do not need
    def get_non_inference_attributes(self):
        return ["critic", "value_norm"]

    # --- acting (env runners, greedy policies)
    def initial_state(self, batch_shape) -> Optional[torch.Tensor]:
        return self.actor.initial_state(batch_shape)

    @property
    def state_size(self) -> int:
        return self.actor.state_size

    def _actor_train(self, batch: Dict[str, torch.Tensor]) -> torch.Tensor:
        """Distribution inputs ``[M', A]`` of a minibatch (see :meth:`_forward_train`)."""
        obs = batch["obs"]
        if self.team:  # [M, N, D]: all agents of M env steps
            obs = rows_of(obs)
        if not self.recurrent:
            obs = map_obs(lambda x: x.unsqueeze(1), obs)
        out = self.actor.unroll(obs, batch.get("h0"), batch.get("starts"))
        return out.reshape(-1, out.shape[-1])

    @torch.no_grad()
    def act(
        self,
        obs: torch.Tensor,
        avail: Optional[torch.Tensor],
        h: Optional[torch.Tensor],
        explore: bool = True,
        **unused,
    ) -> Tuple[torch.Tensor, torch.Tensor, Optional[torch.Tensor]]:
        """Sample (``explore``) or pick the greedy action for ``[B, N, D]`` observations.

        Returns ``actions`` (``[B, N]`` int64 or ``[B, N, A]`` float32),
        ``logp`` ``[B, N]`` and the next hidden state ``[B, N, H]`` (``None`` for MLPs).
        """
        B, N = leading(obs)
        out, h = self.actor.step(rows_of(obs), None if h is None else h.reshape(B * N, -1))
        if self.discrete:
            logp_all = masked_log_softmax(out, None if avail is None else avail.reshape(B * N, -1))
            # the draw torch.distributions.Categorical.sample makes (same generator calls, same actions)
            a = torch.multinomial(logp_all.exp(), 1, True).squeeze(-1) if explore else logp_all.argmax(-1)
            logp = logp_all.gather(-1, a.unsqueeze(-1)).squeeze(-1)
            a = a.reshape(B, N)
        else:
            dist = self._gaussian(out)
            a = dist.sample() if explore else out
            logp = dist.log_prob(a).sum(-1)
            a = a.reshape(B, N, -1)
        return a, logp.reshape(B, N), None if h is None else h.reshape(B, N, -1)

    def _gaussian(self, mean):
        return torch.distributions.Normal(mean, self.log_std.exp().expand_as(mean))

    def _forward(self, batch, **kwargs):  # RLlib's generic inference path (not used by our runner)
        a, logp, _ = self.act(map_obs(lambda x: x.unsqueeze(1), batch["obs"]), None, None, explore=False)
        return {"actions": a.squeeze(1)}

    # --- training (learners; goes through DDP when num_learners > 1)
    def _forward_train(self, batch: Dict[str, torch.Tensor], **kwargs) -> Dict[str, torch.Tensor]:
        """Policy outputs and normalised values for a minibatch.

        MLP: ``obs [M, D]``, ``critic_in [M, C]``. GRU: ``obs [M, L, D]``,
        ``h0 [M, H]``, ``starts [M, L]`` bool; outputs are flattened to ``M*L`` rows.
        Team critic: ``obs [M, N, D]``, ``critic_in [M, S]`` (one row per env step), outputs
        flattened to ``M*N`` rows. Returns ``dist_in`` ``[M', A]`` and ``values`` ``[M']``
        (normalised units).
        """
        dist_in = self._actor_train(batch)
        if self.team:
            return {"dist_in": dist_in, "values": self.critic(batch["critic_in"]).reshape(-1)}
        critic_in = batch["critic_in"]
        if isinstance(critic_in, dict):  # a structured observation critic: the encoder takes any leading dims
            return {"dist_in": dist_in, "values": self.critic(critic_in).reshape(-1)}
        return {"dist_in": dist_in, "values": self.critic(critic_in.reshape(dist_in.shape[0], -1)).squeeze(-1)}

    def log_prob_entropy(self, dist_in, actions, avail):
        """``log pi(a|o)`` and entropy per row: both ``[M]``."""
        if self.discrete:
            logp_all = masked_log_softmax(dist_in, avail)
            entropy = -(logp_all.exp() * logp_all).sum(-1)  # unavailable actions: exp(-1e10) = 0 exactly
            return logp_all.gather(-1, actions.long().unsqueeze(-1)).squeeze(-1), entropy
        dist = self._gaussian(dist_in)
        return dist.log_prob(actions).sum(-1), dist.entropy().sum(-1)

    def values(self, critic_in: torch.Tensor) -> torch.Tensor:
        """Normalised values ``[...]`` for critic inputs ``[..., C]`` (team critic: ``[..., N]``, one per agent)."""
        out = self.critic(critic_in)
        return out if self.team else out.squeeze(-1)


# ============================================================ loss
def ppo_loss_terms(
    module: PPOModule,
    fwd_out: Dict[str, torch.Tensor],
    rows: Dict[str, torch.Tensor],
    value_norm: bool,
    clip: float,
    value_clip: float,
    huber_delta: float,
    entropy_coef: float,
    value_loss_coef: float,
) -> Tuple[torch.Tensor, Dict[str, torch.Tensor]]:
    """MAPPO's minibatch loss ``L = L_clip - c_H H + c_V L_V`` (Yu et al. 2022, arXiv 2103.01955) and its parts
    (:func:`~marl.algos.policy_gradient.ppo_losses`), tensor math only so that ``torch_compile`` can compile it.

    ``fwd_out``: ``dist_in [M, A]`` and ``values [M]`` (normalised units) from :meth:`PPOModule._forward_train`;
    ``rows``: the minibatch's ``actions``, ``avail``, ``logp_old``, ``advantages``, ``values_old``, ``returns``
    (raw units) and ``active``, all ``[M]`` rows (``avail [M, A]``).
    """
    logp, ent = module.log_prob_entropy(fwd_out["dist_in"], rows["actions"], rows.get("avail"))
    returns = rows["returns"]
    targets = module.value_norm.normalize(returns) if value_norm else returns
    parts = ppo_losses(
        logp,
        rows["logp_old"],
        rows["advantages"],
        ent,
        fwd_out["values"],
        rows["values_old"],
        targets,
        rows["active"],
        clip,
        value_clip,
        huber_delta,
    )
    return parts["policy_loss"] - entropy_coef * parts["entropy"] + value_loss_coef * parts["value_loss"], parts


def structured_critic(cfg: PPOConfig, mapping, mid: str) -> Dict[str, Any]:
    """``critic_space`` (the module's ``Dict`` observation space) and ``encoder`` for an observation critic
    (IPPO) of a module with structured observations; nothing otherwise (state critics read the state vector)."""
    if cfg.critic_kind != "obs" or not mapping.structured(mid):
        return {}
    return {"critic_space": mapping.obs_space(mid), "encoder": dict(cfg.encoder or {})}


# ============================================================ learner and algorithm
class PPOLearner(OnPolicyLearner):
    """IPPO/MAPPO learner: the on-policy core's update (GAE, epochs x minibatches,
    :class:`~marl.engine.on_policy.OnPolicyLearner`) with :func:`ppo_loss_terms` on each minibatch."""

    loss_terms = staticmethod(ppo_loss_terms)

    def loss_params(self) -> Tuple[Any, ...]:
        c = self.cfg
        return c.value_norm, c.clip, c.value_clip, c.huber_delta, c.entropy_coef, c.value_loss_coef


class PPO(OnPolicyTrainer):
    """IPPO / MAPPO: the on-policy core's training step (:class:`~marl.engine.on_policy.OnPolicyTrainer`)
    with :class:`PPOModule` and :class:`PPOLearner`."""

    learner_class = PPOLearner
    module_class = PPOModule
    config_class = PPOConfig

    @classmethod
    def module_config(cls, cfg: PPOConfig, mapping, mid: str) -> Dict[str, Any]:
        g = mapping.group_info(mid)
        return {
            "obs_dim": mapping.obs_dim(mid),
            **critic_model_config(cfg.critic_kind, mapping, mid),
            "n_actions": g.n_actions,
            "discrete": g.discrete,
            **network_model_config(cfg),
            "log_std_init": cfg.log_std_init,
            **agent_model_config(cfg, mapping, mid),
            **structured_critic(cfg, mapping, mid),
        }

    @classmethod
    def check_env(cls, cfg, info) -> None:
        """PPO handles ``Discrete`` and 1-D ``Box`` actions; anything else is rejected before Ray starts.

        Raises:
            MarlError: a group's action space is of another type (named, with the supported ones).
        """
        cfg = config_view(cfg)
        for g in info.groups.values():
            ok = isinstance(g.action_space, gym.spaces.Discrete) or (
                isinstance(g.action_space, gym.spaces.Box) and len(g.action_space.shape) == 1
            )
            if not ok:
                raise MarlError(
                    f"{cfg.algo} cannot handle the action space {g.action_space} of group '{g.name}' "
                    f"({info.family}:{info.scenario}); supported: Discrete, 1-D Box."
                )
        check_agent(cfg, info, family="ppo")
