"""MPE (``mpe2``) as a batched :class:`~marl.env.MultiAgentEnv`: two backends.

``make_env("mpe", scenario, backend=...)``: ``"torch"``
(:mod:`marl.envs.mpe.batched`, every copy as tensors; the default for the
scenarios it implements) or ``"mpe2"`` (:class:`MPEEnv` below, mpe2's own code
per copy: the reference the torch backend is tested against step by step).

:func:`make` builds :class:`MPEEnv` for every scenario ``mpe2`` ships (found by
scanning the ``mpe2`` package for ``<name>_vN`` modules). Names are accepted with
or without the ``_vN`` suffix (``"simple_spread"`` == ``"simple_spread_v3"``).

The mpe2 backend. ``mpe2.<scenario>.parallel_env`` goes through the AEC -> parallel
wrapper: per agent it runs the AEC bookkeeping (agent selector, reward
accumulation, dict rebuilding, order-enforcing checks) and computes every
observation twice (``last()`` before each AEC step, then again at the end).
:class:`MPEEnv` instead keeps ``B`` mpe2 ``raw_env`` objects and, per copy and
step, does exactly what the AEC env does once per cycle, with mpe2's own code:
set ``current_actions``, call ``raw_env._execute_world_step()`` (mpe2's action
decoding, ``World.step`` physics and scenario rewards, including scenario
overrides such as collect_treasure's ``post_step``), advance ``steps``, check
``max_cycles`` truncation then ``scenario.is_terminal``, and compute each
agent's ``scenario.observation`` once. Nothing of the physics or the scenarios
is re-implemented, so observations and rewards equal those of
``parallel_env`` for the same seed and actions (``tests/test_envs.py`` checks this).

Truncation / termination follow mpe2: the episode is truncated when
``max_cycles`` steps are done (even if the scenario would also terminate then),
else terminated when ``scenario.is_terminal`` (only scenarios built with
``terminate_on_success=True``). Ended copies reset themselves unseeded,
continuing their RNG stream like ``parallel_env.reset()`` would.

Entity layout: ``simple_spread`` fills :attr:`EnvInfo.entity_layout` on both
paths (own velocity / position, ``"landmark"`` and ``"agent"`` entities; see
:func:`attach_entity_layout`); the other scenarios have none.
"""

from __future__ import annotations

import copy
import importlib
import inspect
import re
from typing import Any, Callable, Dict, List, Optional, Tuple

import numpy as np
import torch

from marl.env import (
    EnvInfo,
    GroupInfo,
    MarlError,
    MultiAgentEnv,
    Observation,
    Step,
    check_entity_layout,
    make_env,
    unknown_choice,
)
from marl.envs.common import AgentLayout, build_groups, check_kwargs, check_num_envs, mpe2_modules
from marl.envs.common_raw import episode_limit_as

DEFAULT_NUM_ENVS = 32

# kwargs every mpe2 raw_env takes that MPEEnv sets itself (or that make no sense batched)
_OWN_KWARGS = ("max_cycles", "continuous_actions", "render_mode")


def scenarios() -> List[str]:
    """All MPE scenario names (without version suffix)."""
    return list(mpe2_modules())


def resolve_scenario(name: str) -> Tuple[str, str]:
    """``name`` (with or without ``_vN``, optionally ``mpe2.`` / ``mpe/`` prefixed) -> (name, module).

    Raises:
        MarlError: unknown scenario; lists the choices and the closest one.
    """
    mods = mpe2_modules()
    if not isinstance(name, str):
        raise unknown_choice("MPE scenario", name, list(mods))
    short = re.sub(r"^(mpe2\.|mpe/)", "", name)
    if short in mods:
        return short, mods[short]
    for base, mod in mods.items():
        if short == mod:
            return base, mod
    raise unknown_choice("MPE scenario", name, list(mods))


def valid_kwargs(scenario: str) -> List[str]:
    """Names of the scenario-specific kwargs of ``scenario`` (e.g. ``N``, ``local_ratio``)."""
    raw_cls = _raw_env_class(scenario)
    params = inspect.signature(raw_cls.__init__).parameters
    return [p for p in params if p != "self" and p not in _OWN_KWARGS]


def _raw_env_class(scenario: str) -> type:
    _, module = resolve_scenario(scenario)
    return importlib.import_module(f"mpe2.{module}").raw_env


