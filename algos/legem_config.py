"""The keys of the ``legem`` reward redistribution (its config section), apart from the
transform itself (:mod:`marl.algos.redistribution`) so that checking a config imports
neither torch nor Ray."""

from __future__ import annotations

from dataclasses import dataclass

from marl.config.schema import ConfigBase, key


@dataclass(frozen=True, kw_only=True)
class LegemConfig(ConfigBase):
    """Keys of ``reward_redistribution: legem`` (QMIX, VDN, IQL; LeGEM-style, our reconstruction of
    Qiu et al. 2022, arXiv 2205.13718; docs/offbeat.md): the causal shift, then potential-based
    shaping from per-agent episodic memory graphs. Give them as ``legem={"beta": 0.2}`` in Python or
    ``legem.beta=0.2`` on the command line; values in ``configs/transforms/legem.yaml``. Runs of older
    versions saved them as ``legem_<key>``; their checkpoints still load."""

    LAYER = "legem"
    DEFAULTS = "transforms/legem.yaml"

    beta: float = key("weight of the memory-based potential shaping (0 = causal shift only)", ge=0)
    key_dim: int = key("random-projection size of the observation keys", ge=1)
    resolution: float = key("rounding step of the keys (coarser merges more observations)", gt=0)
    time_key: bool = key("the decision step is part of a node key (acyclic graph)")
    refresh_episodes: int = key("episodes between value propagations on the memory graphs", ge=1)
    max_nodes: int = key("FIFO cap on nodes per agent graph", ge=1)
