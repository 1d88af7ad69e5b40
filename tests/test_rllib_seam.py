"""RLlib's private API is touched in one module only: ``marl/engine/rllib_seam.py``.

The scan reads every Python file of the repository (as text, no imports) and fails on:

* an import of a ``ray`` module whose path has a part starting with ``_`` (``ray._private``);
* inside a class that derives from an RLlib class (directly, or through marl's own RLlib
  subclasses such as ``Trainer`` or ``SeamLearner``): ``self._x`` / ``cls._x`` / ``super()._x``,
  or a method ``def _x``, where ``_x`` is a private name of RLlib's engine classes: using
  RLlib's private state, or overriding it by accident (an own ``self._seed`` on an
  ``EnvRunner`` silently replaces RLlib's);
* anywhere: ``<learner | learner_group | env_runner_group | algo | trainer | runner ...>._x``
  with ``_x`` such a private name, and ``_``-keywords of ``ray.init``.

RLModule's ``_forward*`` methods are RLlib's documented override points and are allowed.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import re
from pathlib import Path
from typing import Dict, List, Set

ROOT = Path(__file__).resolve().parents[1]
SEAM = ROOT / "marl" / "engine" / "rllib_seam.py"
SCANNED = ("marl", "algos", "envs", "benchmarks", "examples", "tests")
ENGINE_MODULES = (  # RLlib's engine classes marl subclasses or holds
    "ray.rllib.algorithms.algorithm",
    "ray.rllib.algorithms.algorithm_config",
    "ray.rllib.core.learner.learner",
    "ray.rllib.core.learner.torch.torch_learner",
    "ray.rllib.core.learner.learner_group",
    "ray.rllib.env.env_runner",
    "ray.rllib.env.env_runner_group",
    "ray.rllib.core.rl_module.rl_module",
    "ray.rllib.core.rl_module.torch.torch_rl_module",
    "ray.rllib.core.rl_module.multi_rl_module",
    "ray.rllib.utils.checkpoints",
    "ray.rllib.utils.actor_manager",
    "ray.rllib.policy.sample_batch",
    "ray.rllib.utils.metrics.metrics_logger",
)
DOCUMENTED_HOOKS = {"_forward", "_forward_train", "_forward_inference", "_forward_exploration"}
RECEIVERS = {
    "learner",
    "learner_group",
    "env_runner_group",
    "algo",
    "algorithm",
    "trainer",
    "runner",
    "env_runner",
    "local_env_runner",
    "rl_module",
    "multi_rl_module",
}


def private_names_of(source: str) -> Set[str]:
    """``_x`` attributes (``self._x``) and methods (``def _x``) in RLlib source text."""
    names = set(re.findall(r"(?:self|cls)\.(_[a-zA-Z]\w*)", source)) | set(
        re.findall(r"^\s+def (_[a-zA-Z]\w*)", source, re.M)
    )
    return {n for n in names if not n.startswith("__")} - DOCUMENTED_HOOKS


def rllib_private_names() -> Set[str]:
    """The private names of RLlib's engine classes (for receivers named like them)."""
    return set().union(*(private_names_of(inspect.getsource(importlib.import_module(m))) for m in ENGINE_MODULES))


def ray_class_names(cls: type) -> Set[str]:
    """The private names of the RLlib classes in ``cls``'s MRO."""
    return set().union(
        *(private_names_of(inspect.getsource(c)) for c in cls.__mro__ if c.__module__.split(".")[0] == "ray")
    )


def python_files(root: Path) -> List[Path]:
    return sorted(p for d in SCANNED for p in (root / d).rglob("*.py") if p != SEAM)


def rllib_private_by_class(trees: Dict[Path, ast.Module]) -> Dict[str, Set[str]]:
    """The repository's classes with an RLlib class among their ancestors -> the private names of
    those RLlib ancestors (inherited through marl's own subclasses too)."""
    imported: Dict[str, Set[str]] = {}  # a name imported from ray -> its RLlib private names
    bases: Dict[str, Set[str]] = {}
    for tree in trees.values():
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("ray.rllib"):
                for a in node.names:
                    obj = getattr(importlib.import_module(node.module), a.name, None)
                    if inspect.isclass(obj):
                        imported[a.asname or a.name] = ray_class_names(obj)
            elif isinstance(node, ast.ClassDef):
                bases.setdefault(node.name, set()).update(
                    b.id if isinstance(b, ast.Name) else b.attr
                    for b in node.bases
                    if isinstance(b, (ast.Name, ast.Attribute))
                )
    names = dict(imported)
    grown = True
    while grown:  # through marl's own subclasses, to a fixed point
        grown = False
        for c, bs in bases.items():
            known = bs & names.keys()
            got = set().union(*(names[b] for b in known))
            if known and (c not in names or not got <= names[c]):
                names[c] = names.get(c, set()) | got
                grown = True
    return {c: n for c, n in names.items() if c in bases}


