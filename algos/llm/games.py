"""Playing text games with language models: :func:`play` (whole games, one generation batch per
policy and decision round), :func:`evaluate` (the learner against a fixed opponent) and the
:class:`Turn` record of every reply. Rewards that reach a seat which did not act (an opponent's
winning move) are added to that seat's last turn (the MARS official code's rule: Yuan, Xu et al.
2025, arXiv 2510.15414)."""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Any, Dict, List

from marl.env import MarlError, unknown_choice


@dataclass
class Turn:
    """One reply of one seat. ``step``: the game's decision round; ``k``: the seat's own turn index."""

    game: int
    seat: str
    step: int
    k: int
    trained: bool
    group: int
    prompt_ids: List[int] = field(default_factory=list)
    response_ids: List[int] = field(default_factory=list)
    reward: float = 0.0
    invalid: bool = False


def evaluate(
    make_env,
    agent_to_module: Dict[str, str],
    lms: Dict[str, Any],
    generator,
    opponent: str,
    games: int,
    temperature: float,
) -> Dict[str, List[float]]:
    """Play ``games`` games of the learner against ``opponent`` (a bot name of the game, or
    ``"self"``), the learner taking the seats in turn (game ``g``: seat ``g % n_seats``).

    Returns:
        Per-game metrics from the learner's seat: every per-seat metric
        ``<name>_<seat>`` becomes ``<name>`` (learner), ``opp_<name>`` (the
        opponent) and ``<seat>_<name>`` (the learner in that seat), e.g.
        ``return``, ``opp_return``, ``player_0_win``; other metrics as they are.
    Raises:
        MarlError: an unknown opponent (lists the game's bots).
    """
    envs = [make_env() for _ in range(games)]
    bots = envs[0].bots()
    check_opponent_names([opponent], bots)
    players = envs[0].players
    seats, learner = [], []
    for g in range(games):
        me = players[g % len(players)]
        table = {a: ("module", agent_to_module[a]) for a in players}
        if opponent != "self":
            table.update({a: ("bot", bots[opponent](seed=g)) for a in players if a != me})
        seats.append({"opponent": opponent, "table": table})
        learner.append(me)
    saved, generator.temperature = generator.temperature, temperature
    try:
        play(envs, seats, [10**9 + 7 * g for g in range(games)], lms, generator)
    finally:
        generator.temperature = saved
    return _learner_view(envs, learner)


def _learner_view(envs, learner: List[str]) -> Dict[str, List[float]]:
    out: Dict[str, List[float]] = {}
    for env, me in zip(envs, learner):
        m = env.episode_metrics()
        for key, v in m.items():
            for seat in env.players:
                if key.endswith("_" + seat):
                    name = key[: -len(seat) - 1]
                    name = name if seat == me else f"opp_{name}"
                    out.setdefault(name, []).append(float(v))
                    if seat == me:
                        out.setdefault(f"{me}_{name}", []).append(float(v))
                    break
            else:
                out.setdefault(key, []).append(float(v))
    return out


def check_opponent_names(names, bots) -> None:
    """Raise :class:`MarlError` for an opponent name that is neither "self", "pool" nor a bot of the game."""
    valid = ["self", "pool"] + list(bots)
    for n in names:
        if n not in valid:
            raise unknown_choice("opponent", n, valid)


def play(
    games, seats: List[Dict[str, Any]], seeds: List[int], lms: Dict[str, Any], generator, non_finite: str = "raise"
):
    """Play ``games`` to the end; returns ``(turns, metrics)``.

    Every decision round, the replies of all games waiting for a model are generated in
    one batch per policy (a trained module or a pool copy); bots answer their seats.

    Args:
        games: text envs; seats: per game ``{"table": {seat: (kind, who)}}`` with kind
            ``"module"`` (``who`` = module id, looked up in ``lms``), ``"pool"`` (a frozen
            module) or ``"bot"``; seeds: per game reset seed (also its RLOO group id).
        lms: module id -> causal LM; generator: a :class:`Generator`.
        non_finite: a NaN / infinite reward raises (``"raise"``), becomes 0 (``"mask"``) or passes (``"off"``).
    """
    truncated = lambda: getattr(generator, "truncated", 0)  # noqa: E731 (no generator: bots only)
    t0, before = time.perf_counter(), truncated()
    match = _Match(games, seats, seeds)
    match.non_finite = non_finite
    obs = match.reset()
    while obs:
        requests, replies = match.requests(obs)
        for key, reqs in requests.items():
            lm = lms[key[1]] if key[0] == "module" else reqs[0][4].lm
            tg = time.perf_counter()
            prompts, responses, texts = generator.generate(lm, [r[2] for r in reqs], [r[3] for r in reqs])
            match.gen_time += time.perf_counter() - tg
            for (g, a, _c, _l, _w), p, resp, text in zip(reqs, prompts, responses, texts):
                replies[g][a] = text
                match.gen_tokens += len(resp)
                match.new_turn(g, a, key[0] == "module", p, resp)
        obs = match.advance(replies)
    metrics: Dict[str, Any] = {
        "env_steps": match.env_steps,
        "tokens_generated": match.gen_tokens,
        "generate_time_s": match.gen_time,
        "play_time_s": time.perf_counter() - t0,
        "prompts_truncated": truncated() - before,
    }
    for env in games:
        for k, v in env.episode_metrics().items():
            metrics.setdefault(k, []).append(float(v))
    return match.turns, metrics


