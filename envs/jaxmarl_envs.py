"""JaxMARL's Overcooked, Hanabi, Coin Game, STORM and MABrax as batched :class:`~marl.env.MultiAgentEnv` families.

Source: ``jaxmarl==0.2.0`` (Rutherford et al. 2023, "JaxMARL: Multi-Agent RL Environments and
Algorithms in JAX", arXiv:2311.10090, Section 3). Every family runs on the batched path SMAX uses
(:mod:`marl.envs.jax_batch`): ``B`` copies as one jitted ``jax.vmap`` of JaxMARL's ``step_env`` with
the auto-reset inside, one PRNG stream per copy (copy ``b`` reset with ``seed`` equals copy 0 reset
with ``seed + b``), arrays handed to torch once per step.

Families and scenarios (``make_env(family, scenario, num_envs=B, seed=0, **options)``):

* ``"overcooked"``: the five classic layouts of Carroll et al. 2019 (arXiv:1910.05789) as JaxMARL
  encodes them: ``cramped_room`` (default), ``asymm_advantages``, ``coord_ring``, ``forced_coord``,
  ``counter_circuit``. Two cooks, one cooperative group ``"agent"``. ``obs`` ``[B, 2, H, W, 26]``
  uint8 (JaxMARL's 26 feature planes of the kitchen grid, ``Box(0, high)`` with ``high`` per plane, :data:`OVERCOOKED_HIGH`), ``Discrete(6)`` (up,
  down, right, left, stay, interact). Reward: 20 to both cooks per soup delivered. ``max_steps``
  (default 400) ends every episode (truncation). ``shaped_reward=True`` adds JaxMARL's shaped reward
  (3 for an onion placed in a pot, 3 for a plate picked up, 5 for a soup picked up; per cook) times
  a weight; ``shaping_horizon=H`` anneals that weight linearly from 1 to 0 over ``H`` env steps
  counted by the env (``B`` per batched step), JaxMARL's IPPO convention (``REW_SHAPING_HORIZON``,
  2.5e6 in its feed-forward Overcooked IPPO config; Rutherford et al. 2023, arXiv:2311.10090); without it the weight stays 1.
  ``step.info["episode_metrics"]["soups"]`` counts the soups of an episode.
* ``"hanabi"``: scenarios ``2p`` .. ``5p`` (or ``players=2..5``). One cooperative group of ``n``
  players; ``obs`` ``[B, n, D]`` float32 (JaxMARL's 0/1 encoding, ``D = 658`` for 2 players);
  ``avail_actions`` are JaxMARL's legal moves: the player to act has its legal discards, plays and
  hints, every other player only the no-op (the last action). Reward: the change of the fireworks
  score (minus the whole score when the last life is lost). Episodes end by the game's rules
  (terminated); ``episode_limit`` is the longest game the rules allow. Metric ``score``: the
  episode's final score (0 after the last life is lost).
* ``"coin_game"``: Lerer & Peysakhovich 2017 (arXiv:1707.01068) on a 3x3 torus as JaxMARL writes it:
  two agents (red ``agent_0``, blue ``agent_1``), each its own group and team (``kind="mixed"``),
  ``obs`` ``[B, 1, 36]`` float32 per group (``cnn=True``: ``[B, 1, 3, 3, 4]`` uint8),
  ``Discrete(5)``. A meta-episode of ``num_outer_steps`` (10) games of ``num_inner_steps`` (10)
  steps, truncated after ``10 * 10`` steps. ``shared_rewards=True`` (JaxMARL's option) pays the sum
  to both and makes one cooperative group. Metrics ``own_coin_rate``: the share of collected coins
  that were the collector's own colour.
* ``"storm"``: STORM (Khan et al. 2023, "Scaling Opponent Shaping to High Dimensional Games",
  arXiv:2312.12568), JaxMARL's ids as scenarios: ``storm`` (``InTheGrid``, ``num_agents`` players),
  ``storm_2p`` (``InTheGrid_2p``), ``storm_np`` (``InTheMatrix``). One group and team per agent
  (``kind="mixed"``). ``storm`` and ``storm_2p`` observe a ``Dict``: ``"observation"`` the 5x5
  egocentric grid ``[5, 5, C]`` uint8 and ``"inventory"`` a float32 vector; ``storm_np`` observes
  the grid only (``[5, 5, 14]`` uint8). ``Discrete(5)`` (``storm_np``: 8). Episodes: 152 steps.
* ``"mabrax"``: JaxMARL's multi-agent Brax (``ant_4x2``, ``halfcheetah_6x1``, ``hopper_3x1``,
  ``humanoid_9|8``, ``walker2d_2x3``); needs ``brax``. Continuous actions in ``[-1, 1]``;
  observations padded to one size (JaxMARL's ``homogenisation_method="max"``) so the agents form
  one cooperative group; the team reward; 1000-step episodes (terminated when the body falls).

``state`` (every family but MABrax): the agents' observations flattened and concatenated, float32
``[B, n * prod(obs shape)]`` (a ``Dict`` observation: its keys in order). MABrax: the full Brax
observation. ``alive`` is always True (no agent leaves).

Raises on construction: :class:`MarlError` for an unknown family scenario (naming the closest and
the valid ones), an unknown or bad option, jaxmarl / brax missing (naming the pip command).
"""

