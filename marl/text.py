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
  (MARS, arXiv 2510.15414, reward rule in ``reference/llm_selfplay.md`` §1.5).

Unparseable or illegal text is handled by ``invalid_action``:

* ``"penalty"``: the game's default move is played (e.g. defect in the IPD, as
  in the AdAlignLLM code) and the agent gets ``invalid_penalty``;
* ``"retry"``: the agent is asked again (its bad reply and a notice listing the
  legal moves are added to its chat) up to ``retries`` times, each bad reply
  costing ``invalid_penalty``; then the game is forfeited;
* ``"forfeit"``: the game ends at once; the offender gets ``invalid_penalty``
  (MARS: -1 - 10 = -11 in tic-tac-toe) and the others 0.

Every episode reports ``invalid_rate`` (bad replies / replies) in its metrics.
"""
from __future__ import annotations

import abc
import random
import re
from typing import Any, Dict, List, Optional, Sequence

import gymnasium as gym
from ray.rllib.env.multi_agent_env import MultiAgentEnv as RLlibMultiAgentEnv

from marl.env import EnvInfo, EnvSpec, GroupInfo, MarlError, unknown_choice

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
    return a legal move as text.
    """

    name = "bot"

    def reset(self, seed: Optional[int] = None) -> None:
        """Called at the start of every game."""

    @abc.abstractmethod
    def act(self, env: "TextEnv", agent: str) -> str:
        """The move ``agent`` plays now in ``env`` (one of ``env.legal_actions(agent)``)."""


class RandomBot(Bot):
    """Uniformly random legal move."""

    name = "random"

    def __init__(self, seed: Optional[int] = None):
        self.rng = random.Random(seed)

    def reset(self, seed: Optional[int] = None) -> None:
        if seed is not None:
            self.rng.seed(seed)

    def act(self, env: "TextEnv", agent: str) -> str:
        return self.rng.choice(env.legal_actions(agent))


