"""The ``cfr`` and ``mcts`` opponents of OpenSpiel text games: a near-Nash policy of a small poker
game (:class:`CFRBot`) and a Monte-Carlo tree search (:class:`MCTSBot`, at the end of this module).

Counterfactual regret minimisation (CFR: Zinkevich et al. 2007, NeurIPS, "Regret Minimization
in Games with Incomplete Information") drives the *average* policy of two-player zero-sum
imperfect-information games to a Nash equilibrium. This module runs OpenSpiel's C++
``pyspiel.CFRPlusSolver`` (CFR+: Tammelin 2014, arXiv 1407.5042; OpenSpiel: Lanctot et al.
2019, arXiv 1908.09453) for a fixed number of iterations and keeps the average policy as an
``open_spiel.python.policy.TabularPolicy`` (information-state string -> action probabilities),
once per process and game.

Solved games (``CFR_ITERATIONS``). Exploitability: the mean over the two seats of what a best
response gains against the policy, in chips per game
(``open_spiel.python.algorithms.exploitability``); value: player_0's expected return when the
policy plays itself (``expected_game_score.policy_value``); measured 2026-11-25, open-spiel
2.0.2, 2-core CPU:

==============================================  ==========  ======  ==============  =========
game                                            iterations  solve   exploitability  value
==============================================  ==========  ======  ==============  =========
kuhn_poker (Kuhn 1951, "A simplified            1000        0.03 s  8.7e-5          -0.05556
two-person poker"; Nash value -1/18)
leduc_poker (Southey et al. 2005, arXiv         300         3 s     0.0023          -0.0855
1207.1411)
==============================================  ==========  ======  ==============  =========

Another small two-player zero-sum imperfect-information game gets the bot once its pyspiel name
is added to ``CFR_ITERATIONS``; large games (e.g. full-size poker) are beyond full-tree CFR.
"""

from __future__ import annotations

import random
from typing import Any, Dict, Optional, Tuple

from marl.env import MarlError
from marl.text import Bot

# pyspiel short name -> CFR+ iterations: exploitability below 0.003 chips per game within a
# few seconds of solving (module docstring), so evaluation does not wait on the solver
CFR_ITERATIONS: Dict[str, int] = {"kuhn_poker": 1000, "leduc_poker": 300}
# (game name, sorted parameters, iterations) -> TabularPolicy: solved once per process, since
# evaluation builds a fresh bot for every game
_POLICIES: Dict[Tuple[str, Tuple[Tuple[str, Any], ...], int], Any] = {}


def cfr_unsupported(game) -> Optional[str]:
    """Why the ``cfr`` bot cannot play pyspiel ``game`` (``None``: it can).

    It needs a two-player zero-sum game of imperfect information named in ``CFR_ITERATIONS``
    (small enough to solve by full-tree CFR in seconds).
    """
    import pyspiel

    gtype = game.get_type()
    if gtype.short_name not in CFR_ITERATIONS:
        return f"CFR is set up for {', '.join(CFR_ITERATIONS)} only, not '{gtype.short_name}'"
    if game.num_players() != 2 or gtype.utility != pyspiel.GameType.Utility.ZERO_SUM:
        return (
            f"CFR's average policy is a Nash equilibrium of two-player zero-sum games only; "
            f"'{game}' has {game.num_players()} players and utility {gtype.utility.name}"
        )
    return None


