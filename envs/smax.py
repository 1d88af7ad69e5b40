"""SMAX (JaxMARL's StarCraft-like micromanagement in JAX) as a batched :class:`~marl.env.MultiAgentEnv`.

Source: ``jaxmarl==0.2.0``, ``jaxmarl.make("HeuristicEnemySMAX",
scenario=map_name_to_scenario(name))``. The learners control the allies
(``ally_0 .. ally_{n-1}``, one group ``"ally"``); the enemies are played by
JaxMARL's built-in heuristic (attack the closest enemy in range, else walk to
the enemy half), so the task is ``"cooperative"``.

Batching. The ``B`` copies are one ``jax.vmap`` of JaxMARL's single-env
``step_env`` inside one ``jax.jit``: a call steps every copy, resets (inside the
same jitted function, with ``jnp.where``) the copies whose episode ended, and
returns the ended episodes' last observation / state / legal actions as
``final_*``. Each field is moved to torch once per step (``jax.device_get`` ->
numpy -> ``torch.from_numpy``).

What the tensors hold (``n`` allies, ``m`` enemies, ``u = 6`` unit types):

* ``obs["ally"]`` ``[B, n, 13(n-1) + 13m + 4 + u]``: JaxMARL's ``unit_list``
  observation, unchanged. Per other unit (the other allies in index order,
  then the enemies in index order; zeros when out of sight range or dead):
  health fraction, relative x / y divided by the observer's sight range,
  last movement x / y, last attack action / max action, weapon cooldown
  fraction, unit-type one-hot. Then the own features: health fraction,
  x / map width, y / map height, weapon cooldown fraction, type one-hot
  (all zero once the agent is dead). :attr:`EnvInfo.entity_layout` gives the
  slices, with ``unit_type`` (7, 13) (the one-hot inside each unit block).
* ``state`` ``[B, (4 + u + 2)(n + m)]``: the layout of ``SMAX.get_world_state``
  (per unit: health fraction, x, y, weapon cooldown, type one-hot; then every
  unit's team; then every unit's type index). Two features are rescaled
  because JaxMARL's raw values are unbounded: x / y are divided by the map
  size (raw: map units, 0..32) and the cooldown is the fraction the
  observation uses, clipped to [0, 1] (raw: seconds, drifting to -0.5 per step
  below zero while a unit does not fire). ``raw_world_state=True`` gives
  JaxMARL's values unchanged (for comparison with JaxMARL baselines).
* actions ``Discrete(5 + m)``: 0..3 move (diagonal directions rotated by
  45 degrees, i.e. the four compass directions), 4 stop, ``5 + k`` attack
  enemy ``k``. ``avail_actions`` is JaxMARL's ``get_avail_actions``: stop is
  always legal, moves only while alive, attack ``k`` only while alive and
  enemy ``k`` alive and within attack range. A dead agent has only action 4
  (stop, the no-op) legal. An illegal action acts as stop.
* ``reward["ally"]`` ``[B, n]``: JaxMARL's team reward, the same for every
  ally (``shared_reward=True``), dead allies included: enemy health removed
  this step as a fraction of each unit's maximum, summed over enemies and
  divided by ``m`` (so at most 1 over an episode), plus ``won_battle_bonus``
  (1.0) on the step the battle is won. Unlike SMAC there is no rescaling to
  20 and no reward for kills.
* ``alive["ally"]`` ``[B, n]``: ``unit_alive`` of the allies.

Episode end (JaxMARL's ``is_terminal`` checked and re-derived here):

* ``terminated``: every ally or every enemy is dead (a unit dies at 0 health,
  or when it touches the map edge: ``walls_cause_death=True``).
* ``truncated``: ``max_steps`` (default 100) steps were taken and the battle is
  not over. ``EnvInfo.episode_limit == max_steps``. JaxMARL itself evaluates
  its time limit on the step counter *before* incrementing it, so its own
  ``dones["__all__"]`` fires one step later (after ``max_steps + 1`` steps)
  and never tells a time-out from a battle end; this adapter uses the
  incremented counter, so episodes last at most ``max_steps`` steps.
* ``step.info["episode_metrics"]["win_rate"]`` ``[B]`` float: 1.0 when every
  enemy is dead and at least one ally alive at the end of the step (the
  condition under which JaxMARL pays the win bonus; both sides dying in the
  same step is a draw, 0.0), else 0.0. Read it in rows whose episode ended.

Seeds: ``reset(seed)`` gives copy ``b`` the key ``jax.random.PRNGKey(seed + b)``;
each copy then splits its own key every step, so copy ``b`` of a batch equals
copy 0 of a batch reset with ``seed + b`` fed the same actions.

Speed (2 shared CPU cores, ``jax`` 0.10.2 CPU, after compilation): 3m about
20-45k env steps/s at B=256, 2s3z about 8-23k (table in ``docs/starcraft.md``).
XLA compiles once per scenario, options and ``num_envs`` (the cached jitted
functions are shared by envs built alike): about 2-4 s for ``reset`` and
5-10 s for ``step`` on an idle machine, up to 30 s under load.
"""

