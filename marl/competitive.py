"""Competitive evaluation: games between policies and bots, seat by seat.

An env's *seats* are its teams (``EnvInfo.teams``; a two-player zero-sum game has one
team per player). A *player* fills one seat: a trained :class:`~marl.policy.Policy`
(it acts for every group, and only the seat's groups are used) or a bot
(:func:`make_bot`). A game's outcome for a seat is read off the team returns of the
episode: *win* when the seat's return is the strict maximum, *draw* when it ties the
maximum, *loss* otherwise.

* :func:`play` plays ``episodes`` games with a fixed seating and counts the outcomes.
* :func:`versus` plays a policy in every seat against an opponent in all the others:
  win/draw/loss per seat.
* :func:`cross_play` plays every ordered pair of a population (both seatings of a
  two-seat game) and returns the score matrix (win 1, draw 1/2) and the games.
* :func:`ratings` rates the population from those games with OpenSkill's
  Plackett-Luce model (Weng & Lin 2011, JMLR 12; ``openskill`` package), reported as
  ``mu``, ``sigma`` and the conservative ``ordinal = mu - 3 sigma``.

Envs that play whole games themselves (text games, whose players are language models
and the game's own bots) register a game runner (:func:`register_game_runner`); every
function here then takes them as it takes a batched env, seats being the game's players.

No env or algorithm is imported here: bots are registered by name (:func:`register_bot`).
"""

from __future__ import annotations

import copy
import functools
import itertools
import random
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

import numpy as np
import torch

from marl.callbacks import Callback
from marl.env import EnvInfo, MultiAgentEnv, Step
from marl.errors import MarlError, unknown_choice
from marl.plugins import load_target

OUTCOMES = ("win", "draw", "loss")


# --------------------------------------------------------------------------- bots


class RandomBot:
    """Uniformly random legal actions: discrete groups sample the ``avail_actions`` mask,
    continuous groups sample their Box uniformly. Seeded (``seed``) for repeatable games.

    ``act(step)`` returns group -> ``[B, N_g]`` int64 (``[B, N_g, A]`` float32 continuous).
    """

    def __init__(self, info: EnvInfo, seed: int = 0):
        self.info = info
        self.gen = torch.Generator().manual_seed(int(seed))

    def reset(self) -> None:
        """Nothing to forget between episodes."""

    def act(self, step: Step) -> Dict[str, torch.Tensor]:
        out = {}
        for name, g in self.info.groups.items():
            obs = step.obs[name]
            if g.discrete:
                avail = step.avail_actions.get(name)
                w = torch.ones(*obs.shape[:2], g.n_actions) if avail is None else avail.float()
                w = torch.where(w.sum(-1, keepdim=True) > 0, w, torch.ones_like(w))  # dead rows: any action
                out[name] = torch.multinomial(w.reshape(-1, g.n_actions), 1, generator=self.gen).view(obs.shape[:2])
            else:
                lo = torch.as_tensor(g.action_space.low, dtype=torch.float32)
                hi = torch.as_tensor(g.action_space.high, dtype=torch.float32)
                u = torch.rand(*obs.shape[:2], lo.numel(), generator=self.gen)
                out[name] = lo + u * (hi - lo)
        return out


_BOTS: Dict[str, Callable[[EnvInfo, int], Any]] = {"random": RandomBot}


def register_bot(name: str, factory: Callable[[EnvInfo, int], Any]) -> None:
    """Make ``factory(info, seed)`` available as the bot ``name`` (``opponent=name`` on the
    command line); the object needs ``reset()`` and ``act(step) -> group -> actions``."""
    _BOTS[name] = factory


def bot_names() -> List[str]:
    return sorted(_BOTS)


def make_bot(name: str, info: EnvInfo, seed: int = 0) -> Any:
    """The bot ``name`` for an env with ``info``.

    Raises:
        MarlError: an unknown bot name (the message lists the registered ones).
    """
    if name not in _BOTS:
        raise unknown_choice("bot", name, bot_names())
    return _BOTS[name](info, seed)


# --------------------------------------------------------------------------- game runners
# Envs that play whole games themselves (text games: a game is a conversation, its players
# are language models and the game's own bots) plug in here, so versus, cross_play, the
# ratings and ``marl league`` take them unchanged. Core never imports them: a runner is
# registered, or named by the env class as a "module:Class" string imported on first use.
_GAME_RUNNERS: List[Tuple[Callable[[Any], bool], Any]] = []


def _is_instance(cls: type, env: Any) -> bool:
    return isinstance(env, cls)


