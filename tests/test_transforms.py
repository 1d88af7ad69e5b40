"""Batch transforms (marl/transforms.py): what they change reaches the learner exactly, their state
rides in checkpoints, their config section is checked, and old checkpoints of legem runs load."""

import types
from dataclasses import dataclass

import numpy as np
import pytest

import marl.transforms as transforms
from marl.api import build_trainer
from marl.config import ConfigBase, key, load_config, restore_config
from marl.config import sections
from marl.errors import MarlError
from marl.plugins import load_plugins
from marl.transforms import BatchTransform, TransformList, check_transforms, register_transform
from toy_envs import MatchEnv

QUICK = dict(progress=False, eval_episodes=0, rollout_length=5)


@dataclass(frozen=True, kw_only=True)
class ScaleConfig(ConfigBase):
    """The toy transform's section."""

    LAYER = "scale"
    factor: float = key("reward multiplier", gt=0)


class Scale(BatchTransform):
    """Multiplies every rollout's rewards by ``factor``; keeps the raw rewards, the learner
    batches and a count of rollouts (its checkpoint state)."""

    last = None  # the latest instance (fit builds its own)

    def __init__(self, config=None, name=None):
        super().__init__(config, name)
        self.raw, self.batches, self.rollouts, self.loaded = [], [], 0, None
        Scale.last = self

    def on_rollout(self, trainer, rollout):
        self.rollouts += 1
        self.raw.append({m: c["rewards"].clone() for m, c in rollout["modules"].items()})
        for c in rollout["modules"].values():
            c["rewards"] = c["rewards"] * self.config.factor

    def on_batch(self, trainer, batch):
        self.batches.append({m: {k: np.array(v) for k, v in b.items()} for m, b in batch.policy_batches.items()})

    def state_dict(self):
        return {"rollouts": self.rollouts}

    def load_state_dict(self, state):
        self.loaded = self.rollouts = state["rollouts"]


class DoubleEpisodes(BatchTransform):
    """Doubles the rewards of every committed replay episode in place; records what it saw."""

    def __init__(self, config=None, name=None):
        super().__init__(config, name)
        self.seen, self.batches = [], []

    def on_episodes(self, trainer, episodes):
        for ep in episodes:
            self.seen.append((ep.slot, {m: r.copy() for m, r in ep.rewards.items()}))
            for m in ep.modules:
                ep.rewards[m] *= 2  # a view: this writes into the buffer

    def on_batch(self, trainer, batch):
        self.batches.append({k: np.array(v) for b in batch.policy_batches.values() for k, v in b.items()})


@pytest.fixture
def toys(monkeypatch, tmp_path):
    """``scale`` (section ``scale``, default factor 2 in a YAML file of its own) and ``double_episodes``
    registered for one test."""
    load_plugins()  # marl's own first: the copies below must hold them when the originals come back
    monkeypatch.setattr(transforms, "_TRANSFORMS", dict(transforms._TRANSFORMS))
    monkeypatch.setattr(sections, "_SECTIONS", dict(sections._SECTIONS))
    (tmp_path / "scale.yaml").write_text("factor: 2.0\n")
    monkeypatch.setattr(ScaleConfig, "DEFAULTS", str(tmp_path / "scale.yaml"), raising=False)
    register_transform("scale", Scale, config=ScaleConfig)
    register_transform("double_episodes", DoubleEpisodes)


# ------------------------------------------------------------------ what the learner sees
def test_a_rollout_transform_changes_exactly_the_rewards_the_ppo_learner_gets(ray_session, toys):
    trainer, *_ = build_trainer(
        MatchEnv(num_envs=2),
        "mappo",
        reward_redistribution="scale",
        scale={"factor": 3},
        critic="state",
        epochs=1,
        **QUICK,
    )
    try:
        trainer.train()
    finally:
        trainer.stop()
    t = trainer.batch_transforms.transforms[0]
    assert isinstance(t, Scale) and t.config.factor == 3.0 and t.rollouts == 1
    (raw,), (batch,) = t.raw, t.batches
    for m, r in raw.items():  # [T, B, N] -> the learner's rows [B*N, T]
        assert r.sum() > 0  # some reward to scale: the check below fails without the transform
        want = (3 * r).permute(1, 2, 0).reshape(-1, r.shape[0]).numpy()
        np.testing.assert_array_equal(batch[m]["rewards"], want)


def test_an_episode_transform_rewrites_each_committed_episode_once_before_the_learner_samples(ray_session, toys):
    trainer, *_ = build_trainer(
        MatchEnv(num_envs=2),
        "qmix",
        reward_redistribution="double_episodes",
        batch_size=2,
        episodes_per_update=1,
        rollout_length=10,
        progress=False,
        eval_episodes=0,
    )
    try:
        trainer.train()
        trainer.train()
    finally:
        trainer.stop()
    t, buf = trainer.batch_transforms.transforms[0], trainer.buffer
    assert len(t.seen) == buf.episodes_added == 8  # 2 copies x 2 episodes of 5 steps x 2 iterations, each once
    for slot, raw in t.seen:
        L = int(buf.lengths[slot])
        for m, r in raw.items():
            np.testing.assert_array_equal(buf.data[f"{m}/rewards"][slot, :L], 2 * r)
    assert t.batches  # the learner updated, on sampled episodes
    values = {float(v) for b in t.batches for k in b if k.endswith("/rewards") for v in np.unique(b[k][b["filled"]])}
    assert values == {0.0, 2.0}  # MatchEnv pays 0 or 1: only doubled rewards reach the learner


