"""Google Research Football (``gfootball``) as a batched :class:`~marl.env.MultiAgentEnv`.

Source: Kurach et al. 2020, "Google Research Football: A Novel Reinforcement
Learning Environment", AAAI 2020, arXiv 1907.10387; package ``gfootball``
(https://github.com/google-research/football). The game engine is C++ (built
from source by ``pip install gfootball``, see :data:`INSTALL_STEPS`), so the
``B = num_envs`` copies are ``B`` engines in this process, stepped one after the
other in a Python loop (gfootball >= 2.0 allows several engines per process).

Scenarios (:data:`SCENARIOS`): the eleven academy scenarios of the paper's
Section 4.2 and ``11_vs_11_easy_stochastic``. The agents are ``n`` players of
the left team (``number_of_left_players_agent_controls``, default: every left
outfield player, i.e. all but the keeper, as :data:`OUTFIELD` counts them from
the scenario files); the engine's built-in AI plays everyone else. With ``n``
agents on a team of more players, gfootball picks which ``n`` players the agents
move at each step (the ``active`` player of each agent changes as the ball moves).

This adapter calls gfootball's ``FootballEnv`` (the raw env, observations as
dicts) and applies gfootball's own observation and reward functions itself,
because gfootball's output wrappers are written against the gym < 0.26 step API
(four values) and break under the gym 0.26 that this project installs.

Tensors (group ``"left"``, agents ``left_0 .. left_{n-1}``):

* ``obs["left"]`` ``[B, n, 115]`` float32 for ``representation="simple115v2"``
  (default; ``Simple115StateWrapper.convert_observation(obs, fixed_positions=True)``:
  22 left + 22 right player coordinates and motions, padded with -1, ball
  position / direction, ball owner one-hot, the agent's active player one-hot,
  game mode one-hot), or ``[B, n, 72, 96, 4]`` uint8 for ``"extracted"`` (the
  super mini-map of ``observation_preprocessing.generate_smm``: planes of the
  left team, the right team, the ball and the agent's active player, 255 where
  one is).
* ``state`` ``[B, 115]`` float32: simple115v2 of the whole game with the active
  one-hot zero (the same for every agent: positions, motions, ball, game mode).
* ``avail_actions["left"]`` ``[B, n, 19]`` bool, all True: gfootball's default
  action set (:data:`ACTIONS`), every action always legal.
* ``reward["left"]`` ``[B, n]`` float32: ``rewards="scoring"`` (default) gives
  +1 when the left team scores and -1 when it concedes, to every agent
  (``shared_reward=True``); ``"scoring,checkpoints"`` adds the paper's
  checkpoint reward (Section 3, "Rewards": +0.1 for each of ten distance rings
  to the opponent's goal the agent's active player first reaches with the ball;
  all ten at once on a goal), computed per agent by gfootball's
  ``CheckpointRewardWrapper.reward``.
* ``info["episode_metrics"]``: ``goal_difference`` (left goals minus right goals
  of the episode) and ``win_rate`` (1.0 when the left team scored more), read at
  the step that ends the episode.

Episode end: an academy episode ends on a goal, when the ball goes out of play
or when the other team wins the ball (``terminated``), or after
``game_duration`` steps (400; 3000 for ``11_vs_11_easy_stochastic`` and
``academy_single_goal_versus_lazy``: ``truncated``, the time limit;
``info.episode_limit``). A full 11 vs 11 match ends only at its time limit.

Seeds: every episode of copy ``b`` gets an engine seed drawn from
``numpy.random.default_rng(seed + b)`` (gfootball's ``game_engine_random_seed``
and ``reverse_team_processing = seed % 2``, as gfootball sets them itself), so
``reset(seed)`` makes the episodes of every copy reproducible.
"""

from __future__ import annotations

import tempfile
from typing import Any, Dict, List, Optional, Tuple

import gymnasium as gym
import numpy as np
import torch

from marl.env import EnvInfo, GroupInfo, MarlError, MultiAgentEnv, Observation, Step, unknown_choice
from marl.envs.common import check_kwargs, check_num_envs

DEFAULT_NUM_ENVS = 1

