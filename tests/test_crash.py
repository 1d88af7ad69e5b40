"""Crash wrapper and coach (properties of docs/envs.md, "Crash-prone envs"). Fast, no Ray."""

import math
from pathlib import Path

import pytest
import torch

import marl
from marl.envs.wrappers.coach import Coach
from marl.env import MarlError, make_env
from marl.envs.wrappers.crash import CrashWrapper, crash_options


def fields(s):
    out = {"state": s.state, "terminated": s.terminated, "truncated": s.truncated, "final_state": s.final_state}
    for k in ("obs", "avail_actions", "alive", "reward", "final_obs", "final_avail_actions"):
        d = getattr(s, k) or {}
        for g, v in d.items():
            out[f"{k}/{g}"] = v
    return out


def assert_same(a, b):
    fa, fb = fields(a), fields(b)
    assert fa.keys() == fb.keys()
    for k in fa:
        if fa[k] is None:
            assert fb[k] is None, k
        else:
            assert torch.equal(fa[k], fb[k]), k


@pytest.mark.parametrize("family,scenario,steps", [("matrix", "two_step", 7), ("mpe", "simple_spread", 30)])
def test_rate_zero_is_identity(family, scenario, steps):
    kw = {"num_envs": 4, "seed": 3}
    if family == "mpe":
        kw["max_cycles"] = 10
    raw, wrapped = make_env(family, scenario, **kw), make_env(family, scenario, crash=0.0, **kw)
    assert isinstance(wrapped, CrashWrapper)
    sa, sb = raw.reset(seed=3), wrapped.reset(seed=3)
    assert_same(sa, sb)
    gen = torch.Generator().manual_seed(0)
    for _ in range(steps):
        acts = raw.random_actions(sa, generator=gen)
        sa, sb = raw.step(acts), wrapped.step({g: a.clone() for g, a in acts.items()})
        assert_same(sa, sb)


def two_agents(B=64, **kw):
    return make_env("matrix", "custom", payoff=torch.zeros(3, 3, 3).numpy(), num_envs=B, crash=kw)


def test_flags_constant_within_episode_and_new_at_reset():
    # mpe simple_spread: 3 agents, 10-step episodes
    env = make_env("mpe", "simple_spread", num_envs=8, max_cycles=10, crash={"rate": 0.5, "seed": 1})
    s = env.reset(seed=0)
    flags = env.flags["agent"].clone()
    changed = 0
    for _ in range(40):
        s = env.step(env.random_actions(s))
        now = env.flags["agent"]
        d = s.done
        assert torch.equal(now[~d], flags[~d])  # running episodes keep their flags
        changed += int((now[d] != flags[d]).any(-1).sum())
        flags = now.clone()
    assert changed > 0  # ended copies drew new flags


@pytest.mark.parametrize("cap", [0, 1, 2])
def test_cap_always_holds(cap):
    env = two_agents(B=256, rate=0.7, max_crashed=cap, crash_time="start")
    s = env.reset()
    for _ in range(20):
        assert int(env.flags["agent"].sum(-1).max()) <= cap
        assert int((~s.alive["agent"]).sum(-1).max()) <= cap
        s = env.step(env.random_actions(s))


def test_auto_cap_and_impossible_cap():
    env = two_agents(B=8, rate=0.5, max_crashed="auto")
    assert env.max_crashed == 1
    env = two_agents(B=8, rate=1.0, max_crashed=1)
    with pytest.raises(MarlError, match="re-sampling"):
        env.reset()


@pytest.mark.parametrize("p", [0.1, 0.3])
def test_empirical_crash_frequency(p):
    # 10k resets x 3 agents; binomial 5-sigma bound
    env = two_agents(B=10_000, rate=p, crash_time="start")
    env.reset()
    n = 3 * 10_000
    freq = env.flags["agent"].float().mean().item()
    assert abs(freq - p) < 5 * math.sqrt(p * (1 - p) / n)
    # the logged effective rate equals the flag rate when every crash starts at step 0
    s = env.step(env.random_actions(env.reset()))
    assert bool(s.done.all())
    st = env.pop_stats()
    assert st["episodes"] == 10_000 and abs(st["crash_rate"] - p) < 5 * math.sqrt(p * (1 - p) / n)
    assert torch.allclose(s.info["episode_metrics"]["crash_rate"].mean(), torch.tensor(st["crash_rate"]))


class Recorder(marl.MultiAgentEnv):
    """Wraps an env and records the actions it is sent."""

    def __init__(self, env):
        self.env, self.info, self.sent = env, env.info, []

    def reset(self, seed=None):
        return self.env.reset(seed=seed)

    def step(self, actions):
        self.sent.append({g: a.clone() for g, a in actions.items()})
        return self.env.step(actions)


