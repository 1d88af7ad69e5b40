"""``marl bench vs-benchmarl`` / ``marl bench speed``: the BenchMARL child protocol, the goal table, errors.

BenchMARL is not a dependency (it pins its own torchrl): the test that drives the real child runs
only where ``MARL_BENCHMARL_PYTHON`` names BenchMARL's interpreter (docs/engine.md, "Throughput").
"""

import json
import os
import sys

import pytest

from marl.benchmarks import speed
from marl.benchmarks.benchmarl_anchor import BenchmarlAnchor, benchmarl_python
from marl.benchmarks.common import SideResult
from marl.errors import MarlError


def _side(name, steps, wall, learn=0.1):
    return SideResult(name=name, env_steps=steps, wall_s=wall, iterations=4, sample_s=0.05, learn_s=learn, cpu_s=wall)


def test_benchmarl_python_resolution(tmp_path, monkeypatch):
    monkeypatch.delenv("MARL_BENCHMARL_PYTHON", raising=False)
    assert benchmarl_python(None) is None
    exe = tmp_path / "python"
    exe.write_text("")
    monkeypatch.setenv("MARL_BENCHMARL_PYTHON", str(exe))
    assert benchmarl_python(None) == str(exe)
    with pytest.raises(MarlError, match="does not exist.*pip install benchmarl"):
        benchmarl_python(str(tmp_path / "missing"))


def test_child_without_benchmarl_fails_with_its_stderr_and_the_setup_hint():
    # this interpreter has no BenchMARL: the child dies at import, the error carries its traceback
    try:
        import benchmarl  # noqa: F401

        pytest.skip("BenchMARL is installed in this environment")
    except ImportError:
        pass
    with pytest.raises(MarlError, match=r"(?s)exited with code 1.*benchmarl==1.5.2.*ModuleNotFoundError"):
        BenchmarlAnchor(sys.executable, num_envs=8)


def test_vs_benchmarl_ratio_and_json():
    res = speed.VsBenchmarlResult(
        sides={"marl": _side("marl", 40_000, 1.0, learn=0.2), "benchmarl": _side("benchmarl", 10_000, 1.0, learn=0.3)},
        settings={"B": 512},
    )
    assert res.ratio == pytest.approx(4.0)
    assert res.learn_ratio == pytest.approx(1.5)
    data = json.loads(json.dumps(res.to_dict()))
    assert data["ratio"] == pytest.approx(4.0) and data["sides"]["benchmarl"]["env_steps_per_s"] == 10_000
    assert "ratio marl/benchmarl: 4.00x" in res.report()


class _Ratio:
    def __init__(self, ratio):
        self.ratio = ratio

    def report(self):
        return f"ratio {self.ratio}"

    def to_dict(self):
        return {"ratio": self.ratio}


class _Qmix:
    sides = [_side("qmix", 5_000, 2.0), _side("mappo", 9_000, 1.0)]

    def report(self):
        return "smax"

    def to_dict(self):
        return {}


class _Hpn:
    ratios = {"mlp": 1.0, "hpn": 0.5}

    def report(self):
        return "agents"

    def to_dict(self):
        return {"ratios": self.ratios}


def test_speed_goal_table_reads_each_section():
    res = speed.SpeedResult(
        sections={"mpe_rllib": _Ratio(3.2), "vmas_benchmarl": _Ratio(1.1), "smax_qmix": _Qmix(), "hpn": _Hpn()},
        skipped={"mpe_backends": "not asked"},
        load_start=(0, 0, 0),
        load_end=(0, 0, 0),
        total_s=1,
    )
    goals = {g["section"]: g for g in res.goals()}
    assert goals["mpe_rllib"]["met"] and not goals["vmas_benchmarl"]["met"]
    assert goals["smax_qmix"]["value"] == pytest.approx(2_500) and not goals["smax_qmix"]["met"]
    assert goals["hpn"]["value"] == 0.5 and not goals["hpn"]["met"]
    text = res.report()
    assert "mpe_backends: skipped (not asked)" in text and "NO" in text
    assert json.loads(json.dumps(res.to_dict()))["goals"][0]["section"] == "mpe_rllib"


def test_speed_rejects_unknown_sections_and_skips_benchmarl_without_its_python():
    with pytest.raises(MarlError, match="Unknown speed section 'mpe_ril'.*mpe_rllib"):
        speed.run(only=["mpe_ril"])
    res = speed.run(only=["vmas_benchmarl"], benchmarl_python=None, progress=lambda s: None)
    assert res.sections == {} and "pip install benchmarl" in res.skipped["vmas_benchmarl"]


def test_cli_vs_benchmarl_without_python_is_a_clear_error(monkeypatch, capsys):
    monkeypatch.delenv("MARL_BENCHMARL_PYTHON", raising=False)
    from marl.cli import main as marl_main

    try:
        code = marl_main(["bench", "vs-benchmarl"])
    except SystemExit as e:
        code = e.code
    assert code == 2
    assert "needs BenchMARL's python" in capsys.readouterr().err


