"""VMAS as a batched :class:`~marl.env.MultiAgentEnv`, using VMAS's own torch batch.

VMAS simulates all ``B`` copies as one batch of torch tensors, so stepping is
one ``Environment.step`` call (loops run over agents, never over copies). The
adapter builds the env with ``vmas.make_env(..., dict_spaces=True,
terminated_truncated=True, clamp_actions=True)`` and:

* stacks per-agent tensors into group tensors (groups by agent-id prefix, see
  :func:`marl.envs.common.build_groups`); the state is all observations
  concatenated in agent order;
* resets ended copies (:meth:`VmasEnv.reset_rows`): if every copy ended (the common case with a fixed
  ``max_steps``: episodes stay in lockstep) it calls one vectorized
  ``env.reset()``; otherwise it calls ``env.reset_at(i)`` for each ended copy
  only (VMAS scenarios reset one index at a time) and then recomputes the
  observations once for the whole batch;
* reads every per-copy tensor VMAS returns (rewards, ``terminated``, ``truncated``) as ``[B]``:
  some scenarios give ``[B, 1]`` (``wheel``'s reward); other shapes are an
  :class:`~marl.env.rules.EnvRuleError`;
* reports ``terminated`` = the scenario's ``done()`` and ``truncated`` =
  ``max_steps`` reached *and not* terminated (the two never overlap);
* clamps continuous actions to the action bounds (``clamp_actions=True``).

Seeding: VMAS keeps one RNG stream for the whole batch, so ``reset(seed)``
seeds the batch with ``seed`` (copies differ because they draw successive
numbers); the per-copy ``seed + b`` rule of the other adapters cannot apply.
VMAS (>= 1.5) shares that stream between every env of the process: resetting
one env with a seed restarts the draws of all the others. Each
:class:`VmasEnv` therefore keeps a stream of its own (:meth:`VmasEnv._own_stream`),
so that an evaluation env reset with its seed leaves the training env's episode
starts as they would have been.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import re
import warnings
from typing import Any, Dict, List, Optional

import numpy as np
import torch

from marl.env import EnvInfo, MarlError, MultiAgentEnv, Observation, Step, unknown_choice
from marl.env.rules import EnvRuleError
from marl.envs.common import (
    build_groups,
    check_kwargs,
    check_num_envs,
    flat_box,
    per_copy,
    to_gymnasium,
)
from marl.envs.common_raw import episode_limit_as

DEFAULT_NUM_ENVS = 256
DEFAULT_MAX_STEPS = 100

# scenarios whose reward is identical for all agents (conservative: unknown -> False)
_SHARED = {"simple", "simple_spread", "simple_speaker_listener"}


@functools.lru_cache(maxsize=None)
def scenarios() -> List[str]:
    """All VMAS scenario names: ``vmas.scenarios`` + ``vmas.mpe_scenarios`` + ``vmas.debug_scenarios``."""
    import vmas

    names = list(vmas.scenarios) + list(vmas.mpe_scenarios) + list(vmas.debug_scenarios)
    return sorted(dict.fromkeys(names))


@functools.lru_cache(maxsize=None)
def valid_kwargs(scenario: str) -> List[str]:
    """Scenario kwargs read from the scenario source (``kwargs.pop("name", ...)`` / ``kwargs.get``)."""
    import importlib

    vs = importlib.import_module("vmas.scenarios")  # the package; `vmas.scenarios` is a list attribute
    try:
        src = inspect.getsource(vs.load(scenario + ".py"))
    except (OSError, TypeError, AssertionError):
        return []
    return sorted(set(re.findall(r"kwargs\.(?:pop|get)\(\s*[\"'](\w+)[\"']", src)))


class VmasEnv(MultiAgentEnv):
    """A VMAS scenario with ``B = num_envs`` copies in one torch batch.

    Args:
        scenario: VMAS scenario name (see :func:`scenarios`).
        num_envs: ``B`` (default 256).
        continuous_actions: ``Box`` actions (clamped to bounds) instead of ``Discrete``.
        max_steps: episode length (truncation), default 100; ``None`` = unbounded.
        device: torch device of the simulation; returned tensors live there too.
        seed: seed of the VMAS RNG stream (used by ``reset()`` without a seed).
        **scenario_kwargs: scenario options (e.g. ``n_agents=3``).

    Shapes: ``obs[g]`` ``[B, N_g, obs_dim_g]`` float32, ``state`` ``[B, sum obs_dim]``,
    ``reward[g]`` ``[B, N_g]`` float32, ``avail_actions[g]`` all True ``[B, N_g, n_g]``
    (``None`` if continuous), ``alive`` all True.

    Raises:
        MarlError: unknown scenario, kwargs the scenario does not use (the
            message lists the ones it reads), unsupported spaces, bad actions,
            ``step`` before ``reset``.
    """

    def __init__(
        self,
        scenario: str,
        num_envs: int = DEFAULT_NUM_ENVS,
        continuous_actions: bool = False,
        max_steps: Optional[int] = DEFAULT_MAX_STEPS,
        device: str = "cpu",
        seed: Optional[int] = 0,
        **scenario_kwargs,
    ):
        if scenario not in scenarios():
            raise unknown_choice("VMAS scenario", scenario, scenarios())
        num_envs = check_num_envs(num_envs)
        if max_steps is not None and (not isinstance(max_steps, (int, np.integer)) or max_steps < 1):
            raise MarlError(f"max_steps must be a positive int or None, got {max_steps!r}.")
        self._shared = _shared_vmas_state()  # VMAS's process-wide random state (_own_stream), looked up once
        self._stream: Optional[List[Any]] = None  # this env's copy of it
        with self._own_stream():
            self._env = _make_vmas(
                scenario, int(num_envs), bool(continuous_actions), max_steps, device, seed, scenario_kwargs
            )
        env = self._env
        agents = [a.name for a in env.agents]
        obs_spaces, act_spaces = {}, {}
        for a in agents:
            space = env.observation_space[a]
            if type(space).__name__ != "Box":
                raise MarlError(
                    f"VMAS scenario '{scenario}' has a {type(space).__name__} observation for {a}; only Box is supported."
                )
            obs_spaces[a] = flat_box(to_gymnasium(space))
            act_spaces[a] = to_gymnasium(env.action_space[a])
        adversary = {a.name: bool(getattr(a, "adversary", False)) for a in env.agents}
        competitive = any(adversary.values()) and not all(adversary.values())
        team_of = {a: ("adversary" if adv else "good") if competitive else "team" for a, adv in adversary.items()}
        groups = build_groups(agents, obs_spaces, act_spaces, team_of)
        self.info = EnvInfo(
            family="vmas",
            scenario=scenario,
            agents=agents,
            groups=groups,
            state_dim=sum(s.shape[0] for s in obs_spaces.values()),
            episode_limit=int(max_steps or 0),
            kind="competitive" if competitive else "cooperative",
            shared_reward=scenario in _SHARED,
            num_envs=int(num_envs),
        )
        self.device = torch.device(device)
        self._default_seed = seed
        self._started = False
        self._obs: Dict[str, torch.Tensor] = {}

    # ------------------------------------------------------------------ API

    def reset(self, seed: Optional[int] = None) -> Step:
        """Reset the whole batch (VMAS stream seeded with ``seed``) and return the first :class:`Step`."""
        if seed is None:
            seed = self._default_seed
        with self._own_stream():
            self._obs = self._env.reset(seed=seed)
        self._started = True
        return Step.at_reset(self._observation())

    def step_env(self, actions: Dict[str, torch.Tensor]) -> Step:
        """Step all copies at once (see :meth:`MultiAgentEnv.step_env`)."""
        if not self._started:
            raise MarlError("Call reset() before step().")
        with self._own_stream():
            self._obs, rew, terminated, truncated, _ = self._env.step(self._agent_actions(actions))
        B = (self.num_envs,)
        terminated = per_copy(terminated, B, self._fail("terminated")).bool()
        truncated = per_copy(truncated, B, self._fail("truncated")).bool() & ~terminated
        return self._make_step(rew, terminated, truncated)

    def reset_rows(self, rows: torch.Tensor) -> Observation:
        """Reset the copies in ``rows``: one vectorized reset when every copy ended, else ``reset_at`` per copy."""
        with self._own_stream():
            self._reset_rows(rows.to(self.device))
        return self._observation()

    def _reset_rows(self, done: torch.Tensor) -> None:
        env = self._env
        if bool(done.all()):
            self._obs = env.reset()  # one vectorized reset of every copy
            return
        # VMAS resets one index per call; only the ended copies are visited
        for i in done.nonzero().flatten().tolist():
            env.reset_at(i, return_observations=False)
        (fresh,) = env.get_from_scenario(get_observations=True, get_rewards=False, get_infos=False, get_dones=False)
        mask = done.unsqueeze(-1)
        self._obs = {a: torch.where(mask, fresh[a], self._obs[a]) for a in self._obs}

    def close(self) -> None:
        self._env = None  # VMAS holds only tensors; drop them

    # ------------------------------------------------------------------ internals

    @contextlib.contextmanager
    def _own_stream(self):
        """Run VMAS calls on this env's own random state.

        VMAS (>= 1.5) swaps one process-wide random state (``Environment.vmas_random_state``: torch, numpy
        and Python ``random`` states) in around each of its calls, shared by every VMAS env of the process.
        A reset with a seed reseeds it for all of them, so a benchmark's evaluation env, reset with its
        seed at every evaluation, restarted the training env's draws: after each evaluation the training
        episodes started from the same positions again. Here the shared state holds this env's copy during
        the call, and what it held before afterwards. The first call (building the env) starts the copy
        from the env's seed."""
        shared = self._shared
        if shared is None:  # a VMAS without the shared state: nothing to keep apart
            yield
            return
        outer = list(shared)
        if self._stream is not None:
            shared[:] = self._stream
        try:
            yield
        finally:
            self._stream = list(shared)
            shared[:] = outer

    def _agent_actions(self, actions: Dict[str, torch.Tensor]) -> Dict[str, torch.Tensor]:
        """Checked group actions -> VMAS's per-agent tensors (``[B, 1]`` long for Discrete, ``[B, d]`` float)."""
        out = {}
        for name, g in self.info.groups.items():
            a = actions[name].to(self.device)
            for j, agent in enumerate(g.agents):
                out[agent] = a[:, j : j + 1] if g.discrete else a[:, j]
        return out

    def _observation(self) -> Observation:
        B, groups, dev, obs = self.num_envs, self.info.groups, self.device, self._obs
        return Observation(
            obs={
                name: torch.stack([obs[a].reshape(B, -1) for a in g.agents], dim=1).float()
                for name, g in groups.items()
            },
            state=torch.cat([obs[a].reshape(B, -1) for a in self.info.agents], dim=1).float(),
            avail_actions={
                n: (torch.ones(B, g.n_agents, g.n_actions, dtype=torch.bool, device=dev) if g.discrete else None)
                for n, g in groups.items()
            },
            alive={n: torch.ones(B, g.n_agents, dtype=torch.bool, device=dev) for n, g in groups.items()},
        )

    def _fail(self, key: str, agent: Optional[str] = None):
        """``detail -> EnvRuleError`` for a tensor VMAS returned in a shape the adapter cannot read."""
        return lambda detail: EnvRuleError(
            "reward_space" if key == "reward" else "flags",
            f"vmas:{self.info.scenario}",
            detail,
            agent=agent,
            key=key,
        )

    def _make_step(self, rew, terminated, truncated) -> Step:
        groups, B = self.info.groups, (self.num_envs,)
        # a scenario's reward may carry a trailing singleton dimension ([B, 1], e.g. "wheel"): one value per copy
        per_agent = {a: per_copy(rew[a], B, self._fail("reward", a)).float() for a in self.info.agents}
        return Step(
            *self._observation(),
            reward={n: torch.stack([per_agent[a] for a in g.agents], dim=1) for n, g in groups.items()},
            terminated=terminated,
            truncated=truncated,
        )