from __future__ import annotations

import functools
import importlib
import io
import os
import sys
from typing import Any, Dict, List, Optional, Sequence, Tuple

import gymnasium as gym
import numpy as np
import torch

from marl.env import MarlError, MultiAgentEnv, Observation, Step, unknown_choice
from marl.env.rules import EnvRuleError
from marl.envs.common import ally_team_info, check_kwargs, check_num_envs, episode_limit_as, per_copy

DEFAULT_NUM_ENVS = 64
INSTALL_HINT = 'pip install "marl-rllib[smax]"  (i.e. pip install jaxmarl==0.2.0)'

# JaxMARL 0.2.0 MAP_NAME_TO_SCENARIO keys, listed statically so that listing
# scenarios never imports jax (tests/test_smax.py checks them against jaxmarl)
SCENARIOS = (
    "3m",
    "8m",
    "25m",
    "2s3z",
    "3s5z",
    "5m_vs_6m",
    "10m_vs_11m",
    "27m_vs_30m",
    "3s5z_vs_3s6z",
    "3s_vs_5z",
    "6h_vs_8z",
    "smacv2_5_units",
    "smacv2_10_units",
    "smacv2_20_units",
)

# kwargs passed through to jaxmarl's HeuristicEnemySMAX / SMAX (the others,
# e.g. observation_type="conic" or continuous actions, would break the layout)
_ENV_KWARGS = ("max_steps", "enemy_shoots", "attack_mode", "won_battle_bonus", "walls_cause_death", "see_enemy_actions")
_ATTACK_MODES = ("closest", "random")
N_MOVE_ACTIONS = 5  # 4 moves + stop; JaxMARL's num_movement_actions
STOP_ACTION = 4


def scenarios() -> List[str]:
    """SMAX scenario names (static; importing this module does not import jax or jaxmarl)."""
    return list(SCENARIOS)


def _limit_xla_threads() -> None:
    """Keep XLA's CPU backend to one intra-op thread unless the user set ``XLA_FLAGS``.

    Only effective before jax creates its CPU backend (the first jax computation
    in the process). Batched SMAX steps are many small ops; on a shared
    2-core machine a single thread is as fast and leaves the other core to torch.
    """
    if "XLA_FLAGS" not in os.environ:
        os.environ["XLA_FLAGS"] = "--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1"
    os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")  # a GPU jax must not grab all memory


def _import_quietly(module: str) -> None:
    """Import ``module`` with its prints swallowed and ``sys.stdout`` / ``sys.stderr`` preserved.

    jaxmarl 0.2.0 prints a note about optional envs on import, and its mabrax
    module resets ``sys.stdout`` / ``sys.stderr`` to ``sys.__stdout__`` /
    ``sys.__stderr__`` (which breaks notebook and pytest output capture).
    """
    if module in sys.modules:
        return
    saved = sys.stdout, sys.stderr, sys.__stdout__
    sink = io.StringIO()
    sys.stdout = sys.__stdout__ = sink  # jaxmarl "restores" stdout to __stdout__: keep it ours
    try:
        importlib.import_module(module)
    finally:
        sys.stdout, sys.stderr, sys.__stdout__ = saved


