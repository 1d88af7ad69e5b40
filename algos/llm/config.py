"""Config keys of LLM self-play (MARS, Advantage Alignment, REINFORCE, GRPO): the engine keys plus
the model, generation, opponents, estimator and loss keys; no agent-network keys."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, List, Optional

from marl.config import EngineConfig, key

ESTIMATORS = ("mars", "advantage_alignment", "reinforce", "grpo", "rae")
REWARD_SHARING = ("none", "sum")
AA_VARIANTS = ("published", "jit")
LOSS_AGG = ("seq_mean_token_mean", "token_mean")
GENERATORS = ("hf", "vllm")
CONTEXT_POLICIES = ("truncate", "state", "error")
DTYPES = ("float32", "bfloat16", "float16")


@dataclass(frozen=True, kw_only=True)
class LLMConfig(EngineConfig):
    """LLM self-play keys (``docs/algorithms/llm_selfplay.md``); values in ``configs/algos/reinforce.yaml``,
    which ``mars.yaml``, ``advantage_alignment.yaml`` and ``grpo.yaml`` start from (``base: reinforce``)."""

    LAYER = "LLM self-play"

    estimator: str = key("advantage estimator", choices=ESTIMATORS)
    # model
    model: Any = key("local path or hub id (from_pretrained), or a transformers config (from_config); required")
    tokenizer: Any = key("path or tokenizer object (needed for a model built from a config); null = the model's")
    chat_template: Optional[str] = key(
        "null = the tokenizer's chat template; 'plain' (role: content lines, for base "
        "models without one) or a Jinja template"
    )
    dtype: Optional[str] = key("weights' dtype; null = the checkpoint's", choices=DTYPES)
    lora: bool = key("train LoRA adapters (peft) instead of all weights")
    lora_r: int = key("LoRA rank", ge=1)
    lora_alpha: int = key("LoRA alpha (scale alpha / r)", ge=1)
    lora_dropout: float = key("LoRA dropout", ge=0, lt=1)
    lora_target: Optional[List[str]] = key("module names that get adapters; null = all linear layers")
    gradient_checkpointing: bool = key("recompute activations in the backward pass (less memory, more time)")
    num_gpus_per_env_runner: float = key(
        "GPUs per remote env runner (generation); a local runner uses the learner's", ge=0
    )
    # generation
    generator: str = key("hf (transformers generate) or vllm (GPU, marl-rllib[vllm])", choices=GENERATORS)
    temperature: float = key("sampling temperature of training games; 0 = greedy", ge=0)
    top_p: float = key("nucleus sampling mass", gt=0, le=1)
    max_new_tokens: Optional[int] = key(
        "reply budget in tokens, clamped to what the context leaves after the prompt; null = from the game "
        "(one move, or the game's bound on a free-text reply)",
        ge=1,
    )
    constrain_actions: bool = key("sample only the tokens of legal moves")
    max_context: Optional[int] = key("prompt + reply tokens; null = the model's max positions", ge=1)
    context_policy: str = key(
        "a prompt that does not fit: truncate (drop the oldest turns, keep rules and state), "
        "state (rules and state only) or error",
        choices=CONTEXT_POLICIES,
    )
    eval_temperature: float = key("sampling temperature against the fixed opponents; 0 = greedy", ge=0)
    # games and opponents
    games_per_iteration: int = key("games per env runner per iteration", ge=1)
    group_size: int = key("consecutive games sharing a seed (baseline group); 1 = the whole batch is one group", ge=1)
    eval_every: int = key("iterations between evaluations against the fixed opponents; 0 = never", ge=0)
    eval_games: int = key("games per fixed opponent in an evaluation", ge=1)
    eval_opponents: Optional[List[str]] = key("bots played in evaluations; null = every bot of the game")
    transcripts: int = key("sample games written to <run>/transcripts/ at every evaluation", ge=0)
    # returns and advantages
    gamma: float = key("discount of returns over the seat's turns", gt=0, le=1)
    reward_scale: float = key("rewards are divided by this", gt=0)
    reward_sharing: str = key(
        "none, or sum: every seat trains on the sum of rewards (prosocial control)", choices=REWARD_SHARING
    )
    beta: float = key("Advantage Alignment weight of the opponent-aware term", ge=0)
    aa_gamma: float = key("Advantage Alignment discount", gt=0, le=1)
    aa_variant: str = key("Advantage Alignment sum: published (k < t) or jit (k <= t)", choices=AA_VARIANTS)
    role_norm: bool = key("MARS: normalise advantages per seat role (false = pooled, the ablation)")
    rae_decay: float = key("RAE (SPIRAL): decay of the per-role moving-average baseline", ge=0, lt=1)
    filter_zero_advantage: bool = key("drop replies whose advantage is exactly 0 from the update (SPIRAL)")
    # loss and optimisation
    clip: float = key("PPO clip epsilon of the token ratio; 0 = plain REINFORCE surrogate", ge=0)
    dual_clip: float = key("dual-clip constant c for negative advantages", gt=1, off=0)
    kl_coef: float = key("weight of the k3 KL to the reference policy", ge=0)
    entropy_coef: float = key("weight of the token entropy bonus", ge=0)
    loss_agg: str = key("token_mean over the batch, or seq_mean_token_mean (mean per reply first)", choices=LOSS_AGG)
    epochs: int = key("passes over each batch (on-policy: 1)", ge=1)
    num_minibatches: int = key("optimizer steps per pass", ge=1)
    max_tokens_per_microbatch: int = key("gradient accumulation bound: padded tokens per forward pass", ge=1)
    adam_beta2: float = key("AdamW beta2", ge=0, lt=1)
    weight_decay: float = key("AdamW weight decay", ge=0)
