"""SMACv2 (StarCraft II) as a batched :class:`~marl.env.MultiAgentEnv`.

Source: ``smacv2`` (https://github.com/oxwhirl/smacv2),
``smacv2.env.starcraft2.wrapper.StarCraftCapabilityEnvWrapper`` over
``StarCraft2Env``. StarCraft II cannot batch, so ``B = num_envs`` copies are
``B`` separate game instances (one SC2 process each, launched by the first
:meth:`reset`) stepped one after the other in a Python loop.

Scenarios are ``"{race}_{n}_vs_{m}"`` for race ``protoss`` / ``terran`` /
``zerg`` and ``(n, m)`` in 5v5, 10v10, 20v20, 10v11, 20v23 (see
:func:`scenarios`). Each uses the map ``10gen_{race}`` and SMACv2's capability
config: ``n_units = n``, ``n_enemies = m``; ``team_gen`` draws unit types with
``weighted_teams`` (protoss: stalker / zealot / colossus 0.45 / 0.45 / 0.1;
terran: marine / marauder / medivac 0.45 / 0.45 / 0.1, never all medivacs;
zerg: zergling / baneling / hydralisk 0.45 / 0.1 / 0.45, never all banelings);
``start_positions`` is ``surrounded_and_reflect`` with ``p = 0.5`` on the
32 x 32 map. The other env arguments are those of SMACv2's published
``sc2_gen_*.yaml`` configs (:data:`DEFAULT_ENV_ARGS`) except
``continuing_episode=True`` (see episode end below); any of them can be
overridden with keyword arguments.

Tensors (``n`` allies in group ``"ally"``, ``m`` enemies):

* ``obs["ally"]`` ``[B, n, obs_dim]``: ``get_obs()`` (move features, ``m``
  enemy blocks, ``n - 1`` ally blocks, own features); the slices are in
  :attr:`EnvInfo.entity_layout`, computed from the env's own
  ``get_obs_move_feats_size`` / ``get_obs_enemy_feats_size`` /
  ``get_obs_ally_feats_size`` / ``get_obs_own_feats_size``, with each unit's
  type one-hot as ``unit_type`` (from ``unit_type_bits``).
* ``state`` ``[B, state_dim]``: ``get_state()``.
* ``avail_actions["ally"]`` ``[B, n, n_actions]`` bool: ``get_avail_actions()``.
  Actions: 0 no-op (legal only, and always, for dead agents), 1 stop, 2-5 move
  north / south / east / west, then ``m`` attack actions (for a terran
  medivac the same action ids heal ally ``i``, in agent-index order).
* ``alive["ally"]`` ``[B, n]``: an agent is alive iff its no-op is *not*
  legal (SMACv2 makes no-op legal exactly for dead agents).
* ``reward["ally"]`` ``[B, n]``: the env's single team reward (scaled so the
  maximum episode return is 20 with the default ``reward_scale``), copied to
  every ally (``shared_reward=True``).

Episode end: the env returns ``terminated=True`` both when the battle ends and
at the time limit (``episode_limit``, 200 steps on the 10gen maps); with
``continuing_episode=True`` it adds ``info["episode_limit"] = True`` at the
time limit, which this adapter reports as ``truncated`` (never
``terminated``). A game crash makes SMACv2 restart the game and return
``(0, True, {})``: reported as ``truncated`` too, and counted in
``step.info["restarts"]`` ``[B]``. ``step.info["episode_metrics"]["win_rate"]``
is ``info["battle_won"]`` as 1.0 / 0.0.

Seeds: copy ``b`` gets ``seed + b`` as StarCraft II's game seed when its game
launches (the first :meth:`reset`); later seeds cannot reach a running game.
SMACv2 draws teams and start positions from unseeded numpy generators, so
episodes are not reproducible (as in SMACv2 itself).

Before anything is created, :func:`check_install` verifies that ``smacv2``
imports and that the game and maps are where pysc2 will look; otherwise a
:class:`~marl.env.MarlError` explains the installation (:data:`INSTALL_STEPS`).
"""