# left players of each scenario (keeper included) and its game_duration, read from gfootball 2.10.2's
# gfootball/scenarios/<name>.py (static, so the names and defaults are known without the engine)
LEFT_PLAYERS: Dict[str, int] = {
    "academy_empty_goal_close": 2,
    "academy_empty_goal": 2,
    "academy_run_to_score": 2,
    "academy_run_to_score_with_keeper": 2,
    "academy_pass_and_shoot_with_keeper": 3,
    "academy_run_pass_and_shoot_with_keeper": 3,
    "academy_3_vs_1_with_keeper": 4,
    "academy_corner": 11,
    "academy_counterattack_easy": 11,
    "academy_counterattack_hard": 11,
    "academy_single_goal_versus_lazy": 11,
    "11_vs_11_easy_stochastic": 11,
}
SCENARIOS: Tuple[str, ...] = tuple(LEFT_PLAYERS)
OUTFIELD: Dict[str, int] = {s: n - 1 for s, n in LEFT_PLAYERS.items()}  # default number of agents
GAME_DURATION: Dict[str, int] = {
    s: 3000 if s in ("11_vs_11_easy_stochastic", "academy_single_goal_versus_lazy") else 400 for s in SCENARIOS
}
REPRESENTATIONS: Dict[str, Tuple[Tuple[int, ...], Any]] = {
    "simple115v2": ((115,), np.float32),
    "extracted": ((72, 96, 4), np.uint8),  # SMM_HEIGHT x SMM_WIDTH x 4 layers
}
REWARDS = ("scoring", "scoring,checkpoints")
ACTIONS: Tuple[str, ...] = (  # gfootball.env.football_action_set.action_set_v1 ("default")
    "idle", "left", "top_left", "top", "top_right", "right", "bottom_right", "bottom", "bottom_left",
    "long_pass", "high_pass", "short_pass", "shot", "sprint", "release_direction", "release_sprint",
    "sliding", "dribble", "release_dribble",
)  # fmt: skip
_KWARGS = ("number_of_left_players_agent_controls", "representation", "rewards")

DEBIAN_PACKAGES = (
    "git cmake build-essential libgl1-mesa-dev libsdl2-dev libsdl2-image-dev libsdl2-ttf-dev "
    "libsdl2-gfx-dev libboost-all-dev libdirectfb-dev libst-dev mesa-utils xvfb x11vnc python3-dev"
)
INSTALL_STEPS = f"""To use the 'football' env family (Google Research Football, gfootball 2.10.2):
  1. Install the C++ build dependencies gfootball's README lists (Debian / Ubuntu):
     sudo apt-get install {DEBIAN_PACKAGES}
  2. pip install "marl-rllib[football]"   (this builds gfootball's game engine from its sdist with
     CMake and make: expect about an hour of compilation on 2 cores).
  gfootball publishes no wheels; on macOS and Windows follow
  https://github.com/google-research/football/blob/master/gfootball/doc/compile_engine.md."""


def scenarios() -> List[str]:
    """The scenario names (static; gfootball is not imported)."""
    return list(SCENARIOS)


def check_install() -> Dict[str, Any]:
    """Import the parts of gfootball the adapter calls, creating nothing.

    Returns:
        ``{"config", "football_env", "wrappers", "smm"}``: gfootball's ``config`` and
        ``football_env`` modules, its ``wrappers`` module and ``generate_smm``.
    Raises:
        MarlError: gfootball or its compiled engine (``gfootball_engine``) cannot be imported;
            the message gives the import error and :data:`INSTALL_STEPS`.
    """
    try:
        from gfootball.env import config, football_env, wrappers
        from gfootball.env.observation_preprocessing import generate_smm
    except ImportError as e:
        raise MarlError(
            f"The 'football' env family needs gfootball (Google Research Football) with its compiled game "
            f"engine, which could not be imported ({e}).\n{INSTALL_STEPS}"
        ) from e
    return {"config": config, "football_env": football_env, "wrappers": wrappers, "smm": generate_smm}