from __future__ import annotations

import dataclasses
import functools
import warnings
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional, Tuple

import gymnasium as gym
import numpy as np

from marl.env import EnvInfo, GroupInfo, MarlError, unknown_choice
from marl.envs.common import check_kwargs, check_num_envs
from marl.envs.jax_batch import JaxBatchEnv, JaxSpec, agent_ids, batched_fns, import_jaxmarl

DEFAULT_NUM_ENVS = 64
OVERCOOKED_LAYOUTS = ("cramped_room", "asymm_advantages", "coord_ring", "forced_coord", "counter_circuit")
HANABI_SCENARIOS = ("2p", "3p", "4p", "5p")
STORM_SCENARIOS = ("storm", "storm_2p", "storm_np")
MABRAX_SCENARIOS = ("ant_4x2", "halfcheetah_6x1", "hopper_3x1", "humanoid_9|8", "walker2d_2x3")
MABRAX_HINT = 'pip install "marl-rllib[mabrax]"  (i.e. pip install brax; brax 0.14.2 installs under jax 0.10.2)'
DELIVERY_REWARD = 20.0  # JaxMARL Overcooked's reward per soup


@dataclass
class Built:
    """One JaxMARL env read as a marl env: its spec and what :class:`JaxMARLEnv` builds the EnvInfo from."""

    spec: JaxSpec
    obs_space: gym.spaces.Space
    action_space: gym.spaces.Space
    state_dim: int
    episode_limit: int
    cooperative: bool  # one group and team, shared reward; else one group and team per agent
    action_names: Optional[List[str]] = None


# ----------------------------------------------------------------------------- JAX helpers


def _stack(jnp, out: Any, keys) -> Any:
    """``{agent: x}`` (or a tuple in agent order) -> ``[n, ...]``."""
    return jnp.stack([out[k] for k in keys])


def _flat_state(jnp, obs: Any) -> Any:
    """``[n, ...]`` observation (or a dict of them, keys in order) -> one float32 vector."""
    parts = [obs[k] for k in obs] if isinstance(obs, dict) else [obs]
    return jnp.concatenate([p.reshape(-1).astype(jnp.float32) for p in parts])


def _plain_observe(jnp, agents, n_actions: int, cast: Callable[[Any], Any]):
    """``observe`` of an env with no masks and no deaths: ``cast`` turns ``obs_out`` into ``[n, ...]`` arrays."""

    def observe(obs_out, st):
        obs = cast(obs_out)
        n = len(agents)
        return obs, _flat_state(jnp, obs), jnp.ones((n, n_actions), bool), jnp.ones((n,), bool)

    return observe


def _box(shape, dtype) -> gym.spaces.Box:
    """``Box`` of an observation field: uint8 images ``[0, 255]``, float vectors unbounded."""
    if dtype == np.uint8:
        return gym.spaces.Box(0, 255, shape=tuple(shape), dtype=np.uint8)
    return gym.spaces.Box(-np.inf, np.inf, shape=tuple(shape), dtype=np.float32)


