"""Two-player TextArena games as text games (``make_env("textarena", "TicTacToe-v0")``).

TextArena (Guertler et al. 2025, arXiv 2504.11442; ``pip install textarena``,
0.7.x) is a collection of text games written for LLM evaluation. Its API:
``textarena.make(env_id)``, ``env.reset(num_players=2, seed=...)``,
``env.get_observation()`` -> ``(player_id, [(from_id, message, type), ...])``,
``env.step(text)`` -> ``(done, info)``, ``env.close()`` -> ``(rewards, game_info)``.
:class:`TextArenaGame` plays any two-player game of its registry through that
API; the game decides whose turn it is, whether a move is valid and the rewards.

Seats: ``player_0`` is TextArena's player 0 (it moves first in the board
games; TextArena's tic-tac-toe marks it ``O``), ``player_1`` is player 1.

Moves. TextArena gives no list of legal moves. For the games below the
adapter reads them from the game's board, as the game writes them, so
``constrain_actions`` and :func:`marl.text.parse_action` work and the
``random`` bot plays them:

=======================  ==================================  ===================================
env id                   legal moves                         compact state
=======================  ==================================  ===================================
``TicTacToe-v0``         ``[k]``, k = 0..8 an empty cell     the 9 cells ``me`` / ``opp`` / ``_``
``ReverseTicTacToe-v0``  the same (three in a row loses)     the same
``ConnectFour-v0``       ``[col k]``, k a column not full    the 42 cells, top row first
=======================  ==================================  ===================================

(other ids of the same game classes, e.g. ``ConnectFour-v0-large``, use the
same reader; ``ConnectFour-v0-blind`` hides the board, so its compact state is
the game's messages). Every other two-player game is played in free text:
``legal_actions`` is ``[]``, every reply goes to the game (TextArena's
``[...]`` brackets are added when the reply has none, as its
``ActionFormattingWrapper`` does) and the game judges it.

Invalid replies. TextArena re-asks a player once after an invalid move
(with a notice), and a second invalid move in a row loses the game (-1, the
opponent +1). Mapped onto :class:`~marl.text.TextEnv`:

* games with a move list: our parser reads the reply before the game sees it,
  so the game only ever gets legal moves. Defaults ``invalid_action="retry"``,
  ``retries=1`` (one re-ask, as TextArena), ``invalid_penalty=-1`` (its loss
  reward); differences: each bad reply costs ``invalid_penalty`` and at the
  forfeit the opponent gets 0, not +1 (the :class:`~marl.text.TextEnv` rule);
* free-text games: TextArena's own rule applies (its notice is in the next
  prompt); these moves are counted in the metric ``game_invalid_moves``.

Rewards: 0 until the game ends, then TextArena's rewards to every seat (its
two-player games pay +1 / -1, or 0 / 0 for a draw, which pays ``draw_reward``
here): kind ``competitive``, except the scored negotiation games in
:data:`GENERAL_SUM`, whose rewards need not sum to 0 (kind ``mixed``).

Randomness: TextArena games draw from Python's global ``random`` and its
``reset(seed=...)`` reseeds it; here every call into the game runs on the
env's own ``random`` state (seeded from the env's rng), so games are
reproducible and the caller's global ``random`` is left as it was.

Offline: games that need nltk corpora (Wordle, Hangman, Codenames, ...) call
``nltk.download`` when imported; here that call is replaced by one that never
touches the network, and a missing corpus raises :class:`MarlError` naming
it. Games that need an LLM judge over the network (OpenRouter: Debate,
TwentyQuestions, ...) raise :class:`MarlError` with TextArena's message.
"""

from __future__ import annotations

import contextlib
import difflib
import importlib
import inspect
import random
import re
from typing import Any, Dict, Iterator, List, Optional

from marl.env import MarlError
from marl.errors import optional_import
from marl.text import RandomBot, TextEnv
from marl.text_params import Param, check_library_params

INSTALL_HINT = 'pip install textarena (or pip install "marl-rllib[textarena]")'
SCENARIOS = ("TicTacToe-v0", "ReverseTicTacToe-v0", "ConnectFour-v0")  # games with a legal-move reader
GENERAL_SUM = ("UsedCarNegotiationEnv", "ScorableGamesEnv")  # two-player games whose rewards need not sum to 0
GAME, PROMPT, ACTION = "GAME", "PROMPT", "PLAYER_ACTION"  # names of textarena.ObservationType members


def load_textarena():
    """Import ``textarena``.

    Raises:
        MarlError: TextArena is not installed (the message gives the pip command).
    """
    return optional_import("textarena", f"TextArena games need the textarena package: {INSTALL_HINT}.")


