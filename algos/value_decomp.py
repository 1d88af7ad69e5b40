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
global state). The data path: :class:`~marl.engine.runner.BatchedEnvRunner`
rollouts go into a :class:`~marl.engine.replay.JointEpisodeBuffer` in the
driver; each gradient step is one joint batch of whole episodes under a single
module id, so RLlib's per-module minibatching (which slices and shuffles each
module's rows on their own) never splits the agents of one time step
(``docs/algorithms/value_decomposition.md``).

This file holds the family's RLModules (:class:`QAgentModule`,
:class:`MixerModule`), Learner (:class:`ValueDecompLearner`) and training step
(:class:`ValueDecomp`).
"""
from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Tuple

import gymnasium as gym
import numpy as np
import torch
from torch.nn import functional as F

from ray.rllib.core.rl_module.apis import InferenceOnlyAPI
from ray.rllib.core.rl_module.rl_module import RLModuleSpec
from ray.rllib.core.rl_module.torch import TorchRLModule
from ray.rllib.policy.sample_batch import MultiAgentBatch, SampleBatch

from marl.algos.networks.base import AgentNetwork
from marl.algos.networks.config import AgentNetConfig
from marl.algos.networks.mixers import QMixer
from marl.algos.networks.registry import agent_model_config, build_agent_net, check_agent
from marl.algos.q_learning import check_q_bound, double_q_next, epsilon_at, epsilon_greedy, masked_td_loss, merge_moments, on_mask
from marl.algos.value_decomp_inputs import PackedEpisodes, agent_inputs
from marl.config import EngineConfig, config_view, key
from marl.engine.context import RunAccess
from marl.engine.replay import JointEpisodeBuffer, check_buffer_size
from marl.engine.rllib_seam import SeamLearner, wants_component
from marl.engine.trainer import StepOutput, Trainer
from marl.errors import TrainingDiverged
from marl.env import MarlError

MIXERS = ("none", "vdn", "qmix")
JOINT = "__joint__"  # batch key of the team-level columns (not a module id: forward_train skips it)
OPTIMIZERS = ("adam", "rmsprop")


# ============================================================ configuration
@dataclass(frozen=True, kw_only=True)
class ValueDecompConfig(AgentNetConfig, EngineConfig):
    """IQL / VDN / QMIX keys (``docs/algorithms/value_decomposition.md``); values in
    ``configs/algos/qmix.yaml``, which ``vdn.yaml`` and ``iql.yaml`` start from (``base: qmix``)."""

    LAYER = "value decomposition"

    mixer: str = key("team value: none (IQL, one TD loss per agent), vdn (sum) or qmix (monotonic mixer)",
                     choices=MIXERS)
    gamma: float = key("discount factor", gt=0, le=1)
    optimizer: str = key("adam, or rmsprop (pymarl's RMSprop: alpha 0.99, eps 1e-5)", choices=OPTIMIZERS)
    batch_size: int = key("episodes per gradient step", ge=1)
    buffer_size: int = key("episodes in the joint replay buffer", ge=1)
    episodes_per_update: int = key("new episodes per gradient step", ge=1)
    learning_starts_episodes: int = key("episodes in the buffer before training (at least batch_size)", ge=0)
    target_update_interval: int = key("episodes between hard target-network copies", ge=1)
    standardise_rewards: bool = key("train on (r - running mean) / running std (EPyMARL standardise_rewards)")
    td_lambda: float = key("TD(lambda) targets; 0 = the 1-step target", ge=0, le=1)
    epsilon_start: float = key("exploration epsilon at env step 0", ge=0, le=1)
    epsilon_end: float = key("exploration epsilon after epsilon_anneal_steps", ge=0, le=1)
    epsilon_anneal_steps: int = key("env steps of the linear epsilon decay", ge=0)
    hidden: int = key("width of the agent network (rnn_hidden_dim)", ge=1)
    recurrent: bool = key("FC-GRU-FC agent network (pymarl rnn_agent) instead of an MLP")
    last_action: bool = key("the agent's last action is part of its input (obs_last_action)")
    mixing_embed: int = key("QMIX: mixing network width (mixing_embed_dim)", ge=1)
    hypernet_layers: int = key("QMIX: layers of the hypernetworks", choices=(1, 2))
    hypernet_embed: int = key("QMIX: hidden width of two-layer hypernetworks", ge=1)
    checkpoint_buffer: bool = key("save the replay buffer in checkpoints (a resumed run keeps learning off-policy)")
    q_abs_max: float = key("TrainingDiverged when an agent's Q or Q_tot of a trained step exceeds this in absolute "
                           "value (diverging TD targets); 0 = no bound", gt=0, off=0)


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


# ============================================================ agent network
class QAgentModule(TorchRLModule, InferenceOnlyAPI):
    """Agent utilities ``Q_a(tau_a, u)`` for the agents of one policy-mapping module.

    ``model_config``: ``obs_dim`` (with the agent one-hot the mapping appends),
    ``n_actions``, ``hidden`` (64), ``recurrent`` (GRU), ``last_action`` (feed the
    one-hot previous action, pymarl ``obs_last_action``) and ``agent``: the agent
    network's registered name (:func:`marl.algos.networks.registry.build_agent_net`;
    ``mlp`` is pymarl's :class:`~marl.algos.networks.rnn.RNNAgent`) with its extra keys.
    The recurrent state the runner carries is ``[B, N, S + A]``: the network's
    state (``S = H`` for a GRU) and the last action one-hot, both zero at an
    episode start. The target network (``target``) exists on learners only.
    """

    def setup(self):
        c = self.model_config
        self.n_actions = int(c["n_actions"])
        self.use_last_action = bool(c.get("last_action", True))
        last_dim = self.n_actions if self.use_last_action else 0
        self.net = build_agent_net(c.get("agent", "mlp"), {**c, "last_action_dim": last_dim}, self.n_actions, "value_decomp")
        if not self.inference_only:
            self.target = copy.deepcopy(self.net).requires_grad_(False)

    def get_non_inference_attributes(self):
        return ["target"]

    @property
    def state_size(self) -> int:
        """``S + A``: the network's state and (with ``last_action``) the last action one-hot."""
        return self.net.state_size + (self.n_actions if self.use_last_action else 0)

    # --- acting
    def initial_state(self, batch_shape) -> Optional[torch.Tensor]:
        return torch.zeros(*batch_shape, self.state_size) if self.state_size else None

    @torch.no_grad()
    def act(self, obs, avail, h, explore: bool = True, epsilon: float = 0.0, **unused):
        """Epsilon-greedy (``explore``) or greedy actions for ``[B, N, D]`` observations.

        Returns ``actions [B, N]`` int64, ``logp [B, N]`` (zeros: not a stochastic
        policy) and the next state ``[B, N, S + A]`` (``None`` if stateless).
        """
        B, N = obs.shape[:2]
        x, hid, S = obs.reshape(B * N, -1), None, self.net.state_size
        if h is not None:
            h = h.reshape(B * N, -1)
            hid = h[:, :S] if S else None
            if self.use_last_action:
                x = torch.cat([x, h[:, S:]], -1)
        q, hid = self.net.step(x, hid)
        av = None if avail is None else avail.reshape(B * N, -1).bool()
        a = epsilon_greedy(q, av, float(epsilon) if explore else 0.0)
        parts = ([] if hid is None else [hid]) + ([F.one_hot(a, self.n_actions).float()] if self.use_last_action else [])
        h_next = torch.cat(parts, -1).reshape(B, N, -1) if parts else None
        return a.reshape(B, N), torch.zeros(B, N), h_next

    def _forward(self, batch, **kwargs):  # RLlib's generic inference path (not used by our runner)
        a, _, _ = self.act(batch["obs"].unsqueeze(1), None, self.initial_state((batch["obs"].shape[0], 1)), explore=False)
        return {"actions": a.squeeze(1)}

    # --- training
    @property
    def last_dim(self) -> int:
        """Size of the last-action one-hot in the input (0 without ``last_action``)."""
        return self.n_actions if self.use_last_action else 0

    def q_sequence(self, net: AgentNetwork, obs: torch.Tensor, actions: torch.Tensor, steps=None) -> torch.Tensor:
        """Unroll ``net`` over whole episodes from the zero state: ``obs [E, T+1, N, D]``, ``actions [E, T, N]``,
        ``steps [E]`` (optional: used steps, length + 1; the network may skip the rest) -> ``Q [E, T+1, N, A]``."""
        N = obs.shape[2]
        q = net.sequence(agent_inputs(obs, actions, self.last_dim), None if steps is None else steps.repeat_interleave(N))
        return q.reshape(-1, N, *q.shape[1:]).transpose(1, 2)

    def _forward_train(self, batch: Dict[str, torch.Tensor], **kwargs) -> Dict[str, torch.Tensor]:
        """Online ``q`` and target ``q_target``: both ``[E, T+1, N, A]``. With ``batch["steps"]`` and a
        network that skips padding, both read one packed input of the used steps (zero Q after them)."""
        obs, actions, steps = batch["obs"], batch["actions"], batch.get("steps")
        if steps is None or not self.net.skips_padding:
            with torch.no_grad():
                q_target = self.q_sequence(self.target, obs, actions, steps)
            return {"q": self.q_sequence(self.net, obs, actions, steps), "q_target": q_target}
        packed = PackedEpisodes(steps, obs.shape[2], obs.shape[1])
        x = packed.inputs(obs, actions, self.last_dim)
        with torch.no_grad():
            q_target = packed.unpack(self.target.packed(x, packed.batch_sizes))
        return {"q": packed.unpack(self.net.packed(x, packed.batch_sizes)), "q_target": q_target}

    def sync_target(self) -> None:
        self.target.load_state_dict(self.net.state_dict())


