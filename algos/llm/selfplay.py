"""LLM self-play algorithms: MARS, Advantage Alignment, REINFORCE and GRPO (an RLlib ``Algorithm``).

``training_step``: every env runner plays ``games_per_iteration`` games
(:class:`~marl.algos.llm.runner.TextEnvRunner`), the turns' advantages are
computed here (:func:`turn_advantages`), one row per trained reply goes to the
``LearnerGroup`` (:class:`~marl.algos.llm.learner.LLMLearner`; ``num_learners``,
``num_gpus_per_learner``), and the new weights are synced to the runners. Every
``eval_every`` iterations the policy plays ``eval_games`` games against each
fixed opponent of ``eval_opponents``; results are logged as ``vs_<bot>_<metric>``.

Estimators (:mod:`marl.algos.llm.advantages`; ``docs/algorithms/llm_selfplay.md``):

* ``mars`` — turn-level return-to-go (gamma 1), normalised per seat role over
  the batch (Yuan, Xu et al. 2025, arXiv 2510.15414, reconstructed from its
  official code; ``role_norm=False`` pools the roles: the paper's ablation);
* ``advantage_alignment`` — RLOO per-step advantages A1 (Piche et al. 2025,
  arXiv 2511.19405, official code) and ``A* = A1 + beta * w * A2`` with the
  co-player's A2 (Duque et al. 2025, arXiv 2406.14662; ``aa_variant``
  ``published`` (k < t) or ``jit`` (k <= t));
* ``reinforce`` — the same RLOO advantages without the alignment term (naive self-play);
* ``grpo`` — one group-normalised return per trajectory, seats pooled (MARS Fig. 1 "naive GRPO");
* ``rae`` — role-conditioned advantage estimation: the trajectory return minus a moving
  average of that seat's returns kept across iterations (``rae_decay``; SPIRAL, Liu et al.
  2025, arXiv 2506.24119), ``gamma^(turns left)`` on each turn.

``filter_zero_advantage`` drops replies whose advantage is exactly 0 from the update (SPIRAL).

``reward_sharing="sum"`` trains every seat on the sum of all seats' rewards
(the prosocial control; ``docs/algorithms/llm_selfplay.md``, "Measured").
"""

from __future__ import annotations

import copy
import time
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Tuple

import numpy as np
from ray.rllib.policy.policy import PolicySpec
import gymnasium as gym

from marl.algos.llm.batches import turn_advantages, turns_to_batch  # noqa: F401  (re-exported)
from marl.algos.llm.config import LLMConfig
from marl.algos.llm.games import Turn, check_opponent_names, evaluate
from marl.algos.llm.learner import LLMLearner
from marl.algos.llm.models import check_sources
from marl.algos.llm.policy import CausalLMModule, Generator, load_tokenizer
from marl.algos.llm.runner import TextEnvRunner
from marl.config import config_view
from marl.engine.spec import build_algorithm_config
from marl.engine.trainer import StepOutput, Trainer
from marl.env import MarlError


# ============================================================ policy for users
class TextPolicy:
    """The trained LM(s) with their generator: ``reply(chats)`` and ``evaluate(opponent, games)``.

    Attributes:
        lms: module id -> causal LM; generator: :class:`~marl.algos.llm.policy.Generator`.
    """

    def __init__(
        self, lms: Dict[str, Any], generator: Generator, agent_to_module: Dict[str, str], make_env, temperature: float
    ):
        self.lms, self.generator, self.agent_to_module = lms, generator, agent_to_module
        self.make_env, self.temperature = make_env, temperature

    def reply(self, chats, seat: Optional[str] = None, legal=None) -> List[str]:
        """Generated replies to a list of chats (the model of ``seat``; default: the first module)."""
        mid = self.agent_to_module[seat] if seat else next(iter(self.lms))
        return self.generator.generate(self.lms[mid], chats, legal)[2]

    def evaluate(self, opponent: str = "random", games: int = 100) -> Dict[str, float]:
        """Mean metrics of ``games`` games against a fixed ``opponent`` (see :func:`runner.evaluate`)."""
        stats = evaluate(
            self.make_env, self.agent_to_module, self.lms, self.generator, opponent, games, self.temperature
        )
        return {k: float(np.mean(v)) for k, v in stats.items()}

    def evaluate_episodes(self, episodes: int, opponent: str = "random", **unused: Any) -> Dict[str, float]:
        """``Result.evaluate`` for text games: :meth:`evaluate` over ``episodes`` games and, against a
        bot, the competitive metrics of tensor games (``vs_<bot>/<seat>/win_rate``, ``draw_rate``,
        ``loss_rate``, ``score``; :func:`marl.competitive.versus_metrics`) over ``episodes`` more
        games per seat."""
        from marl.competitive import versus_metrics

        out = self.evaluate(opponent=opponent, games=episodes)
        if opponent != "self":
            out.update(versus_metrics(self.make_env(), self, opponent, episodes))
        return out


