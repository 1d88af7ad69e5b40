"""TextEnvRunner: an RLlib ``EnvRunner`` that plays ``games_per_iteration`` text games at once.

Every decision round it collects the chats of all games waiting for a model
reply, generates them in one batch per policy (the learner's module, or a past
copy from the opponent pool), lets bots answer their seats, and steps the
games. A game's seats are all played by the learner (``"self"``), or one seat
(drawn at random) by the learner and the other by an opponent drawn from
``opponents`` (a bot name or ``"pool"``).

The games themselves are played by :func:`marl.algos.llm.games.play` (re-exported here with
:class:`~marl.algos.llm.games.Turn` and :func:`~marl.algos.llm.games.evaluate`).
"""

from __future__ import annotations

import copy
import random
from typing import Any, Dict, List

import torch

from marl.engine.resume import rng_state, set_rng_state
from marl.engine.runner import BatchedEnvRunner
from marl.algos.llm.games import Turn, _Match, check_opponent_names, evaluate, play  # noqa: F401  (re-exported)
from marl.algos.llm.policy import Generator, VLLMGenerator, load_tokenizer


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
            free_text_tokens=self.run.family.free_text_tokens,
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