def _registry(ta) -> Dict[str, Any]:
    """TextArena's env id -> spec table (``textarena.envs.registration.ENV_REGISTRY``)."""
    return ta.envs.registration.ENV_REGISTRY


@contextlib.contextmanager
def _offline() -> Iterator[None]:
    """Run TextArena code with ``nltk.download`` replaced by a no-op that reports failure.

    Why: TextArena's word games call ``nltk.download`` at import; without a network that call can
    wait on a connection (and with one it writes to the user's nltk folder). A missing corpus then
    shows up as nltk's ``LookupError``, which the callers turn into :class:`MarlError`.
    """
    try:
        import nltk
    except ImportError:
        yield
        return
    saved = nltk.download
    nltk.download = lambda *args, **kwargs: False
    try:
        yield
    finally:
        nltk.download = saved


def _defaults(spec) -> Dict[str, Any]:
    """Keyword arguments of a TextArena env id with their defaults: the env class's ``__init__``
    defaults, overridden by the id's registered ``kwargs`` (the types :func:`check_library_params` checks)."""
    module, _, name = str(spec.entry_point).partition(":")
    try:
        with _offline():  # word games load nltk corpora at import
            cls = getattr(importlib.import_module(module), name)
        sig = inspect.signature(cls.__init__)
    except Exception:  # a game whose module cannot be imported here fails in ta.make, with its own error
        return dict(spec.kwargs)
    out = {k: p.default for k, p in sig.parameters.items() if k != "self" and p.default is not p.empty}
    out.update(spec.kwargs)
    return out


def _unwrap(ta, env):
    """The innermost TextArena env under its wrappers (its ``state`` holds the board and the messages)."""
    while isinstance(env, ta.Wrapper):
        env = env.env
    return env


# ---------------------------------------------------------------------------- game readers
class _Reader:
    """How one TextArena game class is read (generic: free text, the game's own messages).

    Args:
        raw: the unwrapped TextArena env.
    """

    max_decisions = 100  # per seat and game; the readers of known games set the true bound

    def __init__(self, raw):
        self.raw = raw

    def legal(self, pid: int) -> List[str]:
        """Legal moves of TextArena player ``pid`` (who is to move), as text; ``[]``: free text."""
        return []

    def compact(self, pid: int, text: str) -> str:
        """The compact prompt of ``pid``; ``text`` = its new messages (natural form)."""
        return " / ".join(line.strip() for line in text.splitlines() if line.strip())


class _TicTacToe(_Reader):
    """TextArena's TicTacToe and ReverseTicTacToe: ``board[r][c]`` in ``''``, ``'X'``, ``'O'``; player 1 is X."""

    max_decisions = 5

    def mark(self, pid: int) -> str:
        return "X" if pid == 1 else "O"

    def cells(self) -> List[str]:
        return [c for row in self.raw.state.game_state["board"] for c in row]

    def legal(self, pid: int) -> List[str]:
        return [f"[{k}]" for k, c in enumerate(self.cells()) if c == ""]

    def compact(self, pid: int, text: str) -> str:
        # own-view words so that one policy can play both seats (as the openspiel family's compact style)
        mine = self.mark(pid)
        return " ".join("_" if c == "" else "me" if c == mine else "opp" for c in self.cells())


class _ConnectFour(_Reader):
    """TextArena's ConnectFour: ``board[r][c]`` in ``'.'``, ``'X'`` (player 0), ``'O'``; row 0 is the top."""

    def __init__(self, raw):
        super().__init__(raw)
        self.max_decisions = (raw.num_rows * raw.num_cols + 1) // 2

    def legal(self, pid: int) -> List[str]:
        return [f"[col {c}]" for c, cell in enumerate(self.raw.state.game_state["board"][0]) if cell == "."]

    def compact(self, pid: int, text: str) -> str:
        if not self.raw.is_open:  # the blind variant: the board is hidden from the players
            return super().compact(pid, text)
        mine = "X" if pid == 0 else "O"
        return " ".join(
            "_" if c == "." else "me" if c == mine else "opp" for row in self.raw.state.game_state["board"] for c in row
        )


READERS = {"TicTacToeEnv": _TicTacToe, "ReverseTicTacToeEnv": _TicTacToe, "ConnectFourEnv": _ConnectFour}