def _state_dim(space: gym.spaces.Space, n: int) -> int:
    spaces = space.spaces.values() if isinstance(space, gym.spaces.Dict) else [space]
    return n * sum(int(np.prod(s.shape or ())) for s in spaces)


# ----------------------------------------------------------------------------- families


# The largest value of each of Overcooked's 26 planes (JaxMARL's Overcooked.get_obs docstring): 0/1 planes,
# except onions / tomatoes in a pot or a soup (16-19: 0..3) and the pot's cooking time left (20: 19..1; 20
# here for margin). Encoders scale uint8 keys by these bounds (marl.algos.networks.encoders.uint8_scale).
OVERCOOKED_HIGH = np.array([1] * 16 + [3, 3, 3, 3, 20, 1] + [1] * 4, np.uint8)


def _overcooked(jax, jaxmarl, scenario: str, kw: Dict[str, Any]) -> Built:
    """JaxMARL ``"overcooked"`` on ``layout=scenario``: uint8 ``[H, W, 26]`` grids, time-limited episodes."""
    from jaxmarl.environments.overcooked import overcooked_layouts

    jnp = jax.numpy
    with warnings.catch_warnings():  # JaxMARL points to OvercookedV2; the classic layouts are this env
        warnings.simplefilter("ignore", DeprecationWarning)
        env = jaxmarl.make("overcooked", layout=overcooked_layouts[scenario], **kw)
    agents = list(env.agents)
    shape = (env.height, env.width, 26)  # what get_obs returns (the declared space swaps H and W)
    observe = _plain_observe(jnp, agents, 6, lambda o: _stack(jnp, o, agents).astype(jnp.uint8))

    def outcome(old, st, rew, dones, infos):
        reward = _stack(jnp, rew, agents).astype(jnp.float32)
        shaped = _stack(jnp, infos["shaped_reward"], agents).astype(jnp.float32)
        no = jnp.zeros((), bool)
        return reward, no, dones["__all__"], {"soups": reward[0] / DELIVERY_REWARD, "shaped_reward": shaped}

    space = gym.spaces.Box(0, np.broadcast_to(OVERCOOKED_HIGH, shape), dtype=np.uint8)
    names = ["up", "down", "right", "left", "stay", "interact"]
    spec = JaxSpec(env, agents, observe, outcome, ("soups",), summed_metrics=("soups",))  # soups: per step
    return Built(spec, space, gym.spaces.Discrete(6), _state_dim(space, 2), int(env.max_steps), True, names)


def _hanabi(jax, jaxmarl, scenario: str, kw: Dict[str, Any]) -> Built:
    """JaxMARL ``"hanabi"`` with ``num_agents = int(scenario[0])``; legal moves as ``avail``."""
    jnp = jax.numpy
    env = jaxmarl.make("hanabi", num_agents=int(scenario[0]), **kw)
    agents = list(env.agents)
    n = len(agents)

    def observe(obs_out, st):
        obs = _stack(jnp, obs_out, agents).astype(jnp.float32)
        legal = env.get_legal_moves(st)
        return obs, obs.reshape(-1), _stack(jnp, legal, agents) > 0, jnp.ones((n,), bool)

    def outcome(old, st, rew, dones, infos):
        reward = _stack(jnp, rew, agents).astype(jnp.float32)
        return reward, dones["__all__"], jnp.zeros((), bool), {"score": st.score.astype(jnp.float32)}

    space = gym.spaces.Box(0.0, 1.0, shape=(int(env.obs_size),), dtype=np.float32)
    spec = JaxSpec(env, agents, observe, outcome, ("score",))
    return Built(spec, space, gym.spaces.Discrete(int(env.num_moves)), n * int(env.obs_size), hanabi_limit(env), True)


def hanabi_limit(env: Any) -> int:
    """The most turns a Hanabi game can last: ``2 D + n + tokens + colours`` with ``D`` the cards left after
    the deal. Each play or discard draws a card until the deck is empty (``D`` turns), then each player has
    one more turn (``n``); a hint spends an information token, and tokens come back only by discarding
    (at most ``D``) or completing a colour (``colours``), on top of the ``max_info_tokens`` at the start."""
    deck_left = int(env.deck_size) - int(env.num_agents) * int(env.hand_size)
    return 2 * deck_left + int(env.num_agents) + int(env.max_info_tokens) + int(env.num_colors)


