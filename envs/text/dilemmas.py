"""Iterated 2x2 social dilemmas as text games: prisoner's dilemma, stag hunt, chicken.

Both players answer at once each round with ``<A>`` (cooperate) or ``<B>``
(defect), as in the IPD of Piche et al. 2025 (arXiv 2511.19405; its official
code, "AdAlignLLM" below); the prompt never names the game. A reply that is
neither counts as defection (``invalid_action="penalty"`` with the default
move ``<B>``, penalty 0, as that code does). After each round both see the
co-player's move and the payoffs.

Payoffs (row player, column player) for (C, C), (C, D), (D, C), (D, D):

========  ==========================================  ==========
game      payoffs                                     source
========  ==========================================  ==========
ipd       (3,3) (0,5) (5,0) (1,1)                     AdAlignLLM ``ipd`` (R3 S0 T5 P1)
stag_hunt (4,4) (0,3) (3,0) (2,2)                     a standard stag hunt (R > T > P > S)
chicken   (3,3) (1,4) (4,1) (0,0)                     a standard chicken (T > R > S > P)
========  ==========================================  ==========

``payoffs=`` gives any other table as ``{"CC": (r1, r2), "CD": ..., "DC": ..., "DD": ...}``.
"""

from __future__ import annotations

from typing import Dict, List, Optional, Tuple

from marl.env import MarlError, closest, unknown_choice
from marl.text import Bot, RandomBot, TextEnv
from marl.text_params import Param, check_param

COOPERATE, DEFECT = "<A>", "<B>"
GAMES: Dict[str, Dict[str, Tuple[float, float]]] = {
    "ipd": {"CC": (3, 3), "CD": (0, 5), "DC": (5, 0), "DD": (1, 1)},
    "stag_hunt": {"CC": (4, 4), "CD": (0, 3), "DC": (3, 0), "DD": (2, 2)},
    "chicken": {"CC": (3, 3), "CD": (1, 4), "DC": (4, 1), "DD": (0, 0)},
}


def _letter(move: str) -> str:
    return "C" if move == COOPERATE else "D"


def _letter_ab(move: str) -> str:
    return "A" if move == COOPERATE else "B"


COMPACT_STATES = ("start", "AA", "AB", "BA", "BB")  # the compact prompts (words for a tiny tokenizer)


