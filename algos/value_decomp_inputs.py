"""The RLModules of value decomposition (IQL / VDN / QMIX) and their training inputs.

:class:`QAgentModule` holds the agent Q-network of one policy-mapping module (acting on the env
runners, unrolled over whole episodes on the learners) with its target copy; :class:`MixerModule`
holds one team's QMIX mixer (Rashid et al. 2018, arXiv 1803.11485) and its target copy, on the
learners only; :func:`split_joint` turns a joint batch of the replay buffer into their inputs.
``algos/value_decomp.py`` chooses them and holds the loss.

A joint batch holds ``E`` whole episodes padded to the longest one (``T+1`` observations);
on SMAX the longest is often 2-3x the mean length. The agent network of QMIX
(FC-GRU-FC, pymarl's ``rnn_agent``; Samvelyan et al. 2019, arXiv 1902.04043) reads an agent's
observation and, with ``last_action``, its previous action as a one-hot (zero at ``t = 0``).
:func:`agent_inputs` writes them padded (rows = agents' episodes); :class:`PackedEpisodes`
gathers only the used steps, in ``PackedSequence`` order (time-major, rows sorted by
decreasing length), for networks that skip padding
(:meth:`~marl.algos.networks.base.AgentNetwork.packed`), and scatters their Q back to the
padded ``[E, T+1, N, A]`` layout with zeros after each episode.
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Tuple

import gymnasium as gym
import numpy as np
import torch
from torch.nn import functional as F

from ray.rllib.core.rl_module.apis import InferenceOnlyAPI
from ray.rllib.core.rl_module.rl_module import RLModuleSpec
from ray.rllib.core.rl_module.torch import TorchRLModule

from marl.algos.networks.base import AgentNetwork
from marl.algos.networks.encoders import leading, rows_of, with_key
from marl.algos.networks.mixers import QMixer
from marl.algos.networks.registry import build_agent_net
from marl.algos.q_learning import epsilon_greedy
from marl.engine.off_policy import make_target
from marl.env import map_obs, nest_columns

JOINT = "__joint__"  # batch key of the team-level columns (not a module id: forward_train skips it)


def agent_inputs(obs: Any, actions: torch.Tensor, n_actions: int) -> Any:
    """``obs [E, T+1, N, D]``, ``actions [E, T, N]`` -> ``[E * N, T+1, D + n_actions]``: one row per
    agent's episode, with the one-hot last action (``n_actions = 0``: none), in one fresh tensor.
    A structured ``obs`` (key -> ``[E, T+1, N, *shape_k]``) gives key -> ``[E * N, T+1, *shape_k]``,
    the last action under the key ``"last_action"`` (the encoder reads it as one more vector)."""
    if isinstance(obs, dict):
        return structured_agent_inputs(obs, actions, n_actions)
    E, T1, N, D = obs.shape
    x = obs.new_zeros(E, N, T1, D + n_actions)
    x[..., :D] = obs.transpose(1, 2)
    if n_actions:
        x[:, :, 1:, D:].scatter_(-1, actions.transpose(1, 2).long().unsqueeze(-1), 1.0)
    return x.view(E * N, T1, -1)


def structured_agent_inputs(obs: Dict[str, torch.Tensor], actions: torch.Tensor, n_actions: int) -> Dict[str, Any]:
    """:func:`agent_inputs` of a structured observation (each key transposed to agent-episode rows)."""
    E, T, N = actions.shape
    rows = {k: v.transpose(1, 2).reshape(E * N, T + 1, *v.shape[3:]) for k, v in obs.items()}
    if n_actions:
        last = actions.new_zeros(E, N, T + 1, n_actions, dtype=torch.float32)
        last[:, :, 1:].scatter_(-1, actions.transpose(1, 2).long().unsqueeze(-1), 1.0)
        rows = with_key(rows, "last_action", last.view(E * N, T + 1, n_actions))
    return rows


class PackedEpisodes:
    """Where the used steps of a padded batch go in packed layout; built once per batch, shared by the
    online and the target network.

    Args:
        steps: ``[E]`` used observations per episode (length + 1).
        n_agents: ``N``; padded_steps: ``T+1``.

    Attributes:
        batch_sizes: ``[T']`` rows at each packed time step (``nn.utils.rnn.PackedSequence``'s).
        flat: ``[K]`` index of each packed row in ``obs.reshape(E * (T+1) * N, D)``.
    """

    def __init__(self, steps: torch.Tensor, n_agents: int, padded_steps: int):
        rows = steps.repeat_interleave(n_agents)  # row m = agent m % N of episode m // N
        lengths, order = torch.sort(rows, descending=True, stable=True)
        used = torch.arange(int(lengths[0]), device=steps.device).unsqueeze(1) < lengths  # [T', M]: time-major
        t, j = used.nonzero(as_tuple=True)  # packed order: each step's running rows, longest first
        self.batch_sizes = used.sum(1).cpu()
        self.shape = (len(steps), padded_steps, n_agents)
        m = order[j]
        episode, agent = m // n_agents, m % n_agents
        self.flat = (episode * padded_steps + t) * n_agents + agent
        later = t > 0  # steps with a last action: the same agent's action one step earlier, in [E, T, N]
        self.later = later.nonzero().squeeze(1)
        self.last = ((episode * (padded_steps - 1) + t - 1) * n_agents + agent)[later]

    def inputs(self, obs: torch.Tensor, actions: torch.Tensor, n_actions: int) -> torch.Tensor:
        """``[K, D + n_actions]``: the used observations of ``obs [E, T+1, N, D]`` with the one-hot
        last action of ``actions [E, T, N]`` (zero at ``t = 0``; ``n_actions = 0``: none)."""
        D = obs.shape[-1]
        x = obs.new_zeros(len(self.flat), D + n_actions)
        x[:, :D] = obs.reshape(-1, D).index_select(0, self.flat)
        if n_actions:
            x[self.later, D + actions.reshape(-1).index_select(0, self.last).long()] = 1.0
        return x

    def unpack(self, q: torch.Tensor) -> torch.Tensor:
        """Packed ``q [K, A]`` -> ``[E, T+1, N, A]``, zero at unused steps (differentiable)."""
        out = q.new_zeros(self.shape[0] * self.shape[1] * self.shape[2], q.shape[-1])
        return out.index_copy(0, self.flat, q).view(*self.shape, -1)


# ============================================================ agent network module
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
        self.net = build_agent_net(
            c.get("agent", "mlp"), {**c, "last_action_dim": last_dim}, self.n_actions, "value_decomp"
        )
        if not self.inference_only:
            self.target = make_target(self.net)

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
        B, N = leading(obs)
        x, hid, S = rows_of(obs), None, self.net.state_size
        if h is not None:
            h = h.reshape(B * N, -1)
            hid = h[:, :S] if S else None
            if self.use_last_action:
                x = with_key(x, "last_action", h[:, S:]) if isinstance(x, dict) else torch.cat([x, h[:, S:]], -1)
        q, hid = self.net.step(x, hid)
        av = None if avail is None else avail.reshape(B * N, -1).bool()
        a = epsilon_greedy(q, av, float(epsilon) if explore else 0.0)
        parts = ([] if hid is None else [hid]) + (
            [F.one_hot(a, self.n_actions).float()] if self.use_last_action else []
        )
        h_next = torch.cat(parts, -1).reshape(B, N, -1) if parts else None
        return a.reshape(B, N), torch.zeros(B, N), h_next

    def _forward(self, batch, **kwargs):  # RLlib's generic inference path (not used by our runner)
        obs = map_obs(lambda x: x.unsqueeze(1), batch["obs"])
        a, _, _ = self.act(obs, None, self.initial_state((leading(obs)[0], 1)), explore=False)
        return {"actions": a.squeeze(1)}

    # --- training
    @property
    def last_dim(self) -> int:
        """Size of the last-action one-hot in the input (0 without ``last_action``)."""
        return self.n_actions if self.use_last_action else 0

    def q_sequence(self, net: AgentNetwork, obs: Any, actions: torch.Tensor, steps=None) -> torch.Tensor:
        """Unroll ``net`` over whole episodes from the zero state: ``obs [E, T+1, N, D]``, ``actions [E, T, N]``,
        ``steps [E]`` (optional: used steps, length + 1; the network may skip the rest) -> ``Q [E, T+1, N, A]``."""
        N = actions.shape[2]
        q = net.sequence(
            agent_inputs(obs, actions, self.last_dim), None if steps is None else steps.repeat_interleave(N)
        )
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

    def target_pairs(self):
        """``[(net, target)]`` for the off-policy core's target updates (learner copies only)."""
        return [(self.net, self.target)] if not self.inference_only else []


