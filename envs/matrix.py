"""Cooperative matrix games as a batched :class:`~marl.env.MultiAgentEnv`.

The classic tiny games used to show which joint-action value functions
VDN (additive) and QMIX (monotonic) can and cannot represent:

=================  ======  ==============================================  ===========  =======
scenario           agents  payoff (row = agent 0's action)                 steps        optimum
=================  ======  ==============================================  ===========  =======
``two_step``       2       step 1: agent 0 picks 2A (a=0) or 2B (a=1),     2            8
                           reward 0; step 2: 2A pays 7 for every joint
                           action, 2B pays ``[[0, 1], [1, 8]]``
``climbing``       2       ``[[11, -30, 0], [-30, 7, 6], [0, 0, 5]]``      1            11
``penalty``        2       ``[[k, 0, 10], [0, 2, 0], [10, 0, k]]``,        1            10
                           ``k <= 0`` (default -100)
``nonmonotonic``   2       ``[[8, -12, -12], [-12, 0, 0], [-12, 0, 0]]``   1            8
``custom``         >= 2    ``payoff=``: any n-dim array, one axis per      1            max
                           agent, axis ``i`` = actions of agent ``i``
=================  ======  ==============================================  ===========  =======

Sources:
    * two_step: Rashid et al., "QMIX: Monotonic Value Function Factorisation for
      Deep Multi-Agent Reinforcement Learning", ICML 2018, Figure 3.
    * climbing, penalty: Claus & Boutilier, "The Dynamics of Reinforcement
      Learning in Cooperative Multiagent Systems", AAAI 1998.
    * nonmonotonic: Son et al., "QTRAN: Learning to Factorize with
      Transformation for Cooperative Multi-Agent Reinforcement Learning",
      ICML 2019, Table 1 (the matrix game).

Usage::

    make_env("matrix", "two_step", num_envs=32, seed=0)
    make_env("matrix", "climbing")
    make_env("matrix", "penalty", k=-100)
    make_env("matrix", payoff=[[8, -12, -12], [-12, 0, 0], [-12, 0, 0]])   # scenario "custom"
    make_env("matrix", "custom", payoff=np.zeros((2, 3, 4)))              # 3 agents

Layout (``B = num_envs``, ``N`` agents, ``S`` game states, ``A`` = the largest
action count of any agent):

* one group ``"agent"`` with agents ``agent_0 .. agent_{N-1}``, action space
  ``Discrete(A)``, team ``"team"``; kind ``"cooperative"``, ``shared_reward=True``;
* ``obs["agent"]`` ``[B, N, S + 1]`` float32: the one-hot of the game state, the
  same for every agent; the last slot is the terminal state, seen only in
  ``final_obs`` of an ended episode. two_step has ``S = 3`` (states 1, 2A, 2B),
  the one-step games ``S = 1``;
* ``state`` ``[B, S + 1]``: the same one-hot;
* ``avail_actions["agent"]`` ``[B, N, A]`` bool: all True, except for custom
  payoffs whose agents have different action counts: agent ``i`` then has
  ``Discrete(A)`` padded with unavailable actions ``payoff.shape[i] .. A-1``
  (one group with masks is simpler for every algorithm than one group per
  action count). Sending an unavailable action raises :class:`MarlError`;
* ``alive["agent"]`` ``[B, N]`` all True;
* ``reward["agent"]`` ``[B, N]`` float32: every agent receives the team payoff;
* ``terminated`` after the last step (2 for two_step, 1 otherwise), never
  ``truncated``; ``episode_limit`` = that number of steps.

Every copy runs the same deterministic game, so all copies stay in lockstep:
stepping is a table lookup (``gather`` on the flattened joint action), and an
ended copy is reset to the start state right away (auto-reset); ``final_obs`` /
``final_state`` then hold the terminal one-hot and ``final_avail_actions`` the
(static) action masks. ``reset(seed)`` accepts and ignores the seed.

:func:`optimal_return` gives the best team return (``gamma = 1``) of a game:
the return *one* agent receives, so :class:`~marl.env.EpisodeStats`'
``episode_return`` (summed over agents) of optimal play is ``N * optimal_return``.
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional

import gymnasium as gym
import numpy as np
import torch

from marl.env import (
    EnvInfo,
    GroupInfo,
    MarlError,
    MultiAgentEnv,
    Observation,
    Step,
    check_discrete_actions,
    unknown_choice,
)
from marl.envs.common import check_kwargs, check_num_envs

DEFAULT_NUM_ENVS = 32

# named games (``custom`` is built from ``payoff=`` and is not listed by scenarios())
_GAMES = ("two_step", "climbing", "penalty", "nonmonotonic")
CUSTOM = "custom"

CLIMBING = [[11.0, -30.0, 0.0], [-30.0, 7.0, 6.0], [0.0, 0.0, 5.0]]
NONMONOTONIC = [[8.0, -12.0, -12.0], [-12.0, 0.0, 0.0], [-12.0, 0.0, 0.0]]
TWO_STEP_2B = [[0.0, 1.0], [1.0, 8.0]]
TWO_STEP_STATES = ("1", "2A", "2B")


def scenarios() -> List[str]:
    """The named games: ``two_step``, ``climbing``, ``penalty``, ``nonmonotonic``.

    ``"custom"`` (a user payoff, ``payoff=`` required) is accepted by
    :func:`make` too but not listed, so every listed scenario builds without kwargs.
    """
    return list(_GAMES)


def penalty_payoff(k: float = -100.0) -> List[List[float]]:
    """The penalty game ``[[k, 0, 10], [0, 2, 0], [10, 0, k]]`` (``k <= 0``)."""
    return [[k, 0.0, 10.0], [0.0, 2.0, 0.0], [10.0, 0.0, k]]


def check_payoff(payoff: Any) -> np.ndarray:
    """Validate a custom payoff: returns it as a float64 array of shape ``(n_0, ..., n_{N-1})``.

    Raises:
        MarlError: ragged / non-numeric input, fewer than 2 axes (agents), an
            axis with no actions, or non-finite entries.
    """
    if payoff is None:
        raise MarlError("The 'custom' matrix game needs payoff=<array-like, one axis per agent>.")
    try:
        arr = np.asarray(payoff, dtype=np.float64)
    except (ValueError, TypeError) as e:
        raise MarlError(
            f"payoff must be a numeric, rectangular array-like (one axis per agent), got {payoff!r}: {e}"
        ) from e
    if arr.ndim < 2:
        raise MarlError(
            f"payoff must have one axis per agent and at least 2 agents, got shape {arr.shape} "
            f"({arr.ndim} axis). Example: payoff=[[1, 0], [0, 1]] for 2 agents with 2 actions."
        )
    if 0 in arr.shape:
        raise MarlError(f"payoff has an axis with no actions: shape {arr.shape}; every agent needs >= 1 action.")
    if not np.isfinite(arr).all():
        raise MarlError(f"payoff entries must be finite, got {payoff!r}.")
    return arr


class MatrixGame(MultiAgentEnv):
    """A cooperative matrix game (see the module docstring) with ``B`` copies in one batch.

    The game is a table over states ``S`` and joint actions: ``payoff``
    ``[S, n_0, ..., n_{N-1}]`` (team reward) and ``next_state`` (same shape,
    ``-1`` = episode ends). Stepping gathers both at the flattened joint action.

    Args:
        scenario: ``two_step``, ``climbing``, ``penalty``, ``nonmonotonic`` or ``custom``.
        num_envs: ``B`` (default 32).
        k: penalty of the ``penalty`` game (``<= 0``, default -100); only for ``penalty``.
        payoff: the ``custom`` game's payoff, shape ``(n_0, ..., n_{N-1})``, ``N >= 2``.
        seed: accepted for the common ``make_env`` interface; the games are deterministic.
        device: torch device of the returned tensors.

    Attributes:
        optimal_return: best team return of one episode (``gamma = 1``), per agent.
        state_names: names of the game states (index = one-hot slot; the last is ``"terminal"``).

    Raises:
        MarlError: unknown scenario (lists the choices), ``k``/``payoff`` given to a
            game that does not take it, ``k > 0``, bad payoff shape, bad actions,
            ``step`` before ``reset``.
    """

    def __init__(
        self,
        scenario: Optional[str] = None,
        num_envs: int = DEFAULT_NUM_ENVS,
        k: Optional[float] = None,
        payoff: Any = None,
        seed: Optional[int] = 0,
        device: str = "cpu",
    ):
        scenario = _check_scenario(scenario, payoff, k)
        num_envs = check_num_envs(num_envs)
        pay, nxt, names = _game_tables(scenario, k, payoff)
        self.device = torch.device(device)
        self.n_actions_per_agent: List[int] = list(pay.shape[1:])
        N, S, A = pay.ndim - 1, pay.shape[0], max(pay.shape[1:])
        self.state_names = names + ["terminal"]
        self.optimal_return = _optimal_return(pay, nxt)
        self._pay = torch.as_tensor(pay.reshape(S, -1), dtype=torch.float32, device=self.device)  # [S, J]
        self._next = torch.as_tensor(nxt.reshape(S, -1), dtype=torch.long, device=self.device)  # [S, J]
        # flat joint index = sum_i a_i * stride_i (C order of the payoff axes)
        strides = np.cumprod([1] + self.n_actions_per_agent[::-1])[:-1][::-1].copy()
        self._strides = torch.as_tensor(strides, dtype=torch.long, device=self.device)  # [N]
        self._counts = torch.as_tensor(self.n_actions_per_agent, dtype=torch.long, device=self.device)  # [N]
        self._avail = torch.arange(A, device=self.device)[None] < self._counts[:, None]  # [N, A]

        agents = [f"agent_{i}" for i in range(N)]
        box = gym.spaces.Box(0.0, 1.0, (S + 1,), np.float32)
        group = GroupInfo("agent", agents, box, gym.spaces.Discrete(A))
        self.info = EnvInfo(
            family="matrix",
            scenario=scenario,
            agents=agents,
            groups={"agent": group},
            state_dim=S + 1,
            episode_limit=_depth(nxt),
            kind="cooperative",
            shared_reward=True,
            num_envs=num_envs,
        )
        self._s: Optional[torch.Tensor] = None  # [B] current state index

    # ------------------------------------------------------------------ API

    def reset(self, seed: Optional[int] = None) -> Step:
        """Put every copy in the start state; ``seed`` is accepted and ignored (deterministic games)."""
        B = self.num_envs
        self._s = torch.zeros(B, dtype=torch.long, device=self.device)
        return Step.at_reset(self._observation(self._s))

    def check_actions(self, actions: Dict[str, Any]) -> Dict[str, torch.Tensor]:
        """``actions["agent"]`` ``[B, N]`` int, each agent's within its own action count.

        Raises:
            MarlError: missing group, bad shape or dtype, or an action an agent does not have.
        """
        # the range is checked per agent (custom games differ in action counts)
        a = check_discrete_actions(actions, self.info.groups["agent"], self.num_envs, check_range=False)
        a = a.to(self.device)
        bad = (a < 0) | (a >= self._counts)
        if bool(bad.any()):
            b, i = (int(x) for x in bad.nonzero()[0])
            raise MarlError(
                f"Action {int(a[b, i])} of agent_{i} (copy {b}) is not available: "
                f"agent_{i} has actions 0..{int(self._counts[i]) - 1}."
            )
        return {"agent": a}

    def step_env(self, actions: Dict[str, torch.Tensor]) -> Step:
        """One table lookup per copy; an ended copy's last observation is the terminal one-hot."""
        if self._s is None:
            raise MarlError("Call reset() before step().")
        joint = (actions["agent"] * self._strides).sum(-1)  # [B]
        reward = self._pay[self._s, joint]
        nxt = self._next[self._s, joint]
        done = nxt < 0
        self._s = torch.where(done, torch.full_like(nxt, len(self.state_names) - 1), nxt)
        ob = self._observation(self._s)
        B = self.num_envs
        return Step(
            *ob,
            reward={"agent": reward[:, None].expand(B, self._n).clone()},
            terminated=done,
            truncated=torch.zeros(B, dtype=torch.bool, device=self.device),
        )

    def reset_rows(self, rows: torch.Tensor) -> Observation:
        """Put the copies in ``rows`` (``[B]`` bool) back in the start state."""
        self._s = torch.where(rows.to(self.device), torch.zeros_like(self._s), self._s)
        return self._observation(self._s)

    def get_state(self) -> Optional[Dict[str, Any]]:
        """The copies' game states ``[B]`` (the games are deterministic: nothing else to save)."""
        return {"s": None if self._s is None else self._s.clone()}

    def set_state(self, state: Dict[str, Any]) -> None:
        """Restore a :meth:`get_state` dict."""
        self._s = None if state["s"] is None else state["s"].clone().to(self.device)

    # ------------------------------------------------------------------ internals

    @property
    def _n(self) -> int:
        return self.info.groups["agent"].n_agents

    def _observation(self, s: torch.Tensor) -> Observation:
        """Every agent sees the one-hot of the state ``s`` (``[B]``); static masks; everyone alive."""
        B, N, D = self.num_envs, self._n, len(self.state_names)
        state = torch.nn.functional.one_hot(s, D).float()
        return Observation(
            obs={"agent": state[:, None].expand(B, N, D).clone()},
            state=state,
            avail_actions={"agent": self._avail.expand(B, -1, -1).clone()},
            alive={"agent": torch.ones(B, N, dtype=torch.bool, device=self.device)},
        )


