"""The greedy policy of a trained run and the episode loop that evaluates it (no Ray needed)."""

from __future__ import annotations

import numbers
from typing import Any, Dict, List, Mapping, Optional

import gymnasium as gym
import numpy as np
import torch

from marl.env import (
    EnvInfo,
    EnvSpec,
    EpisodeStats,
    GroupInfo,
    MultiAgentEnv,
    Step,
    obs_dtypes,
    obs_leaves,
    spaces_equal,
)
from marl.env.rules import EnvRuleError, episode_limit_hint
from marl.errors import MarlError, closest
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

    def act(
        self, obs: Any, avail_actions: Optional[Dict[str, torch.Tensor]] = None, done: Optional[torch.Tensor] = None
    ) -> Dict[str, Any]:
        """Greedy actions (sampled if ``explore``).

        Args:
            obs: a :class:`Step`, group -> ``[B, N_g, D]`` tensors, or ``agent_id -> array``.
            avail_actions: group -> ``[B, N_g, A]`` bool (taken from the Step if given one).
            done: ``[B]`` bool, episodes that ended at the previous step (resets hidden state).
        Raises:
            MarlError: groups, agent ids or shapes other than the policy's env has (the message
                lists the expected ``[B, N_g, D_g]`` per group).
        """
        if isinstance(obs, Step):  # group-keyed, even where a group is named as its one agent
            obs, avail_actions, done = obs.obs, obs.avail_actions, obs.done
        elif _agent_keyed(obs, self.mapping.info):
            return self._act_single(obs)
        avail_actions = avail_actions or {}
        check_inputs(self.mapping.info, obs, avail_actions, done)
        out = {}
        m = self.mapping
        for mid, module in self.modules.items():
            o = m.module_obs(mid, {g: _as_obs(v, self.mapping.info.groups[g]) for g, v in obs.items()})
            g = m.group_info(mid)
            av = m.gather(mid, avail_actions) if g.discrete and avail_actions.get(g.name) is not None else None
            h = self._h.get(mid)
            lead = tuple(next(iter(o.values())).shape[:2]) if isinstance(o, dict) else tuple(o.shape[:2])
            if h is None or h.shape[0] != lead[0]:
                h = module.initial_state(lead)
            elif done is not None:
                h = h * (~done).view(-1, 1, 1).to(h.dtype)
            a, _, self._h[mid] = module.act(o, av, h, explore=self.explore)
            out[mid] = a
        return m.scatter(out)

    __call__ = act

    def _act_single(self, obs: Dict[str, Any]) -> Dict[str, Any]:
        info = self.mapping.info
        check_single(info, obs)
        batched = {}
        for name, g in info.groups.items():
            if g.structured:  # key by key, agents without an observation get zeros
                batched[name] = _stack_structured(g, [obs.get(a) for a in g.agents])
                continue
            rows = [
                np.asarray(obs[a], dtype=np.float32).reshape(-1) if a in obs else np.zeros(g.obs_dim, np.float32)
                for a in g.agents
            ]
            batched[name] = torch.as_tensor(np.stack(rows))[None]
        acts = self.act(batched)
        out = {}
        for name, g in info.groups.items():
            for i, a in enumerate(g.agents):
                if a in obs:
                    v = acts[name][0, i]
                    out[a] = int(v) if g.discrete else v.numpy()
        return out

    def evaluate_episodes(
        self,
        episodes: int,
        env: Optional[MultiAgentEnv] = None,
        env_spec: Optional[EnvSpec] = None,
        num_envs: Optional[int] = None,
        opponent: Optional[str] = "random",
        **unused: Any,
    ) -> Dict[str, float]:
        """Mean of each episode statistic (``<stat>_mean``) over ``episodes`` greedy episodes of
        ``env``, or of the scenario ``env_spec`` rebuilds with ``num_envs`` copies (default
        ``min(episodes, 32)``) and the env's declared ``eval_kwargs`` (:meth:`EnvSpec.make_eval`). On an env with two or more teams (a competitive game) the policy
        also plays ``episodes`` games in each seat against the bot ``opponent``
        (:func:`marl.competitive.versus`): ``vs_<opponent>/<seat>/win_rate``, ``draw_rate``,
        ``loss_rate`` and ``score`` (win 1, draw 1/2), each in [0, 1]. ``episodes`` is the count of
        episodes played (fewer than asked when some never ended within the step limit).

        Raises:
            MarlError: ``episodes`` is not a positive whole number, neither ``env`` nor
                ``env_spec`` is given, ``env`` has other groups, agent counts or spaces
                than the policy acts for, or ``opponent`` is no bot (the message lists them).
        """
        if isinstance(episodes, bool) or not isinstance(episodes, numbers.Integral) or episodes < 1:
            raise MarlError(f"episodes must be a positive whole number, got {episodes!r}.")
        if env is None:
            if env_spec is None:
                raise MarlError("This policy has no env spec to rebuild its scenario; pass env=marl.make_env(...).")
            env = env_spec.make_eval(num_envs=num_envs or min(episodes, 32))  # with the env's eval_kwargs
        check_env_fits(self.mapping.info, env)
        stats = run_episodes(env, self, episodes)
        out = {f"{k}_mean": float(np.mean(v)) for k, v in stats.items() if v}
        out["episodes"] = len(stats.get("episode_return", []))  # played: fewer if some never ended
        if opponent is not None and len(env.info.teams) >= 2:
            from marl.competitive import versus_metrics

            out.update(versus_metrics(env, self, opponent, episodes))
        return out


