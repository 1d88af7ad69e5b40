"""The LLM policy: a Hugging Face causal LM in an RLlib ``TorchRLModule``, and its generation.

* :func:`load_causal_lm` — ``from_pretrained`` on a local path or hub id, or
  ``from_config`` on a ``transformers`` config (tests, tiny models);
* :func:`apply_lora` — LoRA adapters with ``peft`` (only they train);
* :class:`CausalLMModule` — the RLModule; ``forward_train`` returns per-token
  log-probs of the next token (never full-vocabulary logits: vocab x length x
  batch floats would not fit in memory for real LLMs);
* :class:`Generator` — chat template -> token ids -> ``generate`` (temperature,
  top-p, token budget, optional constrained decoding to the legal moves);
  :class:`VLLMGenerator` does the same through vLLM (``pip install marl[vllm]``);
* :func:`word_tokenizer` — a whitespace word-level tokenizer with a chat
  template, for tiny models trained from scratch (no hub access needed).
"""
from __future__ import annotations

import copy
from typing import Any, Dict, List, Optional, Sequence, Tuple

import torch
from ray.rllib.core.rl_module.torch.torch_rl_module import TorchRLModule

from marl.env import MarlError

Chat = List[Dict[str, str]]

# Chat template for tiny word-level models: message contents in order, each reply closed
# by [EOS]; no role words, so the last prompt token is the end of the latest observation
# (measured: with a trailing "assistant" token a 2-layer GPT-2 learned no state-dependent
# IPD policy, with the state as the last token it learned reciprocity).
WORD_CHAT_TEMPLATE = (
    "{% for m in messages %}{{ m['content'] }} {% if m['role'] == 'assistant' %}[EOS] {% endif %}{% endfor %}"
)
WORD_SPECIALS = ["[PAD]", "[UNK]", "[EOS]", "system", "user", "assistant"]


def _transformers():
    try:
        import transformers
    except ImportError as e:  # an optional extra
        raise MarlError("LLM self-play needs transformers: pip install 'marl[llm]'.") from e
    return transformers


def word_tokenizer(words: Sequence[str], chat_template: str = WORD_CHAT_TEMPLATE):
    """A ``PreTrainedTokenizerFast`` whose tokens are whitespace-separated words.

    For tiny models built from a config (tests, CPU reproductions;
    ``docs/algorithms/llm_selfplay.md``, "Measured"):
    every game symbol (``<A>``, ``x``, ``c4`` ...) is one token.

    Args:
        words: the vocabulary (duplicates and the special tokens are skipped).
        chat_template: Jinja chat template (default :data:`WORD_CHAT_TEMPLATE`: contents
            in order, replies closed by ``[EOS]``, no role words).
    Returns:
        The tokenizer; ``[PAD]`` is id 0, ``[EOS]`` ends every message.
    """
    from tokenizers import Tokenizer, models, pre_tokenizers

    vocab: Dict[str, int] = {}
    for w in list(WORD_SPECIALS) + list(words):
        vocab.setdefault(w, len(vocab))
    tok = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    fast = _transformers().PreTrainedTokenizerFast(
        tokenizer_object=tok, pad_token="[PAD]", unk_token="[UNK]", eos_token="[EOS]")
    fast.chat_template = chat_template
    return fast


def tiny_config(vocab_size: int, n_positions: int = 256, n_embd: int = 64, n_layer: int = 2, n_head: int = 4):
    """A ~0.1M-parameter GPT-2 config for ``model=`` in CPU tests (``docs/algorithms/llm_selfplay.md``)."""
    return _transformers().GPT2Config(
        vocab_size=vocab_size, n_positions=n_positions, n_embd=n_embd, n_layer=n_layer, n_head=n_head,
        n_inner=4 * n_embd, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)


