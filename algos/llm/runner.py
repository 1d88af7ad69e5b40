"""TextEnvRunner: an RLlib ``EnvRunner`` that plays ``games_per_iteration`` text games at once.

Every decision round it collects the chats of all games waiting for a model
reply, generates them in one batch per policy (the learner's module, or a past
copy from the opponent pool), lets bots answer their seats, and steps the
games. A game's seats are all played by the learner (``"self"``), or one seat
(drawn at random) by the learner and the other by an opponent drawn from
``opponents`` (a bot name or ``"pool"``).

Each reply becomes a :class:`Turn`; rewards that reach a seat which did not
act (an opponent's winning move) are added to that seat's last turn (the MARS
official code's rule: Yuan, Xu et al. 2025, arXiv 2510.15414).
"""

from __future__ import annotations

import copy
import math
import random
import time
from dataclasses import dataclass, field
from typing import Any, Dict, List

import torch

from marl.engine.resume import rng_state, set_rng_state
from marl.engine.runner import BatchedEnvRunner
from marl.env import MarlError, unknown_choice
from marl.algos.llm.policy import Generator, VLLMGenerator, load_tokenizer


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


class TextEnvRunner(BatchedEnvRunner):
    """Plays text games with the module's LM (see the module docstring).

    ``sample()`` returns ``{"turns": [Turn], "metrics": {...}}``;
    ``evaluate(bot, games)`` plays the learner against a fixed bot in both seats.
    """

    # ------------------------------------------------------------------ setup
    def attach_env(self, env) -> None:
        """The driver's game is only a template here: the runner plays copies of it."""
        self.make_env(self.new_env())

    def new_env(self):
        """One game, rebuilt from the run's env spec (or a copy of a game built by hand)."""
        return self.run.make_env()

    def make_env(self, env) -> None:
        """Play ``games_per_iteration`` games: ``env`` and fresh copies."""
        n = self.cfg.games_per_iteration
        self.games = [env] + [self.new_env() for _ in range(n - 1)]
        self.env = env
        self.bot_classes = env.bots()
        self.rng = random.Random(self.cfg.seed + 7919 * int(self.worker_index or 0))
        self.game_seed = self.cfg.seed * 1_000_003 + 100_000 * int(self.worker_index or 0)
        self.pool: List[Dict[str, torch.Tensor]] = []
        self._iteration = 0

    def make_module(self):
        spec = self.config.get_multi_rl_module_spec(inference_only=True)
        self.module = spec.build()
        self.module.foreach_module(lambda mid, m: m.eval())
        c = self.cfg
        if torch.cuda.is_available() and (
            c.num_gpus_per_env_runner > 0 or (c.num_env_runners == 0 and c.num_gpus_per_learner > 0)
        ):
            self.module.foreach_module(lambda mid, mod: mod.to("cuda"))  # generate on the GPU
        tok = load_tokenizer(c.tokenizer, c.model, c.chat_template)
        kw = dict(
            temperature=c.temperature,
            top_p=c.top_p,
            max_new_tokens=c.max_new_tokens,
            constrain=c.constrain_actions,
            max_context=c.max_context,
            context_policy=c.context_policy,
            label=self.run.family.label,
        )
        if c.generator == "vllm":
            self.generator = VLLMGenerator(tok, c.model, **kw)
        else:
            self.generator = Generator(tok, **kw)
        self._pool_module = None

    def get_spaces(self):
        return {}

    def set_state(self, state):
        super().set_state(state)
        if isinstance(self.generator, VLLMGenerator) and "rl_module" in state:
            for mid in self.module.keys():
                self.generator.load_weights(self._merged_state(mid))

    def _merged_state(self, mid: str) -> Dict[str, torch.Tensor]:
        lm = self.module[mid].lm
        if hasattr(lm, "merge_and_unload"):  # LoRA: vLLM takes plain weights
            lm = copy.deepcopy(lm).merge_and_unload()
        return lm.state_dict()

    # ------------------------------------------------------------------ exact resume
    def get_sampling_state(self) -> Dict[str, Any]:
        """Opponent draws and the iteration count (it sets the game seeds), plus the process's
        generators on a remote runner. Games are played whole inside :meth:`sample`, so none is
        in progress. The opponent pool of past weights is not saved (one model copy per entry):
        after a resume it refills from the next snapshot (docs/index.md, Resume)."""
        state = {
            "worker_index": int(self.worker_index or 0),
            "text": {"rng": self.rng.getstate(), "iteration": self._iteration, "pool": len(self.pool)},
        }
        if self.worker_index:
            state["rng"] = rng_state()
        return state

    def set_sampling_state(self, state) -> str:
        """Continue from :meth:`get_sampling_state`; returns ``""`` or why sampling differs."""
        if state is None or "text" not in state:
            return f"no saved state for env runner {int(self.worker_index or 0)}"
        self.ensure_env()
        self.rng.setstate(state["text"]["rng"])
        self._iteration = int(state["text"]["iteration"])
        if state.get("rng") is not None and self.worker_index:
            set_rng_state(state["rng"])
        return "the opponent pool of past weights restarts empty" if state["text"]["pool"] else ""

    # ------------------------------------------------------------------ opponents
    def _draw_opponent(self) -> str:
        mix: Dict[str, float] = self.cfg.opponents
        names, weights = list(mix), [float(w) for w in mix.values()]
        return self.rng.choices(names, weights)[0]

    def _snapshot(self) -> None:
        """Keep a copy of the first module's weights in the opponent pool every ``pool_every`` iterations."""
        every = self.cfg.pool_every
        if every <= 0 or self._iteration % every:
            return
        mid = next(iter(self.module.keys()))
        self.pool.append({k: v.detach().clone() for k, v in self.module[mid].state_dict().items()})
        self.pool = self.pool[-self.cfg.pool_size :]

    def _pool_policy(self):
        if not self.pool:
            return None
        mid = next(iter(self.module.keys()))
        if self._pool_module is None:
            self._pool_module = copy.deepcopy(self.module[mid]).eval()
        self._pool_module.load_state_dict(self.rng.choice(self.pool))
        return self._pool_module

    # ------------------------------------------------------------------ sampling
    def sample(self, explore: bool = True, **kwargs) -> Dict[str, Any]:
        """Play one batch of training games (``games_per_iteration``; ``group_size``
        consecutive games share a seed)."""
        self.ensure_env()
        self._iteration += 1
        self._snapshot()
        n, gs = len(self.games), max(self.cfg.group_size, 1)
        pool = self._pool_policy()
        seats: List[Dict[str, Any]] = []
        for g in range(n):
            opp = self._draw_opponent() if g % gs == 0 else seats[g - 1]["opponent"]
            if opp == "pool" and pool is None:
                opp = "self"  # the pool is empty on the first iterations
            seats.append(self._seating(opp, pool))
        seeds = [self.game_seed + self._iteration * n + g // gs for g in range(n)]
        turns, metrics = self.play(self.games, seats, seeds)
        self.num_env_steps_sampled_lifetime += metrics["env_steps"]
        k = self.cfg.transcripts
        transcripts = [
            {"opponent": s["opponent"], "returns": dict(env.returns), "chats": dict(env.chats)}
            for env, s in zip(self.games[:k], seats[:k])
        ]
        return {"turns": turns, "metrics": metrics, "transcripts": transcripts}

    def _seating(self, opponent: str, pool) -> Dict[str, Any]:
        """Who plays each seat of one game: a module id (trained), a pool LM or a bot."""
        players = self.env.players
        table = {a: ("module", self.run.agent_to_module[a]) for a in players}
        if opponent != "self":
            other = self.rng.choice(players)
            if opponent == "pool":
                table[other] = ("pool", pool)
            else:
                bot = self.bot_classes[opponent](seed=self.rng.randrange(1 << 30))
                table[other] = ("bot", bot)
        return {"opponent": opponent, "table": table}

    def play(self, games, seats: List[Dict[str, Any]], seeds: List[int]):
        """Play ``games`` to the end with the given seating; returns ``(turns, metrics)``."""
        lms = {mid: self.module[mid].lm for mid in self.module.keys()}
        return play(games, seats, seeds, lms, self.generator, self.cfg.non_finite)

    # ------------------------------------------------------------------ evaluation
    def evaluate(self, opponent: str, games: int) -> Dict[str, List[float]]:
        """:func:`evaluate` with this runner's modules at ``eval_temperature``."""
        self.ensure_env()
        lms = {mid: self.module[mid].lm for mid in self.module.keys()}
        return evaluate(
            self.new_env, self.run.agent_to_module, lms, self.generator, opponent, games, self.cfg.eval_temperature
        )


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