def check_options(scenario: Optional[str], **kwargs: Any) -> Tuple[str, int, str, str]:
    """Validate a scenario and the adapter's keyword arguments (no gfootball needed).

    Returns:
        ``(scenario, n_agents, representation, rewards)``.
    Raises:
        MarlError: no / unknown scenario (the closest and all valid names), an unknown keyword,
            a number of agents outside ``1 .. left players`` of the scenario, an unknown
            representation or reward (each naming the valid choices).
    """
    if scenario is None:
        raise MarlError(f"make_env('football', scenario) needs a scenario. Valid choices: {', '.join(SCENARIOS)}.")
    if scenario not in LEFT_PLAYERS:
        raise unknown_choice("Google Research Football scenario", scenario, SCENARIOS)
    check_kwargs(f"football scenario '{scenario}'", kwargs, _KWARGS)
    n = kwargs.get("number_of_left_players_agent_controls", OUTFIELD[scenario])
    top = LEFT_PLAYERS[scenario]
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or not 1 <= n <= top:
        raise MarlError(
            f"number_of_left_players_agent_controls must be an int in 1..{top} for '{scenario}' "
            f"(its left team has {top} players, keeper included), got {n!r}."
        )
    rep = kwargs.get("representation", "simple115v2")
    if rep not in REPRESENTATIONS:
        raise unknown_choice("football representation", rep, list(REPRESENTATIONS))
    rewards = kwargs.get("rewards", "scoring")
    if rewards not in REWARDS:
        raise unknown_choice("football rewards", rewards, REWARDS)
    return scenario, int(n), rep, rewards


