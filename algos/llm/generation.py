"""Generation of the LLM self-play path: :class:`Generator` (chat template -> token ids ->
``transformers`` ``generate``, prompts fitted into the context, optional constrained decoding
to the legal moves) and :class:`VLLMGenerator` (the same through vLLM)."""

from __future__ import annotations

import logging
from typing import Any, Dict, List, Optional, Sequence, Tuple

import torch

from marl.env import MarlError, unknown_choice
from marl.errors import optional_import
from marl.text_params import Param, check_param
from marl.algos.llm.tokenizer import CONTEXT_POLICIES, check_vocabulary, model_context

Chat = List[Dict[str, str]]
log = logging.getLogger("marl.llm")
MOVE_SLACK = 8  # auto budget of a move turn: the longest move + room for "<answer>" tags and EOS
DEFAULT_FREE_TEXT_TOKENS = 257  # auto budget of a free-text turn: TextEnv.free_text_chars (256) + EOS


def _trie(seqs: Sequence[Sequence[int]]) -> Dict[int, Any]:
    root: Dict[int, Any] = {}
    for s in seqs:
        node = root
        for tok in s:
            node = node.setdefault(tok, {})
    return root


class Generator:
    """Replies of a causal LM to a batch of chats, with ``transformers`` ``generate``.

    Reply budget. ``max_new_tokens`` bounds every reply; ``None`` (auto) takes it from the
    game: on a turn with legal moves, the longest move in tokens plus :data:`MOVE_SLACK`
    (room for an ``<answer>`` tag and EOS); on a free-text turn (no legal moves, e.g.
    Trust-and-Split's messages), ``free_text_tokens`` (the game's bound) but at most a
    quarter of the context. A reply never gets more than the context leaves after its
    prompt: a larger budget is clamped to ``context - prompt tokens`` (logged once).

    Every prompt is rendered with the tokenizer's chat template and measured in tokens; a
    prompt whose tokens plus the reply budget exceed the context (the model's positions,
    :func:`model_context`, or ``max_context`` if smaller) is shortened by ``context_policy``:

    * ``"truncate"``: drop the oldest (prompt, reply) pairs of the game so far, keeping the
      system message (rules, role) and the current state, as few as needed;
    * ``"state"``: keep only the system message and the current state;
    * ``"error"``: shorten nothing.

    If even the shortened prompt leaves no room for the shortest complete reply (the longest
    legal move and EOS; one token on a free-text turn), a :class:`MarlError` names the game,
    the token counts and the options, each with where it is set (``make_env`` or ``fit``).
    Batches are left-padded with an attention mask (``generate`` derives the positions from
    it), so a padded row scores its tokens as it would alone; rows whose budgets differ are
    generated in separate batches, so no row runs past the context.

    Args:
        tokenizer: the model's tokenizer, passed through :func:`check_tokenizer`.
        temperature, top_p: sampling parameters (temperature 0 = greedy).
        max_new_tokens: the token budget of one reply, or None (auto, above).
        constrain: sample only the token sequences of the legal moves (then end of reply),
            via ``prefix_allowed_tokens_fn`` (for tiny models; ``docs/algorithms/llm_selfplay.md``);
            a turn without legal moves (free text) is not constrained.
        max_context: prompt + reply token limit below the model's own (None: the model's).
        context_policy: ``"truncate"``, ``"state"`` or ``"error"`` (above).
        label: the game's name in error messages.
        free_text_tokens: the auto budget of a free-text reply (see above).
    Attributes:
        truncated: prompts shortened so far (a counter; :func:`~marl.algos.llm.runner.play` reports it).
        clamped: replies whose budget was clamped to what the context leaves (a counter).
    Raises:
        MarlError: an unknown ``context_policy``; ``max_new_tokens``, ``max_context`` or
            ``free_text_tokens`` not a whole number >= 1 (``max_new_tokens``, ``max_context``: or None).
    """

    def __init__(
        self,
        tokenizer,
        temperature: float = 1.0,
        top_p: float = 1.0,
        max_new_tokens: Optional[int] = None,
        constrain: bool = False,
        max_context: Optional[int] = None,
        context_policy: str = "truncate",
        label: str = "the text game",
        free_text_tokens: int = DEFAULT_FREE_TEXT_TOKENS,
    ):
        if context_policy not in CONTEXT_POLICIES:
            raise unknown_choice("context_policy", context_policy, CONTEXT_POLICIES)
        for name, value, rule in (
            ("max_new_tokens", max_new_tokens, Param("whole", low=1, optional=True)),
            ("max_context", max_context, Param("whole", low=1, optional=True)),
            ("free_text_tokens", free_text_tokens, Param("whole", low=1)),
        ):
            check_param("Generator", name, value, rule)
        self.tok = tokenizer
        self.tok.padding_side = "left"  # decoder-only batches are left-padded for generate
        self.temperature, self.top_p = float(temperature), float(top_p)
        self.max_new_tokens = max_new_tokens
        self.free_text_tokens = free_text_tokens
        self.constrain = bool(constrain)
        self.max_context = max_context
        self.context_policy = context_policy
        self.label = label
        self.truncated = 0
        self.clamped = 0
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

    # --------------------------------------------------------------- reply budgets
    def wanted(self, legal: Sequence[str] = (), limit: Optional[int] = None) -> int:
        """The reply budget before clamping: ``max_new_tokens``, or the game's (class docstring)."""
        if self.max_new_tokens is not None:
            return self.max_new_tokens
        if legal:
            return self.needed(legal) + MOVE_SLACK
        return min(self.free_text_tokens, max(limit // 4, 1)) if limit else self.free_text_tokens

    def needed(self, legal: Sequence[str] = ()) -> int:
        """The shortest budget a complete reply fits in: the longest legal move and EOS (1 on free text)."""
        return max(len(self.action_ids(m)) for m in legal) + 1 if legal else 1

    def budget(self, prompt: Sequence[int], limit: Optional[int], legal: Sequence[str] = ()) -> int:
        """The reply budget of ``prompt``: :meth:`wanted`, clamped to what the context leaves
        (``limit - len(prompt)``); the first clamp is logged."""
        want = self.wanted(legal, limit)
        if limit is None or len(prompt) + want <= limit:
            return want
        self.clamped += 1
        if self.clamped == 1:
            log.warning(
                "%s: reply budget clamped from %d to %d tokens: the prompt takes %d of the context's %d "
                "positions (said once; fit(..., max_new_tokens=...) sets the budget).",
                self.label,
                want,
                limit - len(prompt),
                len(prompt),
                limit,
            )
        return limit - len(prompt)

    def prompt_ids(self, chat: Chat, limit: Optional[int] = None, legal: Sequence[str] = ()) -> List[int]:
        """Token ids of ``chat`` fitted into ``limit`` tokens with the reply (class docstring);
        cached: games revisit the same chats, and template rendering dominated sampling time.

        Raises:
            MarlError: the prompt cannot fit (names the game, token counts and options).
        """
        want, need = self.wanted(legal, limit), self.needed(legal)
        key = (limit, want, need, tuple((m["role"], m["content"]) for m in chat))
        hit = self._cache.get(key)
        if hit is None:
            if len(self._cache) > 200_000:
                self._cache.clear()
            hit = self._cache[key] = self._fit(list(chat), limit, want, need)
        self.truncated += hit[1]
        return list(hit[0])

    def _fit(self, chat: Chat, limit: Optional[int], want: int, need: int) -> Tuple[List[int], bool]:
        """``(ids, shortened)``: the rendered chat, shortened by ``context_policy`` if it does not
        fit with ``want`` reply tokens; with fewer (down to ``need``) if nothing shorter exists."""
        ids = self.render(chat)
        if limit is None or len(ids) + want <= limit:
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
                if len(self.render(short(mid))) + want <= limit:
                    hi = mid
                else:
                    lo = mid + 1
            fitted = self.render(short(lo))
            if len(fitted) + need <= limit:  # with the full budget, or clamped (the shortest prompt)
                return fitted, True
        elif len(ids) + need <= limit:
            return ids, False  # nothing to drop: the reply budget is clamped
        raise self._too_long(len(ids), len(self.render(chat[:head] + chat[-1:])), limit, want, need)

    def _too_long(self, tokens: int, minimal: int, limit: int, want: int, need: int) -> MarlError:
        """The error for a prompt that leaves no room for a complete reply; every option says where it
        goes (``make_env`` or ``fit``), and only options that would shorten the prompt are listed."""
        reply = "the longest legal move and EOS" if need > 1 else "one token of free text"
        options = []
        if self.context_policy == "error":
            options += [
                "fit(..., context_policy='truncate') or fit(..., context_policy='state') (drop the game so far)",
                "make_env(..., history='last') (rules and current state only)",
            ]
        options.append("make_env(..., prompt_style='compact') (a few symbols per turn)")
        options.append(
            "fit(..., max_context=None) (the model's own context)"
            if self.max_context
            else "a model with a longer context, fit(..., model=...)"
        )
        return MarlError(
            f"{self.label}: the prompt is {tokens} tokens (rules and current state alone: {minimal}) and a reply "
            f"needs at least {need} ({reply}), but the context holds {limit} positions "
            f"(context_policy={self.context_policy!r}; the reply budget, {want} tokens, is clamped to what the "
            f"context leaves). Options: {'; '.join(options)}."
        )

    def action_ids(self, move: str) -> List[int]:
        ids = self._moves.get(move)
        if ids is None:
            ids = self._moves[move] = self.tok(move, add_special_tokens=False)["input_ids"]
        return ids

    # --------------------------------------------------------------- generation
    @torch.no_grad()
    def generate(
        self, lm, chats: Sequence[Chat], legal: Optional[Sequence[Sequence[str]]] = None, logprobs: bool = False
    ):
        """Sample one reply per chat.

        Args:
            lm: the causal LM; chats: the chats to answer; legal: per chat, the legal moves
                (the auto reply budget, and the constraint when ``constrain``; an empty list is a
                free-text turn, never constrained).
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
        rows = [list(lg) for lg in legal] if legal is not None else [[] for _ in chats]
        prompts = [self.prompt_ids(c, limit, lg) for c, lg in zip(chats, rows)]
        groups: Dict[int, List[int]] = {}  # budget -> rows: one generate call each (no row outruns the context)
        for i, (p, lg) in enumerate(zip(prompts, rows)):
            groups.setdefault(self.budget(p, limit, lg), []).append(i)
        out: List[Any] = [[None] * len(chats) for _ in range(3)]
        for budget, idx in groups.items():
            part = self._sample(lm, [prompts[i] for i in idx], [rows[i] for i in idx], budget, logprobs)
            for column, values in zip(out, part):
                for k, i in enumerate(idx):
                    column[i] = values[k] if values is not None else None
        responses, texts, logps = out
        return (prompts, responses, texts, logps) if logprobs else (prompts, responses, texts)

    def _sample(self, lm, prompts: List[List[int]], legal: List[List[str]], budget: int, logprobs: bool):
        """``(responses, texts, logps or None)`` of one left-padded batch with one reply budget."""
        L = max(len(p) for p in prompts)
        ids = torch.full((len(prompts), L), self.pad, dtype=torch.long)
        att = torch.zeros((len(prompts), L), dtype=torch.long)
        for i, p in enumerate(prompts):
            ids[i, L - len(p) :] = torch.tensor(p)
            att[i, L - len(p) :] = 1
        device = next(lm.parameters()).device
        ids, att = ids.to(device), att.to(device)
        moves = [[self.action_ids(m) for m in lg] for lg in legal] if self.constrain else []
        # one forward pass when every row picks among one-token moves; a free-text row (no moves) never does
        if moves and all(lg and all(len(m) == 1 for m in lg) for lg in moves):
            responses, logps = self._one_token_moves(lm, ids, att, moves, budget)
            return responses, self._decode(responses), logps
        kw: Dict[str, Any] = dict(max_new_tokens=budget, pad_token_id=self.pad, eos_token_id=self.eos)
        if self.temperature > 0:
            kw.update(do_sample=True, temperature=self.temperature, top_p=self.top_p, top_k=0)
        else:
            kw.update(do_sample=False)
        if any(moves):
            kw["prefix_allowed_tokens_fn"] = self._allowed_fn([_trie(m) if m else None for m in moves], L, lm)
        if logprobs:
            kw.update(output_logits=True, return_dict_in_generate=True)
        was_training = lm.training
        lm.eval()
        out = lm.generate(input_ids=ids, attention_mask=att, **kw)
        lm.train(was_training)
        seqs = (out.sequences if logprobs else out)[:, L:].cpu()
        responses = [self._cut(row.tolist()) for row in seqs]
        if not logprobs:
            return responses, self._decode(responses), None
        logits = torch.stack(out.logits, 1).float().cpu()  # [B, new tokens, vocab], unprocessed
        lp = torch.log_softmax(logits, -1).gather(-1, seqs.unsqueeze(-1)).squeeze(-1)
        return responses, self._decode(responses), [lp[i, : len(r)].tolist() for i, r in enumerate(responses)]

    def _decode(self, responses: List[List[int]]) -> List[str]:
        return [self.tok.decode(r, skip_special_tokens=True) for r in responses]

    def _one_token_moves(self, lm, ids: torch.Tensor, att: torch.Tensor, moves: List[List[List[int]]], budget: int):
        """Constrained decoding when every legal move is one token: one forward pass,
        logits masked to the legal tokens, then EOS (what ``generate`` with the same
        constraint samples, without its per-step overhead). Returns ``(responses, logps)``,
        ``logps`` of the move token under the unmasked distribution (EOS: 0, it is forced).
        Every row must have at least one move (an empty row would mask every logit)."""
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
        two = budget > 1
        responses = [[int(t), self.eos] if two else [int(t)] for t in tok.cpu()]
        move_lp = raw.gather(-1, tok.unsqueeze(-1)).squeeze(-1).cpu().tolist()
        return responses, [[lp, 0.0] if two else [lp] for lp in move_lp]

    def _cut(self, row: List[int]) -> List[int]:
        return row[: row.index(self.eos) + 1] if self.eos in row else row

    def _allowed_fn(self, tries: List[Optional[Dict[int, Any]]], L: int, lm):
        """``prefix_allowed_tokens_fn`` of ``generate``: a row's trie of legal moves, then EOS;
        a row without a trie (a free-text turn) may take any token of the model's vocabulary."""
        eos = [self.eos]
        everything = list(range(lm.get_output_embeddings().weight.shape[0]))

        def allowed(batch_id: int, input_ids: torch.Tensor) -> List[int]:
            node = tries[batch_id]
            if node is None:
                return everything
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
        rows = [list(lg) for lg in legal] if legal is not None else [[] for _ in chats]
        prompts = [self.prompt_ids(c, limit, lg) for c, lg in zip(chats, rows)]
        params = [
            self.vllm.SamplingParams(
                temperature=self.temperature,
                top_p=self.top_p,
                max_tokens=self.budget(p, limit, lg),
                logprobs=0 if logprobs else None,
            )
            for p, lg in zip(prompts, rows)
        ]
        outs = self.engine.generate([{"prompt_token_ids": p} for p in prompts], params, use_tqdm=False)
        responses = [list(o.outputs[0].token_ids) for o in outs]
        texts = [self.tok.decode(r, skip_special_tokens=True) for r in responses]
        if not logprobs:
            return prompts, responses, texts
        logps = [[float(step[t].logprob) for step, t in zip(o.outputs[0].logprobs, r)] for o, r in zip(outs, responses)]
        return prompts, responses, texts, logps
