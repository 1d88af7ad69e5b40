"""Engine integration: fit, checkpoints, resume, remote env runners, DDP learners, errors (Ray)."""

import copy
import csv
import os
import shutil
from pathlib import Path

import pytest
import torch

import marl
from marl.api import build_trainer
from marl.engine.rllib_seam import local_learner
from marl.engine.trainer import TrainingDiverged
from marl.env import MarlError
from toy_envs import MatchEnv, MultiDiscreteEnv, NaNAfterEnv

QUICK = dict(progress=False, eval_episodes=0, rollout_length=10, epochs=2)


def spread(B=8, **kw):
    return marl.make_env("mpe", "simple_spread", num_envs=B, **kw)


def test_fit_logs_checkpoint_and_reload_gives_same_actions(ray_session, run_dir):
    env = spread()
    res = env.fit("mappo", stop={"iterations": 2}, log_dir=run_dir, **{**QUICK, "rollout_length": 25})
    assert res.metrics["env_steps"] == 2 * 25 * 8 and res.metrics["iteration"] == 2
    run = Path(res.log_dir)
    assert list((run / "tb").glob("events.out.tfevents.*"))
    rows = list(csv.DictReader(open(run / "progress.csv")))
    assert len(rows) == 2 and float(rows[1]["env_steps"]) == 400 and "episode_return_mean" in rows[0]
    assert "shared/value_loss" in res.metrics and "episode_return_mean" in res.metrics
    loaded = marl.load(res.log_dir)  # run folder -> its latest checkpoint
    step = spread(B=4).reset(seed=7)
    a, b = res.policy.act(step), loaded.policy.act(step)
    assert torch.equal(a["agent"], b["agent"])
    single = {aid: step.obs["agent"][0, i].numpy() for i, aid in enumerate(env.info.agents)}
    assert loaded.policy(single) == {aid: int(a["agent"][0, i]) for i, aid in enumerate(env.info.agents)}


def test_resume_continues_step_count(ray_session, run_dir):
    res = spread().fit("ippo", stop={"iterations": 2}, log_dir=run_dir, **QUICK)
    more = spread().fit("ippo", stop={"iterations": 3}, resume=res.checkpoint, **QUICK)
    assert more.metrics["iteration"] == 3 and more.metrics["env_steps"] == 3 * 80
    assert more.log_dir == res.log_dir


def test_two_remote_env_runners(ray_session, run_dir):
    res = spread(B=4).fit("mappo", stop={"iterations": 2}, log_dir=run_dir, num_env_runners=2, **QUICK)
    assert res.metrics["env_steps"] == 2 * (2 * 10 * 4)  # both runners sample each iteration


def test_two_ddp_learners_keep_identical_parameters(ray_session):
    trainer, *_ = build_trainer(spread(B=4), "mappo", num_learners=2, **QUICK)
    try:
        trainer.train()
        sums = trainer.learner_group.foreach_learner(
            lambda l: float(sum(p.detach().double().sum() for p in l.module["shared"].parameters()))
        )
        sums = [s.get() if hasattr(s, "get") else s for s in sums]
        assert len(sums) == 2 and sums[0] == pytest.approx(sums[1], rel=1e-9)
    finally:
        trainer.stop()


@pytest.mark.parametrize("algo, share", [("maddpg", "auto"), ("matd3", "individual"), ("masac", "auto")])
def test_two_off_policy_learners_average_their_gradients(ray_session, algo, share):
    """The off-policy losses call the networks themselves, so DDP's hooks never run: without mean_over_learners the
    two learners, each on its own half of every batch, drift apart (checked: 2.5394 vs 2.5468 after 12 steps).
    MATD3's delayed actor leaves the actors without gradients on every other step; one module per agent."""
    from toy_envs import TargetEnv

    kw = dict(rollout_length=5, batch_size=16, gradient_steps=4, per_env_steps=20, learning_starts=0, hidden=16)
    env = TargetEnv(num_envs=4)
    trainer, *_ = build_trainer(env, algo, num_learners=2, share=share, progress=False, eval_episodes=0, **kw)
    try:
        for _ in range(3):
            trainer.train()
        sums = trainer.learner_group.foreach_learner(
            lambda l: float(
                sum(p.detach().double().sum() for m in l.module.keys() for p in l.module[m].unwrapped().parameters())
            )
        )
        sums = [s.get() if hasattr(s, "get") else s for s in sums]
        assert trainer.progress["updates"] == 12 and len(sums) == 2 and sums[0] == pytest.approx(sums[1], rel=1e-9)
    finally:
        trainer.stop()


