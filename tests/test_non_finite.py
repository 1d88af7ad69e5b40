"""NaN / inf and shape changes at every boundary: the env runner's guard (raise, mask, off), the replay
buffer, text-game rewards, and divergence of every algorithm family (PPO, value decomposition, LLM)."""

import math

import numpy as np
import pytest
import torch

import marl
from marl.algos.q_learning import check_q_bound
from marl.engine.guards import StepGuard
from marl.engine.replay import JointEpisodeBuffer
from marl.engine.trainer import TrainingDiverged
from marl.env import MarlError
from toy_envs import MatchEnv

QUICK = dict(progress=False, eval_episodes=0, rollout_length=10, epochs=1)
NAN, INF = float("nan"), float("inf")


class Poisoned(MatchEnv):
    """MatchEnv (B copies, N=2 agents, A=3) whose steps from ``at`` on (1-based) carry ``value`` in ``field``
    (``obs``, ``state`` or ``reward``) at env copy ``row``, agent ``agent``; ``grow``: the observation
    gains a feature from step ``at`` on instead."""

    def __init__(self, field="obs", value=NAN, at=3, row=1, agent=1, grow=False, once=False, **kw):
        super().__init__(**kw)
        self.field, self.value, self.at, self.row, self.agent, self.grow, self.once = (
            field,
            value,
            at,
            row,
            agent,
            grow,
            once,
        )
        self.n = 0

    def step(self, actions):
        out = super().step(actions)
        self.n += 1
        if self.n < self.at or (self.once and self.n > self.at):
            return out
        if self.grow:
            out.obs = {"agent": torch.cat([out.obs["agent"], torch.zeros(self.num_envs, self.N, 1)], -1)}
        elif self.field == "state":
            out.state = out.state.clone()
            out.state[self.row, self.agent] = self.value
        else:
            d = getattr(out, self.field)
            t = d["agent"].clone()
            t[self.row, self.agent] = self.value
            setattr(out, self.field, {"agent": t})
        return out


def _run(env, guard, steps):
    """Step ``env`` with fixed actions through ``guard``; returns the last (guarded) step."""
    step = guard(env.reset(seed=0), reset=True)
    for _ in range(steps):
        step = guard(env.step({"agent": torch.zeros(env.num_envs, 2, dtype=torch.long)}))
    return step


# ------------------------------------------------------------------ the env runner's guard (no Ray)
@pytest.mark.parametrize(
    "field, value, who",
    [
        ("obs", NAN, "obs of agent 'agent_1' (group 'agent', feature"),
        ("reward", INF, "reward of agent 'agent_1' (group 'agent')"),
        ("reward", -INF, "reward of agent 'agent_1'"),
        ("state", NAN, "state (index 1)"),
    ],
)
def test_guard_raises_naming_env_agent_field_copy_and_step(field, value, who):
    env = Poisoned(field, value, at=3, row=2, num_envs=4)
    with pytest.raises(MarlError) as e:
        _run(env, StepGuard(env.info, "raise", "env runner 0"), 5)
    msg = str(e.value)
    assert "Env toy:match (env runner 0)" in msg and who in msg and "env copy 2, at step 3" in msg, msg
    assert "non_finite='mask'" in msg


def test_guard_mask_replaces_by_zero_counts_and_leaves_the_env_tensors():
    env = Poisoned("obs", NAN, at=2, row=1, agent=0, num_envs=3)
    guard = StepGuard(env.info, "mask")
    step = guard(env.reset(seed=0), reset=True)
    raw = env.step({"agent": torch.zeros(3, 2, dtype=torch.long)})
    raw = env.step({"agent": torch.zeros(3, 2, dtype=torch.long)})  # step 2: poisoned
    raw.final_obs = dict(raw.obs)  # no episode ended: final_obs is the very same tensor
    guard.steps = 1
    step = guard(raw)
    assert torch.isnan(raw.obs["agent"][1, 0]).any()  # the env's own tensor is untouched
    assert torch.isfinite(step.obs["agent"]).all() and torch.isfinite(step.final_obs["agent"]).all()
    assert float(step.obs["agent"][1, 0].abs().sum()) <= 1.0  # NaN -> 0, the one-hot cue elsewhere
    assert guard.pop_metrics() == {"non_finite_masked": [3]}  # 3 features of one agent
    assert guard.pop_metrics() == {"non_finite_masked": [0]}


