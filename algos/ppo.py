"""IPPO and MAPPO: multi-agent PPO with decentralised actors.

Sources: Schulman et al. 2017 (PPO clip, arXiv 1707.06347); Schulman et al.
2016 (GAE, arXiv 1506.02438); Yu et al. 2022, "The Surprising Effectiveness of
PPO in Cooperative Multi-Agent Games" (MAPPO, arXiv 2103.01955) and its
official code (value normalisation, Huber value loss, value clipping, death
masking, advantage normalisation over active agents). IPPO (de Witt et al.
2020, arXiv 2011.09533) is the same learner with the critic on the agent's
own observation.

This file holds the family's config (:class:`PPOConfig`), RLModule
(:class:`PPOModule`), Learner (:class:`PPOLearner`) and training step
(:class:`PPO`); the losses and advantages are in :mod:`marl.algos.policy_gradient`;
the engine in ``marl.engine`` provides sampling, weight sync, checkpoints and logging.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, Optional, Tuple

import gymnasium as gym
import torch
from torch import nn

from ray.rllib.core.rl_module.apis import InferenceOnlyAPI
from ray.rllib.core.rl_module.torch import TorchRLModule
from ray.rllib.policy.sample_batch import MultiAgentBatch, SampleBatch

from marl.algos.networks.config import AgentNetConfig
from marl.algos.networks.mlp import ACTIVATIONS, MLP
from marl.algos.networks.registry import agent_model_config, build_agent_net, check_agent
from marl.algos.policy_gradient import (
    ValueNorm, explained_variance, gae, next_values, normalize_advantages, ppo_losses,
)
from marl.config import EngineConfig, config_view, key
from marl.engine.context import RunAccess
from marl.engine.rllib_seam import SeamLearner
from marl.engine.trainer import StepOutput, Trainer
from marl.errors import TrainingDiverged
from marl.env import MarlError

CRITICS = ("state", "team", "obs", "auto")  # PPOConfig.critic
NEG_INF = -1e10  # logit of an unavailable action (finite so log-probs never become NaN)


# ============================================================ configuration
@dataclass(frozen=True, kw_only=True)
class PPOConfig(AgentNetConfig, EngineConfig):
    """IPPO / MAPPO keys (``docs/algorithms/ppo.md``); values in ``configs/algos/mappo.yaml``, which
    ``ippo.yaml`` starts from (``base: mappo``)."""

    LAYER = "PPO"

    critic: str = key("value function: global state + agent id, one row per agent (state); global state once per "
                      "env step with one value head per agent (team, MLP actors); own observation (obs, IPPO); "
                      "team for MLP actors and state for GRU actors (auto)", choices=CRITICS)
    gamma: float = key("discount factor", gt=0, le=1)
    gae_lambda: float = key("GAE lambda", ge=0, le=1)
    clip: float = key("PPO clip epsilon of the policy ratio", gt=0)
    value_clip: float = key("clip of the value change around the old value; 0 = no value clipping", ge=0)
    huber_delta: float = key("Huber loss delta of the value loss; 0 = squared error", ge=0)
    entropy_coef: float = key("weight of the entropy bonus", ge=0)
    value_loss_coef: float = key("weight of the value loss", ge=0)
    adam_eps: float = key("Adam epsilon", gt=0)
    epochs: int = key("passes over each rollout", ge=1)
    num_minibatches: int = key("minibatches per pass (split along the env copies)", ge=1)
    value_norm: bool = key("normalise value targets with running statistics (ValueNorm)")
    advantage_norm: bool = key("normalise advantages over the active agents of the batch")
    hidden: int = key("width of the hidden layers (and of the GRU)", ge=1)
    layers: int = key("hidden layers of the actor and critic MLPs", ge=1)
    activation: str = key("activation of the hidden layers", choices=tuple(ACTIVATIONS))
    layer_norm: bool = key("LayerNorm on the network inputs")
    policy_gain: float = key("orthogonal-init gain of the policy output layer", gt=0)
    log_std_init: float = key("continuous actions: initial log standard deviation")
    recurrent: bool = key("GRU actor and critic instead of MLPs")
    chunk_length: int = key("recurrent training: sequence chunk length in steps", ge=1)
    torch_compile: bool = key("compile the learner's training forward and minibatch loss with torch.compile "
                              "(inductor); the first update pays the compile, about 20 s on a 2-core CPU (docs/engine.md)")


# ============================================================ RL module
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
    learners (``inference_only=False``).
    """

    def setup(self):
        c = self.model_config
        self.discrete = bool(c["discrete"])
        hidden, act, ln = int(c["hidden"]), c.get("activation", "relu"), bool(c.get("layer_norm", True))
        self.actor = build_agent_net(c.get("agent", "mlp"), c, int(c["n_actions"]), "ppo")
        self.recurrent = self.actor.state_size > 0
        if not self.discrete:
            self.log_std = nn.Parameter(torch.full((c["n_actions"],), float(c.get("log_std_init", -0.5))))
        self.team = bool(c.get("team_critic", False))
        if not self.inference_only:
            self.critic = MLP(c["critic_dim"], int(c.get("critic_heads", 1)), hidden, int(c["layers"]), act, ln)
            self.value_norm = ValueNorm()

    def _load_from_state_dict(self, state_dict, prefix, *args, **kwargs):
        # checkpoints from before the actor protocol kept MAPPO's trunk and head on the module itself
        for old in [k for k in state_dict if k.startswith((prefix + "trunk.", prefix + "head."))]:
            state_dict[prefix + "actor." + old[len(prefix):]] = state_dict.pop(old)
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
            obs = obs.reshape(-1, obs.shape[-1])
        out = self.actor.unroll(obs if self.recurrent else obs.unsqueeze(1), batch.get("h0"), batch.get("starts"))
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
        B, N = obs.shape[:2]
        out, h = self.actor.step(obs.reshape(B * N, -1), None if h is None else h.reshape(B * N, -1))
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
        a, logp, _ = self.act(batch["obs"].unsqueeze(1), None, None, explore=False)
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
        critic_in = batch["critic_in"].reshape(dist_in.shape[0], -1)
        return {"dist_in": dist_in, "values": self.critic(critic_in).squeeze(-1)}

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


