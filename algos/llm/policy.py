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
* tokenizers (:mod:`marl.algos.llm.tokenizer`, re-exported here): the checks a user's
  own tokenizer must pass, the model's position limit :class:`Generator` fits every
  prompt into, and the word-level and byte-level BPE builders (``docs/llm_models.md``).
"""

from __future__ import annotations

import copy
from typing import Any, Dict, List, Optional, Sequence, Tuple

import torch
from ray.rllib.core.rl_module.torch.torch_rl_module import TorchRLModule

from marl.env import MarlError, unknown_choice
from marl.errors import optional_import
from marl.algos.llm.tokenizer import (  # noqa: F401  (re-exported: the policy module's public names)
    CHATML_TEMPLATE,
    CONTEXT_POLICIES,
    PLAIN_CHAT_TEMPLATE,
    WORD_CHAT_TEMPLATE,
    _transformers,
    bpe_tokenizer,
    check_tokenizer,
    check_vocabulary,
    load_tokenizer,
    model_context,
    word_tokenizer,
)

Chat = List[Dict[str, str]]


def tiny_config(vocab_size: int, n_positions: int = 256, n_embd: int = 64, n_layer: int = 2, n_head: int = 4):
    """A ~0.1M-parameter GPT-2 config for ``model=`` in CPU tests (``docs/algorithms/llm_selfplay.md``)."""
    return _transformers().GPT2Config(
        vocab_size=vocab_size,
        n_positions=n_positions,
        n_embd=n_embd,
        n_layer=n_layer,
        n_head=n_head,
        n_inner=4 * n_embd,
        resid_pdrop=0.0,
        embd_pdrop=0.0,
        attn_pdrop=0.0,
    )


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


def apply_lora(lm, r: int = 16, alpha: int = 32, dropout: float = 0.0, target: Any = "all-linear"):
    """Wrap ``lm`` with LoRA adapters (``peft``); the base weights are frozen.

    LoRA: Hu et al. 2021, arXiv 2106.09685. Piche et al. 2025 (arXiv 2511.19405)
    use r 32, alpha 64 on all linear layers (official code's default).

    Raises:
        MarlError: peft is not installed.
    """
    peft = optional_import("peft", "lora=True needs peft: pip install 'marl[llm]'.")
    cfg = peft.LoraConfig(
        r=int(r), lora_alpha=int(alpha), lora_dropout=float(dropout), target_modules=target, task_type="CAUSAL_LM"
    )
    return peft.get_peft_model(lm, cfg)


def to_numpy_keep_bf16(state: Any) -> Any:
    """RLlib's ``convert_to_numpy`` for module and optimizer states, except that bfloat16 tensors
    (``dtype="bfloat16"``: weights and AdamW moments), which numpy cannot hold, stay CPU torch
    tensors; RLlib's ``set_state`` paths accept both. Tensors are copied (a state is a snapshot)."""
    if isinstance(state, torch.Tensor):
        t = state.detach().to("cpu", copy=True)  # a snapshot: never a view of the live weights
        return t if t.dtype == torch.bfloat16 else t.numpy()
    if isinstance(state, dict):
        return {k: to_numpy_keep_bf16(v) for k, v in state.items()}
    if isinstance(state, (list, tuple)):
        return type(state)(to_numpy_keep_bf16(v) for v in state)
    return state


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
            lm = apply_lora(
                lm,
                mc.get("lora_r", 16),
                mc.get("lora_alpha", 32),
                mc.get("lora_dropout", 0.0),
                mc.get("lora_target") or "all-linear",
            )
        self.lm = lm
        self.lora = bool(mc.get("lora"))
        object.__setattr__(self, "_ref", None)  # not a submodule: no params, no state

    # --------------------------------------------------------------- log-probs
    def token_logp(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        entropy: bool = False,
        reference: bool = False,
        keep: Optional[int] = None,
    ) -> Tuple[torch.Tensor, Optional[torch.Tensor]]:
        """Log-prob of every next token: ``logp[:, j] = log p(ids[:, j+1] | ids[:, :j+1])``.

        Args:
            input_ids, attention_mask: ``[S, L]``, right-padded (``keep`` None) or left-padded
                (``keep`` given: positions are counted from each row's first real token, as
                ``generate`` counts them).
            entropy: also return the next-token entropy (nats).
            reference: use the frozen reference policy (no grad).
            keep: score only the last ``keep`` tokens: the model's vocabulary projection runs
                on the last ``keep + 1`` positions only (``logits_to_keep``), so memory grows with
                the reply length, not the prompt's (a 151k-token vocabulary makes each scored
                position cost ~0.6 MB in float32).
        Returns:
            ``(logp, entropy or None)``, float32, ``[S, L-1]`` (or ``[S, keep]``).
        """
        lm = self._reference() if reference else self.lm
        use_bf16 = input_ids.is_cuda and torch.cuda.is_bf16_supported()
        kw: Dict[str, Any] = {}
        if keep is not None:
            kw = dict(position_ids=(attention_mask.cumsum(-1) - 1).clamp(min=0), logits_to_keep=int(keep) + 1)
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=use_bf16):
            if reference and self.lora:
                with self.lm.disable_adapter(), torch.no_grad():
                    logits = self.lm(input_ids=input_ids, attention_mask=attention_mask, **kw).logits
            else:
                logits = lm(input_ids=input_ids, attention_mask=attention_mask, **kw).logits
        targets = input_ids[:, 1:] if keep is None else input_ids[:, input_ids.shape[1] - int(keep) :]
        # log p = logit - logsumexp: no second [S, L, vocab] tensor of log-probs (large vocabularies)
        lf = logits[:, :-1].float()
        lse = torch.logsumexp(lf, dim=-1)
        logp = lf.gather(-1, targets.unsqueeze(-1)).squeeze(-1) - lse
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
    def get_state(self, components=None, *, not_components=None, inference_only: bool = False, **kwargs):
        """The weights as RLlib passes them around (:func:`to_numpy_keep_bf16`)."""
        return to_numpy_keep_bf16(self.state_dict())

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

    Every prompt is rendered with the tokenizer's chat template and measured in tokens; a
    prompt whose tokens plus ``max_new_tokens`` exceed the context (the model's positions,
    :func:`model_context`, or ``max_context`` if smaller) is shortened by ``context_policy``:

    * ``"truncate"``: drop the oldest (prompt, reply) pairs of the game so far, keeping the
      system message (rules, role) and the current state, as few as needed;
    * ``"state"``: keep only the system message and the current state;
    * ``"error"``: shorten nothing.

    If it still does not fit, a :class:`MarlError` names the game, the token counts and the
    options. Batches are left-padded with an attention mask (``generate`` derives the
    positions from it), so a padded row scores its tokens as it would alone.

    Args:
        tokenizer: the model's tokenizer, passed through :func:`check_tokenizer`.
        temperature, top_p: sampling parameters (temperature 0 = greedy).
        max_new_tokens: the token budget of one reply.
        constrain: sample only the token sequences of the legal moves (then end
            of reply), via ``prefix_allowed_tokens_fn`` (for tiny models; ``docs/algorithms/llm_selfplay.md``).
        max_context: prompt + reply token limit below the model's own (None: the model's).
        context_policy: ``"truncate"``, ``"state"`` or ``"error"`` (above).
        label: the game's name in error messages.
    Attributes:
        truncated: prompts shortened so far (a counter; :func:`~marl.algos.llm.runner.play` reports it).
    Raises:
        MarlError: an unknown ``context_policy``.
    """

    def __init__(
        self,
        tokenizer,
        temperature: float = 1.0,
        top_p: float = 1.0,
        max_new_tokens: int = 32,
        constrain: bool = False,
        max_context: Optional[int] = None,
        context_policy: str = "truncate",
        label: str = "the text game",
    ):
        if context_policy not in CONTEXT_POLICIES:
            raise unknown_choice("context_policy", context_policy, CONTEXT_POLICIES)
        self.tok = tokenizer
        self.tok.padding_side = "left"  # decoder-only batches are left-padded for generate
        self.temperature, self.top_p = float(temperature), float(top_p)
        self.max_new_tokens = int(max_new_tokens)
        self.constrain = bool(constrain)
        self.max_context = int(max_context) if max_context else None
        self.context_policy = context_policy
        self.label = label
        self.truncated = 0
        self.eos = self.tok.eos_token_id
        self.pad = self.tok.pad_token_id if self.tok.pad_token_id is not None else self.eos
        self._cache: Dict[tuple, Tuple[List[int], bool]] = {}
        self._moves: Dict[str, List[int]] = {}
        self._checked: Dict[int, Optional[int]] = {}  # id(lm) -> its context limit (vocabulary checked)

    def limit(self, lm) -> Optional[int]:
        """Prompt + reply tokens allowed with ``lm`` (checks the vocabulary once per model)."""
        key = id(lm)
        if key not in self._checked:
            check_vocabulary(self.tok, lm)
            own = model_context(lm)
            if self.max_context and own and self.max_context > own:
                raise MarlError(f"max_context={self.max_context} exceeds the model's {own} positions.")
            self._checked[key] = self.max_context or own
        return self._checked[key]

    def render(self, chat: Chat) -> List[int]:
        """Token ids of ``chat`` with the chat template and the generation prompt."""
        text = self.tok.apply_chat_template(list(chat), add_generation_prompt=True, tokenize=False)
        return self.tok(text, add_special_tokens=False)["input_ids"]

    def prompt_ids(self, chat: Chat, limit: Optional[int] = None) -> List[int]:
        """Token ids of ``chat`` fitted into ``limit`` tokens with the reply (class docstring);
        cached: games revisit the same chats, and template rendering dominated sampling time.

        Raises:
            MarlError: the prompt cannot fit (names the game, token counts and options).
        """
        key = (limit, tuple((m["role"], m["content"]) for m in chat))
        hit = self._cache.get(key)
        if hit is None:
            if len(self._cache) > 200_000:
                self._cache.clear()
            hit = self._cache[key] = self._fit(list(chat), limit)
        self.truncated += hit[1]
        return list(hit[0])

    def _fit(self, chat: Chat, limit: Optional[int]) -> Tuple[List[int], bool]:
        """``(ids, shortened)``: the rendered chat, shortened by ``context_policy`` if it does not fit."""
        ids = self.render(chat)
        budget = None if limit is None else limit - self.max_new_tokens
        if budget is None or len(ids) <= budget:
            return ids, False
        head = 1 if chat and chat[0]["role"] == "system" else 0
        past = len(chat) - head - 1  # messages between the rules and the current state
        if self.context_policy != "error" and past > 0:
            # pairs dropped, oldest first (a pair keeps user/assistant alternation for strict templates);
            # "state" drops them all, "truncate" the fewest that fit (bisection: length falls with each drop)
            pairs = (past + 1) // 2
            short = lambda k: chat[:head] + chat[head + min(2 * k, past) :]  # noqa: E731
            lo, hi = (pairs, pairs) if self.context_policy == "state" else (1, pairs)
            while lo < hi:
                mid = (lo + hi) // 2
                if len(self.render(short(mid))) <= budget:
                    hi = mid
                else:
                    lo = mid + 1
            fitted = self.render(short(lo))
            if len(fitted) <= budget:
                return fitted, True
        minimal = len(self.render(chat[:head] + chat[-1:]))
        raise MarlError(
            f"{self.label}: the prompt is {len(ids)} tokens (rules and current state alone: {minimal}) and a reply "
            f"may add max_new_tokens={self.max_new_tokens}, but the context holds {limit} positions "
            f"(context_policy={self.context_policy!r}). Options: context_policy='truncate' or 'state' (drop the game "
            f"so far), history='last', prompt_style='compact', a smaller max_new_tokens, or a model with a longer "
            f"context."
        )

    def action_ids(self, move: str) -> List[int]:
        ids = self._moves.get(move)
        if ids is None:
            ids = self._moves[move] = self.tok(move, add_special_tokens=False)["input_ids"]
        return ids

    @torch.no_grad()
    def generate(
        self, lm, chats: Sequence[Chat], legal: Optional[Sequence[Sequence[str]]] = None, logprobs: bool = False
    ):
        """Sample one reply per chat.

        Args:
            lm: the causal LM; chats: the chats to answer; legal: per chat, the legal moves
                (used when ``constrain``).
            logprobs: also return, per reply, the log-probability of each reply token under
                the model's unprocessed next-token distribution (before temperature and top-p),
                the quantity the learner's ``token_logp`` recomputes.
        Returns:
            ``(prompt_ids, response_ids, texts)`` (and ``logps`` if ``logprobs``): lists of
            ``len(chats)``; the response ids end with EOS when the reply ended before the budget.
        Raises:
            MarlError: a prompt cannot fit the context (:meth:`prompt_ids`), or the tokenizer's
                ids exceed the model's vocabulary (:func:`check_vocabulary`).
        """
        limit = self.limit(lm)
        prompts = [self.prompt_ids(c, limit) for c in chats]
        L = max(len(p) for p in prompts)
        ids = torch.full((len(prompts), L), self.pad, dtype=torch.long)
        att = torch.zeros((len(prompts), L), dtype=torch.long)
        for i, p in enumerate(prompts):
            ids[i, L - len(p) :] = torch.tensor(p)
            att[i, L - len(p) :] = 1
        device = next(lm.parameters()).device
        if self.constrain and legal is not None and self.max_new_tokens >= 1:
            single = [[self.action_ids(m) for m in lg] for lg in legal]
            if all(len(i) == 1 for lg in single for i in lg):
                responses, logps = self._one_token_moves(lm, ids.to(device), att.to(device), single)
                texts = [self.tok.decode(r, skip_special_tokens=True) for r in responses]
                return (prompts, responses, texts, logps) if logprobs else (prompts, responses, texts)
        kw: Dict[str, Any] = dict(max_new_tokens=self.max_new_tokens, pad_token_id=self.pad, eos_token_id=self.eos)
        if self.temperature > 0:
            kw.update(do_sample=True, temperature=self.temperature, top_p=self.top_p, top_k=0)
        else:
            kw.update(do_sample=False)
        if self.constrain and legal is not None:
            kw["prefix_allowed_tokens_fn"] = self._allowed_fn(
                [_trie([self.action_ids(m) for m in lg]) for lg in legal], L
            )
        if logprobs:
            kw.update(output_logits=True, return_dict_in_generate=True)
        was_training = lm.training
        lm.eval()
        out = lm.generate(input_ids=ids.to(device), attention_mask=att.to(device), **kw)
        lm.train(was_training)
        seqs = (out.sequences if logprobs else out)[:, L:].cpu()
        responses = [self._cut(row.tolist()) for row in seqs]
        texts = [self.tok.decode(r, skip_special_tokens=True) for r in responses]
        if not logprobs:
            return prompts, responses, texts
        logits = torch.stack(out.logits, 1).float().cpu()  # [B, new tokens, vocab], unprocessed
        lp = torch.log_softmax(logits, -1).gather(-1, seqs.unsqueeze(-1)).squeeze(-1)
        return prompts, responses, texts, [lp[i, : len(r)].tolist() for i, r in enumerate(responses)]

    def _one_token_moves(self, lm, ids: torch.Tensor, att: torch.Tensor, moves: List[List[List[int]]]):
        """Constrained decoding when every legal move is one token: one forward pass,
        logits masked to the legal tokens, then EOS (what ``generate`` with the same
        constraint samples, without its per-step overhead). Returns ``(responses, logps)``,
        ``logps`` of the move token under the unmasked distribution (EOS: 0, it is forced)."""
        pos = (att.cumsum(-1) - 1).clamp(min=0)  # left padding: positions as generate computes them
        was_training = lm.training
        lm.eval()
        logits = lm(input_ids=ids, attention_mask=att, position_ids=pos).logits[:, -1].float()
        lm.train(was_training)
        raw = torch.log_softmax(logits, -1)
        allowed = torch.full_like(logits, float("-inf"))
        for i, lg in enumerate(moves):
            allowed[i, [m[0] for m in lg]] = 0.0
        logits = logits + allowed
        if self.temperature > 0:
            probs = torch.softmax(logits / self.temperature, -1)
            tok = torch.multinomial(probs, 1).squeeze(1)
        else:
            tok = logits.argmax(-1)
        two = self.max_new_tokens > 1
        responses = [[int(t), self.eos] if two else [int(t)] for t in tok.cpu()]
        move_lp = raw.gather(-1, tok.unsqueeze(-1)).squeeze(-1).cpu().tolist()
        return responses, [[lp, 0.0] if two else [lp] for lp in move_lp]

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
        vllm = optional_import("vllm", "generator='vllm' needs vllm and a GPU: pip install 'marl[vllm]'.")
        super().__init__(tokenizer, **kwargs)
        self.vllm = vllm
        self.engine = vllm.LLM(model=model_path, gpu_memory_utilization=gpu_memory_utilization)

    def load_weights(self, state_dict: Dict[str, torch.Tensor]) -> None:
        """Copy the learner's (merged) weights into the vLLM engine."""
        model = self.engine.llm_engine.model_executor.driver_worker.model_runner.model
        model.load_weights(state_dict.items())

    def generate(self, lm, chats, legal=None, logprobs: bool = False):
        """:meth:`Generator.generate` through vLLM (legal-move constraints are not applied)."""
        limit = self.limit(lm)
        prompts = [self.prompt_ids(c, limit) for c in chats]
        params = self.vllm.SamplingParams(
            temperature=self.temperature,
            top_p=self.top_p,
            max_tokens=self.max_new_tokens,
            logprobs=0 if logprobs else None,
        )
        outs = self.engine.generate([{"prompt_token_ids": p} for p in prompts], params, use_tqdm=False)
        responses = [list(o.outputs[0].token_ids) for o in outs]
        texts = [self.tok.decode(r, skip_special_tokens=True) for r in responses]
        if not logprobs:
            return prompts, responses, texts
        logps = [[float(step[t].logprob) for step, t in zip(o.outputs[0].logprobs, r)] for o, r in zip(outs, responses)]
        return prompts, responses, texts, logps