@pytest.mark.parametrize("behaviour", ["noop", "random"])
def test_forced_action_from_crash_step_on(behaviour):
    base = make_env("mpe", "simple_spread", num_envs=16, max_cycles=25)
    rec = Recorder(base)
    env = CrashWrapper(rec, rate=0.5, behaviour=behaviour, noop_action=0, seed=5)
    s = env.reset(seed=0)
    tc, flags = env.crash_steps["agent"].clone(), env.flags["agent"].clone()
    assert bool(flags.any())
    for t in range(24):  # one episode (25 steps), no auto-reset yet
        crashed = flags & (tc <= t)
        av, alive = s.avail_actions["agent"], s.alive["agent"]
        assert torch.equal(alive, ~crashed)
        assert torch.equal(av[crashed].sum(-1), torch.ones(int(crashed.sum()), dtype=torch.long))
        assert bool(av[~crashed].all())  # mpe: all actions legal for healthy agents
        policy = torch.full((16, 3), 3, dtype=torch.long)  # never the noop
        s = env.step({"agent": policy})
        sent = rec.sent[-1]["agent"]
        assert torch.equal(sent[~crashed], policy[~crashed])  # before t_c: the chosen action
        forced = av.float().argmax(-1)
        assert torch.equal(sent[crashed], forced[crashed])  # from t_c: the one-hot action
        if behaviour == "noop":
            assert bool((sent[crashed] == 0).all())


def test_crash_time_modes():
    env = two_agents(B=2000, rate=1.0, crash_time="start")
    env.reset()
    assert bool((env.crash_steps["agent"] == 0).all())
    env = make_env("mpe", "simple_spread", num_envs=2000, max_cycles=7, crash={"rate": 1.0})
    env.reset(seed=0)
    tc = env.crash_steps["agent"]
    assert int(tc.min()) == 0 and int(tc.max()) == 6  # uniform over 0..episode_limit-1
    env = two_agents(B=20_000, rate=1.0, crash_time=("hazard", 0.25))
    env.reset()
    mean = env.crash_steps["agent"].float().mean().item()
    assert abs(mean - 3.0) < 0.1  # geometric: (1-q)/q
    with pytest.raises(MarlError, match="crash_time"):
        two_agents(rate=0.1, crash_time="sometimes")
    with pytest.raises(MarlError, match="hazard"):
        two_agents(rate=0.1, crash_time=("hazard", 1.5))


def test_determinism_and_independence_from_global_rng():
    def draws(global_seed):
        torch.manual_seed(global_seed)
        env = two_agents(B=64, rate=0.3, seed=11)
        s = env.reset()
        out = []
        for _ in range(6):
            out.append((env.flags["agent"].clone(), env.crash_steps["agent"].clone()))
            torch.rand(100)  # the learner consumes the global RNG
            s = env.step(env.random_actions(s))
        return out

    a, b = draws(0), draws(123)
    for (fa, ta), (fb, tb) in zip(a, b):
        assert torch.equal(fa, fb) and torch.equal(ta, tb)
    torch.manual_seed(7)
    state = torch.get_rng_state()
    env = two_agents(B=64, rate=0.3, behaviour="random", crash_time="start")
    env.reset()
    env.step({"agent": torch.zeros(64, 3, dtype=torch.long)})
    assert torch.equal(state, torch.get_rng_state())  # the wrapper never touched the global RNG
    other = two_agents(B=64, rate=0.3, seed=12)
    other.reset()
    assert not torch.equal(other.flags["agent"], a[0][0])


def test_set_rate_applies_to_new_episodes():
    env = two_agents(B=512, rate=0.0, crash_time="start")
    s = env.reset()
    assert not bool(env.flags["agent"].any())
    env.set_rate(1.0)
    assert not bool(env.flags["agent"].any())  # running episodes keep their flags
    s = env.step(env.random_actions(s))  # one-step game: every copy restarts
    assert bool(env.flags["agent"].all()) and not bool(s.alive["agent"].any())
    with pytest.raises(MarlError, match="crash rate"):
        env.set_rate(1.5)


