"""Off-beat wrapper (envs/wrappers/offbeat.py) and the stag-hunter env (envs/stag_hunter.py).

Properties of docs/offbeat.md that concern the env side. No Ray; a few seconds.
"""

import pytest
import torch

from marl.env import EpisodeStats, MarlError, list_envs, make_env
from marl.envs.stag_hunter import ACTIONS, CATCH, StagHunter
from marl.envs.wrappers.offbeat import OffBeatWrapper

STAY, UP, RIGHT = 0, 1, 4


def hunt(num_envs=4, **kw):
    kw.setdefault("stag_move_prob", 0.0)
    return StagHunter(num_envs=num_envs, seed=0, **kw)


def assert_same_step(s1, s2, extra_column=True):
    for g in s1.obs:
        assert torch.equal(s1.obs[g], s2.obs[g])
        assert torch.equal(s1.reward[g], s2.reward[g])
        assert torch.equal(s1.alive[g], s2.alive[g])
        assert torch.equal(s1.final_obs[g], s2.final_obs[g])
        a2 = s2.avail_actions[g]
        assert not a2[..., -1].any()  # CONTINUE never available with d = 1
        assert torch.equal(s1.avail_actions[g], a2[..., :-1])
    assert torch.equal(s1.state, s2.state)
    assert torch.equal(s1.terminated, s2.terminated) and torch.equal(s1.truncated, s2.truncated)


# --------------------------------------------------------------------------- stag hunter


def test_stag_hunter_registered_and_shapes():
    assert "stag_hunter" in list_envs()
    env = make_env("stag_hunter", num_envs=3, seed=1)
    g = env.info.groups["hunter"]
    assert g.agents == ["hunter_0", "hunter_1"] and g.n_actions == 6 and env.action_names["hunter"] == ACTIONS
    assert env.info.kind == "cooperative" and env.info.shared_reward and env.info.episode_limit == 50
    s = env.reset(seed=1)
    assert s.obs["hunter"].shape == (3, 2, 10) and s.state.shape == (3, env.info.state_dim) == (3, 11)
    assert (s.obs["hunter"].abs() <= 1).all()
    with pytest.raises(MarlError, match="Unknown keyword"):
        make_env("stag_hunter", sise=5)


def test_stag_needs_both_hunters():
    env = hunt(n_hares=0)
    env.reset()
    env.set_positions(hunters=[[2, 2], [4, 4]], stag=[3, 3])
    s = env.step({"hunter": torch.tensor([[CATCH, STAY]] * 4)})  # one hunter alone: nothing
    assert (s.reward["hunter"] == 0).all() and (env.stag_captures == 0).all()
    s = env.step({"hunter": torch.tensor([[CATCH, CATCH]] * 4)})  # both near, both catch
    assert (s.reward["hunter"] == 10).all() and (env.stag_captures == 1).all()
    assert s.info["episode_metrics"]["stag_captures"].tolist() == [1.0] * 4
    env.set_positions(hunters=[[0, 0], [6, 6]], stag=[3, 3])  # both catch, neither near
    s = env.step({"hunter": torch.tensor([[CATCH, CATCH]] * 4)})
    assert (s.reward["hunter"] == 0).all()


def test_hare_gives_two_once():
    env = hunt(n_hares=2)
    env.reset()
    env.set_positions(hunters=[[1, 1], [1, 2]], stag=[6, 6], hares=[[1, 1], [5, 0]])
    s = env.step({"hunter": torch.tensor([[CATCH, STAY]] * 4)})
    assert (s.reward["hunter"] == 2).all() and (env.hare_captures == 1).all()
    env.set_positions(hunters=[[1, 1], [1, 2]], stag=[6, 6], hares=[[1, 1], [5, 0]])
    s = env.step({"hunter": torch.tensor([[CATCH, CATCH]] * 4)})  # two hunters, one hare: 2 once
    assert (s.reward["hunter"] == 2).all() and (env.hare_captures == 2).all()


def test_episode_limit_and_stats():
    env = make_env("stag_hunter", num_envs=2, seed=0, episode_limit=5)
    s = env.reset(seed=0)
    stats = EpisodeStats(env.info)
    for t in range(5):
        s = env.step(env.random_actions(s))
        stats.update(s)
        assert s.truncated.all() == (t == 4) and not s.terminated.any()
    out = stats.pop()
    assert out["episode_length"] == [5, 5] and "stag_captures" in out and "hare_captures" in out


