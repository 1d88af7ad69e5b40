"""The greedy policy of a trained run and the episode loop that evaluates it (no Ray needed)."""
from __future__ import annotations

from typing import Any, Dict, List, Optional

import numpy as np
import torch

from marl.env import EnvSpec, EpisodeStats, MultiAgentEnv, Step
from marl.errors import MarlError
from marl.mapping import PolicyMapping


class Policy:
    """Decentralised policy of a trained run: one module per module id.

    Call :meth:`act` with a batched :class:`~marl.env.Step` (or its ``obs`` /
    ``avail_actions`` dicts, group -> ``[B, N_g, D]``) to get group ->
    ``[B, N_g]`` actions (``[B, N_g, A]`` for continuous groups), or with a
    PettingZoo-style dict ``agent_id -> observation`` for one env. Recurrent
    modules keep their hidden state between calls; :meth:`reset` clears it.
    """

    def __init__(self, mapping: PolicyMapping, modules: Dict[str, Any], explore: bool = False):
        self.mapping = mapping
        self.modules = modules
        self.explore = explore
        self._h: Dict[str, Optional[torch.Tensor]] = {}

    def reset(self) -> None:
        self._h = {}

    def act(self, obs, avail_actions: Optional[Dict[str, torch.Tensor]] = None, done: Optional[torch.Tensor] = None):
        """Greedy actions (sampled if ``explore``).

        Args:
            obs: a :class:`Step`, group -> ``[B, N_g, D]`` tensors, or ``agent_id -> array``.
            avail_actions: group -> ``[B, N_g, A]`` bool (taken from the Step if given one).
            done: ``[B]`` bool, episodes that ended at the previous step (resets hidden state).
        """
        if isinstance(obs, Step):
            obs, avail_actions, done = obs.obs, obs.avail_actions, obs.done
        if obs and next(iter(obs)) in self.mapping.info.agents:
            return self._act_single(obs)
        avail_actions = avail_actions or {}
        out = {}
        m = self.mapping
        for mid, module in self.modules.items():
            o = m.add_agent_id(mid, m.gather(mid, {g: torch.as_tensor(v, dtype=torch.float32) for g, v in obs.items()}))
            g = m.group_info(mid)
            av = m.gather(mid, avail_actions) if g.discrete and avail_actions.get(g.name) is not None else None
            h = self._h.get(mid)
            if h is None or h.shape[0] != o.shape[0]:
                h = module.initial_state(o.shape[:2])
            elif done is not None:
                h = h * (~done).view(-1, 1, 1).to(h.dtype)
            a, _, self._h[mid] = module.act(o, av, h, explore=self.explore)
            out[mid] = a
        return m.scatter(out)

    __call__ = act

    def _act_single(self, obs: Dict[str, Any]) -> Dict[str, Any]:
        info = self.mapping.info
        batched = {}
        for name, g in info.groups.items():
            rows = [np.asarray(obs[a], dtype=np.float32).reshape(-1) if a in obs else np.zeros(g.obs_dim, np.float32) for a in g.agents]
            batched[name] = torch.as_tensor(np.stack(rows))[None]
        acts = self.act(batched)
        out = {}
        for name, g in info.groups.items():
            for i, a in enumerate(g.agents):
                if a in obs:
                    v = acts[name][0, i]
                    out[a] = int(v) if g.discrete else v.numpy()
        return out

    def evaluate_episodes(self, episodes: int, env: Optional[MultiAgentEnv] = None, env_spec: Optional[EnvSpec] = None,
                          num_envs: Optional[int] = None, **unused: Any) -> Dict[str, float]:
        """Mean of each episode statistic (``<stat>_mean``) over ``episodes`` greedy episodes of
        ``env``, or of the scenario ``env_spec`` rebuilds with ``num_envs`` copies (default
        ``min(episodes, 32)``).

        Raises:
            MarlError: neither ``env`` nor ``env_spec`` is given.
        """
        if env is None:
            if env_spec is None:
                raise MarlError("This policy has no env spec to rebuild its scenario; pass env=marl.make_env(...).")
            env = env_spec.make(num_envs=num_envs or min(episodes, 32))
        stats = run_episodes(env, self, episodes)
        return {f"{k}_mean": float(np.mean(v)) for k, v in stats.items() if v}


def run_episodes(env: MultiAgentEnv, policy: Policy, num_episodes: int, seed: int = 12345) -> Dict[str, List[float]]:
    """Play until ``num_episodes`` episodes ended on the batched ``env``; per-episode statistics.

    Returns lists (length ``num_episodes``): ``episode_return`` (sum over all
    agents and steps), ``episode_length``, ``return_<group>``, and any
    env-provided ``episode_metrics`` (e.g. win rate).
    """
    step = env.reset(seed=seed)
    policy.reset()
    stats = EpisodeStats(env.info)
    limit = (env.info.episode_limit or 1000) * (num_episodes // env.num_envs + 2)
    for _ in range(limit):
        step = env.step(policy.act(step))
        stats.update(step)
        if len(stats.done["episode_return"]) >= num_episodes:
            break
    out = stats.pop()
    return {k: v[:num_episodes] for k, v in out.items()}
