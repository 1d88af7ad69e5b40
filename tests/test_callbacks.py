"""Run callbacks: the hooks fire in order, their metrics are logged, their state rides in checkpoints."""

import pytest

import marl
from marl.callbacks import Callback, CallbackList
from toy_envs import MatchEnv

QUICK = dict(progress=False, eval_episodes=4, rollout_length=5, epochs=1)


class Recorder(Callback):
    """Records every hook call; counts rollouts and reports the count as a metric."""

    def __init__(self):
        self.calls, self.rollouts, self.restored = [], 0, None

    def on_fit_start(self, trainer):
        self.calls.append("fit_start")

    def on_rollout(self, trainer, rollout):
        self.calls.append("rollout")
        self.rollouts += 1
        assert rollout["metrics"]["env_steps"] == 5 * 4  # T x B of the toy env

    def on_iteration_end(self, trainer, metrics):
        self.calls.append("iteration_end")
        assert metrics["iteration"] == trainer.progress["iterations"]
        return {"rollouts_seen": float(self.rollouts)}

    def on_checkpoint_save(self, trainer, path):
        self.calls.append("checkpoint_save")
        assert (path / "marl_meta.json").exists()

    def on_checkpoint_restore(self, trainer):
        self.calls.append("checkpoint_restore")

    def on_fit_end(self, trainer, result):
        self.calls.append("fit_end")
        assert result.checkpoint is not None

    def on_evaluate(self, result, metrics):
        self.calls.append("evaluate")
        assert "episode_return_mean" in metrics

    def state_dict(self):
        return {"rollouts": self.rollouts}

    def load_state_dict(self, state):
        self.restored = state["rollouts"]
        self.rollouts = state["rollouts"]


def test_hooks_run_in_order_and_metrics_are_logged(ray_session, run_dir):
    rec = Recorder()
    res = MatchEnv(num_envs=4).fit(
        "mappo", stop={"iterations": 2}, log_dir=run_dir, callbacks=[rec], checkpoint_every=0, **QUICK
    )
    assert rec.calls == [
        "fit_start",
        "rollout",
        "iteration_end",
        "rollout",
        "iteration_end",
        "checkpoint_save",
        "fit_end",
        "evaluate",
    ]
    assert [h["rollouts_seen"] for h in res.history] == [1.0, 2.0]


def test_callback_state_is_checkpointed_and_restored_on_resume(ray_session, run_dir):
    first = Recorder()
    res = MatchEnv(num_envs=4).fit("ippo", stop={"iterations": 2}, log_dir=run_dir, callbacks=[first], **QUICK)
    again = Recorder()
    more = MatchEnv(num_envs=4).fit("ippo", stop={"iterations": 3}, resume=res.checkpoint, callbacks=[again], **QUICK)
    assert again.restored == 2 and again.calls[:2] == ["checkpoint_restore", "fit_start"]
    assert more.history[-1]["rollouts_seen"] == 3.0  # counting went on from the restored state


def test_callback_list_rejects_non_callbacks_and_duplicate_names():
    with pytest.raises(TypeError, match="Callback instances"):
        CallbackList([object()])
    with pytest.raises(ValueError, match="share the name 'Recorder'"):
        CallbackList([Recorder(), Recorder()])

    class Adds(Callback):
        def __init__(self, key):
            self.key = key

        @property
        def name(self):
            return self.key

        def on_iteration_end(self, trainer, metrics):
            return {self.key: float(len(metrics))}  # sees the metrics of the callbacks before it

    assert CallbackList([Adds("a"), Adds("b")]).on_iteration_end(None, {"x": 1.0}) == {"a": 1.0, "b": 2.0}


def test_unknown_fit_argument_is_not_swallowed_by_callbacks():
    with pytest.raises(marl.MarlError, match="Unknown config key 'callback'"):
        MatchEnv(num_envs=4).fit("mappo", callback=[Recorder()])