def receiver(node: ast.Attribute) -> str:
    v = node.value
    if isinstance(v, ast.Name):
        return v.id
    if isinstance(v, ast.Attribute):
        return v.attr
    if isinstance(v, ast.Call) and isinstance(v.func, ast.Name) and v.func.id == "super":
        return "super()"
    return ""


def violations(root: Path = ROOT) -> List[str]:
    private = rllib_private_names()
    trees = {p: ast.parse(p.read_text(), str(p)) for p in python_files(root)}
    derived = rllib_private_by_class({**trees, SEAM: ast.parse(SEAM.read_text())})  # the seam's classes count
    out = []
    for path, tree in trees.items():
        rel = path.relative_to(root)
        for node in ast.walk(tree):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                mods = [node.module or ""] if isinstance(node, ast.ImportFrom) else [a.name for a in node.names]
                mods += [f"{node.module}.{a.name}" for a in node.names] if isinstance(node, ast.ImportFrom) else []
                for m in mods:
                    if m.split(".")[0] == "ray" and any(part.startswith("_") for part in m.split(".")):
                        out.append(f"{rel}:{node.lineno}: import of {m}")
            elif isinstance(node, ast.ClassDef) and node.name in derived:
                own = derived[node.name]
                for sub in ast.walk(node):
                    if (
                        isinstance(sub, ast.Attribute)
                        and sub.attr in own
                        and receiver(sub) in ("self", "cls", "super()")
                    ):
                        out.append(f"{rel}:{sub.lineno}: {node.name} uses RLlib's {receiver(sub)}.{sub.attr}")
                    elif isinstance(sub, ast.FunctionDef) and sub.name in own:
                        out.append(f"{rel}:{sub.lineno}: {node.name} overrides RLlib's {sub.name}")
            elif isinstance(node, ast.Attribute) and node.attr in private and receiver(node) in RECEIVERS:
                out.append(f"{rel}:{node.lineno}: {receiver(node)}.{node.attr}")
            elif isinstance(node, ast.Call) and ast.unparse(node.func) == "ray.init":
                out += [
                    f"{rel}:{node.lineno}: ray.init({k.arg}=...)"
                    for k in node.keywords
                    if (k.arg or "").startswith("_")
                ]
    return sorted(set(out))


def test_rllib_private_names_are_used_in_the_seam_only():
    found = violations()
    assert not found, "RLlib private API outside marl/engine/rllib_seam.py:\n" + "\n".join(found)


def test_the_scan_catches_each_kind_of_use(tmp_path):
    """Each rule fires on a file that breaks it (so the test above can fail)."""
    bad = tmp_path / "marl" / "bad.py"
    bad.parent.mkdir()
    bad.write_text(
        "import ray\n"
        "from ray._private import ray_constants\n"
        "from ray.rllib.env.env_runner import EnvRunner\n"
        "from marl.engine.rllib_seam import SeamLearner\n"
        "class Runner(EnvRunner):\n"
        "    def make(self):\n"
        "        self._seed = 3\n"
        "class Mine(SeamLearner):\n"
        "    def _update(self, batch):\n"
        "        return self._module\n"
        "    def _forward_train(self, batch):\n"
        "        return {}\n"
        "def f(trainer):\n"
        "    ray.init(_node_ip_address='1')\n"
        "    return trainer.env_runner_group._worker_manager\n"
    )
    for d in SCANNED[1:]:
        (tmp_path / d).mkdir()
    found = violations(tmp_path)
    assert any("import of ray._private" in v for v in found)
    assert any("Runner uses RLlib's self._seed" in v for v in found)
    # SeamLearner is defined in the (unscanned) seam: its subclasses are still found
    assert any("Mine overrides RLlib's _update" in v for v in found)
    assert any("Mine uses RLlib's self._module" in v for v in found)
    assert any("env_runner_group._worker_manager" in v for v in found)
    assert any("ray.init(_node_ip_address" in v for v in found)
    assert not any("_forward_train" in v for v in found)
