"""Text games in the competitive evaluation path (:mod:`marl.competitive`, ``docs/competitive.md``).

A text game plays whole conversations, so it cannot step as a batched tensor env.
:class:`TextGameRunner` is the game runner of every :class:`~marl.text.TextEnv` (its
``game_runner`` attribute names this class):
``versus``, ``cross_play``, the ratings, ``marl league`` and ``marl eval <run>
opponent=<bot>`` then take trained text policies (:class:`~marl.algos.llm.selfplay.TextPolicy`,
from ``marl.load``) and the game's own bots (``env.bots()``: ``random``, ``always_defect``,
...) exactly as they take tensor policies and :func:`marl.competitive.make_bot` bots. A
game's seats are its players (``player_0``, ``player_1``); outcomes come from the players'
returns (``return_<seat>`` of :meth:`~marl.text.TextEnv.episode_metrics`).

All games of one seating are played at once: every decision round, the replies of one
policy's seats in all waiting games are generated as one batch
(:func:`marl.algos.llm.runner.play`).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any, Dict, List, Mapping

from marl.errors import MarlError, unknown_choice
from marl.text import TextEnv


@dataclass(frozen=True)
class GameBot:
    """A bot of the text game by name; each game gets its own instance (bots keep per-game state)."""

    name: str

    def reset(self) -> None:
        """Nothing to forget: instances are made per game."""


@dataclass(eq=False)
class _Seat:
    """One policy's LM in the seating: the frozen-model seat kind of :func:`runner.play`
    (requests batch by object identity, so one instance per policy and module)."""

    lm: Any


class TextGameRunner:
    """The game runner of text games (see the module docstring)."""

    def seats(self, env: TextEnv) -> List[str]:
        return list(env.players)

    def bot(self, env: TextEnv, name: str, seed: int = 0) -> GameBot:
        """The game's bot ``name``.

        Raises:
            MarlError: ``name`` is not a bot of the game (the message lists them).
        """
        bots = env.bots()
        if name not in bots:
            raise unknown_choice("bot", name, list(bots))
        return GameBot(name)

    def check_player(self, player: Any, env: TextEnv) -> None:
        """Raise :class:`MarlError` unless ``player`` is a text policy or a bot of the game."""
        from marl.algos.llm.selfplay import TextPolicy

        if isinstance(player, GameBot):
            self.bot(env, player.name)
        elif not isinstance(player, TextPolicy):
            raise MarlError(
                f"{env!r} is a text game: its players are text policies (marl.load of an LLM run) or "
                f"its bots {list(env.bots())}; got {type(player).__name__}."
            )

    def play(self, env: TextEnv, seating: Mapping[str, Any], episodes: int, seed: int = 0) -> List[List[float]]:
        """Play ``episodes`` games of copies of ``env`` with ``seating`` (seat -> text policy or
        :class:`GameBot`); returns each game's returns in the order of :meth:`seats`.

        Policies play at their evaluation temperature; all policies of one seating must share
        one tokenizer (one generator serves every batch).

        Raises:
            MarlError: a player that is neither a text policy nor a bot of the game, or policies
                whose tokenizers differ in vocabulary size.
        """
        from marl.algos.llm.runner import play

        for p in seating.values():
            self.check_player(p, env)
        policies = [p for p in seating.values() if not isinstance(p, GameBot)]
        generator = _shared_generator(policies)
        seats_lm: Dict[tuple, _Seat] = {}
        tables = []
        for g in range(episodes):
            table = {}
            for seat, p in seating.items():
                if isinstance(p, GameBot):
                    table[seat] = ("bot", env.bots()[p.name](seed=seed * 1_000_003 + g))
                else:
                    key = (id(p), p.agent_to_module[seat])
                    seats_lm.setdefault(key, _Seat(p.lms[key[1]]))
                    table[seat] = ("pool", seats_lm[key])
            tables.append({"opponent": "league", "table": table})
        games = [_fresh(env) for _ in range(episodes)]
        seeds = [10**9 + 7 * (seed * 1_000_003 + g) for g in range(episodes)]
        saved = generator.temperature if generator is not None else None
        try:
            if generator is not None:
                generator.temperature = policies[0].temperature
            play(games, tables, seeds, {}, generator)
        finally:
            if generator is not None:
                generator.temperature = saved
        order = self.seats(env)
        return [[game.episode_metrics()[f"return_{s}"] for s in order] for game in games]


def _fresh(env: TextEnv) -> TextEnv:
    """A new game like ``env``: rebuilt from its spec (``make_env`` kwargs), else a deep copy."""
    return env.spec.make() if env.spec is not None else copy.deepcopy(env)


def _shared_generator(policies: List[Any]) -> Any:
    """The generator of the first policy (``None`` for bots only), after checking that every
    policy's tokenizer has its vocabulary size."""
    if not policies:
        return None
    sizes = {len(p.generator.tok) for p in policies}
    if len(sizes) > 1:
        raise MarlError(
            f"Text policies with different tokenizers (vocabulary sizes {sorted(sizes)}) cannot play "
            f"one another in one batch; compare checkpoints of runs that share a tokenizer."
        )
    return policies[0].generator