from __future__ import annotations

import copy
import os
from typing import Any, Dict, List, Optional, Tuple

import gymnasium as gym
import numpy as np
import torch

from marl.env import MarlError, MultiAgentEnv, Observation, Step, check_discrete_actions, unknown_choice
from marl.envs.common import ally_team_info, check_kwargs, check_num_envs

DEFAULT_NUM_ENVS = 1  # every copy is a whole StarCraft II process

INSTALL_STEPS = """To use the 'smacv2' env family:
  1. pip install "marl-rllib[smacv2]"   (this is: pip install git+https://github.com/oxwhirl/smacv2.git)
  2. Download the StarCraft II Linux package, version 4.10 (SC2.4.10.zip), from Blizzard's
     s2client-proto page: https://github.com/Blizzard/s2client-proto#downloads
     (direct link: https://blzdistsc2-a.akamaihd.net/Linux/SC2.4.10.zip).
  3. Unzip it with the password "iagreetotheeula" (this accepts Blizzard's AI and Machine
     Learning License) into ~/StarCraftII, or unzip it elsewhere and set SC2PATH to that
     folder: export SC2PATH=/path/to/StarCraftII  (the folder that contains Versions/).
  4. Copy the SMAC maps into the game: the SMAC_Maps folder of smacv2
     (smacv2/env/starcraft2/maps/SMAC_Maps in the smacv2 repository) goes to
     $SC2PATH/Maps/SMAC_Maps (create Maps/ if it does not exist)."""

RACES: Dict[str, Dict[str, Any]] = {
    # team_gen of smacv2/examples/configs/sc2_gen_{race}.yaml
    "protoss": {"unit_types": ["stalker", "zealot", "colossus"], "weights": [0.45, 0.45, 0.1]},
    "terran": {
        "unit_types": ["marine", "marauder", "medivac"],
        "weights": [0.45, 0.45, 0.1],
        "exception_unit_types": ["medivac"],
    },
    "zerg": {
        "unit_types": ["zergling", "baneling", "hydralisk"],
        "weights": [0.45, 0.1, 0.45],
        "exception_unit_types": ["baneling"],
    },
}
SIZES: Tuple[Tuple[int, int], ...] = ((5, 5), (10, 10), (20, 20), (10, 11), (20, 23))
SCENARIOS: Tuple[str, ...] = tuple(f"{race}_{n}_vs_{m}" for race in RACES for n, m in SIZES)
MAP_FILE = "32x32_flat.SC2Map"  # the map file the 10gen_* scenarios load from Maps/SMAC_Maps

# env_args of SMACv2's sc2_gen_*.yaml configs, except continuing_episode (True: flags time-outs)
DEFAULT_ENV_ARGS: Dict[str, Any] = {
    "continuing_episode": True,
    "difficulty": "7",
    "game_version": None,
    "move_amount": 2,
    "obs_all_health": True,
    "obs_instead_of_state": False,
    "obs_last_action": False,
    "obs_own_health": True,
    "obs_pathing_grid": False,
    "obs_terrain_height": False,
    "obs_timestep_number": False,
    "reward_death_value": 10,
    "reward_defeat": 0,
    "reward_negative_scale": 0.5,
    "reward_only_positive": True,
    "reward_scale": True,
    "reward_scale_rate": 20,
    "reward_sparse": False,
    "reward_win": 200,
    "replay_dir": "",
    "replay_prefix": "",
    "conic_fov": False,
    "use_unit_ranges": True,
    "min_attack_range": 2,
    "obs_own_pos": True,
    "num_fov_actions": 12,
    "state_last_action": True,
    "state_timestep_number": False,
    "step_mul": 8,
    "heuristic_ai": False,
    "debug": False,
    "prob_obs_enemy": 0,
}
# further StarCraft2Env arguments a user may set (not in the yaml configs)
_EXTRA_ARGS = (
    "fully_observable",
    "obs_starcraft",
    "heuristic_rest",
    "kill_unit_step_mul",
    "window_size_x",
    "window_size_y",
    "action_mask",
)
# set by the adapter: the time-limit flag and the scenario itself
_FIXED_ARGS = ("continuing_episode", "map_name", "capability_config", "seed")


