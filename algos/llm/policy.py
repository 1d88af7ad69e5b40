"""The LLM policy: a Hugging Face causal LM in an RLlib ``TorchRLModule``, and its generation.

* :func:`load_causal_lm` — ``from_pretrained`` on a local path or hub id, or
  ``from_config`` on a ``transformers`` config (tests, tiny models), and
  :func:`apply_lora` — LoRA adapters with ``peft`` (only they train); both in
  :mod:`marl.algos.llm.models`, re-exported here;
* :class:`CausalLMModule` — the RLModule; ``forward_train`` returns per-token
  log-probs of the next token (never full-vocabulary logits: vocab x length x
  batch floats would not fit in memory for real LLMs);
* :class:`Generator` — chat template -> token ids -> ``generate`` (temperature,
  top-p, token budget, optional constrained decoding to the legal moves);
  :class:`VLLMGenerator` does the same through vLLM (``pip install marl[vllm]``); both in
  :mod:`marl.algos.llm.generation`, re-exported here;
* tokenizers (:mod:`marl.algos.llm.tokenizer`, re-exported here): the checks a user's
  own tokenizer must pass, the model's position limit :class:`Generator` fits every
  prompt into, and the word-level and byte-level BPE builders (``docs/llm_models.md``).
"""

from __future__ import annotations

import copy
from typing import Any, Dict, List, Optional, Tuple

import torch
from ray.rllib.core.rl_module.torch.torch_rl_module import TorchRLModule

from marl.algos.llm.generation import Generator, VLLMGenerator  # noqa: F401  (re-exported)
from marl.algos.llm.models import apply_lora, load_causal_lm, tiny_config, to_numpy_keep_bf16  # noqa: F401
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