# --------------------------------------------------------------------------- identity


def _run_pair(make_inner, steps, seed=3, actions_of=None):
    inner, wrapped = make_inner(), OffBeatWrapper(make_inner(), {})
    s1, s2 = inner.reset(seed=seed), wrapped.reset(seed=seed)
    assert_same_step(s1, s2)
    gen = torch.Generator().manual_seed(seed)
    for _ in range(steps):
        a = inner.random_actions(s1, generator=gen)
        s1, s2 = inner.step(a), wrapped.step(a)
        assert_same_step(s1, s2)
        for g in a:
            assert torch.equal(wrapped.last_executed[g], a[g]) and wrapped.last_decision[g].all()


def test_identity_stag_hunter():
    _run_pair(lambda: make_env("stag_hunter", num_envs=8, seed=0), 120)


def test_identity_matrix_two_step():
    _run_pair(lambda: make_env("matrix", "two_step", num_envs=8), 10)
    env = make_env("matrix", "two_step", num_envs=2, offbeat={0: 1})
    assert isinstance(env, OffBeatWrapper) and env.info.groups["agent"].n_actions == 3


def test_identity_stag_hunter_all_ones_named():
    env = OffBeatWrapper(make_env("stag_hunter", num_envs=4, seed=0), {"catch": 1, "up": 1})
    ref = make_env("stag_hunter", num_envs=4, seed=0)
    s, r = env.reset(seed=5), ref.reset(seed=5)
    for _ in range(60):
        a = ref.random_actions(r)
        s, r = env.step(a), ref.step(a)
        assert_same_step(r, s)


# --------------------------------------------------------------------------- busy / continue / timing


@pytest.mark.parametrize("d", [2, 3, 5])
@pytest.mark.parametrize("effect", ["on_completion", "spread"])
def test_busy_exactly_d_steps_and_actions_ignored(d, effect):
    env = OffBeatWrapper(hunt(n_hares=0), {"catch": d}, effect=effect)
    s = env.reset()
    cont = env.continue_action["hunter"]
    assert cont == 6 and env.info.groups["hunter"].n_actions == 7
    # hunter_0 starts a catch at step 0; hunter_1 moves right every step
    a = torch.tensor([[CATCH, RIGHT]] * 4)
    free_steps = []
    for t in range(2 * d + 1):
        s = env.step({"hunter": a})
        busy = s.avail_actions["hunter"][:, 0]
        is_busy = bool(busy[0, cont])
        if is_busy:  # one-hot on CONTINUE
            assert (busy.sum(-1) == 1).all() and busy[:, cont].all()
        else:
            assert not busy[:, cont].any() and busy[:, :cont].all()
        assert not s.avail_actions["hunter"][:, 1, cont].any()  # moves take 1 step
        assert is_busy == (env.remaining["hunter"][0, 0] > 0)
        assert bool(s.info["offbeat"]["free"]["hunter"][0, 0]) == (not is_busy)
        if not is_busy:
            free_steps.append(t + 1)  # the agent chooses again at step t + 1
        # while busy, anything submitted is ignored: the next submission is random junk
        junk = torch.randint(0, cont + 1, (4,))
        a = torch.stack([torch.where(busy[:, cont], junk, torch.full((4,), CATCH)), torch.full((4,), RIGHT)], -1)
    # started at 0, free at d; started again at d, free at 2d
    assert free_steps[:2] == [d, 2 * d]
    recs = [r for r in env.records[0] if r.agent == "hunter_0"]
    assert [(r.start, r.end, r.action) for r in recs[:2]] == [(0, d - 1, CATCH), (d, 2 * d - 1, CATCH)]


def test_on_completion_effect_at_last_step():
    d = 3
    env = OffBeatWrapper(hunt(n_hares=0), {"catch": d})
    env.reset()
    env.env.set_positions(hunters=[[2, 2], [3, 2]], stag=[3, 3])
    a = torch.tensor([[CATCH, CATCH]] * 4)
    rewards = []
    a = {"hunter": a}
    for t in range(d):
        s = env.step(a)
        rewards.append(float(s.reward["hunter"][0, 0]))
        executed = env.last_executed["hunter"]
        assert (executed == (CATCH if t == d - 1 else STAY)).all()
        a = {"hunter": torch.full((4, 2), 6)}  # CONTINUE while busy
    assert rewards == [0.0, 0.0, 10.0]  # captured at start + d - 1, not before
    # spread: the inner env receives catch at every step -> the stag falls at the first one
    env = OffBeatWrapper(hunt(n_hares=0), {"catch": d}, effect="spread")
    env.reset()
    env.env.set_positions(hunters=[[2, 2], [3, 2]], stag=[3, 3])
    s = env.step({"hunter": torch.tensor([[CATCH, CATCH]] * 4)})
    assert (s.reward["hunter"] == 10).all() and (env.last_executed["hunter"] == CATCH).all()