def load_causal_lm(model: Any, dtype: Optional[str] = None):
    """Build the causal LM named by ``model``.

    Args:
        model: a local path or hub id (``AutoModelForCausalLM.from_pretrained``),
            a ``transformers.PretrainedConfig`` or a dict with ``model_type``
            (``from_config``: random weights, no download).
        dtype: ``"float32"``, ``"bfloat16"``, ``"float16"`` or None (the checkpoint's).
    Raises:
        MarlError: ``model`` is missing or of another type; transformers not installed.
    """
    tf = _transformers()
    torch_dtype = getattr(torch, dtype) if dtype else None
    if isinstance(model, dict):
        model = tf.AutoConfig.for_model(**model)
    if isinstance(model, tf.PretrainedConfig):
        lm = tf.AutoModelForCausalLM.from_config(model)
        return lm.to(torch_dtype) if torch_dtype is not None else lm
    if isinstance(model, str) and model:
        return tf.AutoModelForCausalLM.from_pretrained(model, dtype=torch_dtype)
    raise MarlError(
        f"model={model!r}: give a local path or hub id (from_pretrained), a transformers config "
        f"or a dict with 'model_type' (from_config)."
    )


def load_tokenizer(tokenizer: Any, model: Any):
    """The tokenizer object: ``tokenizer`` itself, ``AutoTokenizer.from_pretrained(path)``, or
    the model's own path when ``tokenizer`` is None.

    Raises:
        MarlError: no tokenizer can be found (a model built from a config needs ``tokenizer=``).
    """
    if tokenizer is not None and not isinstance(tokenizer, str):
        return tokenizer
    path = tokenizer or (model if isinstance(model, str) else None)
    if path is None:
        raise MarlError("A model built from a config needs tokenizer= (e.g. marl.algos.llm.policy.word_tokenizer(words)).")
    tok = _transformers().AutoTokenizer.from_pretrained(path)
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    return tok


def apply_lora(lm, r: int = 16, alpha: int = 32, dropout: float = 0.0, target: Any = "all-linear"):
    """Wrap ``lm`` with LoRA adapters (``peft``); the base weights are frozen.

    LoRA: Hu et al. 2021, arXiv 2106.09685. Piche et al. 2025 (arXiv 2511.19405)
    use r 32, alpha 64 on all linear layers (official code's default).

    Raises:
        MarlError: peft is not installed.
    """
    try:
        import peft
    except ImportError as e:
        raise MarlError("lora=True needs peft: pip install 'marl[llm]'.") from e
    cfg = peft.LoraConfig(r=int(r), lora_alpha=int(alpha), lora_dropout=float(dropout), target_modules=target,
                          task_type="CAUSAL_LM")
    return peft.get_peft_model(lm, cfg)


class CausalLMModule(TorchRLModule):
    """RLlib module hosting a causal LM (``model_config`` keys below).

    ``model_config``: ``model`` (see :func:`load_causal_lm`), ``dtype``,
    ``lora`` (bool), ``lora_r``, ``lora_alpha``, ``lora_dropout``,
    ``lora_target``, ``gradient_checkpointing``.

    The frozen reference policy for the KL penalty is the LM with its adapters
    disabled (LoRA) or a frozen copy of the initial weights, made on first use
    and kept out of the module's parameters and state.
    """

    def setup(self):
        mc = self.model_config or {}
        lm = load_causal_lm(mc.get("model"), mc.get("dtype"))
        if mc.get("gradient_checkpointing"):
            lm.gradient_checkpointing_enable()
        if mc.get("lora"):
            lm = apply_lora(lm, mc.get("lora_r", 16), mc.get("lora_alpha", 32), mc.get("lora_dropout", 0.0),
                            mc.get("lora_target") or "all-linear")
        self.lm = lm
        self.lora = bool(mc.get("lora"))
        object.__setattr__(self, "_ref", None)  # not a submodule: no params, no state

    # --------------------------------------------------------------- log-probs
    def token_logp(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, entropy: bool = False,
                   reference: bool = False) -> Tuple[torch.Tensor, Optional[torch.Tensor]]:
        """Log-prob of every next token: ``logp[:, j] = log p(ids[:, j+1] | ids[:, :j+1])``.

        Args:
            input_ids, attention_mask: ``[S, L]`` right-padded.
            entropy: also return the next-token entropy ``[S, L-1]`` (nats).
            reference: use the frozen reference policy (no grad).
        Returns:
            ``(logp [S, L-1], entropy [S, L-1] or None)``, float32.
        """
        lm = self._reference() if reference else self.lm
        use_bf16 = input_ids.is_cuda and torch.cuda.is_bf16_supported()
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=use_bf16):
            if reference and self.lora:
                with self.lm.disable_adapter(), torch.no_grad():
                    logits = self.lm(input_ids=input_ids, attention_mask=attention_mask).logits
            else:
                logits = lm(input_ids=input_ids, attention_mask=attention_mask).logits
        # log p = logit - logsumexp: no second [S, L, vocab] tensor of log-probs (large vocabularies)
        lf = logits[:, :-1].float()
        lse = torch.logsumexp(lf, dim=-1)
        logp = lf.gather(-1, input_ids[:, 1:].unsqueeze(-1)).squeeze(-1) - lse
        ent = lse - (torch.softmax(lf, dim=-1) * lf).sum(-1) if entropy else None  # -sum p log p
        return logp, ent

    def _reference(self):
        if self.lora:
            return self.lm
        if self._ref is None:
            ref = copy.deepcopy(self.lm).eval()
            for p in ref.parameters():
                p.requires_grad_(False)
            object.__setattr__(self, "_ref", ref)
        return self._ref

    # --------------------------------------------------------------- RLModule API
    def _forward(self, batch, **kwargs):
        logp, _ = self.token_logp(batch["input_ids"], batch["attention_mask"])
        return {"token_logp": logp}

    def get_inference_action_dist_cls(self):  # actions are text: RLlib's distributions do not apply
        return None

    get_exploration_action_dist_cls = get_train_action_dist_cls = get_inference_action_dist_cls