def test_guard_off_passes_values_but_still_checks_shapes():
    env = Poisoned("reward", NAN, at=1, num_envs=2)
    step = _run(env, StepGuard(env.info, "off"), 3)
    assert torch.isnan(step.reward["agent"]).any()
    assert StepGuard(env.info, "off").pop_metrics() == {}
    grown = Poisoned(grow=True, at=4, num_envs=2)
    with pytest.raises(
        MarlError,
        match=r"\[rule obs_shape\] env toy:match \(env runner\), at step 4, agent 'agent_0', 'agent_1' \(group "
        r"'agent'\), key 'obs': shape \(2, 2, 4\) differs from \(2, 2, 3\) \(\[B, N_g, obs_dim\] from env.info\)",
    ):
        _run(grown, StepGuard(grown.info, "off"), 6)


def test_guard_missing_group_and_state_shape():
    env = MatchEnv(num_envs=2)
    guard = StepGuard(env.info)
    step = env.reset(seed=0)
    step.reward = {}
    with pytest.raises(
        MarlError,
        match=r"\[rule groups\] env toy:match \(env runner\), at reset, .*key 'reward': reward lacks group "
        r"'agent': expected the groups \['agent'\]",
    ):
        guard(step, reset=True)
    step = env.reset(seed=0)
    step.state = torch.zeros(2, 7)
    with pytest.raises(
        MarlError,
        match=r"\[rule state_shape\] .*at reset, key 'state': shape \(2, 7\) differs from \(2, 6\) \(\[B, state_dim\]",
    ):
        guard(step, reset=True)


def test_guard_sum_overflow_of_finite_values_is_no_error():
    env = MatchEnv(num_envs=2)
    step = env.reset(seed=0)
    step.reward = {"agent": torch.full((2, 2), 3e38)}  # the sum overflows float32, every value is finite
    assert StepGuard(env.info)(step, reset=True) is step


# ------------------------------------------------------------------ replay buffer, text games (no Ray)
def _rollout(T=2, B=1, reward=1.0):
    return {
        "starts": torch.tensor([[True]] + [[False]] * (T - 1)),
        "terminated": torch.zeros(T, B, dtype=torch.bool),
        "truncated": torch.zeros(T, B, dtype=torch.bool),
        "state": torch.zeros(T + 1, B, 1),
        "final_state": torch.zeros(T, B, 1),
        "modules": {
            "m": {
                "obs": torch.zeros(T + 1, B, 2, 1),
                "final_obs": torch.zeros(T, B, 2, 1),
                "actions": torch.zeros(T, B, 2, dtype=torch.long),
                "rewards": torch.tensor([[[1.0, 1.0]], [[1.0, reward]]]),
                "alive": torch.ones(T, B, 2, dtype=torch.bool),
            }
        },
    }


@pytest.mark.parametrize("reward", [NAN, INF, -INF])
def test_replay_buffer_never_stores_non_finite_rewards(reward):
    buf = JointEpisodeBuffer(8, 4, 1, {"m": {"n": 2, "obs_dim": 1, "n_actions": None}}, 1)
    buf.add_rollout(_rollout())
    with pytest.raises(
        MarlError,
        match=r"Replay buffer: module 'm' has reward (nan|inf|-inf) at rollout step 1 "
        r"\(env copy 0, agent 1 of the module\); non-finite rewards are never stored",
    ):
        buf.add_rollout(_rollout(reward=reward))


def test_text_game_rewards_are_checked():
    pytest.importorskip("transformers")
    from marl.algos.llm.runner import _Match

    games = [marl.make_env("ipd", rounds=2)]
    match = _Match(games, [{"table": {}}], [0])
    match.steps = {0: 3}
    assert match.finite(0, "player_0", 1.5) == 1.5
    with pytest.raises(
        MarlError,
        match=r"Text game ipd:\S+ \(game 0\) gave seat 'player_0' the reward nan in "
        r"decision round 3",
    ):
        match.finite(0, "player_0", NAN)
    match.non_finite = "mask"
    assert match.finite(0, "player_0", INF) == 0.0
    match.non_finite = "off"
    assert math.isnan(match.finite(0, "player_0", NAN))


