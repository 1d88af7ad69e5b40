"""Every way a PettingZoo user names an env, resolved to a module path.

``pettingzoo.<family>.<env>_v<k>`` (the import path), ``<family>.<env>_v<k>``,
``<env>_v<k>`` alone when one family has it, and the same three without the
version suffix (the newest version installed). mpe2, where PettingZoo's MPE
moved, counts as the family ``mpe2`` (``simple_tag_v3`` -> ``mpe2.simple_tag_v3``).
Any other dotted path (a third-party package) is left as it is. A name in one of
the PettingZoo forms that matches nothing is an error listing the closest names
written in the same form.
"""

from __future__ import annotations

import importlib.util
import os
import re
from typing import Dict, List, Optional

from marl.errors import MarlError, closest

__all__ = ["known_modules", "resolve_name", "known_kind", "ZERO_SUM"]

# PettingZoo games where one player's gain is the other's loss (classic board and card games,
# two-player Atari duels): competitive, one team per player (PettingZoo's docs of each env)
ZERO_SUM = frozenset(
    {
        "chess",
        "connect_four",
        "go",
        "leduc_holdem",
        "rps",
        "texas_holdem",
        "texas_holdem_no_limit",
        "tictactoe",
        "boxing",
        "combat_plane",
        "combat_tank",
        "double_dunk",
        "flag_capture",
        "ice_hockey",
        "othello",
        "pong",
        "space_war",
        "surround",
        "tennis",
        "video_checkers",
    }
)

_VERSIONED = re.compile(r"^([a-z0-9_]+?)_v(\d+)$")
_FAMILIES = ("classic", "butterfly", "sisl", "atari", "magent")


def _modules_in(package: str, sub: str = "") -> List[str]:
    """``<package>.<sub>.<env>_v<k>`` for each versioned module file or folder, without importing them."""
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        return []
    folder = os.path.join(spec.submodule_search_locations[0], sub)
    if not os.path.isdir(folder):
        return []
    names = {f[:-3] if f.endswith(".py") else f for f in os.listdir(folder)}
    prefix = f"{package}.{sub}." if sub else f"{package}."
    return sorted(prefix + n for n in names if _VERSIONED.match(n))


def known_modules() -> List[str]:
    """Full module paths of the PettingZoo families and mpe2 installed here."""
    out: List[str] = []
    for fam in _FAMILIES:
        out += _modules_in("pettingzoo", fam)
    return out + _modules_in("mpe2")


def _short_forms(full: List[str]) -> Dict[str, Dict[str, List[str]]]:
    """Form -> written name -> full paths: ``"family"`` (``classic.tictactoe_v3``), ``"bare"`` (``tictactoe_v3``),
    and the versionless ``"family_base"`` / ``"bare_base"`` (``classic.tictactoe`` / ``tictactoe``)."""
    forms: Dict[str, Dict[str, List[str]]] = {"full": {}, "family": {}, "bare": {}, "family_base": {}, "bare_base": {}}
    for path in full:
        parts = path.split(".")
        fam, env = (parts[-2] if parts[0] == "pettingzoo" else parts[0]), parts[-1]
        base = _VERSIONED.match(env).group(1)
        for form, key in (
            ("full", path),
            ("family", f"{fam}.{env}"),
            ("bare", env),
            ("family_base", f"{fam}.{base}"),
            ("bare_base", base),
        ):
            forms[form].setdefault(key, []).append(path)
    return forms


def _newest(paths: List[str]) -> str:
    return max(paths, key=lambda p: int(_VERSIONED.match(p.rsplit(".", 1)[1]).group(2)))


def _form_of(name: str, families: List[str]) -> str:
    """Which PettingZoo form ``name`` is written in, or ``""`` for another package's path."""
    head = name.split(".")[0]
    if head == "pettingzoo":
        return "full"
    if "." not in name:
        return "bare" if _VERSIONED.match(name) else "bare_base"
    if head in families and name.count(".") == 1:
        return "family" if _VERSIONED.match(name.split(".")[1]) else "family_base"
    return ""


def resolve_name(name: str) -> str:
    """The module path that ``name`` means (module docstring); other packages' paths come back unchanged.

    Raises:
        MarlError: a PettingZoo-form name that matches no installed env (the closest names in
            that form are listed) or a short name that several families have (all are listed).
    """
    if ":" in name:
        return name
    full = known_modules()
    forms = _short_forms(full)
    form = _form_of(name, list(_FAMILIES) + ["mpe2"])
    if not form:
        return name
    hits = forms[form].get(name)
    if hits is None and form.startswith("bare") and importlib.util.find_spec(name) is not None:
        return name  # a top-level third-party module (its parallel_env / env is used)
    if hits is None:
        written = sorted(forms[form])
        family = name.rsplit(".", 1)[0] + "." if "." in name else ""
        shown = [w for w in written if w.startswith(family)] or written  # the same family's names first
        raise MarlError(
            f"Unknown PettingZoo env module '{name}'.{closest(name, written)} Names in that form: "
            f"{', '.join(shown[:40])}{' ...' if len(shown) > 40 else ''}."
        )
    if form.endswith("_base"):
        hits = [_newest(hits)] if len({h.rsplit(".", 1)[0] for h in hits}) == 1 else hits
    if len(hits) > 1:
        raise MarlError(f"PettingZoo env '{name}' is ambiguous: {', '.join(sorted(hits))}. Name one of them.")
    return hits[0]


def known_kind(env_name: str) -> Optional[str]:
    """``"competitive"`` for the games of :data:`ZERO_SUM` (``env_name``: PettingZoo's
    ``metadata["name"]``, e.g. ``"tictactoe_v3"``), else ``None`` (the adapter's default rule)."""
    m = _VERSIONED.match(env_name.rsplit(".", 1)[-1])
    return "competitive" if m and m.group(1) in ZERO_SUM else None