# ---------------------------------------------------------------------------- env
class TextArenaGame(TextEnv):
    """A two-player TextArena game played by ``player_0`` (TextArena's player 0) and ``player_1``.

    Args:
        env_id: a TextArena env id (``TicTacToe-v0``, ``ConnectFour-v0``, ...; the ids of
            ``textarena.envs.registration.ENV_REGISTRY``).
        draw_reward: reward of both seats when a zero-sum game ends in a draw (TextArena: 0;
            the MARS official code pays 0.1 in its OpenSpiel games).
        env_kwargs: keyword arguments for the TextArena env class (override the id's).
        **kwargs: :class:`~marl.text.TextEnv` options; here ``invalid_action`` defaults to
            ``"retry"``, ``retries`` to 1 and ``invalid_penalty`` to -1 (module docstring).

    Natural prompts: the system prompt is TextArena's player prompt; each turn is the
    game's messages to the player since its last turn (moves, board, notices; its own
    replies are already in its chat), one per line as ``[GAME] ...`` / ``[Player 1] ...``
    (TextArena's ``LLMObservationWrapper`` form). ``prompt_style="compact"``: no system
    prompt; the board cells as ``me`` / ``opp`` / ``_`` for the games with a reader, else
    the messages on one line.

    Episode metrics: ``moves`` (moves the game accepted), ``forfeit`` (our invalid-reply
    forfeit), ``game_invalid_moves`` (moves the game itself rejected, free-text games),
    ``win_<seat>``, ``loss_<seat>``, ``draw`` (0/1; a forfeit is a loss of the offender).

    Raises:
        MarlError: textarena missing, an unknown env id (with the closest ids), a game that
            two players cannot play, a game that needs data or network it cannot get, or a
            bad TextEnv option.
    """

    family = "textarena"
    kind = "competitive"
    params = {"env_id": Param("text"), "draw_reward": Param("number"), "env_kwargs": Param("table", optional=True)}

    def __init__(
        self,
        env_id: str = "TicTacToe-v0",
        draw_reward: float = 0.0,
        env_kwargs: Optional[Dict[str, Any]] = None,
        **kwargs,
    ):
        ta = load_textarena()
        registry = _registry(ta)
        if env_id not in registry:
            near = difflib.get_close_matches(str(env_id), list(registry), n=3, cutoff=0.5)
            hint = f" Did you mean {', '.join(repr(n) for n in near)}?" if near else ""
            raise MarlError(
                f"Unknown TextArena env id '{env_id}'.{hint} Valid choices: the "
                f"{len(registry)} ids of textarena.envs.registration.ENV_REGISTRY, e.g. "
                f"{', '.join(SCENARIOS)}."
            )
        self.env_id = env_id
        self.draw_reward = float(draw_reward)
        self._random = random.Random(0).getstate()  # the game's own `random` state (module docstring)
        check_library_params(
            f"text game 'textarena:{env_id}'", "env_kwargs", env_kwargs or {}, _defaults(registry[env_id])
        )
        self.ta_env = self._call(ta.make, env_id, **(env_kwargs or {}))
        self.raw = _unwrap(ta, self.ta_env)
        self.reader = READERS.get(type(self.raw).__name__, _Reader)(self.raw)
        if type(self.raw).__name__ in GENERAL_SUM:
            self.kind = "mixed"
        self.max_decisions = self.reader.max_decisions
        kwargs.setdefault("invalid_action", "retry")
        kwargs.setdefault("retries", 1)
        kwargs.setdefault("invalid_penalty", -1.0)
        super().__init__(env_id, **kwargs)
        self.new_game()  # fails here, not in a sampler, if two players cannot play the game

    # ------------------------------------------------------------------ calls into TextArena
    def _call(self, fn, *args, **kwargs):
        """``fn(*args, **kwargs)`` on the game's own ``random`` state, offline; errors as MarlError."""
        saved = random.getstate()
        random.setstate(self._random)
        try:
            with _offline():
                return fn(*args, **kwargs)
        except LookupError as e:  # nltk: a corpus that is not installed
            found = re.search(r"Resource '?([\w.]+)'? not found", str(e))
            name = found.group(1) if found else "words"
            raise MarlError(
                f"TextArena game '{self.env_id}' needs the nltk data '{name}', which is not installed "
                f"(this env never downloads it); install it with: python -m nltk.downloader {name}"
            ) from e
        except MarlError:
            raise
        except Exception as e:  # e.g. a game that needs an OpenRouter API key, or more than two players
            raise MarlError(
                f"TextArena game '{self.env_id}' failed in {getattr(fn, '__name__', fn)}: {type(e).__name__}: {e}"
            ) from e
        finally:
            self._random = random.getstate()
            random.setstate(saved)

    def new_game(self) -> None:
        try:
            self._call(self.ta_env.reset, num_players=2, seed=self.rng.randrange(2**31))
        except MarlError as e:
            if isinstance(e.__cause__, AssertionError):  # TextArena asserts the number of players
                raise MarlError(
                    f"TextArena game '{self.env_id}' cannot be played by two players "
                    f"({e.__cause__}); this family supports two-player games."
                ) from e
            raise
        self.state = self.raw.state
        self.n_moves = 0
        self.game_invalid = 0
        self.final = {a: 0.0 for a in self.players}  # TextArena's rewards of the finished game
        self._shown: Dict[int, str] = {}
        # TextArena's player prompts are the first messages of each player's queue: the system prompts
        self._rules = {
            pid: "\n".join(m for _, m, kind in msgs if kind.name == PROMPT)
            for pid, msgs in self.state.observations.items()
        }
        for pid in self.state.observations:
            self.state.observations[pid] = [x for x in self.state.observations[pid] if x[2].name != PROMPT]

    def _pid(self, agent: str) -> int:
        return self.players.index(agent)

    # ------------------------------------------------------------------ TextEnv hooks
    def to_act(self) -> List[str]:
        if self.done or self.state.done:
            return []
        return [self.players[self.state.current_player_id]]

    def legal_actions(self, agent: str) -> List[str]:
        return self.reader.legal(self._pid(agent)) if agent in self.to_act() else []

    def parse(self, agent: str, text: str) -> Optional[str]:
        """A legal move (games with a move list) or the reply itself (free-text games: the game judges it)."""
        if self.legal_actions(agent):
            return super().parse(agent, text)
        text = text.strip()
        return text if "[" in text or "]" in text else f"[{text}]"

    def system_prompt(self, agent: str) -> str:
        return "" if self.compact else self._rules.get(self._pid(agent), "")

    def observe(self, agent: str) -> str:
        """The player's new messages (taken from TextArena's queue once per decision, then kept)."""
        pid = self._pid(agent)
        queue, self.state.observations[pid] = self.state.observations[pid], []
        lines = []
        for sender, message, kind in queue:
            if kind.name == ACTION and sender == pid:
                continue  # its own reply: already in its chat
            name = self.state.role_mapping.get(sender, GAME if sender < 0 else f"Player {sender}")
            lines.append(f"[{name}] {message.strip()}")
        if lines or pid not in self._shown:
            self._shown[pid] = "\n".join(lines)
        text = self._shown[pid]
        return self.reader.compact(pid, text) if self.compact else text

    def apply(self, moves: Dict[str, str]) -> Dict[str, float]:
        ((agent, text),) = moves.items()
        pid = self._pid(agent)
        errors = getattr(self.state, "error_count", 0)
        done, _ = self._call(self.ta_env.step, text)
        rejected = getattr(self.state, "error_count", 0) > errors or (
            done and self.state.game_info.get(pid, {}).get("invalid_move", False)
        )
        self.game_invalid += bool(rejected)
        self.n_moves += not rejected
        self.done = bool(done)
        if not self.done:
            return {}
        rewards, _ = self._call(self.ta_env.close)
        rewards = {a: float((rewards or {}).get(i, 0.0)) for i, a in enumerate(self.players)}
        self.final = dict(rewards)
        if self.kind == "competitive" and not any(rewards.values()):
            return {a: self.draw_reward for a in self.players}
        return rewards

    # ------------------------------------------------------------------ metrics, bots
    def game_metrics(self) -> Dict[str, float]:
        ended = self.state.done
        forfeit = self.done and not ended
        out = {"moves": float(self.n_moves), "forfeit": float(forfeit), "game_invalid_moves": float(self.game_invalid)}
        if forfeit:  # our invalid-reply forfeit: the offender is the player who was to move
            offender = self.state.current_player_id
            final = {a: (-1.0 if i == offender else 1.0) for i, a in enumerate(self.players)}
        else:
            final = self.final
        for a in self.players:
            out[f"win_{a}"] = float(final[a] > 0)
            out[f"loss_{a}"] = float(final[a] < 0)
        out["draw"] = float(ended and not any(final.values()))
        return out

    @classmethod
    def bots(cls):
        return {"random": RandomBot}


def make(scenario: Optional[str] = None, **kwargs) -> TextArenaGame:
    """``make_env("textarena", "TicTacToe-v0")``: any two-player TextArena env id (default ``TicTacToe-v0``)."""
    return TextArenaGame(env_id=scenario or kwargs.pop("env_id", "TicTacToe-v0"), **kwargs)


def scenarios() -> List[str]:
    """The env ids with a legal-move reader (any other two-player id also works, in free text)."""
    return list(SCENARIOS)