def _check_scenario(scenario: Optional[str], payoff: Any, k: Any) -> str:
    """The scenario name (``None`` with a payoff: ``"custom"``); checks which game takes ``k`` / ``payoff``."""
    if scenario is None:
        if payoff is None:
            raise MarlError(
                f"make_env('matrix', scenario) needs a scenario or payoff=. "
                f"Valid choices: {', '.join(_GAMES + (CUSTOM,))}."
            )
        scenario = CUSTOM
    if scenario not in _GAMES + (CUSTOM,):
        raise unknown_choice("matrix game", scenario, _GAMES + (CUSTOM,))
    if payoff is not None and scenario != CUSTOM:
        raise MarlError(
            f"payoff= is only for the 'custom' matrix game, not '{scenario}'. "
            f"Use make_env('matrix', payoff=...) or make_env('matrix', 'custom', payoff=...)."
        )
    if k is not None and scenario != "penalty":
        raise MarlError(f"k= is only for the 'penalty' matrix game, not '{scenario}'.")
    return scenario


def _game_tables(scenario: str, k: Any, payoff: Any):
    """``(payoff [S, n_0, ..], next_state [S, n_0, ..] (-1 = episode ends), state names)`` of a game."""
    if scenario == "two_step":
        pay = np.zeros((3, 2, 2))
        nxt = np.full((3, 2, 2), -1, dtype=np.int64)
        nxt[0, 0, :], nxt[0, 1, :] = 1, 2  # only agent 0's action picks 2A / 2B
        pay[1] = 7.0
        pay[2] = TWO_STEP_2B
        return pay, nxt, list(TWO_STEP_STATES)
    if scenario == "penalty":
        k = -100.0 if k is None else k
        if isinstance(k, bool) or not isinstance(k, (int, float, np.integer, np.floating)) or not np.isfinite(k):
            raise MarlError(f"k must be a finite number <= 0, got {k!r}.")
        if k > 0:
            raise MarlError(f"k must be <= 0 (the penalty for miscoordination), got {k!r}.")
        table = np.asarray(penalty_payoff(float(k)))
    elif scenario == "climbing":
        table = np.asarray(CLIMBING)
    elif scenario == "nonmonotonic":
        table = np.asarray(NONMONOTONIC)
    else:
        table = check_payoff(payoff)
    pay = table[None]
    return pay, np.full(pay.shape, -1, dtype=np.int64), ["start"]


