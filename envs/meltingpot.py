"""Melting Pot substrates as a batched :class:`~marl.env.MultiAgentEnv`: ``make_env("meltingpot", "clean_up")``.

Source: ``dm-meltingpot`` (Agapiou et al. 2022, "Melting Pot 2.0", arXiv:2211.13746; Leibo et al. 2021,
"Scalable Evaluation of Multi-Agent Reinforcement Learning with Melting Pot", arXiv:2107.06857), on the
``dmlab2d`` engine. A *substrate* is the game alone, every player learning; a *scenario* adds background
bots (saved TensorFlow models) and is not supported (see :func:`make`). ``B = num_envs`` substrates are
stepped one after the other in a Python loop (dmlab2d cannot batch). Rules:

* **Players** ``player_0 .. player_{n-1}`` (``n`` = the substrate's default roles, or ``roles=``); players
  of one role form one group (``"player"`` for the role ``"default"``, else the role's name), team = role.
  ``kind="mixed"`` (social dilemmas are general-sum), ``shared_reward=False``.
* **Observations**: a ``gym.spaces.Dict`` per player with the substrate's individual observation names
  (``get_config(name).individual_observation_names``): ``"RGB"`` ``Box(0, 255, [88 / k, 88 / k, 3], uint8)``
  (``rgb_scale=k`` averages ``k x k`` pixel blocks; ``k = 8`` gives one pixel per 8-pixel sprite cell,
  ``[11, 11, 3]``) and every other key as a float32 vector ``Box(-inf, inf, [size])`` (scalars such as
  ``READY_TO_SHOOT`` have size 1; ``INTERACTION_INVENTORIES`` ``[2, 2]`` is flattened to 4). The global and
  debug keys (``WORLD.RGB``, ``COLLECTIVE_REWARD``, the substrate's ``global_observation_names``) are not
  in the players' observations.
* **State** ``[B, state_dim]`` float32 (for centralised critics, never for the policies):
  ``state="world"`` (default): ``WORLD.RGB`` averaged over the substrate's sprite cells (``spriteSize``,
  8: one RGB triple per map cell) scaled to ``[0, 1]``, flattened, then every player's vector keys in
  player order; ``state="vectors"``: the players' vector keys only (an error on substrates whose players
  see RGB only).
* **Actions** ``Discrete(n_actions)`` of the substrate's action set; all legal.
* **Rewards** per player, as the substrate gives them.
* **Episode end**: the substrate ends episodes itself (most end at random after a minimum length, before
  ``maxEpisodeLengthFrames``, 5000 on the five social dilemmas below): an end before the step limit is a
  termination, reaching the limit (``max_steps`` if given, else ``maxEpisodeLengthFrames``) a truncation.
* **Episode statistics** (``step.info["episode_metrics"]``, ``[B]`` float, read for the copies that ended):
  ``per_capita_return`` (sum of all players' returns / n: Melting Pot's score) and ``events_<name>``:
  how often each event of the substrate's components (``zap``, ``edible_consumed``, ``player_cleaned``,
  ``coin_consumed``, ``interaction``, ...) fired in the episode (the names are read from the Lua source
  of the components the substrate uses, so every episode reports the same keys).
* **Seeds**: ``reset(seed)`` (or ``reset()`` with the constructor's ``seed``) rebuilds copy ``b`` with the
  engine seed Melting Pot draws from Python's ``random`` seeded with ``seed + b`` (the adapter saves and
  restores ``random``'s state around the build); ``reset()`` of an env built with ``seed=None`` resets the
  substrates in place; ended copies reset themselves, continuing their own seed sequence. The seeds set
  the maps and the engine, but dmlab2d episodes are not bit-reproducible: two builds of one substrate from
  the same settings and engine seed in one process gave different ``WORLD.RGB`` frames within 6 steps in
  4 of 4 tries on commons_harvest__open and 3 of 4 on coins (dm-meltingpot 2.4.1, dmlab2d 1.0.2).

dm-meltingpot's package ``__init__`` imports its bots, which import TensorFlow; the substrates need no
TensorFlow, so the adapter imports ``meltingpot.substrate`` without running that ``__init__`` when
``meltingpot`` is not imported yet (:func:`meltingpot_module`).
"""

