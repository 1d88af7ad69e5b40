"""Run the code blocks of one doc page in order, in this process (tests/test_doc_examples.py).

Usage: ``python run_page.py BLOCKS.json``, where the JSON file holds the page's runnable blocks
(``path``, ``line``, ``lang``, ``code``, ``setup``) in page order. Python blocks share one
namespace, as a reader would run a page top to bottom; it starts with ``import marl``. Shell
blocks run in ``bash -e -o pipefail`` with ``marl`` and ``python`` meaning this interpreter. A
traceback names the page and the line in it (the code is compiled with blank lines in front).
Prints one ``DOC-TEST {json}`` line per block; stops at the first failure, since later blocks of
a page may use what it defines.
"""

import json
import subprocess
import sys
import time
import traceback

SHELL_PRELUDE = 'marl() {{ "{py}" -m marl.cli "$@"; }}\npython() {{ "{py}" "$@"; }}\nexport -f marl python\n'


def run_python(block: dict, namespace: dict) -> None:
    """Exec the block's setup, then its code, with tracebacks at the page's own line numbers."""
    if block["setup"]:
        exec(
            compile(block["setup"], f"{block['path']} (doc-test setup before line {block['line']})", "exec"), namespace
        )
    exec(compile("\n" * block["line"] + block["code"], block["path"], "exec"), namespace)


def run_shell(block: dict) -> None:
    """Run setup and code in one bash; a non-zero exit raises with the tail of its output."""
    script = SHELL_PRELUDE.format(py=sys.executable) + block["setup"] + "\n" + block["code"]
    proc = subprocess.run(["bash", "-e", "-o", "pipefail", "-c", script], capture_output=True, text=True)
    sys.stdout.write(proc.stdout[-4000:])
    if proc.returncode != 0:
        raise RuntimeError(f"exit code {proc.returncode}; stderr:\n{proc.stderr[-4000:]}")


def main(blocks_file: str) -> int:
    blocks = json.loads(open(blocks_file).read())
    namespace: dict = {"__name__": "__doc_test__"}
    exec("import marl", namespace)
    for block in blocks:
        start = time.perf_counter()
        try:
            run_python(block, namespace) if block["lang"] == "python" else run_shell(block)
        except BaseException:  # noqa: B036 - a doc block's SystemExit or KeyboardInterrupt is its failure too
            error = traceback.format_exc()
            print("DOC-TEST " + json.dumps({"line": block["line"], "ok": False, "error": error[-6000:]}), flush=True)
            return 1
        seconds = round(time.perf_counter() - start, 1)
        print("DOC-TEST " + json.dumps({"line": block["line"], "ok": True, "seconds": seconds}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