# ============================================================ mixers
class MixerModule(TorchRLModule):
    """Learner-only RLModule holding one team's :class:`QMixer` and its target copy.

    ``model_config``: ``n_agents``, ``state_dim``, ``mixing_embed``,
    ``hypernet_layers``, ``hypernet_embed``.
    """

    def setup(self):
        c = self.model_config
        self.net = QMixer(int(c["n_agents"]), int(c["state_dim"]), int(c["mixing_embed"]), int(c["hypernet_layers"]), int(c["hypernet_embed"]))
        self.target = copy.deepcopy(self.net).requires_grad_(False)

    def _forward(self, batch, **kwargs):
        return {}

    def _forward_train(self, batch: Dict[str, torch.Tensor], **kwargs) -> Dict[str, torch.Tensor]:
        """``{"qs": [E, T, n], "state": [E, T, S]}`` -> ``{"q_tot": [E, T]}``."""
        return {"q_tot": self.net(batch["qs"], batch["state"])}

    def sync_target(self) -> None:
        self.target.load_state_dict(self.net.state_dict())


# ============================================================ learner
class ValueDecompLearner(RunAccess, SeamLearner):
    """Masked TD loss on joint batches of whole episodes.

    Input: one ``MultiAgentBatch`` whose single policy batch holds the columns of
    :class:`~marl.engine.replay.JointEpisodeBuffer` (``"<module>/obs"``, ...,
    ``"state"``, ``"terminated"``, ``"filled"``; rows = episodes, so sharding over
    DDP learners keeps episodes whole). Per team: ``Q_tot`` of the taken actions
    (none: per agent), double-Q TD(lambda) target from the target networks,
    loss ``sum(mask * td^2) / sum(mask)``. ``timesteps["sync_target"]`` hard-copies
    the online networks into the targets after the step.
    """

    def configure_optimizers_for_module(self, module_id, config=None):
        module = self.module_for_optimizer(module_id)
        params = self.get_parameters(module)
        if self.cfg.optimizer == "rmsprop":  # pymarl: RMSprop(alpha 0.99, eps 1e-5)
            opt = torch.optim.RMSprop(params, alpha=0.99, eps=1e-5)
        else:
            opt = torch.optim.Adam(params, fused=True)  # one kernel call per step (see PPOLearner)
        self.register_optimizer(module_id=module_id, optimizer=opt, params=params, lr_or_lr_schedule=config.lr)

    def update(self, batch=None, training_data=None, timesteps=None, **kwargs):
        """One gradient step on a joint batch; returns reduced metrics."""
        timesteps = timesteps or {}
        cols = next(iter(self.begin_update(batch, training_data, timesteps).values()))
        self.gradient_step(split_joint(cols, list(self.run.family.modules)))
        if timesteps.get("sync_target"):
            self.sync_targets()
        self.after_gradient_based_update(timesteps=timesteps)
        return self.metrics.reduce()

    def sync_targets(self) -> None:
        for mid in self.module.keys():
            self.module[mid].unwrapped().sync_target()

    def compute_losses(self, *, fwd_out, batch):
        layout = self.run.family
        j = batch[JOINT]
        per_agent = {mid: self._agent_terms(mid, fwd_out[mid], batch[mid]) for mid in layout.modules}
        total = 0.0
        for team, members in layout.teams.items():
            total = total + self._team_loss(team, members, per_agent, j)
        return {layout.modules[0]: total}

    def compute_loss_for_module(self, *, module_id, config, batch, fwd_out):
        raise NotImplementedError("the loss is joint over modules: see compute_losses")

    def _agent_terms(self, mid: str, out: Dict[str, torch.Tensor], b: Dict[str, torch.Tensor]) -> Dict[str, torch.Tensor]:
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
        team_r = rewards.mean(-1) if self.run.family.team_reward == "mean" else rewards.sum(-1)
        filled, term = j["filled"].bool(), j["terminated"].bool()
        if cfg.mixer == "none":
            q_tot, next_tot, r = q_taken, q_next, team_r.unsqueeze(-1).expand_as(q_taken)
            mask = filled.unsqueeze(-1) & alive
        elif cfg.mixer == "vdn":
            q_tot, next_tot, r, mask = q_taken.sum(-1), q_next.sum(-1), team_r, filled
        else:
            # the mixers run on filled steps only: padding costs nothing and its state is never read
            mod = self.module[f"mixer_{team}"]
            q_tot = on_mask(lambda q, s: mod.forward_train({"qs": q, "state": s})["q_tot"], filled, q_taken, j["state"][:, :-1])
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