def run_episodes(env: MultiAgentEnv, policy: Policy, num_episodes: int, seed: int = 12345) -> Dict[str, List[float]]:
    """Play until ``num_episodes`` episodes ended on the batched ``env``; per-episode statistics.

    Returns lists (length ``num_episodes``): ``episode_return`` (sum over all
    agents and steps), ``episode_length``, ``return_<group>``, and any
    env-provided ``episode_metrics`` (e.g. win rate).

    Raises:
        EnvRuleError: rule ``episode_ends``: fewer than ``num_episodes`` episodes ended within
            ``(info.episode_limit or 1000) * (num_episodes // B + 2)`` steps (the message names the
            episode limit and how to set it).
    """
    step = env.reset(seed=seed)
    policy.reset()
    stats = EpisodeStats(env.info)
    limit = (env.info.episode_limit or UNBOUNDED_EVAL_STEPS) * (num_episodes // env.num_envs + 2)
    for _ in range(limit):
        step = env.step(policy.act(step))
        stats.update(step)
        if len(stats.done["episode_return"]) >= num_episodes:
            break
    out = stats.pop()
    if len(out["episode_return"]) < num_episodes:
        raise _episodes_never_end(env.info, limit, len(out["episode_return"]), num_episodes)
    return {k: v[:num_episodes] for k, v in out.items()}


UNBOUNDED_EVAL_STEPS = 1000  # steps per episode evaluation allows an env that declares no episode_limit


def _episodes_never_end(info: EnvInfo, steps: int, ended: int, wanted: int) -> EnvRuleError:
    """The error of an evaluation that ran out of steps before ``wanted`` episodes ended."""
    declared = (
        f"info.episode_limit = {info.episode_limit}"
        if info.episode_limit
        else f"info.episode_limit = 0 (none declared: evaluation allows {UNBOUNDED_EVAL_STEPS} steps per episode)"
    )
    return EnvRuleError(
        "episode_ends",
        f"{info.family}:{info.scenario}",
        f"evaluation ran {steps} steps of {info.num_envs} env copies and only {ended} of {wanted} episodes ended "
        f"({declared}). {episode_limit_hint(info.family, info.scenario)}",
        key="episode_limit",
        step=f"step {steps}",
    )


# ------------------------------------------------------------------ input checks
def expected_obs(info: EnvInfo) -> str:
    """``"'agent': [B, 3, 18], 'adversary': [B, 1, 8]"``: the observation shapes a policy of ``info`` takes
    (a structured group: ``[B, N, *shape]`` per key)."""
    return ", ".join(f"'{name}': {_want(g)}" for name, g in info.groups.items())


def _want(g: GroupInfo) -> str:
    """How a message shows a group's observation batch."""
    if not g.structured:
        return f"[B, {g.n_agents}, {g.obs_dim}]"
    shapes = {k: [f"B, {g.n_agents}", *map(str, b.shape)] for k, b in obs_leaves(g.obs_space).items()}
    if isinstance(g.obs_space, gym.spaces.Dict):
        return "{" + ", ".join(f"'{k}': [{', '.join(v)}]" for k, v in shapes.items()) + "}"
    return f"[{', '.join(shapes['obs'])}]"


def _as_obs(v: Any, g: GroupInfo) -> Any:
    """A group's observation batch as tensors: float32 (flat), or each key in its space's dtype (structured)."""
    if not g.structured:
        return torch.as_tensor(v, dtype=torch.float32)
    dtypes = obs_dtypes(g.obs_space)
    if isinstance(v, Mapping):
        return {k: torch.as_tensor(v[k], dtype=dtypes[k]) for k in dtypes}
    return torch.as_tensor(v, dtype=dtypes["obs"])


def _obs_shape(v: Any, g: GroupInfo) -> Optional[tuple]:
    """``(B, N)`` of a group's observation batch whose per-agent shapes fit ``g``'s space, else ``None``."""
    leaves = obs_leaves(g.obs_space)
    if not g.structured:
        shape = tuple(np.shape(v))
        return shape[:2] if len(shape) == 3 and shape[1:] == (g.n_agents, g.obs_dim) else None
    parts = v if isinstance(g.obs_space, gym.spaces.Dict) else {"obs": v}
    if not isinstance(parts, Mapping) or set(parts) != set(leaves):
        return None
    shapes = {tuple(np.shape(parts[k])) for k in leaves}
    leads = {s[:2] for s in shapes}
    fits = all(tuple(np.shape(parts[k]))[2:] == tuple(b.shape) for k, b in leaves.items())
    return leads.pop() if fits and len(leads) == 1 and next(iter(leads))[1:] == (g.n_agents,) else None


def _stack_structured(g: GroupInfo, per_agent: List[Any]) -> Any:
    """One env's observations of a structured group's agents (``None``: none, zeros) -> ``[1, N, *shape]`` per key."""
    leaves, dtypes = obs_leaves(g.obs_space), obs_dtypes(g.obs_space)
    is_dict = isinstance(g.obs_space, gym.spaces.Dict)
    out = {}
    for k, b in leaves.items():
        rows = [
            torch.zeros(b.shape, dtype=dtypes[k])
            if o is None
            else torch.as_tensor(o[k] if is_dict else o, dtype=dtypes[k])
            for o in per_agent
        ]
        out[k] = torch.stack(rows)[None]
    return out if is_dict else out["obs"]


def check_inputs(info: EnvInfo, obs: Any, avail_actions: Mapping[str, Any], done: Any) -> None:
    """Raise a :class:`MarlError` unless ``obs`` is group -> ``[B, N_g, obs_dim_g]`` over the groups of
    ``info`` (one ``B``), ``avail_actions[g]`` is ``[B, N_g, n_actions_g]`` and ``done`` is ``[B]``."""
    want = expected_obs(info)
    if not isinstance(obs, Mapping) or set(obs) != set(info.groups):
        got = sorted(obs) if isinstance(obs, Mapping) else type(obs).__name__
        odd = [k for k in obs if k not in info.groups] if isinstance(obs, Mapping) else []
        hint = closest(odd[0], [*info.groups, *info.agents]) if odd else ""
        raise MarlError(
            f"Policy.act takes a Step, a dict group -> observations {{{want}}}, or agent id -> "
            f"observation for one env (agents {info.agents}); got {got}.{hint}"
        )
    B = None
    for name, g in info.groups.items():
        lead = _obs_shape(obs[name], g)
        if lead is None or lead[0] != (B or lead[0]):
            shape = _show_shape(obs[name])
            raise MarlError(
                f"Policy.act: observations of group '{name}' have shape {shape}; expected "
                f"{_want(g)} ({g.n_agents} agents {g.agents}, one B for all "
                f"groups). All groups: {{{want}}}."
            )
        B = lead[0]
        av = avail_actions.get(name)
        if g.discrete and av is not None and tuple(np.shape(av)) != (B, g.n_agents, g.n_actions):
            raise MarlError(
                f"Policy.act: avail_actions of group '{name}' have shape {tuple(np.shape(av))}; "
                f"expected [B, N_g, n_actions] = {(B, g.n_agents, g.n_actions)}."
            )
    if done is not None and tuple(np.shape(done)) != (B,):
        raise MarlError(f"Policy.act: done has shape {tuple(np.shape(done))}; expected [B] = ({B},).")


def _show_shape(v: Any) -> Any:
    """The shape of an observation batch (key -> shape for a dict) for messages."""
    if isinstance(v, Mapping):
        return {k: tuple(np.shape(x)) for k, x in v.items()}
    return tuple(np.shape(v))


def check_single(info: EnvInfo, obs: Mapping[str, Any]) -> None:
    """Raise a :class:`MarlError` unless ``obs`` maps agent ids of ``info`` to ``obs_dim``-sized observations."""
    for a, o in obs.items():
        if a not in info.agents:
            raise MarlError(f"Policy.act: unknown agent '{a}'.{closest(a, info.agents)} Agents: {info.agents}.")
        g = info.group_of(a)
        if g.structured:
            continue  # stacked key by key (_stack_structured); a wrong shape fails there, naming torch's reason
        size = int(np.prod(np.shape(o)))
        if size != g.obs_dim:
            raise MarlError(
                f"Policy.act: the observation of agent '{a}' has {size} values "
                f"(shape {tuple(np.shape(o))}); expected {g.obs_dim} (group '{g.name}')."
            )


def check_env_fits(info: EnvInfo, env: Any) -> None:
    """Raise a :class:`MarlError` unless ``env`` has the groups, agent counts, observation sizes and
    action spaces of ``info`` (the env the policy was built for)."""
    theirs = getattr(getattr(env, "info", None), "groups", None)
    if theirs is None:
        raise MarlError(f"Policy: expected an env from marl.make_env, got {type(env).__name__}.")
    for name, g in info.groups.items():
        h = theirs.get(name)
        if (
            h is None
            or (h.n_agents, h.obs_dim) != (g.n_agents, g.obs_dim)
            or not spaces_equal(h.action_space, g.action_space)
        ):
            got = "no such group" if h is None else f"{h.n_agents} agents, obs [{h.obs_dim}], actions {h.action_space}"
            raise MarlError(
                f"This policy acts for group '{name}' with {g.n_agents} agents, obs [{g.obs_dim}], actions "
                f"{g.action_space}; env {env.info.family}:{env.info.scenario} has {got} (groups {list(theirs)}). "
                f"To act in another scenario load the run for it: marl.load(run, env=env) (HPN / DPN agents)."
            )


def _agent_keyed(obs: Any, info: Any) -> bool:
    """``obs`` maps agent ids to single observations (not groups to ``[B, N_g, D]`` batches). A
    one-agent group may carry its agent's name (the players of a zero-sum game): a 3-D value under
    such a key is that group's batch."""
    if not isinstance(obs, Mapping) or not obs:
        return False
    key = next(iter(obs))
    if key not in info.agents:
        return False
    return not (key in info.groups and np.ndim(obs[key]) == 3)
