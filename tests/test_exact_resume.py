"""Exact resume (issue 15): N iterations in one fit == N/2 + fit(resume=...) for N/2, weight for weight;
env state round trips (step after restore == step of the original); the replay buffer's exact state."""

import pickle
from pathlib import Path

import numpy as np
import pytest
import torch

import marl
from marl.checkpoint import module_states
from marl.engine.replay import JointEpisodeBuffer
from marl.envs.stag_hunter import StagHunter
from toy_envs import MatchEnv

QUICK = dict(progress=False, eval_episodes=0, checkpoint_every=0)


# --------------------------------------------------------------------------- helpers


def _equal(a, b, where="") -> None:
    """Assert two nested structures of tensors / arrays / numbers are identical (bit for bit)."""
    if isinstance(a, torch.Tensor):
        assert isinstance(b, torch.Tensor) and a.dtype == b.dtype and torch.equal(a, b), where
    elif isinstance(a, np.ndarray):
        assert np.array_equal(a, b), where
    elif isinstance(a, dict):
        assert set(a) == set(b), where
        for k in a:
            _equal(a[k], b[k], f"{where}/{k}")
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b)):
            _equal(x, y, f"{where}[{i}]")
    else:
        assert a == b, where


def _step_fields(s):
    return {
        "obs": s.obs,
        "state": s.state,
        "avail": s.avail_actions,
        "alive": s.alive,
        "reward": s.reward,
        "terminated": s.terminated,
        "truncated": s.truncated,
        "final_obs": s.final_obs,
        "final_state": s.final_state,
        "final_avail": s.final_avail_actions,
        "extras": s.extras,
        "metrics": s.info.get("episode_metrics", {}),
    }


def _actions(env, step, gen):
    return env.random_actions(step, generator=gen)


def _check_round_trip(make, warmup=7, after=12):
    """Step an env, save its state (through pickle, as a checkpoint does), step on; a fresh env
    given the state, and the original env put back, repeat those steps exactly."""
    env = make()
    gen = torch.Generator().manual_seed(1)
    step = env.reset(seed=3)
    for _ in range(warmup):
        step = env.step(_actions(env, step, gen))
    saved = pickle.loads(pickle.dumps(env.get_state()))
    assert saved is not None
    first = step
    acts, steps = [], []
    for _ in range(after):
        acts.append(_actions(env, step, gen))
        step = env.step(acts[-1])
        steps.append(_step_fields(step))
    for target in (make(), env):  # a new env built alike (a resumed run), and the same one rewound
        target.set_state(saved)
        for i, a in enumerate(acts):
            _equal(_step_fields(target.step(a)), steps[i], f"step {i}")
    return first


# --------------------------------------------------------------------------- env round trips


@pytest.mark.parametrize(
    "make",
    [
        lambda: marl.make_env("mpe", "simple_spread", num_envs=3, max_cycles=5),
        lambda: marl.make_env("mpe", "simple_reference", num_envs=2, max_cycles=4),
        lambda: marl.make_env("mpe", "collect_treasure", num_envs=2, max_cycles=4),
        lambda: marl.make_env("mpe", "simple_tag", num_envs=2, max_cycles=6, continuous_actions=True),
        lambda: marl.make_env("matrix", "two_step", num_envs=4),
        lambda: marl.make_env("stag_hunter", num_envs=4, episode_limit=5, hare_move_prob=0.3),
        lambda: marl.make_env("quarry", num_envs=4, episode_limit=6),
        lambda: marl.make_env("afforestation", num_envs=4, episode_limit=6, grow_steps=2),
        lambda: marl.make_env("stag_hunter", num_envs=4, episode_limit=6, offbeat={"catch": 3}),
        lambda: marl.make_env("stag_hunter", num_envs=4, episode_limit=6, crash={"rate": 0.5, "behaviour": "random"}),
        lambda: marl.make_env("mpe", "simple_spread", num_envs=3, max_cycles=5, crash=0.5),
        lambda: MatchEnv(num_envs=4, T=3),
    ],
    ids=[
        "mpe_spread",
        "mpe_reference",
        "mpe_treasure",
        "mpe_tag_continuous",
        "matrix",
        "stag_hunter",
        "quarry",
        "afforestation",
        "offbeat",
        "crash_random",
        "crash_mpe",
        "toy_match",
    ],
)
def test_env_state_round_trip(make):
    _check_round_trip(make)


def test_offbeat_records_survive_a_restore():
    def make():
        return marl.make_env("stag_hunter", num_envs=2, episode_limit=8, offbeat={"catch": 3})

    env = make()
    _check_round_trip(lambda: env, warmup=5, after=6)  # the same object: rewound to the saved state
    other = make()
    other.set_state(env.get_state())
    assert other.records == env.records and other.last_records == env.last_records


