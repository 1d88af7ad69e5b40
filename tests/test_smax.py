"""SMAX adapter (JaxMARL): the batched MultiAgentEnv contract on 3m and 2s3z.

XLA compiles the batched step once per scenario, options and batch size
(~5-10 s each on 2 cores), so the envs are module-scoped and every test reuses
them: 3m with non-shooting enemies and a 14-step limit (wins and time-outs),
2s3z with JaxMARL's defaults (losses, dead agents).
"""

import itertools
import sys

import numpy as np
import pytest
import torch
from marl.envs import smax

import marl
from marl.env import EpisodeStats, MarlError, make_env
from marl.env import check_step as check_contract

try:  # import jaxmarl the adapter's way (XLA flags first; jaxmarl resets sys.stdout / sys.stderr)
    smax._import_jaxmarl()
except MarlError:
    pass
pytest.importorskip("jaxmarl")

B = 8
UNIT, OWN = 13, 10  # SMAX unit_list feature sizes with 6 unit types
gen = torch.Generator().manual_seed(0)  # random actions of the 2s3z tests


@pytest.fixture(scope="module")
def env_3m():
    return make_env("smax", "3m", num_envs=B, seed=0, max_steps=14, enemy_shoots=False)


@pytest.fixture(scope="module")
def env_2s3z():
    return make_env("smax", "2s3z", num_envs=B, seed=0)


def focus_fire(s, t):
    """Attack the first enemy in range, else move (direction from t, agent and copy); no RNG."""
    av = s.avail_actions["ally"]
    Bn, n, _ = av.shape
    attack = av[..., smax.N_MOVE_ACTIONS :]
    move = (torch.arange(n)[None, :] + t + torch.arange(Bn)[:, None]) % 4
    move = torch.where(av.gather(-1, move[..., None])[..., 0], move, torch.full_like(move, smax.STOP_ACTION))
    return {"ally": torch.where(attack.any(-1), attack.float().argmax(-1) + smax.N_MOVE_ACTIONS, move)}


def unit_health(state, n_units):
    """Health fractions ``[B, n_units]`` from the global state (first feature of each unit)."""
    return state[:, : n_units * OWN].reshape(state.shape[0], n_units, OWN)[..., 0]


# --------------------------------------------------------------------------- static info


def test_scenarios_match_jaxmarl_and_every_info_is_consistent():
    from jaxmarl.environments.smax.smax_env import MAP_NAME_TO_SCENARIO

    assert sorted(smax.scenarios()) == sorted(MAP_NAME_TO_SCENARIO)
    for name in smax.scenarios():
        info = make_env("smax", name, num_envs=2).info  # building compiles nothing
        sc = MAP_NAME_TO_SCENARIO[name]
        n, m = sc.num_allies, sc.num_enemies
        g = info.groups["ally"]
        assert g.n_agents == n and g.obs_dim == UNIT * (n - 1 + m) + OWN, name
        assert g.n_actions == smax.N_MOVE_ACTIONS + m and info.state_dim == 12 * (n + m)
        lay = info.entity_layout["ally"]
        blocks = sorted(
            [(e["start"], e["start"] + e["count"] * e["dim"]) for e in lay["entities"].values()] + lay["own"]
        )
        assert blocks[0][0] == 0 and blocks[-1][1] == g.obs_dim  # the blocks tile the observation
        assert all(a[1] == b[0] for a, b in itertools.pairwise(blocks))
        first, count = lay["action_targets"]["enemy"]
        assert first == lay["n_normal_actions"] and first + count == g.n_actions


def test_env_info_3m_and_2s3z(env_3m, env_2s3z):
    i = env_3m.info
    assert (i.family, i.scenario, i.kind, i.shared_reward, i.num_envs) == ("smax", "3m", "cooperative", True, B)
    assert i.agents == ["ally_0", "ally_1", "ally_2"] and list(i.groups) == ["ally"]
    assert i.groups["ally"].obs_dim == 75 and i.state_dim == 72 and i.groups["ally"].n_actions == 8
    assert i.episode_limit == 14
    assert i.entity_layout == {
        "ally": {
            "own": [(65, 75)],
            "entities": {
                "ally": {"start": 0, "count": 2, "dim": 13, "unit_type": (7, 13)},
                "enemy": {"start": 26, "count": 3, "dim": 13, "unit_type": (7, 13)},
            },
            "n_normal_actions": 5,
            "action_targets": {"enemy": (5, 3)},
        }
    }
    j = env_2s3z.info
    assert j.groups["ally"].obs_dim == 127 and j.state_dim == 120 and j.groups["ally"].n_actions == 10
    assert j.episode_limit == 100 and j.shared_reward and len(j.agents) == 5  # JaxMARL's default max_steps
    assert j.entity_layout["ally"]["entities"]["enemy"] == {"start": 52, "count": 5, "dim": 13, "unit_type": (7, 13)}
    assert j.entity_layout["ally"]["own"] == [(117, 127)]


