"""The on-policy core: rollout -> sequences -> advantages -> epochs x minibatches of gradient steps.

An on-policy algorithm (MAPPO and IPPO in ``algos/ppo.py``) is its config, its RLModule and its
minibatch loss; this module holds the rest (``docs/adding_an_algorithm.md`` walks through it):

* critic inputs: ``critic`` key kinds :data:`CRITICS` (``state``: global state plus agent one-hot,
  one row per agent; ``team``: the state once per env step, one value head per agent; ``obs``:
  the agent's own observation), with ``auto`` resolved once, when the config is built
  (:class:`CriticChoice`);
* :func:`rollout_to_sequences`: the runners' time-major rollout ``[T, B, N, ...]`` -> per-module
  rows of whole (env copy, agent) sequences, so that learner sharding and GAE never cut one;
* the advantage estimator: :meth:`OnPolicyLearner.advantages` (GAE, :func:`gae`), called on
  denormalised values after the time-limit bootstrap (:func:`next_values`);
* :class:`OnPolicyLearner`: values of the current critic, advantages and returns, training rows
  (steps, GRU chunks or env steps), ``epochs`` x ``num_minibatches`` gradient steps, and the
  per-minibatch loss the algorithm supplies (:attr:`OnPolicyLearner.loss_terms`);
* :class:`OnPolicyTrainer`: the training step (sample -> sequences -> one learner update).

Sources: Schulman et al. 2016 (GAE, arXiv 1506.02438, eq. 16); Yu et al. 2022, "The Surprising
Effectiveness of PPO in Cooperative Multi-Agent Games" (MAPPO, arXiv 2103.01955) and its official
code: value normalisation, advantage normalisation over active agents, death masking, GRU training
on chunks of ``data_chunk_length`` steps from the stored hidden state.

Config keys the core reads (on top of the engine's): ``critic``, ``recurrent``, ``chunk_length``,
``gamma``, ``gae_lambda``, ``epochs``, ``num_minibatches``, ``value_norm``, ``advantage_norm``,
``adam_eps`` and, if the schema has it, ``torch_compile``. Modules it trains have ``team`` and
``recurrent`` (bool), ``values(critic_in)``, ``value_norm`` (an object with ``update``,
``normalize``, ``denormalize``; ``marl.algos.policy_gradient.ValueNorm``) and a ``_forward_train``
whose output the algorithm's loss reads.
"""

from __future__ import annotations

import operator
from typing import Any, Callable, Dict, Iterator, Optional, Set, Tuple

import torch
from ray.rllib.policy.sample_batch import MultiAgentBatch, SampleBatch

from marl.config.checks import chunk_steps, minibatches_beyond_rows
from marl.config.critic import CRITICS, CriticChoice, resolve_critic  # noqa: F401  (the core's critic kinds)
from marl.engine.context import RunAccess
from marl.engine.rllib_seam import SeamLearner
from marl.engine.trainer import StepOutput, Trainer
from marl.env import flatten_columns, map_obs, nest_columns
from marl.errors import TrainingDiverged

MODEL_INPUTS = ("h0", "starts", "critic_in")  # minibatch columns only the forward reads (not per loss row)


# ============================================================ critic inputs
def critic_model_config(kind: str, mapping: Any, mid: str) -> Dict[str, Any]:
    """The critic's ``model_config`` entries of module ``mid``: ``critic_dim`` (``obs``: the module's
    observation width; ``state``: state width + agents of the module; ``team``: state width),
    ``critic_heads`` (agents of the module for ``team``, else 1) and ``team_critic``."""
    n = mapping.n_agents(mid)
    dim = {"obs": mapping.obs_dim(mid), "state": mapping.info.state_dim + n, "team": mapping.info.state_dim}[kind]
    return {"critic_dim": dim, "critic_heads": n if kind == "team" else 1, "team_critic": kind == "team"}