def solve(game, iterations: Optional[int] = None):
    """The CFR+ average policy of pyspiel ``game`` after ``iterations`` iterations (cached).

    Args:
        game: a pyspiel game that :func:`cfr_unsupported` accepts.
        iterations: CFR+ iterations (default: ``CFR_ITERATIONS`` of the game).
    Returns:
        An ``open_spiel.python.policy.TabularPolicy`` for both seats (the same object on
        every call with the same game, parameters and iterations in this process).
    Raises:
        MarlError: a game CFR is not set up for, or ``iterations`` < 1.
    """
    reason = cfr_unsupported(game)
    if reason:
        raise MarlError(f"No CFR policy: {reason}.")
    name = game.get_type().short_name
    iterations = int(iterations or CFR_ITERATIONS[name])
    if iterations < 1:
        raise MarlError(f"CFR iterations must be >= 1, got {iterations}.")
    key = (name, tuple(sorted(game.get_parameters().items())), iterations)
    if key not in _POLICIES:
        import pyspiel
        from open_spiel.python import policy

        solver = pyspiel.CFRPlusSolver(game)
        for _ in range(iterations):
            solver.evaluate_and_update_policy()
        _POLICIES[key] = policy.pyspiel_policy_to_python_policy(game, solver.tabular_average_policy())
    return _POLICIES[key]


class CFRBot(Bot):
    """Plays the CFR+ average policy of the game (:func:`solve`): a near-Nash opponent.

    At each decision it looks up the acting player's information state in the env's
    pyspiel state (``env.state``; its own card and the public betting only, so unlike
    ``mcts`` it never sees hidden cards) and samples a move from the policy with its seeded
    RNG. The policy is solved on the first move of a process (seconds) and cached.

    Args:
        seed: seed of the sampling RNG.
        iterations: CFR+ iterations (default: ``CFR_ITERATIONS`` of the game).
    """

    name = "cfr"

    def __init__(self, seed: Optional[int] = None, iterations: Optional[int] = None):
        self.rng = random.Random(seed)
        self.iterations = iterations

    def reset(self, seed: Optional[int] = None) -> None:
        if seed is not None:
            self.rng.seed(seed)

    def act(self, env, agent: str) -> str:
        """The move of ``agent`` (the player to move in ``env``, an ``OpenSpielGame``), as text.

        Raises:
            MarlError: the game is not one CFR is set up for (:func:`cfr_unsupported`).
        """
        state = env.state
        probs = solve(env.game, self.iterations).action_probabilities(state, state.current_player())
        actions = sorted(probs)  # a fixed order, so a seed gives the same move in every process
        return env.action_text(self.rng.choices(actions, weights=[probs[a] for a in actions])[0])


class MCTSBot(Bot):
    """OpenSpiel's ``MCTSBot`` with a random-rollout evaluator (the MARS evaluation opponent).

    MARS official code (arXiv 2510.15414): ``uct_c=2``, ``rollout_count=10`` (``n_rollouts``),
    ``max_simulations`` 100 or 1000. The search reads the env's true pyspiel
    state, so in imperfect-information games it sees hidden cards; use it for
    tic-tac-toe and Connect Four as MARS does. It needs a game with terminal
    rewards only (not Hanabi).

    Args:
        seed: seed of the search's numpy ``RandomState``.
        max_simulations: MCTS simulations per move.
        uct_c: UCT exploration constant.
        n_rollouts: random rollouts per leaf evaluation.
    """

    name = "mcts"

    def __init__(
        self, seed: Optional[int] = None, max_simulations: int = 100, uct_c: float = 2.0, n_rollouts: int = 10
    ):
        import numpy as np

        self.random_state = np.random.RandomState(seed)
        self.max_simulations = int(max_simulations)
        self.uct_c = float(uct_c)
        self.n_rollouts = int(n_rollouts)
        self._bot = None
        self._game = None

    def reset(self, seed: Optional[int] = None) -> None:
        if seed is not None:
            self.random_state.seed(seed)  # the search keeps this object, so reseeding it is enough

    def _search(self, game):
        if self._game is not game:
            from open_spiel.python.algorithms import mcts

            evaluator = mcts.RandomRolloutEvaluator(n_rollouts=self.n_rollouts, random_state=self.random_state)
            self._bot = mcts.MCTSBot(game, self.uct_c, self.max_simulations, evaluator, random_state=self.random_state)
            self._game = game
        return self._bot

    def act(self, env: Any, agent: str) -> str:  # env: an OpenSpielGame
        return env.action_text(self._search(env.game).step(env.state))
