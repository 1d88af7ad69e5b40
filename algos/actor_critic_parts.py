"""Pieces shared by the off-policy actor-critics (IDDPG, MADDPG, MATD3, FACMAC, ISAC, MASAC; the algorithms are
in :mod:`marl.algos.ddpg`, :mod:`marl.algos.facmac` and :mod:`marl.algos.sac`): the straight-through Gumbel-softmax
and TD3's smoothing of actions, the TD target, the critics' inputs over every module's agents, and the networks
that read structured observations (image ``Box`` or ``Dict`` spaces: :func:`actor_network`, :class:`CriticEncoders`),
and the recurrent actor trained on whole episodes (:class:`RecurrentActor`, :func:`episode_rows`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, List, Mapping, Optional, Tuple

import gymnasium as gym
import torch
from torch.func import functional_call
from torch.nn import functional as F

from marl.algos.networks.encoders import Encoded, ObsEncoder, module_names
from marl.algos.networks.mlp import MLP
from marl.algos.networks.rnn import RNNAgent
from marl.env import map_obs
from marl.env.rules import episode_limit_hint
from marl.errors import MarlError


JOINT = "__joint__"  # batch key of the step-level columns (state, next_state, terminated): not a module id


# ============================================================ action maps
def gumbel_softmax_st(logits: torch.Tensor, gumbel: Optional[torch.Tensor] = None, temperature: float = 1.0):
    """Straight-through Gumbel-softmax sample of ``logits [..., A]`` (Jang et al. 2017, arXiv 1611.01144,
    Sec. 2-3; MADDPG's discrete actions, Lowe et al. 2017, arXiv 1706.02275): forward the one-hot of
    ``argmax(logits + g)``, backward the gradient of the soft sample ``softmax((logits + g) / temperature)``.
    ``gumbel``: the noise ``g`` (default: fresh ``-log(-log U)``). Returns ``[..., A]`` float."""
    if gumbel is None:
        gumbel = -torch.log(-torch.log(torch.rand_like(logits).clamp(1e-20, 1.0 - 1e-7)))
    soft = torch.softmax((logits + gumbel) / temperature, -1)
    hard = F.one_hot(soft.argmax(-1), logits.shape[-1]).to(soft.dtype)
    return hard - soft.detach() + soft


def smoothed(action: torch.Tensor, low, high, std: float, clip: float, eps: Optional[torch.Tensor] = None):
    """TD3's target policy smoothing (Fujimoto et al. 2018, arXiv 1802.09477, Eq. 14): ``clip(a + clip(std *
    h * eps, -clip * h, clip * h), low, high)`` with ``h = (high - low) / 2`` (TD3's noise is in units of
    its ``[-1, 1]`` actions). ``action [..., K]``; ``eps``: standard normal noise (default: fresh)."""
    half = (high - low) / 2
    eps = torch.randn_like(action) if eps is None else eps
    noise = torch.maximum(torch.minimum(std * half * eps, clip * half), -clip * half)
    return torch.maximum(torch.minimum(action + noise, high), low)


def uniform_actions(x: torch.Tensor, discrete: bool, low: Any = None, high: Any = None) -> torch.Tensor:
    """Uniformly random actions in place of the actor's, for the actor's outputs ``x [B, N, ...]``: continuous
    ``[B, N, K]`` uniform in ``[low, high]`` (``low``, ``high``: ``[K]``); discrete ``[B, N]`` int64, uniform over
    the actions whose logit in ``x [B, N, A]`` (the masked logits) is not masked (an unavailable action's logit is
    ``-1e10``). The first ``random_steps`` env steps of the off-policy actor-critics: TD3's purely exploratory start
    (Fujimoto et al. 2018, arXiv 1802.09477, Sec. 6.1) and FACMAC's ``start_steps`` (Peng et al. 2021, arXiv
    2003.06709; github.com/oxwhirl/facmac)."""
    if discrete:
        logits = torch.zeros_like(x).masked_fill(x <= -1e9, float("-inf"))
        return torch.distributions.Categorical(logits=logits).sample()
    return low + torch.rand(*x.shape[:2], low.shape[-1], dtype=low.dtype, device=low.device) * (high - low)


def critic_target(rewards, terminated, q_next: List[torch.Tensor], gamma: float) -> torch.Tensor:
    """``y = r + gamma (1 - terminated) min_k Q'_k(x', mu'(o'))`` (DDPG, Lillicrap et al. 2016, arXiv 1509.02971,
    Algorithm 1; with two critics TD3's clipped double-Q, Fujimoto et al. 2018, arXiv 1802.09477, Eq. 10).
    ``rewards [B, N]``, ``terminated [B]`` bool (a truncation bootstraps), each ``q_next [B, N]``."""
    q = torch.stack(q_next).min(0).values
    return rewards + gamma * (~terminated).to(q.dtype).unsqueeze(-1) * q


def action_input(module: Any, actions: torch.Tensor) -> torch.Tensor:
    """Stored actions -> critic input ``[B, N, K]``: discrete ``[B, N]`` indices as one-hots."""
    return F.one_hot(actions.long(), module.action_dim).float() if module.discrete else actions


def batch_views(mods: Dict[str, Any], batch: Dict[str, Any]):
    """``(joint, obs, acts, next_obs)`` of a learner batch: the ``JOINT`` columns, and module -> observations
    ``[B, N, D]``, stored actions as critic inputs (:func:`action_input`) and next observations."""
    obs = {m: batch[m]["obs"] for m in mods}
    acts = {m: action_input(mods[m], batch[m]["actions"]) for m in mods}
    return batch[JOINT], obs, acts, {m: batch[m]["next_obs"] for m in mods}


def policy_action(mod: Any, b: Dict[str, Any]) -> torch.Tensor:
    """The actor's current action at ``o`` as the critics read it: continuous ``mu(o) [B, N, K]``, discrete the
    straight-through Gumbel-softmax one-hot ``[B, N, A]`` of the masked logits."""
    a = mod.mu(mod.actor, actor_obs(b), b.get("avail"))
    return gumbel_softmax_st(a) if mod.discrete else a


def target_action(mod: Any, b: Dict[str, torch.Tensor], cfg: Any) -> torch.Tensor:
    """``mu'(o')`` of the target actor: continuous ``[B, N, K]``, with TD3's smoothing noise when
    ``target_noise > 0``; discrete: the one-hot of the masked argmax (a deterministic target policy)."""
    a = mod.mu(mod.actor_target, actor_obs(b, True), b.get("next_avail"))
    if mod.discrete:
        return F.one_hot(a.argmax(-1), mod.action_dim).float()
    if cfg.target_noise > 0:
        a = smoothed(a, mod.low, mod.high, cfg.target_noise, cfg.target_noise_clip)
    return a


# ============================================================ critic inputs
def joint_actions(
    acts: Dict[str, torch.Tensor], mid: str, own: Optional[torch.Tensor] = None, rows: Optional[int] = None
) -> torch.Tensor:
    """All agents' actions as seen by the critics of module ``mid``'s ``N`` agents: ``[B, N, sum_m N_m K_m]``
    (modules in ``acts`` order). With ``own [B, N, K]``, agent ``i``'s row has its own action replaced by
    ``own[:, i]`` and every other agent's as stored (MADDPG's policy gradient, Lowe et al. 2017, arXiv
    1706.02275, Eq. 5: ``a_i = mu_i(o_i)``, ``a_j`` from the buffer). Without ``own`` every row is the same:
    ``rows`` of them (default ``N``; 1 for a critic input shared by all agents, :func:`critic_inputs`)."""
    n = acts[mid].shape[1]
    blocks = []
    for m, a in acts.items():
        if m == mid and own is not None:
            eye = torch.eye(n, dtype=torch.bool, device=a.device).unsqueeze(-1)  # [N(i), N(j), 1]
            blocks.append(torch.where(eye, own.unsqueeze(1), a.unsqueeze(1)).flatten(2))
        else:
            blocks.append(a.flatten(1).unsqueeze(1).expand(-1, n if rows is None else rows, -1))
    return torch.cat(blocks, -1)


def critic_inputs(
    critic: str, obs, state, acts, mid: str, own: Optional[torch.Tensor] = None, agent_id: bool = True
) -> torch.Tensor:
    """The critic input ``[B, N_mid, X]`` of module ``mid``'s agents. ``critic``: ``obs`` (own observation and
    action), ``joint_obs`` (every agent's observation and action, MADDPG; Lowe et al. 2017, arXiv 1706.02275,
    Sec. 4.1) or ``state`` (the state ``[B, S]`` and every action); a shared centralised critic also reads the
    agent's one-hot index when ``agent_id`` (config ``critic_agent_id``). ``obs``/``acts``: module ->
    ``[B, N_m, D_m]`` / ``[B, N_m, K_m]``; ``own``: see :func:`joint_actions`.

    A centralised critic without the agent index and without ``own`` gives every agent of ``mid`` the same input:
    it returns ``[B, 1, X]``, one row per sample, whose ``Q [B, 1]`` broadcasts against per-agent targets
    ``[B, N]`` (the same values and gradients as ``N`` identical rows, for a quarter of the work on 4 agents; the
    shared centralised critic of BenchMARL, Bettini et al. 2024, arXiv 2312.01472, computes one value likewise)."""
    if critic == "obs":
        return torch.cat([obs[mid], acts[mid] if own is None else own], -1)
    n = acts[mid].shape[1]  # not obs[mid]: a state critic's obs may be structured (dicts), and it reads none
    rows = 1 if own is None and not agent_id else n
    ctx = torch.cat([o.flatten(1) for o in obs.values()], -1) if critic == "joint_obs" else state
    parts = [ctx.unsqueeze(1).expand(-1, rows, -1), joint_actions(acts, mid, own, rows)]
    if agent_id and n > 1:
        parts.append(torch.eye(n, device=ctx.device).expand(ctx.shape[0], n, n))
    return torch.cat(parts, -1)


def actor_critic_inputs(cfg: Any, obs, state, acts, current: Dict[str, torch.Tensor], mid: str) -> torch.Tensor:
    """The critic input of module ``mid``'s actor loss (:func:`critic_inputs` of ``cfg.critic`` and
    ``cfg.critic_agent_id``), by ``cfg.policy_gradient``: ``own``, agent ``i``'s row holds its current action
    ``current[mid][:, i]`` and the other agents' stored ``acts`` (Lowe et al. 2017, arXiv 1706.02275, Eq. 5);
    ``joint``, every agent's current action (``current``: module -> ``[B, N_m, K_m]``), the other modules'
    detached so that module ``mid``'s loss moves its own actors only (the centralised policy gradient of FACMAC,
    Peng et al. 2021, arXiv 2003.06709, Sec. 4.2, and BenchMARL's MADDPG and MASAC, Bettini et al. 2024,
    arXiv 2312.01472)."""
    if cfg.policy_gradient == "own":
        return critic_inputs(cfg.critic, obs, state, acts, mid, current[mid], cfg.critic_agent_id)
    joint = {m: a if m == mid else a.detach() for m, a in current.items()}
    return critic_inputs(cfg.critic, obs, state, joint, mid, agent_id=cfg.critic_agent_id)


def q_values(critics: torch.nn.ModuleList, x: torch.Tensor) -> List[torch.Tensor]:
    """Each critic's ``Q [B, N]`` of the inputs ``x [B, N, X]``."""
    return [c(x).squeeze(-1) for c in critics]


