"""Quarry and Afforestation (envs/resource_games.py): hand-computed rules, shapes, errors, off-beat wrapper.

No Ray except the last test (a 2-iteration QMIX run). About half a minute.
"""

import pytest
import torch
from test_offbeat import _run_pair

from marl.env import EpisodeStats, MarlError, list_envs, make_env
from marl.envs.resource_games import AFFORESTATION_ACTIONS, QUARRY_ACTIONS, WORK, Afforestation, Quarry

STAY, UP, DOWN, LEFT, RIGHT = range(5)
MINE = PLANT = WORK


def act(*a, B=2):
    """The same joint action in every copy."""
    return torch.tensor([list(a)] * B)


def started(cls, num_envs=2, **kw):
    """A reset env of class ``cls`` (seed 0) whose entities the test then places by hand."""
    env = cls(num_envs=num_envs, seed=0, **kw)
    env.reset()
    return env


def quarry(**kw):
    return started(Quarry, **kw)


def forest(**kw):
    return started(Afforestation, **kw)


def play(env, steps, seed=0, each=None):
    """``steps`` uniformly random legal joint actions from ``reset(seed)``; ``each(t, step)`` sees
    every step. Returns the statistics of the episodes that ended (:meth:`EpisodeStats.pop`)."""
    s, stats, gen = env.reset(seed=seed), EpisodeStats(env.info), torch.Generator().manual_seed(seed)
    for t in range(steps):
        s = env.step(env.random_actions(s, generator=gen))
        stats.update(s)
        if each is not None:
            each(t, s)
    return stats.pop()


def reward(step):
    r = next(iter(step.reward.values()))
    assert (r == r[:, :1]).all()  # shared team reward
    return r[:, 0].tolist()


# --------------------------------------------------------------------------- registration, shapes


def test_registered_and_shapes():
    envs = list_envs()
    assert "quarry" in envs and "afforestation" in envs
    q = make_env("quarry", num_envs=3, seed=1)
    g = q.info.groups["miner"]
    assert g.agents == ["miner_0", "miner_1", "miner_2"] and g.n_actions == 6
    assert q.action_names["miner"] == QUARRY_ACTIONS == ["stay", "up", "down", "left", "right", "mine"]
    assert q.info.kind == "cooperative" and q.info.shared_reward and q.info.episode_limit == 50
    assert q.info.entity_layout is None
    s = q.reset(seed=1)
    # own 2 + others 4 + load 1 + depot 2 + stones 4 + boulder 2; state 6 + 3 + 4 + 2 + 1
    assert s.obs["miner"].shape == (3, 3, 15) and s.state.shape == (3, q.info.state_dim) == (3, 16)
    a = make_env("afforestation", num_envs=3, seed=1)
    assert a.info.groups["planter"].agents == ["planter_0", "planter_1"]
    assert a.action_names["planter"] == AFFORESTATION_ACTIONS and AFFORESTATION_ACTIONS[WORK] == "plant"
    s = a.reset(seed=1)
    # own 2 + other 2 + 3x3 window x 2 channels; state 4 + 2 * 49 + 1
    assert s.obs["planter"].shape == (3, 2, 22) and s.state.shape == (3, 103) == (3, a.info.state_dim)
    assert make_env("afforestation", num_envs=1, view=2).info.groups["planter"].obs_dim == 4 + 2 * 25
    for env in (q, a):

        def check(t, s, grp=env.group):
            assert (s.obs[grp].abs() <= 1).all() and (s.state.abs() <= 1).all()
            assert s.avail_actions[grp].all() and s.alive[grp].all() and not s.terminated.any()

        play(env, 60, each=check)


def test_seed_reproduces():
    runs = [[], []]
    for obs in runs:
        play(make_env("quarry", num_envs=4, seed=7), 30, seed=3, each=lambda t, s, obs=obs: obs.append(s.obs["miner"]))
    assert torch.equal(torch.stack(runs[0]), torch.stack(runs[1]))


# --------------------------------------------------------------------------- quarry rules


def test_quarry_observation_layout():
    env = quarry(num_envs=1, n_miners=2, n_stones=1, n_boulders=1)
    env.set_positions(miners=[[0, 0], [6, 6]], stones=[[1, 0]], boulders=[[0, 2]], carry=[5.0, 0.0])
    s = env.observe()
    # own (0,0); other miner +(6,6); load 5/5; depot (3,3); stone (1,0); boulder (0,2); all / 6
    want = torch.tensor([0, 0, 6, 6, 6, 3, 3, 1, 0, 0, 2]) / 6.0
    want[4] = 1.0
    assert torch.allclose(s.obs["miner"][0, 0], want)
    assert torch.allclose(s.state[0], torch.tensor([0, 0, 1, 1, 1, 0, 1 / 6, 0, 0, 2 / 6, 0]))


