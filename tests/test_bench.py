"""marl.bench: the throughput benchmark runs end to end and its report parses.

No timing thresholds: only that the figures are there, positive and consistent.
"""
import math

import pytest

from marl import bench


def _check_side(side, iterations, steps_per_iter):
    assert side["iterations"] == iterations
    assert side["env_steps"] == iterations * steps_per_iter
    for key in ("env_steps_per_s", "sample_s", "learn_s", "wall_s", "env_steps_per_cpu_s"):
        assert side[key] > 0 and math.isfinite(side[key]), key
    # the printed rate is env steps / wall time (wall printed to 4 decimals, rate to 1)
    rate, wall = side["env_steps"] / side["wall_s"], side["wall_s"]
    assert side["env_steps_per_s"] == pytest.approx(rate, abs=rate * 5e-5 / (wall - 5e-5) + 0.051)


@pytest.mark.timeout(120)
def test_throughput_report_parses(ray_session):
    B, T = 4, 25
    text = bench.throughput(iters=2, num_envs=B, rollout_length=T, epochs=2, skip_vmas=True)
    parsed = bench.parse_report(text)
    assert set(parsed["sides"]) == {"ours", "rllib"}
    for name in ("ours", "rllib"):
        _check_side(parsed["sides"][name], iterations=1, steps_per_iter=T * B)
    ours, rllib = parsed["sides"]["ours"]["env_steps_per_s"], parsed["sides"]["rllib"]["env_steps_per_s"]
    assert parsed["ratio"] == pytest.approx(ours / rllib, abs=0.006, rel=2e-3)
    assert parsed["cpu_ratio"] > 0
    assert parsed["vmas"] is None
    assert parsed["settings"]["B"] == str(B) and parsed["settings"]["E"] == "2"
    assert parsed["settings"]["mode"] == "interleaved"
    assert len(parsed["loadavg_start"]) == 3 and len(parsed["loadavg_end"]) == 3
    # RLlib did one minibatch update per epoch (otherwise the report carries a note)
    assert "rllib note" not in text
    assert "minibatches_per_iter=2" in text


def test_report_round_trip():
    sides = {
        "ours": bench.SideResult("ours", env_steps=7200, wall_s=2.0, iterations=9, sample_s=0.12, learn_s=0.09,
                                 cpu_s=2.1, settings={"B": 32}),
        "rllib": bench.SideResult("rllib", env_steps=7200, wall_s=6.0, iterations=9, sample_s=0.5, learn_s=0.15,
                                  cpu_s=6.2),
        "vmas": bench.SideResult("vmas", env_steps=115200, wall_s=4.0, iterations=9, sample_s=0.2, learn_s=0.2,
                                 settings={"B": 512}),  # cpu_s unknown -> nan
    }
    data = {"sides": sides, "load_start": (1.0, 0.5, 0.25), "load_end": (1.5, 0.75, 0.3), "total_s": 42.0,
            "settings": {"num_envs": 32, "rollout_length": 25, "epochs": 10, "iters": 10, "seconds": None,
                         "vmas_num_envs": 512, "mode": "interleaved"}}
    text = bench.format_report(data)
    p = bench.parse_report(text)
    assert p["sides"]["ours"]["env_steps_per_s"] == pytest.approx(3600.0)
    assert p["sides"]["rllib"]["env_steps_per_s"] == pytest.approx(1200.0)
    assert p["ratio"] == pytest.approx(3.0)
    assert p["vmas"] == pytest.approx(28800.0)
    assert math.isnan(p["sides"]["vmas"]["env_steps_per_cpu_s"])
    assert "goal >= 2.5x: met" in text and "with B >= 256: met" in text
    assert p["loadavg_start"] == [1.0, 0.5, 0.25]


def test_skipped_sides_and_parser():
    ns = bench.build_parser().parse_args(["throughput", "--iters", "3", "--num-envs", "8", "--skip-vmas"])
    got = (ns.iters, ns.num_envs, ns.skip_vmas, ns.skip_rllib, ns.epochs, ns.rollout_length)
    assert got == (3, 8, True, False, 10, 25)
    assert bench.build_parser().parse_args([]).vmas_num_envs == 512
    data = {"sides": {}, "load_start": (0, 0, 0), "load_end": (0, 0, 0), "total_s": 0.0,
            "settings": {"num_envs": 32, "rollout_length": 25, "epochs": 10, "iters": 10, "seconds": None,
                         "vmas_num_envs": 512, "mode": "sequential"}}
    p = bench.parse_report(bench.format_report(data))
    assert p["ratio"] is None and p["vmas"] is None and p["sides"] == {}


@pytest.mark.parametrize("steps,expected", [(800, 8), (100, 4), (25, 1), (96, 8)])
def test_envs_per_runner(steps, expected):
    # fragments of whole 25-step episodes where possible, 8 envs preferred
    assert bench._envs_per_runner(steps, 25) == expected


@pytest.mark.timeout(300)
def test_smax_bench_reports_both_algorithms(ray_session):
    pytest.importorskip("jaxmarl")
    text = bench.smax(iters=4, num_envs=8)
    rows = {line.split()[0]: line.split() for line in text.splitlines() if line.startswith(("qmix ", "mappo "))}
    assert set(rows) == {"qmix", "mappo"}
    for r in rows.values():
        assert float(r[1]) > 0 and int(r[4]) >= 1
    assert "ratio qmix/mappo" in text


def test_agents_bench_reports_each_network_against_the_plain_one(ray_session):
    pytest.importorskip("jaxmarl")
    text = bench.agents(iters=4, num_envs=8, scenario="3m", kinds=("mlp", "hpn"), batch_size=8)
    rows = {line.split()[0]: line.split() for line in text.splitlines() if line.startswith(("mlp ", "hpn "))}
    assert set(rows) == {"mlp", "hpn"}
    assert rows["mlp"][-1] == "1.00x" and float(rows["hpn"][1]) > 0
    assert "batch_size=8" in text