def scenarios() -> List[str]:
    """SMACv2 scenario names (static; does not import smacv2)."""
    return list(SCENARIOS)


def parse_scenario(scenario: str) -> Tuple[str, int, int]:
    """``"protoss_10_vs_11"`` -> ``("protoss", 10, 11)``.

    Raises:
        MarlError: not one of :func:`scenarios` (the message lists them).
    """
    if scenario not in SCENARIOS:
        raise unknown_choice("SMACv2 scenario", scenario, SCENARIOS)
    race, n, _, m = scenario.split("_")
    return race, int(n), int(m)


def capability_config(race: str, n_units: int, n_enemies: int) -> Dict[str, Any]:
    """SMACv2's ``capability_config`` for a race and team sizes (a fresh dict: the wrapper mutates it)."""
    team_gen = {"dist_type": "weighted_teams", "observe": True, **copy.deepcopy(RACES[race])}
    return {
        "n_units": n_units,
        "n_enemies": n_enemies,
        "team_gen": team_gen,
        "start_positions": {"dist_type": "surrounded_and_reflect", "p": 0.5, "map_x": 32, "map_y": 32},
    }


def env_args(scenario: str, seed: Optional[int] = None, **overrides) -> Dict[str, Any]:
    """The keyword arguments of ``StarCraftCapabilityEnvWrapper`` for ``scenario``.

    Raises:
        MarlError: unknown scenario, or an override that is not an env argument
            (or one the adapter sets itself: ``continuing_episode``, ``map_name``,
            ``capability_config``, ``seed``).
    """
    race, n, m = parse_scenario(scenario)
    fixed = [k for k in overrides if k in _FIXED_ARGS]
    if fixed:
        raise MarlError(
            f"'{fixed[0]}' is set by the smacv2 adapter (scenario '{scenario}') and cannot be overridden; "
            f"choose the scenario by name and the seed with seed=."
        )
    check_kwargs(f"SMACv2 scenario '{scenario}'", overrides, list(DEFAULT_ENV_ARGS) + list(_EXTRA_ARGS))
    return {
        **DEFAULT_ENV_ARGS,
        **overrides,
        "map_name": f"10gen_{race}",
        "capability_config": capability_config(race, n, m),
        "seed": seed,
    }


def sc2_path() -> str:
    """Where pysc2 looks for StarCraft II on Linux: ``$SC2PATH``, else ``~/StarCraftII``."""
    return os.environ.get("SC2PATH") or os.path.expanduser("~/StarCraftII")


def check_install():
    """Import the SMACv2 wrapper class and check the game and maps, creating nothing.

    Returns:
        ``StarCraftCapabilityEnvWrapper``.
    Raises:
        MarlError: smacv2 cannot be imported, the game folder (``$SC2PATH`` or
            ``~/StarCraftII``) has no ``Versions/``, or ``Maps/SMAC_Maps`` lacks
            the SMACv2 map; the message gives :data:`INSTALL_STEPS`.
    """
    try:
        from smacv2.env.starcraft2.wrapper import StarCraftCapabilityEnvWrapper
    except ImportError as e:
        raise MarlError(
            f"The 'smacv2' env family needs the smacv2 package, which could not be imported ({e}).\n{INSTALL_STEPS}"
        ) from e
    path = sc2_path()
    where = f"SC2PATH={path}" if os.environ.get("SC2PATH") else f"SC2PATH is not set and the default {path}"
    if not os.path.isdir(os.path.join(path, "Versions")):
        raise MarlError(f"StarCraft II was not found: {where} has no Versions/ folder.\n{INSTALL_STEPS}")
    map_file = os.path.join(path, "Maps", "SMAC_Maps", MAP_FILE)
    if not os.path.isfile(map_file):
        raise MarlError(f"The SMAC maps are missing: {map_file} does not exist.\n{INSTALL_STEPS}")
    return StarCraftCapabilityEnvWrapper