def test_offset_catches_miss_the_stag():
    """With on_completion, hunters must *start* together: a one-step offset never captures."""
    env = OffBeatWrapper(hunt(n_hares=0), {"catch": 3})
    env.reset()
    env.env.set_positions(hunters=[[2, 2], [3, 2]], stag=[3, 3])
    total = 0.0
    s = env.step({"hunter": torch.tensor([[CATCH, STAY]] * 4)})
    for _ in range(5):
        busy = s.avail_actions["hunter"][..., 6]
        a = torch.where(busy, torch.full((4, 2), 6), torch.full((4, 2), CATCH))
        s = env.step({"hunter": a})
        total += float(s.reward["hunter"].sum())
    assert total == 0.0


def test_records_complete_and_non_overlapping():
    env = make_env(
        "stag_hunter",
        num_envs=6,
        seed=0,
        episode_limit=20,
        offbeat={"durations": {"catch": 4, "up": 2}, "effect": "on_completion"},
    )
    s = env.reset(seed=0)
    gen = torch.Generator().manual_seed(0)
    decisions = torch.zeros(6, 2, dtype=torch.long)
    for _ in range(20):
        s = env.step(env.random_actions(s, generator=gen))
        decisions += s.info["offbeat"]["decision"]["hunter"].long()
    assert s.truncated.all()
    dur = env.durations["hunter"]
    for b in range(6):
        recs = env.last_records[b]
        assert len(recs) == int(decisions[b].sum())  # one record per decision
        for agent in ("hunter_0", "hunter_1"):
            mine = sorted((r for r in recs if r.agent == agent), key=lambda r: r.start)
            covered = [t for r in mine for t in range(r.start, r.end + 1)]
            assert covered == list(range(20))  # every step exactly once
            for r in mine:
                assert r.end - r.start + 1 == int(dur[r.action]) or (not r.completed and r.end == 19)
        assert env.records[b] == []  # new episode just began


def test_errors_and_spec():
    inner = make_env("stag_hunter", num_envs=2)
    with pytest.raises(MarlError, match="Did you mean 'catch'"):
        OffBeatWrapper(inner, {"cath": 3})
    with pytest.raises(MarlError, match=">= 1"):
        OffBeatWrapper(inner, {"catch": 0})
    with pytest.raises(MarlError, match="effect"):
        OffBeatWrapper(inner, {"catch": 2}, effect="later")
    with pytest.raises(MarlError, match="no action names"):
        make_env("matrix", "two_step", offbeat={"catch": 2})
    env = make_env("stag_hunter", num_envs=2, offbeat={"hunter": {"catch": 3}})
    assert env.durations["hunter"].tolist() == [1, 1, 1, 1, 1, 3]
    again = env.spec.make()
    assert isinstance(again, OffBeatWrapper) and again.durations["hunter"].tolist() == [1, 1, 1, 1, 1, 3]
    env.reset()
    with pytest.raises(MarlError, match="CONTINUE"):
        env.step({"hunter": torch.full((2, 2), 6)})


# --------------------------------------------------------------------------- sanity numbers


def random_capture_rates(d, episodes_per_env=4, B=64, seed=0):
    env = make_env("stag_hunter", num_envs=B, seed=seed, offbeat={"catch": d})
    s = env.reset(seed=seed)
    stats = EpisodeStats(env.info)
    gen = torch.Generator().manual_seed(seed)
    for _ in range(50 * episodes_per_env):
        s = env.step(env.random_actions(s, generator=gen))
        stats.update(s)
    out = stats.pop()
    mean = lambda k: sum(out[k]) / len(out[k])  # noqa: E731
    return mean("stag_captures"), mean("hare_captures")


def test_random_policy_capture_rates():
    rates = {d: random_capture_rates(d) for d in (1, 3, 5)}
    print("random policy (stag, hare) captures per episode:", rates)
    for stag, hare in rates.values():
        assert 0 <= stag < 1.0 and 0.3 < hare < 10
    assert rates[1][1] > rates[5][1]  # long catches mean fewer hare attempts