# --------------------------------------------------------------------------- contract


def check_step(env, s):
    """The common contract (marl.env.check_step: shapes, dtypes, finite values, flags, finals), plus SMAX's rules."""
    check_contract(env, s)
    assert s.final_obs is not None and s.final_state is not None and s.final_avail_actions is not None
    info = env.info
    n, A = info.groups["ally"].n_agents, info.groups["ally"].n_actions
    av, alive = s.avail_actions["ally"], s.alive["ally"]
    dead = ~alive
    assert av[..., smax.STOP_ACTION].all()  # stop (the no-op) is always legal
    assert not av[dead][:, [a for a in range(A) if a != smax.STOP_ACTION]].any()  # dead: only the no-op
    assert av[alive][:, :4].all()  # moves legal while alive (SMAX clamps to the map)
    assert (s.obs["ally"][..., info.entity_layout["ally"]["own"][0][0] :][dead] == 0).all()  # dead: no own features
    # the state's ally health agrees with the alive mask
    assert torch.equal(unit_health(s.state, n + (A - smax.N_MOVE_ACTIONS))[:, :n] > 0, alive)
    # one team reward for every ally
    assert torch.equal(s.reward["ally"], s.reward["ally"][:, :1].expand(B, n))
    assert set(s.info["episode_metrics"]) == {"win_rate"}
    assert s.info["episode_metrics"]["win_rate"].shape == (B,)


def run_contract(env, policy, steps):
    """Step ``steps`` times, checking every Step against the episode rules; returns outcome counts."""
    marl.check_env(env, steps=steps, seed=2)
    info = env.info
    n = info.groups["ally"].n_agents
    n_units = n + info.groups["ally"].n_actions - smax.N_MOVE_ACTIONS
    s = env.reset(seed=1)
    check_step(env, s)
    assert s.alive["ally"].all() and not s.done.any()
    assert torch.equal(s.final_obs["ally"], s.obs["ally"]) and torch.equal(s.final_state, s.state)
    stats = EpisodeStats(info)
    length = torch.zeros(B, dtype=torch.long)
    seen = {"won": 0, "lost": 0, "truncated": 0, "dead": 0}
    for t in range(steps):
        s = env.step(policy(s, t))
        stats.update(s)
        length += 1
        check_step(env, s)
        ended, won = s.done, s.info["episode_metrics"]["win_rate"]
        assert set(won[ended].tolist()) <= {0.0, 1.0}
        # final_* differ from the current fields exactly in rows whose episode ended
        for b in range(B):
            same = torch.equal(s.final_state[b], s.state[b]) and torch.equal(s.final_obs["ally"][b], s.obs["ally"][b])
            assert same != bool(ended[b]), (t, b)
        assert torch.equal(s.final_avail_actions["ally"][~ended], s.avail_actions["ally"][~ended])
        # a time-out happens exactly at the limit, never later, and is not a termination
        assert (length <= info.episode_limit).all()
        assert torch.equal(s.truncated, (length == info.episode_limit) & ~s.terminated)
        # termination = one side wiped out in the final state; win = enemies out, an ally alive
        hp = unit_health(s.final_state, n_units)
        allies_out, enemies_out = (hp[:, :n] == 0).all(-1), (hp[:, n:] == 0).all(-1)
        assert torch.equal(s.terminated, allies_out | enemies_out)
        assert torch.equal(won[ended].bool(), (enemies_out & ~allies_out)[ended])
        assert (s.reward["ally"][won.bool() & ended] >= 1.0).all()  # won_battle_bonus
        # the new episode starts with every ally alive
        assert s.alive["ally"][ended].all() and (unit_health(s.state, n_units)[ended] > 0).all()
        seen["won"] += int((won.bool() & ended).sum())
        seen["lost"] += int((s.terminated & ~won.bool()).sum())
        seen["truncated"] += int(s.truncated.sum())
        seen["dead"] += int((~s.alive["ally"]).sum())
        length[ended] = 0
    done = stats.pop()
    assert len(done["win_rate"]) == seen["won"] + seen["lost"] + seen["truncated"]
    assert sum(done["win_rate"]) == seen["won"]
    return seen


