"""marl.benchmarks: the benchmarks run end to end, return their figures as dataclasses and JSON,
and the text report is formatted from them.

No timing thresholds: only that the figures are there, positive and consistent.
"""

import json
import math

import pytest

from marl.benchmarks import agents, smax
from marl.benchmarks.cli import build_parser, main
from marl.benchmarks.common import SideResult, jsonable
from marl.benchmarks.rllib_anchor import _envs_per_runner
from marl.benchmarks.throughput import ThroughputResult, ThroughputSettings


def _check_side(side, iterations, steps_per_iter):
    """``side``: one side of the JSON (``SideResult.to_dict``)."""
    assert side["iterations"] == iterations
    assert side["env_steps"] == iterations * steps_per_iter
    for key in ("env_steps_per_s", "sample_s", "learn_s", "wall_s", "env_steps_per_cpu_s"):
        assert side[key] > 0 and math.isfinite(side[key]), key
    # the rate is env steps / wall time, the CPU rate env steps / CPU time
    assert side["env_steps_per_s"] == pytest.approx(side["env_steps"] / side["wall_s"])
    assert side["env_steps_per_cpu_s"] == pytest.approx(side["env_steps"] / side["cpu_s"])


@pytest.mark.timeout(120)
def test_throughput_json_and_report(ray_session, tmp_path, capsys):
    B, T = 4, 25
    path = tmp_path / "out" / "throughput.json"
    assert (
        main(
            [
                "throughput",
                "--iters",
                "2",
                "--num-envs",
                str(B),
                "--rollout-length",
                str(T),
                "--epochs",
                "2",
                "--skip-vmas",
                "--json",
                str(path),
            ]
        )
        == 0
    )
    text = capsys.readouterr().out
    data = json.loads(path.read_text())
    assert data["benchmark"] == "throughput"
    assert set(data["sides"]) == {"ours", "rllib"}
    for name in ("ours", "rllib"):
        _check_side(data["sides"][name], iterations=1, steps_per_iter=T * B)
    ours, rllib = data["sides"]["ours"], data["sides"]["rllib"]
    assert data["ratio"] == pytest.approx(ours["env_steps_per_s"] / rllib["env_steps_per_s"])
    assert data["cpu_ratio"] == pytest.approx(ours["env_steps_per_cpu_s"] / rllib["env_steps_per_cpu_s"])
    assert data["cpu_ratio"] > 0
    assert data["vmas_env_steps_per_s"] is None and data["vmas_goal_met"] is None
    assert data["settings"]["num_envs"] == B and data["settings"]["epochs"] == 2
    assert data["settings"]["mode"] == "interleaved"
    assert ours["settings"]["B"] == B and ours["settings"]["E"] == 2 and rllib["settings"]["E"] == 2
    assert len(data["load_start"]) == 3 and len(data["load_end"]) == 3
    # RLlib did one minibatch update per epoch (otherwise the side carries a note)
    assert rllib["notes"] == [] and "rllib note" not in text
    assert rllib["settings"]["minibatches_per_iter"] == 2
    # the printed report is the one formatted from the figures written
    assert text.startswith(ThroughputResult.from_dict(data).report())
    assert f"figures written to {path}" in text


def _result(sides, mode="interleaved"):
    return ThroughputResult(
        sides=sides,
        settings=ThroughputSettings(mode=mode),
        load_start=(1.0, 0.5, 0.25),
        load_end=(1.5, 0.75, 0.3),
        total_s=42.0,
        cpus=2,
    )


def test_report_and_json_from_the_dataclasses():
    sides = {
        "ours": SideResult(
            "ours", env_steps=7200, wall_s=2.0, iterations=9, sample_s=0.12, learn_s=0.09, cpu_s=2.1, settings={"B": 32}
        ),
        "rllib": SideResult("rllib", env_steps=7200, wall_s=6.0, iterations=9, sample_s=0.5, learn_s=0.15, cpu_s=6.2),
        "vmas": SideResult(
            "vmas", env_steps=115200, wall_s=4.0, iterations=9, sample_s=0.2, learn_s=0.2, settings={"B": 512}
        ),  # cpu_s unknown -> nan
    }
    r = _result(sides)
    assert r.sides["ours"].steps_per_s == pytest.approx(3600.0)
    assert r.sides["rllib"].steps_per_s == pytest.approx(1200.0)
    assert r.ratio == pytest.approx(3.0) and r.ratio_goal_met
    assert r.cpu_ratio == pytest.approx((7200 / 2.1) / (7200 / 6.2))
    assert r.vmas_steps_per_s == pytest.approx(28800.0) and r.vmas_goal_met
    assert math.isnan(r.sides["vmas"].steps_per_cpu_s)
    text = r.report()
    assert "goal >= 2.5x: met" in text and "with B >= 256: met" in text
    assert "ratio ours/rllib: 3.00x" in text and "vmas env_steps/s: 28800.0" in text
    assert "loadavg start: 1.00 0.50 0.25  (cpus: 2)" in text
    # JSON: strict (NaN -> null), derived figures included, and it reads back to the same report
    data = json.loads(json.dumps(jsonable(r), allow_nan=False))
    assert data["ratio"] == pytest.approx(3.0) and data["vmas_env_steps_per_s"] == pytest.approx(28800.0)
    assert data["sides"]["vmas"]["env_steps_per_cpu_s"] is None and data["sides"]["vmas"]["cpu_s"] is None
    assert data["load_start"] == [1.0, 0.5, 0.25]
    back = ThroughputResult.from_dict(data)
    assert math.isnan(back.sides["vmas"].cpu_s) and back.report() == text


