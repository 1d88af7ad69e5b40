"""LLMLearner: policy-gradient updates of a causal LM on per-turn advantages (an RLlib ``TorchLearner``).

Input (one ``MultiAgentBatch``, sharded across learners by rows): per module,
one row per reply, ``input_ids`` / ``attention_mask`` ``[S, L]`` (prompt then
reply, right-padded), ``loss_mask [S, L-1]`` (1 where the *next* token is a
generated reply token: prompts and padding carry no loss) and ``advantages
[S]`` (every token of a turn gets its turn's advantage, as in the MARS official code).
The learner moves the rows to the right edge (:func:`right_align`) so that the
vocabulary projection runs on the reply columns only (``token_logp(keep=K)``).

Per-token loss (MARS official code, Yuan, Xu et al. 2025, arXiv 2510.15414; PPO clip:
Schulman et al. 2017, arXiv 1707.06347, eq. 7): ``pg = -min(rho A, clip(rho, 1-eps, 1+eps) A)``
with ``rho = pi / pi_old`` (1 on the first epoch: REINFORCE), the dual clip
``min(pg, -c A)`` for ``A < 0`` when ``dual_clip`` > 0 (Ye et al. 2020, arXiv
1912.09729, eq. 5), plus ``kl_coef`` times the
k3 KL estimate ``exp(ref - logp) - (ref - logp) - 1`` (clamped to [-10, 10])
minus ``entropy_coef`` times the next-token entropy. ``loss_agg``:
``seq_mean_token_mean`` (mean over a reply's tokens, then over replies; MARS)
or ``token_mean`` (over all reply tokens; ``nb_tokens`` in the official code of
Piche et al. 2025, arXiv 2511.19405).

Memory: rows are split into micro-batches of at most ``max_tokens_per_microbatch``
tokens whose gradients are accumulated; under DDP (``num_learners`` > 1) the
micro-batches run without gradient sync and the summed gradients are
all-reduced once per step, so learners with different micro-batch counts never
wait on each other. Only parameters with ``requires_grad`` (LoRA adapters) are
given to the optimizer.
"""

from __future__ import annotations

import math
import time
from typing import Dict, Iterator, List

import torch
import torch.distributed as dist

from marl.algos.llm.policy import to_numpy_keep_bf16
from marl.engine.context import RunAccess
from marl.engine.rllib_seam import SeamLearner
from marl.errors import TrainingDiverged


def right_align(ids: torch.Tensor, att: torch.Tensor, loss_mask: torch.Tensor) -> Dict[str, torch.Tensor]:
    """Right-padded rows moved to the right edge (left padding, as generation pads) and cut to
    the columns that matter.

    Every reply then ends in the last column, so the loss needs the model's logits for the last
    ``K + 1`` positions only, ``K`` the longest span from a row's first scored token to the end
    (``token_logp(keep=K)``): the vocabulary projection no longer scales with the prompts.

    Args:
        ids, att: ``[S, L]`` right-padded token ids and attention mask.
        loss_mask: ``[S, L-1]``, True where the next token is a reply token.
    Returns:
        ``input_ids``, ``attention_mask`` ``[S, L']`` (``L'`` the longest row), and
        ``loss_mask [S, K]`` aligned with ``token_logp(..., keep=K)``.
    """
    L = int(att.sum(1).max())
    ids, att, lm = ids[:, :L], att[:, :L], loss_mask[:, : L - 1].bool()
    shift = (L - att.sum(1)).unsqueeze(1)  # padding columns of each row
    cols = torch.arange(L, device=ids.device).unsqueeze(0) - shift  # source column of each target column
    ok = cols >= 0
    src = cols.clamp(min=0)
    out_ids = torch.where(ok, ids.gather(1, src), torch.zeros_like(ids))
    out_att = torch.where(ok, att.gather(1, src), torch.zeros_like(att))
    lcols = cols[:, : L - 1]
    out_mask = (lcols >= 0) & lm.gather(1, lcols.clamp(min=0))
    used = out_mask.any(0).nonzero()
    first = int(used[0]) if len(used) else L - 2
    return {"input_ids": out_ids, "attention_mask": out_att, "loss_mask": out_mask[:, first:]}


def k3_kl(logp: torch.Tensor, ref_logp: torch.Tensor) -> torch.Tensor:
    """Schulman's k3 estimator of KL(pi || ref) per token, clamped to [-10, 10] as in the MARS official code."""
    d = ref_logp - logp
    return (torch.exp(d) - d - 1).clamp(-10, 10)


