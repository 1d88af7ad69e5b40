"""Trust-and-Split: an iterated coin-splitting game with private values and cheap talk.

Rules: the TAS-RPS game of Piche et al. 2025 (arXiv 2511.19405; its official
code, "AdAlignLLM" below) and a lite variant of ours with coin-flip values
(``docs/text_games.md``): each of ``rounds`` rounds splits ``coins`` = 10
coins. Every round each player gets a private per-coin value, 10 (high) or 1
(low):

* ``values="rps"``: the two players get distinct rock / paper / scissors
  hands; the winner values coins at 10, the loser at 1. Each sees only its own
  hand, so it learns its value only from the co-player's message (the
  ``tas_rps`` game);
* ``values="coin"``: independent fair coin flips, each seeing its own value
  (our lite variant; both may be high or both low).

Then (``messages=True``) both send one free-text message of at most
``max_message_chars`` characters at the same time, shown to the other, and
then both claim ``x_i`` in 0..10 coins at the same time. Player ``i`` gets
``q_i = 10 * x_i / max(10, x_0 + x_1)`` coins (proportional when the claims
exceed 10, as claimed otherwise) and ``reward_i = q_i * value_i`` points. After
each round both see the other's hand / value, claim and coins.

``messages=False`` is the No-Press Split: no message phase and, by default,
public values (``public_values``). Per round: greedy vs greedy (both claim 10)
gives 5 coins each, collective 55 with ``rps`` values (and 55 in expectation
with ``coin``); the welfare optimum (low claims 0, high 10) gives 100.

AdAlignLLM differences: its messages alternate (one player starts, the other
answers; the starter alternates each round); here they are simultaneous.
"""

from __future__ import annotations

import re
from typing import Dict, List, Optional

from marl.env import unknown_choice
from marl.text import Bot, RandomBot, TextEnv
from marl.text_params import Param

HANDS = ("rock", "paper", "scissors")
BEATS = {"rock": "scissors", "paper": "rock", "scissors": "paper"}  # winner -> loser
VALUES = ("rps", "coin")
HIGH, LOW = 10.0, 1.0
MESSAGE, SPLIT = "message", "split"
SCENARIOS = {"rps": {}, "coin": {"values": "coin"}, "no_press": {"messages": False}}
_MESSAGE_TAG = re.compile(r"<message>(.*?)</message>", re.S | re.I)


def split_payoffs(claims: Dict[str, int], values: Dict[str, float], coins: int = 10) -> Dict[str, Dict[str, float]]:
    """Coins and points of one Trust-and-Split round (AdAlignLLM ``compute_tas_style_rewards``).

    Args:
        claims: player -> coins claimed (0..coins).
        values: player -> per-coin value.
        coins: coins on the table.
    Returns:
        ``{"coins": {player: q_i}, "points": {player: q_i * value_i}}`` with
        ``q_i = coins * x_i / max(coins, sum of claims)``.
    """
    denom = max(coins, sum(claims.values()))
    got = {a: coins * x / denom for a, x in claims.items()}
    return {"coins": got, "points": {a: q * values[a] for a, q in got.items()}}