# ============================================================ generation
def _trie(seqs: Sequence[Sequence[int]]) -> Dict[int, Any]:
    root: Dict[int, Any] = {}
    for s in seqs:
        node = root
        for tok in s:
            node = node.setdefault(tok, {})
    return root


class Generator:
    """Replies of a causal LM to a batch of chats, with ``transformers`` ``generate``.

    Args:
        tokenizer: the model's tokenizer (with a chat template).
        temperature, top_p: sampling parameters (temperature 0 = greedy).
        max_new_tokens: the token budget of one reply.
        constrain: sample only the token sequences of the legal moves (then end
            of reply), via ``prefix_allowed_tokens_fn`` (for tiny models; ``docs/algorithms/llm_selfplay.md``).
    """

    def __init__(self, tokenizer, temperature: float = 1.0, top_p: float = 1.0, max_new_tokens: int = 32,
                 constrain: bool = False):
        self.tok = tokenizer
        self.tok.padding_side = "left"  # decoder-only batches are left-padded for generate
        self.temperature, self.top_p = float(temperature), float(top_p)
        self.max_new_tokens = int(max_new_tokens)
        self.constrain = bool(constrain)
        self.eos = self.tok.eos_token_id
        self.pad = self.tok.pad_token_id if self.tok.pad_token_id is not None else self.eos
        self._cache: Dict[tuple, List[int]] = {}
        self._moves: Dict[str, List[int]] = {}

    def prompt_ids(self, chat: Chat) -> List[int]:
        """Token ids of ``chat`` rendered with the chat template and the generation prompt
        (cached: games revisit the same chats, and template rendering dominated sampling time)."""
        key = tuple((m["role"], m["content"]) for m in chat)
        ids = self._cache.get(key)
        if ids is None:
            if len(self._cache) > 200_000:
                self._cache.clear()
            text = self.tok.apply_chat_template(list(chat), add_generation_prompt=True, tokenize=False)
            ids = self._cache[key] = self.tok(text, add_special_tokens=False)["input_ids"]
        return list(ids)

    def action_ids(self, move: str) -> List[int]:
        ids = self._moves.get(move)
        if ids is None:
            ids = self._moves[move] = self.tok(move, add_special_tokens=False)["input_ids"]
        return ids

    @torch.no_grad()
    def generate(self, lm, chats: Sequence[Chat], legal: Optional[Sequence[Sequence[str]]] = None):
        """Sample one reply per chat.

        Returns:
            ``(prompt_ids, response_ids, texts)``: lists of ``len(chats)``; the
            response ids end with EOS when the reply ended before the budget.
        """
        prompts = [self.prompt_ids(c) for c in chats]
        L = max(len(p) for p in prompts)
        ids = torch.full((len(prompts), L), self.pad, dtype=torch.long)
        att = torch.zeros((len(prompts), L), dtype=torch.long)
        for i, p in enumerate(prompts):
            ids[i, L - len(p):] = torch.tensor(p)
            att[i, L - len(p):] = 1
        device = next(lm.parameters()).device
        if self.constrain and legal is not None and self.max_new_tokens >= 1:
            single = [[self.action_ids(m) for m in lg] for lg in legal]
            if all(len(i) == 1 for lg in single for i in lg):
                responses = self._one_token_moves(lm, ids.to(device), att.to(device), single)
                return prompts, responses, [self.tok.decode(r, skip_special_tokens=True) for r in responses]
        kw: Dict[str, Any] = dict(max_new_tokens=self.max_new_tokens, pad_token_id=self.pad, eos_token_id=self.eos)
        if self.temperature > 0:
            kw.update(do_sample=True, temperature=self.temperature, top_p=self.top_p, top_k=0)
        else:
            kw.update(do_sample=False)
        if self.constrain and legal is not None:
            kw["prefix_allowed_tokens_fn"] = self._allowed_fn([_trie([self.action_ids(m) for m in lg]) for lg in legal], L)
        was_training = lm.training
        lm.eval()
        out = lm.generate(input_ids=ids.to(device), attention_mask=att.to(device), **kw)[:, L:].cpu()
        lm.train(was_training)
        responses = [self._cut(row.tolist()) for row in out]
        texts = [self.tok.decode(r, skip_special_tokens=True) for r in responses]
        return prompts, responses, texts

    def _one_token_moves(self, lm, ids: torch.Tensor, att: torch.Tensor, moves: List[List[List[int]]]):
        """Constrained decoding when every legal move is one token: one forward pass,
        logits masked to the legal tokens, then EOS (what ``generate`` with the same
        constraint samples, without its per-step overhead)."""
        pos = (att.cumsum(-1) - 1).clamp(min=0)  # left padding: positions as generate computes them
        was_training = lm.training
        lm.eval()
        logits = lm(input_ids=ids, attention_mask=att, position_ids=pos).logits[:, -1].float()
        lm.train(was_training)
        allowed = torch.full_like(logits, float("-inf"))
        for i, lg in enumerate(moves):
            allowed[i, [m[0] for m in lg]] = 0.0
        logits = logits + allowed
        if self.temperature > 0:
            probs = torch.softmax(logits / self.temperature, -1)
            tok = torch.multinomial(probs, 1).squeeze(1)
        else:
            tok = logits.argmax(-1)
        responses = [[int(t), self.eos] if self.max_new_tokens > 1 else [int(t)] for t in tok.cpu()]
        return responses

    def _cut(self, row: List[int]) -> List[int]:
        return row[: row.index(self.eos) + 1] if self.eos in row else row

    def _allowed_fn(self, tries: List[Dict[int, Any]], L: int):
        eos = [self.eos]

        def allowed(batch_id: int, input_ids: torch.Tensor) -> List[int]:
            node = tries[batch_id]
            for tok in input_ids[L:].tolist():
                node = node.get(tok)
                if node is None:  # past the move (EOS emitted): only padding follows
                    return eos
            return list(node) or eos

        return allowed