from __future__ import annotations

import functools
import importlib
import importlib.util
import os
import random
import re
import sys
from typing import Any, Dict, List, Optional, Sequence, Tuple

import gymnasium as gym
import numpy as np
import torch

from marl.env import EnvInfo, MarlError, MultiAgentEnv, Observation, Step, unknown_choice
from marl.envs.common import build_groups, check_kwargs, check_num_envs

__all__ = ["MeltingPotEnv", "make", "scenarios", "SOCIAL_DILEMMAS"]

DEFAULT_NUM_ENVS = 8
STATES = ("world", "vectors")
RGB = "RGB"
INSTALL = (
    "Melting Pot is not installed: pip install 'marl-rllib[meltingpot]' (dm-meltingpot and dmlab2d; "
    "Linux or macOS, Python >= 3.11)."
)
#: The social-dilemma substrates issue 30 asks for first (all substrates work).
SOCIAL_DILEMMAS = (
    "commons_harvest__open",
    "clean_up",
    "prisoners_dilemma_in_the_matrix__arena",
    "stag_hunt_in_the_matrix__arena",
    "coins",
)


def meltingpot_module(name: str) -> Any:
    """Import ``meltingpot.<name>`` without running dm-meltingpot's package ``__init__`` (which imports
    its TensorFlow bots) unless ``meltingpot`` is already imported.

    Raises:
        MarlError: dm-meltingpot (or dmlab2d, which the substrates import) is not installed.
    """
    if "meltingpot" not in sys.modules:
        spec = importlib.util.find_spec("meltingpot")
        if spec is None:
            raise MarlError(INSTALL)
        sys.modules["meltingpot"] = importlib.util.module_from_spec(spec)  # the package, __init__ not run
    try:
        return importlib.import_module(f"meltingpot.{name}")
    except ImportError as e:
        raise MarlError(f"{INSTALL} Importing meltingpot.{name} failed: {e}") from e


@functools.lru_cache(maxsize=None)
def scenarios() -> List[str]:
    """The substrate names of the installed dm-meltingpot (``meltingpot.substrate.SUBSTRATES``, 49 in 2.4);
    the five :data:`SOCIAL_DILEMMAS` when it is not installed."""
    try:
        return sorted(meltingpot_module("substrate").SUBSTRATES)
    except MarlError:
        return sorted(SOCIAL_DILEMMAS)