def test_smax_state_round_trip():
    pytest.importorskip("jaxmarl")
    # the options of tests/test_smax.py's 3m env: XLA compiles once per process for both
    _check_round_trip(
        lambda: marl.make_env("smax", "3m", num_envs=8, seed=0, max_steps=14, enemy_shoots=False), warmup=10, after=8
    )


def test_envs_that_cannot_save_say_so():
    env = marl.make_env("mpe", "simple_spread", num_envs=2, fast=False)  # the generic PettingZoo adapter
    env.reset(seed=0)
    assert env.get_state() is None
    with pytest.raises(marl.MarlError, match="cannot restore"):
        env.set_state({})
    wrapped = marl.make_env("mpe", "simple_spread", num_envs=2, fast=False, crash=0.2)
    wrapped.reset(seed=0)
    assert wrapped.get_state() is None  # a wrapper cannot save more than its inner env


class ForgetfulStagHunter(StagHunter):
    """Does not save the stag's position: after a restore the stag is where the env left it."""

    _STATE = tuple(n for n in StagHunter._STATE if n != "stag")


def test_check_env_replays_steps_after_a_restore():
    marl.check_env(StagHunter(num_envs=4, episode_limit=5), steps=12)
    with pytest.raises(marl.MarlError, match=r"after set_state\(get_state\(\)\)"):
        marl.check_env(ForgetfulStagHunter(num_envs=4, episode_limit=5), steps=12)


# --------------------------------------------------------------------------- replay buffer


def _rollout(k, T=2):
    """Rollout ``k`` (global steps ``2k, 2k+1``) of 2 copies: copy 0 plays 3-step episodes (open
    slots span rollouts), copy 1 2-step ones; observations and rewards carry the step / rollout."""
    g = torch.arange(T) + T * k
    starts = torch.stack([g % 3 == 0, g % 2 == 0], 1)
    done = torch.stack([g % 3 == 2, g % 2 == 1], 1)
    obs = (torch.arange(T + 1, dtype=torch.float32) + T * k).view(-1, 1, 1, 1).expand(T + 1, 2, 2, 1).clone()
    return {
        "starts": starts,
        "terminated": done,
        "truncated": torch.zeros(T, 2, dtype=torch.bool),
        "state": obs[:, :, 0].clone(),
        "final_state": obs[1:, :, 0].clone(),
        "modules": {
            "m": {
                "obs": obs,
                "final_obs": obs[1:].clone(),
                "actions": torch.zeros(T, 2, 2, dtype=torch.long),
                "rewards": torch.full((T, 2, 2), float(k)),
                "alive": torch.ones(T, 2, 2, dtype=torch.bool),
                "avail": torch.ones(T, 2, 2, 3, dtype=torch.bool),
                "final_avail": torch.ones(T, 2, 2, 3, dtype=torch.bool),
            }
        },
    }


def _buf(capacity=6, B=2):
    return JointEpisodeBuffer(capacity, 3, B, {"m": {"n": 2, "obs_dim": 1, "n_actions": 3}}, 1)


def _fill(buf, k0, n):
    for k in range(k0, k0 + n):
        buf.add_rollout(_rollout(k))


def test_buffer_exact_state_keeps_open_slots_ring_and_sampling():
    buf = _buf()
    _fill(buf, 0, 8)  # wraps the ring (capacity 6) and ends with open slots
    assert (buf._slot >= 0).any()
    other = _buf()
    other.set_state(pickle.loads(pickle.dumps(buf.get_state())))
    for b in (buf, other):
        _fill(b, 8, 5)
    _equal(other.data, buf.data)
    _equal([other.committed, other.lengths, other._slot, other._pos], [buf.committed, buf.lengths, buf._slot, buf._pos])
    _equal(other.sample(5, np.random.default_rng(0)), buf.sample(5, np.random.default_rng(0)))


def test_buffer_of_another_size_takes_the_newest_committed_episodes():
    buf = _buf()
    _fill(buf, 0, 8)
    small = _buf(capacity=5)
    small.set_state(buf.get_state())
    assert len(small) == min(5, len(buf)) and not (small._slot >= 0).any()
    newest = np.sort(buf.data["m/rewards"][buf.committed, 0, 0])[-len(small) :]
    np.testing.assert_array_equal(np.sort(small.data["m/rewards"][small.committed, 0, 0]), newest)


# --------------------------------------------------------------------------- whole runs


def _final_weights(res, mids):
    return module_states(Path(res.checkpoint), mids)


