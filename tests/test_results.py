"""What ``fit`` and ``marl.load`` return, and how often ``fit`` starts Ray."""

import marl
import marl.api as api
from marl.config import config_class
from run_helpers import QUICK
from toy_envs import MatchEnv


def _count_start_ray(monkeypatch) -> list:
    """Record every call of ``marl.api.start_ray`` (which still runs)."""
    calls, real = [], api.start_ray
    monkeypatch.setattr(api, "start_ray", lambda *a, **k: calls.append((a, k)) or real(*a, **k))
    return calls


def test_fit_starts_ray_once_and_its_result_config_is_typed_after_fit_and_load(ray_session, run_dir, monkeypatch):
    calls = _count_start_ray(monkeypatch)
    result = api.fit(MatchEnv(num_envs=4), "ippo", stop={"iterations": 1}, log_dir=run_dir, lr=1e-3, **QUICK)
    assert len(calls) == 1, calls
    cfg = result.config
    assert type(cfg) is config_class("ippo") and cfg.algo == "ippo"
    assert cfg.lr == 1e-3 and cfg.rollout_length == 5 and cfg.critic == "obs"  # override, QUICK, ippo.yaml
    loaded = marl.load(result.checkpoint).config
    assert type(loaded) is type(cfg) and loaded == cfg
    assert loaded.replace(lr=2e-3).lr == 2e-3  # a checked copy, as after fit


def test_build_trainer_starts_ray_once(ray_session, monkeypatch):
    calls = _count_start_ray(monkeypatch)
    trainer, _, _, cfg = api.build_trainer(MatchEnv(num_envs=4), "ippo", **QUICK)
    try:
        assert len(calls) == 1, calls
        assert trainer.cfg is cfg
    finally:
        trainer.stop()