class TrustAndSplit(TextEnv):
    """Trust-and-Split between ``player_0`` and ``player_1`` (rules in the module docstring).

    Args:
        values: ``"rps"`` (rock-paper-scissors hands decide who is high) or
            ``"coin"`` (independent coin flips).
        rounds: rounds per game (10 in AdAlignLLM).
        messages: one simultaneous message each before the claims; ``False`` is
            the No-Press Split.
        public_values: show the co-player's hand / value before the claims
            (default: ``not messages``, as AdAlignLLM's no-press game).
        max_message_chars: messages are cut to this length (AdAlignLLM: 500).
        coins: coins per round.
        **kwargs: :class:`~marl.text.TextEnv` options. Messages are free text
            and never invalid; a claim that names no legal ``<claim k>``
            counts as ``<claim 0>`` (``invalid_action="penalty"``, penalty 0,
            by default). ``invalid_rate`` counts claims only.

    Actions: message phase, any text (``legal_actions`` is ``[]``; :meth:`parse`
    takes the last ``<message>...</message>`` block if present, else the whole
    reply, trimmed and cut to ``max_message_chars``); split phase ``<claim k>``
    (compact ``kK``, e.g. ``k7``).

    Episode metrics: ``collective_payoff`` (points of both per round),
    ``reward_per_round_player_i``, ``high_share`` (share of the coins the
    high-value player got, over rounds with one high and one low player),
    ``claims_mean``, ``claims_mean_high`` / ``claims_mean_low``.

    Raises:
        MarlError: unknown ``values``; ``rounds``, ``coins`` or ``max_message_chars`` not a
            whole number >= 1, ``messages`` / ``public_values`` not a bool (the rules of
            :attr:`params`, checked by :meth:`~marl.text.TextEnv.check_params`).
    """

    family = "trust_and_split"
    simultaneous = True
    kind = "mixed"
    params = {
        "rounds": Param("whole", low=1),
        "messages": Param("flag"),
        "public_values": Param("flag", optional=True),
        "max_message_chars": Param("whole", low=1),
        "coins": Param("whole", low=1),
    }

    def __init__(
        self,
        values: str = "rps",
        rounds: int = 10,
        messages: bool = True,
        public_values: Optional[bool] = None,
        max_message_chars: int = 500,
        coins: int = 10,
        scenario: Optional[str] = None,
        **kwargs,
    ):
        if values not in VALUES:
            raise unknown_choice("Trust-and-Split values", values, VALUES)
        self.values_kind = values
        self.rounds = rounds
        self.coins = coins
        self.messages_on = messages
        self.public_values = (not self.messages_on) if public_values is None else public_values
        self.max_message_chars = max_message_chars
        # a reply is read up to its last "<message>...</message>" block, cut to max_message_chars
        self.free_text_chars = max_message_chars + len("<message></message>")
        self.max_decisions = self.rounds * (2 if self.messages_on else 1)
        super().__init__(scenario or values, **kwargs)

    # ------------------------------------------------------------------ game
    def new_game(self) -> None:
        self.log: List[Dict] = []  # finished rounds: hands, values, messages, claims, coins, points
        self.n_messages = 0
        self._new_round()

    def _new_round(self) -> None:
        p0, p1 = self.players
        if self.values_kind == "rps":
            h0, h1 = self.rng.sample(HANDS, 2)
            self.hands: Dict[str, Optional[str]] = {p0: h0, p1: h1}
            self.values = {p0: HIGH if BEATS[h0] == h1 else LOW, p1: HIGH if BEATS[h1] == h0 else LOW}
        else:
            self.hands = {p0: None, p1: None}
            self.values = {a: self.rng.choice((HIGH, LOW)) for a in self.players}
        self.messages: Dict[str, str] = {}
        self.phase = MESSAGE if self.messages_on else SPLIT

    def claim_text(self, k: int) -> str:
        """The move that claims ``k`` coins (``<claim k>``, compact ``kK``)."""
        return f"k{k}" if self.compact else f"<claim {k}>"

    def legal_actions(self, agent: str) -> List[str]:
        # The message phase has no move list: any text is a message.
        return [] if self.phase == MESSAGE else [self.claim_text(k) for k in range(self.coins + 1)]

    def parse(self, agent: str, text: str) -> Optional[str]:
        """A claim in the split phase (:meth:`TextEnv.parse`); in the message phase the message body (never None)."""
        if self.phase != MESSAGE:
            return super().parse(agent, text)
        tagged = _MESSAGE_TAG.findall(text)
        return (tagged[-1] if tagged else text).strip()[: self.max_message_chars]

    def default_action(self, agent: str) -> str:
        return self.claim_text(0)  # an unreadable claim takes nothing

    def apply(self, moves: Dict[str, str]) -> Dict[str, float]:
        """Message phase: store the messages (no reward); split phase: pay the claims and start the next round."""
        if self.phase == MESSAGE:
            self.messages = dict(moves)
            self.n_messages += len(moves)
            self.phase = SPLIT
            return {}
        claims = {a: self.legal_actions(a).index(m) for a, m in moves.items()}
        result = split_payoffs(claims, self.values, self.coins)
        self.log.append(
            {
                "hands": dict(self.hands),
                "values": dict(self.values),
                "messages": dict(self.messages),
                "claims": claims,
                **result,
            }
        )
        self.done = len(self.log) >= self.rounds
        if not self.done:
            self._new_round()
        return result["points"]

    # ------------------------------------------------------------------ prompts
    def private_text(self, agent: str, who: str = "Your") -> str:
        """``agent``'s private information this round, e.g. "Your hand is rock." / "Your value per coin is 10."."""
        if self.values_kind == "rps":
            return f"{who} hand is {self.hands[agent]}."
        return f"{who} value per coin is {self.values[agent]:g}."

    @staticmethod
    def _reveal(info: Dict, agent: str) -> str:
        """A player's hand and value as shown after a round or with public values: "paper (value 10)"."""
        hand, value = info["hands"][agent], f"value {info['values'][agent]:g}"
        return f"{hand} ({value})" if hand else value

    @staticmethod
    def _token(info: Dict, agent: str) -> str:
        """Compact form of a player's private information: its hand, or ``v10`` / ``v1``."""
        hand = info["hands"][agent]
        return hand if hand else f"v{info['values'][agent]:g}"

    def system_prompt(self, agent: str) -> str:
        if self.compact:
            return ""
        c = self.coins
        if self.values_kind == "rps":
            value_rule = (
                "Each round both players get different rock, paper or scissors hands; rock beats "
                "scissors, scissors beats paper, paper beats rock. The player with the winning hand values "
                f"each coin at {HIGH:g}, the other at {LOW:g}."
            )
        else:
            value_rule = (
                f"Each round each player's value per coin is {HIGH:g} or {LOW:g}, by an independent fair coin flip."
            )
        seen = (
            "You see both players' hands and values."
            if self.public_values
            else "You see only your own " + ("hand." if self.values_kind == "rps" else "value.")
        )
        talk = (
            f"Each round you first both send one message (at most {self.max_message_chars} characters) at the "
            f"same time, then see the other's message. "
            if self.messages_on
            else ""
        )
        return (
            f"You are {agent} in an iterated game of {self.rounds} rounds with {self.other(agent)}. Each round "
            f"{c} coins are split between you. {value_rule} {seen} {talk}Then you both claim a number of "
            f"coins from 0 to {c} at the same time. If the claims add up to at most {c}, each gets its claim; "
            f"otherwise the coins are shared in proportion to the claims. Your points in a round are your "
            f"coins times your value per coin. Your goal is to get as many points as possible over all rounds. "
            f"Claim with <claim k>, e.g. <claim 5>; an unreadable claim counts as <claim 0>."
        )

    def _last_round(self, agent: str) -> List[str]:
        if not self.log:
            return []
        last, o = self.log[-1], self.other(agent)
        if self.compact:
            return ["last", self._token(last, o), f"k{last['claims'][o]}"]
        return [
            f"Last round: {o} had {self._reveal(last, o)}, claimed {last['claims'][o]} and got "
            f"{last['coins'][o]:.2f} coins; you had {self._reveal(last, agent)}, claimed "
            f"{last['claims'][agent]} and got {last['coins'][agent]:.2f} coins = "
            f"{last['points'][agent]:.2f} points."
        ]

    def observe(self, agent: str) -> str:
        now = {"hands": self.hands, "values": self.values}
        o = self.other(agent)
        if self.compact:
            parts = self._last_round(agent) + [self._token(now, agent)]
            if self.public_values:
                parts += ["opp", self._token(now, o)]
            if self.phase == SPLIT and self.messages_on:
                parts += ["msg", self.messages[o]]
            return " ".join(parts)
        known = (
            f"You have {self._reveal(now, agent)}; {o} has {self._reveal(now, o)}."
            if self.public_values
            else self.private_text(agent)
        )
        lines = self._last_round(agent) + [f"Round {len(self.log) + 1} of {self.rounds}. {known}"]
        if self.phase == MESSAGE:
            lines.append(f"Send your message now (at most {self.max_message_chars} characters).")
        else:
            if self.messages_on:
                lines.append(f'{o} said: "{self.messages[o]}"')
            lines.append(f"Submit your claim as <claim k> with k from 0 to {self.coins}.")
        return "\n".join(lines)

    # ------------------------------------------------------------------ metrics
    def game_metrics(self) -> Dict[str, float]:
        T = len(self.log)
        if T == 0:
            return {}
        out = {f"reward_per_round_{a}": sum(r["points"][a] for r in self.log) / T for a in self.players}
        out["collective_payoff"] = sum(sum(r["points"].values()) for r in self.log) / T
        claims = [(r["claims"][a], r["values"][a]) for r in self.log for a in self.players]
        out["claims_mean"] = sum(x for x, _ in claims) / len(claims)
        for label, v in (("high", HIGH), ("low", LOW)):
            xs = [x for x, val in claims if val == v]
            if xs:
                out[f"claims_mean_{label}"] = sum(xs) / len(xs)
        mixed = [r for r in self.log if len(set(r["values"].values())) == 2]
        if mixed:
            out["high_share"] = sum(max(r["coins"].items(), key=lambda kv: r["values"][kv[0]])[1] for r in mixed) / (
                self.coins * len(mixed)
            )
        return out

    @classmethod
    def bots(cls):
        return {"random": RandomSplitter, "greedy": Greedy, "fair": Fair, "truthful_cooperator": TruthfulCooperator}


