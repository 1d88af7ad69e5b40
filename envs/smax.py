"""SMAX (JaxMARL's StarCraft-like micromanagement in JAX) as a batched :class:`~marl.env.MultiAgentEnv`.

Source: ``jaxmarl==0.2.0``, ``jaxmarl.make("HeuristicEnemySMAX",
scenario=map_name_to_scenario(name))``. The learners control the allies
(``ally_0 .. ally_{n-1}``, one group ``"ally"``); the enemies are played by
JaxMARL's built-in heuristic (attack the closest enemy in range, else walk to
the enemy half), so the task is ``"cooperative"``.

Batching (shared with the other JaxMARL families, :mod:`marl.envs.jax_batch`). The ``B``
copies are one ``jax.vmap`` of JaxMARL's single-env ``step_env`` inside one ``jax.jit``:
a call steps every copy, resets (inside the same jitted function, with ``jnp.where``) the
copies whose episode ended, and returns the ended episodes' last observation / state /
legal actions as ``final_*``. Each field is moved to torch once per step
(``jax.device_get`` -> numpy -> ``torch.from_numpy``).

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
from typing import Any, Dict, List, Optional, Sequence, Tuple

import gymnasium as gym
import numpy as np

from marl.env import MarlError, unknown_choice
from marl.envs.common import ally_team_info, check_kwargs, check_num_envs
from marl.envs.common_raw import episode_limit_as
from marl.envs.jax_batch import JaxBatchEnv, JaxSpec, batched_fns, import_jaxmarl

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


def _import_jaxmarl():
    """Import jax and jaxmarl's SMAX, or raise a :class:`MarlError` naming the install command."""
    jax, jaxmarl = import_jaxmarl("smax", INSTALL_HINT)
    from jaxmarl.environments.smax import map_name_to_scenario

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


class SMAXEnv(JaxBatchEnv):
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
        jax = _import_jaxmarl()[0]
        env, spec, fns = _build(scenario, tuple(sorted(env_kwargs.items())), bool(raw_world_state))
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
        self._env = env
        self._init_batch(jax, spec, fns, seed)


def _check_env_kwargs(kw: Dict[str, Any]) -> None:
    """Validate the jaxmarl options we pass through (jaxmarl itself checks nothing)."""
    if "max_steps" in kw:
        ms = kw["max_steps"]
        if not isinstance(ms, (int, np.integer)) or isinstance(ms, bool) or ms < 1:
            raise MarlError(f"max_steps must be a positive int, got {ms!r}.")
    if "attack_mode" in kw and kw["attack_mode"] not in _ATTACK_MODES:
        raise unknown_choice("SMAX attack_mode", kw["attack_mode"], _ATTACK_MODES)


@functools.lru_cache(maxsize=None)
def _build(scenario: str, env_kwargs: Tuple[Tuple[str, Any], ...], raw_world_state: bool):
    """``(HeuristicEnemySMAX, JaxSpec, (batched reset, batched step))`` for one scenario and options.

    Cached: JaxMARL envs are stateless, so every :class:`SMAXEnv` of the same
    scenario and options shares one pair of jitted functions, and XLA compiles
    once per batch size instead of once per env object.
    """
    jax, jaxmarl, map_name_to_scenario = _import_jaxmarl()
    env = jaxmarl.make("HeuristicEnemySMAX", scenario=map_name_to_scenario(scenario), **dict(env_kwargs))
    spec = _spec(jax, env, raw_world_state)
    return env, spec, batched_fns(jax, spec)


def _spec(jax, env, raw_world_state: bool) -> JaxSpec:
    """The :class:`JaxSpec` of a HeuristicEnemySMAX: ``observe`` -> ``(obs [n, D], state [S],
    avail [n, A] bool, alive [n] bool)``; ``outcome`` -> ``(reward [n], terminated, truncated,
    {"win_rate"})`` with the episode-end rules of the module docstring.
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

    def outcome(old_st, st, rew, dones, infos):
        alive = st.state.unit_alive
        allies_out, enemies_out = ~alive[:n].any(), ~alive[n:].any()
        terminated = allies_out | enemies_out
        # st.state.step is already incremented here (JaxMARL's own check uses the old value)
        truncated = (st.state.step >= env.max_steps) & ~terminated
        reward = jnp.stack([rew[a] for a in agents]).astype(jnp.float32)
        won = enemies_out & ~allies_out
        return reward, terminated, truncated, {"win_rate": won.astype(jnp.float32)}

    return JaxSpec(env, agents, observe, outcome, ("win_rate",))


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