def _shared_vmas_state() -> Optional[List[Any]]:
    """VMAS's process-wide random state, the list ``Environment.vmas_random_state`` (VMAS >= 1.5), or ``None``."""
    from vmas.simulator.environment.environment import Environment

    state = getattr(Environment, "vmas_random_state", None)
    return state if isinstance(state, list) else None


def _make_vmas(scenario, num_envs, continuous, max_steps, device, seed, kwargs) -> Any:
    """``vmas.make_env`` with unused scenario kwargs turned into a :class:`MarlError`."""
    import vmas

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            env = vmas.make_env(
                scenario,
                num_envs=num_envs,
                device=device,
                continuous_actions=continuous,
                max_steps=max_steps,
                seed=seed,
                dict_spaces=True,
                terminated_truncated=True,
                clamp_actions=True,
                **kwargs,
            )
        except (TypeError, ValueError, AssertionError) as e:
            raise MarlError(
                f"Invalid kwargs {kwargs} for VMAS scenario '{scenario}': {e}. "
                f"Valid kwargs: {', '.join(valid_kwargs(scenario)) or '(none)'}."
            ) from e
    for w in caught:
        msg = str(w.message)
        if "passed but not used" in msg:
            bad = [k for k in kwargs if repr(k) in msg] or list(kwargs)
            valid = [k for k in valid_kwargs(scenario) if k not in bad]
            check_kwargs(f"VMAS scenario '{scenario}'", {k: None for k in bad}, valid)
        else:  # not ours to swallow
            warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
    return env


@episode_limit_as("max_steps")  # make_env(..., episode_limit=T) sets max_steps
def make(
    scenario: Optional[str] = None,
    num_envs: int = DEFAULT_NUM_ENVS,
    continuous_actions: bool = False,
    max_steps: Optional[int] = DEFAULT_MAX_STEPS,
    device: str = "cpu",
    seed: Optional[int] = 0,
    **scenario_kwargs,
) -> VmasEnv:
    """Registry factory of the ``"vmas"`` family: ``make_env("vmas", "navigation", n_agents=3)``.

    See :class:`VmasEnv` for the arguments.

    Raises:
        MarlError: no / unknown scenario or bad kwargs.
    """
    if scenario is None:
        raise MarlError(f"make_env('vmas', scenario) needs a scenario. Valid choices: {', '.join(scenarios())}.")
    return VmasEnv(scenario, num_envs, continuous_actions, max_steps, device, seed, **scenario_kwargs)