def critic_inputs(kind: str, obs: Any, state: torch.Tensor, n_agents: int) -> Any:
    """Critic input per agent.

    Args:
        kind: ``"state"`` (MAPPO: global state plus agent one-hot) or ``"obs"``
            (IPPO: the agent's own observation, which already carries the id).
        obs: ``[..., N, D]`` (structured: key -> ``[..., N, *shape_k]``); state: ``[..., S]``.
    Returns:
        ``[..., N, C]`` (``obs`` itself for ``"obs"``, structured or not).
    """
    if kind == "obs":
        return obs
    s = state.unsqueeze(-2).expand(*state.shape[:-1], n_agents, state.shape[-1])
    eye = torch.eye(n_agents, dtype=s.dtype).expand(*state.shape[:-1], n_agents, n_agents)
    return torch.cat([s, eye], -1)


# ============================================================ rollout -> sequences
def rollout_to_sequences(rollout: Dict[str, Any], critic: str) -> MultiAgentBatch:
    """Time-major rollout ``[T, B, N, ...]`` -> per-module rows ``[B*N, T(+1), ...]`` for the learner.

    Rows are (env copy, agent) sequences so that sharding across learners and GAE along time never
    cut a sequence; ``obs`` and ``critic_in`` have ``T+1`` steps (the last bootstraps),
    ``final_critic_in`` the critic inputs of the final observations. ``critic="team"``: rows are env
    copies, per-agent columns ``[B, N, T(+1), ...]`` and the critic's ``[B, T(+1), S]`` (the state
    once per env step).
    """
    policy_batches = {}
    state, final_state = rollout["state"], rollout["final_state"]  # [T+1, B, S], [T, B, S]
    team = critic == "team"

    def seq_rows(v: torch.Tensor) -> Any:  # [T(+1), B, N, ...] -> [B*N, T(+1), ...] (team: [B, N, T(+1), ...])
        v = v.movedim(0, 2)
        return (v if team else v.reshape(v.shape[0] * v.shape[1], *v.shape[2:])).contiguous().numpy()

    for mid, m in rollout["modules"].items():
        N = m["alive"].shape[2]
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
        # structured observations travel as one column per key ("obs/image", ...): SampleBatch keeps flat columns
        rows = {k: seq_rows(v) for k, v in flatten_columns(cols).items()}
        if team:
            rows["critic_in"] = state.movedim(0, 1).contiguous().numpy()
            rows["final_critic_in"] = final_state.movedim(0, 1).contiguous().numpy()
        else:
            for k, o, s_ in (("critic_in", m["obs"], state), ("final_critic_in", m["final_obs"], final_state)):
                rows.update(flatten_columns({k: map_obs(seq_rows, critic_inputs(critic, o, s_, N))}))
        policy_batches[mid] = SampleBatch(rows)
    env_steps = int(rollout["terminated"].numel())
    return MultiAgentBatch(policy_batches, env_steps=env_steps)