def frozen(net: torch.nn.Module, *inputs: torch.Tensor) -> torch.Tensor:
    """``net(*inputs)`` with detached parameters: gradients reach the inputs only (an actor loss that never moves
    the critic; DDPG's actor and critic have their own optimisers, Lillicrap et al. 2016, arXiv 1509.02971)."""
    return functional_call(net, {k: v.detach() for k, v in net.named_parameters()}, inputs)


# ============================================================ structured observations
def actor_network(c: Mapping[str, Any], outputs: int, **net: Any) -> torch.nn.Module:
    """The actor of a module's ``model_config`` ``c``: an :class:`~marl.algos.networks.mlp.MLP` of ``c["obs_dim"]``
    inputs and ``outputs`` outputs, or, for a structured observation (``c["obs_space"]``, a ``Dict``:
    :meth:`marl.mapping.PolicyMapping.obs_space`), the same MLP on the features of an
    :class:`~marl.algos.networks.encoders.ObsEncoder` (layers ``c["encoder"]``; CNN per image key, Mnih et al.
    2015); with ``c["recurrent"]`` a :class:`RecurrentActor` (flat observations; ``c["hidden"]`` wide). Input ``[..., D]`` or key -> ``[..., *shape_k]``; output ``[..., outputs]``. ``net``: the MLP's sizes."""
    space = c.get("obs_space")
    if c.get("recurrent"):  # flat observations only (the trainer's check_env)
        return RecurrentActor(int(c["obs_dim"]), outputs, int(c["hidden"]))
    if space is None:
        return MLP(int(c["obs_dim"]), outputs, init="torch", **net)
    encoder = ObsEncoder(space, c.get("encoder"))
    return Encoded(encoder, MLP(encoder.out_dim, outputs, init="torch", **net))