class IteratedDilemma(TextEnv):
    """An iterated 2x2 matrix game between ``player_0`` and ``player_1``, ``rounds`` rounds.

    Args:
        game: ``"ipd"``, ``"stag_hunt"`` or ``"chicken"`` (payoff table above).
        rounds: rounds per game (10 in the AdAlignLLM IPD).
        payoffs: a custom table ``{"CC": (r1, r2), "CD": ..., "DC": ..., "DD": ...}``.
        **kwargs: :class:`~marl.text.TextEnv` options (``invalid_action``, ``history``,
            ``prompt_style``, ``format_reward``, ...).

    Episode metrics: ``coop_rate`` (share of ``<A>`` over both seats and all
    rounds), ``coop_rate_early`` (rounds 1..T-1: position reveals the last round),
    ``coop_rate_player_i``, ``collective_payoff`` (r1 + r2 per round),
    ``reward_per_round_player_i``, ``p_coop_after_defect`` (P(C | co-player
    defected last round)) and ``p_coop_after_cc`` (P(C | both cooperated)).
    """

    family = "ipd"
    simultaneous = True
    kind = "mixed"
    params = {"game": Param("text"), "rounds": Param("whole", low=1), "payoffs": Param("table", optional=True)}

    def __init__(
        self, game: str = "ipd", rounds: int = 10, payoffs: Optional[Dict[str, Tuple[float, float]]] = None, **kwargs
    ):
        if payoffs is None and game not in GAMES:
            raise unknown_choice("dilemma", game, list(GAMES))
        table = payoffs or GAMES[game]
        if sorted(table) != ["CC", "CD", "DC", "DD"]:
            raise MarlError(f"payoffs needs the keys CC, CD, DC, DD, got {sorted(table)}.")
        for k, pair in table.items():
            if not isinstance(pair, (tuple, list)) or len(pair) != 2:
                raise MarlError(f"text game '{game}': payoffs[{k!r}]={pair!r} must be a pair (r1, r2) of numbers.")
            for seat, r in enumerate(pair):
                check_param(f"text game '{game}'", f"payoffs[{k!r}][{seat}]", r, Param("number"))
        self.payoffs = {k: (float(v[0]), float(v[1])) for k, v in table.items()}
        self.rounds = rounds
        self.max_decisions = self.rounds
        self.family = game if game in GAMES else "ipd"
        super().__init__(game, **kwargs)

    # ------------------------------------------------------------------ game
    def new_game(self) -> None:
        self.moves: List[Dict[str, str]] = []  # per round: agent -> move

    def legal_actions(self, agent: str) -> List[str]:
        return [COOPERATE, DEFECT]

    def default_action(self, agent: str) -> str:
        return DEFECT  # AdAlignLLM: anything but the exact token counts as <B>

    def apply(self, moves: Dict[str, str]) -> Dict[str, float]:
        p0, p1 = self.players
        r = self.payoffs[_letter(moves[p0]) + _letter(moves[p1])]
        self.moves.append(dict(moves))
        self.done = len(self.moves) >= self.rounds
        return {p0: r[0], p1: r[1]}

    # ------------------------------------------------------------------ prompts
    def system_prompt(self, agent: str) -> str:
        if self.compact:
            return ""
        me, other = ("first", "second") if agent == self.players[0] else ("second", "first")
        cc, cd, dc, dd = (self.payoffs[k][0 if agent == self.players[0] else 1] for k in ("CC", "CD", "DC", "DD"))
        if agent != self.players[0]:
            cd, dc = dc, cd
        return (
            f"You play a repeated game of {self.rounds} rounds with another player ({me} seat; they have the "
            f"{other}). Each round both of you choose {COOPERATE} or {DEFECT} at the same time. Your points: "
            f"both {COOPERATE}: {cc:g}; you {COOPERATE}, they {DEFECT}: {cd:g}; you {DEFECT}, they {COOPERATE}: "
            f"{dc:g}; both {DEFECT}: {dd:g}. After each round you see their choice. Your goal is to get as many "
            f"points as possible. Answer with exactly {COOPERATE} or {DEFECT}; anything else counts as {DEFECT}."
        )

    def observe(self, agent: str) -> str:
        k = len(self.moves)
        if self.compact:
            # one word per state ("start", then own + co-player's last move, e.g. "AB"):
            # a tiny model then sees the state as one token, as a memory-1 table would
            if not self.moves:
                return "start"
            last = self.moves[-1]
            return _letter_ab(last[agent]) + _letter_ab(last[self.other(agent)])
        if not self.moves:
            return f"Round 1 of {self.rounds}. Your choice?"
        last = self.moves[-1]
        return (
            f"Round {k} result: you played {last[agent]}, the other player played {last[self.other(agent)]}; "
            f"your total is {self.returns[agent]:g}. Round {k + 1} of {self.rounds}. Your choice?"
        )

    # ------------------------------------------------------------------ metrics
    def game_metrics(self) -> Dict[str, float]:
        T = len(self.moves)
        out: Dict[str, float] = {}
        if T == 0:
            return out
        coop = {a: [m[a] == COOPERATE for m in self.moves] for a in self.players}
        for a in self.players:
            out[f"coop_rate_{a}"] = sum(coop[a]) / T
            out[f"reward_per_round_{a}"] = self.returns[a] / T
        out["coop_rate"] = sum(sum(c) for c in coop.values()) / (2 * T)
        early = max(T - 1, 1)
        out["coop_rate_early"] = sum(sum(c[:early]) for c in coop.values()) / (2 * early)
        out["collective_payoff"] = sum(self.returns.values()) / T
        after_d, after_cc = [], []
        for t in range(1, T):
            for a in self.players:
                o = self.other(a)
                if not coop[o][t - 1]:
                    after_d.append(coop[a][t])
                if coop[a][t - 1] and coop[o][t - 1]:
                    after_cc.append(coop[a][t])
        if after_d:
            out["p_coop_after_defect"] = sum(after_d) / len(after_d)
        if after_cc:
            out["p_coop_after_cc"] = sum(after_cc) / len(after_cc)
        return out

    @classmethod
    def bots(cls):
        return {
            "random": RandomBot,
            "always_cooperate": AlwaysCooperate,
            "always_defect": AlwaysDefect,
            "tit_for_tat": TitForTat,
        }


class AlwaysCooperate(Bot):
    """Plays ``<A>`` every round."""

    name = "always_cooperate"

    def act(self, env: IteratedDilemma, agent: str) -> str:
        return COOPERATE


class AlwaysDefect(AlwaysCooperate):
    """Plays ``<B>`` every round."""

    name = "always_defect"

    def act(self, env: IteratedDilemma, agent: str) -> str:
        return DEFECT


class TitForTat(AlwaysCooperate):
    """Cooperates first, then repeats the co-player's last move (Axelrod 1984)."""

    name = "tit_for_tat"

    def act(self, env: IteratedDilemma, agent: str) -> str:
        return env.moves[-1][env.other(agent)] if env.moves else COOPERATE


def make(scenario: Optional[str] = None, **kwargs) -> IteratedDilemma:
    """``make_env("ipd", rounds=10)``; ``make_env("stag_hunt")``, ``make_env("chicken")``
    (``scenario`` is ignored: the family names the game)."""
    return IteratedDilemma(**kwargs)


def _check_scenario(game: str, scenario: Optional[str]) -> None:
    """The family names the game: its one scenario is the game itself (or none).

    Raises:
        MarlError: another scenario; a game of another family is named as that family.
    """
    if scenario is None or scenario == game:
        return
    own = f" The game '{scenario}' is its own family: make_env('{scenario}')."
    hint = own if scenario in GAMES else closest(scenario, [game])
    raise MarlError(f"Unknown {game} scenario '{scenario}'.{hint} Valid choices: {game} (or none: make_env('{game}')).")


def _factory(game: str):
    def build(scenario: Optional[str] = None, **kwargs) -> IteratedDilemma:
        _check_scenario(game, scenario)
        return IteratedDilemma(game=game, **kwargs)

    def names() -> List[str]:
        return [game]

    return build, names


(make_ipd, scenarios_ipd), (make_stag_hunt, scenarios_stag_hunt), (make_chicken, scenarios_chicken) = (
    _factory(g) for g in GAMES
)


def scenarios() -> List[str]:
    return list(GAMES)
