"""Reward redistribution for off-beat actions, as batch transforms (LeGEM-style, reconstructed).

With off-beat actions (Qiu et al. 2022, "Off-Beat Multi-Agent Reinforcement Learning",
arXiv 2205.13718) a reward arrives when an action *completes*, ``d - 1`` steps after the
decision that caused it. The paper was available at abstract level only; what this module
does is our reconstruction (``docs/offbeat.md``, "Reward redistribution"):

* :func:`causal_shift` — move each reward that arrives when actions complete
  back to the decision step(s) where those actions started (split equally);
  the episode's undiscounted return is unchanged (QMIX / VDN / IQL:
  :func:`redistribute_team_reward`; MAPPO / IPPO inside rollout chunks:
  :func:`causal_shift_rollout`);
* :class:`CausalShift` and :class:`Legem` — the batch transforms
  (:mod:`marl.transforms`) registered as ``causal_shift`` and ``legem`` by
  ``marl.algos``: ``fit(algo, reward_redistribution="causal_shift" | "legem",
  legem={...})``; ``legem`` adds potential-based shaping from per-agent episodic
  memory graphs (:class:`marl.algos.legem.LegemMemory`; keys:
  :class:`marl.algos.legem_config.LegemConfig`).
"""

from __future__ import annotations

from collections import Counter, defaultdict
from typing import Any, Dict, Iterable, List, Tuple

import numpy as np
import torch

from marl.algos.legem import LegemMemory, decision_intervals
from marl.errors import MarlError
from marl.transforms import BatchTransform, Episode, Episodes

Record = Tuple[int, int, int, int]  # (agent, start step, end step, action)


def causal_shift(rewards: torch.Tensor, records: Iterable[Record]) -> torch.Tensor:
    """Move the team reward of every step where actions complete to those actions' start steps.

    Args:
        rewards: ``[T]`` team reward of one episode.
        records: ``(agent, start, end, action)`` of the episode's actions (inclusive steps).
    Returns:
        ``[T]`` redistributed rewards; a step's reward is split equally over the
        actions ending at it and added at their start steps; rewards at steps
        where no action ends stay. ``sum`` is conserved exactly.
    """
    out = rewards.clone()
    ending: Dict[int, List[int]] = defaultdict(list)
    for _, start, end, _ in records:
        ending[int(end)].append(int(start))
    for end, starts in ending.items():
        if end >= rewards.shape[0]:
            continue
        r = rewards[end]
        out[end] -= r
        for s in starts:
            out[s] += r / len(starts)
    return out


def decision_records(decisions: torch.Tensor) -> List[Record]:
    """Action records ``(agent, start, end, -1)`` of one episode from its decision mask.

    Args:
        decisions: ``[L, n]`` bool, agent ``i`` chose a new action at step ``t``
            (step 0 always counts); an action lasts until the agent's next decision
            or the episode's last step.
    """
    return [(i, s, e - 1, -1) for i, iv in enumerate(decision_intervals(decisions)) for s, e in iv]


def redistribute_team_reward(rewards: torch.Tensor, decisions: torch.Tensor, team_reward: str = "mean") -> torch.Tensor:
    """Causal shift of one episode's team reward for value decomposition.

    Args:
        rewards: ``[L, n]`` per-agent rewards (the team reward repeated in cooperative envs).
        decisions: ``[L, n]`` bool decision mask (:func:`decision_records`).
        team_reward: how the learner aggregates agents (``"mean"`` or ``"sum"``).
    Returns:
        ``[L, n]`` per-agent rewards whose aggregate is the shifted team reward
        (:func:`causal_shift`); identical to ``rewards``' aggregate when every
        agent decides at every step (no off-beat actions).
    """
    n = rewards.shape[1]
    team = rewards.mean(1) if team_reward == "mean" else rewards.sum(1)
    shifted = causal_shift(team, decision_records(decisions))
    per_agent = shifted if team_reward == "mean" else shifted / n
    return per_agent.unsqueeze(1).expand(-1, n).clone()