def entity_layout(raw: Any, n_agents: int, obs_dim: int) -> Dict[str, Any]:
    """The :attr:`EnvInfo.entity_layout` of SMACv2 observations, from ``StarCraft2Env``'s size helpers.

    Observation = move features, enemy blocks, ally blocks, own features
    (``StarCraft2Env.get_obs_agent``), then the time step if ``obs_timestep_number``.
    Move features and the time step count as own features. ``unit_type``
    (omitted when ``raw.unit_type_bits == 0``): the ``unit_type_bits`` type
    one-hot closes each enemy block, and each ally block too except that
    ``obs_last_action`` appends the ally's last action (``n_actions``) after it.

    Raises:
        MarlError: the sizes do not add up to ``obs_dim`` (an smacv2 version this
            adapter does not know).
    """
    move = int(raw.get_obs_move_feats_size())
    n_en, en_dim = (int(x) for x in raw.get_obs_enemy_feats_size())
    n_al, al_dim = (int(x) for x in raw.get_obs_ally_feats_size())
    own = int(raw.get_obs_own_feats_size())
    enemy_start = move
    ally_start = enemy_start + n_en * en_dim
    own_start = ally_start + n_al * al_dim
    own_ranges = [(0, move), (own_start, own_start + own)]
    end = own_start + own
    if end == obs_dim - 1:  # obs_timestep_number appends the time step
        own_ranges.append((end, obs_dim))
        end = obs_dim
    if end != obs_dim or n_al != n_agents - 1:
        raise MarlError(
            f"SMACv2 observation sizes do not add up: move {move} + enemies {n_en}x{en_dim} + allies "
            f"{n_al}x{al_dim} + own {own} != obs_shape {obs_dim}. Unsupported smacv2 version."
        )
    bits = int(getattr(raw, "unit_type_bits", 0))
    last_action = int(raw.n_actions) if getattr(raw, "obs_last_action", False) else 0
    first_attack = int(raw.n_actions_no_attack)
    return {
        "ally": {
            "own": own_ranges,
            "entities": {
                "enemy": {"start": enemy_start, "count": n_en, "dim": en_dim, **_unit_type(en_dim, bits)},
                "ally": {"start": ally_start, "count": n_al, "dim": al_dim, **_unit_type(al_dim - last_action, bits)},
            },
            "n_normal_actions": first_attack,
            "action_targets": {"enemy": (first_attack, n_en)},
        }
    }


def _unit_type(end: int, bits: int) -> Dict[str, Tuple[int, int]]:
    """``{"unit_type": (end - bits, end)}``, or ``{}`` without type bits."""
    return {"unit_type": (end - bits, end)} if bits else {}


