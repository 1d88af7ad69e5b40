"""Citations a reader can follow: docstrings, comments, YAML comments and doc pages cite a paper
(authors, year, arXiv id) or a file of this repository, never a file outside it.

What is read: Python comments (``tokenize``) and docstrings (``ast``), the comment part of YAML
lines, and whole Markdown pages, in the folders below (code lines are not read: a metric key such
as ``"shared/policy_loss"`` is not a citation). Two checks:

* no citation of the project's private notes: the notes folder, its design document or its
  section numbers (see ``FORBIDDEN``), and no section sign that follows no paper citation;
* every file path or file name cited (``*.py``, ``*.sh``, ``*.yaml``, ``*.md``) exists in this
  repository, so a reader can open it; another project's source files (e.g. a learner or
  config file of an official implementation) are cited through the paper instead
  (``docs/references.md``).
"""

from __future__ import annotations

import ast
import io
import re
import tokenize
from pathlib import Path
from typing import Iterator, List, Set, Tuple

REPO = Path(__file__).resolve().parents[1]
FOLDERS = ("marl", "envs", "algos", "benchmarks", "configs", "docs", "examples", "tests")
TOP_FILES = ("README.md", "setup.py")
SELF = Path(__file__).resolve()

FORBIDDEN = [
    (re.compile(r"\breference/"), "the private notes folder (reference/...)"),
    (re.compile(r"\breference,? \(?§"), "a section of the private notes (reference §...)"),
    (re.compile(r"\b(?:algorithms|rllib_engine|anchors|llm_selfplay)\.md,? \(?§"), "a section of a private note"),
    (re.compile(r"DESIGN\.md"), "the private design document (DESIGN.md)"),
    (
        re.compile(r"(?<![\w.-])shared/[\w.-]+(?:/|\.(?:md|py|ya?ml|sh|txt|json)\b)"),
        "the shared notes folder (shared/...)",
    ),
]
# a section sign must follow a paper citation on its line ("Hao et al. 2022, arXiv 2203.05285, §5.4"):
# a bare "§1.5" is a section of some unnamed document
SECTION = re.compile(r"§")
PAPER = re.compile(r"et al\.?,? (?:\(?\d{4})|arXiv")
# a path or file name with one of these extensions, not part of a longer path, URL or glob
PATH = re.compile(r"(?<![\w/.*<>-])((?:\.\.?/)?(?:[\w-]+/)*[\w-]+\.(?:py|sh|ya?ml|md))(?![\w*<>/-])")
# files marl writes at run time (not in the repository, but real names a reader meets),
# and placeholders of examples
RUN_OUTPUTS = {
    "config.yaml",
    "crash_eval.md",
    "docs/x.md",
    "report.md",
    "league.md",
    "my_suite.yaml",
}  # files runs and users write


def _sources() -> Iterator[Path]:
    for folder in FOLDERS:
        for path in sorted((REPO / folder).rglob("*")):
            if path.suffix in (".py", ".yaml", ".yml", ".md") and path.resolve() != SELF:
                yield path
    for name in TOP_FILES:
        yield REPO / name


def _python_texts(path: Path) -> List[Tuple[int, str]]:
    source = path.read_text()
    out = [
        (tok.start[0], tok.string)
        for tok in tokenize.generate_tokens(io.StringIO(source).readline)
        if tok.type == tokenize.COMMENT
    ]
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            doc = ast.get_docstring(node, clean=False)
            if doc is not None:
                first = node.body[0].lineno
                out += [(first + i, line) for i, line in enumerate(doc.splitlines())]
    return out


def _yaml_texts(path: Path) -> List[Tuple[int, str]]:
    out = []
    for n, line in enumerate(path.read_text().splitlines(), 1):
        m = re.search(r"(?:^|\s)#(.*)$", line)
        if m:
            out.append((n, m.group(1)))
    return out


def texts(path: Path) -> List[Tuple[int, str]]:
    """``(line, text)`` of the comments and docs of one file."""
    if path.suffix == ".py":
        return _python_texts(path)
    if path.suffix in (".yaml", ".yml"):
        return _yaml_texts(path)
    return list(enumerate(path.read_text().splitlines(), 1))


def _repo_names() -> Set[str]:
    skip = {".git", "__pycache__"}
    return {p.name for p in REPO.rglob("*") if p.is_file() and not skip & set(p.parts) and ".egg-info" not in str(p)}


NAMES = _repo_names()


def path_exists(cited: str, in_file: Path) -> bool:
    """A cited path resolves from the citing file's folder, the repository root or ``docs/``;
    a bare file name must name a file somewhere in the repository."""
    if cited in RUN_OUTPUTS:
        return True
    if "/" not in cited:
        return cited in NAMES
    return any((base / cited).exists() for base in (in_file.parent, REPO, REPO / "docs"))


def test_the_scan_reads_comments_docstrings_yaml_comments_and_pages():
    """The extraction finds what the checks rely on (guards against a scan that reads nothing)."""
    sample = REPO / "algos" / "value_decomp.py"
    joined = "\n".join(t for _, t in texts(sample))
    assert "arXiv 1803.11485" in joined  # module docstring
    assert "pymarl: RMSprop" in joined  # a trailing comment
    assert "self.hp" not in joined  # code lines are not read
    yaml_text = "\n".join(t for _, t in texts(REPO / "configs" / "algos" / "qmix.yaml"))
    assert "arXiv 2102.03479" in yaml_text and "mixer: qmix" not in yaml_text
    assert len(list(_sources())) > 100


def test_forbidden_patterns_catch_private_notes():
    """The patterns fire on the citations this test exists to keep out (and not on metric keys)."""
    bad = [
        "``reference/algorithms.md`` §1",
        "(reference §5.3)",
        "DESIGN.md §2",
        "algorithms.md §6.6",
        "/work/shared/reference/x.md",
    ]
    for text in bad:
        assert any(rx.search(text) for rx, _ in FORBIDDEN), text
    for text in ["res.metrics['shared/policy_loss']", "the reference policy", "train/shared/value_loss"]:
        assert not any(rx.search(text) for rx, _ in FORBIDDEN), text
    assert not PAPER.search("(MARS, ") and PAPER.search("Hao et al. 2022, arXiv 2203.05285, ")
    assert not path_exists("onpolicy/config.py", REPO / "algos" / "ppo.py")
    assert not path_exists("q_learner.py", REPO / "algos" / "q_learning.py")
    assert path_exists("docs/offbeat.md", REPO / "algos" / "legem.py")
    assert path_exists("../configuration.md", REPO / "docs" / "algorithms" / "ppo.md")


def test_no_citation_points_outside_the_repository():
    problems = []
    for path in _sources():
        rel = path.relative_to(REPO)
        for line, text in texts(path):
            for rx, what in FORBIDDEN:
                if rx.search(text):
                    problems.append(f"{rel}:{line}: cites {what}: {text.strip()}")
            for m in SECTION.finditer(text):
                if not PAPER.search(text[: m.start()]):
                    problems.append(f"{rel}:{line}: a section (§) of no named paper: {text.strip()}")
            for cited in PATH.findall(text):
                if not path_exists(cited, path):
                    problems.append(
                        f"{rel}:{line}: cites {cited!r}, which is not a file of this repository "
                        f"(cite the paper, see docs/references.md): {text.strip()}"
                    )
    assert not problems, "\n".join(problems)