class TextEnv(RLlibMultiAgentEnv, abc.ABC):
    """Base of text games (see the module docstring for the protocol).

    Subclasses set ``family``, ``players`` (seat ids), ``simultaneous`` and
    ``kind`` and implement the game hooks: :meth:`new_game`, :meth:`to_act`,
    :meth:`legal_actions`, :meth:`system_prompt`, :meth:`observe`,
    :meth:`apply` and optionally :meth:`default_action`, :meth:`game_metrics`,
    :meth:`bots`.

    Args:
        scenario: name shown in logs (the game).
        invalid_action: ``"penalty"``, ``"retry"`` or ``"forfeit"`` (module docstring).
        invalid_penalty: reward for a bad reply (penalty / retry) or for forfeiting.
        retries: extra attempts per decision under ``"retry"``.
        history: ``"full"`` (the whole chat of the game so far, as MARS) or
            ``"last"`` (system prompt + the current state only: short prompts).
        prompt_style: ``"natural"`` (instructions in English, for pretrained
            LLMs) or ``"compact"`` (a few symbols per turn, for tiny models
            trained from scratch).
        seed: seed of the game's own randomness (``reset(seed=...)`` overrides).

    Raises:
        MarlError: an unknown ``invalid_action``, ``history`` or ``prompt_style``.
    """

    family = "text"
    players: List[str] = ["player_0", "player_1"]
    simultaneous = False
    kind = "mixed"
    max_decisions = 100  # per agent and game; subclasses set the true bound

    def __init__(self, scenario: str, *, invalid_action: str = "penalty", invalid_penalty: float = 0.0,
                 retries: int = 2, history: str = "full", prompt_style: str = "natural", seed: Optional[int] = None):
        super().__init__()
        for name, value, valid in (("invalid_action", invalid_action, INVALID_ACTIONS),
                                   ("history", history, HISTORIES), ("prompt_style", prompt_style, PROMPT_STYLES)):
            if value not in valid:
                raise unknown_choice(name, value, valid)
        if int(retries) < 0:
            raise MarlError(f"retries must be >= 0, got {retries!r}.")
        self.scenario = scenario
        self.invalid_action = invalid_action
        self.invalid_penalty = float(invalid_penalty)
        self.retries = int(retries)
        self.history = history
        self.compact = prompt_style == "compact"
        self.rng = random.Random(seed)
        self.possible_agents = list(self.players)
        self.agents = list(self.players)
        text = gym.spaces.Text(max_length=1 << 16)
        self.observation_spaces = {a: text for a in self.players}
        self.action_spaces = {a: text for a in self.players}
        self.info = EnvInfo(
            family=self.family, scenario=scenario, agents=list(self.players),
            groups={"players": GroupInfo("players", list(self.players), text, text)},
            state_dim=0, episode_limit=self.max_decisions, kind=self.kind, num_envs=1,
        )
        self.spec: Optional[EnvSpec] = None
        self.done = True

    # ------------------------------------------------------------------ game hooks
    @abc.abstractmethod
    def new_game(self) -> None:
        """Start a new game (randomness from ``self.rng``)."""

    @abc.abstractmethod
    def to_act(self) -> List[str]:
        """Agents that must move now (empty once the game is over)."""

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

    def default_action(self, agent: str) -> str:
        """The move played for a bad reply under ``invalid_action="penalty"`` (random legal)."""
        return self.rng.choice(self.legal_actions(agent))

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

    def reset(self, *, seed: Optional[int] = None, options: Optional[dict] = None):
        if seed is not None:
            self.rng.seed(seed)
        self.done = False
        self.chats: Dict[str, Chat] = {}
        for a in self.players:
            sp = self.system_prompt(a)
            self.chats[a] = [{"role": "system", "content": sp}] if sp else []
        self.returns = {a: 0.0 for a in self.players}
        self.n_replies = {a: 0 for a in self.players}
        self.n_invalid = {a: 0 for a in self.players}
        self._pending: Dict[str, str] = {}
        self._tries = {a: 0 for a in self.players}
        self.new_game()
        return self._observations(self.to_act()), {}

    def step(self, action_dict: Dict[str, str]):
        asked = [a for a in self.to_act() if a not in self._pending]
        missing = [a for a in asked if a not in action_dict]
        if self.done or missing:
            raise MarlError(f"step() needs a reply from {missing or 'nobody: the game is over'}; got {sorted(action_dict)}.")
        rewards = {a: 0.0 for a in self.players}
        infos: Dict[str, Dict[str, Any]] = {}
        again: List[str] = []
        forfeit = None
        for a in asked:
            text = str(action_dict[a])
            legal = self.legal_actions(a)
            move = parse_action(text, legal)
            self.n_replies[a] += 1
            self.chats[a].append({"role": "user", "content": self._last_prompt[a]})
            self.chats[a].append({"role": "assistant", "content": text})
            infos[a] = {"invalid": move is None, "move": move}
            if move is not None:
                self._pending[a] = move
                continue
            self.n_invalid[a] += 1
            if self.invalid_action == "penalty":
                rewards[a] += self.invalid_penalty
                self._pending[a] = self.default_action(a)
                infos[a]["move"] = self._pending[a]
            elif self.invalid_action == "retry" and self._tries[a] < self.retries:
                self._tries[a] += 1
                rewards[a] += self.invalid_penalty
                again.append(a)
            else:
                forfeit = a
        if forfeit is not None:
            rewards = {a: (self.invalid_penalty if a == forfeit else 0.0) for a in self.players}
            self.done = True
        elif not again:
            moves, self._pending = self._pending, {}
            self._tries = {a: 0 for a in self.players}
            for a, r in self.apply(moves).items():
                rewards[a] += float(r)
        for a, r in rewards.items():
            self.returns[a] += r
        obs = {} if self.done else self._observations(again or self.to_act(), retry=again)
        for a in obs:
            infos.setdefault(a, {})["legal_actions"] = self.legal_actions(a)
        done = {"__all__": self.done, **{a: self.done for a in self.players}}
        return obs, rewards, done, {"__all__": False}, infos

    def _observations(self, agents: Sequence[str], retry: Sequence[str] = ()) -> Dict[str, Chat]:
        if not hasattr(self, "_last_prompt"):
            self._last_prompt: Dict[str, str] = {}
        out = {}
        for a in agents:
            if a in retry:
                legal = ", ".join(self.legal_actions(a))
                prompt = f"Invalid reply. Answer with exactly one legal action: {legal}"
            else:
                prompt = self.observe(a)
            self._last_prompt[a] = prompt
            out[a] = self.prompt_chat(a, prompt)
        return out

    def prompt_chat(self, agent: str, prompt: str) -> Chat:
        """The chat ``agent`` answers: system prompt, then (``history="full"``) the game so far, then ``prompt``."""
        chat = self.chats[agent]
        head = chat[:1] if chat and chat[0]["role"] == "system" else []
        past = chat[len(head):] if self.history == "full" else []
        return head + past + [{"role": "user", "content": prompt}]

    def episode_metrics(self) -> Dict[str, float]:
        """Per-seat returns, ``invalid_rate`` and :meth:`game_metrics` of the finished game."""
        replies = sum(self.n_replies.values())
        out = {f"return_{a}": r for a, r in self.returns.items()}
        out["invalid_rate"] = sum(self.n_invalid.values()) / max(replies, 1)
        out.update(self.game_metrics())
        return out

    def fit(self, algo: str, **overrides):
        """Train ``algo`` (an LLM self-play algorithm: ``mars``, ``advantage_alignment``, ...) on this game."""
        from marl.api import fit

        return fit(self, algo, **overrides)

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.family}:{self.scenario} seats={self.players}>"

    __str__ = __repr__  # gymnasium's __str__ expects a gymnasium EnvSpec in self.spec