# ---------------------------------------------------------------------------- bots
class _Splitter(Bot):
    """A Trust-and-Split bot: a message in the message phase, a claim in the split phase."""

    def message(self, env: TrustAndSplit, agent: str) -> str:
        return ""

    def claim(self, env: TrustAndSplit, agent: str) -> int:
        raise NotImplementedError

    def act(self, env: TrustAndSplit, agent: str) -> str:
        if env.phase == MESSAGE:
            return self.message(env, agent)
        return env.claim_text(self.claim(env, agent))


class RandomSplitter(RandomBot):
    """Claims a uniformly random 0..coins; says nothing (:class:`~marl.text.RandomBot`)."""


class Greedy(_Splitter):
    """Always claims every coin (AdAlignLLM's hard-coded greedy negotiator)."""

    name = "greedy"

    def message(self, env: TrustAndSplit, agent: str) -> str:
        return "I will take all the coins."

    def claim(self, env: TrustAndSplit, agent: str) -> int:
        return env.coins


class Fair(_Splitter):
    """Always claims half of the coins (rounded down)."""

    name = "fair"

    def message(self, env: TrustAndSplit, agent: str) -> str:
        return "Let us split the coins evenly."

    def claim(self, env: TrustAndSplit, agent: str) -> int:
        return env.coins // 2


class TruthfulCooperator(_Splitter):
    """Tells its hand / value and claims every coin when its value is high, none when low.

    It reads its own value from the env (even with ``values="rps"``, where a
    player would have to learn it from the co-player's hand).
    """

    name = "truthful_cooperator"

    def message(self, env: TrustAndSplit, agent: str) -> str:
        return env.private_text(agent, "My")

    def claim(self, env: TrustAndSplit, agent: str) -> int:
        return env.coins if env.values[agent] == HIGH else 0


def make(scenario: Optional[str] = None, **kwargs) -> TrustAndSplit:
    """``make_env("trust_and_split", "rps" | "coin" | "no_press", rounds=10, ...)`` (default ``rps``).

    Raises:
        MarlError: an unknown scenario.
    """
    scenario = scenario or "rps"
    if scenario not in SCENARIOS:
        raise unknown_choice("Trust-and-Split scenario", scenario, list(SCENARIOS))
    return TrustAndSplit(**{**SCENARIOS[scenario], **kwargs}, scenario=scenario)


def scenarios() -> List[str]:
    return list(SCENARIOS)