def test_contract_3m_wins_and_time_outs(env_3m):
    seen = run_contract(env_3m, focus_fire, steps=40)
    assert seen["won"] > 0 and seen["truncated"] > 0, seen


def test_contract_2s3z_losses_and_dead_agents(env_2s3z):
    seen = run_contract(env_2s3z, lambda s, t: env_2s3z.random_actions(s, gen), steps=45)
    assert seen["lost"] > 0 and seen["dead"] > 0, seen


def test_entity_layout_matches_the_observation(env_2s3z):
    """Own type bits, enemy blocks (and their unit_type bits) and attack actions line up
    (stalkers and zealots have different ranges)."""
    raw = env_2s3z._env
    lay = env_2s3z.info.entity_layout["ally"]
    en = lay["entities"]["enemy"]
    first, count = lay["action_targets"]["enemy"]
    sight = np.asarray(raw.unit_type_sight_ranges)
    reach = np.asarray(raw.unit_type_attack_ranges)
    s = env_2s3z.reset(seed=5)
    checked = typed = 0
    for t in range(12):
        s = env_2s3z.step(env_2s3z.random_actions(s, gen))
        obs, av = s.obs["ally"].numpy(), s.avail_actions["ally"].numpy()
        for b, i in zip(*np.nonzero(s.alive["ally"].numpy())):
            own = obs[b, i, lay["own"][0][0] : lay["own"][0][1]]
            types = np.flatnonzero(own[4:])
            assert len(types) == 1 and types[0] in (2, 3)  # stalker or zealot
            ut = types[0]
            blocks = obs[b, i, en["start"] : en["start"] + en["count"] * en["dim"]].reshape(en["count"], en["dim"])
            dist = np.linalg.norm(blocks[:, 1:3], axis=-1) * sight[ut]  # relative position / sight range
            in_range = (blocks[:, 0] > 0) & (dist < reach[ut])
            clear = np.abs(dist - reach[ut]) > 1e-3  # skip float ties at the range boundary
            assert np.array_equal(av[b, i, first : first + count][clear], in_range[clear]), (t, b, i)
            checked += int(in_range.sum())
            a, z = en["unit_type"]  # seen enemies carry one type bit: stalker or zealot
            seen_types = blocks[blocks[:, 0] > 0, a:z]
            assert (seen_types.sum(-1) == 1).all() and set(np.flatnonzero(seen_types.any(0))) <= {2, 3}
            typed += len(seen_types)
    assert checked > 0 and typed > 0  # some attacks were in range, some enemies seen


def test_same_seed_same_episodes(env_3m):
    def run(env, seed, steps=15):
        s = env.reset(seed=seed)
        out = [s]
        for t in range(steps):
            s = env.step(focus_fire(s, t))
            out.append(s)
        return out

    a = run(env_3m, 3)
    assert not torch.equal(a[0].state[0], a[0].state[1])  # copies start differently
    b = run(env_3m, 3)
    c = run(make_env("smax", "3m", num_envs=B, max_steps=14, enemy_shoots=False), 3)  # another env object
    for x, y, z in zip(a, b, c):
        for other in (y, z):
            assert torch.equal(x.state, other.state) and torch.equal(x.obs["ally"], other.obs["ally"])
            assert torch.equal(x.reward["ally"], other.reward["ally"]) and torch.equal(x.done, other.done)
    assert not torch.equal(run(env_3m, 4, steps=0)[0].state, a[0].state)


def test_rows_follow_their_own_seed(env_3m):
    """Copy b of a batch reset with seed s plays exactly like copy b-1 of a batch reset with s + 1."""

    def policy(s, t, offset):
        av = s.avail_actions["ally"]
        attack = av[..., smax.N_MOVE_ACTIONS :]
        rows = torch.arange(B)[:, None] + offset  # the copy's index in the seed-3 batch
        move = (torch.arange(3)[None, :] + t + rows) % 4
        move = torch.where(av.gather(-1, move[..., None])[..., 0], move, torch.full_like(move, smax.STOP_ACTION))
        return {"ally": torch.where(attack.any(-1), attack.float().argmax(-1) + smax.N_MOVE_ACTIONS, move)}

    sa = env_3m.reset(seed=3)
    traj_a = [sa]
    for t in range(15):
        sa = env_3m.step(policy(sa, t, 0))
        traj_a.append(sa)
    sb = env_3m.reset(seed=4)
    traj_b = [sb]
    for t in range(15):
        sb = env_3m.step(policy(sb, t, 1))
        traj_b.append(sb)
    for x, y in zip(traj_a, traj_b):
        assert torch.equal(x.state[1:], y.state[:-1]) and torch.equal(x.obs["ally"][1:], y.obs["ally"][:-1])
        assert torch.equal(x.reward["ally"][1:], y.reward["ally"][:-1]) and torch.equal(x.done[1:], y.done[:-1])
    assert any(x.done.any() for x in traj_a)  # the comparison ran through auto-resets