def _coin_game(jax, jaxmarl, scenario: str, kw: Dict[str, Any]) -> Built:
    """JaxMARL ``"coin_game"``: flat 0/1 vectors (``cnn=True``: ``[3, 3, 4]`` uint8 grids)."""
    jnp = jax.numpy
    env = jaxmarl.make("coin_game", **kw)
    agents = list(env.agents)  # "0" red, "1" blue
    image = bool(kw.get("cnn", False))
    dtype = jnp.uint8 if image else jnp.float32
    observe = _plain_observe(jnp, agents, 5, lambda o: _stack(jnp, o, agents).astype(dtype))

    def outcome(old, st, rew, dones, infos):
        reward = _stack(jnp, rew, agents).astype(jnp.float32)
        own = (st.red_coop.sum() + st.blue_coop.sum()).astype(jnp.float32)
        other = (st.red_defect.sum() + st.blue_defect.sum()).astype(jnp.float32)
        rate = own / jnp.maximum(own + other, 1.0)
        return reward, jnp.zeros((), bool), dones["__all__"], {"own_coin_rate": rate}

    space = _box((3, 3, 4), np.uint8) if image else gym.spaces.Box(0.0, 1.0, shape=(36,), dtype=np.float32)
    limit = int(env.num_inner_steps) * int(env.num_outer_steps)
    spec = JaxSpec(env, agents, observe, outcome, ("own_coin_rate",))
    names = ["right", "left", "up", "down", "stay"]
    shared = bool(kw.get("shared_rewards", False))
    return Built(spec, space, gym.spaces.Discrete(5), _state_dim(space, 2), limit, shared, names)


def _storm(jax, jaxmarl, scenario: str, kw: Dict[str, Any]) -> Built:
    """JaxMARL's STORM variants: ``Dict`` (grid uint8 + inventory) or a plain grid (``storm_np``)."""
    jnp = jax.numpy
    env = jaxmarl.make(scenario, **kw)
    agents = list(env.agents)  # ints 0..n-1
    n = len(agents)
    n_actions = int(env.action_space(agents[0]).n)

    def cast(o):
        if scenario == "storm_np":
            return o.astype(jnp.uint8)
        if scenario == "storm":  # one dict: grids [n, 5, 5, C], inventory [k, n]
            return {
                "observation": o["observations"].astype(jnp.uint8),
                "inventory": o["inventory"].T.astype(jnp.float32),
            }
        return {  # storm_2p: a tuple of per-agent dicts
            "observation": jnp.stack([x["observation"] for x in o]).astype(jnp.uint8),
            "inventory": jnp.stack([x["inventory"] for x in o]).astype(jnp.float32),
        }

    def outcome(old, st, rew, dones, infos):
        reward = jnp.stack([rew[i] for i in range(n)]).astype(jnp.float32)
        return reward, jnp.zeros((), bool), dones["__all__"], {}

    obs0, _ = jax.eval_shape(env.reset, jax.random.PRNGKey(0))
    shapes = jax.eval_shape(cast, obs0)
    if isinstance(shapes, dict):
        space: gym.spaces.Space = gym.spaces.Dict(
            {k: _box(v.shape[1:], np.uint8 if k == "observation" else np.float32) for k, v in shapes.items()}
        )
    else:
        space = _box(shapes.shape[1:], np.uint8)
    spec = JaxSpec(env, agents, _plain_observe(jnp, agents, n_actions, cast), outcome)
    limit = int(env.num_inner_steps) * int(env.num_outer_steps)
    return Built(spec, space, gym.spaces.Discrete(n_actions), _state_dim(space, n), limit, False)


