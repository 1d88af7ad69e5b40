"""Tokenizers of the LLM self-play path: what a user's model and tokenizer must pass, and two
builders for tests and CPU runs (``docs/llm_models.md``).

* :func:`load_tokenizer` / :func:`check_tokenizer` — chat template, EOS, pad token (EOS, no
  new tokens), left padding; :func:`check_vocabulary` — ids within the embedding table;
  :func:`model_context` — the position limit prompts are fitted into;
* :func:`word_tokenizer` — whitespace word-level, for tiny models trained from scratch;
* :func:`bpe_tokenizer` — byte-level BPE trained on given text (the kind real models ship).
"""

from __future__ import annotations

from typing import Any, Dict, Optional, Sequence

from marl.env import MarlError
from marl.errors import optional_import

# Chat template for tiny word-level models: message contents in order, each reply closed
# by [EOS]; no role words, so the last prompt token is the end of the latest observation
# (measured: with a trailing "assistant" token a 2-layer GPT-2 learned no state-dependent
# IPD policy, with the state as the last token it learned reciprocity).
WORD_CHAT_TEMPLATE = (
    "{% for m in messages %}{{ m['content'] }} {% if m['role'] == 'assistant' %}[EOS] {% endif %}{% endfor %}"
)
WORD_SPECIALS = ["[PAD]", "[UNK]", "[EOS]", "system", "user", "assistant"]

# For base models that ship no chat template (chat_template="plain"): "role: content" lines, the
# reply opened by "assistant:". Instruction-tuned models should keep their own template.
PLAIN_CHAT_TEMPLATE = (
    "{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}assistant:{% endif %}"
)
CONTEXT_POLICIES = ("truncate", "state", "error")
# ChatML, the chat format of Qwen models: <|im_start|>role\ncontent<|im_end|>
CHATML_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def _transformers():
    return optional_import("transformers", "LLM self-play needs transformers: pip install 'marl[llm]'.")


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
        tokenizer_object=tok, pad_token="[PAD]", unk_token="[UNK]", eos_token="[EOS]"
    )
    fast.chat_template = chat_template
    return fast


def bpe_tokenizer(texts: Sequence[str], vocab_size: int = 1000, chat_template: str = CHATML_TEMPLATE):
    """A byte-level BPE tokenizer (the kind GPT-2, Llama and Qwen ship) trained on ``texts``, with
    ChatML special tokens, EOS ``<|im_end|>`` and, like those models' base tokenizers, no pad token.

    For tests and benchmarks that need a real-world tokenizer without a hub download
    (``docs/llm_models.md``); byte-level BPE: Radford et al. 2019 (GPT-2).

    Args:
        texts: training text (e.g. the prompts of the games to play).
        vocab_size: the most tokens (fewer if the text has fewer merges).
        chat_template: Jinja chat template (default :data:`CHATML_TEMPLATE`).
    Returns:
        A ``PreTrainedTokenizerFast``.
    """
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(
        list(texts),
        trainers.BpeTrainer(
            vocab_size=int(vocab_size),
            special_tokens=["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
            initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        ),
    )
    fast = _transformers().PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|im_end|>")
    fast.chat_template = chat_template
    return fast


def load_tokenizer(tokenizer: Any, model: Any, chat_template: Optional[str] = None):
    """The tokenizer object: ``tokenizer`` itself, ``AutoTokenizer.from_pretrained(path)``, or
    the model's own path when ``tokenizer`` is None; then :func:`check_tokenizer`.

    Raises:
        MarlError: no tokenizer can be found (a model built from a config needs ``tokenizer=``; a
            missing folder or one without tokenizer files: :func:`~marl.algos.llm.models.pretrained_source`),
            or :func:`check_tokenizer` fails.
    """
    if tokenizer is not None and not isinstance(tokenizer, str):
        return check_tokenizer(tokenizer, chat_template)
    path = tokenizer or (model if isinstance(model, str) else None)
    if path is None:
        raise MarlError(
            "A model built from a config needs tokenizer= (e.g. marl.algos.llm.policy.word_tokenizer(words))."
        )
    from marl.algos.llm.models import from_pretrained  # models imports this module

    tok = from_pretrained(_transformers().AutoTokenizer.from_pretrained, path, "tokenizer", ("tokenizer",))
    return check_tokenizer(tok, chat_template)


def check_tokenizer(tok, chat_template: Optional[str] = None):
    """Make ``tok`` usable for batched generation and training, without adding tokens.

    * ``chat_template``: ``"plain"`` (:data:`PLAIN_CHAT_TEMPLATE`) or a Jinja string replaces the
      tokenizer's template; otherwise the tokenizer must have one (prompts are built from it).
    * A tokenizer without a pad token (GPT-2, Llama and most base models) pads with its EOS
      token: padded positions are masked out by the attention mask, so no new token (and no
      silently resized, untrained embedding row) is needed.
    * Decoder-only generation pads on the left (``padding_side = "left"``).

    Args:
        tok: a ``transformers`` tokenizer (changed in place and returned).
        chat_template: None (keep the tokenizer's), ``"plain"`` or a Jinja chat template.
    Returns:
        ``tok``.
    Raises:
        MarlError: no chat template, or neither a pad nor an EOS token.
    """
    if chat_template is not None:
        tok.chat_template = PLAIN_CHAT_TEMPLATE if chat_template == "plain" else chat_template
    if not getattr(tok, "chat_template", None):
        raise MarlError(
            f"The tokenizer ({type(tok).__name__}, {len(tok)} tokens) has no chat template, and prompts are "
            f"built from it. Base models often ship none: set chat_template='plain' (role: content lines) or "
            f"chat_template='<a Jinja template>'; instruction-tuned models have one in tokenizer_config.json."
        )
    if tok.eos_token_id is None:
        raise MarlError(
            f"The tokenizer ({type(tok).__name__}) has no EOS token: a reply could never end. "
            f"Set tokenizer.eos_token to the token the model ends its turns with."
        )
    if tok.pad_token_id is None:
        tok.pad_token = tok.eos_token  # masked by the attention mask; no embedding resize
    tok.padding_side = "left"
    return tok


def model_context(lm) -> Optional[int]:
    """The most positions (prompt + reply tokens) ``lm`` can attend over, from its config
    (``max_position_embeddings``, GPT-2's ``n_positions``, ``n_ctx``, ``seq_length``); None if it names none."""
    cfg = getattr(lm, "config", None)
    for name in ("max_position_embeddings", "n_positions", "n_ctx", "seq_length", "max_sequence_length"):
        v = getattr(cfg, name, None)
        if isinstance(v, int) and v > 0:
            return v
    return None


def check_vocabulary(tok, lm) -> None:
    """Raise a :class:`MarlError` when ``tok`` can produce ids that ``lm``'s embedding table lacks
    (they would fail inside the model with ``IndexError: index out of range in self``)."""
    emb = lm.get_input_embeddings() if hasattr(lm, "get_input_embeddings") else None
    rows = getattr(emb, "num_embeddings", None)
    if rows is not None and len(tok) > rows:
        raise MarlError(
            f"The tokenizer has {len(tok)} tokens but the model embeds only {rows} ids: token ids >= {rows} would "
            f"fail inside the model. Use the tokenizer saved with the model, or build the model with "
            f"vocab_size >= {len(tok)} (embeddings are not resized silently: new rows would be untrained)."
        )