# --------------------------------------------------------------------------- errors


@pytest.mark.parametrize(
    "scenario, kwargs, words",
    [
        ("3M", {}, ["SMAX scenario", "'3m'", "smacv2_5_units", "2s3z"]),
        ("smacv2_5_unit", {}, ["Did you mean 'smacv2_5_units'"]),
        (None, {}, ["needs a scenario", "27m_vs_30m"]),
        ("3m", {"max_step": 10}, ["'max_step'", "Did you mean 'max_steps'", "enemy_shoots"]),
        ("3m", {"observation_type": "conic"}, ["'observation_type'", "Valid kwargs"]),
        ("3m", {"max_steps": 0}, ["max_steps must be a positive int"]),
        ("3m", {"attack_mode": "nearest"}, ["SMAX attack_mode", "closest", "random"]),
        ("3m", {"num_envs": 0}, ["num_envs must be a positive int"]),
    ],
)
def test_bad_names_and_kwargs(scenario, kwargs, words):
    with pytest.raises(MarlError) as e:
        make_env("smax", scenario, **kwargs)
    for w in words:
        assert w in str(e.value), (w, str(e.value))


def test_bad_actions_and_step_before_reset():
    env = make_env("smax", "3m", num_envs=2)  # never stepped: nothing compiles
    with pytest.raises(MarlError, match="reset"):
        env.step({"ally": torch.zeros(2, 3, dtype=torch.long)})
    env._states = object()  # pretend reset ran: validation happens before any jax call
    with pytest.raises(MarlError, match="Missing actions for group 'ally'"):
        env.step({"agent": torch.zeros(2, 3, dtype=torch.long)})
    with pytest.raises(MarlError, match=r"shape \(2, 3\)"):
        env.step({"ally": torch.zeros(2, 2, dtype=torch.long)})
    with pytest.raises(MarlError, match=r"\[0, 8\)"):
        env.step({"ally": torch.full((2, 3), 8)})
    with pytest.raises(MarlError, match="integers"):
        env.step({"ally": torch.zeros(2, 3)})


def test_missing_jaxmarl_says_how_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "jaxmarl", None)
    with pytest.raises(MarlError) as e:
        make_env("smax", "3m")
    assert 'pip install "marl-rllib[smax]"' in str(e.value) and "jaxmarl==0.2.0" in str(e.value)


def test_offbeat_attacks_by_name_and_busy_units_stop():
    """offbeat={"attack": 3} gives every attack_k 3 steps; waiting units send stop (4), not a move."""
    env = make_env("smax", "3m", num_envs=2, seed=0, max_steps=14, enemy_shoots=False, offbeat={"attack": 3})
    names = env.action_names["ally"]
    assert names[:5] == ["move_0", "move_1", "move_2", "move_3", "stop"] and names[-1] == "CONTINUE"
    assert env.durations["ally"].tolist() == [1, 1, 1, 1, 1, 3, 3, 3] and env.noop["ally"] == 4
    s, busy_sent, started = env.reset(seed=0), [], 0
    for t in range(14):
        acts = _first_attack_or_move(s, t)
        busy = ~env.free["ally"].clone()
        s = env.step({"ally": acts})
        sent = s.info["offbeat"]["executed"]["ally"]
        busy_sent += sent[busy & ~s.info["offbeat"]["decision"]["ally"]].tolist()
        started += int(((acts >= 5) & ~busy).sum())
    assert started > 0 and busy_sent and set(busy_sent) <= {4, 5, 6, 7}  # stop while waiting, attack at completion
    assert make_env("smax", "3m", num_envs=2, crash=0.5).noop_action["ally"] == 4


def _first_attack_or_move(s, t):
    """[B, n] the first legal attack, else move t % 4 (CONTINUE while busy)."""
    avail = s.avail_actions["ally"]  # [B, n, A + 1] with CONTINUE last
    attack = avail[..., 5:-1]
    first = torch.where(attack.any(-1), 5 + attack.float().argmax(-1), torch.full(attack.shape[:2], t % 4))
    return torch.where(avail[..., -1], torch.full_like(first, avail.shape[-1] - 1), first)