def test_q_bound():
    q = torch.tensor([[1.0, -50.0], [3.0, 1e9]])
    mask = torch.tensor([[True, True], [True, False]])  # the huge value is padding: not trained
    check_q_bound("team", 100.0, {"Q_tot": (q, mask)})
    check_q_bound("team", 0.0, {"Q_tot": (q, torch.ones_like(mask))})  # 0: no bound
    with pytest.raises(TrainingDiverged, match=r"agent Q of team 'red' reached \|Q\| = 1e\+09, beyond q_abs_max=100"):
        check_q_bound("red", 100.0, {"agent Q": (q, torch.ones_like(mask))})


# ------------------------------------------------------------------ through fit (Ray)
def test_fit_stops_at_the_env_naming_it_local_and_remote(ray_session, run_dir):
    with pytest.raises(
        MarlError,
        match=r"Env toy:match \(env runner 0\) returned nan in obs of agent 'agent_1'.*"
        r"env copy 1, at step 12",
    ):
        Poisoned("obs", at=12, num_envs=4).fit("mappo", stop={"iterations": 3}, log_dir=run_dir, **QUICK)
    with pytest.raises(MarlError, match=r"Env toy:match \(env runner 1\) returned inf in reward of agent 'agent_1'"):
        Poisoned("reward", INF, at=5, num_envs=4).fit(
            "ippo", stop={"iterations": 3}, log_dir=run_dir, num_env_runners=1, **QUICK
        )
    with pytest.raises(
        MarlError,
        match=r"\[rule obs_shape\] env toy:match.*at step 15.*key 'obs': shape \(4, 2, 4\) differs from \(4, 2, 3\)",
    ):
        Poisoned(grow=True, at=15, num_envs=4).fit("mappo", stop={"iterations": 3}, log_dir=run_dir, **QUICK)


def test_fit_masks_and_counts(ray_session, run_dir):
    res = Poisoned("reward", NAN, at=3, num_envs=4).fit(
        "mappo", stop={"iterations": 2}, log_dir=run_dir, non_finite="mask", **QUICK
    )
    assert [h["non_finite_masked_mean"] for h in res.history] == [8.0, 10.0]  # one value per step from step 3
    assert math.isfinite(res.metrics["shared/policy_loss"])


def test_value_decomposition_stops_on_nan_loss_and_on_q_beyond_its_bound(ray_session, run_dir):
    kw = dict(progress=False, eval_episodes=0, rollout_length=5, batch_size=4, episodes_per_update=4, buffer_size=64)
    with pytest.raises(TrainingDiverged, match=r"td_loss of team 'team' is nan \(not finite\).*last good checkpoint"):
        Poisoned("obs", at=8, num_envs=4).fit("qmix", stop={"iterations": 5}, log_dir=run_dir, non_finite="off", **kw)
    with pytest.raises(
        TrainingDiverged,
        match=r"(agent Q|Q_tot) of team 'team' reached \|Q\| = \S+, beyond "
        r"q_abs_max=1e-06",
    ):
        MatchEnv(num_envs=4).fit("vdn", stop={"iterations": 3}, log_dir=run_dir, q_abs_max=1e-6, **kw)


def test_llm_learner_stops_on_nan_loss(ray_session):
    pytest.importorskip("transformers")
    from ray.rllib.policy.sample_batch import MultiAgentBatch, SampleBatch

    from marl.algos.llm.policy import tiny_config, word_tokenizer
    from marl.algos.llm.selfplay import LLMSelfPlay
    from marl.api import prepare

    tok = word_tokenizer(["<A>", "<B>"])
    env = marl.make_env("ipd", rounds=2, prompt_style="compact", history="last")
    cfg, _, env, mapping = prepare(env, "reinforce", {"model": tiny_config(len(tok), n_positions=32), "tokenizer": tok})
    group = LLMSelfPlay.build_config(cfg, env, mapping).build_learner_group()
    S, L = 4, 8
    mask = np.zeros((S, L - 1), dtype=bool)
    mask[:, 3:5] = True
    rows = SampleBatch(
        {
            "input_ids": np.full((S, L), 3),
            "attention_mask": np.ones((S, L), np.int64),
            "loss_mask": mask,
            "advantages": np.array([1.0, NAN, 0.5, -1.0], np.float32),
        }
    )
    try:
        with pytest.raises(TrainingDiverged, match=r"policy_loss of module 'players' is nan \(not finite\)"):
            group.update(batch=MultiAgentBatch({"players": rows}, env_steps=S))
    finally:
        group.shutdown()