def register_game_runner(accepts: Callable[[Any], bool], runner: Any) -> None:
    """Play the envs for which ``accepts(env)`` is true with ``runner``, an object with
    ``seats(env) -> [seat]``, ``bot(env, name, seed) -> player``, ``check_player(player, env)``
    (raises :class:`MarlError` for a player that cannot play ``env``) and
    ``play(env, seating, episodes, seed) -> [[return of each seat] per game]``."""
    _GAME_RUNNERS.insert(0, (accepts, runner))


def game_runner(env: Any) -> Optional[Any]:
    """The runner of ``env``: a registered one, else the one its class names in a
    ``game_runner = "module:Class"`` attribute (imported on first use, so the env's module
    need not import its algorithm family), else ``None`` for a batched tensor env (played here)."""
    found = next((r for accepts, r in _GAME_RUNNERS if accepts(env)), None)
    path = getattr(type(env), "game_runner", None)
    if found is None and isinstance(path, str):
        found = load_target(path)()
        register_game_runner(functools.partial(_is_instance, type(env)), found)
    return found


def env_seats(env: Any) -> List[str]:
    """The seats of ``env``: its runner's seats, else :func:`seats_of` its info."""
    runner = game_runner(env)
    return runner.seats(env) if runner is not None else seats_of(env.info)


def bot_for(env: Any, name: str, seed: int = 0) -> Any:
    """The bot ``name`` for ``env``: the game's own bot where a runner plays ``env`` (text
    games: ``env.bots()``), else :func:`make_bot`.

    Raises:
        MarlError: an unknown bot name (the message lists the valid ones).
    """
    runner = game_runner(env)
    return runner.bot(env, name, seed) if runner is not None else make_bot(name, env.info, seed)


# --------------------------------------------------------------------------- games


@dataclass
class Record:
    """Outcome counts of one seat: ``win``, ``draw``, ``loss`` (games) and ``returns`` (the seat's
    team return of every game, in the env's reward units)."""

    win: int = 0
    draw: int = 0
    loss: int = 0
    returns: List[float] = field(default_factory=list)

    @property
    def games(self) -> int:
        return self.win + self.draw + self.loss

    def rates(self) -> Dict[str, float]:
        """``win_rate``, ``draw_rate``, ``loss_rate`` and ``score`` (win 1, draw 1/2), each in [0, 1]."""
        n = max(self.games, 1)
        return {
            "win_rate": self.win / n,
            "draw_rate": self.draw / n,
            "loss_rate": self.loss / n,
            "score": (self.win + 0.5 * self.draw) / n,
            "games": self.games,
        }


def seats_of(info: EnvInfo) -> List[str]:
    """The env's seats: its teams, in the order ``EnvInfo.teams`` lists them."""
    return list(info.teams)


def _team_groups(info: EnvInfo) -> Dict[str, List[str]]:
    out: Dict[str, List[str]] = {t: [] for t in info.teams}
    for name, g in info.groups.items():
        if g.team not in out:
            raise MarlError(f"Group {name!r} is in team {g.team!r}, which is not one of the env's teams {list(out)}.")
        out[g.team].append(name)
    return out


def outcome(returns: Sequence[float], seat: int) -> str:
    """``"win"`` / ``"draw"`` / ``"loss"`` of seat index ``seat`` given every seat's return."""
    best = max(returns)
    if returns[seat] < best:
        return "loss"
    return "win" if sum(r == best for r in returns) == 1 else "draw"