class CriticEncoders(torch.nn.Module):
    """The critic-side encoders of one module's critics: one :class:`~marl.algos.networks.encoders.ObsEncoder` per
    module with structured observations that the critics read (``critic: obs``: the module's own; ``joint_obs``:
    every such module's, each with the encoder of that module's space; ``state``: none).

    Separate from the actor's encoder (as Stable-Baselines3's TD3 and SAC default, ``share_features_extractor=False``):
    the critic loss trains these, the actor loss neither these nor the actor's features through the critic, so each
    loss moves only its own features and the two optimiser groups stay disjoint. They belong to the reading module
    (not to the observed module), so one module's critic loss never moves another module's parameters and the
    target critics copy exactly what they read (``make_target`` of this module). The twin critics share them
    (Stable-Baselines3's critic: one features extractor for its Q-networks).

    Args:
        spaces: module id -> ``(R_m, obs space)`` of the structured modules read, in the critic input's order;
            ``R_m``: the agents of module ``m`` whose features one critic input holds (``obs``: 1, its own;
            ``joint_obs``: ``N_m``, all of them).
        spec: the config's ``encoder`` dict (layers; missing: defaults).
    Input: module -> observation (``[B, N_m, D_m]`` flat, or key -> ``[B, N_m, *shape_k]``). Output: the same dict
    with each encoded module's entry replaced by its features ``[B, N_m, F_m]`` (others unchanged). ``out_dim``:
    ``sum_m R_m F_m``, what the critic input gains over the model config's ``critic_dim``.
    """

    def __init__(self, spaces: Mapping[str, Tuple[int, gym.spaces.Space]], spec: Optional[Mapping[str, Any]] = None):
        super().__init__()
        self.names = module_names(list(spaces))  # module id -> its encoder's name (a ModuleDict refuses '.')
        self.nets = torch.nn.ModuleDict({self.names[m]: ObsEncoder(space, spec) for m, (_, space) in spaces.items()})
        self.out_dim = sum(int(rows) * int(self.nets[self.names[m]].out_dim) for m, (rows, _) in spaces.items())

    def forward(self, obs: Dict[str, Any]) -> Dict[str, Any]:
        return {m: self.nets[self.names[m]](o) if m in self.names else o for m, o in obs.items()}