# ============================================================ mixer module
class MixerModule(TorchRLModule):
    """Learner-only RLModule holding one team's :class:`QMixer` and its target copy.

    ``model_config``: ``n_agents``, ``state_dim``, ``mixing_embed``,
    ``hypernet_layers``, ``hypernet_embed`` and optionally ``monotonic`` (default true; FACMAC's
    non-monotonic mixer when false).
    """

    def setup(self):
        c = self.model_config
        self.net = QMixer(
            int(c["n_agents"]),
            int(c["state_dim"]),
            int(c["mixing_embed"]),
            int(c["hypernet_layers"]),
            int(c["hypernet_embed"]),
            monotonic=bool(c.get("monotonic", True)),
        )
        self.target = make_target(self.net)

    def _forward(self, batch, **kwargs):
        return {}

    def _forward_train(self, batch: Dict[str, torch.Tensor], **kwargs) -> Dict[str, torch.Tensor]:
        """``{"qs": [E, T, n], "state": [E, T, S]}`` -> ``{"q_tot": [E, T]}``."""
        return {"q_tot": self.net(batch["qs"], batch["state"])}

    def target_pairs(self):
        """``[(net, target)]`` for the off-policy core's target updates."""
        return [(self.net, self.target)]


def mixer_specs(
    teams: Dict[str, List[Tuple[str, int]]], state_dim: int, cfg: Any, monotonic: bool = True
) -> Dict[str, RLModuleSpec]:
    """One learner-only :class:`MixerModule` per team, ``mixer_<team>`` (QMIX's and FACMAC's mixers).

    ``teams``: team -> its agents as ``(module id, index in module)``; ``cfg``: a config with
    ``mixing_embed``, ``hypernet_layers`` and ``hypernet_embed``; ``monotonic``: see :class:`QMixer`.
    """
    dummy = gym.spaces.Box(-1.0, 1.0, (1,), np.float32)
    sizes = {k: getattr(cfg, k) for k in ("mixing_embed", "hypernet_layers", "hypernet_embed")}
    return {
        f"mixer_{team}": RLModuleSpec(
            module_class=MixerModule,
            observation_space=dummy,
            action_space=dummy,
            learner_only=True,
            model_config={"n_agents": len(members), "state_dim": state_dim, "monotonic": monotonic, **sizes},
        )
        for team, members in teams.items()
    }


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
    return {m: nest_columns(c) if m != JOINT else c for m, c in out.items()}  # "obs/<key>" -> obs[key]