class VLLMGenerator(Generator):
    """:class:`Generator` through vLLM (GPU, ``pip install marl[vllm]``); weights are pushed
    with :meth:`load_weights` after every update.

    Raises:
        MarlError: vllm is not installed.
    """

    def __init__(self, tokenizer, model_path: str, gpu_memory_utilization: float = 0.5, **kwargs):
        try:
            import vllm
        except ImportError as e:
            raise MarlError("generator='vllm' needs vllm and a GPU: pip install 'marl[vllm]'.") from e
        super().__init__(tokenizer, **kwargs)
        self.vllm = vllm
        self.engine = vllm.LLM(model=model_path, gpu_memory_utilization=gpu_memory_utilization)

    def load_weights(self, state_dict: Dict[str, torch.Tensor]) -> None:
        """Copy the learner's (merged) weights into the vLLM engine."""
        model = self.engine.llm_engine.model_executor.driver_worker.model_runner.model
        model.load_weights(state_dict.items())

    def generate(self, lm, chats, legal=None):
        prompts = [self.prompt_ids(c) for c in chats]
        params = self.vllm.SamplingParams(temperature=self.temperature, top_p=self.top_p,
                                          max_tokens=self.max_new_tokens)
        outs = self.engine.generate([{"prompt_token_ids": p} for p in prompts], params, use_tqdm=False)
        responses = [list(o.outputs[0].token_ids) for o in outs]
        return prompts, responses, [self.tok.decode(r, skip_special_tokens=True) for r in responses]
