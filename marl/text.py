"""Text games: multi-agent envs whose observations are chat messages and whose actions are text.

A :class:`TextEnv` is one game (not batched; LLM samplers run many copies). It
is an RLlib ``MultiAgentEnv``:

* ``reset()`` -> ``(obs, infos)``, ``step({agent: text})`` -> ``(obs, rewards,
  terminateds, truncateds, infos)``;
* ``obs[agent]`` is the chat (``[{"role": "system" | "user" | "assistant",
  "content": str}, ...]``) the agent must answer now; only agents that must act
  appear in ``obs`` (both seats in simultaneous games, one in turn-based ones);
* ``infos[agent]["legal_actions"]`` lists the legal moves as text, and after a
  step ``infos[agent]`` says whether the agent's text was ``invalid`` and which
  ``move`` was played;
* ``rewards`` may name agents that did not act (e.g. the loser of a game the
  opponent just won): LLM samplers add such a reward to that agent's last turn
  (the reward rule of the MARS official code: Yuan, Xu et al. 2025, arXiv
  2510.15414; ``docs/text_games.md``).

Unparseable or illegal text is handled by ``invalid_action``:

* ``"penalty"``: the game's default move is played (e.g. defect in the IPD, as
  in the official code of Piche et al. 2025, arXiv 2511.19405) and the agent
  gets ``invalid_penalty``;
* ``"retry"``: the agent is asked again (its bad reply and a notice listing the
  legal moves are added to its chat) up to ``retries`` times, each bad reply
  costing ``invalid_penalty``; then the game is forfeited;
* ``"forfeit"``: the game ends at once; every offender (several can reply
  badly in one step of a simultaneous game) gets ``invalid_penalty`` (MARS:
  -1 - 10 = -11 in tic-tac-toe) and the others 0.

A reply is read by :meth:`TextEnv.parse` (default :func:`parse_action`); a
game with free-text turns (no move list, e.g. Trust-and-Split's messages)
overrides it. ``format_reward`` is added to the reward of every valid reply
(MARS official code: +0.05), also in a step that a co-player forfeits.

Every episode reports ``invalid_rate`` (bad replies / replies to a move list:
free-text replies are not counted) in its metrics.

Game parameters are checked before a game is built, by one rule table per class
(:attr:`TextEnv.params`, merged along the class hierarchy; :class:`Param`): a float, a
string or a bool where a whole number is meant, or a count below its bound, is a
:class:`MarlError` naming the game, the parameter, the value and the valid range, never
rounded or converted. A keyword no ``__init__`` of the class takes is refused the same way.
"""

from __future__ import annotations

import abc
import random
import re
from typing import Any, ClassVar, Dict, List, Mapping, Optional, Sequence, Tuple

import gymnasium as gym
from ray.rllib.env.multi_agent_env import MultiAgentEnv as RLlibMultiAgentEnv

from marl.env import EnvInfo, EnvSpec, GroupInfo, MarlError, fit_env, unknown_choice
from marl.errors import closest
from marl.text_params import (  # noqa: F401  (Param, check_param, ...: re-exported for game modules)
    Param,
    check_library_params,
    check_param,
    checked_init,
    init_parameters,
    rule_of_default,
)

INVALID_ACTIONS = ("penalty", "retry", "forfeit")
HISTORIES = ("full", "last")
PROMPT_STYLES = ("natural", "compact")
Chat = List[Dict[str, str]]

_ANSWER = re.compile(r"<answer>(.*?)</answer>", re.S | re.I)
_SPACES = re.compile(r"\s+")


def _norm(text: str) -> str:
    return _SPACES.sub(" ", text.strip()).lower()


def parse_action(text: str, legal: Sequence[str]) -> Optional[str]:
    """Map generated text to one legal move, or ``None`` if it names none or several.

    Rules, in order: the last ``<answer>...</answer>`` block is read if there
    is one; text equal to a legal move (case and spacing ignored) is that
    move; otherwise the move is the one legal move the text contains, if
    exactly one is contained (so "I play <A>" is ``<A>``, "<A> or <B>" is None).

    Args:
        text: the model's reply.
        legal: the legal moves, as the game writes them.
    Returns:
        The legal move as written in ``legal``, or ``None``.
    """
    answers = _ANSWER.findall(text)
    body = _norm(answers[-1] if answers else text)
    by_norm = {_norm(m): m for m in legal}
    if body in by_norm:
        return by_norm[body]
    found = [m for n, m in by_norm.items() if n and n in body]
    return found[0] if len(found) == 1 else None