def _import_jaxmarl():
    """Import jax and jaxmarl's SMAX, or raise a :class:`MarlError` naming the install command."""
    _limit_xla_threads()
    try:
        import jax

        _import_quietly("jaxmarl")
        import jaxmarl
        from jaxmarl.environments.smax import map_name_to_scenario
    except ImportError as e:
        raise MarlError(
            f"The 'smax' env family needs JaxMARL (and jax), which could not be imported ({e}). "
            f"Install it with: {INSTALL_HINT}"
        ) from e
    return jax, jaxmarl, map_name_to_scenario


def entity_layout(n_allies: int, n_enemies: int, unit_features: Sequence[str], own_feats: int) -> Dict[str, Any]:
    """The :attr:`EnvInfo.entity_layout` of SMAX's ``unit_list`` observation (group ``"ally"``).

    Observation of ally ``i``: ``n_allies - 1`` ally blocks (the other allies,
    index order), ``n_enemies`` enemy blocks, one feature per name of
    ``unit_features`` each (JaxMARL's ``SMAX.unit_features``), then
    ``own_feats`` own features. Action ``5 + k`` attacks enemy block ``k``.
    ``unit_type`` of both entity types: the ``unit_type_bits_*`` features.
    """
    unit_feats = len(unit_features)
    n_other = n_allies - 1
    enemy_start = n_other * unit_feats
    own_start = enemy_start + n_enemies * unit_feats
    unit_type = _unit_type_range(unit_features)
    typed = {"unit_type": unit_type} if unit_type else {}
    return {
        "ally": {
            "own": [(own_start, own_start + own_feats)],
            "entities": {
                "ally": {"start": 0, "count": n_other, "dim": unit_feats, **typed},
                "enemy": {"start": enemy_start, "count": n_enemies, "dim": unit_feats, **typed},
            },
            "n_normal_actions": N_MOVE_ACTIONS,
            "action_targets": {"enemy": (N_MOVE_ACTIONS, n_enemies)},
        }
    }


def _unit_type_range(features: Sequence[str]) -> Optional[Tuple[int, int]]:
    """``(a, b)``: features ``a..b-1`` are the ``unit_type_bit*`` names; ``None`` if there are none.

    Raises:
        MarlError: the type bits are not contiguous (a jaxmarl version this adapter does not know).
    """
    bits = [i for i, f in enumerate(features) if f.startswith("unit_type_bit")]
    if not bits:
        return None
    if bits != list(range(bits[0], bits[-1] + 1)):
        raise MarlError(f"SMAX unit type features are not contiguous in {list(features)}; unsupported jaxmarl version.")
    return bits[0], bits[-1] + 1