class SMACv2Env(MultiAgentEnv):
    """A SMACv2 scenario with ``B = num_envs`` StarCraft II games stepped in a loop.

    Args:
        scenario: ``"{race}_{n}_vs_{m}"`` (see :func:`scenarios`), e.g. ``"protoss_5_vs_5"``.
        num_envs: ``B`` (default 1; each copy is one SC2 process).
        seed: game seed of copy 0 (copy ``b``: ``seed + b``), applied when the game launches.
        **overrides: SMACv2 env arguments replacing :data:`DEFAULT_ENV_ARGS`
            (e.g. ``obs_last_action=True``, ``conic_fov=True``, ``prob_obs_enemy=1.0``).

    Shapes: see the module docstring.

    Raises:
        MarlError: unknown scenario or argument, bad ``num_envs``, smacv2 / StarCraft II /
            maps missing (with the install steps, before any game is created),
            bad or unavailable actions, ``step`` before ``reset``.
    """

    noop_action = 1  # stop (no-op is legal only for dead agents); crash and off-beat wrappers

    def __init__(self, scenario: str, num_envs: int = DEFAULT_NUM_ENVS, seed: Optional[int] = 0, **overrides):
        num_envs = check_num_envs(num_envs)
        env_args(scenario, **overrides)  # validates scenario and overrides before the install check
        wrapper_cls = check_install()
        self._seed = 0 if seed is None else int(seed)
        self._envs = [wrapper_cls(**env_args(scenario, seed=self._seed + b, **overrides)) for b in range(num_envs)]
        first = self._envs[0]
        ei = first.get_env_info()
        n, obs_dim, n_actions = int(ei["n_agents"]), int(ei["obs_shape"]), int(ei["n_actions"])
        agents = [f"ally_{i}" for i in range(n)]
        # StarCraft2Env.step returns one team reward: shared_reward holds
        self.info = ally_team_info(
            "smacv2",
            scenario,
            agents,
            gym.spaces.Box(-np.inf, np.inf, shape=(obs_dim,), dtype=np.float32),
            n_actions,
            int(ei["state_shape"]),
            int(ei["episode_limit"]),
            int(num_envs),
            entity_layout(getattr(first, "env", first), n, obs_dim),
        )
        self.action_names = {
            "ally": ["no_op", "stop", "move_north", "move_south", "move_east", "move_west"]
            + [f"attack_{k}" for k in range(n_actions - 6)]
        }
        self._avail: Optional[np.ndarray] = None  # [B, n, A] legal actions of the current obs
        self._last: List[Tuple[np.ndarray, ...]] = []  # per copy (obs, state, avail) of the current obs

    # ------------------------------------------------------------------ API

    def reset(self, seed: Optional[int] = None) -> Step:
        """Reset every copy; ``seed`` (copy ``b``: ``seed + b``) reaches games not yet launched."""
        if seed is not None:
            for b, env in enumerate(self._envs):
                # StarCraft2Env keeps the game seed in _seed and reads it when it launches SC2
                getattr(env, "env", env)._seed = int(seed) + b
        for env in self._envs:
            env.reset()
        self._last = [_observe(env) for env in self._envs]
        B = self.num_envs
        return Step.at_reset(self._observation(), info=self._info(np.zeros(B, bool), np.zeros(B, np.int64)))

    def check_actions(self, actions: Dict[str, Any]) -> Dict[str, torch.Tensor]:
        """``{"ally": [B, n] int}``, every action legal (``avail_actions``), as SMACv2 asserts.

        Raises:
            MarlError: ``step`` before ``reset``, bad shape / dtype / range, or an unavailable action.
        """
        if self._avail is None:
            raise MarlError("Call reset() before step().")
        g = self.info.groups["ally"]
        a = check_discrete_actions(actions, g, self.num_envs).cpu()
        legal = np.take_along_axis(self._avail, a.numpy()[..., None], axis=-1)[..., 0]
        if not legal.all():
            b, i = (int(x) for x in np.argwhere(~legal)[0])
            raise MarlError(
                f"Action {int(a[b, i])} of {g.agents[i]} in copy {b} is not available "
                f"(legal: {np.flatnonzero(self._avail[b, i]).tolist()}); SMACv2 rejects unavailable actions."
            )
        return {"ally": a}

    def step_env(self, actions: Dict[str, torch.Tensor]) -> Step:
        """Step each copy in turn (see :meth:`MultiAgentEnv.step_env`)."""
        acts = actions["ally"].numpy()
        B = self.num_envs
        reward = np.zeros(B, np.float32)
        term, trunc, won = np.zeros(B, bool), np.zeros(B, bool), np.zeros(B, bool)
        restarts = np.zeros(B, np.int64)
        for b, env in enumerate(self._envs):
            r, done, info = env.step([int(a) for a in acts[b]])
            reward[b] = float(r)
            if done:
                # {} = SMACv2 restarted a crashed game: the episode was cut, not finished
                restarts[b] = int(not info)
                cut = bool(info.get("episode_limit", False)) or not info
                trunc[b], term[b] = cut, not cut
                won[b] = bool(info.get("battle_won", False))
        self._last = [_observe(env) for env in self._envs]
        return self._make_step(reward, term, trunc, won, restarts)

    def reset_rows(self, rows: torch.Tensor) -> Observation:
        """Reset the games in ``rows`` (``[B]`` bool); the others keep their observation."""
        for b in rows.nonzero().flatten().tolist():
            self._envs[b].reset()
            self._last[b] = _observe(self._envs[b])
        return self._observation()

    def close(self) -> None:
        """Close every StarCraft II process."""
        for env in self._envs:
            env.close()

    # ------------------------------------------------------------------ internals

    def _observation(self) -> Observation:
        """The games' last observations (:attr:`_last`) as an :class:`Observation`; remembers the legal
        actions for :meth:`check_actions`."""
        obs, state, avail = _stack(self._last)
        self._avail = avail
        t = torch.from_numpy
        # no-op is legal exactly for dead agents
        return Observation({"ally": t(obs)}, t(state), {"ally": t(avail)}, {"ally": t(~avail[..., 0])})

    @staticmethod
    def _info(won: np.ndarray, restarts: np.ndarray) -> Dict[str, Any]:
        """A step's ``info``: ``episode_metrics["win_rate"]`` ``[B]`` float32 and ``restarts`` ``[B]`` int64."""
        t = torch.from_numpy
        return {"episode_metrics": {"win_rate": t(won.astype(np.float32))}, "restarts": t(restarts)}

    def _make_step(self, reward, term, trunc, won, restarts) -> Step:
        n = self.info.groups["ally"].n_agents
        t = torch.from_numpy
        return Step(
            *self._observation(),
            reward={"ally": t(np.repeat(reward[:, None], n, axis=1))},
            terminated=t(term.copy()),
            truncated=t(trunc.copy()),
            info=self._info(won, restarts),
        )