class _Match:
    """Bookkeeping of :func:`play`: turns per seat, their rewards, decision rounds."""

    def __init__(self, games, seats: List[Dict[str, Any]], seeds: List[int]):
        self.games, self.seats, self.seeds = games, seats, seeds
        self.turns: List[Turn] = []
        self.last: Dict[tuple, Turn] = {}  # (game, seat) -> its latest turn (collects the rewards that follow)
        self.counts: Dict[tuple, int] = {}
        self.steps: Dict[int, int] = {}
        self.gen_tokens, self.gen_time, self.env_steps = 0, 0.0, 0
        self.non_finite = "raise"

    def reset(self) -> Dict[int, Any]:
        obs = {}
        for g, (env, s) in enumerate(zip(self.games, self.seats)):
            obs[g], _ = env.reset(seed=self.seeds[g])
            for _, (kind, who) in s["table"].items():
                if kind == "bot":
                    who.reset(self.seeds[g])
        self.steps = {g: 0 for g in obs}
        return obs

    def requests(self, obs: Dict[int, Any]):
        """Bots' replies now, and the model requests grouped by policy: ``(requests, replies)``."""
        requests: Dict[Any, List[tuple]] = {}
        replies: Dict[int, Dict[str, str]] = {g: {} for g in obs}
        for g, o in obs.items():
            for a, chat in o.items():
                kind, who = self.seats[g]["table"][a]
                if kind == "bot":
                    replies[g][a] = who.act(self.games[g], a)
                    continue
                key = ("module", who) if kind == "module" else ("pool", id(who))
                requests.setdefault(key, []).append((g, a, chat, self.games[g].legal_actions(a), who))
        return requests, replies

    def new_turn(self, g: int, a: str, trained: bool, prompt_ids=(), response_ids=()) -> Turn:
        k = self.counts.get((g, a), 0)
        self.counts[(g, a)] = k + 1
        turn = Turn(g, a, self.steps[g], k, trained, self.seeds[g], list(prompt_ids), list(response_ids))
        self.turns.append(turn)
        self.last[(g, a)] = turn
        return turn

    def advance(self, replies: Dict[int, Dict[str, str]]) -> Dict[int, Any]:
        """Step every game with its replies; returns the observations of the games still running."""
        nxt = {}
        for g, reply in replies.items():
            env = self.games[g]
            for a in reply:  # bots' turns carry rewards too (co-player advantages, AA)
                if self.seats[g]["table"][a][0] == "bot":
                    self.new_turn(g, a, False)
            o, rew, done, _, info = env.step(reply)
            self.env_steps += 1
            self.steps[g] += 1
            for a, r in rew.items():
                if (g, a) in self.last:
                    self.last[(g, a)].reward += self.finite(g, a, float(r))
            for a, i in info.items():
                if a in reply and (g, a) in self.last:
                    self.last[(g, a)].invalid = bool(i.get("invalid"))
            if not done["__all__"]:
                nxt[g] = o
        return nxt

    def finite(self, g: int, seat: str, r: float) -> float:
        """``r``, checked: a NaN / infinite reward raises a :class:`MarlError` naming the game, the seat
        and the round (``non_finite="raise"``) or becomes 0 (``"mask"``)."""
        if math.isfinite(r) or self.non_finite == "off":
            return r
        if self.non_finite == "mask":
            return 0.0
        info = self.games[g].info
        raise MarlError(
            f"Text game {info.family}:{info.scenario} (game {g}) gave seat '{seat}' the reward {r} in "
            f"decision round {self.steps[g]}. Fix the game, or set non_finite='mask' to replace it by 0."
        )