@pytest.mark.skipif(not os.environ.get("MARL_BENCHMARL_PYTHON"), reason="BenchMARL's python not given")
def test_real_benchmarl_child_runs_timed_iterations():
    anchor = BenchmarlAnchor(
        os.environ["MARL_BENCHMARL_PYTHON"], num_envs=16, rollout_length=10, epochs=1, minibatches=1, max_steps=20
    )
    try:
        its = [anchor.train_one() for _ in range(3)]
    finally:
        anchor.stop()
    assert all(i["frames"] == 160 and i["wall_s"] > 0 for i in its)
    res = anchor.result()
    assert res.iterations == 2 and res.env_steps == 320 and res.settings["benchmarl"]


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(algo="qmix"), "Unknown vs-benchmarl algorithm 'qmix'. Valid choices: iddpg, isac, maddpg, mappo, masac"),
        (dict(algo="masac", num_envs=7), "num_envs=7 must divide BenchMARL's 6000 frames"),
    ],
)
def test_vs_benchmarl_refuses_bad_algorithms_before_any_child_starts(kwargs, match, monkeypatch):
    def no_child(*a, **k):
        raise AssertionError("a child started")

    monkeypatch.setattr("marl.benchmarks.benchmarl_anchor.BenchmarlAnchor", no_child)
    with pytest.raises(MarlError, match=match):
        speed.run_vs_benchmarl(sys.executable, **kwargs)


@pytest.mark.skipif(not os.environ.get("MARL_BENCHMARL_PYTHON"), reason="BenchMARL's python not given")
def test_real_benchmarl_child_times_off_policy_iterations():
    anchor = BenchmarlAnchor(
        os.environ["MARL_BENCHMARL_PYTHON"],
        num_envs=4,
        rollout_length=25,
        hidden=16,
        max_steps=20,
        algo="masac",
        task="balance",
        optimizer_steps=3,
        train_batch=8,
        activation="tanh",
    )
    try:
        its = [anchor.train_one() for _ in range(2)]
    finally:
        anchor.stop()
    assert all(i["frames"] == 100 and i["training_s"] > 0 for i in its)
    assert anchor.result().settings["critic"] == "BenchMARL masac share_param_critic"


def test_off_policy_floor_times_a_plain_pytorch_step(capsys):
    """The eager floor script runs a few steps at a small size and reports a positive time and its sizes."""
    from marl.benchmarks.off_policy_floor import main

    out = main(["--steps", "3", "--warmup", "1", "--hidden", "8", "--agents", "3", "--batch", "4"])
    assert out["ms_per_step"] > 0 and (out["agents"], out["hidden"], out["batch"], out["steps"]) == (3, 8, 4, 3)
    assert "plain-PyTorch MADDPG gradient step" in capsys.readouterr().out
    compiled = main(["--steps", "2", "--warmup", "1", "--hidden", "8", "--agents", "2", "--batch", "4", "--compile"])
    assert compiled["compile"] and compiled["ms_per_step"] > 0 and "torch.compile" in capsys.readouterr().out


def test_off_policy_side_by_side_uses_benchmarls_critic_form_for_the_centralised_algorithms():
    from marl.benchmarks.speed import _off_policy_settings

    B, T, hidden, child, ours, settings = _off_policy_settings("maddpg", 10, 100)
    assert (B, T, hidden, child["optimizer_steps"], child["train_batch"]) == (10, 600, 256, 1000, 128)
    assert (ours["critic_agent_id"], ours["policy_gradient"]) == (False, "joint") and "one Q per sample" in settings[
        "critic"
    ]
    iddpg = _off_policy_settings("iddpg", 10, 100)[4]
    assert "critic_agent_id" not in iddpg and "policy_gradient" not in iddpg  # critic: obs, no centralised form
    with pytest.raises(MarlError, match="num_envs=7 must divide"):
        _off_policy_settings("masac", 7, 100)


@pytest.mark.parametrize("sequential", [False, True])
def test_vs_benchmarl_alternates_or_runs_benchmarl_after_marl(sequential, monkeypatch):
    """Alternating: BenchMARL's iteration runs between marl's (``between``). Sequential (for async_sampling, whose
    runner samples between marl's iterations): marl's iterations first, then a BenchMARL warm-up and as many
    measured iterations as marl's."""
    import contextlib

    calls = []

    class FakeAnchor:
        def __init__(self, *a, **k):
            self.iterations = []

        def train_one(self):
            calls.append("benchmarl")
            self.iterations.append({})

        def result(self):
            return _side("benchmarl", 1000, 1.0)

        def stop(self):
            calls.append("stop")

    def fake_ours(*a, between=None, **k):
        for _ in range(4):  # a warm-up and 3 measured iterations
            calls.append("marl")
            if between is not None:
                between()
        return SideResult(name="marl", env_steps=3, wall_s=1.0, iterations=3, sample_s=0, learn_s=0.1, cpu_s=1)

    monkeypatch.setattr("marl.benchmarks.benchmarl_anchor.BenchmarlAnchor", FakeAnchor)
    monkeypatch.setattr(speed, "bench_ours", fake_ours)
    monkeypatch.setattr(speed, "ray_for_bench", contextlib.nullcontext)
    res = speed.run_vs_benchmarl(sys.executable, algo="maddpg", sequential=sequential)
    expected = ["marl"] * 4 + ["benchmarl"] * 4 if sequential else ["marl", "benchmarl"] * 4
    assert calls == expected + ["stop"]
    assert res.settings["mode"] == ("sequential" if sequential else "alternating")
    assert ("then BenchMARL's" in res.report()) == sequential
