"""IQL, VDN and QMIX: value decomposition with recurrent agent networks.

Sources: Tampuu et al. 2017 (independent Q-learning, arXiv 1511.08779);
Sunehag et al. 2018, "Value-Decomposition Networks" (VDN, arXiv 1706.05296);
Rashid et al. 2018, "QMIX: Monotonic Value Function Factorisation" (ICML,
arXiv 1803.11485) and its official code, pymarl (released with SMAC, Samvelyan
et al. 2019, arXiv 1902.04043: 1-step double-Q target, FC-GRU-FC agent, hard
target updates every 200 episodes); TD(lambda) targets as in Hu et al. 2021
(arXiv 2102.03479, official code ``build_td_lambda_targets``). Equations and
tested properties: ``docs/algorithms/value_decomposition.md``.

One family, three mixers: ``none`` (IQL: one TD loss per agent), ``vdn``
(``Q_tot = sum_a Q_a``) and ``qmix`` (a monotonic hypernetwork mixer on the
global state). It runs on the off-policy core (:mod:`marl.engine.off_policy`):
:class:`~marl.engine.runner.BatchedEnvRunner` rollouts go into a
:class:`~marl.engine.replay.JointEpisodeBuffer` in the driver; each gradient step is one
joint batch of whole episodes under a single module id, so RLlib's per-module
minibatching (which slices and shuffles each module's rows on their own) never splits
the agents of one time step (``docs/algorithms/value_decomposition.md``).

This file holds the family's config, its choice of networks (:class:`QAgentModule`,
:class:`MixerModule`, in ``algos/value_decomp_inputs.py``), its targets and loss
(:class:`ValueDecompLearner`) and its schedule and checks (:class:`ValueDecomp`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List, Tuple

import numpy as np
import torch

from ray.rllib.core.rl_module.rl_module import RLModuleSpec

from marl.algos.networks.mixers import team_reward_rule, team_rewards
from marl.algos.networks.registry import agent_model_config, check_agent
from marl.algos.q_learning import check_q_bound, double_q_next, epsilon_at, masked_td_loss, merge_moments, on_mask
from marl.algos.value_decomp_config import MIXERS, OPTIMIZERS, ValueDecompConfig  # noqa: F401
from marl.algos.value_decomp_inputs import JOINT, MixerModule, QAgentModule, mixer_specs, split_joint
from marl.config import config_view
from marl.engine.off_policy import OffPolicyLearner, OffPolicyTrainer, UpdateSchedule, batch_module_id
from marl.engine.replay import JointEpisodeBuffer
from marl.errors import TrainingDiverged
from marl.env import MarlError
from marl.env.rules import episode_limit_hint

__all__ = [
    "MixerModule",
    "QAgentModule",
    "ValueDecomp",
    "ValueDecompConfig",
    "ValueDecompLayout",
    "ValueDecompLearner",
    "split_joint",
]


@dataclass(frozen=True)
class ValueDecompLayout:
    """What the learners and the replay buffer need to know of the env and the mapping
    (``run.family`` of a value-decomposition run; :meth:`ValueDecomp.family_context`).

    Attributes:
        teams: team -> its agents as ``(module id, index in module)``, in env agent order.
        modules: the agents' module ids, in mapping order.
        team_reward: ``"mean"`` of the agents' rewards (shared-reward envs) or their ``"sum"``.
        shapes: module id -> ``{"n": agents, "obs_dim": D, "n_actions": A}``.
        episode_limit: steps of the longest episode (the buffer's time axis).
        state_dim: global state size ``S``.
        extra_columns: the env's declared per-agent columns (off-beat ``decision``) as
            ``name -> (numpy dtype, fill value)``, kept for reward redistribution.
    """

    teams: Dict[str, List[Tuple[str, int]]]
    modules: List[str]
    team_reward: str
    shapes: Dict[str, Dict[str, int]]
    episode_limit: int
    state_dim: int
    extra_columns: Dict[str, Tuple[Any, Any]] = field(default_factory=dict)


# ============================================================ targets and loss
class ValueDecompLearner(OffPolicyLearner):
    """Masked TD loss on joint batches of whole episodes.

    Input: one ``MultiAgentBatch`` whose single policy batch holds the columns of
    :class:`~marl.engine.replay.JointEpisodeBuffer` (``"<module>/obs"``, ...,
    ``"state"``, ``"terminated"``, ``"filled"``; rows = episodes, so sharding over
    DDP learners keeps episodes whole), split per module by :func:`split_joint`. Per team:
    ``Q_tot`` of the taken actions (none: per agent), double-Q TD(lambda) target from the
    target networks, loss ``sum(mask * td^2) / sum(mask)``. The off-policy core
    (:class:`~marl.engine.off_policy.OffPolicyLearner`) takes the gradient step and copies
    the online networks into the targets when the trainer's schedule says so.
    """

    def configure_optimizers_for_module(self, module_id, config=None):
        module = self.module_for_optimizer(module_id)
        params = self.get_parameters(module)
        if self.cfg.optimizer == "rmsprop":  # pymarl: RMSprop(alpha 0.99, eps 1e-5)
            opt = torch.optim.RMSprop(params, alpha=0.99, eps=1e-5)
        else:
            opt = torch.optim.Adam(params, fused=True)  # one kernel call per step (see PPOLearner)
        self.register_optimizer(module_id=module_id, optimizer=opt, params=params, lr_or_lr_schedule=config.lr)

    def learner_batch(self, columns):
        """The joint batch's one policy batch -> per-module views (:func:`split_joint`)."""
        return split_joint(next(iter(columns.values())), list(self.run.family.modules))

    def compute_losses(self, *, fwd_out, batch):
        layout = self.run.family
        j = batch[JOINT]
        per_agent = {mid: self._agent_terms(mid, fwd_out[mid], batch[mid]) for mid in layout.modules}
        total = 0.0
        for team, members in layout.teams.items():
            total = total + self._team_loss(team, members, per_agent, j)
        return {batch_module_id(self.run): total}

    def compute_loss_for_module(self, *, module_id, config, batch, fwd_out):
        raise NotImplementedError("the loss is joint over modules: see compute_losses")

    def _agent_terms(
        self, mid: str, out: Dict[str, torch.Tensor], b: Dict[str, torch.Tensor]
    ) -> Dict[str, torch.Tensor]:
        """Taken-action Q ``[E, T, N]`` (with grad), double-Q next value ``[E, T, N]``, rewards, alive."""
        q, qt = out["q"], out["q_target"]
        q_taken = q[:, :-1].gather(-1, b["actions"].long().unsqueeze(-1)).squeeze(-1)
        avail = b["avail"][:, 1:].bool() if "avail" in b else None
        with torch.no_grad():
            q_next = double_q_next(q[:, 1:].detach(), qt[:, 1:], avail)
        return {"q_taken": q_taken, "q_next": q_next, "rewards": b["rewards"], "alive": b["alive"].bool()}

    def _team_loss(self, team: str, members: List[Tuple[str, int]], per_agent, j) -> torch.Tensor:
        cfg = self.cfg

        def stack(key):
            return torch.stack([per_agent[mid][key][..., i] for mid, i in members], -1)  # [E, T, n]

        q_taken, q_next, rewards, alive = stack("q_taken"), stack("q_next"), stack("rewards"), stack("alive")
        team_r = team_rewards(rewards, self.run.family.team_reward, -1)
        filled, term = j["filled"].bool(), j["terminated"].bool()
        if cfg.mixer == "none":
            q_tot, next_tot, r = q_taken, q_next, team_r.unsqueeze(-1).expand_as(q_taken)
            mask = filled.unsqueeze(-1) & alive
        elif cfg.mixer == "vdn":
            q_tot, next_tot, r, mask = q_taken.sum(-1), q_next.sum(-1), team_r, filled
        else:
            # the mixers run on filled steps only: padding costs nothing and its state is never read
            mod = self.module[f"mixer_{team}"]
            q_tot = on_mask(
                lambda q, s: mod.forward_train({"qs": q, "state": s})["q_tot"], filled, q_taken, j["state"][:, :-1]
            )
            with torch.no_grad():
                next_tot = on_mask(mod.unwrapped().target, filled, q_next, j["state"][:, 1:])
            r, mask = team_r, filled
        loss, y = masked_td_loss(q_tot, next_tot, r, term, filled, mask, cfg.gamma, cfg.td_lambda)
        if not torch.isfinite(loss):
            raise TrainingDiverged(f"td_loss of team '{team}' is {loss.item()} (not finite)")
        check_q_bound(team, cfg.q_abs_max, {"agent Q": (q_taken, filled.unsqueeze(-1) & alive), "Q_tot": (q_tot, mask)})
        n = mask.sum().clamp(min=1)
        self.metrics.log_value((team, "td_loss"), loss.item(), window=1)
        self.metrics.log_value((team, "q_taken_mean"), float(torch.where(mask, q_tot.detach(), 0).sum() / n), window=1)
        self.metrics.log_value((team, "target_mean"), float(torch.where(mask, y, 0).sum() / n), window=1)
        return loss


# ============================================================ algorithm
class ValueDecomp(OffPolicyTrainer):
    """IQL / VDN / QMIX on the off-policy core.

    Each iteration: sample ``T x B`` epsilon-greedy steps from every env runner
    (epsilon from the linear schedule at the current env step), write them into
    the :class:`JointEpisodeBuffer`, then one gradient step per
    ``episodes_per_update`` completed episodes (pymarl2: one per 8), each on
    ``batch_size`` episodes, once the buffer holds ``batch_size``. Targets are
    hard-copied every ``target_update_interval`` episodes (pymarl). The buffer is
    saved in checkpoints.
    """

    learner_class = ValueDecompLearner
    module_class = QAgentModule
    config_class = ValueDecompConfig
    learner_metrics = ("td_loss", "q_taken_mean", "target_mean")

    # --------------------------------------------------------------- config hooks
    @classmethod
    def module_config(cls, cfg: ValueDecompConfig, mapping, mid: str) -> Dict[str, Any]:
        g = mapping.group_info(mid)
        return {
            "obs_dim": mapping.obs_dim(mid),
            "n_actions": g.n_actions,
            "hidden": cfg.hidden,
            "recurrent": cfg.recurrent,
            "last_action": cfg.last_action,
            **agent_model_config(cfg, mapping, mid),
        }

    @classmethod
    def check_env(cls, cfg, info) -> None:
        """Discrete actions and a finite episode limit are required; an entity-aware
        ``agent`` needs the env's entity layout.

        Raises:
            MarlError: a continuous group, an unbounded env, an unknown
                agent, or an entity-aware agent on an env without a layout.
        """
        cfg = config_view(cfg)
        check_agent(cfg, info, family="value_decomp")
        for g in info.groups.values():
            if not g.discrete:
                raise MarlError(
                    f"{cfg.algo} needs discrete actions, but group '{g.name}' of {info.family}:{info.scenario} "
                    f"has {g.action_space}. Use a discrete version of the env (e.g. continuous_actions=False) "
                    f"or a policy-gradient algorithm (mappo, ippo)."
                )
        if not info.episode_limit:
            raise MarlError(
                f"{cfg.algo} stores whole episodes and needs a finite episode_limit; {info.family}:{info.scenario} "
                f"has none. {episode_limit_hint(info.family, info.scenario)}."
            )
        if cfg.mixer == "qmix" and info.state_dim <= 0:
            raise MarlError(f"qmix mixes on the global state, but {info.family}:{info.scenario} has state_dim=0.")

    @classmethod
    def check_mapping(cls, cfg, mapping) -> None:
        """A module's agents must play for one team (each team gets its own mixer); the checks across
        keys of :class:`ValueDecompConfig` with the env (replay buffer against the env copies).

        Raises:
            MarlError: a module spans teams (names the module, its teams and the fix), or a
                violated error rule (marl/config/checks.py).
        """
        super().check_mapping(cfg, mapping)
        info = mapping.info
        for mid, agents in mapping.modules.items():
            teams = sorted({info.group_of(a).team for a in agents})
            if len(teams) > 1:
                raise MarlError(
                    f"{config_view(cfg).algo}: module '{mid}' is shared by agents of teams {teams}; value decomposition "
                    f"trains one team per side. Use share='group' or share='individual'."
                )

    @classmethod
    def team_layout(cls, mapping) -> Dict[str, List[Tuple[str, int]]]:
        """Team -> its agents as ``(module id, index in module)``, in env agent order."""
        info = mapping.info
        out: Dict[str, List[Tuple[str, int]]] = {}
        for a in info.agents:
            mid = mapping.agent_to_module[a]
            out.setdefault(info.group_of(a).team, []).append((mid, mapping.modules[mid].index(a)))
        return out

    @classmethod
    def extra_module_specs(cls, cfg, mapping) -> Dict[str, RLModuleSpec]:
        """QMIX: one learner-only mixer module per team, ``mixer_<team>``."""
        if cfg.mixer != "qmix":
            return {}
        return mixer_specs(cls.team_layout(mapping), mapping.info.state_dim, cfg)

    @classmethod
    def family_context(cls, cfg, env, mapping) -> ValueDecompLayout:
        """The :class:`ValueDecompLayout` of ``env`` under ``mapping``."""
        shapes = mapping.buffer_shapes()
        return ValueDecompLayout(
            teams=cls.team_layout(mapping),
            modules=list(mapping.modules),
            team_reward=team_reward_rule(env.info),
            shapes=shapes,
            episode_limit=int(env.info.episode_limit),
            state_dim=int(env.info.state_dim),
            extra_columns={
                name: (torch.zeros(0, dtype=col.dtype).numpy().dtype, col.fill)
                for name, col in env.info.extra_columns.items()
            },
        )

    # --------------------------------------------------------------- off-policy core hooks
    def setup(self, config):
        super().setup(config)
        self.progress.update(reward_stats=[0.0, 0.0, 0.0])

    def make_buffer(self) -> JointEpisodeBuffer:
        """Whole episodes of every env copy of every runner, ``buffer_size`` of them."""
        cfg, layout = self.cfg, self.run.family
        copies = self.run.num_envs * max(1, cfg.num_env_runners)
        return JointEpisodeBuffer(
            cfg.buffer_size, layout.episode_limit, copies, layout.shapes, layout.state_dim, layout.extra_columns
        )

    def update_schedule(self) -> UpdateSchedule:
        """One gradient step per ``episodes_per_update`` episodes once the buffer holds
        ``max(batch_size, learning_starts_episodes)``; hard target copies every
        ``target_update_interval`` episodes (pymarl)."""
        c = self.cfg
        return UpdateSchedule(
            updates=1,
            per=c.episodes_per_update,
            unit="episode",
            learning_starts=max(c.batch_size, c.learning_starts_episodes),
            target_interval=c.target_update_interval,
            target_unit="episode",
            tau=1.0,
        )

    def act_kwargs(self) -> Dict[str, float]:
        """The ``epsilon`` of :meth:`QAgentModule.act` at the current env step (pymarl's linear schedule)."""
        c, steps = self.cfg, self.progress["env_steps"]
        return {"epsilon": epsilon_at(steps, c.epsilon_start, c.epsilon_end, c.epsilon_anneal_steps)}

    def observe_rollout(self, rollout) -> None:
        """``standardise_rewards``: fold every sampled reward into ``progress["reward_stats"]``."""
        if self.cfg.standardise_rewards:
            for m in rollout["modules"].values():
                self.progress["reward_stats"] = merge_moments(self.progress["reward_stats"], m["rewards"])

    def transform_batch(self, columns):
        """``standardise_rewards``: rewards ``(r - mean) / std`` over all rewards seen (EPyMARL)."""
        if self.cfg.standardise_rewards:
            n, mean, m2 = self.progress["reward_stats"]
            std = max(float(np.sqrt(m2 / max(n, 1.0))), 1e-6)
            for k in [k for k in columns if k.endswith("/rewards")]:
                columns[k] = (columns[k] - mean) / std
        return columns