def test_boulder_needs_two_miners_and_pays_on_delivery():
    env = quarry(n_stones=0)
    env.set_positions(miners=[[1, 1], [2, 2], [6, 6]], boulders=[[1, 2]])
    s = env.step({"miner": act(MINE, STAY, STAY)})  # one miner alone: nothing
    assert reward(s) == [0, 0] and (env.carry == 0).all() and (env.boulders_mined == 0).all()
    assert env.boulders.tolist() == [[[1, 2]]] * 2
    s = env.step({"miner": act(MINE, MINE, MINE)})  # miners 0, 1 near; miner 2 far away
    assert env.carry.tolist() == [[5.0, 5.0, 0.0]] * 2 and (env.boulders_mined == 1).all()
    assert reward(s) == [0, 0]  # ore pays on delivery only
    env.set_positions(miners=[[3, 2], [2, 2], [6, 6]])  # miner 0 next to the depot (3, 3)
    s = env.step({"miner": act(STAY, STAY, STAY)})
    assert reward(s) == [0, 0] and (env.carry[:, 0] == 5).all()
    s = env.step({"miner": act(UP, STAY, STAY)})  # onto the depot: delivered
    assert reward(s) == [5, 5] and env.carry.tolist() == [[0.0, 5.0, 0.0]] * 2
    s = env.step({"miner": act(STAY, RIGHT, STAY)})  # (3, 2): not the depot
    assert reward(s) == [0, 0]
    s = env.step({"miner": act(RIGHT, UP, STAY)})
    assert reward(s) == [5, 5] and (env.ore_delivered == 10).all()
    assert s.info["episode_metrics"]["ore_delivered"].tolist() == [10.0, 10.0]
    assert s.info["episode_metrics"]["boulders_mined"].tolist() == [1.0, 1.0]


def test_boulder_miners_three_and_stone_fallback():
    env = quarry(n_stones=1, boulder_miners=3)
    env.set_positions(miners=[[1, 1], [2, 2], [6, 6]], boulders=[[1, 2]], stones=[[2, 1]])
    env.step({"miner": act(MINE, MINE, STAY)})  # two of three: the boulder stands, they try the stone
    assert (env.boulders_mined == 0).all() and (env.stones_mined == 1).all()
    assert env.carry.tolist() == [[1.0, 0.0, 0.0]] * 2  # only the lowest-index miner gets the stone


def test_stone_one_load_and_loaded_miner_cannot_mine():
    env = quarry(n_boulders=0, n_stones=1)
    env.set_positions(miners=[[1, 1], [1, 2], [5, 5]], stones=[[0, 1]])
    s = env.step({"miner": act(MINE, MINE, STAY)})
    assert env.carry.tolist() == [[1.0, 0.0, 0.0]] * 2 and (env.stones_mined == 1).all() and reward(s) == [0, 0]
    env.set_positions(stones=[[1, 1]])
    env.step({"miner": act(MINE, STAY, STAY)})  # miner 0 is loaded: nothing
    assert env.carry.tolist() == [[1.0, 0.0, 0.0]] * 2 and (env.stones_mined == 1).all()


def test_mine_on_depot_pays_next_step_and_delivery_comes_before_mining():
    env = quarry(n_boulders=0, n_stones=1)
    env.set_positions(miners=[[3, 3], [0, 0], [0, 6]], stones=[[3, 4]])
    s = env.step({"miner": act(MINE, STAY, STAY)})
    assert reward(s) == [0, 0] and (env.carry[:, 0] == 1).all()
    env.set_positions(stones=[[3, 4]])
    s = env.step({"miner": act(MINE, STAY, STAY)})  # delivers the load, then mines a new one
    assert reward(s) == [1, 1] and (env.carry[:, 0] == 1).all() and (env.stones_mined == 2).all()


def test_deposits_never_on_the_depot():
    env = Quarry(num_envs=256, size=2, n_stones=3, n_boulders=2, depot=(0, 1), seed=0)
    env.reset()
    cells = torch.cat([env.stones, env.boulders], 1).reshape(-1, 2)
    assert not (cells == torch.tensor([0, 1])).all(-1).any()
    assert {tuple(c) for c in cells.tolist()} == {(0, 0), (1, 0), (1, 1)}


# --------------------------------------------------------------------------- afforestation rules


