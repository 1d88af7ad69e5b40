"""Training inputs of the value-decomposition agent networks (IQL / VDN / QMIX), padded or packed.

A joint batch holds ``E`` whole episodes padded to the longest one (``T+1`` observations);
on SMAX the longest is often 2-3x the mean length. The agent network of QMIX
(Rashid et al. 2018, arXiv 1803.11485: FC-GRU-FC, pymarl's ``rnn_agent``) reads an agent's
observation and, with ``last_action``, its previous action as a one-hot (zero at ``t = 0``).
:func:`agent_inputs` writes them padded (rows = agents' episodes); :class:`PackedEpisodes`
gathers only the used steps, in ``PackedSequence`` order (time-major, rows sorted by
decreasing length), for networks that skip padding
(:meth:`~marl.algos.networks.base.AgentNetwork.packed`), and scatters their Q back to the
padded ``[E, T+1, N, A]`` layout with zeros after each episode.
"""
from __future__ import annotations

import torch


def agent_inputs(obs: torch.Tensor, actions: torch.Tensor, n_actions: int) -> torch.Tensor:
    """``obs [E, T+1, N, D]``, ``actions [E, T, N]`` -> ``[E * N, T+1, D + n_actions]``: one row per
    agent's episode, with the one-hot last action (``n_actions = 0``: none), in one fresh tensor."""
    E, T1, N, D = obs.shape
    x = obs.new_zeros(E, N, T1, D + n_actions)
    x[..., :D] = obs.transpose(1, 2)
    if n_actions:
        x[:, :, 1:, D:].scatter_(-1, actions.transpose(1, 2).long().unsqueeze(-1), 1.0)
    return x.view(E * N, T1, -1)


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