# --------------------------------------------------------------------------- kind / teams per scenario
# Read off each scenario's reward code (mpe2 1.1.1):
#   cooperative: simple (1 agent); simple_spread / simple_reference blend a shared
#     global reward with a per-agent one by local_ratio (shared only if it is 0);
#     simple_speaker_listener rewards both with the listener's distance;
#     simple_line / simple_formation use only the global reward (local_ratio=0);
#     collect_treasure adds the global pickup/deposit reward to per-agent shaping.
#   competitive ("adversary" vs "good" team, agent.adversary attribute):
#     simple_adversary: good agents share one reward, one adversary;
#     simple_push: one agent per side; simple_crypto: alice and bob share one reward;
#     simple_tag: adversaries share the collision reward, good agents are
#     individual (shared only with one good agent); simple_world_comm: the
#     adversaries' distance shaping is individual.
def _good_count(raw: Any) -> int:
    return sum(not getattr(a, "adversary", False) for a in raw.world.agents)


_COOPERATIVE: Dict[str, Callable[[Any], bool]] = {
    "simple": lambda raw: True,
    "simple_spread": lambda raw: raw.local_ratio == 0,
    "simple_reference": lambda raw: raw.local_ratio == 0,
    "simple_speaker_listener": lambda raw: True,
    "simple_line": lambda raw: True,
    "simple_formation": lambda raw: True,
    "collect_treasure": lambda raw: False,
}
_COMPETITIVE: Dict[str, Callable[[Any], bool]] = {
    "simple_adversary": lambda raw: True,
    "simple_push": lambda raw: True,
    "simple_crypto": lambda raw: True,
    "simple_tag": lambda raw: _good_count(raw) <= 1,
    "simple_world_comm": lambda raw: False,
}


def scenario_meta(scenario: str, raw: Any) -> Tuple[str, Dict[str, str], bool]:
    """``(kind, agent -> team, shared_reward)`` of a built mpe2 ``raw_env``.

    Scenarios not in the tables (a newer mpe2) fall back to: adversaries present
    -> competitive, else cooperative, with ``shared_reward=False``.
    """
    adversary = {a.name: bool(getattr(a, "adversary", False)) for a in raw.world.agents}
    if scenario in _COOPERATIVE:
        return "cooperative", {a: "team" for a in adversary}, bool(_COOPERATIVE[scenario](raw))
    competitive = scenario in _COMPETITIVE or any(adversary.values())
    if not competitive:
        return "cooperative", {a: "team" for a in adversary}, False
    shared = bool(_COMPETITIVE[scenario](raw)) if scenario in _COMPETITIVE else False
    return "competitive", {a: ("adversary" if adv else "good") for a, adv in adversary.items()}, shared


# --------------------------------------------------------------------------- entity layouts per scenario


def _simple_spread_layout(raw: Any, g: GroupInfo) -> Optional[Dict[str, Any]]:
    """Entity layout of one simple_spread agent (mpe2 ``Scenario.observation``).

    Observation: own velocity and position (``dim_p`` each), the landmarks'
    positions relative to the agent (``dim_p`` each), the other agents' relative
    positions (``dim_p`` each), then their communication (``dim_c`` each). With
    ``num_landmark_neighbors`` / ``num_agent_neighbors`` only the nearest ones
    are listed (zero-padded to that many). Entity ``"agent"`` ``i`` joins the
    two blocks of other agent ``i`` (``fields``). ``None`` if the sizes do not
    add up to the observation (an mpe2 version this adapter does not know).
    """
    world, sc = raw.world, raw.scenario
    p, c = int(world.dim_p), int(world.dim_c)
    n_land = getattr(sc, "num_landmark_neighbors", None) or len(world.landmarks)
    n_other = getattr(sc, "num_agent_neighbors", None) or len(world.agents) - 1
    land = 2 * p
    other = land + n_land * p
    comm = other + n_other * p
    if comm + n_other * c != g.obs_dim:
        return None
    return {
        "own": [(0, land)],
        "entities": {
            "landmark": {"start": land, "count": n_land, "dim": p},
            "agent": {"fields": [(other, p), (comm, c)], "count": n_other},
        },
    }


# scenario -> (raw_env, group) -> layout of that group's observation (or None)
_ENTITY_LAYOUTS: Dict[str, Callable[[Any, GroupInfo], Optional[Dict[str, Any]]]] = {
    "simple_spread": _simple_spread_layout,
}


def attach_entity_layout(info: EnvInfo, raw: Any) -> None:
    """Set ``info.entity_layout`` for scenarios with a known layout (:data:`_ENTITY_LAYOUTS`).

    ``raw`` is a built mpe2 ``raw_env`` of ``info.scenario``. Discrete groups get
    ``n_normal_actions = n_actions`` and no action targets (no MPE action
    targets an entity); continuous groups get neither key. Other scenarios, or
    a layout whose sizes do not add up, leave ``entity_layout`` as it is (``None``).
    """
    build = _ENTITY_LAYOUTS.get(info.scenario)
    if build is None:
        return
    layout = {name: build(raw, g) for name, g in info.groups.items()}
    if all(v is not None for v in layout.values()):
        info.entity_layout = check_entity_layout(layout, info)


