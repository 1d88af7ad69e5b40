"""Entity layouts: where each entity's features sit in a group's observation (format: :class:`EnvInfo`).

Entity-aware networks (HPN: Hao et al., arXiv 2203.05285, ICLR 2023; ASN:
Wang et al., arXiv 1907.11461, ICLR 2020) read a flat observation as own features plus a set of
entities per type; :func:`check_entity_layout` validates such a description
against an env (docs/envs.md, "Entity layouts").
"""

from __future__ import annotations

from typing import Any, Dict, List, Mapping, Sequence, Tuple

import numpy as np

from marl.env.contract import EnvInfo, GroupInfo
from marl.errors import MarlError, closest, unknown_choice

_GROUP_LAYOUT_KEYS = ("own", "entities", "n_normal_actions", "action_targets")
_ENTITY_KEYS = ("start", "count", "dim", "fields", "unit_type")
_Block = Tuple[int, int, str]  # (first index, end index, what uses it) of the observation


def check_entity_layout(layout: Mapping[str, Any], info: EnvInfo) -> Dict[str, Dict[str, Any]]:
    """Validate an entity layout (format: :class:`EnvInfo`) against ``info``; return it normalised.

    Checks, per group: the group exists; ``own`` ranges ``(start, end)`` and every
    entity block lie inside ``[0, obs_dim)`` of the group's observation; no
    feature index is used twice (own and entities together); ``count >= 0``,
    ``dim >= 1``; each entity type has either ``start`` + ``dim`` or ``fields``;
    ``unit_type`` ``(a, b)`` lies inside one entity's features; for a discrete
    group ``0..n_normal_actions-1`` and the ``action_targets`` ranges tile
    ``0..n_actions-1`` exactly, each target type being an entity type of the
    same count; a continuous group has neither key. Observation features that
    are neither own nor entity features are allowed: entity-aware networks
    ignore them.

    Args:
        layout: group name -> group layout; groups left out have no layout.
        info: the env the layout describes.
    Returns:
        A new dict: ints and tuples (lists given for pairs become tuples),
        ``own`` and ``entities`` always present; for discrete groups
        ``n_normal_actions`` (default: ``n_actions`` minus the targeted actions)
        and ``action_targets`` (default ``{}``); continuous groups have neither.
    Raises:
        MarlError: the first problem found, naming the group, the bad value and
            what is valid.
    """
    if not isinstance(layout, Mapping):
        raise MarlError(f"entity_layout must be a dict of group name -> layout, got {type(layout).__name__}.")
    out = {}
    for name, group_layout in layout.items():
        if name not in info.groups:
            raise unknown_choice("entity_layout group", name, list(info.groups))
        out[name] = _check_group_layout(group_layout, info.groups[name])
    return out


def _check_group_layout(layout: Any, g: GroupInfo) -> Dict[str, Any]:
    """Validate and normalise one group's layout (see :func:`check_entity_layout`)."""
    where = f"entity_layout of group '{g.name}'"
    _check_keys(layout, _GROUP_LAYOUT_KEYS, where)
    blocks: List[_Block] = []
    own = []
    for r in _as_list(layout.get("own", []), f"{where}: own"):
        lo, hi = _as_pair(r, f"{where}: own range")
        _check_span(lo, hi, g.obs_dim, f"{where}: own range {(lo, hi)}")
        own.append((lo, hi))
        blocks.append((lo, hi, f"own range {(lo, hi)}"))
    entities = layout.get("entities", {})
    if not isinstance(entities, Mapping):
        raise MarlError(f"{where}: entities must be a dict of entity type -> spec, got {type(entities).__name__}.")
    ents = {}
    for t, spec in entities.items():
        ents[t], ent_blocks = _check_entity(t, spec, g.obs_dim, where)
        blocks += ent_blocks
    _check_no_overlap(blocks, where)
    return {"own": own, "entities": ents, **_check_actions(layout, ents, g, where)}


def _check_entity(t: Any, spec: Any, obs_dim: int, where: str) -> Tuple[Dict[str, Any], List[_Block]]:
    """One entity type -> (normalised spec, the observation blocks it uses)."""
    if not isinstance(t, str) or not t:
        raise MarlError(f"{where}: entity types must be non-empty strings, got {t!r}.")
    what = f"{where}: entity '{t}'"
    _check_keys(spec, _ENTITY_KEYS, what)
    if "count" not in spec:
        raise MarlError(f"{what} needs 'count' (the number of entities of this type).")
    count = _as_int(spec["count"], f"{what}: count")
    if count < 0:
        raise MarlError(f"{what}: count must be >= 0, got {count}.")
    has_block = "start" in spec or "dim" in spec
    if has_block == ("fields" in spec) or (has_block and not ("start" in spec and "dim" in spec)):
        raise MarlError(
            f"{what} needs either 'start' and 'dim' or 'fields' (a list of (start, dim)), got keys {sorted(spec)}."
        )
    if has_block:
        fields = [(spec["start"], spec["dim"])]
    else:
        fields = _as_list(spec["fields"], f"{what}: fields")
        if not fields:
            raise MarlError(f"{what}: fields must list at least one (start, dim).")
    fields = [_as_pair(f, f"{what}: field (start, dim)") for f in fields]
    blocks = []
    for start, dim in fields:
        if dim < 1:
            raise MarlError(f"{what}: dim must be >= 1, got {dim}.")
        end = start + count * dim
        _check_span(
            start, end, obs_dim, f"{what}: features {start}..{end - 1} (start {start} + count {count} x dim {dim})"
        )
        blocks.append((start, end, f"entity '{t}' ({start}..{end - 1})"))
    if has_block:
        out: Dict[str, Any] = {"start": fields[0][0], "count": count, "dim": fields[0][1]}
    else:
        out = {"fields": fields, "count": count}
    if "unit_type" in spec:
        dim = sum(d for _, d in fields)
        a, b = _as_pair(spec["unit_type"], f"{what}: unit_type")
        if not 0 <= a < b <= dim:
            raise MarlError(
                f"{what}: unit_type {(a, b)} must lie inside one entity's {dim} features: 0 <= a < b <= {dim}."
            )
        out["unit_type"] = (a, b)
    return out, blocks