class FootballEnv(MultiAgentEnv):
    """A gfootball scenario with ``B = num_envs`` game engines stepped in a loop (module docstring).

    Args:
        scenario: one of :data:`SCENARIOS`, e.g. ``"academy_empty_goal_close"``.
        num_envs: ``B`` (default 1).
        seed: seed of copy 0's episode seeds (copy ``b``: ``seed + b``); ``None``: unseeded.
        number_of_left_players_agent_controls: ``n`` agents (default: the left outfield players).
        representation: ``"simple115v2"`` (``[115]`` float32) or ``"extracted"`` (``[72, 96, 4]`` uint8).
        rewards: ``"scoring"`` or ``"scoring,checkpoints"``.

    Raises:
        MarlError: a bad option (named with the valid ones), gfootball not installed (with the
            install steps; checked after the options, before any engine is built), bad actions.
    """

    def __init__(self, scenario: str, num_envs: int = DEFAULT_NUM_ENVS, seed: Optional[int] = 0, **kwargs: Any):
        num_envs = check_num_envs(num_envs)
        scenario, n, self.representation, self.rewards = check_options(scenario, **kwargs)
        self._gf = check_install()
        shape, dtype = REPRESENTATIONS[self.representation]
        agents = [f"left_{i}" for i in range(n)]
        high = 255 if dtype == np.uint8 else np.inf
        obs_space = gym.spaces.Box(0 if dtype == np.uint8 else -np.inf, high, shape=shape, dtype=dtype)
        group = GroupInfo("left", agents, obs_space, gym.spaces.Discrete(len(ACTIONS)), team="left")
        self.info = EnvInfo(
            family="football",
            scenario=scenario,
            agents=agents,
            groups={"left": group},
            state_dim=115,
            episode_limit=GAME_DURATION[scenario],
            kind="cooperative",
            shared_reward=self.rewards == "scoring",
            num_envs=num_envs,
        )
        self.action_names = {"left": list(ACTIONS)}
        self._rngs = [np.random.default_rng(None if seed is None else int(seed) + b) for b in range(num_envs)]
        self._tracesdir = tempfile.mkdtemp(prefix="marl_football_")  # gfootball writes no dumps unless asked
        self._envs = [self._make_engine(scenario, n, b) for b in range(num_envs)]
        self._checkpoints = [self._gf["wrappers"].CheckpointRewardWrapper(env) for env in self._envs]
        self._obs = np.zeros((num_envs, n, *shape), dtype)
        self._state = np.zeros((num_envs, 115), np.float32)
        self._started = False

    # ------------------------------------------------------------------ API

    def reset(self, seed: Optional[int] = None) -> Step:
        """Reset every copy; ``seed`` reseeds copy ``b``'s episode seeds with ``seed + b``."""
        if seed is not None:
            self._rngs = [np.random.default_rng(int(seed) + b) for b in range(self.num_envs)]
        for b in range(self.num_envs):
            self._reset_copy(b)
        self._started = True
        return Step.at_reset(self._observed(), info=self._info(np.zeros((self.num_envs, 2), np.float32)))

    def step_env(self, actions: Dict[str, torch.Tensor]) -> Step:
        """Step each engine in turn (see :meth:`MultiAgentEnv.step_env`)."""
        if not self._started:
            raise MarlError("Call reset() before step().")
        acts = actions["left"].cpu().numpy()
        B, n = acts.shape
        reward = np.zeros((B, n), np.float32)
        term, trunc = np.zeros(B, bool), np.zeros(B, bool)
        score = np.zeros((B, 2), np.float32)
        for b, env in enumerate(self._envs):
            raw, r, done, info = env.step([int(a) for a in acts[b]])
            if self.rewards != "scoring":
                r = self._checkpoints[b].reward(np.array(r, np.float32))
            reward[b] = r
            score[b] = raw[0]["score"]
            if done:
                # the engine ends an episode at game_duration steps (steps_left 0): the time limit,
                # unless a goal ended it at that same step
                cut = int(raw[0]["steps_left"]) <= 0 and info.get("score_reward", 0) == 0
                trunc[b], term[b] = cut, not cut
            self._write(b, raw)
        return self._make_step(reward, term, trunc, score)

    def reset_rows(self, rows: torch.Tensor) -> Observation:
        """Reset the engines in ``rows`` (``[B]`` bool); the others keep their observation."""
        for b in rows.nonzero().flatten().tolist():
            self._reset_copy(b)
        return self._observed()

    def close(self) -> None:
        """Release every engine (gfootball keeps released engines for reuse in this process)."""
        for env in self._envs:
            env.close()

    # ------------------------------------------------------------------ internals

    def _make_engine(self, scenario: str, n: int, b: int) -> Any:
        cfg = self._gf["config"].Config(
            {
                "level": scenario,
                "players": [f"agent:left_players={n},right_players=0"],
                "dump_full_episodes": False,
                "dump_scores": False,
                "write_video": False,
                "tracesdir": self._tracesdir,
                **self._episode_seed(b),
            }
        )
        return self._gf["football_env"].FootballEnv(cfg)

    def _episode_seed(self, b: int) -> Dict[str, Any]:
        """The next engine seed of copy ``b``, as gfootball's scenario builder sets it."""
        s = int(self._rngs[b].integers(0, 2_000_000_000))
        return {"game_engine_random_seed": s, "reverse_team_processing": bool(s % 2)}

    def _reset_copy(self, b: int) -> None:
        env = self._envs[b]
        env._config.update(self._episode_seed(b))  # read by the scenario builder on reset
        self._checkpoints[b]._collected_checkpoints = {}  # what CheckpointRewardWrapper.reset clears
        self._write(b, env.reset())

    def _write(self, b: int, raw: List[Dict[str, Any]]) -> None:
        """Copy ``b``'s raw observations (one dict per agent) into the obs and state buffers."""
        simple = self._gf["wrappers"].Simple115StateWrapper.convert_observation
        if self.representation == "simple115v2":
            self._obs[b] = simple(raw, True)
        else:
            self._obs[b] = self._gf["smm"](raw)
        self._state[b] = simple([{**raw[0], "active": -1}], True)[0]

    def _observed(self) -> Observation:
        B, n = self._obs.shape[:2]
        return Observation(
            {"left": torch.from_numpy(self._obs.copy())},
            torch.from_numpy(self._state.copy()),
            {"left": torch.ones(B, n, len(ACTIONS), dtype=torch.bool)},
            {"left": torch.ones(B, n, dtype=torch.bool)},
        )

    @staticmethod
    def _info(score: np.ndarray) -> Dict[str, Any]:
        """A step's ``info``: ``episode_metrics`` ``goal_difference`` and ``win_rate`` (``[B]`` float32) of
        the ``[B, 2]`` score (left, right)."""
        diff = score[:, 0] - score[:, 1]
        t = torch.from_numpy
        return {"episode_metrics": {"goal_difference": t(diff), "win_rate": t((diff > 0).astype(np.float32))}}

    def _make_step(self, reward: np.ndarray, term: np.ndarray, trunc: np.ndarray, score: np.ndarray) -> Step:
        t = torch.from_numpy
        return Step(
            *self._observed(),
            reward={"left": t(reward)},
            terminated=t(term),
            truncated=t(trunc),
            info=self._info(score),
        )


def make(
    scenario: Optional[str] = None, num_envs: int = DEFAULT_NUM_ENVS, seed: Optional[int] = 0, **kwargs: Any
) -> FootballEnv:
    """Registry factory of the ``"football"`` family:
    ``make_env("football", "academy_empty_goal_close", num_envs=4, representation="extracted")``.

    See :class:`FootballEnv`.

    Raises:
        MarlError: no / unknown scenario, bad options, or gfootball not installed (with the install steps).
    """
    return FootballEnv(scenario, num_envs=num_envs, seed=seed, **kwargs)  # type: ignore[arg-type]