def split_joint(cols: Dict[str, torch.Tensor], modules: List[str]) -> Dict[str, Dict[str, torch.Tensor]]:
    """Joint columns -> ``{module: {obs, actions, avail, rewards, alive, steps}, JOINT: {state, terminated,
    filled}}`` (views of ``cols``, no copies); ``steps [E]`` = episode length + 1, the used observations.

    Padding past an episode's end can hold anything (even NaN): the agent networks skip or zero it
    (:meth:`~marl.algos.networks.base.AgentNetwork.sequence`), the mixers and losses read filled steps only.
    """
    filled = cols["filled"].bool()
    steps = filled.sum(1) + 1
    out: Dict[str, Dict[str, torch.Tensor]] = {m: {"steps": steps} for m in modules}
    for k, v in cols.items():
        if "/" in k:
            m, field = k.split("/", 1)
            out[m][field] = v
    out[JOINT] = {"state": cols["state"], "terminated": cols["terminated"], "filled": filled}
    return out


# ============================================================ algorithm
class ValueDecomp(Trainer):
    """IQL / VDN / QMIX training step.

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
    transform_hooks = ("on_rollout", "on_episodes", "on_batch")  # on_episodes: transform_episodes in training_step

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
            raise MarlError(f"{cfg.algo} stores whole episodes and needs a finite episode_limit; {info.family}:{info.scenario} has none.")
        if cfg.mixer == "qmix" and info.state_dim <= 0:
            raise MarlError(f"qmix mixes on the global state, but {info.family}:{info.scenario} has state_dim=0.")

    @classmethod
    def check_mapping(cls, cfg, mapping) -> None:
        """A module's agents must play for one team (each team gets its own mixer); the replay buffer
        fits the env copies and the batch (:func:`~marl.engine.replay.check_buffer_size`).

        Raises:
            MarlError: a module spans teams (names the module, its teams and the fix), or a
                buffer_size too small for the env copies, batch_size or learning_starts_episodes.
        """
        info, c = mapping.info, config_view(cfg)
        check_buffer_size(c.buffer_size, info.num_envs * max(1, c.num_env_runners), c.batch_size,
                          c.learning_starts_episodes)
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
        dummy = gym.spaces.Box(-1.0, 1.0, (1,), np.float32)
        return {
            f"mixer_{team}": RLModuleSpec(
                module_class=MixerModule,
                observation_space=dummy,
                action_space=dummy,
                learner_only=True,
                model_config={
                    "n_agents": len(members),
                    "state_dim": mapping.info.state_dim,
                    "mixing_embed": cfg.mixing_embed,
                    "hypernet_layers": cfg.hypernet_layers,
                    "hypernet_embed": cfg.hypernet_embed,
                },
            )
            for team, members in cls.team_layout(mapping).items()
        }

    @classmethod
    def family_context(cls, cfg, env, mapping) -> ValueDecompLayout:
        """The :class:`ValueDecompLayout` of ``env`` under ``mapping``."""
        shapes = {
            mid: {"n": mapping.n_agents(mid), "obs_dim": mapping.obs_dim(mid), "n_actions": mapping.group_info(mid).n_actions}
            for mid in mapping.modules
        }
        return ValueDecompLayout(
            teams=cls.team_layout(mapping),
            modules=list(mapping.modules),
            team_reward="mean" if env.info.shared_reward else "sum",
            shapes=shapes,
            episode_limit=int(env.info.episode_limit),
            state_dim=int(env.info.state_dim),
            extra_columns={name: (torch.zeros(0, dtype=col.dtype).numpy().dtype, col.fill)
                           for name, col in env.info.extra_columns.items()},
        )

    # --------------------------------------------------------------- training
    def setup(self, config):
        super().setup(config)
        cfg, layout = self.cfg, self.run.family
        runners = max(1, cfg.num_env_runners)
        self.buffer = JointEpisodeBuffer(
            cfg.buffer_size, layout.episode_limit, self.run.num_envs * runners, layout.shapes, layout.state_dim,
            layout.extra_columns,
        )
        self.rng = np.random.default_rng(cfg.seed)
        self.progress.update(pending_episodes=0, last_target_sync=0, updates=0, reward_stats=[0.0, 0.0, 0.0])

    def epsilon(self) -> float:
        c = self.cfg
        return epsilon_at(self.progress["env_steps"], c.epsilon_start, c.epsilon_end, c.epsilon_anneal_steps)

    def training_step(self) -> StepOutput:
        c, p = self.cfg, self.progress
        eps = self.epsilon()
        rollout = self.sample_rollouts(epsilon=eps)
        new = self.buffer.add_rollout(rollout)
        self.transform_episodes(self.buffer, self.buffer.just_committed)  # reward_redistribution: marl/transforms.py
        if c.standardise_rewards:
            for m in rollout["modules"].values():
                p["reward_stats"] = merge_moments(p["reward_stats"], m["rewards"])
        episodes = p["episodes"] + len(rollout["metrics"].get("episode_return", []))
        n_updates = 0
        if len(self.buffer) >= max(c.batch_size, c.learning_starts_episodes):
            p["pending_episodes"] += new
            n_updates = int(p["pending_episodes"] // c.episodes_per_update)
            p["pending_episodes"] -= n_updates * c.episodes_per_update
        metrics: Dict[str, float] = {}
        for i in range(n_updates):
            last = i == n_updates - 1
            # pymarl: copy the targets after the gradient step once target_update_interval
            # episodes have passed since the last copy (all steps of an iteration see one count)
            sync = last and episodes - p["last_target_sync"] >= c.target_update_interval
            if sync:
                p["last_target_sync"] = episodes
            metrics = self.update_learners(self.joint_batch(), sync_weights=last, sync_target=sync)
        p["updates"] += n_updates
        metrics.update(epsilon=eps, buffer_episodes=float(len(self.buffer)), updates=float(p["updates"]))
        return StepOutput(rollout, metrics)

    def joint_batch(self) -> MultiAgentBatch:
        """``batch_size`` episodes from the buffer as one policy batch (one module id)."""
        b = self.buffer.sample(self.cfg.batch_size, self.rng)
        if self.cfg.standardise_rewards:  # EPyMARL: (r - mean) / std over all rewards seen
            n, mean, m2 = self.progress["reward_stats"]
            std = max(float(np.sqrt(m2 / max(n, 1.0))), 1e-6)
            for k in [k for k in b if k.endswith("/rewards")]:
                b[k] = (b[k] - mean) / std
        first = self.run.family.modules[0]
        return MultiAgentBatch({first: SampleBatch(b)}, env_steps=int(b["filled"].sum()))

    # --------------------------------------------------------------- checkpoints
    def get_state(self, components=None, *, not_components=None, **kwargs):
        state = super().get_state(components, not_components=not_components, **kwargs)
        if not wants_component(self, "replay_buffer", components, not_components):
            return state  # a component's state only (RLlib's save_to_path asks per component)
        state["replay_rng"] = self.rng.bit_generator.state  # the buffer's sampling draws (exact resume)
        if self.cfg.checkpoint_buffer:
            state["replay_buffer"] = self.buffer.get_state()
        return state

    def set_state(self, state):
        super().set_state(state)
        if "replay_buffer" in state:
            self.buffer.set_state(state["replay_buffer"])
        if "replay_rng" in state:
            self.rng.bit_generator.state = state["replay_rng"]