def test_skipped_sides_and_parser():
    ns = build_parser().parse_args(["throughput", "--iters", "3", "--num-envs", "8", "--skip-vmas"])
    got = (ns.iters, ns.num_envs, ns.skip_vmas, ns.skip_rllib, ns.epochs, ns.rollout_length, ns.json)
    assert got == (3, 8, True, False, 10, 25, None)
    assert build_parser().parse_args([]).vmas_num_envs is None  # resolved per command: throughput's is 512
    assert build_parser().parse_args(["agents", "--json", "a.json"]).json == "a.json"
    r = _result({}, mode="sequential")
    assert r.ratio is None and r.cpu_ratio is None and r.vmas_steps_per_s is None and r.sides == {}
    text = r.report()
    assert "ratio ours/rllib: n/a (a side was skipped)" in text and "vmas env_steps/s: n/a (skipped)" in text
    for name in ("ours", "rllib", "vmas"):
        assert f"{name:<6} {'skipped':>12}" in text
    data = jsonable(r)
    assert data["ratio"] is None and data["vmas_env_steps_per_s"] is None and data["sides"] == {}


@pytest.mark.parametrize("steps,expected", [(800, 8), (100, 4), (25, 1), (96, 8)])
def test_envs_per_runner(steps, expected):
    # fragments of whole 25-step episodes where possible, 8 envs preferred
    assert _envs_per_runner(steps, 25) == expected


@pytest.mark.timeout(300)
def test_smax_bench_reports_both_algorithms(ray_session):
    pytest.importorskip("jaxmarl")
    r = smax.run(iters=4, num_envs=8)
    assert [s.name for s in r.sides] == ["qmix", "mappo"]
    for s in r.sides:
        assert s.steps_per_s > 0 and s.iterations >= 1
    assert r.ratio == pytest.approx(r.sides[0].steps_per_s / r.sides[1].steps_per_s)
    text = r.report()
    assert "ratio qmix/mappo" in text and "qmix " in text and "mappo " in text
    data = json.loads(json.dumps(jsonable(r)))
    assert data["benchmark"] == "smax" and data["ratio"] == pytest.approx(r.ratio)
    assert smax.SmaxResult.from_dict(data).report() == text


def test_agents_bench_reports_each_network_against_the_plain_one(ray_session):
    pytest.importorskip("jaxmarl")
    r = agents.run(iters=4, num_envs=8, scenario="3m", kinds=("mlp", "hpn"), batch_size=8)
    assert [s.name for s in r.sides] == ["mlp", "hpn"]
    assert r.ratios["mlp"] == 1.0 and r.sides[1].steps_per_s > 0
    assert r.ratios["hpn"] == pytest.approx(r.sides[1].steps_per_s / r.sides[0].steps_per_s)
    assert r.overrides == {"batch_size": 8}
    text = r.report()
    assert "batch_size=8" in text and "1.00x" in text
    data = json.loads(json.dumps(jsonable(r)))
    assert data["benchmark"] == "agents" and data["ratios"]["mlp"] == 1.0
    assert agents.AgentsResult.from_dict(data).report() == text


@pytest.mark.parametrize("argv, expected", [([], 512), (["--vmas-num-envs", "256"], 256)])
def test_throughput_gets_the_vmas_copies_default_or_given(argv, expected, monkeypatch):
    import inspect

    from marl.benchmarks import cli, throughput

    default = inspect.signature(throughput.run).parameters["vmas_num_envs"].default
    seen = {}
    monkeypatch.setattr(throughput, "run", lambda **kw: seen.update(kw) or "ran")
    assert cli.run_command(build_parser().parse_args(["throughput", *argv])) == "ran"
    assert seen.get("vmas_num_envs", default) == expected
