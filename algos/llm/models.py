"""Loading the causal LM of the LLM self-play path: a local folder (checked before
``transformers`` reads it), a hub id, or a ``transformers`` config (random weights, no
download); LoRA adapters; model states as RLlib passes them (``docs/llm_models.md``)."""

from __future__ import annotations

import functools
import os
import re
import socket
import urllib.parse
from typing import Any, Callable, Dict, Optional, Sequence

import torch

from marl.env import MarlError
from marl.errors import optional_import
from marl.algos.llm.tokenizer import _transformers


# what a folder needs for each role, as (name in messages, test on the folder's file names)
FOLDER_NEEDS: Dict[str, tuple] = {
    "config": ("config.json", lambda names: "config.json" in names),
    "weights": (
        "weights (model.safetensors or pytorch_model.bin, or the shards of their *.index.json)",
        lambda names: any(n.endswith((".safetensors", ".bin", ".index.json")) for n in names),
    ),
    "tokenizer": (
        "tokenizer files (tokenizer.json, or vocab.json with merges.txt, or tokenizer.model, or vocab.txt)",
        lambda names: any(n in names for n in ("tokenizer.json", "tokenizer.model", "vocab.json", "vocab.txt")),
    ),
}
MODEL_NEEDS = ("config", "weights")
_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")  # owner/name


def _offline() -> bool:
    """Hugging Face's offline switches (``HF_HUB_OFFLINE``, ``TRANSFORMERS_OFFLINE``) are on, or the
    hub's host cannot be resolved (no network: ``transformers`` would retry for about a minute)."""
    switches = ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")
    return any(os.environ.get(k, "").lower() in ("1", "true", "yes", "on") for k in switches) or not _hub_reachable()


@functools.lru_cache(maxsize=1)
def _hub_reachable() -> bool:
    """The hub's host name resolves (``HF_ENDPOINT`` or huggingface.co); asked once per process."""
    host = urllib.parse.urlparse(os.environ.get("HF_ENDPOINT", "https://huggingface.co")).hostname or ""
    try:
        socket.getaddrinfo(host, 443)
        return True
    except OSError:
        return False


def _in_hub_cache(repo: str) -> bool:
    """``repo`` has a ``config.json`` in the local Hugging Face cache (no network)."""
    try:
        from huggingface_hub import try_to_load_from_cache

        return isinstance(try_to_load_from_cache(repo_id=repo, filename="config.json"), str)
    except Exception:  # not a valid repo id, or huggingface_hub missing
        return False


def pretrained_source(path: str, what: str = "model", needs: Sequence[str] = MODEL_NEEDS) -> str:
    """Check a ``from_pretrained`` source before ``transformers`` reads it; returns what to pass on.

    * An existing folder must hold the files of ``needs`` (keys of :data:`FOLDER_NEEDS`); its
      absolute path is returned.
    * A hub id ``owner/name`` (whose ``owner`` is no local folder) is returned as it is; offline
      (Hugging Face's offline switch on, or the hub's host does not resolve), only if it is in
      the local cache.
    * Anything else (a relative or absolute path that does not exist, a bare name that is not
      in the local cache) is a missing local folder: nothing is downloaded for it.

    Args:
        path: the string given as ``model=`` or ``tokenizer=``; what: that key's name in messages.
    Raises:
        MarlError: a missing folder (naming the path resolved against the working directory), a
            file instead of a folder, a folder that lacks files (naming them), or an uncached hub
            id while offline.
    """
    full = os.path.abspath(os.path.expanduser(path))
    if os.path.isdir(full):
        names = set(os.listdir(full))
        missing = [FOLDER_NEEDS[n][0] for n in needs if not FOLDER_NEEDS[n][1](names)]
        if missing:
            held = ", ".join(sorted(names)[:8]) + (", ..." if len(names) > 8 else "") if names else "nothing"
            raise MarlError(
                f"{what}={path!r}: the folder {full} lacks {'; '.join(missing)} (it holds {held}). "
                f"Save a model with model.save_pretrained(folder) and tokenizer.save_pretrained(folder)"
                f"{', or pass tokenizer=' if 'tokenizer' in needs else ''}."
            )
        return full
    if os.path.exists(full):
        raise MarlError(f"{what}={path!r} is a file ({full}); give the folder that holds it.")
    owner = path.split("/")[0]
    if _HUB_ID.match(path) and not os.path.isdir(owner) and (not _offline() or _in_hub_cache(path)):
        return path
    if "/" not in path and _in_hub_cache(path):
        return path  # a legacy hub name ("gpt2") downloaded before
    if not _HUB_ID.match(path):
        why = "nothing is downloaded for it: a hub id is written owner/name, e.g. 'Qwen/Qwen3-0.6B'"
    elif os.path.isdir(owner):
        why = f"'{owner}' is a local folder, so this is read as a path in it, not as a hub id"
    else:
        why = "as a hub id it is not in the local cache, and the hub cannot be reached (offline)"
    raise MarlError(
        f"{what}={path!r}: no such folder: {full} (resolved against the working directory {os.getcwd()}); {why}."
    )


def check_sources(model: Any, tokenizer: Any) -> None:
    """:func:`pretrained_source` on the ``model=`` and ``tokenizer=`` strings of a run, before it starts
    (a model folder must hold the tokenizer files too when ``tokenizer`` is None)."""
    if isinstance(model, str):
        pretrained_source(model, "model", MODEL_NEEDS + (("tokenizer",) if tokenizer is None else ()))
    if isinstance(tokenizer, str):
        pretrained_source(tokenizer, "tokenizer", ("tokenizer",))


def from_pretrained(load: Callable, path: str, what: str, needs: Sequence[str], **kwargs: Any) -> Any:
    """``load(source, **kwargs)`` (a ``from_pretrained``) on :func:`pretrained_source`'s answer, with
    the loader's own errors (a hub id that cannot be reached, a damaged folder) as :class:`MarlError`."""
    source = pretrained_source(path, what, needs)
    try:
        return load(source, **kwargs)
    except (OSError, ValueError) as e:
        where = "the local folder" if os.path.isdir(source) else "the hub id"
        raise MarlError(
            f"{what}={path!r}: transformers could not load {where} {source}: {type(e).__name__}: {e}"
        ) from e


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
        MarlError: ``model`` is missing or of another type (:func:`pretrained_source`: a missing
            folder, a folder without config.json or weights); transformers not installed.
    """
    tf = _transformers()
    torch_dtype = getattr(torch, dtype) if dtype else None
    if isinstance(model, dict):
        model = tf.AutoConfig.for_model(**model)
    if isinstance(model, tf.PretrainedConfig):
        lm = tf.AutoModelForCausalLM.from_config(model)
        return lm.to(torch_dtype) if torch_dtype is not None else lm
    if isinstance(model, str) and model:
        return from_pretrained(tf.AutoModelForCausalLM.from_pretrained, model, "model", MODEL_NEEDS, dtype=torch_dtype)
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