class MeltingPotEnv(MultiAgentEnv):
    """``B`` copies of one Melting Pot substrate stepped in a loop (rules: module docstring).

    Args:
        substrate: a substrate name (:func:`scenarios`).
        num_envs: ``B`` (default 8).
        roles: one role per player (the substrate's ``valid_roles``); default its ``default_player_roles``.
        rgb_scale: ``k``: average ``k x k`` pixel blocks of ``"RGB"`` (must divide its height and width).
        state: ``"world"`` or ``"vectors"`` (module docstring).
        max_steps: truncate episodes after this many steps (default: the substrate's own limit).
        seed: seed of ``reset()`` without one (``None``: unseeded).

    Shapes (``n`` players, group ``g``): ``obs[g]`` dict ``"RGB"`` ``[B, N_g, 88 / k, 88 / k, 3]`` uint8 and
    ``key`` ``[B, N_g, size_key]`` float32; ``state`` ``[B, state_dim]`` float32; ``reward[g]``
    ``[B, N_g]`` float32; ``avail_actions[g]`` all True ``[B, N_g, n_actions]``.

    Raises:
        MarlError: an unknown substrate / role / state, a bad ``rgb_scale`` / ``max_steps`` /
            ``num_envs``, ``state="vectors"`` without vector keys, ``step`` before ``reset``.
    """

    def __init__(
        self,
        substrate: str,
        num_envs: int = DEFAULT_NUM_ENVS,
        roles: Optional[Sequence[str]] = None,
        rgb_scale: int = 1,
        state: str = "world",
        max_steps: Optional[int] = None,
        seed: Optional[int] = 0,
    ):
        rgb_scale = _positive("rgb_scale", rgb_scale)
        max_steps = None if max_steps is None else _positive("max_steps (or None)", max_steps)
        lib = meltingpot_module("substrate")
        if substrate not in lib.SUBSTRATES:
            raise unknown_choice("Melting Pot substrate", substrate, sorted(lib.SUBSTRATES))
        if state not in STATES:
            raise unknown_choice("Melting Pot state", state, STATES)
        self._lib, self._config = lib, lib.get_config(substrate)
        self.roles = _check_roles(substrate, roles, self._config)
        B, n = check_num_envs(num_envs), len(self.roles)
        if state == "vectors" and list(self._config.individual_observation_names) == [RGB]:
            raise MarlError(
                f"Melting Pot substrate '{substrate}' gives its players no vector observation (only {RGB}), "
                f"so state='vectors' would be empty; use state='world'."
            )
        settings = self._config.lab2d_settings_builder(roles=self.roles, config=self._config)
        limit = int(settings.get("maxEpisodeLengthFrames", 0)) if max_steps is None else max_steps
        self._sprite = int(settings.get("spriteSize", 8))
        self.event_names = component_events(settings)
        space = self._set_spaces(substrate, state, rgb_scale)
        self._seed, self._built_seed = seed, seed
        self._envs = [self._build(None if seed is None else int(seed) + b) for b in range(B)]
        agents = [f"player_{i}" for i in range(n)]
        n_act = int(self._envs[0].action_spec()[0].num_values)
        team_of = {a: ("player" if r == "default" else r) for a, r in zip(agents, self.roles)}
        groups = build_groups(
            agents, {a: space for a in agents}, {a: gym.spaces.Discrete(n_act) for a in agents}, team_of
        )
        vec = sum(int(np.prod(self.spaces[k].shape)) for k in self.vector_keys) * n
        cells = 0 if state == "vectors" else int(np.prod(self._world_shape)) // self._sprite**2
        self.info = EnvInfo(
            family="meltingpot",
            scenario=substrate,
            agents=agents,
            groups=groups,
            state_dim=cells + vec,
            episode_limit=int(limit),
            kind="mixed",
            shared_reward=False,
            num_envs=B,
        )
        self._pos = {g: np.array([agents.index(a) for a in gi.agents]) for g, gi in groups.items()}
        self._buf = {k: np.zeros((B, n, *s.shape), s.dtype) for k, s in self.spaces.items()}
        self._state = np.zeros((B, self.info.state_dim), np.float32)
        self._steps = np.zeros(B, np.int64)
        self._returns = np.zeros((B, n), np.float64)
        self._events = np.zeros((B, len(self.event_names)), np.float32)
        self._started = False

    # ------------------------------------------------------------------ API
    def reset(self, seed: Optional[int] = None) -> Step:
        """Reset every copy; with a seed (or the constructor's), copy ``b`` is rebuilt with ``seed + b``."""
        seed = self._seed if seed is None else seed
        if seed is not None and (self._started or seed != self._built_seed):
            self.close()
            self._envs = [self._build(int(seed) + b) for b in range(self.num_envs)]
            self._built_seed = seed
        for b in range(self.num_envs):
            self._reset_copy(b)
        self._started = True
        return Step.at_reset(self._observation())

    def step_env(self, actions: Dict[str, torch.Tensor]) -> Step:
        """One step of every copy (:meth:`MultiAgentEnv.step_env`); ``info["episode_metrics"]`` as documented."""
        if not self._started:
            raise MarlError("Call reset() before step().")
        B, n = self.num_envs, len(self.roles)
        joint = np.zeros((B, n), np.int64)
        for g, a in actions.items():
            joint[:, self._pos[g]] = a.detach().cpu().numpy()
        rewards = np.zeros((B, n), np.float32)
        terminated, truncated = np.zeros(B, bool), np.zeros(B, bool)
        for b, env in enumerate(self._envs):
            ts = env.step([int(x) for x in joint[b]])
            rewards[b] = np.asarray(ts.reward, np.float32)
            self._count_events(b, env.events())
            self._steps[b] += 1
            if self.info.episode_limit and self._steps[b] >= self.info.episode_limit:
                truncated[b] = True
            elif ts.last():
                terminated[b] = True
            self._write(b, ts.observation)
        self._returns += rewards
        step = self._make_step(rewards, torch.from_numpy(terminated), torch.from_numpy(truncated))
        step.info["episode_metrics"] = self._metrics()
        return step

    def reset_rows(self, rows: torch.Tensor) -> Observation:
        """Reset the copies in ``rows`` unseeded (each continues its seed sequence)."""
        for b in rows.nonzero().flatten().tolist():
            self._reset_copy(b)
        return self._observation()

    def close(self) -> None:
        for env in self._envs:
            env.close()
        self._envs = []

    # ------------------------------------------------------------------ internals
    def _set_spaces(self, substrate: str, state: str, rgb_scale: int) -> gym.spaces.Dict:
        """Set the players' observation keys and spaces and the world shape (from the config's specs, before
        anything is built); returns the players' ``Dict`` space."""
        spec = dict(self._config.timestep_spec.observation)  # one player's observation specs
        keys = [k for k in self._config.individual_observation_names if k in spec]
        space = gym.spaces.Dict(_player_spaces(substrate, spec, keys, rgb_scale))
        self.spaces: Dict[str, Any] = dict(space.spaces)
        self.keys = list(self.spaces)  # gym.spaces.Dict's (sorted) key order, which the observations follow
        self.rgb_scale = rgb_scale
        self.vector_keys = [k for k in self.keys if k != RGB]
        self.state_kind = state
        world = spec.get("WORLD.RGB")
        if state == "world" and world is None:
            raise MarlError(f"Melting Pot substrate '{substrate}' has no WORLD.RGB observation; use state='vectors'.")
        self._world_shape: Tuple[int, ...] = () if world is None else tuple(world.shape)
        return space

    def _build(self, seed: Optional[int]) -> Any:
        """One substrate; Melting Pot draws its engine seed from Python's ``random``, seeded here and restored."""
        saved = random.getstate()
        try:
            if seed is not None:
                random.seed(seed)
            return self._lib.build_from_config(self._config, roles=self.roles)
        finally:
            random.setstate(saved)

    def _reset_copy(self, b: int) -> None:
        ts = self._envs[b].reset()
        self._steps[b], self._returns[b], self._events[b] = 0, 0.0, 0.0
        self._count_events(b, self._envs[b].events())  # events of the episode start (e.g. AvatarStarted)
        self._write(b, ts.observation)

    def _write(self, b: int, observation: Sequence[Dict[str, np.ndarray]]) -> None:
        """Copy ``b``'s player observations (and the state) into the buffers."""
        k, parts = self.rgb_scale, []
        if self.state_kind == "world":
            parts.append(pool(observation[0]["WORLD.RGB"], self._sprite).reshape(-1) / np.float32(255))
        for i, obs in enumerate(observation):
            for key in self.keys:
                buf = self._buf[key]
                if key == RGB:
                    buf[b, i] = obs[RGB] if k == 1 else np.rint(pool(obs[RGB], k)).astype(np.uint8)
                else:
                    buf[b, i] = np.asarray(obs[key], np.float32).reshape(-1)
                    parts.append(buf[b, i])
        self._state[b] = np.concatenate(parts)

    def _count_events(self, b: int, events: Sequence[Tuple[str, Any]]) -> None:
        for name, _ in events:
            if name in self.event_names:
                self._events[b, self.event_names.index(name)] += 1

    def _metrics(self) -> Dict[str, torch.Tensor]:
        out = {"per_capita_return": torch.from_numpy(self._returns.mean(1).astype(np.float32))}
        for j, name in enumerate(self.event_names):
            out[f"events_{name}"] = torch.from_numpy(self._events[:, j].copy())
        return out

    def _observation(self) -> Observation:
        B = self.num_envs
        obs = {g: {k: torch.from_numpy(buf[:, pos]) for k, buf in self._buf.items()} for g, pos in self._pos.items()}
        return Observation(
            obs=obs,  # a Dict space's observation: key -> [B, N_g, *shape]
            state=torch.from_numpy(self._state.copy()),
            avail_actions={
                g: torch.ones(B, len(pos), gi.n_actions, dtype=torch.bool)
                for (g, pos), gi in zip(self._pos.items(), self.info.groups.values())
            },
            alive={g: torch.ones(B, len(pos), dtype=torch.bool) for g, pos in self._pos.items()},
        )

    def _make_step(self, rewards: np.ndarray, terminated: torch.Tensor, truncated: torch.Tensor) -> Step:
        return Step(
            *self._observation(),
            reward={g: torch.from_numpy(rewards[:, pos]) for g, pos in self._pos.items()},
            terminated=terminated,
            truncated=truncated,
        )