class SMAXEnv(MultiAgentEnv):
    """A SMAX scenario, ``B = num_envs`` copies stepped as one jitted ``jax.vmap`` call.

    ``action_names["ally"]``: ``move_0..move_3``, ``stop``, ``attack_0..``;
    ``noop_action = 4`` (stop), used by the crash and off-beat wrappers.

    Args:
        scenario: SMAX map (see :func:`scenarios`), e.g. ``"3m"``, ``"2s3z"``,
            ``"smacv2_5_units"``.
        num_envs: ``B`` (default 64).
        seed: seed of the first :meth:`reset` without a seed (default 0).
        raw_world_state: ``state`` = JaxMARL's world state unchanged (default:
            positions and cooldowns rescaled, see the module docstring).
        max_steps: episode limit (default 100, JaxMARL's default).
        enemy_shoots / attack_mode: heuristic enemy options (default ``True`` /
            ``"closest"``; ``"random"`` picks a random enemy in range).
        won_battle_bonus / walls_cause_death / see_enemy_actions: JaxMARL SMAX options.

    Shapes: see the module docstring (``obs["ally"]`` ``[B, n, obs_dim]`` float32,
    ``state`` ``[B, state_dim]``, ``avail_actions["ally"]`` ``[B, n, 5 + m]`` bool,
    ``reward["ally"]`` / ``alive["ally"]`` ``[B, n]``).

    Raises:
        MarlError: jaxmarl missing (names ``pip install "marl-rllib[smax]"``), unknown
            scenario or kwarg, bad ``num_envs`` / ``max_steps`` / ``attack_mode``,
            bad actions, ``step`` before ``reset``.
    """

    noop_action = 4  # stop

    def __init__(
        self,
        scenario: str,
        num_envs: int = DEFAULT_NUM_ENVS,
        seed: Optional[int] = 0,
        raw_world_state: bool = False,
        **env_kwargs,
    ):
        if scenario not in SCENARIOS:
            raise unknown_choice("SMAX scenario", scenario, SCENARIOS)
        num_envs = check_num_envs(num_envs)
        check_kwargs(
            f"SMAX scenario '{scenario}'", env_kwargs, list(_ENV_KWARGS) + ["num_envs", "seed", "raw_world_state"]
        )
        _check_env_kwargs(env_kwargs)
        self._jax = _import_jaxmarl()[0]
        self._env, self._reset_fn, self._step_fn = _build(
            scenario, tuple(sorted(env_kwargs.items())), bool(raw_world_state)
        )
        env = self._env
        n, m = env.num_allies, env.num_enemies
        agents = list(env.agents)
        n_actions = int(env.action_spaces[agents[0]].n)
        # compute_reward gives every ally its team's reward: shared_reward holds
        self.info = ally_team_info(
            "smax",
            scenario,
            agents,
            gym.spaces.Box(-1.0, 1.0, shape=(int(env.obs_size),), dtype=np.float32),
            n_actions,
            int(env.state_size),
            int(env.max_steps),
            int(num_envs),
            entity_layout(n, m, env.unit_features, len(env.own_features)),
        )
        # names for the wrappers: off-beat durations ({"attack": 3}) and the crash / off-beat no-op
        self.action_names = {
            "ally": [f"move_{i}" for i in range(4)]
            + ["stop"]
            + [f"attack_{k}" for k in range(n_actions - N_MOVE_ACTIONS)]
        }
        self._default_seed = 0 if seed is None else int(seed)
        self._keys = None  # [B, 2] uint32, one PRNG stream per copy
        self._states = None  # batched HeuristicEnemySMAX State pytree
        self._current = None  # (obs, state, avail, alive) jax arrays after the last step's resets

    # ------------------------------------------------------------------ API

    def reset(self, seed: Optional[int] = None) -> Step:
        """Reset all copies: copy ``b`` gets ``PRNGKey(seed + b)``.

        ``seed=None``: the constructor ``seed`` on the first reset, afterwards the
        copies' own key streams continue (fresh, still reproducible episodes).
        """
        jnp = self._jax.numpy
        B = self.num_envs
        if seed is None and self._keys is not None:
            keys = self._keys
        else:
            base = self._default_seed if seed is None else int(seed)
            seeds = np.arange(base, base + B, dtype=np.int64) % (2**32)
            keys = self._jax.vmap(self._jax.random.PRNGKey)(jnp.asarray(seeds.astype(np.uint32)))
        self._keys, self._states, cur = self._reset_fn(keys)
        obs, state, avail, alive = _to_torch(self._jax.device_get(cur))
        no = torch.zeros(B, dtype=torch.bool)
        zero = torch.zeros(B, self.info.groups["ally"].n_agents)
        return Step(
            obs={"ally": obs},
            state=state,
            avail_actions={"ally": avail},
            alive={"ally": alive},
            reward={"ally": zero},
            terminated=no,
            truncated=no.clone(),
            final_obs={"ally": obs},
            final_state=state,
            final_avail_actions={"ally": avail},
            info={"episode_metrics": {"win_rate": torch.zeros(B)}},
        )

    def step_env(self, actions: Dict[str, torch.Tensor]) -> Step:
        """Step every copy in one jitted call (see :meth:`MultiAgentEnv.step_env`).

        The same XLA call also resets the copies whose episode ended (keeping
        one PRNG split per step, as in JaxMARL); :meth:`reset_rows` hands out
        their first observation.

        Args:
            actions: ``{"ally": [B, n] int}`` with values in ``[0, 5 + m)`` (checked by :meth:`step`).
        """
        if self._states is None:
            raise MarlError("Call reset() before step().")
        acts = actions["ally"].cpu().numpy().astype(np.int32)  # jax runs without x64: int32 actions
        self._keys, self._states, self._current, final, rest = self._step_fn(self._keys, self._states, acts)
        final, rest = self._jax.device_get((final, rest))
        obs, state, avail, alive = _to_torch(final)
        B, n = self.num_envs, self.info.groups["ally"].n_agents
        reward, terminated, truncated, won = (
            per_copy(np.array(x), shape, self._fail(key))
            for x, shape, key in zip(rest, ((B, n), (B,), (B,), (B,)), ("reward", "terminated", "truncated", "won"))
        )
        return Step(
            obs={"ally": obs},
            state=state,
            avail_actions={"ally": avail},
            alive={"ally": alive},
            reward={"ally": reward},
            terminated=terminated,
            truncated=truncated,
            info={"episode_metrics": {"win_rate": won.float()}},
        )

    def _fail(self, key: str):
        """``detail -> EnvRuleError`` for a JaxMARL output the adapter cannot read as one value per copy (and agent)."""
        rule = "reward_space" if key == "reward" else "flags"
        return lambda detail: EnvRuleError(rule, f"smax:{self.info.scenario}", detail, key=key)

    def reset_rows(self, rows: torch.Tensor) -> Observation:
        """The observation after the reset of the copies in ``rows``, which :meth:`step_env` already did."""
        obs, state, avail, alive = _to_torch(self._jax.device_get(self._current))
        return Observation({"ally": obs}, state, {"ally": avail}, {"ally": alive})

    def close(self) -> None:
        self._states = self._keys = self._current = None

    def get_state(self) -> Dict[str, Any]:
        """The copies' PRNG keys, JaxMARL state pytrees and last observations as numpy (exact resume)."""
        host = self._jax.device_get((self._keys, self._states, self._current))
        return {"arrays": self._jax.tree.map(np.array, host)}

    def set_state(self, state: Dict[str, Any]) -> None:
        """Restore a :meth:`get_state` dict of an env of the same scenario, options and ``num_envs``."""
        jnp = self._jax.numpy
        self._keys, self._states, self._current = self._jax.tree.map(jnp.asarray, state["arrays"])


