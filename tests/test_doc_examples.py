"""Every code block of README.md and docs/ runs (doctest-style, with small budgets).

Each ```python and ```bash block of README.md, docs/*.md and docs/algorithms/*.md runs, page by
page: one fresh subprocess per page runs its blocks in order (tests/doc_examples/run_page.py), in a
temporary folder that links the repository's examples/, configs/ and docs/. Training is clamped
by tests/doc_examples/sitecustomize.py (on the subprocess's PYTHONPATH): every ``fit`` trains
``MARL_DOC_TEST_ITERATIONS`` (1) iterations and evaluates at most 4 episodes, whatever the
example's budget. SMAX compiles with XLA's backend optimisation off (``XLA_FLAGS``), which
cuts the compile time of each scenario about 3x and changes no shape. A failure names the page
and the block's line.

A block that cannot run here carries a visible marker in the page source, on the lines just
before its fence (HTML comments, not rendered):

- ``<!-- doc-test: skip (reason) -->``: not run; the reason is printed and counted;
- ``<!-- doc-test: setup`` ... ``-->``: code run before the block (its language), e.g. a
  fragment's definitions;
- ``<!-- doc-test: replace "OLD" "NEW" -->``: run the block with OLD replaced by NEW (a
  placeholder such as ``<run>``).

Blocks of other languages (yaml, json, plain text) are not code and are not counted.
"""

import json
import os
import re
import shlex
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional

import pytest

ROOT = Path(__file__).resolve().parents[1]
HERE = Path(__file__).resolve().parent / "doc_examples"
PAGES = [
    ROOT / "README.md",
    *sorted((ROOT / "docs").glob("*.md")),
    *sorted((ROOT / "docs" / "algorithms").glob("*.md")),
]
RUN_LANGS = {"python", "bash"}
LINKED = ["examples", "configs", "docs", "README.md"]  # what blocks read from the repository root
PAGE_TIMEOUT_S = 600

FENCE = re.compile(r"^```(\S*)\s*$")
MARKER = re.compile(r"^<!-- doc-test: (skip|setup|replace)\b(.*?)(-->)?\s*$")

SUMMARY: Dict[str, Dict[str, list]] = {}  # page -> {"run": [lines], "skipped": [(line, reason)]}


@dataclass
class Block:
    """One fenced code block: its page, the line of its opening fence, language and code."""

    path: str
    line: int
    lang: str
    code: str
    skip: Optional[str] = None
    setup: str = ""
    replace: List[List[str]] = field(default_factory=list)

    def runnable_code(self) -> str:
        code = self.code
        for old, new in self.replace:
            assert old in code, f"{self.path}:{self.line}: doc-test replace {old!r} does not occur in the block"
            code = code.replace(old, new)
        return code


def _apply_marker(kind: str, body: str, where: str, pending: dict) -> None:
    if kind == "skip":
        reason = body.strip()
        assert reason.startswith("(") and reason.endswith(")"), f"{where}: doc-test skip needs a (reason)"
        pending["skip"] = reason[1:-1]
    elif kind == "setup":
        pending["setup"] = pending.get("setup", "") + body.strip("\n") + "\n"
    else:
        parts = shlex.split(body)
        assert len(parts) == 2, f'{where}: doc-test replace takes "OLD" "NEW", got {body!r}'
        pending.setdefault("replace", []).append(parts)


def extract(path: Path) -> List[Block]:
    """The fenced blocks of a Markdown page with the doc-test markers just before each.

    Raises:
        AssertionError: a marker that is malformed or not followed by a code block.
    """
    lines = path.read_text().splitlines()
    rel = str(path.relative_to(ROOT))
    blocks: List[Block] = []
    pending: dict = {}
    i = 0
    while i < len(lines):
        where = f"{rel}:{i + 1}"
        marker = MARKER.match(lines[i])
        fence = FENCE.match(lines[i])
        if marker:
            kind, rest, closed = marker.group(1), marker.group(2), marker.group(3)
            body = [rest]
            while not closed:  # a multi-line marker: everything up to the line "-->"
                i += 1
                assert i < len(lines), f"{where}: doc-test marker without -->"
                closed = lines[i].strip() == "-->"
                if not closed:
                    body.append(lines[i])
            _apply_marker(kind, "\n".join(body), where, pending)
        elif fence:
            start, code = i + 1, []
            i += 1
            while i < len(lines) and not lines[i].startswith("```"):
                code.append(lines[i])
                i += 1
            blocks.append(Block(rel, start, fence.group(1) or "text", "\n".join(code) + "\n", **pending))
            pending = {}
        elif lines[i].strip() and pending:
            raise AssertionError(f"{where}: a doc-test marker must be followed by a code block")
        i += 1
    assert not pending, f"{rel}: a doc-test marker at the end of the page has no block"
    return blocks


def _code_blocks(path: Path) -> List[Block]:
    return [b for b in extract(path) if b.lang in RUN_LANGS]


PAGES_WITH_CODE = [p for p in PAGES if _code_blocks(p)]