def test_heterogeneous_envs_train_with_auto_mapping(ray_session, run_dir):
    adv = marl.make_env("mpe", "simple_adversary", num_envs=4).fit(
        "mappo", stop={"iterations": 1}, log_dir=run_dir, **QUICK
    )
    assert {"adversary", "agent"} <= {k.split("/")[0] for k in adv.metrics if "/" in k}
    sl = marl.make_env("mpe", "simple_speaker_listener", num_envs=4).fit(
        "ippo", stop={"iterations": 1}, log_dir=run_dir, **QUICK
    )
    assert {"speaker", "listener"} <= {k.split("/")[0] for k in sl.metrics if "/" in k}
    ind = spread(B=4).fit(
        "mappo", stop={"iterations": 1}, log_dir=run_dir, share="individual", **{**QUICK, "num_minibatches": 2}
    )
    assert {"agent_0", "agent_1", "agent_2"} <= {k.split("/")[0] for k in ind.metrics if "/" in k}


def test_continuous_actions_and_gru_actor(ray_session, run_dir):
    res = spread(B=4, continuous_actions=True).fit("mappo", stop={"iterations": 2}, log_dir=run_dir, **QUICK)
    assert res.policy.act(spread(B=2, continuous_actions=True).reset(seed=1))["agent"].shape == (2, 3, 5)
    res = spread(B=4).fit("mappo", stop={"iterations": 2}, log_dir=run_dir, recurrent=True, chunk_length=5, **QUICK)
    assert res.metrics["iteration"] == 2


def test_nan_loss_stops_run_names_loss_and_keeps_checkpoint(ray_session, run_dir):
    env = NaNAfterEnv(after=35, num_envs=4)  # 10 steps per iteration: iterations 1-3 are clean
    # non_finite="off": the env runner lets the NaN rewards through (its default is to stop at the env:
    # tests/test_non_finite.py), so they reach the loss, whose own check is tested here
    with pytest.raises(
        TrainingDiverged, match=r"(policy|value)_loss of module 'shared'.*last good checkpoint: (\S+)"
    ) as e:
        env.fit("mappo", stop={"iterations": 10}, log_dir=run_dir, checkpoint_every=1, non_finite="off", **QUICK)
    ckpt = str(e.value).split("last good checkpoint: ")[1].split(";")[0]
    assert os.path.isdir(ckpt) and marl.load(ckpt).policy is not None


def test_bad_input_errors_before_ray(monkeypatch):
    import marl.api as api

    monkeypatch.setattr(api, "init_ray", lambda cfg: (_ for _ in ()).throw(AssertionError("Ray started")))
    with pytest.raises(MarlError, match="cannot handle the action space MultiDiscrete"):
        api.fit(MultiDiscreteEnv(), "mappo")
    with pytest.raises(MarlError, match="Unknown algorithm 'qmixx'"):
        api.fit(MatchEnv(), "qmixx")
    with pytest.raises(MarlError, match="Unknown config key 'lrr'.*Did you mean 'lr'"):
        api.fit(MatchEnv(), "mappo", lrr=1e-3)
    with pytest.raises(MarlError, match="Unknown stop criterion"):
        api.fit(MatchEnv(), "mappo", stop={"steps": 5})
    with pytest.raises(MarlError, match="different spaces"):
        api.fit(marl.make_env("mpe", "simple_adversary", num_envs=2), "mappo", share="all")
    with pytest.raises(MarlError, match="Unknown env 'mpee'. Did you mean 'mpe'"):
        marl.make_env("mpee", "simple_spread")


def test_linear_lr_schedule_decays_to_zero_at_the_stop(ray_session):
    trainer, *_ = build_trainer(spread(B=8), "mappo", lr_schedule="linear", lr_anneal_steps=400, lr=1e-3, **QUICK)
    try:
        lrs = []
        for _ in range(4):  # 80 env steps per iteration
            trainer.train()
            lrs.append(local_learner(trainer.learner_group).get_optimizer("shared").param_groups[0]["lr"])
        assert lrs == pytest.approx([1e-3, 1e-3 * (1 - 80 / 400), 1e-3 * (1 - 160 / 400), 1e-3 * (1 - 240 / 400)])
    finally:
        trainer.stop()
    with pytest.raises(MarlError, match="give stop=\\{'env_steps'"):
        spread().fit("mappo", lr_schedule="linear", stop={"iterations": 1}, **QUICK)
    with pytest.raises(MarlError, match="Unknown lr_schedule 'cosine'"):
        spread().fit("mappo", lr_schedule="cosine", **QUICK)