def _check_actions(
    layout: Mapping[str, Any], ents: Dict[str, Dict[str, Any]], g: GroupInfo, where: str
) -> Dict[str, Any]:
    """``n_normal_actions`` / ``action_targets`` of one group, normalised (``{}`` for continuous groups)."""
    given = [k for k in ("n_normal_actions", "action_targets") if k in layout]
    if not g.discrete:
        if given:
            raise MarlError(
                f"{where}: '{given[0]}' is only for discrete actions; group '{g.name}' has continuous "
                f"actions {g.action_space}. Leave out n_normal_actions and action_targets."
            )
        return {}
    raw_targets = layout.get("action_targets", {}) or {}
    if not isinstance(raw_targets, Mapping):
        raise MarlError(f"{where}: action_targets must be a dict of entity type -> (first_action, count).")
    targets = {}
    for t, r in raw_targets.items():
        if t not in ents:
            raise MarlError(
                f"{where}: action_targets names '{t}', which is not an entity type of the group."
                f"{closest(t, list(ents))} Valid entity types: {', '.join(map(str, ents)) or '(none)'}."
            )
        first, m = _as_pair(r, f"{where}: action_targets['{t}']")
        if first < 0:
            raise MarlError(f"{where}: action_targets['{t}'] = {(first, m)} must start at an action >= 0.")
        if m != ents[t]["count"]:
            raise MarlError(
                f"{where}: action_targets['{t}'] = {(first, m)} targets {m} entities, but entity '{t}' has "
                f"count {ents[t]['count']}; one action per entity is needed."
            )
        targets[t] = (first, m)
    n = g.n_actions
    k = _as_int(layout.get("n_normal_actions", n - sum(m for _, m in targets.values())), f"{where}: n_normal_actions")
    if k < 0:
        raise MarlError(f"{where}: n_normal_actions must be >= 0, got {k} (group '{g.name}' has {n} actions).")
    _check_action_tiling(k, targets, n, where)
    return {"n_normal_actions": k, "action_targets": targets}


def _check_action_tiling(k: int, targets: Dict[str, Tuple[int, int]], n: int, where: str) -> None:
    """Raise unless actions ``0..k-1`` and the target ranges ``(first, m)`` cover ``0..n-1`` once each."""
    spans = [(0, k, f"n_normal_actions ({k})")]
    spans += [(f, f + m, f"action_targets['{t}'] {(f, m)}") for t, (f, m) in targets.items()]
    nxt, problem = 0, None
    for lo, hi, what in sorted(s for s in spans if s[1] > s[0]):
        if lo != nxt:
            problem = (
                f"{what} overlaps the actions before it"
                if lo < nxt
                else f"actions {nxt}..{lo - 1} are neither normal nor targeted"
            )
            break
        nxt = hi
    if problem is None and nxt != n:
        problem = f"they cover actions 0..{nxt - 1}"
    if problem:
        raise MarlError(
            f"{where}: actions 0..n_normal_actions-1 and the action_targets ranges must cover the group's "
            f"{n} actions 0..{n - 1} exactly once; {problem}."
        )


def _check_no_overlap(blocks: List[_Block], where: str) -> None:
    """Raise if two blocks ``(start, end, what)`` share an observation feature."""
    prev_end, prev_what = 0, ""
    for lo, hi, what in sorted(b for b in blocks if b[1] > b[0]):
        if lo < prev_end:
            raise MarlError(
                f"{where}: features {lo}..{min(hi, prev_end) - 1} are used by both {prev_what} and {what}; "
                f"each observation feature may belong to one own range or entity only."
            )
        if hi > prev_end:
            prev_end, prev_what = hi, what


def _check_span(lo: int, hi: int, obs_dim: int, what: str) -> None:
    if not 0 <= lo <= hi <= obs_dim:
        raise MarlError(f"{what} must lie inside the observation, features 0..{obs_dim - 1} (obs_dim {obs_dim}).")


def _check_keys(d: Any, valid: Sequence[str], where: str) -> None:
    if not isinstance(d, Mapping):
        raise MarlError(f"{where} must be a dict with keys among {', '.join(valid)}, got {type(d).__name__}.")
    for k in d:
        if k not in valid:
            raise MarlError(f"{where}: unknown key '{k}'.{closest(k, valid)} Valid keys: {', '.join(valid)}.")


def _as_int(v: Any, what: str) -> int:
    if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
        raise MarlError(f"{what} must be an int, got {v!r}.")
    return int(v)


def _as_list(v: Any, what: str) -> list:
    v = v.tolist() if isinstance(v, np.ndarray) else v
    if isinstance(v, (str, bytes, Mapping)) or not isinstance(v, Sequence):
        raise MarlError(f"{what} must be a list, got {v!r}.")
    return list(v)


def _as_pair(v: Any, what: str) -> Tuple[int, int]:
    v = v.tolist() if isinstance(v, np.ndarray) else v
    if isinstance(v, (str, bytes, Mapping)) or not isinstance(v, Sequence) or len(v) != 2:
        raise MarlError(f"{what} must be a pair of ints, got {v!r}.")
    return _as_int(v[0], what), _as_int(v[1], what)