def _mabrax(jax, jaxmarl, scenario: str, kw: Dict[str, Any]) -> Built:
    """JaxMARL's multi-agent Brax with padded observations; the team reward; Brax's ``done`` as the end."""
    from jaxmarl.environments import MABRAX_AVAILABLE

    if not MABRAX_AVAILABLE:
        raise MarlError(
            f"The 'mabrax' env family needs brax, which could not be imported. Install it with: {MABRAX_HINT}"
        )
    jnp = jax.numpy
    # marl resets ended copies itself; Brax's own auto-reset would hand back the episode's first
    # observation where the last one belongs (final_obs)
    env = jaxmarl.make(scenario, homogenisation_method="max", auto_reset=False, **kw)
    agents = list(env.agents)
    n = len(agents)
    act = env.action_space(agents[0])
    limit = int(env.episode_length)

    def observe(obs_out, st):
        obs = _stack(jnp, obs_out, agents).astype(jnp.float32)
        return obs, st.obs.astype(jnp.float32), jnp.ones((n, 1), bool), jnp.ones((n,), bool)

    def outcome(old, st, rew, dones, infos):
        reward = _stack(jnp, rew, agents).astype(jnp.float32)
        steps = infos["steps"]
        truncated = (steps >= limit) & ~(st.done > 0) | (infos["truncation"] > 0)
        return reward, (st.done > 0) & ~truncated, truncated, {}

    obs_dim = int(env.observation_space(agents[0]).shape[0])
    space = gym.spaces.Box(-np.inf, np.inf, shape=(obs_dim,), dtype=np.float32)
    action_space = gym.spaces.Box(float(act.low), float(act.high), shape=tuple(act.shape), dtype=np.float32)
    state_dim = int(jax.eval_shape(env.reset, jax.random.PRNGKey(0))[1].obs.shape[0])
    spec = JaxSpec(env, agents, observe, outcome, (), np.float32)
    return Built(spec, space, action_space, state_dim, limit, True)


@dataclass(frozen=True)
class Family:
    """A registered family: its scenarios, default scenario, options passed to JaxMARL and builder."""

    scenarios: Tuple[str, ...]
    default: Optional[str]
    options: Tuple[str, ...]
    build: Callable[..., Built]


FAMILIES: Dict[str, Family] = {
    "overcooked": Family(OVERCOOKED_LAYOUTS, "cramped_room", ("max_steps", "random_reset"), _overcooked),
    "hanabi": Family(HANABI_SCENARIOS, "2p", ("max_info_tokens", "max_life_tokens"), _hanabi),
    "coin_game": Family(
        ("coin_game",),
        "coin_game",
        ("num_inner_steps", "num_outer_steps", "cnn", "egocentric", "shared_rewards", "payoff_matrix"),
        _coin_game,
    ),
    "storm": Family(STORM_SCENARIOS, "storm", ("num_inner_steps", "num_outer_steps", "num_agents"), _storm),
    "mabrax": Family(MABRAX_SCENARIOS, None, ("episode_length",), _mabrax),
}
# options checked here (JaxMARL checks none): positive ints
_POSITIVE_INTS = ("max_steps", "num_inner_steps", "num_outer_steps", "num_agents", "episode_length")


# ----------------------------------------------------------------------------- the env