def test_transform_state_survives_a_checkpoint_round_trip(ray_session, run_dir, toys):
    res = MatchEnv(num_envs=2).fit(
        "ippo", stop={"iterations": 2}, log_dir=run_dir, reward_redistribution="scale", epochs=1, **QUICK
    )
    assert Scale.last.rollouts == 2
    MatchEnv(num_envs=2).fit(
        "ippo", stop={"iterations": 3}, resume=res.checkpoint, reward_redistribution="scale", epochs=1, **QUICK
    )
    assert Scale.last.loaded == 2 and Scale.last.rollouts == 3  # restored, then counted on


# ------------------------------------------------------------------ its config section
def test_a_section_reaches_the_config_and_bad_sections_name_the_bad_key(toys):
    cfg = load_config("mappo", None, {"reward_redistribution": "scale", "scale": {"factor": 5}})
    assert cfg.scale.factor == 5.0 and cfg.sections["scale"].factor == 5.0 and cfg.to_dict()["scale"] == {"factor": 5.0}
    assert load_config("mappo", None, {"reward_redistribution": "scale"}).scale.factor == 2.0  # its YAML file
    with pytest.raises(
        MarlError,
        match=r"Unknown key 'factr' in config section 'scale'. Did you mean 'factor'\? "
        r"Valid keys: factor\.",
    ):
        load_config("mappo", None, {"reward_redistribution": "scale", "scale": {"factr": 5}})
    with pytest.raises(MarlError) as e:
        load_config("mappo", None, {"reward_redistribution": "scale", "scale": {"factor": 0}})
    assert e.value.key == "scale.factor" and "Config key 'factor' must be > 0, got 0." in str(e.value)
    with pytest.raises(
        MarlError,
        match=r"sets keys of reward_redistribution='scale', but reward_redistribution "
        r"is 'none'",
    ):
        load_config("mappo", None, {"scale": {"factor": 5}})
    with pytest.raises(MarlError, match=r"config section 'scale' takes a dict of its keys \(factor\), got 5"):
        load_config("mappo", None, {"reward_redistribution": "scale", "scale": 5})


def test_the_legem_section_and_legem_keys_of_older_checkpoints():
    cfg = load_config("qmix", None, {"reward_redistribution": "legem", "legem": {"beta": 0.3, "time_key": False}})
    assert (cfg.legem.beta, cfg.legem.time_key, cfg.legem.key_dim) == (0.3, False, 4)
    assert not hasattr(load_config("qmix", None, {}), "legem")  # no section unless legem is chosen
    old = {
        **load_config("qmix", None, {}).to_dict(),
        "reward_redistribution": "legem",
        "legem_beta": 0.7,
        "legem_key_dim": 6,
        "legem_resolution": -1.0,
    }  # as versions before sections saved them
    restored = restore_config("qmix", old)
    assert (restored.legem.beta, restored.legem.key_dim, restored.legem.resolution) == (0.7, 6, 0.5)  # bad: YAML
    assert restore_config("qmix", cfg.to_dict()) == cfg


def test_legacy_state_key_restores_a_transform_from_an_older_checkpoint():
    class Old(BatchTransform):
        legacy_state_key = "old_memory"

        def load_state_dict(self, state):
            self.state = state

    new, old = Old(name="old"), Old(name="old")
    TransformList([new]).load_state_dict({"marl_transforms": {"old": {"v": 1}}, "old_memory": {"v": 0}})
    TransformList([old]).load_state_dict({"old_memory": {"v": 0}})
    assert new.state == {"v": 1} and old.state == {"v": 0}


# ------------------------------------------------------------------ checks before Ray
def test_hooks_the_trainer_does_not_call_are_refused_and_one_team_is_required():
    from marl.algos.redistribution import CausalShift, Legem

    assert Legem.hooks() == ("on_episodes",) and CausalShift.hooks() == ("on_rollout", "on_episodes")
    rollouts_only = types.SimpleNamespace(transform_hooks=("on_rollout",))
    cfg = types.SimpleNamespace(reward_redistribution="legem", algo="mine")
    with pytest.raises(
        MarlError,
        match=r"'legem' transforms data at on_episodes; mine calls on_rollout\. "
        r"Algorithms that can use it: iql, qmix, vdn\.",
    ):
        check_transforms(cfg, None, rollouts_only)
    two_teams = types.SimpleNamespace(teams={"red": ["a"], "blue": ["b"]}, family="toy", scenario="duel")
    with pytest.raises(MarlError, match=r"shifts one team reward .* toy:duel has teams \['red', 'blue'\]"):
        CausalShift.check(cfg, two_teams, ("on_rollout", "on_episodes"))
    CausalShift.check(cfg, two_teams, ("on_rollout",))  # per agent inside rollouts: teams do not matter


def test_registering_a_bad_transform_is_an_error():
    with pytest.raises(MarlError, match="'module:Class' string"):
        register_transform("bad", "marl.algos.redistribution.Legem")
    with pytest.raises(MarlError, match="'none' means no transform"):
        register_transform("none", Scale)
    with pytest.raises(ValueError, match="share the name 'a'"):
        TransformList([Scale(name="a"), Scale(name="a")])