def test_tree_pays_only_after_grow_steps():
    env = forest(grow_steps=3)
    env.set_positions(planters=[[2, 2], [5, 5]])
    rewards = [reward(env.step({"planter": act(PLANT, STAY)}))]
    assert env.sapling[:, 2, 2].all() and (env.saplings_planted == 1).all()
    for _ in range(3):
        rewards.append(reward(env.step({"planter": act(STAY, STAY)})))
    assert rewards == [[0, 0], [0, 0], [0, 0], [1, 1]]  # planted at step 0, a lone tree at step 3
    assert env.tree[:, 2, 2].all() and not env.sapling.any() and (env.trees_grown == 1).all()


def test_tree_pays_more_with_planted_neighbours():
    env = forest(grow_steps=2)
    env.set_positions(planters=[[2, 2], [6, 6]], trees=[[1, 2], [3, 2]], saplings=[[2, 3]])
    rewards = [reward(env.step({"planter": act(PLANT, STAY)}))]
    rewards += [reward(env.step({"planter": act(STAY, STAY)})) for _ in range(2)]
    # step 1: the sapling (2,3) matures, neighbour (2,2) a sapling -> 1 + 1;
    # step 2: (2,2) matures, neighbours (1,2), (3,2), (2,3) trees -> 1 + 3
    assert rewards == [[0, 0], [2, 2], [4, 4]] and (env.trees_grown == 2).all()
    env = forest(grow_steps=1, neighbour_reward=0.5)
    env.set_positions(planters=[[2, 2], [2, 3]])
    env.step({"planter": act(PLANT, PLANT)})
    assert reward(env.step({"planter": act(STAY, STAY)})) == [3, 3]  # two adjacent trees, 1.5 each


def test_planting_same_or_occupied_cell():
    env = forest(grow_steps=5)
    env.set_positions(planters=[[4, 4], [4, 4]], trees=[[1, 1]])
    env.step({"planter": act(PLANT, PLANT)})
    assert (env.saplings_planted == 1).all() and int(env.sapling.sum()) == 2
    env.set_positions(planters=[[4, 4], [1, 1]])
    env.step({"planter": act(PLANT, PLANT)})  # a sapling and a tree already there
    assert (env.saplings_planted == 1).all() and int(env.sapling.sum()) == 2 and int(env.tree.sum()) == 2


def test_afforestation_window():
    env = forest(num_envs=1, n_planters=1, size=4, grow_steps=4)
    env.set_positions(planters=[[0, 1]], trees=[[1, 1]], saplings=[[0, 2]], sapling_age=1)
    obs = env.observe().obs["planter"][0, 0]
    # window cells x-major: (-1,0) (-1,1) (-1,2) off the grid, (0,0) (0,1) (0,2), (1,0) (1,1) (1,2)
    saplings = [-1, -1, -1, 0, 0, 0.5, 0, 0, 0]  # age 1 of 4 -> (1 + 1) / 4
    trees = [-1, -1, -1, 0, 0, 0, 0, 1, 0]
    assert torch.allclose(obs, torch.tensor([0, 1 / 3] + saplings + trees))


# --------------------------------------------------------------------------- episodes, errors


@pytest.mark.parametrize("name", ["quarry", "afforestation"])
def test_episode_limit_and_stats(name):
    env = make_env(name, num_envs=2, seed=0, episode_limit=5)

    def check(t, s):
        assert bool(s.truncated.all()) == (t in (4, 9)) and not s.terminated.any()

    out = play(env, 10, each=check)
    assert out["episode_length"] == [5.0] * 4 and all(k in out for k in env.metrics)
    for m in env.metrics:
        assert (getattr(env, m) == 0).all()  # the new episodes have just begun
    if name == "quarry":  # the ore delivered is the team return
        n = env.info.groups["miner"].n_agents
        assert [r / n for r in out["return_miner"]] == pytest.approx(out["ore_delivered"])


@pytest.mark.parametrize(
    "name,kw,match",
    [
        ("quarry", {"n_miners": 0}, "n_miners must be an int >= 1, got 0"),
        ("quarry", {"size": 1.5}, "size must be an int >= 2, got 1.5"),
        ("quarry", {"n_stones": -1}, "n_stones must be an int >= 0, got -1"),
        ("quarry", {"boulder_miners": 4}, r"boulder_miners \(4\) cannot exceed n_miners \(3\)"),
        ("quarry", {"depot": (7, 0)}, r"depot must be a cell .* got \(7, 0\)"),
        ("quarry", {"stone_ore": -1}, "stone_ore must be a number >= 0, got -1"),
        ("quarry", {"n_miner": 2}, "Did you mean 'n_miners'"),
        ("afforestation", {"grow_steps": 0}, "grow_steps must be an int >= 1, got 0"),
        ("afforestation", {"n_planters": True}, "n_planters must be an int >= 1, got True"),
        ("afforestation", {"view": -1}, "view must be an int >= 0, got -1"),
        ("afforestation", {"neighbour_reward": "1"}, "neighbour_reward must be a number >= 0, got '1'"),
        ("afforestation", {"grow": 3}, "Did you mean 'grow_steps'"),
    ],
)
def test_bad_args(name, kw, match):
    with pytest.raises(MarlError, match=match):
        make_env(name, **kw)