def critic_spaces(critic: str, mid: str, structured: Dict[str, Tuple[int, gym.spaces.Space]]):
    """What module ``mid``'s critics encode for ``critic``: :class:`CriticEncoders`' ``spaces`` (module id ->
    ``(R_m, space)``) of ``structured`` (every structured module's ``(N_m, space)``, in mapping order): ``obs``:
    ``mid``'s own, one agent per input; ``joint_obs``: all of them; ``state``: none."""
    if critic == "obs":
        return {mid: (1, structured[mid][1])} if mid in structured else {}
    return dict(structured) if critic == "joint_obs" else {}


def detached(obs: Dict[str, Any]) -> Dict[str, Any]:
    """A critic's observation inputs (module -> tensor, or key -> tensor) detached: the actor loss reads critic
    features without moving the critic's encoders."""
    return {m: {k: v.detach() for k, v in o.items()} if isinstance(o, dict) else o.detach() for m, o in obs.items()}


# ============================================================ layout
@dataclass(frozen=True)
class DDPGLayout:
    """``run.family``: ``modules`` (ids in mapping order: the order of the joint critic inputs), ``shapes`` (module
    -> the replay buffer's ``{"n", "obs_dim", "obs", "n_actions" | "action_dim"}``), ``state_dim``, and
    ``episode_limit`` (steps; 0: unbounded), the length of the episode buffer of recurrent actors."""

    modules: List[str]
    shapes: Dict[str, Dict[str, Any]]
    state_dim: int
    episode_limit: int