def policy_loss(
    logp: torch.Tensor, old_logp: torch.Tensor, adv: torch.Tensor, clip: float, dual_clip: float
) -> torch.Tensor:
    """Per-token clipped surrogate ``[S, L]`` (``clip`` <= 0: plain ``-rho * A``)."""
    ratio = torch.exp(logp - old_logp)
    pg = -ratio * adv
    if clip > 0:
        pg = torch.maximum(pg, -ratio.clamp(1 - clip, 1 + clip) * adv)
        if dual_clip > 0:
            pg = torch.where(adv < 0, torch.minimum(pg, -dual_clip * adv), pg)
    return pg


def aggregate(per_token: torch.Tensor, mask: torch.Tensor, how: str) -> torch.Tensor:
    """Sum (not mean) over this micro-batch of ``seq_mean_token_mean`` or ``token_mean``
    contributions; the caller divides by the minibatch's rows or tokens."""
    m = mask.to(per_token.dtype)
    if how == "token_mean":
        return (per_token * m).sum()
    return ((per_token * m).sum(1) / m.sum(1).clamp(min=1)).sum()


class LLMLearner(RunAccess, SeamLearner):
    """TorchLearner for LLM self-play (module docstring)."""

    def configure_optimizers_for_module(self, module_id, config=None):
        # Only trainable params: frozen (LoRA base) params have grad None, which RLlib's
        # apply_gradients cannot check (RLlib 2.60 TorchLearner.apply_gradients: isfinite on every grad).
        params = [p for p in self.module_for_optimizer(module_id).parameters() if p.requires_grad]
        opt = torch.optim.AdamW(params, betas=(0.9, self.cfg.adam_beta2), weight_decay=self.cfg.weight_decay)
        self.register_optimizer(module_id=module_id, optimizer=opt, params=params, lr_or_lr_schedule=config.lr)

    # ---------------------------------------------------------------- update
    def update(self, batch=None, training_data=None, timesteps=None, **kwargs):
        """``epochs`` x ``num_minibatches`` optimizer steps on each module's rows; returns metrics."""
        data = {mid: self._prepare(mid, b) for mid, b in self.begin_update(batch, training_data, timesteps).items()}
        t0, tokens = time.perf_counter(), 0
        for _ in range(self.cfg.epochs):
            for mid, d in data.items():
                for mb in self._minibatches(d):
                    tokens += self._step(mid, mb)
        dt = time.perf_counter() - t0
        for mid in data:
            self.metrics.log_value((mid, "tokens_trained_per_s"), tokens / max(dt, 1e-9), window=1)
        self.after_gradient_based_update(timesteps=timesteps or {})
        return self.metrics.reduce()

    @torch.no_grad()
    def _prepare(self, mid: str, b: Dict[str, torch.Tensor]) -> Dict[str, torch.Tensor]:
        """Rows left-aligned to the right edge (:func:`right_align`) and cut to the columns that
        score reply tokens (``keep``); ``old_logp`` (several epochs) and ``ref_logp`` (KL) per token."""
        d = right_align(b["input_ids"], b["attention_mask"], b["loss_mask"])
        d["advantages"] = b["advantages"].float()
        module = self.module[mid].unwrapped()
        if self.cfg.epochs > 1:
            d["old_logp"] = self._logp_rows(module, d, reference=False)
        if self.cfg.kl_coef > 0:
            d["ref_logp"] = self._logp_rows(module, d, reference=True)
        return d

    def _logp_rows(self, module, d, reference: bool) -> torch.Tensor:
        out = torch.zeros(d["loss_mask"].shape, device=d["input_ids"].device)
        keep = d["loss_mask"].shape[1]
        for idx in self._micro(d):
            out[idx] = module.token_logp(d["input_ids"][idx], d["attention_mask"][idx], reference=reference, keep=keep)[
                0
            ]
        return out

    def _minibatches(self, d: Dict[str, torch.Tensor]) -> Iterator[Dict[str, torch.Tensor]]:
        K = self.cfg.num_minibatches
        n = d["input_ids"].shape[0]
        if K <= 1:
            yield d
            return
        perm = torch.randperm(n, device=d["input_ids"].device)
        for idx in perm.tensor_split(K):
            yield {k: v[idx] for k, v in d.items()}

    def _micro(self, d: Dict[str, torch.Tensor]) -> List[torch.Tensor]:
        """Row index sets of at most ``max_tokens_per_microbatch`` padded tokens each."""
        n, L = d["input_ids"].shape
        per = max(self.cfg.max_tokens_per_microbatch // max(L, 1), 1)
        return list(torch.arange(n, device=d["input_ids"].device).split(per))

    def _step(self, mid: str, mb: Dict[str, torch.Tensor]) -> int:
        """One optimizer step on a minibatch (accumulated over micro-batches); returns tokens trained."""
        module = self.module[mid]
        inner = module.unwrapped()
        self.zero_grads()
        agg = self.cfg.loss_agg
        mask = mb["loss_mask"]
        denom = float(mask.sum()) if agg == "token_mean" else float(mask.shape[0])
        sums = {"policy_loss": 0.0, "kl": 0.0, "entropy": 0.0, "clip_fraction": 0.0}
        sync = module.no_sync if hasattr(module, "no_sync") else None
        for idx in self._micro(mb):
            part = {k: v[idx] for k, v in mb.items()}
            if sync is not None:
                with sync():
                    terms = self._loss(inner, part, agg)
                    (terms["loss"] / max(denom, 1.0)).backward()
            else:
                terms = self._loss(inner, part, agg)
                (terms["loss"] / max(denom, 1.0)).backward()
            for k in sums:
                sums[k] += float(terms[k])
        for name in ("policy_loss", "kl", "entropy"):  # a NaN KL or entropy term poisons the update as well
            if not math.isfinite(sums[name]):
                raise TrainingDiverged(f"{name} of module '{mid}' is {sums[name] / max(denom, 1.0)} (not finite)")
        self.allreduce_grads()
        grads = {pid: (p.grad if p.grad is not None else torch.zeros_like(p)) for pid, p in self.params_by_id.items()}
        self.apply_gradients(self.postprocess_gradients(grads))
        for k, v in sums.items():
            self.metrics.log_value((mid, k), v / max(denom, 1.0), window=1)
        return int(mask.sum())

    def _loss(self, module, d: Dict[str, torch.Tensor], agg: str) -> Dict[str, torch.Tensor]:
        cfg = self.cfg
        want_ent = cfg.entropy_coef > 0
        logp, ent = module.token_logp(
            d["input_ids"], d["attention_mask"], entropy=want_ent, keep=d["loss_mask"].shape[1]
        )
        mask = d["loss_mask"]
        adv = d["advantages"].unsqueeze(1).expand_as(logp)
        old = d.get("old_logp", logp.detach())
        pg = policy_loss(logp, old, adv, cfg.clip, cfg.dual_clip)
        total = pg
        kl = torch.zeros_like(pg)
        if "ref_logp" in d:
            kl = k3_kl(logp, d["ref_logp"])
            total = total + cfg.kl_coef * kl
        if ent is not None:
            total = total - cfg.entropy_coef * ent
        ratio = torch.exp(logp.detach() - old)
        clipped = ((ratio - 1).abs() > cfg.clip).float() if cfg.clip > 0 else torch.zeros_like(ratio)
        return {
            "loss": aggregate(total, mask, agg),
            "policy_loss": aggregate(pg.detach(), mask, agg),
            "kl": aggregate(kl.detach(), mask, agg),
            "entropy": aggregate(ent.detach(), mask, agg) if ent is not None else torch.tensor(0.0),
            "clip_fraction": aggregate(clipped, mask, agg),
        }

    def optimizer_state(self):
        # RLlib's TorchLearner converts the AdamW state to numpy, which has no bfloat16 (dtype="bfloat16")
        return {
            name: {"module_id": mid, "state": to_numpy_keep_bf16(opt.state_dict())}
            for name, mid, opt in self.named_optimizers()
        }

    def compute_loss_for_module(self, *, module_id, config, batch, fwd_out):
        # Not used: update() runs its own micro-batched loop (_step); RLlib requires the method.
        raise NotImplementedError("LLMLearner computes its loss in update()")

    def allreduce_grads(self) -> None:
        """Average the accumulated gradients over DDP learners (one all-reduce per parameter)."""
        if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() < 2:
            return
        world = dist.get_world_size()
        for p in self.params_by_id.values():
            if p.grad is None:
                p.grad = torch.zeros_like(p)
            dist.all_reduce(p.grad)
            p.grad /= world