def _check_env_kwargs(kw: Dict[str, Any]) -> None:
    """Validate the jaxmarl options we pass through (jaxmarl itself checks nothing)."""
    if "max_steps" in kw:
        ms = kw["max_steps"]
        if not isinstance(ms, (int, np.integer)) or isinstance(ms, bool) or ms < 1:
            raise MarlError(f"max_steps must be a positive int, got {ms!r}.")
    if "attack_mode" in kw and kw["attack_mode"] not in _ATTACK_MODES:
        raise unknown_choice("SMAX attack_mode", kw["attack_mode"], _ATTACK_MODES)


def _to_torch(fields: Tuple[np.ndarray, ...]) -> Tuple[torch.Tensor, ...]:
    """(obs, state, avail, alive) numpy -> torch float32 / float32 / bool / bool (one copy each)."""
    obs, state, avail, alive = fields
    return (
        torch.from_numpy(np.array(obs, dtype=np.float32)),
        torch.from_numpy(np.array(state, dtype=np.float32)),
        torch.from_numpy(np.array(avail, dtype=bool)),
        torch.from_numpy(np.array(alive, dtype=bool)),
    )


@functools.lru_cache(maxsize=None)
def _build(scenario: str, env_kwargs: Tuple[Tuple[str, Any], ...], raw_world_state: bool):
    """``(HeuristicEnemySMAX, batched reset, batched step)`` for one scenario and options.

    Cached: JaxMARL envs are stateless, so every :class:`SMAXEnv` of the same
    scenario and options shares one pair of jitted functions, and XLA compiles
    once per batch size instead of once per env object.
    """
    jax, jaxmarl, map_name_to_scenario = _import_jaxmarl()
    env = jaxmarl.make("HeuristicEnemySMAX", scenario=map_name_to_scenario(scenario), **dict(env_kwargs))
    return (env, *_batched_fns(jax, env, raw_world_state))