# ============================================================ recurrent actors on whole episodes
@dataclass(frozen=True)
class EpisodeObs:
    """What a :class:`RecurrentActor` reads on the learner: a module's observations of whole episodes ``obs [E,
    T+1, N, D]`` (index ``t``: the observation at step ``t``; the last, the bootstrap observation) and which rows
    to return: ``next`` false, the steps ``t = 0..T-1`` (the actions taken), true ``t = 1..T`` (the next actions
    of the TD target)."""

    obs: torch.Tensor
    next: bool = False


def actor_obs(b: Dict[str, Any], nxt: bool = False) -> Any:
    """The actor's input for a module's batch ``b``: ``b["obs"]`` (``nxt``: ``b["next_obs"]``), rows ``[B, N, D]``;
    for a batch of whole episodes (:func:`episode_rows`: ``b["episode_obs"]``) an :class:`EpisodeObs`, which a
    :class:`RecurrentActor` unrolls from each episode's start into the same rows."""
    if "episode_obs" in b:
        return EpisodeObs(b["episode_obs"], nxt)
    return b["next_obs" if nxt else "obs"]


def episode_rows(batch: Dict[str, Dict[str, Any]]) -> Dict[str, Dict[str, Any]]:
    """A learner batch of whole episodes (a :class:`~marl.engine.replay.JointEpisodeBuffer` sample: module ->
    ``obs [E, T+1, N, D]``, ``actions [E, T, N(, K)]``, ``rewards``, ``alive [E, T, N]``, ``avail [E, T+1, N, A]``;
    ``JOINT`` -> ``state [E, T+1, S]``, ``terminated``, ``filled [E, T]``) as the transition rows the off-policy
    actor-critic losses read: ``B = E T`` rows of ``(o_t, a_t, r_t, o_{t+1})``, ``alive`` false on the padding after
    each episode's end (``filled`` false), so that the losses' masked means skip it. Each module keeps its whole
    episodes as ``episode_obs`` for its recurrent actor (:func:`actor_obs`)."""
    j = batch[JOINT]
    filled = j["filled"].bool()

    def rows(x: torch.Tensor) -> torch.Tensor:
        return x.flatten(0, 1)

    out: Dict[str, Dict[str, Any]] = {}
    for m, b in batch.items():
        if m == JOINT:
            continue
        cols = {
            "obs": map_obs(lambda o: rows(o[:, :-1]), b["obs"]),
            "next_obs": map_obs(lambda o: rows(o[:, 1:]), b["obs"]),
            "actions": rows(b["actions"]),
            "rewards": rows(b["rewards"]),
            "alive": rows(b["alive"].bool() & filled.unsqueeze(-1)),
            "episode_obs": b["obs"],
        }
        if "avail" in b:
            cols.update(avail=rows(b["avail"][:, :-1]), next_avail=rows(b["avail"][:, 1:]))
        out[m] = cols
    out[JOINT] = {
        "state": rows(j["state"][:, :-1]),
        "next_state": rows(j["state"][:, 1:]),
        "terminated": rows(j["terminated"]),
    }
    return out