def _workdir(tmp_path: Path) -> Path:
    for name in LINKED:
        (tmp_path / name).symlink_to(ROOT / name)
    return tmp_path


def _run_page(blocks: List[Block], tmp_path: Path) -> subprocess.CompletedProcess:
    spec = [
        {"path": b.path, "line": b.line, "lang": b.lang, "code": b.runnable_code(), "setup": b.setup} for b in blocks
    ]
    (tmp_path / "blocks.json").write_text(json.dumps(spec))
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(HERE), env.get("PYTHONPATH", "")])
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    env.setdefault("MARL_DOC_TEST_ITERATIONS", "1")
    env.setdefault("MARL_DOC_TEST_EVAL_EPISODES", "4")
    # SMAX pages spend their time in XLA compiling each scenario's batched reset and step; the blocks
    # check that the code runs, not how fast, so XLA's backend optimisation is off (3x less compile time)
    env.setdefault("XLA_FLAGS", "--xla_backend_optimization_level=0")
    cmd = [sys.executable, str(HERE / "run_page.py"), str(tmp_path / "blocks.json")]
    return subprocess.run(cmd, cwd=_workdir(tmp_path), env=env, capture_output=True, text=True, timeout=PAGE_TIMEOUT_S)


@pytest.fixture(scope="module", autouse=True)
def print_summary(request):
    """After the module: blocks run and skipped per page, with every skip's reason (shown with -s or not)."""
    yield
    run = sum(len(v["run"]) for v in SUMMARY.values())
    skipped = [(page, line, why) for page, v in SUMMARY.items() for line, why in v["skipped"]]
    lines = [f"doc examples: {run} blocks run, {len(skipped)} skipped"]
    lines += [f"  skipped {page}:{line} ({why})" for page, line, why in skipped]
    capture = request.config.pluginmanager.getplugin("capturemanager")
    with capture.global_and_fixture_disabled():
        print("\n" + "\n".join(lines))


def test_markers_parse_and_every_code_block_is_counted(tmp_path):
    """The extractor on a page made here: markers attach to the next block, placeholders are replaced,
    yaml is not code, and a marker with no block after it is an error naming the line."""
    page = tmp_path / "page.md"
    page.write_text(
        "# t\n\n"
        "```python\nx = 1\n```\n\n"
        "<!-- doc-test: skip (needs StarCraft II) -->\n```python\nimport smacv2\n```\n\n"
        '<!-- doc-test: setup\ny = 2\n-->\n<!-- doc-test: replace "<run>" "runs/a" -->\n'
        "```bash\nmarl eval marl_runs/<run>\n```\n\n"
        "```yaml\na: 1\n```\n"
    )
    global ROOT
    saved, ROOT = ROOT, tmp_path
    try:
        blocks = extract(page)
        code = [b for b in blocks if b.lang in RUN_LANGS]
        assert [(b.line, b.lang, b.skip) for b in code] == [
            (3, "python", None),
            (8, "python", "needs StarCraft II"),
            (16, "bash", None),
        ]
        assert code[2].setup == "y = 2\n" and code[2].runnable_code() == "marl eval marl_runs/runs/a\n"
        assert blocks[-1].lang == "yaml"
        page.write_text("<!-- doc-test: skip (x) -->\nsome prose\n```python\n1\n```\n")
        with pytest.raises(AssertionError, match="page.md:2: a doc-test marker must be followed by a code block"):
            extract(page)
    finally:
        ROOT = saved


@pytest.mark.slow  # minutes in all: a subprocess, Ray and a few one-iteration trainers per page
@pytest.mark.parametrize("page", PAGES_WITH_CODE, ids=[str(p.relative_to(ROOT)) for p in PAGES_WITH_CODE])
def test_page_code_blocks_run(page: Path, tmp_path):
    blocks = _code_blocks(page)
    run = [b for b in blocks if b.skip is None]
    rel = str(page.relative_to(ROOT))
    SUMMARY[rel] = {"run": [b.line for b in run], "skipped": [(b.line, b.skip) for b in blocks if b.skip]}
    if not run:
        pytest.skip(f"{rel}: every block is marked skip")
    start = time.perf_counter()
    proc = _run_page(run, tmp_path)
    results = [
        json.loads(line[len("DOC-TEST ") :]) for line in proc.stdout.splitlines() if line.startswith("DOC-TEST ")
    ]
    failed = [r for r in results if not r["ok"]]
    if failed:
        pytest.fail(f"{rel}:{failed[0]['line']}: the code block failed\n{failed[0]['error']}", pytrace=False)
    assert proc.returncode == 0 and len(results) == len(run), (
        f"{rel}: the page's subprocess ended (exit {proc.returncode}) after {len(results)} of {len(run)} blocks"
        f" (the next one starts at line {run[len(results)].line if len(results) < len(run) else '-'})\n"
        f"{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    )
    took = ", ".join(f"{r['line']}: {r['seconds']} s" for r in results)
    print(f"{rel}: {len(results)} blocks in {time.perf_counter() - start:.0f} s ({took})")
