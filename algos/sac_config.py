"""The config schema of ISAC and MASAC (:class:`SACConfig`), apart from the trainer so that a config is loaded and
checked without importing torch or Ray (the algorithms are in :mod:`marl.algos.sac`). The keys shared with the DDPG
family (critics, targets, replay, schedule, networks) are :class:`~marl.algos.ddpg_config.OffPolicyACConfig`'s.

Sources of the keys: Haarnoja et al. 2018 (SAC, arXiv 1812.05905, Sec. 5: automatic entropy tuning, twin Q);
Christodoulou 2019 (discrete SAC, arXiv 1910.07207); BenchMARL (Bettini et al. 2024, arXiv 2312.01472) for the
default values (``configs/algos/masac.yaml``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional, Union

from marl.algos.ddpg_config import OffPolicyACConfig
from marl.config import key
from marl.config.checks import ERROR, rule

AUTO = "auto"  # target_entropy: -|A| (continuous) or discrete_target_entropy_weight * log|A| (discrete)


@rule(("target_entropy",), ERROR, "target_entropy is 'auto' or a number")
def target_entropy_is_auto_or_number(c: Any) -> Optional[str]:
    word = c.target_entropy
    bad = isinstance(word, str) and word != AUTO  # a number coerces to float; a string must be the word auto
    use = f"use {AUTO!r} (-|A| for continuous actions, discrete_target_entropy_weight * log|A| for discrete ones)"
    return (
        f"target_entropy={word!r} is neither {AUTO!r} nor a number; {use} or a number in nats (e.g. -2.0)."
        if bad
        else None
    )


@dataclass(frozen=True, kw_only=True)
class SACConfig(OffPolicyACConfig):
    """ISAC / MASAC keys (``docs/algorithms/sac.md``); values in ``configs/algos/masac.yaml``, which ``isac.yaml``
    starts from (``base: masac``)."""

    LAYER = "SAC family"
    RULES = (target_entropy_is_auto_or_number,)

    target_entropy: Union[float, str] = key(
        "the entropy the temperature tunes the policy towards, in nats: auto (-|A| continuous, "
        "discrete_target_entropy_weight * log|A| discrete) or a number"
    )
    discrete_target_entropy_weight: float = key(
        "discrete actions, target_entropy auto: the target entropy is this fraction of log|A|", gt=0, le=1
    )
    alpha_init: float = key("initial temperature alpha (the entropy bonus' weight)", gt=0)
    fixed_alpha: bool = key("keep alpha at alpha_init (no automatic entropy tuning)")