def pool(image: np.ndarray, k: int) -> np.ndarray:
    """Mean of each ``k x k`` block of an ``[H, W, C]`` uint8 image -> ``[H / k, W / k, C]`` float32 (``H``,
    ``W`` multiples of ``k``). Sums rows of whole cells first (a contiguous reduction, in uint16 while the
    block sums fit: ``k <= 16``), about 4x faster than ``mean`` over the two block axes."""
    h, w, c = image.shape
    acc = np.uint16 if k <= 16 else np.uint32
    rows = image.reshape(h // k, k, w // k * k * c).sum(axis=1, dtype=acc)  # [H / k, W * C]
    cells = rows.reshape(h // k, w // k, k, c).sum(axis=2, dtype=acc)
    return cells.astype(np.float32) / np.float32(k * k)


def _positive(what: str, value: Any) -> int:
    """``value`` as an int; a :class:`MarlError` naming ``what`` unless it is a positive int."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise MarlError(f"{what} must be a positive int, got {value!r}.")
    return int(value)


def _check_roles(substrate: str, roles: Optional[Sequence[str]], config: Any) -> Tuple[str, ...]:
    if roles is None:
        return tuple(config.default_player_roles)
    valid = sorted(config.valid_roles)
    if isinstance(roles, str) or not roles:
        raise MarlError(f"roles must be a non-empty list of role names ({', '.join(valid)}), got {roles!r}.")
    for r in roles:
        if r not in config.valid_roles:
            raise unknown_choice(f"role of Melting Pot substrate '{substrate}'", r, valid)
    return tuple(roles)


def _player_spaces(substrate: str, spec: Dict[str, Any], keys: List[str], k: int) -> Dict[str, gym.spaces.Space]:
    """The players' Dict space entries: ``RGB`` uint8 ``[H / k, W / k, 3]``, other keys float32 vectors."""
    out: Dict[str, gym.spaces.Space] = {}
    for key in keys:
        shape = tuple(spec[key].shape)
        if key == RGB:
            h, w, c = shape
            if h % k or w % k:
                raise MarlError(
                    f"rgb_scale={k} must divide the RGB observation's height and width {h} x {w} of Melting Pot "
                    f"substrate '{substrate}' (e.g. 1, 2, 4, 8, 11 for 88 x 88)."
                )
            out[key] = gym.spaces.Box(0, 255, (h // k, w // k, c), np.uint8)
        else:
            out[key] = gym.spaces.Box(-np.inf, np.inf, (max(int(np.prod(shape)), 1),), np.float32)
    return out


@functools.lru_cache(maxsize=None)
def _events_by_component(level: str) -> Dict[str, List[str]]:
    """Lua component class -> the event names its methods add (``events:add('name', ...)``), read from
    dm-meltingpot's ``lua/modules/*.lua`` and ``lua/levels/<level>/*.lua``."""
    lua = os.path.join(os.path.dirname(meltingpot_module("substrate").__file__), "lua")
    out: Dict[str, List[str]] = {}
    for folder in (os.path.join(lua, "modules"), os.path.join(lua, "levels", os.path.basename(level))):
        for f in sorted(os.listdir(folder)) if os.path.isdir(folder) else []:
            if f.endswith(".lua"):
                with open(os.path.join(folder, f), encoding="utf-8") as fh:
                    _scan_lua(fh, out)
    return out


def _scan_lua(lines: Any, out: Dict[str, List[str]]) -> None:
    """Add the ``events:add`` names of each ``function Class:method`` in ``lines`` to ``out[Class]``."""
    cls = None
    for line in lines:
        hit = re.match(r"\s*function\s+(\w+)[:.]", line)
        cls = hit.group(1) if hit else cls
        for name in re.findall(r"events:add\(\s*['\"](\w+)['\"]", line):
            if cls is not None and name not in out.setdefault(cls, []):
                out[cls].append(name)


def component_events(settings: Any) -> List[str]:
    """The event names the components in a substrate's lab2d ``settings`` can fire (sorted)."""
    used: set = set()

    def walk(x: Any) -> None:
        if hasattr(x, "items"):
            for k, v in x.items():
                if k == "component" and isinstance(v, str):
                    used.add(v)
                walk(v)
        elif isinstance(x, (list, tuple)):
            for v in x:
                walk(v)

    walk(settings)
    table = _events_by_component(str(settings.get("levelName", "")))
    return sorted({e for c in used for e in table.get(c, [])})


def _scenario_error(name: str) -> Optional[MarlError]:
    """The error for a Melting Pot *scenario* name (substrate + background bots), ``None`` for other names."""
    configs = meltingpot_module("configs.scenarios").SCENARIO_CONFIGS
    if name not in configs:
        return None
    bots = meltingpot_module("configs.bots")
    cfg = configs[name]
    paths = sorted({bots.BOT_CONFIGS[b].model_path for names in cfg.bots_by_role.values() for b in names})
    missing = [p for p in paths if not os.path.isdir(p)]
    why = (
        f"its background bots are TensorFlow saved models that are missing here: {', '.join(missing)} "
        f"(meltingpot looks for them under {bots.MODELS_ROOT}; dm-meltingpot's build downloads them from "
        f"https://storage.googleapis.com/dm-meltingpot/, which cannot be reached from this machine)"
        if missing
        else f"its background bots ({', '.join(paths)}) are TensorFlow saved models, which marl does not run"
    )
    return MarlError(
        f"'{name}' is a Melting Pot scenario (substrate '{cfg.substrate}' with background bots), not a "
        f"substrate: {why}. Train on the substrate itself: make_env('meltingpot', '{cfg.substrate}')."
    )


def make(scenario: Optional[str] = None, num_envs: int = DEFAULT_NUM_ENVS, **kwargs: Any) -> MeltingPotEnv:
    """Registry factory of the ``"meltingpot"`` family: ``make_env("meltingpot", "commons_harvest__open")``.

    Args:
        scenario: a substrate name (:func:`scenarios`).
        num_envs: ``B`` (default 8).
        **kwargs: ``roles``, ``rgb_scale``, ``state``, ``max_steps``, ``seed`` (:class:`MeltingPotEnv`).
    Raises:
        MarlError: no name, a Melting Pot scenario name (its bots' saved models are not available: the
            message lists the missing files and where meltingpot looks for them), an unknown substrate,
            an unknown keyword, dm-meltingpot not installed, or what :class:`MeltingPotEnv` raises.
    """
    if not scenario:
        raise MarlError(
            f"make_env('meltingpot', substrate) needs a substrate. Valid choices: {', '.join(scenarios())}."
        )
    check_kwargs("Melting Pot substrates", kwargs, ("roles", "rgb_scale", "state", "max_steps", "seed"))
    try:
        substrates = meltingpot_module("substrate").SUBSTRATES
    except MarlError as missing:  # not installed: still name the closest of the substrates known without it
        if scenario in SOCIAL_DILEMMAS:
            raise
        raise MarlError(f"{unknown_choice('Melting Pot substrate', scenario, scenarios())} Also: {missing}") from None
    if scenario not in substrates:
        error = _scenario_error(scenario)
        if error is not None:
            raise error
    return MeltingPotEnv(scenario, num_envs, **kwargs)