def final_values(module: Any, final_in: torch.Tensor, truncated: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    """Normalised critic values of the final observations, computed only where an episode was
    truncated (the only place :func:`next_values` reads them); zeros elsewhere.

    Args:
        final_in: critic inputs ``[R, T, C]``; truncated: ``[R, T]`` bool; like: a ``[R, T(, N)]``
            tensor of the output's shape and dtype.
    """
    out = torch.zeros_like(like)
    if bool(truncated.any()):
        out[truncated] = module.values(map_obs(lambda x: x[truncated], final_in))
    return out


def critic_values(module: Any, b: Dict[str, torch.Tensor]) -> Tuple[torch.Tensor, torch.Tensor]:
    """Normalised values of one module's sequences (:func:`rollout_to_sequences`), time last:
    ``[R, T+1]`` of the observed states and ``[R, T]`` of the final observations (team critic:
    ``[B, N, T+1]`` and ``[B, N, T]``, one value head per agent)."""
    truncated = b["truncated"]
    if not module.team:
        v = module.values(b["critic_in"])
        return v, final_values(module, b["final_critic_in"], truncated, v[:, :-1])
    v = module.values(b["critic_in"]).movedim(-1, 1)  # [B, T+1, N] -> [B, N, T+1]
    vf = final_values(module, b["final_critic_in"], truncated[:, 0], v[..., :-1].movedim(1, -1))
    return v, vf.movedim(-1, 1)


def env_steps(x: torch.Tensor) -> torch.Tensor:
    """Per-agent columns of the team layout ``[B, N, T, ...]`` -> one row per env step ``[B*T, N, ...]``."""
    x = x.movedim(1, 2)
    return x.reshape(x.shape[0] * x.shape[1], *x.shape[2:])


# ============================================================ advantages
def gae(
    rewards: torch.Tensor,
    values: torch.Tensor,
    next_values: torch.Tensor,
    dones: torch.Tensor,
    gamma: float,
    lam: float,
) -> torch.Tensor:
    """Generalized advantage estimation (Schulman et al. 2016, eq. 16), time on the last axis.

    Args:
        rewards: ``[..., T]`` reward of step ``t``.
        values: ``[..., T]`` ``V(s_t)`` (denormalised).
        next_values: ``[..., T]`` value of the state after step ``t``: ``V(s_{t+1})``,
            the value of the final observation where the episode was truncated at
            ``t`` (time limits bootstrap), and 0 where it terminated.
        dones: ``[..., T]`` bool, an episode ended at step ``t`` (terminated or
            truncated): the advantage recursion stops there.
        gamma, lam: discount and GAE lambda.
    Returns:
        ``A_t = delta_t + gamma*lam*(1-done_t)*A_{t+1}`` with
        ``delta_t = r_t + gamma*next_value_t - V(s_t)``, shape ``[..., T]``.
    """
    deltas = rewards + gamma * next_values - values
    carry = (~dones).to(values.dtype) * (gamma * lam)
    adv = torch.zeros_like(values)
    last = torch.zeros_like(values[..., 0])
    for t in range(values.shape[-1] - 1, -1, -1):
        last = deltas[..., t] + carry[..., t] * last
        adv[..., t] = last
    return adv


def next_values(
    values: torch.Tensor, final_values: torch.Tensor, terminated: torch.Tensor, truncated: torch.Tensor
) -> torch.Tensor:
    """Value of the state after each step, ``[..., T]``.

    Args:
        values: ``[..., T+1]`` values of the observed states (the last is the bootstrap state).
        final_values: ``[..., T]`` values of the final observation of episodes that ended at ``t``.
        terminated, truncated: ``[..., T]`` bool.
    Returns:
        ``values[t+1]`` normally; ``final_values[t]`` where the episode was truncated
        (a time limit is not the end of the task, so it bootstraps); 0 where it terminated.
    """
    nxt = torch.where(truncated, final_values, values[..., 1:])
    return torch.where(terminated, torch.zeros_like(nxt), nxt)


def normalize_advantages(adv: torch.Tensor, active: torch.Tensor) -> torch.Tensor:
    """Zero mean, unit std over active entries only (dead agents excluded; MAPPO code, Yu et al. 2022)."""
    a = adv[active]
    if a.numel() < 2:
        return adv
    return (adv - a.mean()) / (a.std() + 1e-5)


def explained_variance(pred: torch.Tensor, target: torch.Tensor, mask: torch.Tensor) -> float:
    """``1 - Var[target - pred] / Var[target]`` over masked entries (1 is perfect, <=0 useless)."""
    p, t = pred[mask], target[mask]
    if t.numel() < 2 or t.var() == 0:
        return 0.0
    return float(1 - (t - p).var() / t.var())


# ============================================================ learner
def loss_rows(module: Any, batch: Dict[str, Any]) -> Dict[str, Any]:
    """The per-row columns of a minibatch as the loss reads them, one row per step and agent: nested
    columns (GRU chunks ``[M, L, ...]``, team env steps ``[M, N, ...]``) flattened to ``[M*L or M*N, ...]``,
    the forward's own inputs (:data:`MODEL_INPUTS`) left out."""
    nested = module.recurrent or module.team
    return {
        k: map_obs(lambda v: v.reshape(-1, *v.shape[2:]), v) if nested else v
        for k, v in batch.items()
        if k not in MODEL_INPUTS
    }


class OnPolicyLearner(RunAccess, SeamLearner):
    """Learner of the on-policy algorithms: advantages, then epochs x minibatches of gradient steps.

    Input (one ``MultiAgentBatch``, sharded across learners by rows): per module, (env copy, agent)
    sequences ``[R, T(+1), ...]`` (:func:`rollout_to_sequences`). :meth:`update` computes values with
    the current critic (:meth:`prepare`), cuts training rows (:meth:`training_rows`) and runs
    :meth:`run_epochs`: ``epochs`` passes of ``num_minibatches`` gradient steps (every learner takes
    the same number of steps, as DDP requires), each on :attr:`loss_terms`.

    An algorithm subclasses it and sets :attr:`loss_terms` and :meth:`loss_params`; it may override
    :meth:`advantages` (the estimator), :meth:`prepare` (e.g. a critic of another kind), :meth:`prepare_modules`
    (advantages that mix modules) or
    :meth:`run_epochs` (the update order, e.g. agent by agent).
    """

    #: The minibatch loss ``(module, fwd_out, rows, *loss_params()) -> (loss, parts)``: a pure function of
    #: tensors (``torch_compile`` compiles it), ``rows`` the minibatch's per-row columns ``[M, ...]``
    #: (``actions``, ``avail``, ``logp_old``, ``advantages``, ``returns`` in raw units, ``values_old`` in
    #: normalised units, ``active``), ``parts`` a dict of scalar tensors logged as metrics.
    loss_terms: Callable[..., Tuple[torch.Tensor, Dict[str, torch.Tensor]]]
    finite_terms = ("policy_loss", "value_loss")  # parts that stop the run (TrainingDiverged) if not finite

    def loss_params(self) -> Tuple[Any, ...]:
        """The constants passed to :attr:`loss_terms` after its tensors (read once, at build)."""
        return ()

    def build(self) -> None:
        super().build()
        self._loss_terms = type(self).loss_terms
        self._loss_params = self.loss_params()
        if getattr(self.cfg, "torch_compile", False):  # forward and loss as two graphs: ValueNorm stays eager
            for mid in self.module.keys():
                module: Any = self.module[mid].unwrapped()
                module._forward_train = torch.compile(module._forward_train, dynamic=False)
            self._loss_terms = torch.compile(self._loss_terms, dynamic=False)

    def configure_optimizers_for_module(self, module_id, config=None):
        # Adam eps from the config (MAPPO code: 1e-5; RLlib's default is 1e-8); PyTorch's fused kernel: one call per
        # step instead of a Python loop over the parameters (7x faster on the 2-core CPU, same update to ~1e-7)
        params = self.get_parameters(self.module_for_optimizer(module_id))
        opt = torch.optim.Adam(params, eps=self.cfg.adam_eps, fused=True)
        self.register_optimizer(module_id=module_id, optimizer=opt, params=params, lr_or_lr_schedule=config.lr)

    def clip_groups(self, module_id: str) -> Optional[Dict[str, Set[Any]]]:
        """With ``clip_per_network``: the critic's parameters (names under ``critic``) as one clip group, the
        actor's (every other parameter) as the other, as EPyMARL's and the MAPPO code's two optimisers clip
        them; otherwise one norm over both."""
        if not getattr(self.cfg, "clip_per_network", False):
            return None
        return self.groups_by_head(module_id, {"critic": "critic"}, default="actor")

    def value_normalizer(self, module: Any) -> Optional[Any]:
        """The module's value normaliser if the config normalises values (``value_norm``), else ``None``."""
        return module.value_norm if self.cfg.value_norm else None

    # ---------------------------------------------------------------- advantages
    def advantages(
        self, rewards: torch.Tensor, values: torch.Tensor, next_values: torch.Tensor, dones: torch.Tensor
    ) -> torch.Tensor:
        """The advantage estimator, time on the last axis, all ``[..., T]`` in raw (denormalised) units:
        GAE with ``gamma`` and ``gae_lambda`` (:func:`gae`). Returns are ``advantages + values``."""
        return gae(rewards, values, next_values, dones, self.cfg.gamma, self.cfg.gae_lambda)

    @torch.no_grad()
    def prepare(self, mid: str, b: Dict[str, torch.Tensor]) -> Dict[str, torch.Tensor]:
        """Values, advantages, returns and training columns of one module's sequences ``b``.

        Returns columns with time still on its own axis: ``[R, T, ...]`` (team critic: per-agent
        columns ``[B, N, T, ...]`` and ``critic_in [B, T, S]``); advantages normalised over active
        agents if ``advantage_norm``. Logs ``explained_variance`` and ``value_mean``.
        """
        module: Any = self.module[mid].unwrapped()
        v_norm, v_final = critic_values(module, b)
        vn = self.value_normalizer(module)
        denorm = vn.denormalize if vn is not None else (lambda x: x)
        v, vf = denorm(v_norm), denorm(v_final)
        term, trunc, active = b["terminated"], b["truncated"], b["alive"]
        nv = next_values(v, vf, term, trunc)
        adv = self.advantages(b["rewards"], v[..., :-1], nv, term | trunc)
        returns = adv + v[..., :-1]
        if self.cfg.advantage_norm:
            adv = normalize_advantages(adv, active)
        self.metrics.log_value((mid, "explained_variance"), explained_variance(v[..., :-1], returns, active), window=1)
        self.metrics.log_value(
            (mid, "value_mean"), float(v[..., :-1][active].mean()) if active.any() else 0.0, window=1
        )
        t = b["alive"].dim() - 1  # time axis of the per-agent columns (1, or 2 for the team layout)
        out = {
            "obs": map_obs(lambda x: x.narrow(t, 0, adv.shape[-1]), b["obs"]),
            "critic_in": map_obs(lambda x: x[:, :-1], b["critic_in"]),
            "actions": b["actions"],
            "logp_old": b["logp"],
            "advantages": adv,
            "returns": returns,
            "values_old": v_norm[..., :-1],
            "active": active,
        }
        for k in ("avail", "h", "starts"):
            if k in b:
                out[k] = b[k]
        out.update(self.extra_columns(b["rewards"], v[..., :-1], nv, active))
        return out

    def extra_columns(
        self, rewards: torch.Tensor, values: torch.Tensor, next_values: torch.Tensor, active: torch.Tensor
    ) -> Dict[str, torch.Tensor]:
        """Columns an estimator adds to :meth:`prepare`'s output, from the same ``[..., T]`` tensors the
        advantages come from (raw units; ``active`` bool); none by default. Advantage Alignment adds the
        one-step advantages its co-player weight sums (``algos/advantage_alignment.py``)."""
        return {}

    def prepare_modules(self, batches: Dict[str, Dict[str, torch.Tensor]]) -> Dict[str, Dict[str, torch.Tensor]]:
        """:meth:`prepare` of every module; an estimator that reads other modules' advantages (Advantage
        Alignment's co-player term, ``algos/advantage_alignment.py``) overrides this."""
        return {mid: self.prepare(mid, b) for mid, b in batches.items()}

    def training_rows(self, mid: str, data: Dict[str, torch.Tensor]) -> Dict[str, torch.Tensor]:
        """Training rows of one module, made contiguous once per update (every epoch then only indexes them).

        MLP actors: rows are single steps (``R*T`` of them). GRU actors: rows are chunks of
        ``chunk_length`` steps (the whole rollout if it is 0 or does not divide ``T``) starting from the
        stored hidden state ``h0``. Team critic: rows are env steps ``[B*T, N, ...]``, ``critic_in [B*T, S]``.
        """
        module: Any = self.module[mid].unwrapped()
        if module.team:
            critic_in = data.pop("critic_in")  # [B, T, S]
            rows = {k: map_obs(env_steps, v) for k, v in data.items()}
            rows["critic_in"] = critic_in.reshape(-1, critic_in.shape[-1])
            return rows
        if module.recurrent:
            R, T = data["actions"].shape[:2]
            L = chunk_steps(self.cfg.chunk_length, T)
            flat = {k: map_obs(lambda v: v.reshape(R * (T // L), L, *v.shape[2:]), v) for k, v in data.items()}
            flat["h0"] = flat.pop("h")[:, 0]
            flat["starts"] = flat["starts"].clone()
            flat["starts"][:, 0] = False  # h0 already is the state at the chunk start
            return flat
        return {k: map_obs(lambda v: v.reshape(-1, *v.shape[2:]), v) for k, v in data.items()}

    # ---------------------------------------------------------------- update
    def minibatches(self, flat: Dict[str, torch.Tensor]) -> Iterator[Dict[str, torch.Tensor]]:
        """Yield ``num_minibatches`` minibatches of one shuffled epoch over :meth:`training_rows`:
        every row exactly once (sizes differ by at most one)."""
        K = self.cfg.num_minibatches
        if K == 1:  # the whole batch: no shuffle or copy needed
            yield flat
            return
        n = flat["actions"].shape[0]
        perm = torch.randperm(n, device=flat["actions"].device)
        sizes = [len(idx) for idx in perm.tensor_split(K)]
        # one row gather per column and epoch, then contiguous views: a third of the time of gathering
        # every minibatch by advanced indexing (measured), and the same rows in the same order
        parts = {k: map_obs(lambda v: v.index_select(0, perm).split(sizes), v) for k, v in flat.items()}
        for i in range(K):
            yield {k: map_obs(operator.itemgetter(i), p) for k, p in parts.items()}

    def run_epochs(self, data: Dict[str, Dict[str, torch.Tensor]]) -> None:
        """``epochs`` passes of ``num_minibatches`` gradient steps, all modules in each step."""
        for _ in range(self.cfg.epochs):
            iters = {mid: self.minibatches(d) for mid, d in data.items()}
            for _k in range(self.cfg.num_minibatches):
                self.gradient_step({mid: next(it) for mid, it in iters.items()})

    def update(self, batch=None, training_data=None, timesteps=None, **kwargs):  # type: ignore[override]  # one MultiAgentBatch
        """One on-policy update on a rollout (see the class docstring); returns reduced metrics."""
        batches = {mid: nest_columns(b) for mid, b in self.begin_update(batch, training_data, timesteps).items()}
        self.run_epochs({mid: self.training_rows(mid, d) for mid, d in self.prepare_modules(batches).items()})
        self.after_gradient_based_update(timesteps=timesteps or {})
        return self.metrics.reduce()

    def compute_loss_for_module(self, *, module_id, config, batch, fwd_out):
        """:attr:`loss_terms` on the minibatch's rows (nested ``[M, L or N, ...]`` columns flattened to
        one row per step and agent), after folding its returns into the value normaliser.

        Raises:
            TrainingDiverged: a part named in :attr:`finite_terms` is NaN or infinite.
        """
        module: Any = self.module[module_id].unwrapped()
        rows = loss_rows(module, batch)
        vn = self.value_normalizer(module)
        if vn is not None:  # in place on the statistics: outside the compiled loss
            vn.update(rows["returns"], rows["active"])
        loss, parts = self._loss_terms(module, fwd_out, rows, *self._loss_params)
        for name in self.finite_terms:
            if not torch.isfinite(parts[name]):
                raise TrainingDiverged(f"{name} of module '{module_id}' is {parts[name].item()} (not finite)")
        self.record_parts(module_id, parts)
        return loss

    def record_parts(self, module_id: str, parts: Dict[str, torch.Tensor]) -> None:
        """Log the loss parts of one minibatch (scalars), each under ``(module_id, name)``. A learner that
        keeps a part for its own use after the epochs takes it here (VDPPO's KL penalty)."""
        for k, v in parts.items():
            self.metrics.log_value((module_id, k), v.item(), window=1)


# ============================================================ training step
class OnPolicyTrainer(Trainer):
    """Training step of the on-policy algorithms: sample ``T x B`` steps from every env runner, build
    per-module sequences for the run's critic (``cfg.critic_kind``, :class:`CriticChoice`), one
    :class:`OnPolicyLearner` update, sync weights."""

    def sequences(self, rollout: Dict[str, Any]) -> MultiAgentBatch:
        """The learners' batch of a rollout (:func:`rollout_to_sequences`)."""
        return rollout_to_sequences(rollout, self.cfg.critic_kind)

    def training_step(self) -> StepOutput:  # type: ignore[override]  # returns what it sampled (Trainer)
        rollout = self.sample_rollouts()
        return StepOutput(rollout, self.update_learners(self.sequences(rollout)))

    #: every on-policy schema gets the minibatch check, whether or not its ``RULES`` list it
    RULES = (minibatches_beyond_rows,)