def test_more_env_runners_than_cpus_is_an_error_not_a_hang(ray_session):
    from marl.api import init_ray

    base = {"num_env_runners": 0, "num_learners": 0, "num_cpus_per_env_runner": 1, "num_cpus_per_learner": 1}
    with pytest.raises(MarlError, match="num_env_runners=3 is more than the 2 CPUs"):
        init_ray({**base, "num_env_runners": 3})
    fitted = init_ray({**base, "num_env_runners": 2, "num_learners": 2})  # 4 requested on 2 CPUs: shares scaled
    assert 2 * fitted["num_cpus_per_env_runner"] + 2 * fitted["num_cpus_per_learner"] <= 2


def _trained_weights(compiled: bool, **kw):
    trainer, *_ = build_trainer(spread(B=4), "mappo", torch_compile=compiled, seed=3, **{**QUICK, **kw})
    try:
        trainer.train()
        out = trainer.learner_group.foreach_learner(
            lambda l: (
                hasattr(l._loss_terms, "_torchdynamo_orig_callable"),
                {k: v.detach().clone() for k, v in l.module["shared"].state_dict().items()},
            )
        )
        return [r.get() if hasattr(r, "get") else r for r in out][0]
    finally:
        trainer.stop()


@pytest.mark.skipif(
    shutil.which("g++") is None and shutil.which("c++") is None, reason="inductor on CPU needs a C++ compiler"
)
@pytest.mark.parametrize("kw", [{}, {"recurrent": True}], ids=["team_critic", "gru_state_critic"])
def test_torch_compile_learner_trains_the_eager_weights(ray_session, kw):
    """``torch_compile=True`` compiles the learner's forward and loss (inductor) and takes the same gradient
    steps as eager: after one update (2 epochs) every weight equals eager's to float32 reordering (1e-4)."""
    was_compiled, eager = _trained_weights(False, **kw)
    is_compiled, compiled = _trained_weights(True, **kw)
    assert not was_compiled and is_compiled
    _, again = _trained_weights(False, **kw)
    moved = [k for k in eager if eager[k].is_floating_point() and not torch.equal(eager[k], again[k])]
    assert not moved, f"eager training is not deterministic here: {moved}"
    for k, v in eager.items():
        assert torch.allclose(compiled[k], v, atol=1e-4, rtol=0), k


def test_apply_gradients_with_one_finite_check_steps_as_rllib_and_leaves_non_finite_to_rllib(ray_session, tmp_path):
    """SeamLearner.apply_gradients: finite gradients give exactly RLlib's own step (the same Adam update); a NaN
    gradient goes down RLlib's path, which zeroes it (the parameter keeps its value, every parameter stays finite)."""
    from ray.rllib.core.learner.torch.torch_learner import TorchLearner

    trainer, *_ = build_trainer(MatchEnv(num_envs=2), "maddpg", log_dir=str(tmp_path), progress=False, eval_episodes=0)
    try:
        learner = local_learner(trainer.learner_group)
        params = learner.params_by_id
        opts = [opt for _, _, opt in learner.named_optimizers()]
        start = {pid: p.detach().clone() for pid, p in params.items()}
        opt_state = [copy.deepcopy(o.state_dict()) for o in opts]
        torch.manual_seed(0)
        grads = {pid: torch.randn_like(p) for pid, p in params.items()}

        def step(apply):
            with torch.no_grad():
                for pid, p in params.items():
                    p.copy_(start[pid])
            for o, s in zip(opts, opt_state):
                o.load_state_dict(copy.deepcopy(s))
            apply({pid: g.clone() for pid, g in grads.items()})
            return {pid: p.detach().clone() for pid, p in params.items()}

        ours, rllib = step(learner.apply_gradients), step(lambda g: TorchLearner.apply_gradients(learner, g))
        assert all(torch.equal(ours[pid], rllib[pid]) for pid in params)
        assert any(not torch.equal(ours[pid], start[pid]) for pid in params)
        bad = next(iter(grads))
        grads[bad] = torch.full_like(grads[bad], float("nan"))
        after = step(learner.apply_gradients)
        assert torch.equal(after[bad], start[bad]) and all(torch.isfinite(v).all() for v in after.values())
    finally:
        trainer.stop()