def play(env: MultiAgentEnv, seating: Mapping[str, Any], episodes: int, seed: int = 0) -> Dict[str, Record]:
    """Play ``episodes`` games of ``env`` with ``seating`` (seat/team -> player) and count outcomes.

    Each player's ``act(step)`` is called on the whole batched step; only the groups of its seat
    are used. Policies act greedily unless built with ``explore=True``.

    Args:
        env: a batched competitive env (``B`` copies play ``B`` games at once).
        seating: every seat of :func:`seats_of` -> a player (a ``Policy`` or a bot).
        episodes: games to finish (>= 1).
        seed: ``env.reset(seed)``.
    Returns:
        seat -> :class:`Record`.
    Raises:
        MarlError: a seat missing from or unknown to ``seating``, or ``episodes`` < 1.
    """
    info = env.info
    seats = env_seats(env)
    if sorted(seating) != sorted(seats):
        raise MarlError(f"seating names seats {sorted(seating)}; this env's seats (teams) are {seats}.")
    if episodes < 1:
        raise MarlError(f"episodes must be >= 1, got {episodes}.")
    records = {s: Record() for s in seats}
    runner = game_runner(env)
    if runner is not None:  # the env plays whole games itself (text games)
        for returns in runner.play(env, seating, episodes, seed):
            _count(records, seats, [float(r) for r in returns])
        return records
    groups = _team_groups(info)
    step = env.reset(seed=seed)
    for p in seating.values():
        p.reset()
    totals = torch.zeros(env.num_envs, len(seats))
    limit = (info.episode_limit or 1000) * (episodes // env.num_envs + 2) * 2
    for _ in range(limit):
        actions: Dict[str, torch.Tensor] = {}
        for s in seats:
            acts = seating[s].act(step)
            actions.update({g: acts[g] for g in groups[s]})
        step = env.step(actions)
        totals += torch.stack([sum(step.reward[g].sum(-1) for g in groups[s]) for s in seats], dim=-1)
        for row in step.done.nonzero().flatten().tolist():
            if records[seats[0]].games < episodes:
                _count(records, seats, totals[row].tolist())
            totals[row] = 0
        if records[seats[0]].games >= episodes:
            break
    return records


def _count(records: Dict[str, Record], seats: List[str], returns: List[float]) -> None:
    for i, s in enumerate(seats):
        r = records[s]
        setattr(r, outcome(returns, i), getattr(r, outcome(returns, i)) + 1)
        r.returns.append(returns[i])


def versus(env: MultiAgentEnv, player: Any, opponent: Any, episodes: int, seed: int = 0) -> Dict[str, Dict[str, float]]:
    """``player`` in each seat in turn, ``opponent`` in every other seat: seat -> rates
    (:meth:`Record.rates`) of ``player`` over ``episodes`` games per seat."""
    out = {}
    seats = env_seats(env)
    for s in seats:
        seating = {t: (player if t == s else opponent) for t in seats}
        out[s] = play(env, seating, episodes, seed)[s].rates()
    return out


def versus_metrics(env: Any, player: Any, opponent: str, episodes: int, seed: int = 0) -> Dict[str, float]:
    """:func:`versus` against the bot named ``opponent`` (:func:`bot_for`), flattened to the
    metric names every evaluation reports: ``vs_<opponent>/<seat>/{win_rate, draw_rate,
    loss_rate, score}``, each in [0, 1].

    Raises:
        MarlError: an unknown bot name (the message lists the valid ones).
    """
    rates = versus(env, player, bot_for(env, opponent, seed), episodes, seed)
    return {f"vs_{opponent}/{seat}/{k}": float(v) for seat, r in rates.items() for k, v in r.items() if k != "games"}


# --------------------------------------------------------------------------- populations


@dataclass
class League:
    """Results of :func:`cross_play`.

    Attributes:
        names: the population, in order.
        score: ``[P, P]`` array, ``score[i, j]`` = mean score (win 1, draw 1/2) of ``names[i]``
            against ``names[j]`` over every seating (a two-seat game: both seats).
        games: one ``(name in seat 0, name in seat 1, ..., outcome per seat)`` tuple per game:
            ``(seating names, returns)``.
        ratings: name -> ``{"mu", "sigma", "ordinal"}`` (:func:`ratings`), empty until rated.
    """

    names: List[str]
    score: np.ndarray
    games: List[Tuple[Tuple[str, ...], Tuple[float, ...]]]
    ratings: Dict[str, Dict[str, float]] = field(default_factory=dict)


def cross_play(env: MultiAgentEnv, players: Mapping[str, Any], episodes: int, seed: int = 0) -> League:
    """Every ordered pair ``(i, j)``, ``i != j``, of ``players``: ``i`` in seat 0 and ``j`` in every
    other seat for ``episodes`` games, then the reverse seating, so ``score[i, j]`` (``i``'s mean
    score against ``j``) averages ``i`` in seat 0 and ``i`` in seat 1. The diagonal is 1/2 (not
    played). With more than two seats, ``j`` fills all seats but one.

    Raises:
        MarlError: fewer than two players, or an env with fewer than two seats.
    """
    names = list(players)
    seats = env_seats(env)
    if len(names) < 2 or len(seats) < 2:
        raise MarlError(
            f"cross_play needs >= 2 players and a game with >= 2 seats (teams); got players {names} and seats {seats}."
        )
    P = len(names)
    score = np.full((P, P), 0.5)  # a player against itself scores 1/2 by symmetry: not played
    games: List[Tuple[Tuple[str, ...], Tuple[float, ...]]] = []
    for i, j in itertools.permutations(range(P), 2):
        who = tuple(names[i] if k == 0 else names[j] for k in range(len(seats)))
        rec = play(env, {s: players[n] for s, n in zip(seats, who)}, episodes, seed)
        games += [(who, tuple(rec[s].returns[n] for s in seats)) for n in range(rec[seats[0]].games)]
        # score starts at 1/2; each of the two seatings adds half its score minus 1/4, so after
        # (i, j) and (j, i) score[i, j] is the mean of i in seat 0 and i in seat 1
        score[i, j] += rec[seats[0]].rates()["score"] / 2 - 0.25
        score[j, i] += rec[seats[1]].rates()["score"] / 2 - 0.25
    return League(names=names, score=score, games=games)


def ratings(league: League, seed: int = 0, passes: int = 3) -> Dict[str, Dict[str, float]]:
    """OpenSkill Plackett-Luce ratings of ``league.names`` from ``league.games``.

    The games are shuffled (``seed``) and fed ``passes`` times, so the online update does
    not depend on the order :func:`cross_play` played them in. Self-play games (one name
    in every seat) carry no information and are skipped. Ties (draws) share a rank.

    Returns:
        name -> ``{"mu", "sigma", "ordinal"}`` (``ordinal = mu - 3 sigma``); also stored in
        ``league.ratings``.
    """
    from openskill.models import PlackettLuce

    model = PlackettLuce()
    rated = {n: model.rating(name=n) for n in league.names}
    games = [g for g in league.games if len(set(g[0])) > 1]
    rng = random.Random(seed)
    for _ in range(passes):
        rng.shuffle(games)
        for who, returns in games:
            ranks = [-r for r in returns]  # lower rank = better; equal returns tie
            new = model.rate([[rated[n]] for n in who], ranks=ranks)
            for n, team in zip(who, new):
                rated[n] = team[0]
    league.ratings = {n: {"mu": r.mu, "sigma": r.sigma, "ordinal": r.ordinal()} for n, r in rated.items()}
    return league.ratings


# --------------------------------------------------------------------------- during training


class CompetitiveEval(Callback):
    """Win-rate curves of a competitive run: every ``every`` iterations, the current greedy
    policy plays ``episodes`` games per seat against each bot in ``bots`` and against the
    snapshot of itself from ``lag`` evaluations earlier (its *past self*).

    The past self samples from its policy (greedy play against greedy play would replay a
    single game). Logged metrics (progress.csv / TensorBoard), per seat ``s``: ``vs_<bot>/<s>/win_rate``,
    ``.../draw_rate``, ``.../loss_rate``, ``.../score`` and ``vs_past/<s>/...``. Snapshots live
    in memory only: after a resume the past-self curve restarts.

    Args:
        every: iterations between evaluations (>= 1).
        episodes: games per seat and opponent (>= 1).
        bots: names of :func:`make_bot` bots.
        lag: evaluations between the current policy and the past self it plays (>= 1).
        num_envs: env copies of the evaluation env.
    Raises:
        MarlError: a bad count or an unknown bot name (at :meth:`on_fit_start`).
    """

    def __init__(
        self, every: int = 10, episodes: int = 100, bots: Sequence[str] = ("random",), lag: int = 2, num_envs: int = 32
    ):
        for k, v in {"every": every, "episodes": episodes, "lag": lag, "num_envs": num_envs}.items():
            if not isinstance(v, int) or v < 1:
                raise MarlError(f"CompetitiveEval {k} must be a whole number >= 1, got {v!r}.")
        self.every, self.episodes, self.bots, self.lag, self.num_envs = every, episodes, list(bots), lag, num_envs
        self._snapshots: List[Any] = []
        self._calls = 0
        self._env: Optional[MultiAgentEnv] = None

    def on_fit_start(self, trainer) -> None:
        from marl.mapping import PolicyMapping

        self._env = trainer.run.make_eval_env(num_envs=self.num_envs)
        for b in self.bots:
            make_bot(b, self._env.info)
        table = dict(trainer.run.agent_to_module)
        self._mapping = PolicyMapping(
            self._env.info, share=lambda agent, *_: table[agent], agent_id=trainer.cfg.agent_id
        )

    def on_iteration_end(self, trainer, metrics):
        self._calls += 1
        if self._calls % self.every or self._env is None:
            return None
        policy = trainer.make_policy(self._mapping)
        opponents = {f"vs_{b}": make_bot(b, self._env.info, seed=self._calls) for b in self.bots}
        if len(self._snapshots) >= self.lag:
            opponents["vs_past"] = self._snapshots[-self.lag]
        past = copy.copy(policy)
        past.explore = True  # the past self samples its moves: greedy against greedy replays one game
        self._snapshots = (self._snapshots + [past])[-self.lag :]
        out = {}
        for label, opp in opponents.items():
            for seat, rates in versus(self._env, policy, opp, self.episodes, seed=self._calls).items():
                out.update({f"{label}/{seat}/{k}": float(v) for k, v in rates.items() if k != "games"})
        return out

    def on_fit_end(self, trainer, result) -> None:
        if self._env is not None:
            self._env.close()