class Bot(abc.ABC):
    """A fixed opponent that plays a seat of a :class:`TextEnv` (for evaluation and opponent mixes).

    Bots read the game object directly (e.g. the co-player's last move) and
    return a legal move as text (any text on a free-text turn).

    Args:
        seed: seed of the bot's randomness (ignored by deterministic bots).
    """

    name = "bot"

    def __init__(self, seed: Optional[int] = None):
        pass

    def reset(self, seed: Optional[int] = None) -> None:
        """Called at the start of every game."""

    @abc.abstractmethod
    def act(self, env: "TextEnv", agent: str) -> str:
        """The move ``agent`` plays now in ``env`` (one of ``env.legal_actions(agent)``)."""


class RandomBot(Bot):
    """Uniformly random legal move; the empty text (says nothing) on a free-text turn."""

    name = "random"

    def __init__(self, seed: Optional[int] = None):
        self.rng = random.Random(seed)

    def reset(self, seed: Optional[int] = None) -> None:
        if seed is not None:
            self.rng.seed(seed)

    def act(self, env: "TextEnv", agent: str) -> str:
        legal = env.legal_actions(agent)
        return self.rng.choice(legal) if legal else ""


class TextEnv(RLlibMultiAgentEnv, abc.ABC):
    """Base of text games (see the module docstring for the protocol).

    Subclasses set ``family``, ``players`` (seat ids), ``simultaneous`` and
    ``kind`` and implement the game hooks: :meth:`new_game`,
    :meth:`legal_actions`, :meth:`system_prompt`, :meth:`observe`,
    :meth:`apply` and optionally :meth:`to_act` (default: every seat, for
    simultaneous games), :meth:`parse`, :meth:`default_action`,
    :meth:`game_metrics`, :meth:`bots`. The bookkeeping (chats, retries,
    penalties, forfeits, ``format_reward``, returns, ``invalid_rate``) is done
    here in :meth:`reset` and :meth:`step`.

    Args:
        scenario: name shown in logs (the game).
        invalid_action: ``"penalty"``, ``"retry"`` or ``"forfeit"`` (module docstring).
        invalid_penalty: reward for a bad reply (penalty / retry) or for forfeiting.
        retries: extra attempts per decision under ``"retry"``.
        format_reward: added to the reward of every valid reply (MARS official
            code: 0.05; Yuan, Xu et al. 2025, arXiv 2510.15414).
        history: ``"full"`` (the whole chat of the game so far, as MARS) or
            ``"last"`` (system prompt + the current state only: short prompts).
        prompt_style: ``"natural"`` (instructions in English, for pretrained
            LLMs) or ``"compact"`` (a few symbols per turn, for tiny models
            trained from scratch).
        seed: seed of the game's own randomness (``reset(seed=...)`` overrides).

    Raises:
        MarlError: an unknown ``invalid_action``, ``history`` or ``prompt_style``; a parameter
            that breaks its rule (:attr:`params`, :meth:`check_params`).
    """

    family = "text"
    players: List[str] = ["player_0", "player_1"]
    simultaneous = False
    kind = "mixed"
    # plays whole games for marl.competitive (versus, cross-play, marl league); imported on first use
    game_runner = "marl.algos.llm.matches:TextGameRunner"
    max_decisions = 100  # per agent and game; subclasses set the true bound
    # the longest free-text reply the game reads, in characters: the default reply budget of its
    # free-text turns (moves are bounded by the legal moves themselves); games override it
    free_text_chars = 256
    # parameter rules (merged along the class hierarchy, a subclass's entry wins): checked
    # before any __init__ of a subclass runs (module docstring)
    params: ClassVar[Dict[str, Param]] = {
        "invalid_penalty": Param("number"),
        "retries": Param("whole", low=0),
        "format_reward": Param("number"),
        "seed": Param("whole", optional=True),
    }

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "__init__" in cls.__dict__:
            cls.__init__ = checked_init(cls.__dict__["__init__"])  # type: ignore[method-assign]

    @classmethod
    def param_rules(cls) -> Dict[str, Param]:
        """The :attr:`params` of ``cls`` and its bases, merged (a subclass's rule wins)."""
        rules: Dict[str, Param] = {}
        for klass in reversed(cls.__mro__):
            rules.update(klass.__dict__.get("params", {}))
        return rules

    @classmethod
    def check_params(cls, values: Mapping[str, Any]) -> None:
        """Check a game's keyword arguments before it is built: every name must be a parameter of
        the class (of an ``__init__`` along its hierarchy, or in :attr:`params`) and every value must
        pass its :class:`Param`.

        Raises:
            MarlError: an unknown name (with the closest and the valid names), or a value of the
                wrong type or outside its range (naming the game, the parameter, the value, the range).
        """
        owner = f"text game '{cls._label(values)}'"
        rules = cls.param_rules()
        # a game whose __init__ reads its own **kwargs declares those names in params
        valid = init_parameters(cls) + [k for k in rules if k not in init_parameters(cls)]
        for name in values:
            if name not in valid:
                raise MarlError(
                    f"{owner}: unknown parameter '{name}'.{closest(name, valid)} Valid parameters: {', '.join(valid)}."
                )
        for name, value in values.items():
            if name in rules:
                check_param(owner, name, value, rules[name])

    @classmethod
    def _label(cls, values: Mapping[str, Any]) -> str:
        """The game's name in messages: the family, with the scenario when one is given."""
        for key in ("game", "env_id", "scenario", "values"):
            if isinstance(values.get(key), str) and values[key] != cls.family:
                return f"{cls.family}:{values[key]}"
        return cls.family

    def __init__(
        self,
        scenario: str,
        *,
        invalid_action: str = "penalty",
        invalid_penalty: float = 0.0,
        retries: int = 2,
        format_reward: float = 0.0,
        history: str = "full",
        prompt_style: str = "natural",
        seed: Optional[int] = None,
    ):
        super().__init__()
        for name, value, valid in (
            ("invalid_action", invalid_action, INVALID_ACTIONS),
            ("history", history, HISTORIES),
            ("prompt_style", prompt_style, PROMPT_STYLES),
        ):
            if value not in valid:
                raise unknown_choice(name, value, valid)
        self.scenario = scenario
        self.invalid_action = invalid_action
        self.invalid_penalty = float(invalid_penalty)
        self.retries = retries
        self.format_reward = float(format_reward)
        self.history = history
        self.compact = prompt_style == "compact"
        self.rng = random.Random(seed)
        self.possible_agents = list(self.players)
        self.agents = list(self.players)
        text = gym.spaces.Text(max_length=1 << 16)
        self.observation_spaces = {a: text for a in self.players}
        self.action_spaces = {a: text for a in self.players}
        self.info = EnvInfo(
            family=self.family,
            scenario=scenario,
            agents=list(self.players),
            # GroupInfo types a tensor env's spaces (Box observations); a text game's are gymnasium Text spaces
            groups={"players": GroupInfo("players", list(self.players), text, text)},
            state_dim=0,
            episode_limit=self.max_decisions,
            kind=self.kind,
            num_envs=1,
        )
        # marl's EnvSpec (how remote runners rebuild the game) in the slot gymnasium types as its own EnvSpec
        # (hence __str__ = __repr__ below)
        self.spec: Optional[EnvSpec] = None
        self.done = True

    # ------------------------------------------------------------------ game hooks
    @abc.abstractmethod
    def new_game(self) -> None:
        """Start a new game (randomness from ``self.rng``); called by :meth:`reset` before the system prompts."""

    def to_act(self) -> List[str]:
        """Agents that must move now (empty once the game is over); default: every seat (simultaneous games)."""
        return [] if self.done else list(self.players)

    @abc.abstractmethod
    def legal_actions(self, agent: str) -> List[str]:
        """Legal moves of ``agent`` now, as text."""

    @abc.abstractmethod
    def system_prompt(self, agent: str) -> str:
        """Rules and role of ``agent`` (may be empty: no system message)."""

    @abc.abstractmethod
    def observe(self, agent: str) -> str:
        """The user message for ``agent``'s decision now (state from its own view, legal moves)."""

    @abc.abstractmethod
    def apply(self, moves: Dict[str, str]) -> Dict[str, float]:
        """Play one legal move per agent in :meth:`to_act`; return game rewards; set ``self.done``."""

    def parse(self, agent: str, text: str) -> Optional[str]:
        """The move ``agent``'s reply ``text`` names, or ``None`` for a bad reply.

        Default: :func:`parse_action` over :meth:`legal_actions`. A game with
        free-text turns overrides it to accept any text there.
        """
        return parse_action(text, self.legal_actions(agent))

    def default_action(self, agent: str) -> str:
        """The move played for a bad reply under ``invalid_action="penalty"`` (random legal).

        Raises:
            MarlError: ``agent`` has no legal moves (a free-text turn whose
                game does not override :meth:`parse`).
        """
        legal = self.legal_actions(agent)
        if not legal:
            raise MarlError(
                f"{agent} has no legal moves to default to; a game with free-text turns must "
                f"override parse() to accept them."
            )
        return self.rng.choice(legal)

    def other(self, agent: str) -> str:
        """The co-player of ``agent`` in a two-player game.

        Raises:
            MarlError: the game does not have exactly two seats.
        """
        if len(self.players) != 2:
            raise MarlError(f"other() needs a two-player game; seats: {self.players}.")
        return self.players[1 - self.players.index(agent)]

    def game_metrics(self) -> Dict[str, float]:
        """Game statistics of the finished episode (e.g. cooperation rate)."""
        return {}

    @classmethod
    def bots(cls) -> Dict[str, Any]:
        """Fixed opponents of this game: name -> ``Bot`` class (``bot_cls(seed=...)``)."""
        return {"random": RandomBot}

    # ------------------------------------------------------------------ RLlib API
    @property
    def num_envs(self) -> int:
        return 1

    # RLlib's MultiAgentDict has Hashable keys; a text game's agent ids are str (and dict is invariant)
    def reset(  # type: ignore[override]
        self, *, seed: Optional[int] = None, options: Optional[dict] = None
    ) -> Tuple[Dict[str, Chat], Dict[str, Dict[str, Any]]]:
        """Start a new game: :meth:`new_game`, then the system prompts.

        Returns:
            ``(obs, infos)``: the chats of the agents that must act and their
            ``infos[agent]["legal_actions"]``.
        """
        if seed is not None:
            self.rng.seed(seed)
        self.done = False
        self.returns = {a: 0.0 for a in self.players}
        self.n_replies = {a: 0 for a in self.players}
        self.n_invalid = {a: 0 for a in self.players}
        self._pending: Dict[str, str] = {}
        self._tries = {a: 0 for a in self.players}
        self._last_prompt: Dict[str, str] = {}
        self.new_game()
        self.chats: Dict[str, Chat] = {}
        for a in self.players:
            sp = self.system_prompt(a)
            self.chats[a] = [{"role": "system", "content": sp}] if sp else []
        infos: Dict[str, Dict[str, Any]] = {}
        return self._ask(self.to_act(), infos), infos

    def step(  # type: ignore[override]  # str agent ids and replies (see reset)
        self, action_dict: Dict[str, str]
    ) -> Tuple[Dict[str, Chat], Dict[str, float], Dict[str, bool], Dict[str, bool], Dict[str, Dict[str, Any]]]:
        """Read one reply per agent asked; play the moves once every agent to act has a valid one.

        Raises:
            MarlError: the game is over, or an agent asked for a reply has none in ``action_dict``.
        """
        asked = [a for a in self.to_act() if a not in self._pending]
        missing = [a for a in asked if a not in action_dict]
        if self.done or missing:
            raise MarlError(
                f"step() needs a reply from {missing or 'nobody: the game is over'}; got {sorted(action_dict)}."
            )
        rewards = {a: 0.0 for a in self.players}
        infos: Dict[str, Dict[str, Any]] = {}
        again: List[str] = []
        offenders: List[str] = []
        for a in asked:
            move = self._read(a, str(action_dict[a]))
            infos[a] = {"invalid": move is None, "move": move}
            if move is not None:
                self._pending[a] = move
            else:
                outcome = self._bad_reply(a, rewards, infos[a])
                if outcome != "penalty":
                    (again if outcome == "retry" else offenders).append(a)
        if offenders:
            rewards = {a: (self.invalid_penalty if a in offenders else 0.0) for a in self.players}
            self.done = True
        elif not again:
            self._play(rewards)
        for a, info in infos.items():
            if not info["invalid"]:
                rewards[a] += self.format_reward
        for a, r in rewards.items():
            self.returns[a] += r
        obs = {} if self.done else self._ask(again or self.to_act(), infos, retry=again)
        done = {"__all__": self.done, **{a: self.done for a in self.players}}
        return obs, rewards, done, {"__all__": False}, infos

    def _read(self, agent: str, text: str) -> Optional[str]:
        """Add ``agent``'s prompt and reply to its chat, count the reply and return :meth:`parse`'s move."""
        self.chats[agent].append({"role": "user", "content": self._last_prompt[agent]})
        self.chats[agent].append({"role": "assistant", "content": text})
        move = self.parse(agent, text)
        if move is None or self.legal_actions(agent):  # a valid free-text reply is not counted
            self.n_replies[agent] += 1
            self.n_invalid[agent] += move is None
        return move

    def _bad_reply(self, agent: str, rewards: Dict[str, float], info: Dict[str, Any]) -> str:
        """Apply ``invalid_action`` to ``agent``'s bad reply; return ``"penalty"``, ``"retry"`` or ``"forfeit"``."""
        if self.invalid_action == "penalty":
            rewards[agent] += self.invalid_penalty
            self._pending[agent] = info["move"] = self.default_action(agent)
            return "penalty"
        if self.invalid_action == "retry" and self._tries[agent] < self.retries:
            self._tries[agent] += 1
            rewards[agent] += self.invalid_penalty
            return "retry"
        return "forfeit"

    def _play(self, rewards: Dict[str, float]) -> None:
        """Apply the pending moves (one per agent to act) and add the game rewards to ``rewards``."""
        moves, self._pending = self._pending, {}
        self._tries = {a: 0 for a in self.players}
        for a, r in self.apply(moves).items():
            rewards[a] += float(r)

    def _ask(
        self, agents: Sequence[str], infos: Dict[str, Dict[str, Any]], retry: Sequence[str] = ()
    ) -> Dict[str, Chat]:
        """The chats ``agents`` answer next (a retry notice for those in ``retry``); sets their ``legal_actions``."""
        out = {}
        for a in agents:
            legal = self.legal_actions(a)
            if a in retry:
                prompt = f"Invalid reply. Answer with exactly one legal action: {', '.join(legal)}"
            else:
                prompt = self.observe(a)
            self._last_prompt[a] = prompt
            out[a] = self.prompt_chat(a, prompt)
            infos.setdefault(a, {})["legal_actions"] = legal
        return out

    def prompt_chat(self, agent: str, prompt: str) -> Chat:
        """The chat ``agent`` answers: system prompt, then (``history="full"``) the game so far, then ``prompt``."""
        chat = self.chats[agent]
        head = chat[:1] if chat and chat[0]["role"] == "system" else []
        past = chat[len(head) :] if self.history == "full" else []
        return head + past + [{"role": "user", "content": prompt}]

    def episode_metrics(self) -> Dict[str, float]:
        """Per-seat returns, ``invalid_rate`` and :meth:`game_metrics` of the finished game."""
        replies = sum(self.n_replies.values())
        out = {f"return_{a}": r for a, r in self.returns.items()}
        out["invalid_rate"] = sum(self.n_invalid.values()) / max(replies, 1)
        out.update(self.game_metrics())
        return out

    def callbacks(self) -> List[Any]:
        """Run callbacks this game contributes to every ``fit`` on it; none by default."""
        return []

    def fit(self, algo: str, **overrides: Any) -> Any:
        """Train ``algo`` (an LLM self-play algorithm: ``mars``, ``advantage_alignment``, ...) on this game.

        Raises:
            MarlError: an override that is a parameter of the game (``prompt_style``, ``history``,
                ``rounds``, ...) rather than a key of ``algo``: the message shows it in ``make_env``.
        """
        game_keys = [k for k in overrides if k in init_parameters(type(self))]
        if game_keys:
            from marl.config import config_class

            keys = config_class(algo).keys_of()
            misplaced = [k for k in game_keys if k not in keys]
            if misplaced:
                given = ", ".join(f"{k}={overrides[k]!r}" for k in misplaced)
                raise MarlError(
                    f"{given}: {'a parameter' if len(misplaced) == 1 else 'parameters'} of the text game "
                    f"{self.info.family}:{self.scenario}, set when it is made, not by fit: "
                    f"make_env({self.info.family!r}, ..., {given}).fit({algo!r}, ...). fit takes the keys of "
                    f"{algo} (e.g. max_new_tokens, context_policy, model)."
                )
        return fit_env(self, algo, **overrides)

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.family}:{self.scenario} seats={self.players}>"

    __str__ = __repr__  # gymnasium's __str__ expects a gymnasium EnvSpec in self.spec


def random_play_chats(env: TextEnv, seed: int = 0, free_text: str = "let us split it evenly") -> List[Chat]:
    """Every chat ``env`` asks for in one game played with uniformly random legal moves
    (``free_text`` on free-text turns); e.g. text to train a tokenizer on, or prompts to measure.

    Args:
        env: a text game (it is reset with ``seed``).
        seed: the game's and the moves' seed.
    Returns:
        The chats in the order they were asked.
    """
    rng = random.Random(seed)
    obs, _ = env.reset(seed=seed)
    chats: List[Chat] = []
    while obs:
        moves = {}
        for a, chat in obs.items():
            chats.append(chat)
            legal = env.legal_actions(a)
            moves[a] = rng.choice(legal) if legal else free_text
        obs, _, done, _, _ = env.step(moves)
        if done["__all__"]:
            break
    return chats
