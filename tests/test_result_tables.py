"""The result tables of README.md and docs/ (marl.benchmarks.tables): every results block of the
repository agrees with the JSON kept in docs/results/, a changed number fails ``--check``, and the
tables of a small hand-made report have hand-computed values.

Statistics: Agarwal et al. 2021 (arXiv:2108.13264); protocol: Gorsane et al. 2022 (arXiv:2209.10485).
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from typing import Any, Dict

import pytest
import yaml

from marl.benchmarks import tables
from marl.benchmarks.benchmark_cli import main as benchmark_main
from marl.benchmarks.report import write_report
from marl.errors import MarlError

ROOT = Path(__file__).resolve().parents[1]


# ------------------------------------------------------------------ the repository itself
def test_repository_blocks_agree_with_kept_json():
    """Every block of README.md and docs/ is what docs/results/ gives, and there are blocks of every kept suite."""
    assert tables.check_docs(ROOT) == []
    kept = {p.parent.name for p in (ROOT / "docs" / "results").glob("*/report.json")}
    used = {m.group("suite") for p in tables.doc_files(ROOT) for m in tables.BLOCK.finditer(p.read_text())}
    assert {"matrix", "smoke"} <= kept
    assert kept == used  # no kept JSON without a table, no table without its JSON


def test_repository_reports_rebuild_from_results():
    """Each kept report.json is the report of its kept results.json (same resamples and seed)."""
    assert tables.check_reports(ROOT) == []


def _copy_repo_docs(tmp_path: Path) -> Path:
    shutil.copy(ROOT / "README.md", tmp_path / "README.md")
    shutil.copytree(ROOT / "docs", tmp_path / "docs")
    return tmp_path


def test_a_drifted_doc_number_fails_check_and_a_rewrite_restores_it(tmp_path, capsys):
    root = _copy_repo_docs(tmp_path)
    doc = root / "docs" / "benchmarks.md"
    original = doc.read_text()
    block = re.search(r"<!-- results:matrix:task:matrix/two_step -->\n(.*?)<!-- /results -->", original, re.S)
    row = next(line for line in block.group(1).splitlines() if line.startswith("| qmix |"))
    drifted = re.sub(r"\| (-?\d+)\.(\d)", lambda m: f"| {int(m.group(1)) + 1}.{m.group(2)}", row, count=1)
    assert drifted != row
    doc.write_text(original.replace(row, drifted))

    diffs = tables.check_docs(root)
    assert len(diffs) == 1 and "docs/benchmarks.md" in diffs[0] and f"-{drifted}" in diffs[0]
    assert benchmark_main(["tables", "--check", "--root", str(root)]) == 1
    assert benchmark_main(["tables", "--root", str(root)]) == 0
    assert doc.read_text() == original
    assert tables.check_docs(root) == []


# ------------------------------------------------------------------ a hand-made report
def _row(iqm, ci, flag_refs=()):
    return {
        "runs": 3,
        "iqm": iqm,
        "iqm_ci": ci,
        "mean": iqm,
        "mean_ci": ci,
        "median": iqm,
        "references": [{"flag": f} for f in flag_refs],
    }


def _report() -> Dict[str, Any]:
    """Two algorithms on one task; qmix has a reference it disagrees with, mappo none."""
    curve = {
        "step_count": [0, 1000, 2000],
        "runs": 3,
        "iqm": [1.0, 5.0, 14.5],
        "ci_low": [1.0, 4.0, 14.0],
        "ci_high": [1.0, 6.0, 15.25],
    }
    return {
        "suite": "tiny",
        "reps": 10,
        "seed": 0,
        "confidence": 0.95,
        "provenance": ["versions: marl 1.0, Ray 2.60.0", "git commit: abc123", "hardware: cpu X", "time: t0"],
        "envs": {
            "matrix": {
                "metric": "return",
                "notes": [],
                "tasks": {
                    "two_step": {
                        "algos": {"mappo": _row(16.0, [16.0, 16.0]), "qmix": _row(14.6667, [14.0, 16.0], [True])},
                        "curves": {"mappo": curve},
                    }
                },
                "aggregate": {
                    "tasks": ["two_step"],
                    "left_out": [],
                    "algos": {
                        "mappo": {
                            "runs": 3,
                            "tasks": 1,
                            "iqm": 1.0,
                            "iqm_ci": [1.0, 1.0],
                            "mean": 1.0,
                            "mean_ci": [1.0, 1.0],
                            "median": 1.0,
                            "median_ci": [1.0, 1.0],
                        }
                    },
                },
            }
        },
        "targets": [],
    }


def _suite(report=None, provenance=None) -> tables.SuiteResults:
    return tables.SuiteResults("tiny", Path("docs/results/tiny"), report or _report(), provenance or {})


def test_task_table_of_a_hand_made_report():
    assert tables.render(_suite(), "task:matrix/two_step").splitlines() == [
        "| algo | runs | IQM [95% CI] | mean [95% CI] | median | flag |",
        "|---|---|---|---|---|---|",
        "| mappo | 3 | 16.000 [16.000, 16.000] | 16.000 [16.000, 16.000] | 16.000 | n/a |",
        "| qmix | 3 | 14.667 [14.000, 16.000] | 14.667 [14.000, 16.000] | 14.667 | **flag** |",
    ]


def test_final_aggregate_value_and_provenance_blocks():
    res = _suite(
        provenance={
            "wall_clock_s": 272.4,
            "hardware": {"cpu": "X", "cpus": 2, "memory_gib": 8.0, "gpus": []},
            "runs": {
                "matrix/two_step/mappo/seed_0": {"wall_clock_s": 7.4},
                "matrix/two_step/mappo/seed_1": {"wall_clock_s": 5.2},
                "matrix/two_step/qmix/seed_0": {"wall_clock_s": 11.0},
            },
        }
    )
    assert (
        tables.render(res, "final:matrix/two_step").splitlines()[2] == "| mappo | 3 | 2,000 | 14.500 [14.000, 15.250] |"
    )
    assert (
        tables.render(res, "aggregate:matrix").splitlines()[-1]
        == "| mappo | 3 x 1 | 1.000 [1.000, 1.000] | 1.000 [1.000, 1.000] | 1.000 [1.000, 1.000] |"
    )
    assert tables.render(res, "value:matrix/two_step/qmix/iqm") == "14.667"
    assert tables.render(res, "wall_clock") == "4 min 32 s"
    prov = tables.render(res, "provenance")
    assert "- git commit: abc123" in prov and "X, 2 CPUs, 8.0 GiB, no GPU" in prov
    assert "matrix/two_step mappo 5-7 s; matrix/two_step qmix 11-11 s" in prov
    assert "(3 runs)" in prov


def test_provenance_times_only_finished_runs():
    # a launch stopped mid-run: the interrupted run's 44 s is not a run's length
    runs = {
        "matrix/two_step/mappo/seed_0": {"status": "done", "wall_clock_s": 7.4},
        "matrix/two_step/mappo/seed_1": {"status": "interrupted", "wall_clock_s": 0.4},
    }
    prov = tables.render(_suite(provenance={"wall_clock_s": 9.0, "runs": runs}), "provenance")
    assert "matrix/two_step mappo 7-7 s" in prov
    assert "(2 runs, 1 finished)" in prov


@pytest.mark.parametrize("seconds, text", [(52.4, "52 s"), (272, "4 min 32 s"), (3900, "1 h 05 min")])
def test_duration(seconds, text):
    assert tables.duration(seconds) == text


def test_rewrite_changes_only_the_blocks_and_is_idempotent():
    text = (
        "# Title\n\nkeep this 99.9\n<!-- results:tiny:task:matrix/two_step -->\nold table\n<!-- /results -->\n"
        "QMIX scores <!-- results:tiny:value:matrix/two_step/qmix/median -->0<!-- /results --> here.\n"
    )
    new = tables.rewrite_text(text, lambda s: _suite())
    assert new.startswith("# Title\n\nkeep this 99.9\n<!-- results:tiny:task:matrix/two_step -->\n| algo |")
    assert "old table" not in new
    assert "QMIX scores <!-- results:tiny:value:matrix/two_step/qmix/median -->14.667<!-- /results --> here.\n" in new
    assert tables.rewrite_text(new, lambda s: _suite()) == new


@pytest.mark.parametrize(
    "text, message",
    [
        ("a\n<!-- results:tiny:task:matrix/two_step -->\n| x |\n", r"doc.md:2: a results marker without"),
        (
            "<!-- results:tiny:task:matrix/two_step -->\n<!-- results:tiny:targets -->\n<!-- /results -->",
            r"doc.md:2: a results marker without",
        ),
        (
            "<!-- results:tiny:tabel:matrix -->x<!-- /results -->",
            r"doc.md:1: Unknown results block kind 'tabel'; valid: .*task",
        ),
        (
            "<!-- results:tiny:task:matrix/three_step -->x<!-- /results -->",
            r"Unknown task 'three_step' in tiny/matrix; valid: two_step",
        ),
        (
            "<!-- results:tiny:value:matrix/two_step/qmix/max -->x<!-- /results -->",
            r"Unknown statistic 'max'; valid: iqm, mean, median",
        ),
        ("<!-- results:tiny:targets -->x<!-- /results -->", r"has no targets"),
    ],
)
def test_bad_blocks_are_errors_naming_the_place(text, message):
    with pytest.raises(MarlError, match=message):
        tables.rewrite_text(text, lambda s: _suite(), "doc.md")


def test_unknown_suite_names_the_kept_ones(tmp_path):
    (tmp_path / "docs" / "results" / "matrix").mkdir(parents=True)
    (tmp_path / "docs" / "results" / "matrix" / "report.json").write_text("{}")
    with pytest.raises(MarlError, match=r"No kept results of suite 'mpe_core'.*Suites with results: matrix"):
        tables.load_suite(tmp_path, "mpe_core")


# ------------------------------------------------------------------ a run folder, end to end
def _run_folder(path: Path, task: str = "two_step", offset: float = 0.0, wall: float = 30.0) -> Path:
    """A finished 'tiny' suite: qmix, 3 seeds, absolute returns 1, 2 and 3 (IQM = mean = median = 2 below 4
    runs), each plus ``offset``, on ``task``."""
    path.mkdir()
    data = {
        "matrix": {
            task: {
                "qmix": {
                    f"seed_{k}": {
                        "step_0": {"step_count": 0, "elapsed_time": 0.0, "return": [0.0, 0.0]},
                        "step_1": {"step_count": 100, "elapsed_time": 1.0, "return": [float(k + 1)] * 2},
                        "absolute_metrics": {"return": [float(k + 1) + offset] * 4},
                    }
                    for k in range(3)
                }
            }
        }
    }
    (path / "results.json").write_text(json.dumps(data))
    (path / "suite.yaml").write_text(yaml.safe_dump({"name": "tiny", "budget": {"env_steps": 100}}))
    runs = {f"matrix/{task}/qmix/seed_{k}": {"status": "done", "wall_clock_s": wall / 3} for k in range(3)}
    (path / "provenance.json").write_text(
        json.dumps({"wall_clock_s": wall, "runs": runs, "command": f"marl benchmark run tiny --tasks {task}"})
    )
    write_report(path, reps=50)
    return path


def test_import_a_run_folder_then_write_and_check(tmp_path):
    run = _run_folder(tmp_path / "run")
    root = tmp_path / "repo"
    (root / "docs" / "results").mkdir(parents=True)
    (root / "README.md").write_text(
        "took <!-- results:tiny:wall_clock -->?<!-- /results -->\n"
        "<!-- results:tiny:task:matrix/two_step -->\n<!-- /results -->\n"
    )
    assert benchmark_main(["tables", "--import", str(run), "--root", str(root)]) == 0
    assert sorted(p.name for p in (root / "docs" / "results" / "tiny").iterdir()) == sorted(tables.KEPT_FILES)
    text = (root / "README.md").read_text()
    assert text.startswith("took <!-- results:tiny:wall_clock -->30 s<!-- /results -->")
    row = next(line for line in text.splitlines() if line.startswith("| qmix"))
    assert row.startswith("| qmix | 3 | 2.000 [") and row.endswith("| 2.000 | n/a |")
    assert tables.check_docs(root) == [] and tables.check_reports(root) == []

    kept = root / "docs" / "results" / "tiny" / "report.json"
    report = json.loads(kept.read_text())
    report["envs"]["matrix"]["tasks"]["two_step"]["algos"]["qmix"]["iqm"] = 2.5  # a hand edit
    kept.write_text(json.dumps(report))
    assert len(tables.check_reports(root)) == 1
    assert len(tables.check_docs(root)) == 1  # the table now disagrees with the edited JSON


def test_import_refuses_a_folder_without_results(tmp_path):
    with pytest.raises(MarlError, match="results.json not found: --import takes the output folder"):
        tables.import_run(tmp_path, tmp_path)


def test_import_merge_keeps_the_other_tasks_and_replaces_the_same_runs(tmp_path):
    """``--import --merge``: a task run later joins the kept one; re-importing a task replaces its runs."""
    root = tmp_path / "repo"
    (root / "docs" / "results").mkdir(parents=True)
    tables.import_run(_run_folder(tmp_path / "a"), root)
    (root / "README.md").write_text(
        "<!-- results:tiny:value:matrix/two_step/qmix/iqm -->?<!-- /results --> "
        "<!-- results:tiny:value:matrix/climbing/qmix/iqm -->?<!-- /results --> "
        "<!-- results:tiny:wall_clock -->?<!-- /results -->\n"
    )
    later = _run_folder(tmp_path / "b", task="climbing", offset=10.0, wall=60.0)
    assert benchmark_main(["tables", "--import", str(later), "--merge", "--root", str(root)]) == 0
    kept = root / "docs" / "results" / "tiny"
    assert sorted(json.loads((kept / "results.json").read_text())["matrix"]) == ["climbing", "two_step"]
    # IQM of 1, 2, 3 is 2; of 11, 12, 13 is 12; the wall-clock is both launches' 30 s + 60 s
    assert (
        (root / "README.md")
        .read_text()
        .startswith(
            "<!-- results:tiny:value:matrix/two_step/qmix/iqm -->2.000<!-- /results --> "
            "<!-- results:tiny:value:matrix/climbing/qmix/iqm -->12.000<!-- /results --> "
            "<!-- results:tiny:wall_clock -->1 min 30 s<!-- /results -->"
        )
    )
    prov = json.loads((kept / "provenance.json").read_text())
    assert len(prov["runs"]) == 6 and prov["earlier_launches"][0]["command"].endswith("--tasks two_step")
    assert tables.check_docs(root) == [] and tables.check_reports(root) == []

    again = _run_folder(tmp_path / "c", task="climbing", offset=20.0, wall=60.0)
    assert benchmark_main(["tables", "--import", str(again), "--merge", "--root", str(root)]) == 0
    report = json.loads((kept / "report.json").read_text())["envs"]["matrix"]["tasks"]
    assert report["climbing"]["algos"]["qmix"]["iqm"] == pytest.approx(22.0)
    assert report["two_step"]["algos"]["qmix"]["iqm"] == pytest.approx(2.0)
    assert tables.check_reports(root) == []


def test_import_merge_refuses_another_budget(tmp_path):
    root = tmp_path / "repo"
    (root / "docs" / "results").mkdir(parents=True)
    tables.import_run(_run_folder(tmp_path / "a"), root)
    other = _run_folder(tmp_path / "b", task="climbing")
    (other / "suite.yaml").write_text(yaml.safe_dump({"name": "tiny", "budget": {"env_steps": 999}}))
    with pytest.raises(MarlError, match=r"suite key 'budget' is \{'env_steps': 999\} there and \{'env_steps': 100\}"):
        tables.import_run(other, root, merge=True)
    with pytest.raises(MarlError, match="--merge goes with --import"):
        benchmark_main(["tables", "--merge", "--root", str(root)])