class JaxMARLEnv(JaxBatchEnv):
    """One JaxMARL env family scenario, ``B = num_envs`` copies stepped as one jitted ``jax.vmap`` call.

    Args:
        family: ``"overcooked"``, ``"hanabi"``, ``"coin_game"``, ``"storm"`` or ``"mabrax"``.
        scenario: one of the family's scenarios (see the module docstring).
        num_envs: ``B`` (default 64).
        seed: seed of the first :meth:`reset` without a seed (default 0).
        flat_obs (option): ``True`` flattens each observation into one float32 vector (``Box(D,)``; a
            ``Dict``: its keys concatenated in order), for MLP encoders; the default keeps images ``[H, W, C]``.
        **options: the family's JaxMARL options (``FAMILIES[family].options``); Overcooked also takes
            ``shaped_reward`` (bool) and ``shaping_horizon`` (env steps; see the module docstring).

    Shapes: ``obs[g]`` ``[B, N_g, *obs_shape]`` (the group's space dtype; a ``Dict`` space gives one
    tensor per key), ``state`` ``[B, state_dim]`` float32, ``avail_actions[g]`` ``[B, N_g, A]`` bool,
    ``reward[g]`` / ``alive[g]`` ``[B, N_g]``.

    Raises:
        MarlError: unknown scenario (closest named) or option, bad ``num_envs`` / option values,
            jaxmarl or brax missing (the pip command named).
    """

    def __init__(
        self,
        family: str,
        scenario: str,
        num_envs: int = DEFAULT_NUM_ENVS,
        seed: Optional[int] = 0,
        **options: Any,
    ):
        fam = FAMILIES[family]
        if scenario not in fam.scenarios:
            raise unknown_choice(f"{family} scenario", scenario, fam.scenarios)
        num_envs = check_num_envs(num_envs)
        shaping = ("shaped_reward", "shaping_horizon") if family == "overcooked" else ()
        check_kwargs(
            f"{family} scenario '{scenario}'", options, list(fam.options) + ["num_envs", "seed", "flat_obs", *shaping]
        )
        self._shaping = _check_shaping(bool(options.pop("shaped_reward", False)), options.pop("shaping_horizon", None))
        flat = bool(options.pop("flat_obs", False))
        _check_options(options)
        jax = import_jaxmarl(family)[0]
        built, fns = _build(family, scenario, tuple(sorted(options.items(), key=lambda kv: kv[0])), flat)
        agents = agent_ids("agent", len(built.spec.agents))
        self.info = _env_info(family, scenario, agents, built, num_envs)
        if built.action_names is not None:
            self.action_names = {g: list(built.action_names) for g in self.info.groups}
        self.jaxmarl_env = built.spec.env  # the JaxMARL env object (one copy's pure functions)
        self.env_steps = 0  # env steps taken by this env (B per step): the shaping anneal's clock
        self._init_batch(jax, built.spec, fns, seed)

    @property
    def eval_kwargs(self) -> Dict[str, Any]:
        """``{"shaped_reward": False}`` with shaping on (and ``shaping_horizon: None`` when one is set,
        which needs shaping on): an evaluation copy scores the game alone (20 per cook per soup), not
        the training reward; ``{}`` otherwise."""
        on, horizon = self._shaping
        if not on:
            return {}
        return {"shaped_reward": False} if horizon is None else {"shaped_reward": False, "shaping_horizon": None}

    def shaping_weight(self) -> float:
        """The weight of Overcooked's shaped reward at :attr:`env_steps` (0 without shaping)."""
        on, horizon = self._shaping
        if not on:
            return 0.0
        return 1.0 if horizon is None else max(0.0, 1.0 - self.env_steps / horizon)

    def get_state(self) -> Dict[str, Any]:
        """:meth:`JaxBatchEnv.get_state` plus :attr:`env_steps` (the shaping anneal's clock)."""
        return {**super().get_state(), "env_steps": self.env_steps}

    def set_state(self, state: Dict[str, Any]) -> None:
        """Restore a :meth:`get_state` dict (the copies and the shaping anneal's clock)."""
        super().set_state(state)
        self.env_steps = int(state.get("env_steps", self.env_steps))

    def _reward(self, reward: np.ndarray, metrics: Dict[str, Any]) -> np.ndarray:
        """JaxMARL's reward plus the weighted shaped reward (Overcooked with ``shaped_reward=True``)."""
        weight = self.shaping_weight()
        self.env_steps += self.num_envs
        if weight == 0.0:
            return reward
        return (reward + np.float32(weight) * np.asarray(metrics["shaped_reward"])).astype(np.float32)


def _env_info(family: str, scenario: str, agents: List[str], built: Built, num_envs: int) -> EnvInfo:
    """One cooperative group ``"agent"`` or one group and team per agent (``kind="mixed"``)."""
    if built.cooperative:
        groups = {"agent": GroupInfo("agent", agents, built.obs_space, built.action_space, team="team")}
        kind = "cooperative"
    else:
        groups = {a: GroupInfo(a, [a], built.obs_space, built.action_space, team=a) for a in agents}
        kind = "mixed"
    return EnvInfo(
        family=family,
        scenario=scenario,
        agents=agents,
        groups=groups,
        state_dim=built.state_dim,
        episode_limit=built.episode_limit,
        kind=kind,
        shared_reward=built.cooperative,
        num_envs=num_envs,
    )


