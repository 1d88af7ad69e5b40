"""Turn-based OpenSpiel games as text games (the MARS game set).

MARS (Yuan, Xu et al. 2025, arXiv 2510.15414, official code) wraps OpenSpiel's
``pyspiel.load_game`` for tic-tac-toe, Kuhn poker, Leduc poker, Connect Four
and a small Hanabi. :class:`OpenSpielGame` does the same for any turn-based
OpenSpiel game: one pyspiel state per game, chance nodes sampled with the
env's seeded ``rng``, the player to move as the only agent in ``obs``.

Scenarios (``make_env("openspiel", name)``):

================  ==============================================  ===========
scenario          pyspiel game                                    kind
================  ==============================================  ===========
tic_tac_toe       ``tic_tac_toe``                                 competitive
kuhn_poker        ``kuhn_poker``                                  competitive
leduc_poker       ``leduc_poker``                                 competitive
connect_four      ``connect_four``                                competitive
mini_hanabi       ``hanabi`` players=2, colors=2, ranks=2,        cooperative
                  hand_size=3, max_information_tokens=3,
                  max_life_tokens=3 (MARS ``HanabiConfig``)
================  ==============================================  ===========

Any other registered pyspiel game name also works, written generically: the
state is ``observation_string(player)`` (or ``information_state_string``) and
the moves are ``action_to_string(player, a)``.

Rewards (MARS official code): 0 until the end, then ``state.returns()`` to every seat
(so the loser of a game its opponent ends also gets its -1 in that step);
a zero-sum game that ends 0 for all is a draw and pays ``draw_reward`` to
all; the base option ``format_reward`` (MARS: 0.05, default 0) is added to
every valid reply. A bad reply forfeits by default: offender
``invalid_penalty`` (-11 = -1 - 10), the others 0.
"""

from __future__ import annotations

import random
import re
from typing import Any, Dict, List, Optional, Sequence, Tuple

from marl.env import MarlError, closest
from marl.errors import optional_import
from marl.envs.text.openspiel_bots import CFRBot, MCTSBot, cfr_unsupported
from marl.text import RandomBot, TextEnv
from marl.text_params import Param, check_library_params

INSTALL_HINT = "pip install open_spiel (or pip install marl-rllib[llm])"
MINI_HANABI = {"players": 2, "colors": 2, "ranks": 2, "hand_size": 3, "max_information_tokens": 3, "max_life_tokens": 3}
# scenario -> (pyspiel game name, parameters)
SCENARIOS: Dict[str, Tuple[str, Dict[str, Any]]] = {
    "tic_tac_toe": ("tic_tac_toe", {}),
    "kuhn_poker": ("kuhn_poker", {}),
    "leduc_poker": ("leduc_poker", {}),
    "connect_four": ("connect_four", {}),
    "mini_hanabi": ("hanabi", MINI_HANABI),
}
DEALER = "dealer"  # log entries of chance events that happen mid-game (Leduc's public card)
HANABI_COLORS = "RYGWB"  # OpenSpiel's colour letters, in order


def load_pyspiel():
    """Import ``pyspiel``.

    Raises:
        MarlError: OpenSpiel is not installed (the message gives the pip command).
    """
    return optional_import("pyspiel", f"OpenSpiel text games need pyspiel: {INSTALL_HINT}.")


def _norm(text: str) -> str:
    return " ".join(text.lower().split())


def _grid(state, player: int) -> List[str]:
    """Rows of a board game's observation string (``.`` empty, ``x`` / ``o`` marks)."""
    return [row for row in state.observation_string(player).splitlines() if row.strip()]