def test_make_env_round_trip():
    env = make_env(
        "mpe",
        "simple_spread",
        num_envs=3,
        max_cycles=10,
        seed=4,
        crash={"rate": 0.25, "max_crashed": 1, "crash_time": ("hazard", 0.2), "behaviour": "random"},
    )
    again = env.spec.make()
    assert isinstance(again, CrashWrapper) and again.spec == env.spec
    assert again.options() == env.options() and env.options()["seed"] == 4
    sa, sb = env.reset(seed=1), again.reset(seed=1)
    assert_same(sa, sb)
    for _ in range(12):
        acts = env.random_actions(sa, generator=torch.Generator().manual_seed(0))
        sa, sb = env.step(acts), again.step(acts)
        assert_same(sa, sb)
    assert again.spec.make(num_envs=5).num_envs == 5
    for name, rate in (("adaptive", 0.0), ("curriculum", 0.0), ("fixed", 0.2)):
        e = make_env("matrix", "climbing", crash=name)
        assert e.rate == rate and e.strategy == name and e.spec.make().strategy == name
        assert e.make_coach().strategy == name and e.make_coach().rate == rate
    with pytest.raises(MarlError, match="adaptive"):
        make_env("matrix", "climbing", crash="adaptiv")
    with pytest.raises(MarlError, match="crash option"):
        crash_options({"rat": 0.1})
    with pytest.raises(MarlError, match="discrete"):
        make_env("mpe", "simple_spread", continuous_actions=True, crash=0.1)


def test_reference_copies_never_crash_and_are_marked():
    env = make_env("mpe", "simple_spread", N=4, num_envs=16, max_cycles=5, crash={"rate": 1.0, "reference_share": 0.25})
    assert env.options()["reference_share"] == 0.25 and env.spec.make().reference_share == 0.25
    s = env.reset(seed=0)
    flags = torch.cat(list(env.flags.values()), -1)
    assert not flags[:4].any() and flags[4:].all()  # the first ceil(0.25 * 16) copies stay at p = 0
    ended = None
    for _ in range(5):
        s = env.step(env.random_actions(s))
        ended = s.info.get("episode_metrics", ended)
    assert ended["crash_reference"].tolist() == [1.0] * 4 + [0.0] * 12
    assert make_env("matrix", "climbing", num_envs=8, crash="adaptive").reference_share == 0.125
    assert make_env("matrix", "climbing", crash=0.3).reference_share == 0.0
    with pytest.raises(MarlError, match="reference_share"):
        make_env("matrix", "climbing", crash={"rate": 0.1, "reference_share": 1.5})


# --------------------------------------------------------------------------- coach


def test_coach_unknown_strategy():
    with pytest.raises(MarlError, match="Valid choices: adaptive, curriculum, fixed"):
        Coach("adaptve")
    with pytest.raises(MarlError, match="takes no option"):
        Coach("fixed", K=3)


def test_fixed_and_curriculum():
    c = Coach("fixed", rate=0.3)
    assert c.observe([1.0] * 50, 10**6) == 0.3 and c.rate == 0.3
    c = Coach("curriculum", p_max=0.3, T_curr=1000)
    assert c.rate == 0.0
    assert c.observe([], 0) == 0.0
    assert c.observe([], 250) == pytest.approx(0.075)
    assert c.observe([], 500) == pytest.approx(0.15)
    assert c.observe([], 1000) == pytest.approx(0.3)
    assert c.observe([], 10**7) == pytest.approx(0.3)


def test_adaptive_absolute_thresholds_monotone_and_bounded():
    c = Coach("adaptive", K=10, delta=0.05, p_max=0.2, tau_hi=8.0, tau_lo=5.0)
    rates = []
    for i in range(10):  # good performance: p rises by delta per window, capped at p_max
        rates.append(c.observe([9.0] * 10, i * 100))
    assert rates == pytest.approx([0.05, 0.1, 0.15, 0.2, 0.2, 0.2, 0.2, 0.2, 0.2, 0.2])
    assert c.observe([6.0] * 10, 2000) == pytest.approx(0.2)  # between thresholds: unchanged
    down = [c.observe([1.0] * 10, 3000) for _ in range(6)]  # poor: p falls, floored at 0
    assert down == pytest.approx([0.15, 0.1, 0.05, 0.0, 0.0, 0.0])
    # a partial window makes no decision; many episodes at once make several
    assert c.observe([9.0] * 5, 4000) == 0.0
    assert c.observe([9.0] * 25, 4000) == pytest.approx(0.15)  # 30 episodes = 3 windows
    # win rate replaces the return when given
    c = Coach("adaptive", K=4, tau_hi=0.8, tau_lo=0.5)
    assert c.observe([-100.0] * 4, 0, wins=[1, 1, 1, 1]) == pytest.approx(0.05)
    assert c.observe([100.0] * 4, 0, wins=[0, 0, 0, 1]) == pytest.approx(0.0)