# --------------------------------------------------------------------------- the env


class MPEEnv(MultiAgentEnv):
    """``B`` copies of an mpe2 scenario stepped through mpe2's own world/scenario code.

    Args:
        scenario: MPE scenario name, with or without ``_vN`` (see :func:`scenarios`).
        num_envs: ``B`` (default 32).
        continuous_actions: ``Box(0, 1, (d,))`` actions instead of ``Discrete``.
        max_cycles: steps per episode (truncation), default 25.
        seed: seed used by ``reset()`` when called without one.
        **scenario_kwargs: the scenario's own options, e.g. simple_spread
            ``N=3, local_ratio=0.5``; simple_tag ``num_good=1, num_adversaries=3,
            num_obstacles=2``; see :func:`valid_kwargs`.

    Shapes: ``obs[g]`` ``[B, N_g, obs_dim_g]`` float32; ``state`` ``[B, sum of obs dims]``
    (all observations in agent order); ``reward[g]`` ``[B, N_g]`` float32;
    ``avail_actions[g]`` all True ``[B, N_g, n_g]`` (``None`` if continuous);
    ``alive`` all True (MPE agents never leave). ``reset(seed)`` seeds copy ``b``
    with ``seed + b`` exactly like ``parallel_env(...).reset(seed=seed + b)``.

    Raises:
        MarlError: unknown scenario, unknown or invalid scenario kwargs, bad
            ``num_envs`` / ``max_cycles``, bad actions, ``step`` before ``reset``.
    """

    def __init__(
        self,
        scenario: str,
        num_envs: int = DEFAULT_NUM_ENVS,
        continuous_actions: bool = False,
        max_cycles: int = 25,
        seed: Optional[int] = None,
        **scenario_kwargs,
    ):
        name, module = resolve_scenario(scenario)
        num_envs = check_num_envs(num_envs)
        if not isinstance(max_cycles, (int, np.integer)) or max_cycles < 1:
            raise MarlError(f"max_cycles must be a positive int, got {max_cycles!r}.")
        self._envs = _build_raw_envs(name, int(num_envs), bool(continuous_actions), int(max_cycles), scenario_kwargs)
        first = self._envs[0]
        agents = list(first.possible_agents)
        kind, team_of, shared = scenario_meta(name, first)
        groups = build_groups(
            agents,
            {a: first.observation_space(a) for a in agents},
            {a: first.action_space(a) for a in agents},
            team_of,
        )
        self.layout = AgentLayout(agents, groups)
        self.info = EnvInfo(
            family="mpe",
            scenario=name,
            agents=agents,
            groups=groups,
            state_dim=self.layout.state_dim,
            episode_limit=int(max_cycles),
            kind=kind,
            shared_reward=shared,
            num_envs=int(num_envs),
        )
        attach_entity_layout(self.info, first)
        self.max_cycles = int(max_cycles)
        self.continuous_actions = bool(continuous_actions)
        self._default_seed = seed
        self._state = np.zeros((int(num_envs), self.layout.state_dim), np.float32)
        self._started = False

    # ------------------------------------------------------------------ API

    def reset(self, seed: Optional[int] = None) -> Step:
        """Reset all copies (copy ``b`` with ``seed + b``) and return the first :class:`Step`."""
        if seed is None:
            seed = self._default_seed
        for b, env in enumerate(self._envs):
            env.reset(seed=None if seed is None else int(seed) + b)
            self._observe(b, env)
        self._started = True
        return Step.at_reset(self.layout.observation(self._state))

    def step_env(self, actions: Dict[str, torch.Tensor]) -> Step:
        """Advance every copy one step (see :meth:`MultiAgentEnv.step_env`), as mpe2's AEC env does per cycle."""
        if not self._started:
            raise MarlError("Call reset() before step().")
        B, N = self.num_envs, len(self.info.agents)
        per_agent = self.layout.split_actions(actions)
        if self.continuous_actions:
            acts = [[a[b] for a in per_agent] for b in range(B)]
        else:
            acts = np.stack(per_agent, axis=1).tolist()  # python ints, as parallel_env users pass
        rewards = np.empty((B, N), np.float32)
        truncated = np.zeros(B, bool)
        terminated = np.zeros(B, bool)
        names = self.info.agents
        limit = self.max_cycles
        for b, env in enumerate(self._envs):
            # what SimpleEnv.step does once the last agent of a cycle has acted
            env.current_actions = acts[b]
            env._execute_world_step()
            env.steps += 1
            r = env.rewards
            rewards[b] = [r[n] for n in names]
            if env.steps >= limit:
                truncated[b] = True
            elif env.scenario.is_terminal(env.world):
                terminated[b] = True
            self._observe(b, env)
        return self._make_step(rewards, torch.from_numpy(terminated), torch.from_numpy(truncated))

    def reset_rows(self, rows: torch.Tensor) -> Observation:
        """Reset the copies in ``rows`` unseeded: each continues its RNG stream, as ``parallel_env.reset()``."""
        for b in rows.nonzero().flatten().tolist():
            env = self._envs[b]
            env.reset()
            self._observe(b, env)
        return self.layout.observation(self._state)

    def close(self) -> None:
        for env in self._envs:
            env.close()

    def get_state(self) -> Dict[str, Any]:
        """Per copy: mpe2's ``World`` and ``Scenario`` (entity states and actions, the fields
        scenarios keep between steps such as simple_line's expected positions; deep-copied
        together, so references between them survive), the copy's RNG state, step counter,
        last actions and rewards; and the observation buffer (exact resume). The mpe2
        ``raw_env`` itself is not copied: it is EzPickle, so a copy would be rebuilt from its
        arguments, losing all of that."""
        copies = [
            {
                "world": env.world,
                "scenario": env.scenario,
                "rng": env.np_random.bit_generator.state,
                "steps": env.steps,
                "current_actions": env.current_actions,
                "rewards": getattr(env, "rewards", None),
                "cam_range": getattr(env, "original_cam_range", None),
            }
            for env in self._envs
        ]
        return copy.deepcopy({"copies": copies, "obs_buffer": self._state, "started": self._started})

    def set_state(self, state: Dict[str, Any]) -> None:
        """Restore a :meth:`get_state` dict of an env of the same scenario, options and ``num_envs``.

        Raises:
            MarlError: the state holds another number of copies.
        """
        if len(state["copies"]) != self.num_envs:
            raise MarlError(
                f"MPE state of {len(state['copies'])} copies cannot be loaded into num_envs={self.num_envs}."
            )
        state = copy.deepcopy(state)
        for env, saved in zip(self._envs, state["copies"]):
            env.world, env.scenario, env.original_cam_range = saved["world"], saved["scenario"], saved["cam_range"]
            env.np_random.bit_generator.state = saved["rng"]
            env.steps, env.current_actions = saved["steps"], saved["current_actions"]
            if saved["rewards"] is not None:
                env.rewards = saved["rewards"]
        self._state, self._started = state["obs_buffer"], state["started"]

    # ------------------------------------------------------------------ internals

    def _observe(self, b: int, env: Any) -> None:
        world, observation = env.world, env.scenario.observation
        # one concatenate + one float32 cast == SimpleEnv.observe(...).astype(np.float32) per agent
        self._state[b] = np.concatenate([observation(agent, world) for agent in world.agents])

    def _make_step(self, rewards: np.ndarray, terminated, truncated) -> Step:
        ob = self.layout.observation(self._state)
        return Step(*ob, reward=self.layout.per_group(rewards), terminated=terminated, truncated=truncated)