class RecurrentActor(torch.nn.Module):
    """A recurrent actor: pymarl's RNN agent, ``FC(D -> H) -> ReLU -> GRU(H) -> FC(H -> outputs)`` (Rashid et al.
    2018, arXiv 1803.11485, Sec. 6; the agent network of FACMAC's code, Peng et al. 2021, arXiv 2003.06709),
    its state zero at each episode's start.

    Acting: :meth:`step` on ``obs [B, N, D]`` and ``h [B, N, H]`` -> ``(out [B, N, outputs], h' [B, N, H])``.
    Learning: called on an :class:`EpisodeObs` it unrolls every agent's episodes ``[E, T+1, N, D]`` from the zero
    state and returns the rows ``[E T, N, outputs]`` of steps ``0..T-1`` (or ``1..T``), in
    :func:`episode_rows`' order; the GRU is causal, so the padding after an episode's end changes none of its
    steps. Stepping through an episode and unrolling it give the same outputs
    (``tests/test_off_policy_recurrent.py``)."""

    def __init__(self, obs_dim: int, outputs: int, hidden: int):
        super().__init__()
        self.net = RNNAgent(obs_dim, outputs, hidden, recurrent=True)

    def initial_state(self, batch_shape) -> torch.Tensor:
        """Zeros ``[*batch_shape, H]``."""
        return self.net.initial_state(batch_shape)

    def step(self, obs: torch.Tensor, h: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
        B, N = obs.shape[:2]
        out, h_next = self.net.step(obs.reshape(B * N, -1), h.reshape(B * N, -1))
        return out.reshape(B, N, -1), h_next.reshape(B, N, -1)

    def forward(self, x: EpisodeObs) -> torch.Tensor:
        E, L, N = x.obs.shape[:3]
        seq = x.obs.transpose(1, 2).reshape(E * N, L, -1)  # one sequence per episode and agent
        out = self.net.unroll(seq).reshape(E, N, L, -1).transpose(1, 2)  # [E, T+1, N, outputs]
        return (out[:, 1:] if x.next else out[:, :-1]).flatten(0, 1)


def check_recurrent(algo: str, info: Any) -> None:
    """Recurrent actors read flat observations (a 1-D ``Box`` per group) and learn from whole episodes, so the env
    needs a finite ``episode_limit``.

    Raises:
        MarlError: naming the group and its observation space, or the env without an episode limit."""
    for g in info.groups.values():
        space = g.obs_space
        if not (isinstance(space, gym.spaces.Box) and len(space.shape) == 1):
            raise MarlError(
                f"{algo}: recurrent=True reads flat observations, but group '{g.name}' of {info.family}:{info.scenario} "
                f"observes {space}; use recurrent: false (MLP actors read image and Dict observations through encoders)."
            )
    if not info.episode_limit:
        raise MarlError(
            f"{algo}: recurrent=True stores whole episodes and needs a finite episode_limit; {info.family}:"
            f"{info.scenario} has none. {episode_limit_hint(info.family, info.scenario)}."
        )


# ============================================================ network sizes
def critic_dim(critic: str, mapping: Any, mid: str, agent_id: bool = True) -> int:
    """The size of :func:`critic_inputs`' last axis for module ``mid`` of ``mapping`` (a
    :class:`~marl.mapping.PolicyMapping`), counting flat observations, actions and (``agent_id``) the agent one-hot; a structured
    module's observation enters through encoders, whose feature sizes the module adds when it builds them."""
    n = mapping.n_agents
    actions = sum(n(m) * mapping.group_info(m).n_actions for m in mapping.modules)
    flat = {m: 0 if mapping.structured(m) else mapping.obs_dim(m) for m in mapping.modules}
    if critic == "obs":
        return flat[mid] + mapping.group_info(mid).n_actions
    ctx = sum(n(m) * flat[m] for m in mapping.modules) if critic == "joint_obs" else mapping.info.state_dim
    return ctx + actions + (n(mid) if n(mid) > 1 and agent_id else 0)


def encoder_config(critic: str, encoder: Optional[Mapping[str, Any]], mapping: Any, mid: str) -> Dict[str, Any]:
    """The ``model_config`` entries of module ``mid``'s encoders: ``encoder`` (layers), ``obs_space`` (a structured
    module's actor) and ``critic_spaces`` (:func:`critic_spaces`); empty for flat observations everywhere."""
    n = mapping.n_agents
    structured = {m: (n(m), mapping.obs_space(m)) for m in mapping.modules if mapping.structured(m)}
    spaces = critic_spaces(critic, mid, structured)
    out: Dict[str, Any] = {}
    if spaces or mid in structured:
        out["encoder"] = dict(encoder or {})
    if mid in structured:
        out["obs_space"] = structured[mid][1]
    if spaces:
        out["critic_spaces"] = spaces
    return out
