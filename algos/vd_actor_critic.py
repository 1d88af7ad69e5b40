"""VDA2C and VDPPO: value-decomposition actor-critics on the on-policy core.

Sources: Su, Adams and Beling 2021, "Value-Decomposition Multi-Agent Actor-Critics" (AAAI 2021, arXiv
2007.12306, Sec. 4: VDAC-sum and VDAC-mix, the team TD advantage of V_tot in each agent's policy
gradient); MARLlib (Hu et al. 2023, arXiv 2210.13708), whose VDA2C and VDPPO
(https://github.com/Replicable-MARL/MARLlib/blob/master/marllib/marl/algos/core/VD/,
https://github.com/Replicable-MARL/MARLlib/blob/master/marllib/marl/algos/utils/) mix
per-agent values into ``V_tot`` by a VDN sum or a QMIX mixer and run GAE on ``V_tot``; QMIX's mixer:
Rashid et al. 2018 (arXiv 1803.11485); VDN: Sunehag et al. 2018 (arXiv 1706.05296); A2C: Mnih et al.
2016 (arXiv 1602.01783); PPO: Schulman et al. 2017 (arXiv 1707.06347).

Each agent ``i`` has a value ``V_i`` (an MLP on its own observation, ``critic: obs``, or on the state and
its id, ``critic: state``); the module mixes the values of its agents into the team value
``V_tot(s) = sum_i V_i`` (``mixer: vdn``) or ``QMixer([V_1..V_n], s)`` (``mixer: qmix``, monotonic in every
``V_i``). ``V_tot`` is trained on the team reward; every agent's actor is trained on the team advantage,
GAE on ``V_tot``: ``-log pi(a_i|o_i) A`` (``actor_loss: a2c``, VDA2C) or PPO's clipped surrogate
(``actor_loss: ppo``, VDPPO), plus, with ``kl_coeff > 0``, RLlib 1.8's adaptive KL penalty that MARLlib's VDPPO
inherits from RLlib's PPO loss (``value_mix_ppo_surrogate_loss``,
https://github.com/Replicable-MARL/MARLlib/blob/master/marllib/marl/algos/core/VD/vdppo.py;
https://github.com/ray-project/ray/blob/ray-1.8.0/rllib/agents/ppo/ppo_torch_policy.py: ``KLCoeffMixin``):
``+ beta * mean_active KL(pi_old(.|o) || pi(.|o))``, ``beta`` adapted after each update (:func:`adapt_kl_coeff`).

How mixing meets the policy mapping: a module mixes its own agents, so every team must be exactly one
module (``share='all'`` on a one-team env, or ``share='group'`` where each team is one group); a team
split over several modules is refused (:meth:`VDActorCritic.check_mapping`). Training rows stay one per
agent and step (or GRU chunk), so minibatches and recurrent chunks are the core's: as in MARLlib, a row's
``V_tot`` mixes its own agent's current ``V_i`` with the other agents' values computed before the
update's epochs (constants), so at the first gradient step the value gradient equals that of the joint
loss ``(R - V_tot)^2``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Dict, Optional, Tuple

import torch

from marl.algos.networks.mixers import QMixer, team_reward_rule, team_rewards
from marl.algos.policy_gradient import masked_mean
from marl.algos.ppo import PPO, PPOLearner, PPOModule, ppo_loss_terms
from marl.algos.trpo import policy_kl, policy_snapshot
from marl.algos.vd_actor_critic_config import ACTOR_LOSSES, VD_MIXERS, VDACConfig  # noqa: F401
from marl.config import config_view
from marl.engine.on_policy import (
    critic_values,
    explained_variance,
    next_values,
    normalize_advantages,
    rollout_to_sequences,
)
from marl.env import MarlError, map_obs


# ============================================================ mixing and the team advantage
def mix_values(values: torch.Tensor, state: torch.Tensor, mixer: Optional[QMixer]) -> torch.Tensor:
    """The team value ``V_tot [...]`` of per-agent values ``values [..., N]`` and the global state
    ``state [..., S]``: ``sum_i V_i`` when ``mixer`` is ``None`` (VDN, VDAC-sum), else the QMIX mixer
    (VDAC-mix; Su et al. 2021, arXiv 2007.12306, Sec. 4), whose ``dV_tot/dV_i >= 0``."""
    return values.sum(-1) if mixer is None else mixer(values, state)


def team_advantages(
    estimator: Callable[..., torch.Tensor],
    rewards: torch.Tensor,
    v_tot: torch.Tensor,
    final_v_tot: torch.Tensor,
    terminated: torch.Tensor,
    truncated: torch.Tensor,
) -> Tuple[torch.Tensor, torch.Tensor]:
    """Team advantages and returns, both ``[B, T]``, from the team value (raw units).

    Args:
        estimator: ``(rewards, values, next_values, dones) -> advantages`` (GAE: the learner's
            :meth:`~marl.engine.on_policy.OnPolicyLearner.advantages`).
        rewards: team reward ``[B, T]``; v_tot: ``V_tot [B, T+1]`` of the observed states;
        final_v_tot: ``V_tot [B, T]`` of the final states (read where an episode was truncated);
        terminated, truncated: ``[B, T]`` bool.
    Returns:
        ``A_t`` (GAE on ``V_tot``, time-limit bootstrap as in :func:`~marl.engine.on_policy.next_values`)
        and ``R_t = A_t + V_tot(s_t)``.
    """
    nxt = next_values(v_tot, final_v_tot, terminated, truncated)
    adv = estimator(rewards, v_tot[:, :-1], nxt, terminated | truncated)
    return adv, adv + v_tot[:, :-1]


# ============================================================ networks
class VDModule(PPOModule):
    """PPO's actor and per-agent critic (:class:`~marl.algos.ppo.PPOModule`) plus, on learners, the mixer
    of the module's ``n_agents`` values: ``None`` for VDN, a :class:`QMixer` for QMIX, and the KL penalty's
    current weight ``kl_coeff`` (a buffer, so that checkpoints hold it: RLlib's ``policy.kl_coeff``).
    Extra ``model_config`` keys: ``n_agents``, ``state_dim``, ``mixer``, ``mixing_embed``, ``hypernet_layers``,
    ``hypernet_embed``, ``kl_coeff`` (the initial weight, default 0)."""

    def setup(self):
        super().setup()
        c = self.model_config
        self.n_agents = int(c["n_agents"])
        self.mixer: Optional[QMixer] = None
        if not self.inference_only and c["mixer"] == "qmix":
            self.mixer = QMixer(
                self.n_agents, int(c["state_dim"]), c["mixing_embed"], c["hypernet_layers"], c["hypernet_embed"]
            )
        if not self.inference_only:  # float32: RLlib's set_state casts float64 states to float32, so a float64
            # weight would come back rounded from a checkpoint and a resumed run would drift from the one-go run
            self.register_buffer("kl_coeff", torch.tensor(float(c.get("kl_coeff", 0.0))))

    def get_non_inference_attributes(self):
        return super().get_non_inference_attributes() + ["mixer", "kl_coeff"]

    def mix(self, values: torch.Tensor, state: torch.Tensor) -> torch.Tensor:
        """``V_tot [...]`` of ``values [..., n_agents]`` and ``state [..., S]`` (:func:`mix_values`)."""
        return mix_values(values, state, self.mixer)


# ============================================================ the adaptive KL penalty
def adapt_kl_coeff(coeff: float, kl: float, target: float) -> float:
    """The KL penalty's next weight after an update whose mean ``KL(pi_old || pi)`` was ``kl`` (nats): ``1.5 coeff``
    if ``kl > 2 target``, ``coeff / 2`` if ``kl < target / 2``, else ``coeff`` (RLlib 1.8's PPO,
    ``KLCoeffMixin.update_kl``, https://github.com/ray-project/ray/blob/ray-1.8.0/rllib/agents/ppo/ppo_torch_policy.py;
    Schulman et al. 2017, arXiv 1707.06347, Sec. 4, with RLlib's thresholds and factors)."""
    if kl > 2.0 * target:
        return coeff * 1.5
    if kl < 0.5 * target:
        return coeff * 0.5
    return coeff


@torch.no_grad()
def old_policy_columns(module: PPOModule, rows: Dict[str, Any]) -> Dict[str, torch.Tensor]:
    """The policy before the update as training-row columns (what RLlib stores as ``action_dist_inputs``):
    ``dist_old [M(, L), A]`` (logits or Gaussian means) and, for continuous actions, ``log_std_old [M(, L), A]``.

    ``rows``: the core's training rows (steps ``[M, ...]`` or GRU chunks ``[M, L, ...]`` with ``h0``, ``starts``),
    read by the module's training forward exactly as the first gradient step reads them."""
    old = policy_snapshot(module, module._forward_train(rows)["dist_in"])
    lead = rows["active"].shape
    cols = {"dist_old": old["dist_in"].reshape(*lead, -1)}
    if "log_std" in old:
        cols["log_std_old"] = old["log_std"].expand_as(cols["dist_old"])
    return cols


def old_policy(rows: Dict[str, torch.Tensor]) -> Dict[str, Any]:
    """The before-update policy of loss rows with :func:`old_policy_columns`, as :func:`marl.algos.trpo.policy_kl`
    reads it (``dist_in``, ``log_std``)."""
    return {"dist_in": rows["dist_old"], "log_std": rows.get("log_std_old")}


# ============================================================ loss
def vd_loss_terms(
    module: VDModule, fwd_out: Dict[str, torch.Tensor], rows: Dict[str, torch.Tensor], actor_loss: str, *ppo_params: Any
) -> Tuple[torch.Tensor, Dict[str, torch.Tensor]]:
    """PPO's minibatch loss ``L = L_pi - c_H H + c_V L_V`` (:func:`~marl.algos.ppo.ppo_loss_terms`, whose constants
    are ``ppo_params``) with the value loss on the mixed ``V_tot``.

    ``fwd_out["values"] [M]``: the row's own agent's ``V_i`` (normalised units); ``rows``: PPO's columns
    (``advantages``, ``returns`` and ``values_old`` are the team's) plus ``others [M, N]`` (every agent's ``V_j``
    before the update), ``agent_index [M]`` and ``mix_state [M, S]``. ``L_pi``: PPO's clipped surrogate
    (``actor_loss="ppo"``) or ``-mean(log pi(a|o) A)`` (``"a2c"``, Mnih et al. 2016, arXiv 1602.01783). Rows with
    :func:`old_policy_columns` (``kl_coeff > 0``) add RLlib PPO's penalty ``module.kl_coeff * mean_active
    KL(pi_old || pi)`` (:func:`~marl.algos.trpo.policy_kl`: categorical or diagonal Gaussian) and return that KL,
    detached, as the part ``kl_step`` (:meth:`VDLearner.record_parts`); without them the loss is exactly the one
    without a penalty.
    """
    own = fwd_out["values"].unsqueeze(-1)
    v_tot = module.mix(rows["others"].scatter(-1, rows["agent_index"].unsqueeze(-1), own), rows["mix_state"])
    loss, parts = ppo_loss_terms(module, {**fwd_out, "values": v_tot}, rows, *ppo_params)
    if actor_loss == "a2c":
        logp, _ = module.log_prob_entropy(fwd_out["dist_in"], rows["actions"], rows.get("avail"))
        a2c = -masked_mean(logp * rows["advantages"], rows["active"])
        loss, parts["policy_loss"] = loss - parts["policy_loss"] + a2c, a2c
    if "dist_old" in rows:
        kl = policy_kl(module, old_policy(rows), fwd_out["dist_in"], rows)
        loss, parts["kl_step"] = loss + module.kl_coeff * kl, kl.detach()
    return loss, parts


# ============================================================ learner and algorithm
@dataclass(frozen=True)
class VDLayout:
    """``run.family`` of a VD actor-critic run: ``team_reward`` is ``"mean"`` of the agents' rewards
    (a shared-reward env: every agent gets the team's) or their ``"sum"`` (a cooperative env)."""

    team_reward: str


class VDLearner(PPOLearner):
    """The on-policy core's update with team values: :meth:`prepare` mixes the agents' values of every
    env copy into ``V_tot``, runs GAE on it with the team reward and gives every agent's rows the team's
    advantages and returns; :func:`vd_loss_terms` on each minibatch; with ``kl_coeff > 0``, the KL penalty's
    weight of every module adapts after the epochs (:meth:`run_epochs`)."""

    loss_terms = staticmethod(vd_loss_terms)

    def loss_params(self) -> Tuple[Any, ...]:
        return (self.cfg.actor_loss, *super().loss_params())

    @torch.no_grad()
    def prepare(self, mid: str, b: Dict[str, torch.Tensor]) -> Dict[str, torch.Tensor]:
        """Training columns ``[R, T, ...]`` of one module's (env copy, agent) rows ``b``, ``R = B * N``.

        Raises:
            MarlError: the rows are not whole env copies (``R`` not a multiple of the module's agents).
        """
        module: Any = self.module[mid].unwrapped()
        n = module.n_agents
        if b["actions"].shape[0] % n:
            raise MarlError(f"module '{mid}': {b['actions'].shape[0]} rows are not whole env copies of {n} agents.")

        def grid(x: torch.Tensor) -> torch.Tensor:  # rows (env copy, agent) [R, ...] -> [B, N, ...]
            return x.reshape(-1, n, *x.shape[1:])

        def per_agent(x: torch.Tensor) -> torch.Tensor:  # one entry per env copy [B, ...] -> rows [R, ...]
            return x.unsqueeze(1).expand(x.shape[0], n, *x.shape[1:]).reshape(-1, *x.shape[1:])

        v_agents, vf_agents = critic_values(module, b)  # normalised V_i: [R, T+1], [R, T]
        v_tot = module.mix(grid(v_agents).movedim(1, -1), grid(b["mix_state"])[:, 0])  # [B, T+1]
        vf_tot = module.mix(grid(vf_agents).movedim(1, -1), grid(b["final_mix_state"])[:, 0])  # [B, T]
        vn = self.value_normalizer(module)
        denorm = vn.denormalize if vn is not None else (lambda x: x)
        rewards = grid(b["rewards"])
        team_r = team_rewards(rewards, self.run.family.team_reward, 1)
        term, trunc = grid(b["terminated"])[:, 0], grid(b["truncated"])[:, 0]
        adv, returns = team_advantages(self.advantages, team_r, denorm(v_tot), denorm(vf_tot), term, trunc)
        self._log_team(mid, denorm(v_tot)[:, :-1], returns, grid(b["alive"]).any(1))
        active = b["alive"]
        adv = per_agent(adv)
        out = {
            "obs": map_obs(lambda x: x[:, :-1], b["obs"]),
            "critic_in": map_obs(lambda x: x[:, :-1], b["critic_in"]),
            "mix_state": b["mix_state"][:, :-1],
            "actions": b["actions"],
            "logp_old": b["logp"],
            "advantages": normalize_advantages(adv, active) if self.cfg.advantage_norm else adv,
            "returns": per_agent(returns),
            "values_old": per_agent(v_tot[:, :-1]),
            "others": per_agent(grid(v_agents[:, :-1]).movedim(1, -1)),  # [R, T, N]
            "agent_index": torch.arange(n, device=adv.device).repeat(adv.shape[0] // n)[:, None].expand_as(adv),
            "active": active,
        }
        return {**out, **{k: b[k] for k in ("avail", "h", "starts") if k in b}}

    def run_epochs(self, data: Dict[str, Dict[str, torch.Tensor]]) -> None:
        """The core's epochs on training rows ``data``. With ``kl_coeff > 0`` the rows first get the policy before
        the update (:func:`old_policy_columns`), and after the epochs each module's ``kl_coeff`` adapts
        (:func:`adapt_kl_coeff`) to the mean over its gradient steps of the minibatch KL (RLlib 1.8 averages its
        learner stats over every minibatch of every epoch before ``update_kl``); logs per module ``kl`` (that
        mean, nats) and ``kl_coeff`` (the weight this update's loss used, RLlib's ``cur_kl_coeff``)."""
        if self.cfg.kl_coeff <= 0:  # no penalty: the core's update as it is
            return super().run_epochs(data)
        for mid, rows in data.items():
            rows.update(old_policy_columns(self.module[mid].unwrapped(), rows))
        self.kl_steps: Dict[str, list] = {mid: [] for mid in data}
        super().run_epochs(data)
        for mid, kls in self.kl_steps.items():
            coeff: torch.Tensor = self.module[mid].unwrapped().kl_coeff
            kl, used = float(torch.stack(kls).mean()), float(coeff)
            coeff.fill_(adapt_kl_coeff(used, kl, self.cfg.kl_target))
            self.metrics.log_value((mid, "kl"), kl, window=1)
            self.metrics.log_value((mid, "kl_coeff"), used, window=1)

    def record_parts(self, module_id: str, parts: Dict[str, torch.Tensor]) -> None:
        """The core's logging of the loss parts; with the KL penalty on, first takes the minibatch's mean
        ``KL(pi_old || pi)`` at the parameters before this step (``kl_step``, the penalty's own value) for the
        weight's update in :meth:`run_epochs`."""
        if "kl_step" in parts:
            self.kl_steps[module_id].append(parts.pop("kl_step"))
        super().record_parts(module_id, parts)

    def _log_team(self, mid: str, v_tot: torch.Tensor, returns: torch.Tensor, active: torch.Tensor) -> None:
        """``explained_variance`` and ``value_mean`` of ``V_tot [B, T]`` (raw units) on env steps with an agent alive."""
        self.metrics.log_value((mid, "explained_variance"), explained_variance(v_tot, returns, active), window=1)
        self.metrics.log_value((mid, "value_mean"), float(v_tot[active].mean()) if active.any() else 0.0, window=1)


class VDActorCritic(PPO):
    """VDA2C / VDPPO: the on-policy core's training step with :class:`VDModule` and :class:`VDLearner`; the
    rollout's sequences carry the global state for the mixer (``mix_state``, ``final_mix_state``)."""

    learner_class = VDLearner
    module_class = VDModule
    config_class = VDACConfig
    learner_metrics = PPO.learner_metrics + ("kl", "kl_coeff")  # the KL penalty's (kl_coeff > 0)

    @classmethod
    def module_config(cls, cfg: VDACConfig, mapping, mid: str) -> Dict[str, Any]:
        return {
            **super().module_config(cfg, mapping, mid),
            "n_agents": mapping.n_agents(mid),
            "state_dim": mapping.info.state_dim,
            "mixer": cfg.mixer,
            "mixing_embed": cfg.mixing_embed,
            "hypernet_layers": cfg.hypernet_layers,
            "hypernet_embed": cfg.hypernet_embed,
            "kl_coeff": cfg.kl_coeff,
        }

    @classmethod
    def check_env(cls, cfg, info) -> None:
        """PPO's action spaces, a common team reward, and a global state for ``mixer: qmix``.

        Raises:
            MarlError: an action space PPO cannot handle; an env whose teams of several agents share no
                reward (not ``shared_reward`` and not ``kind="cooperative"``); ``qmix`` without a global state.
        """
        super().check_env(cfg, info)
        cfg = config_view(cfg)
        teams = {t: sum(info.groups[g].n_agents for g in gs) for t, gs in info.teams.items()}
        if not info.shared_reward and info.kind != "cooperative" and max(teams.values()) > 1:
            raise MarlError(
                f"{cfg.algo} trains a team value on a common team reward, but {info.family}:{info.scenario} is "
                f"kind='{info.kind}' with shared_reward=False (each agent its own reward; teams {teams}). Use a "
                f"cooperative or shared-reward env, or an algorithm with per-agent critics (ippo, mappo)."
            )
        if cfg.mixer == "qmix" and info.state_dim <= 0:
            raise MarlError(
                f"{cfg.algo}: mixer=qmix mixes on the global state, but {info.family}:{info.scenario} has "
                f"state_dim=0. Use mixer=vdn."
            )

    @classmethod
    def check_mapping(cls, cfg, mapping) -> None:
        """Every team is exactly one module (a module mixes its own agents), and one learner.

        Raises:
            MarlError: a team split over modules, a module shared by teams (both name the modules and
                the fix), or ``num_learners > 1`` (sharding could split an env copy's agents).
        """
        super().check_mapping(cfg, mapping)
        algo, info = config_view(cfg).algo, mapping.info
        for team, groups in info.teams.items():
            agents = [a for g in groups for a in info.groups[g].agents]
            mids = sorted({mapping.agent_to_module[a] for a in agents})
            if len(mids) > 1 or len(mapping.modules[mids[0]]) != len(agents):
                raise MarlError(
                    f"{algo} mixes the values of one module's agents, but team '{team}' ({len(agents)} agents) maps "
                    f"to modules {mids} of {[len(mapping.modules[m]) for m in mids]} agents. Use share='all' "
                    f"(one team) or share='group' where each team is one group."
                )
        if config_view(cfg).num_learners > 1:
            raise MarlError(
                f"{algo} with num_learners={config_view(cfg).num_learners}: sharding could split the agents of "
                f"an env copy across learners; use num_learners=0 or 1."
            )

    @classmethod
    def family_context(cls, cfg, env, mapping) -> VDLayout:
        """The team reward of ``env`` (:class:`VDLayout`)."""
        return VDLayout(team_reward=team_reward_rule(env.info))

    def sequences(self, rollout: Dict[str, Any]):
        """The core's sequences (:func:`~marl.engine.on_policy.rollout_to_sequences`) plus, per module, the
        state of every row's env copy: ``mix_state [R, T+1, S]`` and ``final_mix_state [R, T, S]``."""
        batch = rollout_to_sequences(rollout, self.cfg.critic_kind)
        for mid, m in rollout["modules"].items():
            n = m["alive"].shape[2]
            for k, s in (("mix_state", rollout["state"]), ("final_mix_state", rollout["final_state"])):
                batch.policy_batches[mid][k] = s.movedim(0, 1).repeat_interleave(n, 0).contiguous().numpy()
        return batch