BACKENDS = (None, "torch", "mpe2")


def _batched(
    scenario: str, num_envs: int, continuous: bool, max_cycles: int, backend: Optional[str], kwargs: Dict[str, Any]
) -> MultiAgentEnv:
    """:class:`MPEEnv` or :class:`~marl.envs.mpe.batched.TorchMPEEnv` as ``backend`` asks (``None``: torch
    where it implements the scenario and options)."""
    from marl.envs.mpe.batched import SCENARIOS, TorchMPEEnv, unsupported_options

    name, _ = resolve_scenario(scenario)
    seed = kwargs.pop("seed", None)
    check_kwargs(f"MPE scenario '{name}'", kwargs, valid_kwargs(name))
    missing = unsupported_options(name, kwargs)
    if backend == "torch" and missing:
        offered = "; ".join(f"{k} (options: {', '.join(v.options) or 'none'})" for k, v in SCENARIOS.items())
        raise MarlError(
            f"The torch MPE backend does not implement {', '.join(missing)}; it implements {offered}. "
            f"Use backend='mpe2' (or leave backend unset to pick it automatically)."
        )
    if backend == "mpe2" or missing:
        return MPEEnv(name, num_envs, continuous, max_cycles, seed=seed, **kwargs)
    reference = MPEEnv(name, 1, continuous, max_cycles, **kwargs)  # checks kwargs; its world gives the constants
    try:
        return TorchMPEEnv(reference, num_envs, continuous, max_cycles, seed=seed)
    finally:
        reference.close()