def _batched_fns(jax, env, raw_world_state: bool):
    """Build the jitted batched ``reset(keys)`` and ``step(keys, states, actions)`` of a HeuristicEnemySMAX.

    reset: ``keys [B, 2]`` -> ``(keys, states, (obs, state, avail, alive))``.
    step:  ``(keys, states, actions [B, n] int32)`` -> ``(keys, states, current, final,
    (reward [B, n], terminated [B], truncated [B], won [B]))`` where ``current``
    and ``final`` are ``(obs [B, n, D], state [B, S], avail [B, n, A] bool, alive [B, n] bool)``.
    """
    jnp = jax.numpy
    smax = env._env  # the underlying two-team SMAX
    agents = list(env.agents)
    n, n_units = env.num_allies, env.num_allies + env.num_enemies
    n_own = len(smax.own_features)
    map_size = jnp.array([smax.map_width, smax.map_height], dtype=jnp.float32)

    def world_state(ws):
        if raw_world_state:
            return ws
        units = ws[: n_units * n_own].reshape(n_units, n_own)
        types = ws[-n_units:].astype(jnp.int32)
        cooldown = jnp.clip(units[:, 3] / smax.unit_type_weapon_cooldowns[types], 0.0, 1.0)
        units = units.at[:, 1:3].divide(map_size).at[:, 3].set(cooldown)
        return jnp.concatenate([units.reshape(-1), ws[n_units * n_own :]])

    def observe(obs_dict, st):
        obs = jnp.stack([obs_dict[a] for a in agents]).astype(jnp.float32)
        av = env.get_avail_actions(st)
        avail = jnp.stack([av[a] for a in agents]).astype(bool)
        return obs, world_state(obs_dict["world_state"]).astype(jnp.float32), avail, st.state.unit_alive[:n]

    def strong(tree):
        # reset leaves some Python-scalar leaves weakly typed while step outputs are
        # strongly typed; equal avals keep step from compiling a second time
        return jax.tree.map(lambda x: jnp.asarray(x, dtype=x.dtype), tree)

    def reset_one(key):
        key, k_reset = jax.random.split(key)
        obs_dict, st = env.reset(k_reset)
        return key, strong(st), observe(obs_dict, st)

    def step_one(key, st, actions):
        key, k_step, k_reset = jax.random.split(key, 3)
        obs_dict, st, rew, _, _ = env.step_env(k_step, st, {a: actions[i] for i, a in enumerate(agents)})
        alive = st.state.unit_alive
        allies_out, enemies_out = ~alive[:n].any(), ~alive[n:].any()
        terminated = allies_out | enemies_out
        # st.state.step is already incremented here (JaxMARL's own check uses the old value)
        truncated = (st.state.step >= env.max_steps) & ~terminated
        done = terminated | truncated
        final = observe(obs_dict, st)
        fresh_obs, fresh_st = env.reset(k_reset)
        fresh = observe(fresh_obs, fresh_st)
        pick = functools.partial(jax.tree.map, lambda new, old: jnp.where(done, new, old))
        reward = jnp.stack([rew[a] for a in agents]).astype(jnp.float32)
        won = enemies_out & ~allies_out
        return key, strong(pick(fresh_st, st)), pick(fresh, final), final, (reward, terminated, truncated, won)

    return jax.jit(jax.vmap(reset_one)), jax.jit(jax.vmap(step_one))


@episode_limit_as("max_steps")  # make_env(..., episode_limit=T) sets max_steps
def make(
    scenario: Optional[str] = None,
    num_envs: int = DEFAULT_NUM_ENVS,
    seed: Optional[int] = 0,
    **kwargs,
) -> SMAXEnv:
    """Registry factory of the ``"smax"`` family: ``make_env("smax", "3m", num_envs=64, seed=0)``.

    See :class:`SMAXEnv` for the arguments.

    Raises:
        MarlError: no / unknown scenario (the message lists the valid ones), bad
            kwargs, or jaxmarl not installed (the message says ``pip install "marl-rllib[smax]"``).
    """
    if scenario is None:
        raise MarlError(f"make_env('smax', scenario) needs a scenario. Valid choices: {', '.join(SCENARIOS)}.")
    return SMAXEnv(scenario, num_envs=num_envs, seed=seed, **kwargs)