# ---------------------------------------------------------------------------- renderers
class _Render:
    """How one OpenSpiel game is written for players (generic: pyspiel's own strings).

    Subclasses override the pieces their game writes differently. ``compact``
    selects the short forms of ``prompt_style="compact"``.
    """

    state_label = "GAME STATE"
    two_players = False  # True: written for two players only

    def __init__(self, game, name: str, compact: bool):
        self.game = game
        self.name = name
        self.compact = compact
        gtype = game.get_type()
        self.has_obs = gtype.provides_observation_string
        if not (self.has_obs or gtype.provides_information_state_string):
            raise MarlError(
                f"OpenSpiel game '{name}' gives no observation or information-state string to write prompts from."
            )

    def rules(self, player: int) -> str:
        return (
            f"You are playing the game '{self.game.get_type().long_name}' (OpenSpiel '{self.name}') "
            f"with {self.game.num_players()} players. You are player_{player}."
        )

    def action(self, state, player: int, action: int) -> str:
        text = state.action_to_string(player, action)
        return "_".join(text.split()) if self.compact else text

    def example_for(self, player: int) -> Optional[str]:
        """An answer shown in the system prompt (``None``: no example)."""
        return None

    def view(self, state, player: int, log: Sequence[Tuple[str, str]]) -> str:
        """The state from ``player``'s view (natural style); ``log`` = the moves so far."""
        return state.observation_string(player) if self.has_obs else state.information_state_string(player)

    def compact_view(self, state, player: int, log: Sequence[Tuple[str, str]]) -> str:
        return " / ".join(line.strip() for line in self.view(state, player, log).splitlines() if line.strip())


class _Grid(_Render):
    """Board games with marks ``x`` (player_0) and ``o`` (player_1)."""

    marks = ("X", "O")
    two_players = True

    def view(self, state, player: int, log) -> str:
        return "\n".join(row.upper().replace(".", "_") for row in _grid(state, player))

    title = board = ""  # set by each board game

    def rules(self, player: int) -> str:
        mark, other = self.marks[player], self.marks[1 - player]
        return (
            f"You are playing {self.title} as player_{player} with mark {mark}; the other player controls "
            f"{other}. X moves first. GAME RULES: {self.board} Your legal actions are written "
            f"{self.move_form(mark)}."
        )

    def compact_view(self, state, player: int, log) -> str:
        # Own-view tokens so that one policy can play both seats from the same words.
        mine = self.marks[player].lower()
        cell = {".": "_", mine: "me"}
        return " ".join(cell.get(c, "opp") for row in _grid(state, player) for c in row)


class _TicTacToe(_Grid):
    title = "tic-tac-toe"
    board = (
        "a 3x3 grid, rows and columns indexed 0-2, (0,0) is the top-left cell; players take turns marking "
        "an empty cell; three of one mark in a row, column or diagonal wins; a full grid without a line is "
        "a draw. In the game state '_' is an empty cell."
    )

    def move_form(self, mark: str) -> str:
        return f"<{mark}(row,column)>"

    def action(self, state, player: int, action: int) -> str:
        return f"c{action}" if self.compact else f"<{self.marks[player]}({action // 3},{action % 3})>"

    def example_for(self, player: int) -> str:
        return f"<{self.marks[player]}(0,0)>"


class _ConnectFour(_Grid):
    title = "Connect Four"
    board = (
        "a grid of 6 rows and 7 columns (0-6, left to right), shown top row first; a move drops your mark "
        "into a column, where it falls to the lowest empty cell; four of one mark in a row, column or "
        "diagonal wins; a full grid is a draw. '_' is an empty cell."
    )

    def move_form(self, mark: str) -> str:
        return "<col k>"

    def action(self, state, player: int, action: int) -> str:
        return f"c{action}" if self.compact else f"<col {action}>"

    def example_for(self, player: int) -> str:
        return "<col 3>"


class _Poker(_Render):
    """Kuhn and Leduc poker: moves as betting words, the state as cards, chips and bets."""

    state_label = "HAND"
    two_players = True
    ranks = "JQK"

    def words(self, state) -> Dict[str, str]:
        """pyspiel action string -> betting word, given whether the player faces a bet."""
        raise NotImplementedError

    def action(self, state, player: int, action: int) -> str:
        word = self.words(state)[state.action_to_string(player, action)]
        return word if self.compact else f"<{word}>"

    def example_for(self, player: int) -> str:
        return "<check>"

    def cards(self, state, player: int) -> Tuple[str, Optional[str]]:
        """Own card and the public card (``None`` if none) as rank letters."""
        raise NotImplementedError

    def chips(self, state) -> List[int]:
        """Chips each player has put in the pot."""
        raise NotImplementedError

    def view(self, state, player: int, log) -> str:
        own, public = self.cards(state, player)
        chips = self.chips(state)
        text = f"Your card: {own}."
        if public is not None:
            text += f" Public card: {public}."
        others = ", ".join(f"player_{i} {c}" for i, c in enumerate(chips) if i != player)
        text += f" Chips in the pot: you {chips[player]}, {others} (pot {sum(chips)})."
        if log:  # the betting sequence is part of the state (needed with history="last")
            text += (
                "\nBetting so far: "
                + ", ".join("| new card |" if who == DEALER else f"{who} {move}" for who, move in log)
                + "."
            )
        return text

    def compact_view(self, state, player: int, log) -> str:
        own, public = self.cards(state, player)
        moves = ["/" if who == DEALER else text for who, text in log]
        return " ".join([own] + ([public] if public is not None else []) + moves)