def test_bad_use():
    with pytest.raises(MarlError, match="got 'hard'"):
        make_env("quarry", "hard")
    env = Afforestation(num_envs=2)
    with pytest.raises(MarlError, match="reset"):
        env.step({"planter": act(STAY, STAY)})
    env.reset()
    with pytest.raises(MarlError, match="shape"):
        env.step({"planter": torch.zeros(2, 3, dtype=torch.long)})
    with pytest.raises(MarlError, match="Did you mean 'mine'"):
        make_env("quarry", offbeat={"mien": 3})


# --------------------------------------------------------------------------- off-beat wrapper


@pytest.mark.parametrize("name", ["quarry", "afforestation"])
def test_offbeat_identity(name):
    _run_pair(lambda: make_env(name, num_envs=8, seed=0, episode_limit=20), 60)


def test_offbeat_mine_takes_three_steps():
    env = make_env("quarry", num_envs=2, n_stones=0, offbeat={"mine": 3})
    assert env.durations["miner"].tolist() == [1, 1, 1, 1, 1, 3] and env.spec.make().durations["miner"][WORK] == 3
    env.reset()
    env.env.set_positions(miners=[[1, 1], [2, 2], [6, 6]], boulders=[[1, 2]])
    a = act(MINE, MINE, STAY)
    carried = []
    for _ in range(3):
        env.step({"miner": a})
        carried.append(env.carry[0].tolist())  # forwarded to the inner env
        a = act(6, 6, STAY)  # CONTINUE while busy
    assert carried == [[0, 0, 0], [0, 0, 0], [5, 5, 0]]  # the boulder breaks when both mines complete


def test_offbeat_plant_takes_three_steps():
    env = make_env("afforestation", num_envs=2, grow_steps=2, offbeat={"plant": 3})
    env.reset()
    env.env.set_positions(planters=[[3, 3], [0, 0]])
    a, rewards = act(PLANT, STAY), []
    for t in range(5):
        s = env.step({"planter": a})
        rewards.append(reward(s))
        a = act(6 if t < 2 else STAY, STAY)
    assert rewards == [[0, 0]] * 4 + [[1, 1]]  # sapling at step 2, tree two steps later


def random_rates(name, action, d, episodes_per_env=4, B=64, seed=0):
    """Mean episode metrics under uniformly random legal actions with ``action`` taking ``d`` steps."""
    env = make_env(name, num_envs=B, seed=seed, offbeat={action: d})
    out = play(env, 50 * episodes_per_env, seed=seed)
    n = next(iter(env.info.groups.values())).n_agents
    out["team_return"] = [r / n for r in out["episode_return"]]
    return {k: sum(v) / len(v) for k, v in out.items()}


def test_random_play_rates():
    q = {d: random_rates("quarry", "mine", d) for d in (1, 3, 5)}
    f = {d: random_rates("afforestation", "plant", d) for d in (1, 3, 5)}
    print(
        "quarry (ore, stones, boulders):",
        {d: (r["ore_delivered"], r["stones_mined"], r["boulders_mined"]) for d, r in q.items()},
    )
    print(
        "afforestation (trees, saplings, team return):",
        {d: (r["trees_grown"], r["saplings_planted"], r["team_return"]) for d, r in f.items()},
    )
    for r in q.values():
        assert 0.5 < r["stones_mined"] < 10 and r["boulders_mined"] < 0.5
        assert 0 < r["ore_delivered"] <= r["stones_mined"] + 5 * 3 * r["boulders_mined"]
    for r in f.values():
        assert 2 < r["trees_grown"] <= r["saplings_planted"] < 25
        assert r["trees_grown"] <= r["team_return"] <= 5 * r["trees_grown"]
    assert q[1]["stones_mined"] > q[5]["stones_mined"] and f[1]["trees_grown"] > f[5]["trees_grown"]


@pytest.mark.parametrize("name,offbeat", [("quarry", {"mine": 3}), ("afforestation", {"plant": 3})])
def test_qmix_runs_offbeat(ray_session, run_dir, name, offbeat):
    env = make_env(name, num_envs=8, offbeat=offbeat)
    res = env.fit("qmix", stop={"iterations": 2}, batch_size=8, log_dir=run_dir, progress=False, eval_episodes=0)
    assert res.metrics["iteration"] == 2