def test_adaptive_relative_thresholds():
    c = Coach("adaptive", K=5)  # P_ref measured at p = 0
    assert c.observe([10.0] * 5, 0) == pytest.approx(0.05)  # P = P_ref >= 0.8 P_ref
    assert c.p_ref == 10.0 and c.thresholds() == pytest.approx((5.0, 8.0))
    assert c.observe([8.0] * 5, 0) == pytest.approx(0.1)
    assert c.observe([6.0] * 5, 0) == pytest.approx(0.1)
    assert c.observe([4.0] * 5, 0) == pytest.approx(0.05)
    c = Coach("adaptive", K=5, p_ref=-10.0)  # negative returns: tau = P_ref - (1 - frac) |P_ref|
    assert c.thresholds() == pytest.approx((-15.0, -12.0))
    assert c.observe([-11.0] * 5, 0) == pytest.approx(0.05)
    c.observe_reference([-20.0, -20.0])
    assert c.p_ref == -10.0  # a given P_ref stays
    c = Coach("adaptive", K=3)  # measured on p = 0 reference episodes: the latest K of them
    c.observe_reference([1.0, 2.0])
    assert c.p_ref == pytest.approx(1.5)
    c.observe_reference([3.0, 4.0])
    assert c.p_ref == pytest.approx(3.0)
    c.observe([100.0] * 3, 0)  # a window at p = 0 no longer overwrites the reference episodes' P_ref
    assert c.p_ref == pytest.approx(3.0) and c.rate == pytest.approx(0.05)
    c = Coach("adaptive", K=1, tau_hi=1.0, tau_lo=0.0, p_max=0.5)
    for i in range(200):  # random performance: p stays in [0, p_max]
        p = c.observe([float(torch.rand(1)) * 2 - 0.5], i)
        assert 0.0 <= p <= 0.5
    assert Coach("adaptive", K=2, p_max=0.3, rate=0.1).metrics()["coach_rate"] == 0.1


def test_trainer_applies_the_adaptive_coach(ray_session, run_dir):
    """fit() builds the env's coach, feeds it each iteration's episodes, sets the runners' crash rate and logs it."""
    import marl

    env = marl.make_env(
        "mpe", "simple_spread", N=4, num_envs=16, crash={"strategy": "adaptive", "coach": {"K": 16, "p_ref": -1000.0}}
    )
    res = env.fit("mappo", stop={"iterations": 4}, progress=False, log_dir=run_dir, eval_episodes=0)
    rates = [h["coach_rate"] for h in res.history]
    assert rates == sorted(rates) and rates[-1] > 0  # every window beats the (low) reference: p rises
    assert res.history[-1]["crash_rate_mean"] > 0  # the runners' env really crashes agents now
    # the default adaptive coach measures P_ref on the copies kept at p = 0 (2 of 16 here)
    env = marl.make_env("mpe", "simple_spread", N=4, num_envs=16, crash={"strategy": "adaptive", "coach": {"K": 4}})
    res = env.fit("mappo", stop={"iterations": 2}, progress=False, log_dir=run_dir, eval_episodes=0)
    last = res.history[-1]
    assert last["crash_reference_mean"] == pytest.approx(2 / 16) and "coach_p_ref" in last


def test_crash_evaluation_table_and_plot(ray_session, run_dir, tmp_path):
    """A trained team evaluated over test crash rates: one row per rate, CSV / markdown / PNG written."""
    import marl

    env = marl.make_env("mpe", "simple_spread", N=4, num_envs=8, crash=0.0)
    res = env.fit("mappo", stop={"iterations": 1}, progress=False, log_dir=run_dir, eval_episodes=0)
    from marl.envs.wrappers.crash_eval import evaluate_crashes

    rows = evaluate_crashes(res, rates=[0.0, 0.5, 1.0], episodes=8, out_dir=str(tmp_path))
    assert [r["crash_rate"] for r in rows] == [0.0, 0.5, 1.0]
    assert rows[0]["crash_rate_mean"] == 0.0 and rows[2]["crash_rate_mean"] > 0.5  # every agent flagged at p=1
    for ext in ("csv", "md", "png"):
        assert (tmp_path / f"crash_eval.{ext}").stat().st_size > 0
    assert (tmp_path / "crash_eval.md").read_text().startswith("| crash_rate | episode_return_mean")
    # the command line: `marl eval <run> --crash-rates 0 0.5` writes the table to the run folder
    from marl.cli import main

    assert main(["eval", res.log_dir, "--crash-rates", "0", "0.5", "--episodes", "8"]) == 0
    rows = (Path(res.log_dir) / "crash_eval.md").read_text().splitlines()[2:]
    assert [r.split("|")[1].strip() for r in rows] == ["0.000", "0.500"]
    assert main(["eval", res.log_dir, "--crash-ratez", "0"]) == 2  # unknown option: a clear error, exit 2