class _Kuhn(_Poker):
    def rules(self, player: int) -> str:
        return (
            f"You are playing Kuhn poker as player_{player}; the other player is player_{1 - player}. "
            f"GAME RULES: a deck of three cards J < Q < K; each player antes 1 chip and gets one private "
            f"card. player_0 acts first: check or bet 1 chip. Facing a bet you call (match it) or fold "
            f"(give up the pot). After check-check or a call, the higher card wins the pot. Your reward is "
            f"the chips you win or lose."
        )

    def words(self, state) -> Dict[str, str]:
        facing = 1 in state.history()[2:]  # history = the two deals, then 0 pass / 1 bet
        return {"Pass": "fold" if facing else "check", "Bet": "call" if facing else "bet"}

    def cards(self, state, player: int):
        return self.ranks[state.history()[player]], None

    def chips(self, state) -> List[int]:
        chips = [1, 1]
        for k, a in enumerate(state.history()[2:]):
            chips[k % 2] += a  # players alternate from player_0; a bet adds 1 chip
        return chips


class _Leduc(_Poker):
    _FIELD = re.compile(r"\[(\w+): ([^\]]*)\]")

    def rules(self, player: int) -> str:
        return (
            f"You are playing Leduc poker as player_{player}; the other player is player_{1 - player}. "
            f"GAME RULES: a deck of six cards, two each of J < Q < K; each player antes 1 chip and gets one "
            f"private card. Two betting rounds, player_0 first in each; bets and raises are 2 chips in "
            f"round 1 and 4 in round 2, at most two per round. You may check or bet when nobody has bet, "
            f"and fold, call or raise when facing a bet. After round 1 one public card is shown. At the "
            f"showdown a card that pairs the public card wins, else the higher card; equal cards split "
            f"the pot. Your reward is the chips you win or lose."
        )

    def words(self, state) -> Dict[str, str]:
        facing = 0 in state.legal_actions()  # OpenSpiel's Leduc offers Fold only when facing a bet
        return {"Fold": "fold", "Call": "call" if facing else "check", "Raise": "raise" if facing else "bet"}

    def cards(self, state, player: int):
        fields = dict(self._FIELD.findall(state.observation_string(player)))
        public = fields.get("Public")
        # Leduc cards 0..5: rank = card // 2 (J J Q Q K K)
        return self.ranks[int(fields["Private"]) // 2], (self.ranks[int(public) // 2] if public else None)

    def chips(self, state) -> List[int]:
        fields = dict(self._FIELD.findall(state.observation_string(0)))  # chips are public: any view
        return [int(c) for c in fields["Ante"].split()]


class _Hanabi(_Render):
    """Hanabi: pyspiel's observation string; moves ``<Play 0>``, ``<Reveal player +1 color R>``."""

    _REVEAL = re.compile(r"Reveal player \+(\d+) (color|rank) (\w+)")

    def rules(self, player: int) -> str:
        p = self.game.get_parameters()
        colors = HANABI_COLORS[: p.get("colors", 5)]
        return (
            f"You are playing Hanabi (a cooperative card game) as player_{player} with "
            f"{self.game.num_players() - 1} partner(s). GAME RULES: cards have a colour ({', '.join(colors)}) "
            f"and a rank (1-{p.get('ranks', 5)}); you see your partners' cards but not your own (XX). On "
            f"your turn you play a card, discard a card (regains an information token) or reveal to a "
            f"partner all their cards of one colour or rank (costs an information token; player +1 is the "
            f"next player). A played card must be the next rank of its colour's firework, else the team "
            f"loses a life token. The team scores the sum of the firework heights; losing all life tokens "
            f"scores 0. Information tokens: {p.get('max_information_tokens', 8)}, life tokens: "
            f"{p.get('max_life_tokens', 3)}. Everybody gets the team score."
        )

    def action(self, state, player: int, action: int) -> str:
        text = state.action_to_string(player, action).strip("()")
        if not self.compact:
            return f"<{text}>"
        kind, _, rest = text.partition(" ")
        reveal = self._REVEAL.fullmatch(text)
        if reveal:
            offset, what, value = reveal.groups()
            who = f"+{offset}" if self.game.num_players() > 2 else ""
            return f"{who}{what[0]}{value}"  # e.g. cR, r1 ("+2cR" with more players)
        return f"{kind[0].lower()}{rest}"  # p0, d1

    def example_for(self, player: int) -> str:
        return "<Play 0>"


_RENDERS = {
    "tic_tac_toe": _TicTacToe,
    "connect_four": _ConnectFour,
    "kuhn_poker": _Kuhn,
    "leduc_poker": _Leduc,
    "hanabi": _Hanabi,
}


# ---------------------------------------------------------------------------- env
class OpenSpielGame(TextEnv):
    """A turn-based OpenSpiel game played in text by ``player_0``, ``player_1``, ...

    Args:
        game: a scenario (``tic_tac_toe``, ``kuhn_poker``, ``leduc_poker``,
            ``connect_four``, ``mini_hanabi``) or any pyspiel game name.
        params: pyspiel game parameters (override the scenario's).
        draw_reward: reward of every seat when a zero-sum game ends 0 for all
            (MARS: 0.1).
        **kwargs: :class:`~marl.text.TextEnv` options (e.g. ``format_reward``,
            MARS: 0.05, default 0); here ``invalid_action`` defaults to
            ``"forfeit"`` and ``invalid_penalty`` to -11 (MARS).

    Natural prompts (MARS-like): the system prompt gives the rules, the seat
    and the answer format (one legal action, optionally in
    ``<answer>...</answer>``); each turn shows the state from the player's
    view, the others' moves since its last turn and the legal actions.
    ``prompt_style="compact"`` drops the system prompt and writes the state
    in a few words (tic-tac-toe: the 9 cells as ``me`` / ``opp`` / ``_``)
    and every move as one word (tic-tac-toe ``c0``..``c8``, cell = 3*row + col).

    Episode metrics: ``moves``, ``forfeit``; zero-sum games ``win_player_i``,
    ``loss_player_i`` and ``draw`` (0/1; a forfeit is a loss of the offender);
    cooperative games ``score`` (the team's return).

    Raises:
        MarlError: pyspiel missing, unknown game, a game that is not turn-based
            or has no observation strings, or a bad TextEnv option.
    """

    family = "openspiel"
    params = {"game": Param("text"), "params": Param("table", optional=True), "draw_reward": Param("number")}

    def __init__(
        self, game: str = "tic_tac_toe", params: Optional[Dict[str, Any]] = None, draw_reward: float = 0.1, **kwargs
    ):
        pyspiel = load_pyspiel()
        name, base_params = SCENARIOS.get(game, (game, {}))
        if game not in SCENARIOS and game not in pyspiel.registered_names():
            names = list(SCENARIOS) + list(pyspiel.registered_names())
            raise MarlError(
                f"Unknown OpenSpiel game '{game}'.{closest(game, names)} Valid choices: the scenarios "
                f"{', '.join(SCENARIOS)} or any name in pyspiel.registered_names()."
            )
        self.game = _load_game(pyspiel, game, name, {**base_params, **(params or {})})
        gtype = self.game.get_type()
        if gtype.dynamics != pyspiel.GameType.Dynamics.SEQUENTIAL:
            raise MarlError(
                f"OpenSpiel game '{game}' is not turn-based ({gtype.dynamics}); only sequential games are supported."
            )
        utility = pyspiel.GameType.Utility
        self.zero_sum = gtype.utility in (utility.ZERO_SUM, utility.CONSTANT_SUM)
        self.kind = "competitive" if self.zero_sum else "cooperative" if gtype.utility == utility.IDENTICAL else "mixed"
        self.players = [f"player_{i}" for i in range(self.game.num_players())]
        self.max_decisions = self.game.max_game_length()
        self.draw_reward = float(draw_reward)
        kwargs.setdefault("invalid_action", "forfeit")
        kwargs.setdefault("invalid_penalty", -11.0)
        super().__init__(game, **kwargs)
        writer = _RENDERS.get(name, _Render)
        if writer.two_players and self.game.num_players() != 2:
            writer = _Render  # e.g. 3-player Kuhn: pyspiel's own strings
        self.writer = writer(self.game, name, self.compact)
        self._initial_state()  # before the first reset: a state to inspect, no chance drawn

    # ------------------------------------------------------------------ game
    def _initial_state(self) -> None:
        self.state = self.game.new_initial_state()
        self.log: List[Tuple[str, str]] = []  # (agent or DEALER, move text): decisions, mid-game chance events
        self._legal: Optional[Dict[str, int]] = None  # cache of legal_map()

    def new_game(self) -> None:
        self._initial_state()
        # Chance events draw from a stream of their own: the LLM runner resets bots with the
        # game's seed (algos/llm/runner.py), so cards drawn from self.rng would use the same
        # random numbers as a bot's sampling and tie its moves to the hidden cards (measured:
        # random vs random in Kuhn poker gave player_1 -0.21 chips per game, exact -0.125).
        self._chance = random.Random(self.rng.getrandbits(64))
        self._sample_chance()

    def set_history(self, history: Sequence[int]) -> None:
        """Put the game in the position reached by the pyspiel actions ``history`` (chance
        outcomes included, as ``state.history()`` lists them), with the move log a played game
        has, so that :meth:`observe` writes that position (e.g. to read a policy's move
        probabilities at every information state).

        Raises:
            MarlError: a player's action that is not legal where it is applied (an impossible
                chance outcome raises pyspiel's own error).
        """
        self._initial_state()
        self.done = False
        for action in history:
            if self.state.is_chance_node():
                if self.log:
                    self.log.append((DEALER, "deal"))
                self.state.apply_action(action)
                continue
            agent = self.players[self.state.current_player()]
            self.log.append((agent, self.action_text(action)))
            self.state.apply_action(action)
            self._legal = None
        self.done = self.state.is_terminal()

    def _sample_chance(self) -> None:
        while self.state.is_chance_node():
            actions, probs = zip(*self.state.chance_outcomes())
            if self.log:
                self.log.append((DEALER, "deal"))
            self.state.apply_action(self._chance.choices(actions, weights=probs)[0])

    def to_act(self) -> List[str]:
        if self.done or self.state.is_terminal():
            return []
        return [self.players[self.state.current_player()]]

    def legal_map(self) -> Dict[str, int]:
        """Legal moves of the player to move: text -> pyspiel action id.

        If two moves would read the same, every text gets ``#<action id>`` appended.
        """
        if self._legal is None:
            player = self.state.current_player()
            ids = self.state.legal_actions()
            texts = [self.writer.action(self.state, player, a) for a in ids]
            if len({_norm(t) for t in texts}) < len(texts):  # generic games may repeat a string
                texts = [f"{t}#{a}" for t, a in zip(texts, ids)]
            self._legal = dict(zip(texts, ids))
        return self._legal

    def legal_actions(self, agent: str) -> List[str]:
        return list(self.legal_map()) if agent in self.to_act() else []

    def action_text(self, action: int) -> str:
        """The text of pyspiel action ``action`` of the player to move.

        Raises:
            MarlError: ``action`` is not legal now.
        """
        for text, a in self.legal_map().items():
            if a == action:
                return text
        raise MarlError(f"Action {action} is not legal now; legal ids: {sorted(self.legal_map().values())}.")

    def apply(self, moves: Dict[str, str]) -> Dict[str, float]:
        ((agent, text),) = moves.items()
        self.state.apply_action(self.legal_map()[text])
        self.log.append((agent, text))
        self._legal = None
        self._sample_chance()
        self.done = self.state.is_terminal()
        return self._final_rewards() if self.done else {}

    def _final_rewards(self) -> Dict[str, float]:
        returns = self.state.returns()
        if self.zero_sum and not any(returns):
            return {a: self.draw_reward for a in self.players}
        return dict(zip(self.players, returns))

    # ------------------------------------------------------------------ prompts
    def _invalid_rule(self) -> str:
        if self.invalid_action == "forfeit":
            return "An invalid or illegal answer loses the game at once."
        if self.invalid_action == "retry":
            return "After an invalid or illegal answer you are asked again, with a penalty."
        return "An invalid or illegal answer is replaced by a random legal action, with a penalty."

    def system_prompt(self, agent: str) -> str:
        if self.compact:
            return ""
        player = self.players.index(agent)
        example = self.writer.example_for(player)
        shown = f", e.g. <answer>{example}</answer>" if example else ""
        return (
            f"{self.writer.rules(player)}\nRESPONSE INSTRUCTIONS: make the best decision to win. Think if you "
            f"want, then give exactly one legal action inside <answer></answer>{shown}. "
            f"{self._invalid_rule()}"
        )

    def _news(self, agent: str) -> List[Tuple[str, str]]:
        """Others' moves since ``agent``'s last move (all moves if it has not moved)."""
        mine = [k for k, (who, _) in enumerate(self.log) if who == agent]
        start = mine[-1] + 1 if mine else 0
        return [(who, text) for who, text in self.log[start:] if who not in (agent, DEALER)]

    def observe(self, agent: str) -> str:
        player = self.players.index(agent)
        if self.compact:
            return self.writer.compact_view(self.state, player, self.log)
        news = self._news(agent)
        moved = "; ".join(f"{who} played {text}" for who, text in news)
        lines = [f"{self.writer.state_label}:", self.writer.view(self.state, player, self.log)]
        lines.append(f"Last moves: {moved}." if news else "You move first." if not self.log else "")
        lines.append("LEGAL ACTIONS: " + ", ".join(self.legal_actions(agent)))
        return "\n".join(line for line in lines if line)

    # ------------------------------------------------------------------ metrics
    def game_metrics(self) -> Dict[str, float]:
        forfeit = self.done and not self.state.is_terminal()
        out = {"moves": float(sum(who != DEALER for who, _ in self.log)), "forfeit": float(forfeit)}
        if self.kind == "cooperative":
            out["score"] = float(self.state.returns()[0])
        if not self.zero_sum:
            return out
        if forfeit:  # the offender is the player who was to move
            offender = self.state.current_player()
            returns = [-1.0 if i == offender else 1.0 for i in range(len(self.players))]
        else:
            returns = self.state.returns() if self.state.is_terminal() else [0.0] * len(self.players)
        for a, r in zip(self.players, returns):
            out[f"win_{a}"] = float(r > 0)
            out[f"loss_{a}"] = float(r < 0)
        out["draw"] = float(self.state.is_terminal() and not any(returns))
        return out

    def bots(self) -> Dict[str, Any]:
        """Fixed opponents of this game: ``random``, ``mcts`` and, where CFR solves the game
        (Kuhn and Leduc poker: :func:`~marl.envs.text.openspiel_bots.cfr_unsupported`), ``cfr``.

        An instance method (not a class method as in :class:`~marl.text.TextEnv`): which bots
        exist depends on the pyspiel game this env was built with.
        """
        out = {"random": RandomBot, "mcts": MCTSBot}
        if cfr_unsupported(self.game) is None:
            out["cfr"] = CFRBot
        return out


def _load_game(pyspiel, game: str, name: str, params: Dict[str, Any]):
    """``pyspiel.load_game(name, params)`` with the parameters checked against the game's own
    (names and types of ``parameter_specification``) and OpenSpiel's errors as :class:`MarlError`.

    Raises:
        MarlError: an unknown parameter, a value of the wrong type, or one OpenSpiel refuses
            (e.g. a player count outside the game's range).
    """
    owner = f"text game 'openspiel:{game}'"
    spec = next((g.parameter_specification for g in pyspiel.registered_games() if g.short_name == name), None)
    if spec is not None:
        check_library_params(owner, "params", params, dict(spec))
    try:
        return pyspiel.load_game(name, params)
    except pyspiel.SpielError as e:
        raise MarlError(f"{owner}: OpenSpiel refused params={params!r}: {e}") from e


def make(scenario: Optional[str] = None, **kwargs) -> OpenSpielGame:
    """``make_env("openspiel", "tic_tac_toe")``: a scenario or any pyspiel game name (default tic-tac-toe)."""
    return OpenSpielGame(game=scenario or kwargs.pop("game", "tic_tac_toe"), **kwargs)


def scenarios() -> List[str]:
    return list(SCENARIOS)