# ============================================================ algorithm
def game_label(info) -> str:
    """A text game's name in messages: ``family:scenario`` (``ipd`` when they are the same)."""
    return info.scenario if info.scenario == info.family else f"{info.family}:{info.scenario}"


@dataclass(frozen=True)
class TextGameInfo:
    """What the trainer needs to know of the game beside the config (``run.family`` of an LLM run).

    Attributes:
        simultaneous: the seats move at once (ipd, stag_hunt, ...): advantages align seats by round.
        label: ``family:scenario``, the game's name in messages (e.g. a prompt that does not fit).
        free_text_tokens: the default reply budget of the game's free-text turns: its
            ``free_text_chars`` + 1 (EOS), a bound for byte-level and word-level tokenizers (a
            token holds at least one character of ASCII text).
    """

    simultaneous: bool
    label: str = "the text game"
    free_text_tokens: int = 257


def game_context(env) -> TextGameInfo:
    """The :class:`TextGameInfo` of the text game ``env``."""
    return TextGameInfo(bool(env.simultaneous), game_label(env.info), int(env.free_text_chars) + 1)


class LLMSelfPlay(Trainer):
    """Self-play training of a causal LM on a text game (module docstring)."""

    learner_class = LLMLearner
    module_class = CausalLMModule
    config_class = LLMConfig
    learner_metrics = ("policy_loss", "kl", "entropy", "clip_fraction", "tokens_trained_per_s")
    transform_hooks = ("on_batch",)  # games come from foreach_runner, not sample_rollouts (marl/transforms.py)

    MODULE_KEYS = (
        "model",
        "dtype",
        "lora",
        "lora_r",
        "lora_alpha",
        "lora_dropout",
        "lora_target",
        "gradient_checkpointing",
    )

    @classmethod
    def module_config(cls, cfg: LLMConfig, mapping=None, mid=None) -> Dict[str, Any]:
        return {k: getattr(cfg, k) for k in cls.MODULE_KEYS}

    @classmethod
    def check_env(cls, cfg, info) -> None:
        """Raises MarlError: a non-text env, no ``model``, a bad choice, or Advantage Alignment /
        reward sharing on a turn-based game."""
        cfg = config_view(cfg)
        g = next(iter(info.groups.values()))
        if not isinstance(g.action_space, gym.spaces.Text):
            raise MarlError(
                f"{cfg.algo} trains language models on text games (ipd, stag_hunt, chicken, "
                f"trust_and_split, openspiel); {info.family}:{info.scenario} is not one."
            )
        model = cfg.model
        if model is None:
            raise MarlError(f"{cfg.algo} needs model=: a local path or hub id, or a transformers config.")
        if cfg.generator == "vllm":
            import importlib.util

            if importlib.util.find_spec("vllm") is None:
                raise MarlError(
                    "generator='vllm' needs vllm and a GPU: pip install 'marl-rllib[vllm]' (or generator='hf')."
                )
            if not isinstance(model, str):
                raise MarlError(
                    "generator='vllm' loads the model from a path or hub id; a config object cannot be served."
                )
        check_sources(model, cfg.tokenizer)
        if not cfg.opponents or min(cfg.opponents.values()) < 0 or sum(cfg.opponents.values()) <= 0:
            raise MarlError(
                f"opponents must be a dict name -> probability (>= 0, not all 0), e.g. "
                f"{{'self': 0.5, 'pool': 0.5}}; got {cfg.opponents!r}."
            )

    @classmethod
    def family_context(cls, cfg, env, mapping) -> TextGameInfo:
        """The :class:`TextGameInfo` of the game ``env``."""
        return game_context(env)

    @classmethod
    def check_run(cls, cfg, env, mapping) -> None:
        """:meth:`check_text_env`, before Ray starts."""
        cls.check_text_env(cfg, env)

    @classmethod
    def check_text_env(cls, cfg, env) -> None:
        """Checks that need the game object (bots, simultaneous moves)."""
        cfg = config_view(cfg)
        bots = env.bots()
        check_opponent_names(list(cfg.opponents), bots)
        check_opponent_names(list(cfg.eval_opponents or []), bots)
        if not env.simultaneous and (cfg.estimator == "advantage_alignment" or cfg.reward_sharing == "sum"):
            raise MarlError(
                f"{cfg.algo} with estimator={cfg.estimator}, reward_sharing={cfg.reward_sharing} "
                f"aligns seats by round and needs a simultaneous-move game (ipd, stag_hunt, chicken, "
                f"trust_and_split); {env.info.family}:{env.info.scenario} is turn-based."
            )

    @classmethod
    def build_config(cls, cfg, env, mapping):
        """RLlib config (:func:`~marl.engine.spec.build_algorithm_config`) with chats in and replies out
        (``Text`` spaces), TextEnvRunners for sampling and LLMLearners (DDP when ``num_learners`` > 1)."""
        cls.check_text_env(cfg, env)
        text = gym.spaces.Text(max_length=1 << 16)  # RLlib wants spaces
        spaces = {mid: PolicySpec(observation_space=text, action_space=text) for mid in mapping.modules}
        runners = dict(env_runner_cls=TextEnvRunner, num_gpus_per_env_runner=cfg.num_gpus_per_env_runner)
        config = build_algorithm_config(cls, cfg, env, mapping, spaces=spaces, sampling={"env_runners": runners})
        config.torch_ddp_kwargs = {"find_unused_parameters": True}  # LoRA's frozen base / unused heads get no grad
        return config

    # --------------------------------------------------------------- RAE baselines
    def setup(self, config):
        self.role_baselines: Dict[Any, float] = {}  # RAE's per-seat moving averages; kept in checkpoints
        super().setup(config)

    def get_state(self, components=None, *, not_components=None, **kwargs):
        state = super().get_state(components, not_components=not_components, **kwargs)
        state["llm_role_baselines"] = dict(self.role_baselines)
        return state

    def set_state(self, state):
        super().set_state(state)
        if "llm_role_baselines" in state:
            self.role_baselines.clear()
            self.role_baselines.update(state["llm_role_baselines"])

    # --------------------------------------------------------------- iteration
    def training_step(self) -> StepOutput:
        cfg = self.cfg
        t0 = time.perf_counter()
        parts = self.foreach_runner(lambda r: r.sample())
        self._sample_time += time.perf_counter() - t0  # games played (generation included): sample_time_s
        turns, metrics = _merge_parts(parts)
        rollout = {"turns": turns, "metrics": metrics}
        self.run_callbacks.on_rollout(self, rollout)
        adv = turn_advantages(turns, cfg, self.run.family.simultaneous, cfg.group_size, self.role_baselines)
        batch = turns_to_batch(turns, adv, self.run.agent_to_module, self._pad_id(), cfg.filter_zero_advantage)
        # every reply filtered out (all advantages 0): nothing to learn from this iteration
        out = self.update_learners(batch) if batch.policy_batches else {}
        gen_time = sum(p["metrics"]["generate_time_s"] for p in parts)
        out.update(
            tokens_generated_per_s=metrics.pop("tokens_generated") / max(gen_time, 1e-9),
            generate_time_s=gen_time,
            replies_trained=float(sum(t.trained for t in turns)),
            prompts_truncated=float(metrics.pop("prompts_truncated")),
        )
        every = cfg.eval_every
        if every > 0 and (self.progress["iterations"] + 1) % every == 0:
            out.update(self.evaluate_opponents())
            self.write_transcripts([t for p in parts for t in p["transcripts"]])
        return StepOutput({"metrics": metrics}, out)

    def write_transcripts(self, transcripts: List[Dict[str, Any]]) -> None:
        """Sample games of this iteration as JSON lines in ``<run>/transcripts/iteration_<n>.jsonl``
        (nothing is written for a trainer built without a run folder)."""
        if self.run_dir is None or not transcripts:
            return
        import json

        folder = self.run_dir / "transcripts"
        folder.mkdir(parents=True, exist_ok=True)
        with open(folder / f"iteration_{self.progress['iterations'] + 1:06d}.jsonl", "w") as f:
            for t in transcripts:
                f.write(json.dumps(t) + "\n")

    def _pad_id(self) -> int:
        if not hasattr(self, "_pad"):
            tok = load_tokenizer(self.cfg.tokenizer, self.cfg.model, self.cfg.chat_template)
            self._pad = tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id
        return int(self._pad)

    def evaluate_opponents(self, opponents=None, games: Optional[int] = None) -> Dict[str, float]:
        """Mean ``vs_<bot>_<metric>`` over ``games`` games against each fixed opponent
        (default ``eval_opponents``, or every bot of the game), on one env runner (another if it is lost)."""
        games = int(games or self.cfg.eval_games)
        opponents = opponents or self.cfg.eval_opponents or self.first_runner(lambda r: list(r.ensure_env().bots()))
        out = {}
        for opp in opponents:
            stats = self.first_runner(lambda r, o=opp: r.evaluate(o, games))
            out.update({f"vs_{opp}_{k}": float(np.mean(v)) for k, v in stats.items()})
        return out

    GENERATION_KEYS = (
        "tokenizer",
        "chat_template",
        "eval_temperature",
        "top_p",
        "max_new_tokens",
        "constrain_actions",
        "max_context",
        "context_policy",
    )

    @classmethod
    def checkpoint_meta(cls, cfg) -> Dict[str, Any]:
        """Objects a checkpoint needs to act again (the tokenizer may be an object built in code)."""
        return {"llm": {k: getattr(cfg, k) for k in cls.MODULE_KEYS + cls.GENERATION_KEYS}}

    def make_policy(self, mapping) -> TextPolicy:
        """A :class:`TextPolicy` with a copy of the learner's weights."""
        state = self.learner_group.get_state(components="learner/rl_module")["learner"]["rl_module"]
        return self._policy(
            {mid: state[mid] for mid in mapping.modules},
            self.checkpoint_meta(self.cfg)["llm"],
            self.run.agent_to_module,
            self.run.env_spec,
            self.run.env_object,
        )

    @classmethod
    def policy_from_checkpoint(cls, ckpt, meta: Dict[str, Any], env=None) -> TextPolicy:
        """The :class:`TextPolicy` of a checkpoint (``marl.load``); ``env`` replaces the game played by ``evaluate``."""
        from ray.rllib.core.rl_module.rl_module import RLModule

        mids = dict.fromkeys(meta["agent_to_module"].values())
        states = {
            mid: RLModule.from_checkpoint(str(ckpt / "learner_group" / "learner" / "rl_module" / mid)).get_state()
            for mid in mids
        }
        spec = env.spec if env is not None else meta.get("env_spec")
        return cls._policy(states, meta["llm"], meta["agent_to_module"], spec, env)

    @classmethod
    def _policy(cls, states, saved: Dict[str, Any], agent_to_module, spec, env_object) -> TextPolicy:
        """The :class:`TextPolicy` of module states ``states`` with ``saved``, the model and
        generation keys of :meth:`checkpoint_meta` (a plain dict, as checkpoints hold it)."""
        lms = {}
        for mid, st in states.items():
            m = CausalLMModule(model_config={k: saved[k] for k in cls.MODULE_KEYS})
            m.set_state(st)
            m.eval()
            lms[mid] = m.lm
        tok = load_tokenizer(saved.get("tokenizer"), saved.get("model"), saved.get("chat_template"))
        make = spec.make if spec is not None else (lambda: copy.deepcopy(env_object))
        game = game_context(env_object or make())
        gen = Generator(
            tok,
            saved["eval_temperature"],
            saved["top_p"],
            saved["max_new_tokens"],
            saved["constrain_actions"],
            max_context=saved.get("max_context"),
            context_policy=saved.get("context_policy", "truncate"),
            label=game.label,
            free_text_tokens=game.free_text_tokens,
        )
        return TextPolicy(lms, gen, agent_to_module, make, float(saved["eval_temperature"]))


SUMMED_METRICS = ("env_steps", "tokens_generated", "prompts_truncated")  # runners' counters, added up


def _merge_parts(parts: List[Dict[str, Any]]) -> Tuple[List[Turn], Dict[str, Any]]:
    """Concatenate runners' turns (game ids made unique) and metrics."""
    turns: List[Turn] = []
    metrics: Dict[str, Any] = dict.fromkeys(SUMMED_METRICS, 0)
    offset = 0
    for p in parts:
        games = 0
        for t in p["turns"]:
            t.game += offset
            games = max(games, t.game - offset + 1)
            turns.append(t)
        offset += games
        for k, v in p["metrics"].items():
            if isinstance(v, list):
                metrics.setdefault(k, []).extend(v)
            elif k in SUMMED_METRICS:
                metrics[k] += v
    return turns, metrics