def _observe(env) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(obs [n, D] float32, state [S] float32, avail [n, A] bool)`` of one game (one get_obs call:
    SMACv2's get_obs updates which enemies each agent has spotted)."""
    return (
        np.asarray(env.get_obs(), dtype=np.float32),
        np.asarray(env.get_state(), dtype=np.float32),
        np.asarray(env.get_avail_actions()).astype(bool),
    )


def _stack(per_copy: List[Tuple[np.ndarray, ...]]) -> Tuple[np.ndarray, ...]:
    """Per-copy ``(obs, state, avail)`` -> batched ``(obs [B, n, D], state [B, S], avail [B, n, A])``."""
    return tuple(np.stack(field) for field in zip(*per_copy))


def make(
    scenario: Optional[str] = None, num_envs: int = DEFAULT_NUM_ENVS, seed: Optional[int] = 0, **overrides
) -> SMACv2Env:
    """Registry factory of the ``"smacv2"`` family: ``make_env("smacv2", "protoss_5_vs_5", num_envs=2)``.

    See :class:`SMACv2Env`.

    Raises:
        MarlError: no / unknown scenario, bad arguments, or smacv2 / StarCraft II /
            the maps not installed (the message gives the install steps).
    """
    if scenario is None:
        raise MarlError(f"make_env('smacv2', scenario) needs a scenario. Valid choices: {', '.join(SCENARIOS)}.")
    return SMACv2Env(scenario, num_envs=num_envs, seed=seed, **overrides)