def causal_shift_rollout(
    rewards: torch.Tensor, decisions: torch.Tensor, starts: torch.Tensor, dones: torch.Tensor
) -> torch.Tensor:
    """Per-agent causal shift inside a fixed-length rollout chunk (MAPPO / IPPO).

    Agent ``i``'s reward at a step where its action completes moves to the step
    where that action started. An action completes at ``t`` when the agent
    decides again at ``t + 1`` or the episode ends at ``t``. Rewards stay where
    they are when the start lies before the chunk or the completion after it
    (not known inside the chunk), so each agent's return within the chunk is
    conserved exactly.

    Args:
        rewards: ``[T, B, N]`` per-agent rewards.
        decisions: ``[T, B, N]`` bool, the agent chose a new action at ``t``.
        starts: ``[T, B]`` bool, an episode starts at ``t``.
        dones: ``[T, B]`` bool, an episode ends at ``t`` (terminated or truncated).
    Returns:
        ``[T, B, N]`` shifted rewards (equal to ``rewards`` when every agent
        decides at every step).
    """
    T = rewards.shape[0]
    new_action = decisions | starts.unsqueeze(-1)
    steps = torch.arange(T).view(T, 1, 1).expand_as(rewards)
    start = torch.where(new_action, steps, torch.full_like(steps, -1)).cummax(0).values  # -1: before the chunk
    ends = dones.unsqueeze(-1).expand_as(new_action).clone()
    ends[:-1] |= new_action[1:]
    move = ends & (start >= 0)
    moved = torch.where(move, rewards, torch.zeros_like(rewards))
    return rewards - moved + torch.zeros_like(rewards).scatter_add(0, start.clamp(min=0), moved)


# ============================================================ the batch transforms
def check_one_team(name: str, info: Any) -> None:
    """Raise a MarlError naming the teams when ``info``'s env has more than one (the shift and the
    memory work on one team reward)."""
    if len(info.teams) > 1:
        raise MarlError(
            f"reward_redistribution='{name}' shifts one team reward over whole episodes; "
            f"{info.family}:{info.scenario} has teams {list(info.teams)}."
        )


def team_reward_of(trainer: Any) -> str:
    """How the learner aggregates a team's rewards: ``"mean"`` (shared-reward envs) or ``"sum"``."""
    return "mean" if trainer.env_info.shared_reward else "sum"


def shifted_episode(ep: Episode, team_reward: str) -> Tuple[torch.Tensor, torch.Tensor]:
    """``(rewards, decisions)`` ``[L, n]`` of one replay episode, modules side by side in
    ``ep.modules`` order: the causally shifted per-agent rewards
    (:func:`redistribute_team_reward`) and the decision mask (every step without an
    off-beat wrapper)."""
    r = torch.from_numpy(np.concatenate([ep.rewards[m] for m in ep.modules], 1))
    dec = torch.from_numpy(np.concatenate([ep.column(m, "decision") for m in ep.modules], 1))
    return redistribute_team_reward(r, dec, team_reward), dec


def write_rewards(ep: Episode, rewards: torch.Tensor) -> None:
    """Write ``[L, n]`` ``rewards`` (modules side by side) into the episode's buffer arrays."""
    col = 0
    for m in ep.modules:
        n = ep.rewards[m].shape[1]
        ep.rewards[m][:] = rewards[:, col : col + n].numpy()
        col += n