def _check_options(options: Dict[str, Any]) -> None:
    for k in _POSITIVE_INTS:
        if k in options:
            v = options[k]
            if not isinstance(v, (int, np.integer)) or isinstance(v, bool) or v < 1:
                raise MarlError(f"{k} must be a positive int, got {v!r}.")


def _check_shaping(on: bool, horizon: Any) -> Tuple[bool, Optional[int]]:
    if horizon is not None:
        if not on:
            raise MarlError("shaping_horizon needs shaped_reward=True (it anneals the shaped reward's weight).")
        if not isinstance(horizon, (int, float, np.integer)) or isinstance(horizon, bool) or horizon <= 0:
            raise MarlError(f"shaping_horizon must be a positive number of env steps, got {horizon!r}.")
    return on, None if horizon is None else int(horizon)


@functools.lru_cache(maxsize=None)
def _build(family: str, scenario: str, options: Tuple[Tuple[str, Any], ...], flat: bool = False):
    """``(Built, (batched reset, batched step))``; cached so envs built alike share the compiled functions."""
    jax, jaxmarl = import_jaxmarl(family)
    built = FAMILIES[family].build(jax, jaxmarl, scenario, dict(options))
    if flat:
        built = _flattened(jax.numpy, built)
    return built, batched_fns(jax, built.spec)


def _flattened(jnp, built: Built) -> Built:
    """``built`` with each agent's observation flattened into one float32 vector (a ``Dict``: keys in order)."""
    inner = built.spec.observe

    def observe(obs_out, st):
        obs, state, avail, alive = inner(obs_out, st)
        parts = [obs[k] for k in obs] if isinstance(obs, dict) else [obs]
        n = parts[0].shape[0]
        return jnp.concatenate([p.reshape(n, -1).astype(jnp.float32) for p in parts], -1), state, avail, alive

    dim = built.state_dim // len(built.spec.agents)
    space = gym.spaces.Box(-np.inf, np.inf, shape=(dim,), dtype=np.float32)
    spec = dataclasses.replace(built.spec, observe=observe)
    return dataclasses.replace(built, spec=spec, obs_space=space)


# ----------------------------------------------------------------------------- registry entry points


def scenarios_of(family: str) -> List[str]:
    """The scenarios of ``family`` (static: listing them imports no jax)."""
    return list(FAMILIES[family].scenarios)


def make_family(family: str, scenario: Optional[str] = None, **kwargs: Any) -> JaxMARLEnv:
    """``make_env(family, scenario, ...)`` for the JaxMARL families; ``players=n`` names Hanabi's scenario.

    Raises:
        MarlError: no scenario where the family has no default (MABrax), ``players`` outside 2..5
            or in conflict with the scenario, and everything :class:`JaxMARLEnv` raises.
    """
    fam = FAMILIES[family]
    if family == "hanabi" and "players" in kwargs:
        players = kwargs.pop("players")
        named = f"{players}p" if isinstance(players, int) and not isinstance(players, bool) else str(players)
        if named not in HANABI_SCENARIOS:
            raise MarlError(f"Hanabi players must be 2, 3, 4 or 5, got {players!r}.")
        if scenario is not None and scenario != named:
            raise MarlError(f"make_env('hanabi', {scenario!r}, players={players}) disagree; give one of them.")
        scenario = named
    if scenario is None:
        if fam.default is None:
            raise MarlError(
                f"make_env('{family}', scenario) needs a scenario. Valid choices: {', '.join(fam.scenarios)}."
            )
        scenario = fam.default
    return JaxMARLEnv(family, scenario, **kwargs)


make_overcooked = functools.partial(make_family, "overcooked")
make_hanabi = functools.partial(make_family, "hanabi")
make_coin_game = functools.partial(make_family, "coin_game")
make_storm = functools.partial(make_family, "storm")
make_mabrax = functools.partial(make_family, "mabrax")
overcooked_scenarios = functools.partial(scenarios_of, "overcooked")
hanabi_scenarios = functools.partial(scenarios_of, "hanabi")
coin_game_scenarios = functools.partial(scenarios_of, "coin_game")
storm_scenarios = functools.partial(scenarios_of, "storm")
mabrax_scenarios = functools.partial(scenarios_of, "mabrax")