# ============================================================ learner
class PPOLearner(RunAccess, SeamLearner):
    """Learner for IPPO/MAPPO: advantages, then epochs x minibatches of PPO steps.

    Input (one ``MultiAgentBatch``, sharded across learners by rows): per module,
    rows are (env copy, agent) sequences of the rollout, ``[R, T(+1), ...]``
    (see :func:`rollout_to_sequences`). :meth:`update` computes values with
    the current critic, GAE on denormalised values and the normalised
    advantages, then runs ``epochs`` passes of ``num_minibatches`` gradient
    steps each (every learner takes the same number of steps, as DDP requires).
    """

    def build(self) -> None:
        super().build()
        self._loss_terms = ppo_loss_terms
        if self.cfg.torch_compile:  # forward and loss as two graphs: as fast as one, and ValueNorm stays eager
            for mid in self.module.keys():
                module = self.module[mid].unwrapped()
                module._forward_train = torch.compile(module._forward_train, dynamic=False)
            self._loss_terms = torch.compile(ppo_loss_terms, dynamic=False)

    def configure_optimizers_for_module(self, module_id, config=None):
        # Adam eps 1e-5 as in the MAPPO code (RLlib's default is 1e-8); PyTorch's fused kernel: one call per
        # step instead of a Python loop over the parameters (7x faster on the 2-core CPU, same update to ~1e-7)
        module = self.module_for_optimizer(module_id)
        params = self.get_parameters(module)
        opt = torch.optim.Adam(params, eps=self.cfg.adam_eps, fused=True)
        self.register_optimizer(module_id=module_id, optimizer=opt, params=params, lr_or_lr_schedule=config.lr)

    # ---------------------------------------------------------------- data prep
    @torch.no_grad()
    def _prepare(self, mid: str, b: Dict[str, torch.Tensor]) -> Dict[str, torch.Tensor]:
        """Values, GAE, returns and normalised advantages for one module's rows ``[R, T]``."""
        cfg = self.cfg
        module = self.module[mid].unwrapped()
        if module.team:
            return self._prepare_team(mid, module, b)
        vn = module.value_norm if cfg.value_norm else None
        v_norm = module.values(b["critic_in"])  # [R, T+1] normalised
        term, trunc = b["terminated"], b["truncated"]
        v_final = final_values(module, b["final_critic_in"], trunc, v_norm[:, :-1])  # [R, T]
        denorm = vn.denormalize if vn is not None else (lambda x: x)
        v, vf = denorm(v_norm), denorm(v_final)
        next_v = next_values(v, vf, term, trunc)
        adv = gae(b["rewards"], v[:, :-1], next_v, term | trunc, cfg.gamma, cfg.gae_lambda)
        returns = adv + v[:, :-1]
        active = b["alive"]
        if cfg.advantage_norm:
            adv = normalize_advantages(adv, active)
        out = {
            "obs": b["obs"][:, :-1],
            "critic_in": b["critic_in"][:, :-1],
            "actions": b["actions"],
            "logp_old": b["logp"],
            "advantages": adv,
            "returns": returns,
            "values_old": v_norm[:, :-1],
            "active": active,
        }
        if "avail" in b:
            out["avail"] = b["avail"]
        if module.recurrent:
            out["h"] = b["h"]
            out["starts"] = b["starts"]
        self.metrics.log_value((mid, "explained_variance"), explained_variance(v[:, :-1], returns, active), window=1)
        self.metrics.log_value((mid, "value_mean"), float(v[:, :-1][active].mean()) if active.any() else 0.0, window=1)
        return out

    @torch.no_grad()
    def _prepare_team(self, mid: str, module: "PPOModule", b: Dict[str, torch.Tensor]) -> Dict[str, torch.Tensor]:
        """:meth:`_prepare` for the team critic: per-agent columns ``[B, N, T(+1), ...]``, critic
        columns ``[B, T(+1), S]`` (one row per env copy, see :func:`rollout_to_sequences`). Returns
        minibatch rows of one env step each: ``[B*T, N, ...]``, ``critic_in [B*T, S]``."""
        cfg = self.cfg
        denorm = module.value_norm.denormalize if cfg.value_norm else (lambda x: x)
        term, trunc = b["terminated"], b["truncated"]  # [B, N, T]
        v_norm = module.values(b["critic_in"]).movedim(-1, 1)  # [B, N, T+1]
        v_final = final_values(module, b["final_critic_in"], trunc[:, 0], v_norm[..., :-1].movedim(1, -1))
        v, vf = denorm(v_norm), denorm(v_final.movedim(-1, 1))
        adv = gae(b["rewards"], v[..., :-1], next_values(v, vf, term, trunc), term | trunc, cfg.gamma, cfg.gae_lambda)
        returns, active = adv + v[..., :-1], b["alive"]
        if cfg.advantage_norm:
            adv = normalize_advantages(adv, active)
        self.metrics.log_value((mid, "explained_variance"), explained_variance(v[..., :-1], returns, active), window=1)
        self.metrics.log_value((mid, "value_mean"), float(v[..., :-1][active].mean()) if active.any() else 0.0, window=1)

        def steps(x):  # [B, N, T, ...] -> [B*T, N, ...]
            x = x.movedim(1, 2)
            return x.reshape(x.shape[0] * x.shape[1], *x.shape[2:])

        out = {"obs": steps(b["obs"][:, :, :-1]), "actions": steps(b["actions"]), "logp_old": steps(b["logp"]),
               "advantages": steps(adv), "returns": steps(returns), "values_old": steps(v_norm[..., :-1]),
               "active": steps(active), "critic_in": b["critic_in"][:, :-1].reshape(-1, b["critic_in"].shape[-1])}
        if "avail" in b:
            out["avail"] = steps(b["avail"])
        return out

    def _rows(self, mid: str, data: Dict[str, torch.Tensor]) -> Dict[str, torch.Tensor]:
        """Training rows of one module, made contiguous once per update (every epoch then only indexes them).

        MLP actors: rows are single steps (``R*T`` of them). GRU actors: rows are
        chunks of ``chunk_length`` steps starting from the stored hidden state.
        Team critic: rows are env steps already (:meth:`_prepare_team`).
        """
        module = self.module[mid].unwrapped()
        if module.team:
            return data
        if module.recurrent:
            R, T = data["actions"].shape[:2]
            L = self.cfg.chunk_length if T % self.cfg.chunk_length == 0 else T
            flat = {k: v.reshape(R * (T // L), L, *v.shape[2:]) for k, v in data.items()}
            flat["h0"] = flat.pop("h")[:, 0]
            flat["starts"] = flat["starts"].clone()
            flat["starts"][:, 0] = False  # h0 already is the state at the chunk start
            return flat
        return {k: v.reshape(-1, *v.shape[2:]) for k, v in data.items()}

    def _minibatches(self, flat: Dict[str, torch.Tensor]):
        """Yield ``num_minibatches`` minibatches of one shuffled epoch over :meth:`_rows`."""
        K = self.cfg.num_minibatches
        if K == 1:  # the whole batch: no shuffle or copy needed
            yield flat
            return
        n = flat["actions"].shape[0]
        perm = torch.randperm(n, device=flat["actions"].device)
        sizes = [len(idx) for idx in perm.tensor_split(K)]
        # one row gather per column and epoch, then contiguous views: a third of the time of gathering
        # every minibatch by advanced indexing (measured), and the same rows in the same order
        parts = {k: v.index_select(0, perm).split(sizes) for k, v in flat.items()}
        for i in range(K):
            yield {k: p[i] for k, p in parts.items()}

    # ---------------------------------------------------------------- update
    def update(self, batch=None, training_data=None, timesteps=None, **kwargs):
        """One PPO update on a rollout (see the class docstring); returns reduced metrics."""
        batches = self.begin_update(batch, training_data, timesteps)
        data = {mid: self._rows(mid, self._prepare(mid, b)) for mid, b in batches.items()}
        for _ in range(self.cfg.epochs):
            iters = {mid: self._minibatches(d) for mid, d in data.items()}
            for _k in range(self.cfg.num_minibatches):
                mb = {mid: next(it) for mid, it in iters.items()}
                self.gradient_step(mb)
        self.after_gradient_based_update(timesteps=timesteps or {})
        return self.metrics.reduce()

    def compute_loss_for_module(self, *, module_id, config, batch, fwd_out):
        cfg = self.cfg
        module = self.module[module_id].unwrapped()
        nested = module.recurrent or module.team  # [M, L or N, ...] columns -> one row per (step, agent)
        flat = {k: v.reshape(-1, *v.shape[2:]) if nested else v for k, v in batch.items()
                if k not in ("h0", "starts", "critic_in")}
        if cfg.value_norm:  # in place on the statistics: outside the compiled loss
            module.value_norm.update(flat["returns"], flat["active"])
        loss, parts = self._loss_terms(module, fwd_out["dist_in"], fwd_out["values"], flat, cfg.value_norm, cfg.clip,
                                       cfg.value_clip, cfg.huber_delta, cfg.entropy_coef, cfg.value_loss_coef)
        for name in ("policy_loss", "value_loss"):
            if not torch.isfinite(parts[name]):
                raise TrainingDiverged(f"{name} of module '{module_id}' is {parts[name].item()} (not finite)")
        for k, v in parts.items():
            self.metrics.log_value((module_id, k), v.item(), window=1)
        return loss


def ppo_loss_terms(module: PPOModule, dist_in: torch.Tensor, values: torch.Tensor, flat: Dict[str, torch.Tensor],
                   value_norm: bool, clip: float, value_clip: float, huber_delta: float, entropy_coef: float,
                   value_loss_coef: float) -> Tuple[torch.Tensor, Dict[str, torch.Tensor]]:
    """MAPPO's minibatch loss ``L = L_clip - c_H H + c_V L_V`` (Yu et al. 2022, arXiv 2103.01955) and its parts
    (:func:`~marl.algos.policy_gradient.ppo_losses`), tensor math only so that ``torch_compile`` can compile it.

    ``dist_in [M, A]`` and ``values [M]`` (normalised units) from :meth:`PPOModule._forward_train`; ``flat``: the
    minibatch's ``actions``, ``avail``, ``logp_old``, ``advantages``, ``values_old``, ``returns`` (raw units) and
    ``active``, all ``[M]`` rows (``avail [M, A]``).
    """
    logp, ent = module.log_prob_entropy(dist_in, flat["actions"], flat.get("avail"))
    returns = flat["returns"]
    targets = module.value_norm.normalize(returns) if value_norm else returns
    parts = ppo_losses(logp, flat["logp_old"], flat["advantages"], ent, values, flat["values_old"], targets,
                       flat["active"], clip, value_clip, huber_delta)
    return parts["policy_loss"] - entropy_coef * parts["entropy"] + value_loss_coef * parts["value_loss"], parts


# ============================================================ batch building
def critic_kind(cfg) -> str:
    """The critic a config trains: ``critic``, with ``auto`` resolved to ``team`` (once per env step)
    for feed-forward actors and ``state`` (one row per agent) for GRU actors, which ``team`` does not serve."""
    if cfg.critic != "auto":
        return cfg.critic
    return "state" if cfg.recurrent else "team"


def masked_log_softmax(logits: torch.Tensor, avail: Optional[torch.Tensor]) -> torch.Tensor:
    """``log softmax`` of ``logits [M, A]`` with unavailable actions (``avail [M, A]``, 0/False) at
    logit ``NEG_INF``: the log-probabilities of ``torch.distributions.Categorical(logits=...)``
    in one op (the distribution object normalises, then builds probabilities, on every use)."""
    if avail is not None:
        logits = logits.masked_fill(~avail.bool(), NEG_INF)
    return torch.log_softmax(logits, -1)


def final_values(module: "PPOModule", final_in: torch.Tensor, truncated: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    """Normalised critic values of the final observations, computed only where an episode was
    truncated (the only place :func:`~marl.algos.policy_gradient.next_values` reads them); zeros
    elsewhere.

    Args:
        final_in: critic inputs ``[R, T, C]``; truncated: ``[R, T]`` bool; like: a ``[R, T(, N)]``
            tensor of the output's shape and dtype.
    """
    out = torch.zeros_like(like)
    if bool(truncated.any()):
        out[truncated] = module.values(final_in[truncated])
    return out


def critic_inputs(kind: str, obs: torch.Tensor, state: torch.Tensor, n_agents: int) -> torch.Tensor:
    """Critic input per agent.

    Args:
        kind: ``"state"`` (MAPPO: global state plus agent one-hot) or ``"obs"``
            (IPPO: the agent's own observation, which already carries the id).
        obs: ``[..., N, D]``; state: ``[..., S]``.
    Returns:
        ``[..., N, C]``.
    """
    if kind == "obs":
        return obs
    s = state.unsqueeze(-2).expand(*state.shape[:-1], n_agents, state.shape[-1])
    eye = torch.eye(n_agents, dtype=s.dtype).expand(*state.shape[:-1], n_agents, n_agents)
    return torch.cat([s, eye], -1)


def rollout_to_sequences(rollout: Dict[str, Any], critic: str) -> MultiAgentBatch:
    """Time-major rollout ``[T, B, N, ...]`` -> per-module rows ``[B*N, T, ...]`` for the learner.

    Rows are (env copy, agent) sequences so that sharding across learners and
    GAE along time never cut a sequence. ``critic="team"``: rows are env copies,
    per-agent columns ``[B, N, T(+1), ...]`` and the critic's ``[B, T(+1), S]``
    (the state once per env step).
    """
    policy_batches = {}
    state, final_state = rollout["state"], rollout["final_state"]  # [T+1, B, S], [T, B, S]
    team = critic == "team"
    for mid, m in rollout["modules"].items():
        N = m["obs"].shape[2]
        cols = {
            "obs": m["obs"],
            "actions": m["actions"],
            "logp": m["logp"],
            "rewards": m["rewards"],
            "alive": m["alive"],
            "terminated": rollout["terminated"].unsqueeze(-1).expand_as(m["alive"]),
            "truncated": rollout["truncated"].unsqueeze(-1).expand_as(m["alive"]),
        }
        if m.get("avail") is not None:
            cols["avail"] = m["avail"]
        if m.get("h") is not None:
            cols["h"] = m["h"]
            cols["starts"] = rollout["starts"].unsqueeze(-1).expand_as(m["alive"])
        rows = {}
        for k, v in cols.items():  # [T(+1), B, N, ...] -> [B*N, T(+1), ...] (team: [B, N, T(+1), ...])
            v = v.movedim(0, 2)
            rows[k] = (v if team else v.reshape(v.shape[0] * v.shape[1], *v.shape[2:])).contiguous().numpy()
        if team:
            rows["critic_in"] = state.movedim(0, 1).contiguous().numpy()
            rows["final_critic_in"] = final_state.movedim(0, 1).contiguous().numpy()
        else:
            for k, o, s_ in (("critic_in", m["obs"], state), ("final_critic_in", m["final_obs"], final_state)):
                v = critic_inputs(critic, o, s_, N).movedim(0, 2)
                rows[k] = v.reshape(v.shape[0] * v.shape[1], *v.shape[2:]).contiguous().numpy()
        policy_batches[mid] = SampleBatch(rows)
    env_steps = int(rollout["terminated"].numel())
    return MultiAgentBatch(policy_batches, env_steps=env_steps)


# ============================================================ algorithm
class PPO(Trainer):
    """IPPO / MAPPO training step: sample ``T x B`` steps from every env runner,
    build per-module sequences, one :class:`PPOLearner` update, sync weights."""

    learner_class = PPOLearner
    module_class = PPOModule
    config_class = PPOConfig

    @classmethod
    def module_config(cls, cfg: PPOConfig, mapping, mid: str) -> Dict[str, Any]:
        g = mapping.group_info(mid)
        n = mapping.n_agents(mid)
        critic = critic_kind(cfg)
        critic_dim = {"obs": mapping.obs_dim(mid), "state": mapping.info.state_dim + n,
                      "team": mapping.info.state_dim}[critic]
        mc = {
            "obs_dim": mapping.obs_dim(mid),
            "critic_dim": critic_dim,
            "critic_heads": n if critic == "team" else 1,
            "team_critic": critic == "team",
            "n_actions": g.n_actions,
            "discrete": g.discrete,
            "hidden": cfg.hidden,
            "layers": cfg.layers,
            "activation": cfg.activation,
            "layer_norm": cfg.layer_norm,
            "recurrent": cfg.recurrent,
            "policy_gain": cfg.policy_gain,
            "log_std_init": cfg.log_std_init,
            **agent_model_config(cfg, mapping, mid),
        }
        return mc

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

    @classmethod
    def check_mapping(cls, cfg, mapping) -> None:
        """Every minibatch gets rows: ``num_minibatches`` at most the rows a learner gets per update (steps
        ``T x B x runners x N_m / learners`` of the smallest module; chunks of ``chunk_length`` steps
        for a GRU), else the extra gradient steps would run on empty minibatches.

        Raises:
            MarlError: ``num_minibatches`` above the rows (names both and the keys that set them).
        """
        c = config_view(cfg)
        if c.critic == "team" and c.recurrent:
            raise MarlError("critic=team evaluates the critic once per env step for MLP actors; with recurrent=true "
                            "use critic=state (one row per agent) or critic=auto.")
        T = c.rollout_length  # rows per (env copy, agent): steps, or chunks of a GRU (one if chunk_length does not divide T)
        if c.recurrent:
            T = T // c.chunk_length if T % c.chunk_length == 0 else 1
        envs = mapping.info.num_envs * max(1, c.num_env_runners)
        per_copy = (lambda m: 1) if critic_kind(c) == "team" else mapping.n_agents  # team: rows are env steps
        rows = min(envs * per_copy(m) for m in mapping.modules) * T // max(1, c.num_learners)
        if c.num_minibatches > rows:
            raise MarlError(f"num_minibatches={c.num_minibatches} is more than the {rows} rows a learner gets per "
                            f"update (rollout_length x env copies x agents of a module / learners); use at most "
                            f"{rows}, or more env copies (num_envs) or a longer rollout_length.")

    def training_step(self) -> StepOutput:
        rollout = self.sample_rollouts()  # batch transforms (reward_redistribution) have run: marl/transforms.py
        return StepOutput(rollout, self.update_learners(rollout_to_sequences(rollout, critic_kind(self.cfg))))