def _one_go_vs_resumed(make_env, algo, n, run_dir, **cfg):
    """Final learner weights and greedy-policy weights of ``n`` iterations in one fit and of
    ``n/2`` + ``n/2`` resumed, each on its own fresh env (as a resume in a new process). Returns the one-go
    result (its ``history`` for checks of the caller's own)."""
    whole = make_env().fit(algo, stop={"iterations": n}, log_dir=str(Path(run_dir) / "whole"), **QUICK, **cfg)
    half = make_env().fit(algo, stop={"iterations": n // 2}, log_dir=str(Path(run_dir) / "split"), **QUICK, **cfg)
    rest = make_env().fit(algo, stop={"iterations": n}, resume=half.checkpoint, **QUICK, **cfg)
    assert whole.metrics["iteration"] == rest.metrics["iteration"] == n
    mids = list(whole.policy.modules)
    a, b, mid = _final_weights(whole, mids), _final_weights(rest, mids), _final_weights(half, mids)
    _equal(a, b, "learner modules")
    for m in mids:  # the weights the runners act with
        _equal(whole.policy.modules[m].state_dict(), rest.policy.modules[m].state_dict(), f"policy {m}")
    assert any(not torch.equal(a[m][k], mid[m][k]) for m in mids for k in a[m]), "training changed nothing"
    timing = ("time_s", "env_steps_per_s", "sample_time_s", "learn_time_s")
    for x, y in zip(whole.history[n // 2 :], rest.history, strict=True):  # returns, losses, counts
        _equal({k: v for k, v in x.items() if k not in timing}, {k: v for k, v in y.items() if k not in timing})
    return whole


def test_mappo_resume_is_exact(ray_session, run_dir):
    _one_go_vs_resumed(
        lambda: marl.make_env("mpe", "simple_spread", num_envs=3, max_cycles=7),
        "mappo",
        4,
        run_dir,
        rollout_length=5,
        epochs=2,
        num_minibatches=2,
    )


def test_recurrent_mappo_on_a_crash_prone_env_resumes_exactly(ray_session, run_dir):
    _one_go_vs_resumed(
        lambda: marl.make_env("stag_hunter", num_envs=3, episode_limit=7, crash=0.3),
        "mappo",
        4,
        run_dir,
        rollout_length=5,
        epochs=2,
        num_minibatches=2,
        recurrent=True,
        chunk_length=5,
    )


@pytest.mark.slow
def test_mappo_resume_with_two_remote_env_runners_is_exact(ray_session, run_dir):
    # each remote runner saves its env, sampler and process generator states (about 70 s on 2 cores)
    _one_go_vs_resumed(
        lambda: marl.make_env("mpe", "simple_spread", num_envs=3, max_cycles=7),
        "mappo",
        4,
        run_dir,
        rollout_length=5,
        epochs=2,
        num_minibatches=2,
        num_env_runners=2,
    )


def test_qmix_resume_is_exact(ray_session, run_dir):
    # 5-step episodes, 3-step rollouts: the checkpoint holds open replay slots mid-episode
    _one_go_vs_resumed(
        lambda: MatchEnv(num_envs=4, T=5),
        "qmix",
        6,
        run_dir,
        rollout_length=3,
        batch_size=4,
        episodes_per_update=2,
        buffer_size=24,
        target_update_interval=6,
        epsilon_anneal_steps=60,
    )


def test_env_without_state_restarts_its_episodes_and_says_so(ray_session, run_dir, capsys):
    def make():
        return marl.make_env("mpe", "simple_spread", num_envs=2, max_cycles=7, fast=False)

    half = make().fit("ippo", stop={"iterations": 1}, log_dir=run_dir, rollout_length=5, epochs=1, **QUICK)
    capsys.readouterr()
    rest = make().fit("ippo", stop={"iterations": 2}, resume=half.checkpoint, rollout_length=5, epochs=1, **QUICK)
    out = capsys.readouterr().out
    assert rest.metrics["iteration"] == 2
    assert "resume is not exact" in out and "does not save its state" in out and "episodes restart" in out


@pytest.mark.parametrize("algo", ["advantage_alignment", "spiral"])  # spiral: RAE baselines carried over
def test_llm_self_play_resume_is_exact(ray_session, run_dir, algo):
    pytest.importorskip("transformers")
    from marl.algos.llm.policy import tiny_config, word_tokenizer
    from marl.envs.text.dilemmas import COMPACT_STATES

    tok = word_tokenizer(["<A>", "<B>", *COMPACT_STATES])

    def fit(n, log_dir, resume=None):
        env = marl.make_env("ipd", rounds=4, prompt_style="compact", history="last")
        return env.fit(
            algo,
            stop={"iterations": n},
            resume=resume,
            log_dir=log_dir,
            **QUICK,
            model=tiny_config(len(tok), n_positions=64),
            tokenizer=tok,
            constrain_actions=True,
            max_new_tokens=2,
            games_per_iteration=8,
            lr=1e-3,
            opponents={"self": 1.0, "always_defect": 1.0},
        )

    whole = fit(4, str(Path(run_dir) / "whole"))
    rest = fit(4, run_dir, resume=fit(2, str(Path(run_dir) / "split")).checkpoint)
    _equal(_final_weights(whole, ["players"]), _final_weights(rest, ["players"]))
