"""General-sum iterated matrix games (the iterated prisoner's dilemma and kin) as a batched
:class:`~marl.env.MultiAgentEnv`: two agents, individual rewards, one-step memory observations.

==============  ==============================================  ==============================
scenario        payoff ``(row, column)`` (action 0 = C, 1 = D)   source
==============  ==============================================  ==============================
``ipd``         CC (3, 3), CD (0, 5), DC (5, 0), DD (1, 1)      Axelrod 1984 (T=5, R=3, P=1, S=0)
``stag_hunt``   CC (4, 4), CD (0, 3), DC (3, 0), DD (3, 3)      Skyrms 2004 (stag = C)
``chicken``     CC (3, 3), CD (1, 4), DC (4, 1), DD (0, 0)      Rapoport & Chammah 1966
``custom``      ``payoff=[[[r0, r1], [r0, r1]], ...]``, shape   any ``[A, A, 2]`` array
                ``[A, A, 2]``: ``payoff[a0][a1] = (r0, r1)``
==============  ==============================================  ==============================

The iterated prisoner's dilemma with one-step memory is the test bed of opponent shaping: LOLA
(Foerster et al. 2018, arXiv 1709.04326), POLA (Zhao et al. 2022, arXiv 2211.06917),
Advantage Alignment (Duque et al. 2025, arXiv 2406.14662). The text IPD of
``envs/text/dilemmas.py`` pays the same table to LLM agents.

Layout (``B = num_envs``, ``A`` actions, ``rounds`` steps per episode):

* two groups ``agent_0`` and ``agent_1`` of one agent each, each its own team, ``kind="mixed"``,
  action space ``Discrete(A)``; every action always available;
* ``obs[g]`` ``[B, 1, A*A + 1]`` float32: the one-hot of the last joint action seen from the agent
  (own action first: slot ``1 + own * A + other``), slot 0 at the first round;
* ``state`` ``[B, A*A + 1]``: agent 0's view;
* ``reward[g]`` ``[B, 1]``: the agent's own payoff; ``truncated`` after ``rounds`` rounds (a time
  limit, not the end of the task: returns bootstrap), never ``terminated``.

Usage::

    make_env("iterated_matrix", "ipd", rounds=10, num_envs=64)
    make_env("iterated_matrix", payoff=[[[2, 2], [0, 3]], [[3, 0], [1, 1]]])   # scenario "custom"
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional

import gymnasium as gym
import numpy as np
import torch

from marl.env import EnvInfo, GroupInfo, MarlError, MultiAgentEnv, Observation, Step, check_discrete_actions
from marl.envs.common import check_kwargs, check_num_envs
from marl.errors import unknown_choice

GAMES: Dict[str, List[List[List[float]]]] = {
    "ipd": [[[3, 3], [0, 5]], [[5, 0], [1, 1]]],
    "stag_hunt": [[[4, 4], [0, 3]], [[3, 0], [3, 3]]],
    "chicken": [[[3, 3], [1, 4]], [[4, 1], [0, 0]]],
}
CUSTOM = "custom"
AGENTS = ("agent_0", "agent_1")


def scenarios() -> List[str]:
    """The named games (``custom``, built from ``payoff=``, is accepted by :func:`make` but not listed)."""
    return list(GAMES)


def check_payoff(payoff: Any) -> np.ndarray:
    """A custom payoff as a float32 array ``[A, A, 2]`` (``payoff[a0, a1] = (r0, r1)``).

    Raises:
        MarlError: not numeric and rectangular, another shape, fewer than 2 actions, non-finite entries.
    """
    try:
        arr = np.asarray(payoff, dtype=np.float32)
    except (ValueError, TypeError) as e:
        raise MarlError(f"payoff must be a numeric [A, A, 2] array-like, got {payoff!r}: {e}") from None
    if arr.ndim != 3 or arr.shape[0] != arr.shape[1] or arr.shape[2] != 2 or arr.shape[0] < 2:
        raise MarlError(
            f"payoff must have shape [A, A, 2] with A >= 2 actions (payoff[a0][a1] = (reward 0, reward 1)), "
            f"got shape {arr.shape}. Example (the IPD): {GAMES['ipd']}."
        )
    if not np.isfinite(arr).all():
        raise MarlError(f"payoff entries must be finite, got {payoff!r}.")
    return arr


class IteratedMatrixGame(MultiAgentEnv):
    """A two-player iterated matrix game with ``B`` copies (module docstring).

    Args:
        scenario: ``ipd``, ``stag_hunt``, ``chicken`` or ``custom`` (``None`` with ``payoff``).
        rounds: steps per episode (>= 1, default 10).
        payoff: the ``custom`` game's ``[A, A, 2]`` table.
        num_envs: ``B``; seed: accepted for the common interface (the games are deterministic);
        device: torch device of the tensors.
    Raises:
        MarlError: unknown scenario (lists the choices), ``payoff`` with a named game or missing for
            ``custom``, a bad payoff or ``rounds``, an action out of range, ``step`` before ``reset``.
    """

    def __init__(
        self,
        scenario: Optional[str] = None,
        rounds: int = 10,
        payoff: Any = None,
        num_envs: int = 32,
        seed: Optional[int] = 0,
        device: str = "cpu",
    ):
        scenario = _check_scenario(scenario, payoff)
        if isinstance(rounds, bool) or not isinstance(rounds, (int, np.integer)) or rounds < 1:
            raise MarlError(f"rounds must be a whole number >= 1, got {rounds!r}.")
        table = check_payoff(payoff if scenario == CUSTOM else GAMES[scenario])
        self.device = torch.device(device)
        self.rounds, A = int(rounds), table.shape[0]
        self._pay = torch.as_tensor(table.reshape(A * A, 2), device=self.device)  # [A*A, 2]
        box = gym.spaces.Box(0.0, 1.0, (A * A + 1,), np.float32)
        groups = {a: GroupInfo(a, [a], box, gym.spaces.Discrete(A), team=a) for a in AGENTS}
        self.info = EnvInfo(
            family="iterated_matrix",
            scenario=scenario,
            agents=list(AGENTS),
            groups=groups,
            state_dim=A * A + 1,
            episode_limit=self.rounds,
            kind="mixed",
            num_envs=check_num_envs(num_envs),
        )
        self._t: Optional[torch.Tensor] = None  # [B] rounds played
        self._last = torch.zeros(self.num_envs, 2, dtype=torch.long, device=self.device)  # [B, 2] slots

    def reset(self, seed: Optional[int] = None) -> Step:
        """Every copy at round 0 (``seed`` is accepted and ignored: the games are deterministic)."""
        self._t = torch.zeros(self.num_envs, dtype=torch.long, device=self.device)
        self._last.zero_()
        return Step.at_reset(self._observation())

    def check_actions(self, actions: Dict[str, Any]) -> Dict[str, torch.Tensor]:
        """``actions[g]`` ``[B, 1]`` int in ``0..A-1`` for both groups.

        Raises:
            MarlError: a missing group, a bad shape or dtype, an action out of range.
        """
        return {g: check_discrete_actions(actions, self.info.groups[g], self.num_envs).to(self.device) for g in AGENTS}

    def step_env(self, actions: Dict[str, torch.Tensor]) -> Step:
        """One payoff lookup per copy; after ``rounds`` rounds the episode is truncated."""
        if self._t is None:
            raise MarlError("Call reset() before step().")
        a0, a1 = actions["agent_0"][:, 0].long(), actions["agent_1"][:, 0].long()
        A = self.info.groups["agent_0"].n_actions
        r = self._pay[a0 * A + a1]  # [B, 2]
        self._last = torch.stack([1 + a0 * A + a1, 1 + a1 * A + a0], -1)
        self._t = self._t + 1
        ob = self._observation()
        return Step(
            *ob,
            reward={g: r[:, i : i + 1].clone() for i, g in enumerate(AGENTS)},
            terminated=torch.zeros(self.num_envs, dtype=torch.bool, device=self.device),
            truncated=self._t >= self.rounds,
        )

    def reset_rows(self, rows: torch.Tensor) -> Observation:
        """Copies in ``rows`` (``[B]`` bool) back at round 0."""
        rows = rows.to(self.device)
        self._t = torch.where(rows, torch.zeros_like(self._t), self._t)
        self._last = torch.where(rows[:, None], torch.zeros_like(self._last), self._last)
        return self._observation()

    def get_state(self) -> Optional[Dict[str, Any]]:
        """Rounds played and the last joint action of every copy."""
        return {"t": None if self._t is None else self._t.clone(), "last": self._last.clone()}

    def set_state(self, state: Dict[str, Any]) -> None:
        """Restore a :meth:`get_state` dict."""
        self._t = None if state["t"] is None else state["t"].clone().to(self.device)
        self._last = state["last"].clone().to(self.device)

    def _observation(self) -> Observation:
        B, D = self.num_envs, self.info.state_dim
        views = torch.nn.functional.one_hot(self._last, D).float()  # [B, 2, D]
        ones = torch.ones(B, 1, dtype=torch.bool, device=self.device)
        avail = torch.ones(B, 1, self.info.groups["agent_0"].n_actions, dtype=torch.bool, device=self.device)
        return Observation(
            obs={g: views[:, i : i + 1].clone() for i, g in enumerate(AGENTS)},
            state=views[:, 0].clone(),
            avail_actions={g: avail.clone() for g in AGENTS},
            alive={g: ones.clone() for g in AGENTS},
        )


def _check_scenario(scenario: Optional[str], payoff: Any) -> str:
    """The scenario (``None`` with a payoff: ``custom``); which scenario takes ``payoff``."""
    valid = tuple(GAMES) + (CUSTOM,)
    if scenario is None:
        if payoff is None:
            raise MarlError(
                f"make_env('iterated_matrix', scenario) needs a scenario or payoff=. Valid: {', '.join(valid)}."
            )
        scenario = CUSTOM
    if scenario not in valid:
        raise unknown_choice("iterated matrix game", scenario, valid)
    if payoff is not None and scenario != CUSTOM:
        raise MarlError(f"payoff= is only for the 'custom' iterated matrix game, not '{scenario}'.")
    if payoff is None and scenario == CUSTOM:
        raise MarlError("The 'custom' iterated matrix game needs payoff=<[A, A, 2] array-like>.")
    return scenario


def make(scenario: Optional[str] = None, num_envs: int = 32, seed: Optional[int] = 0, device: str = "cpu", **kwargs):
    """Registry factory of the ``"iterated_matrix"`` family (:class:`IteratedMatrixGame`).

    Raises:
        MarlError: unknown scenario or keyword (the message lists the valid ones).
    """
    check_kwargs("the iterated_matrix family", kwargs, ["rounds", "payoff", "num_envs", "seed", "device"])
    return IteratedMatrixGame(scenario, num_envs=num_envs, seed=seed, device=device, **kwargs)