class CausalShift(BatchTransform):
    """``reward_redistribution="causal_shift"``: rewards move from the step an off-beat action
    completes to the step it started (reconstructed; ``docs/offbeat.md``).

    On trainers with a replay buffer of whole episodes (QMIX, VDN, IQL: ``on_episodes``) the
    team reward of each committed episode is shifted (:func:`redistribute_team_reward`; one
    team only); on the others (MAPPO, IPPO: ``on_rollout``) each agent's reward is shifted
    inside the rollout chunk (:func:`causal_shift_rollout`). Modules without a ``decision``
    column (no off-beat wrapper) are left as they are. Returns are conserved exactly.
    """

    @classmethod
    def check(cls, cfg, info, hooks) -> None:
        """Raises MarlError: whole episodes of an env with several teams."""
        if "on_episodes" in hooks:
            check_one_team("causal_shift", info)

    def setup(self, trainer) -> None:
        self.whole_episodes = "on_episodes" in trainer.transform_hooks  # then the rollouts stay as they are
        self.team_reward = team_reward_of(trainer)

    def on_rollout(self, trainer, rollout: Dict[str, Any]) -> None:
        if self.whole_episodes:
            return
        dones = rollout["terminated"] | rollout["truncated"]
        for m in rollout["modules"].values():
            if "decision" in m:  # absent when the env has no off-beat wrapper: nothing to shift
                m["rewards"] = causal_shift_rollout(m["rewards"], m["decision"], rollout["starts"], dones)

    def on_episodes(self, trainer, episodes: Episodes) -> None:
        for ep in episodes:
            write_rewards(ep, shifted_episode(ep, self.team_reward)[0])


class Legem(BatchTransform):
    """``reward_redistribution="legem"``: the causal shift of each committed episode, then each
    agent's reward gets the potential-based shaping term of its episodic memory graph
    (:class:`~marl.algos.legem.LegemMemory`, one per module; keys in the ``legem`` section,
    :class:`~marl.algos.legem_config.LegemConfig`), computed from earlier episodes; the
    episode is added to the memory afterwards. QMIX, VDN, IQL (whole episodes), one team.
    LeGEM-style, our reconstruction of Qiu et al. 2022 (arXiv 2205.13718; ``docs/offbeat.md``).

    The memories are this transform's checkpoint state (older checkpoints: ``legem_memory``).
    """

    legacy_state_key = "legem_memory"

    @classmethod
    def check(cls, cfg, info, hooks) -> None:
        """Raises MarlError: an env with several teams, or image / dict observations (the memory keys
        project one flat observation vector)."""
        check_one_team("legem", info)
        structured = [g.name for g in info.groups.values() if g.structured]
        if structured:
            raise MarlError(
                f"reward_redistribution='legem' keys its memory on flat observation vectors; groups {structured} "
                f"of {info.family}:{info.scenario} observe images or dicts. Flatten them: "
                f"make_env('{info.family}', '{info.scenario}', flatten_obs=True)."
            )

    def setup(self, trainer) -> None:
        c, s, run = trainer.cfg, self.config, trainer.run
        agents = Counter(run.agent_to_module.values())
        self.team_reward = team_reward_of(trainer)
        self.memories = {
            m: LegemMemory(
                agents[m],
                spec.observation_space.shape[0],
                c.gamma,
                s.beta,
                s.key_dim,
                s.resolution,
                s.refresh_episodes,
                s.max_nodes,
                c.seed,
                s.time_key,
            )
            for m, spec in run.module_spaces.items()
        }

    def on_episodes(self, trainer, episodes: Episodes) -> None:
        for ep in episodes:
            new, dec = shifted_episode(ep, self.team_reward)
            team = new.mean(1) if self.team_reward == "mean" else new.sum(1)
            col = 0
            for m in ep.modules:
                n = ep.rewards[m].shape[1]
                obs, dm = torch.from_numpy(ep.obs[m][: ep.length]), dec[:, col : col + n]
                # potentials from earlier episodes only: with the episode itself in memory its
                # own return-to-go would leak into Phi and cancel its rewards
                new[:, col : col + n] += self.memories[m].shaping(obs, dm, ep.terminated)
                self.memories[m].add_episode(obs, team, dm)
                col += n
            write_rewards(ep, new)

    def state_dict(self) -> Dict[str, Any]:
        return {m: mem.state_dict() for m, mem in self.memories.items()}

    def load_state_dict(self, state: Dict[str, Any]) -> None:
        for m, mem_state in state.items():
            self.memories[m].load_state_dict(mem_state)
