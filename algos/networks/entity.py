"""Input splitting shared by the entity-aware agent networks (HPN/DPN in ``hpn.py``, ASN in ``asn.py``).

An agent's network input is the flat vector the runner builds,
``[obs (D_obs) | agent one-hot (N, shared modules) | last action (A, optional)]``.
:class:`EntityInputs` splits it, with the env's
:attr:`marl.env.EnvInfo.entity_layout`, into own features ``[..., d_own]``,
one ``[..., m_t, d_t]`` tensor per entity type ``t``, the agent index and
the last action. Its index tables are buffers that are *not* saved in state
dicts, so a network's parameters never depend on the entity counts: the same
weights load into a network built for a scenario with more or fewer entities
(transfer, Hao et al. 2022 §5.4).
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Tuple

import torch
from torch import nn

from marl.errors import MarlError


def entity_index(spec: Dict[str, Any]) -> torch.Tensor:
    """Observation indices ``[m, d]`` of one entity type (``start``/``dim`` or ``fields``)."""
    fields = spec.get("fields") or [(spec["start"], spec["dim"])]
    m = int(spec["count"])
    blocks = [torch.arange(int(s), int(s) + m * int(d)).view(m, int(d)) for s, d in fields]
    return torch.cat(blocks, 1) if blocks else torch.zeros(m, 0, dtype=torch.long)


def entity_dim(spec: Dict[str, Any]) -> int:
    """Features per entity of one type."""
    fields = spec.get("fields") or [(spec["start"], spec["dim"])]
    return sum(int(d) for _, d in fields)


def contiguous_block(spec: Dict[str, Any]) -> Optional[Tuple[int, int, int]]:
    """``(start, m, d)`` when the type's features are one block of ``m`` entities x ``d``
    features (``start``/``dim``), so they can be read as a view; ``None`` for ``fields``."""
    if spec.get("fields"):
        return None
    return int(spec["start"]), int(spec["count"]), int(spec["dim"])


def own_range(own: List[int]) -> Optional[Tuple[int, int]]:
    """``(a, b)`` when the own features are the contiguous range ``a..b-1`` (read as a view); else ``None``."""
    if own and own == list(range(own[0], own[-1] + 1)):
        return own[0], own[-1] + 1
    return None


class EntityInputs(nn.Module):
    """Split flat agent inputs into own features, entities, agent index and last action.

    Args:
        layout: one group's entity layout (see :class:`marl.env.EnvInfo`).
        obs_dim: ``D_obs``, the group's observation size.
        id_dim: size of the agent one-hot after the observation (0: none).
        last_action_dim: size of the last-action one-hot after that (0: none).

    Attributes:
        own_dim: ``d_own``; ``dims``: type -> ``d_t``; ``counts``: type -> ``m_t``;
        ``targets``: ``[(type, first_action, m)]`` in action order;
        ``n_normal``: actions that target no entity; ``n_actions``: all actions.

    Raises:
        MarlError: the layout has no ``entities`` or its targeted actions do not
            follow the normal actions contiguously.
    """

    def __init__(self, layout: Dict[str, Any], obs_dim: int, id_dim: int = 0, last_action_dim: int = 0):
        super().__init__()
        if not layout or not layout.get("entities"):
            raise MarlError(f"An entity-aware agent needs an entity layout with 'entities'; got {layout!r}.")
        own = [i for s, e in layout.get("own", []) for i in range(int(s), int(e))]
        self.register_buffer("own_idx", torch.tensor(own, dtype=torch.long), persistent=False)
        self.types: List[str] = list(layout["entities"])
        self.dims = {t: entity_dim(layout["entities"][t]) for t in self.types}
        self.counts = {t: int(layout["entities"][t]["count"]) for t in self.types}
        self.unit_types = {
            t: tuple(layout["entities"][t]["unit_type"]) for t in self.types if layout["entities"][t].get("unit_type")
        }
        for t in self.types:
            self.register_buffer(f"idx_{t}", entity_index(layout["entities"][t]), persistent=False)
        # a type stored as one contiguous block (``start``/``dim``) is read as a view; only
        # ``fields`` layouts need the index gather (a copy)
        self.blocks = {t: contiguous_block(layout["entities"][t]) for t in self.types}
        self.own_range = own_range(own)
        self.obs_dim, self.id_dim, self.last_action_dim = int(obs_dim), int(id_dim), int(last_action_dim)
        self.own_dim = len(own)
        self.n_normal = int(layout.get("n_normal_actions", 0))
        self.targets = self._targets(layout)
        self.n_actions = self.n_normal + sum(m for _, _, m in self.targets)
        keep = torch.ones(self.obs_dim + self.id_dim + self.last_action_dim)
        for t, _, _ in self.targets:
            keep[getattr(self, f"idx_{t}").reshape(-1)] = 0
        self.register_buffer("non_target_mask", keep, persistent=False)

    def _targets(self, layout) -> List[Tuple[str, int, int]]:
        targets = sorted(
            ((t, int(f), int(m)) for t, (f, m) in (layout.get("action_targets") or {}).items()), key=lambda x: x[1]
        )
        nxt = self.n_normal
        for t, first, m in targets:
            if t not in self.counts or first != nxt or m != self.counts[t]:
                raise MarlError(
                    f"action_targets {layout.get('action_targets')} must follow the {self.n_normal} normal actions "
                    f"contiguously, one action per entity of an entity type ({self.counts})."
                )
            nxt += m
        return targets

    def split(self, x: torch.Tensor):
        """``x [..., D]`` -> ``own [..., d_own]``, ``{type: [..., m_t, d_t]}``,
        agent index ``[...]`` long (``None`` without a one-hot), last action ``[..., A]`` (or ``None``)."""
        own = x[..., self.own_range[0] : self.own_range[1]] if self.own_range else x[..., self.own_idx]
        ents = self.entities(x)
        d = self.obs_dim
        agent = x[..., d : d + self.id_dim].argmax(-1) if self.id_dim else None
        d += self.id_dim
        last = x[..., d : d + self.last_action_dim] if self.last_action_dim else None
        return own, ents, agent, last

    def entities(self, x: torch.Tensor) -> Dict[str, torch.Tensor]:
        """``x [..., D]`` -> ``{type: [..., m_t, d_t]}``: views of ``x`` for contiguous types,
        gathered copies for ``fields`` layouts."""
        out = {}
        for t in self.types:
            block = self.blocks[t]
            if block is None:
                out[t] = x[..., getattr(self, f"idx_{t}")]
            else:
                start, m, d = block
                out[t] = x[..., start : start + m * d].unflatten(-1, (m, d))
        return out

    def non_target(self, x: torch.Tensor) -> torch.Tensor:
        """``x`` with the features of action-targeted entities zeroed (ASN's ``env_input: non_target``)."""
        return x * self.non_target_mask