def _build_raw_envs(name: str, B: int, continuous: bool, max_cycles: int, kwargs: Dict[str, Any]) -> List[Any]:
    """``B`` mpe2 ``raw_env`` copies; bad kwargs become a :class:`MarlError` naming the valid ones."""
    valid = valid_kwargs(name)
    check_kwargs(f"MPE scenario '{name}'", kwargs, valid + ["num_envs", "continuous_actions", "max_cycles", "seed"])
    raw_cls = _raw_env_class(name)
    envs = []
    for b in range(B):
        try:
            env = raw_cls(max_cycles=max_cycles, continuous_actions=continuous, **kwargs)
        except (TypeError, ValueError, AssertionError) as e:
            raise MarlError(
                f"Invalid kwargs {kwargs} for MPE scenario '{name}': {str(e).rstrip('.') or type(e).__name__}. "
                f"Valid kwargs: {', '.join(valid)}."
            ) from e
        if b:
            env.screen = None  # copies never render; drop their 700x700 pygame surface (2 MB each)
        envs.append(env)
    return envs


@episode_limit_as("max_cycles")  # make_env(..., episode_limit=T) sets max_cycles
def make(
    scenario: Optional[str] = None,
    num_envs: int = DEFAULT_NUM_ENVS,
    continuous_actions: bool = False,
    max_cycles: int = 25,
    fast: bool = True,
    backend: Optional[str] = None,
    **scenario_kwargs,
) -> MultiAgentEnv:
    """Registry factory of the ``"mpe"`` family: ``make_env("mpe", "simple_spread", N=3)``.

    Args:
        scenario: MPE scenario (with or without ``_vN``).
        num_envs: ``B`` (default 32).
        continuous_actions: continuous ``Box(0, 1)`` actions.
        max_cycles: episode length (default 25).
        fast: ``True`` (default) -> a batched env (``backend``); ``False`` -> the generic
            :class:`~marl.envs.pettingzoo.PettingZooEnv` over ``parallel_env``
            (same tensors, slower; kept as a reference / fallback).
        backend: ``"torch"`` (:class:`~marl.envs.mpe.batched.TorchMPEEnv`: all copies as
            tensors; the scenarios of :data:`~marl.envs.mpe.batched.SCENARIOS` with their
            default options), ``"mpe2"`` (:class:`MPEEnv`: mpe2's own code per copy, the
            reference), or ``None`` (default): torch where it supports the scenario and
            options, else mpe2.
        **scenario_kwargs: scenario options (``N``, ``local_ratio``, ...) and ``seed``.
    Raises:
        MarlError: no / unknown scenario or bad kwargs (the message lists the valid ones); an
            unknown ``backend``; ``backend="torch"`` for a scenario or option it does not implement.
    """
    if scenario is None:
        raise MarlError(f"make_env('mpe', scenario) needs a scenario. Valid choices: {', '.join(scenarios())}.")
    if backend not in BACKENDS:
        raise unknown_choice("MPE backend", backend, [b for b in BACKENDS if b])
    if fast:
        return _batched(scenario, check_num_envs(num_envs), continuous_actions, max_cycles, backend, scenario_kwargs)
    if backend == "torch":
        raise MarlError(
            "backend='torch' is a batched env; fast=False builds mpe2's parallel_env copies. Pass one of them."
        )
    name, module = resolve_scenario(scenario)
    seed = scenario_kwargs.pop("seed", None)
    check_kwargs(f"MPE scenario '{name}'", scenario_kwargs, valid_kwargs(name))
    mod = importlib.import_module(f"mpe2.{module}")
    copies = [
        mod.parallel_env(max_cycles=max_cycles, continuous_actions=continuous_actions, **scenario_kwargs)
        for _ in range(int(num_envs))
    ]
    kind, team_of, shared = scenario_meta(name, copies[0].unwrapped)
    teams: Dict[str, List[str]] = {}
    for a, t in team_of.items():
        teams.setdefault(t, []).append(a)
    # the generic PettingZoo adapter, reached through the registry's object factories: the
    # constructor hands out the copies built above (their first env told the kind and teams)
    handout = iter(copies)
    env = make_env(
        lambda: next(handout),
        num_envs=len(copies),
        scenario=name,
        kind=kind,
        teams=teams,
        shared_reward=shared,
        episode_limit=max_cycles,
        seed=seed,
        family="mpe",
    )
    attach_entity_layout(env.info, copies[0].unwrapped)
    return env