def _optimal_return(pay: np.ndarray, nxt: np.ndarray) -> float:
    """Best undiscounted team return from state 0 (dynamic programming over the acyclic game)."""
    memo: Dict[int, float] = {}

    def value(s: int) -> float:
        if s not in memo:
            p, n = pay[s].ravel(), nxt[s].ravel()
            later = {int(t): value(int(t)) for t in np.unique(n) if t >= 0}
            cont = np.array([later.get(int(t), 0.0) for t in n]) if later else 0.0
            memo[s] = float(np.max(p + cont))
        return memo[s]

    return value(0)


def _depth(nxt: np.ndarray) -> int:
    """Number of steps of the longest episode from state 0."""

    def depth(s: int) -> int:
        return 1 + max((depth(int(t)) for t in set(nxt[s].ravel().tolist()) if t >= 0), default=0)

    return depth(0)


def optimal_return(env: Any) -> float:
    """Best team return of one episode (``gamma = 1``) of a matrix game.

    Args:
        env: a :class:`MatrixGame`, or a scenario name (``"two_step"`` -> 8,
            ``"climbing"`` -> 11, ``"penalty"`` -> 10, ``"nonmonotonic"`` -> 8).

    Returns:
        The return of *one* agent (every agent receives the team payoff).

    Raises:
        MarlError: ``env`` is not a matrix game / unknown name.
    """
    if isinstance(env, str):
        env = MatrixGame(env, num_envs=1)
    value = getattr(env, "optimal_return", None)
    if not isinstance(env, MultiAgentEnv) or not isinstance(value, float):
        raise MarlError(f"optimal_return needs a matrix game env or one of the names {', '.join(_GAMES)}, got {env!r}.")
    return value


def make(
    scenario: Optional[str] = None,
    num_envs: int = DEFAULT_NUM_ENVS,
    seed: Optional[int] = 0,
    device: str = "cpu",
    **kwargs,
) -> MatrixGame:
    """Registry factory of the ``"matrix"`` family; see :class:`MatrixGame`.

    ``make_env("matrix", payoff=...)`` (no scenario) means ``"custom"``.

    Raises:
        MarlError: unknown scenario or kwargs (the message lists the valid ones).
    """
    check_kwargs("the matrix family", kwargs, ["k", "payoff", "num_envs", "seed", "device"])
    return MatrixGame(scenario, num_envs=num_envs, seed=seed, device=device, **kwargs)
