"""SMACv2 adapter: install errors, and the batched contract against a fake ``smacv2`` package.

StarCraft II is not installed here, so a small fake ``StarCraftCapabilityEnvWrapper``
(same methods, observation layout and action rules as SMACv2's, random but
consistent battles) is injected through ``sys.modules``; SC2PATH points at a
temporary folder shaped like a game install.
"""

import itertools
import subprocess
import sys
import types

import numpy as np
import pytest
import torch
from marl.envs import smacv2 as adapter

import marl
from marl.env import EpisodeStats, MarlError, make_env

LIMIT = 6  # the fake's episode limit (SMACv2's 10gen maps: 200)
MOVE, EN_DIM, AL_DIM, OWN = 4, 8, 8, 6  # fake observation block sizes (ally: without last actions)
TYPE_BITS = 3  # the fake's unit_type_bits


class FakeStarCraft2Env:
    """The part of StarCraft2Env the adapter reads: size helpers, n_actions_no_attack, _seed,
    unit_type_bits, obs_last_action (which appends n_actions last-action features to each ally block)."""

    unit_type_bits = TYPE_BITS

    def __init__(self, capability_config, continuing_episode=False, seed=None, obs_last_action=False, **kwargs):
        self.n_agents = capability_config["n_units"]
        self.n_enemies = capability_config["n_enemies"]
        self.continuing_episode = continuing_episode
        self._seed = seed
        self.n_actions_no_attack = 6  # no-op, stop, 4 moves
        self.n_actions = self.n_actions_no_attack + self.n_enemies
        self.episode_limit = LIMIT
        self.obs_last_action = obs_last_action

    def al_dim(self):
        return AL_DIM + (self.n_actions if self.obs_last_action else 0)

    def get_obs_move_feats_size(self):
        return MOVE

    def get_obs_enemy_feats_size(self):
        return self.n_enemies, EN_DIM

    def get_obs_ally_feats_size(self):
        return self.n_agents - 1, self.al_dim()

    def get_obs_own_feats_size(self):
        return OWN


class FakeWrapper:
    """A stand-in for smacv2's StarCraftCapabilityEnvWrapper.

    Battles: an ally dies with probability 0.1 per step, an attack kills its target;
    the battle ends when one side is dead, else at ``LIMIT`` steps (with
    ``info["episode_limit"]`` when ``continuing_episode``). Like SMACv2, an
    unavailable action is an AssertionError and a dead agent has only no-op.
    """

    created = []  # every instance, to check that nothing is built before the install check
    crash_at = None  # a total step count at which step() returns (0, True, {}) like a game restart

    def __init__(self, **kwargs):
        self.kwargs = kwargs
        self.env = FakeStarCraft2Env(**kwargs)
        self.rng = None
        self.log = []  # (reward, terminated, info) of every step
        self.total_steps = 0
        FakeWrapper.created.append(self)

    # -- episode dynamics
    def reset(self):
        if self.rng is None:  # "launch": the game seed is read now
            self.rng = np.random.default_rng(self.env._seed)
        n, m = self.env.n_agents, self.env.n_enemies
        self.ally_hp, self.enemy_hp, self.t = np.ones(n), np.ones(m), 0
        return self.get_obs(), self.get_state()

    def attackable(self):
        n, m = self.env.n_agents, self.env.n_enemies
        near = (np.arange(n)[:, None] + np.arange(m)[None, :] + self.t) % 2 == 0
        return near & (self.ally_hp > 0)[:, None] & (self.enemy_hp > 0)[None, :]

    def get_avail_agent_actions(self, i):
        e = self.env
        if self.ally_hp[i] <= 0:
            return [1] + [0] * (e.n_actions - 1)
        return [0, 1, 1, 1, 1, 1] + self.attackable()[i].astype(int).tolist()

    def get_avail_actions(self):
        return [self.get_avail_agent_actions(i) for i in range(self.env.n_agents)]

    def step(self, actions):
        e = self.env
        for i, a in enumerate(actions):
            assert self.get_avail_agent_actions(i)[a] == 1, f"Agent {i} cannot perform action {a}"
        self.total_steps += 1
        if self.crash_at == self.total_steps:
            out = (0, True, {})
            self.log.append(out)
            return out
        before = self.enemy_hp.sum()
        for a in actions:
            if a >= e.n_actions_no_attack:
                tgt = a - e.n_actions_no_attack
                self.enemy_hp[tgt] = 0.0
        self.ally_hp[self.rng.random(e.n_agents) < 0.1] = 0.0
        self.t += 1
        reward = float(before - self.enemy_hp.sum())
        info = {
            "battle_won": False,
            "dead_allies": int((self.ally_hp <= 0).sum()),
            "dead_enemies": int((self.enemy_hp <= 0).sum()),
        }
        terminated = False
        if (self.enemy_hp <= 0).all() or (self.ally_hp <= 0).all():
            terminated = True
            info["battle_won"] = bool((self.enemy_hp <= 0).all() and (self.ally_hp > 0).any())
        elif self.t >= LIMIT:
            terminated = True
            if e.continuing_episode:
                info["episode_limit"] = True
        self.log.append((reward, terminated, info))
        return reward, terminated, info

    # -- observations, laid out like StarCraft2Env.get_obs_agent
    def get_obs_agent(self, i):
        e = self.env
        n, m = e.n_agents, e.n_enemies
        obs = np.zeros(MOVE + m * EN_DIM + (n - 1) * e.al_dim() + OWN, np.float32)
        if self.ally_hp[i] <= 0:
            return obs  # dead: all zeros
        obs[:MOVE] = 1
        enemies = obs[MOVE : MOVE + m * EN_DIM].reshape(m, EN_DIM)
        enemies[:, 0] = self.attackable()[i]  # "available to attack", as in SMACv2
        enemies[:, 4] = self.enemy_hp
        allies = obs[MOVE + m * EN_DIM : -OWN].reshape(n - 1, e.al_dim())
        allies[:, 4] = np.delete(self.ally_hp, i)
        obs[-OWN:] = [self.ally_hp[i], self.t / LIMIT, i / n, 1, 0, 0]
        return obs

    def get_obs(self):
        return [self.get_obs_agent(i) for i in range(self.env.n_agents)]

    def get_state(self):
        return np.concatenate([self.ally_hp, self.enemy_hp, [self.t / LIMIT]]).astype(np.float32)

    def get_env_info(self):
        e = self.env
        return {
            "state_shape": e.n_agents + e.n_enemies + 1,
            "obs_shape": MOVE + e.n_enemies * EN_DIM + (e.n_agents - 1) * e.al_dim() + OWN,
            "cap_shape": 3,
            "n_actions": e.n_actions,
            "n_agents": e.n_agents,
            "episode_limit": e.episode_limit,
        }

    def close(self):
        self.closed = True


def _install_fake_smacv2(monkeypatch):
    FakeWrapper.created = []
    FakeWrapper.crash_at = None
    names = ["smacv2", "smacv2.env", "smacv2.env.starcraft2", "smacv2.env.starcraft2.wrapper"]
    mods = {n: types.ModuleType(n) for n in names}
    mods["smacv2.env.starcraft2.wrapper"].StarCraftCapabilityEnvWrapper = FakeWrapper
    for parent, child in itertools.pairwise(names):
        setattr(mods[parent], child.rsplit(".", 1)[1], mods[child])
    for n, m in mods.items():
        monkeypatch.setitem(sys.modules, n, m)


@pytest.fixture
def fake_game(monkeypatch, tmp_path):
    """Fake smacv2 importable, SC2PATH = a folder with Versions/ and the SMAC map."""
    _install_fake_smacv2(monkeypatch)
    (tmp_path / "Versions").mkdir()
    maps = tmp_path / "Maps" / "SMAC_Maps"
    maps.mkdir(parents=True)
    (maps / adapter.MAP_FILE).write_bytes(b"")
    monkeypatch.setenv("SC2PATH", str(tmp_path))
    return tmp_path


INSTALL_WORDS = [
    'pip install "marl-rllib[smacv2]"',
    "pip install git+https://github.com/oxwhirl/smacv2.git",
    "4.10",
    "s2client-proto",
    '"iagreetotheeula"',
    "~/StarCraftII",
    "SC2PATH",
    "Maps/SMAC_Maps",
]


# --------------------------------------------------------------------------- install errors


def test_missing_smacv2_package_names_every_install_step(monkeypatch):
    monkeypatch.setitem(sys.modules, "smacv2", None)  # import smacv2 -> ImportError
    with pytest.raises(MarlError) as e:
        make_env("smacv2", "protoss_5_vs_5")
    msg = str(e.value)
    assert "could not be imported" in msg
    for w in INSTALL_WORDS:
        assert w in msg, (w, msg)


def test_missing_game_is_reported_before_anything_is_created(monkeypatch, tmp_path):
    _install_fake_smacv2(monkeypatch)
    monkeypatch.delenv("SC2PATH", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))  # no ~/StarCraftII
    with pytest.raises(MarlError) as e:
        make_env("smacv2", "zerg_10_vs_11", num_envs=2)
    msg = str(e.value)
    assert "SC2PATH is not set" in msg and str(tmp_path / "StarCraftII") in msg and "Versions/" in msg
    for w in INSTALL_WORDS:
        assert w in msg, (w, msg)
    assert FakeWrapper.created == []


def test_sc2path_without_versions_or_maps(monkeypatch, tmp_path):
    _install_fake_smacv2(monkeypatch)
    monkeypatch.setenv("SC2PATH", str(tmp_path))
    with pytest.raises(MarlError, match=f"SC2PATH={tmp_path} has no Versions/"):
        make_env("smacv2", "terran_5_vs_5")
    (tmp_path / "Versions").mkdir()
    with pytest.raises(MarlError) as e:
        make_env("smacv2", "terran_5_vs_5")
    assert "SMAC_Maps" in str(e.value) and adapter.MAP_FILE in str(e.value) and "iagreetotheeula" in str(e.value)
    assert FakeWrapper.created == []


@pytest.mark.parametrize(
    "scenario, kwargs, words",
    [
        ("protos_5_vs_5", {}, ["SMACv2 scenario", "Did you mean 'protoss_5_vs_5'", "zerg_20_vs_23"]),
        (None, {}, ["needs a scenario", "terran_10_vs_11"]),
        ("zerg_5_vs_5", {"obs_last_actoin": True}, ["'obs_last_actoin'", "Did you mean 'obs_last_action'"]),
        ("zerg_5_vs_5", {"continuing_episode": False}, ["'continuing_episode' is set by the smacv2 adapter"]),
        ("zerg_5_vs_5", {"num_envs": 0}, ["num_envs must be a positive int"]),
    ],
)
def test_bad_names_and_arguments(fake_game, scenario, kwargs, words):
    with pytest.raises(MarlError) as e:
        make_env("smacv2", scenario, **kwargs)
    for w in words:
        assert w in str(e.value), (w, str(e.value))


def test_listing_scenarios_imports_no_simulator():
    code = (
        "import sys, marl.envs.smacv2 as a, marl.envs.smax as b; "
        "assert len(a.scenarios()) == 15 and '3m' in b.scenarios(); "
        "bad = [m for m in ('smacv2', 'jax', 'jaxmarl') if m in sys.modules]; assert not bad, bad"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


# --------------------------------------------------------------------------- configuration


@pytest.mark.parametrize(
    "scenario, units, exception",
    [
        ("protoss_5_vs_5", ["stalker", "zealot", "colossus"], None),
        ("terran_10_vs_11", ["marine", "marauder", "medivac"], ["medivac"]),
        ("zerg_20_vs_23", ["zergling", "baneling", "hydralisk"], ["baneling"]),
    ],
)
def test_capability_config_follows_smacv2(fake_game, scenario, units, exception):
    env = make_env("smacv2", scenario, num_envs=2, seed=4, obs_last_action=True)
    race, n, m = adapter.parse_scenario(scenario)
    for b, w in enumerate(FakeWrapper.created):
        kw = w.kwargs
        assert kw["map_name"] == f"10gen_{race}" and kw["seed"] == 4 + b
        assert kw["continuing_episode"] is True and kw["obs_last_action"] is True
        assert kw["use_unit_ranges"] and kw["obs_own_pos"] and kw["min_attack_range"] == 2
        cc = kw["capability_config"]
        assert (cc["n_units"], cc["n_enemies"]) == (n, m)
        assert cc["team_gen"]["dist_type"] == "weighted_teams" and cc["team_gen"]["unit_types"] == units
        assert cc["team_gen"].get("exception_unit_types") == exception
        assert abs(sum(cc["team_gen"]["weights"]) - 1.0) < 1e-9
        assert cc["start_positions"] == {"dist_type": "surrounded_and_reflect", "p": 0.5, "map_x": 32, "map_y": 32}
    assert FakeWrapper.created[0].kwargs["capability_config"] is not FakeWrapper.created[1].kwargs["capability_config"]
    assert env.info.groups["ally"].n_agents == n and env.info.groups["ally"].n_actions == 6 + m


def test_env_info_and_entity_layout(fake_game):
    env = make_env("smacv2", "terran_5_vs_5", num_envs=3)
    i = env.info
    g = i.groups["ally"]
    assert (i.family, i.scenario, i.kind, i.shared_reward, i.num_envs) == (
        "smacv2",
        "terran_5_vs_5",
        "cooperative",
        True,
        3,
    )
    assert g.agents == [f"ally_{k}" for k in range(5)] and i.agents == g.agents
    assert g.obs_dim == MOVE + 5 * EN_DIM + 4 * AL_DIM + OWN and g.n_actions == 11
    assert i.state_dim == 11 and i.episode_limit == LIMIT
    own_start = MOVE + 5 * EN_DIM + 4 * AL_DIM
    assert i.entity_layout == {
        "ally": {
            "own": [(0, MOVE), (own_start, own_start + OWN)],
            "entities": {
                "enemy": {"start": MOVE, "count": 5, "dim": EN_DIM, "unit_type": (EN_DIM - TYPE_BITS, EN_DIM)},
                "ally": {
                    "start": MOVE + 5 * EN_DIM,
                    "count": 4,
                    "dim": AL_DIM,
                    "unit_type": (AL_DIM - TYPE_BITS, AL_DIM),
                },
            },
            "n_normal_actions": 6,
            "action_targets": {"enemy": (6, 5)},
        }
    }


def test_unit_type_before_the_last_actions_and_none_without_type_bits(fake_game, monkeypatch):
    ally = make_env("smacv2", "terran_5_vs_5", obs_last_action=True).info.entity_layout["ally"]["entities"]["ally"]
    assert ally["dim"] == AL_DIM + 11 and ally["unit_type"] == (
        AL_DIM - TYPE_BITS,
        AL_DIM,
    )  # 11 last-action features follow
    monkeypatch.setattr(FakeStarCraft2Env, "unit_type_bits", 0)
    ents = make_env("smacv2", "terran_5_vs_5").info.entity_layout["ally"]["entities"]
    assert "unit_type" not in ents["ally"] and "unit_type" not in ents["enemy"]


def test_layout_that_does_not_add_up_is_an_error(fake_game, monkeypatch):
    monkeypatch.setattr(FakeStarCraft2Env, "get_obs_own_feats_size", lambda self: OWN + 3)
    with pytest.raises(MarlError, match="do not add up"):
        make_env("smacv2", "protoss_5_vs_5")


# --------------------------------------------------------------------------- batched contract


def _check_step(env, s):
    """The common contract (marl.env.check_step: shapes, dtypes, a legal action for every agent, flags,
    finals), plus SMACv2's rules."""
    marl.env.check_step(env, s)
    assert s.final_obs is not None and s.final_state is not None and s.final_avail_actions is not None
    B, n = env.num_envs, env.info.groups["ally"].n_agents
    dead = ~s.alive["ally"]
    # dead agents: only the no-op; alive agents: never the no-op
    assert (s.avail_actions["ally"][dead][:, 0]).all() and not s.avail_actions["ally"][dead][:, 1:].any()
    assert not s.avail_actions["ally"][~dead][:, 0].any()
    assert (s.obs["ally"][dead] == 0).all()
    # the "available to attack" feature of enemy block e == legality of attack action 6 + e
    lay = env.info.entity_layout["ally"]
    en = lay["entities"]["enemy"]
    blocks = s.obs["ally"][..., en["start"] : en["start"] + en["count"] * en["dim"]].reshape(
        B, n, en["count"], en["dim"]
    )
    first, count = lay["action_targets"]["enemy"]
    assert torch.equal(blocks[..., 0].bool(), s.avail_actions["ally"][..., first : first + count])


def test_contract_against_the_fake_game(fake_game):
    env = make_env("smacv2", "protoss_5_vs_5", num_envs=4, seed=10)
    with pytest.raises(MarlError, match="reset"):
        env.step({"ally": torch.zeros(4, 5, dtype=torch.long)})
    s = env.reset(seed=20)
    fakes = FakeWrapper.created
    assert [f.rng is not None for f in fakes] == [True] * 4
    assert [f.env._seed for f in fakes] == [20, 21, 22, 23]  # reset(seed) reaches the launching games
    _check_step(env, s)
    assert s.alive["ally"].all() and not s.done.any()
    stats = EpisodeStats(env.info)
    gen = torch.Generator().manual_seed(0)
    steps = torch.zeros(4, dtype=torch.long)
    seen = {"terminated": 0, "truncated": 0, "won": 0}
    for _ in range(60):
        s = env.step(env.random_actions(s, gen))
        stats.update(s)
        steps += 1
        _check_step(env, s)
        for b, f in enumerate(fakes):
            reward, term, info = f.log[-1]
            assert torch.all(s.reward["ally"][b] == np.float32(reward))
            assert bool(s.done[b]) == term
            assert bool(s.truncated[b]) == bool(info.get("episode_limit", False))
            assert s.info["episode_metrics"]["win_rate"][b].item() == float(info.get("battle_won", False))
        ended = s.done
        # truncated exactly at the limit; terminated rows ended a battle earlier or at the limit
        assert (steps[s.truncated] == LIMIT).all() and (steps[s.terminated] <= LIMIT).all()
        for b in range(4):
            same = torch.equal(s.final_obs["ally"][b], s.obs["ally"][b]) and torch.equal(s.final_state[b], s.state[b])
            assert same != bool(ended[b]), b
        assert torch.equal(s.final_avail_actions["ally"][~ended], s.avail_actions["ally"][~ended])
        if ended.any():
            assert s.alive["ally"][ended].all() and (s.state[ended][:, -1] == 0).all()  # fresh episodes
            won = s.info["episode_metrics"]["win_rate"].bool() & ended
            assert (s.final_state[won][:, 5:10] == 0).all()  # every enemy dead in a won episode
        seen["terminated"] += int(s.terminated.sum())
        seen["truncated"] += int(s.truncated.sum())
        seen["won"] += int(s.info["episode_metrics"]["win_rate"][ended].sum())
        steps[ended] = 0
    assert min(seen.values()) > 0, seen  # the run covered every kind of episode end
    done = stats.pop()
    assert len(done["win_rate"]) == seen["terminated"] + seen["truncated"]
    assert set(done["win_rate"]) <= {0.0, 1.0} and sum(done["win_rate"]) == seen["won"]
    marl.check_env(env, steps=30, seed=3)
    env.close()
    assert all(f.closed for f in fakes)


def test_unavailable_and_malformed_actions(fake_game):
    env = make_env("smacv2", "zerg_5_vs_5", num_envs=2)
    env.reset()
    with pytest.raises(MarlError, match=r"Action 0 of ally_0 in copy 0 is not available \(legal: \[1, 2, 3, 4, 5"):
        env.step({"ally": torch.zeros(2, 5, dtype=torch.long)})  # no-op while alive
    with pytest.raises(MarlError, match="Missing actions for group 'ally'"):
        env.step({"agent": torch.ones(2, 5, dtype=torch.long)})
    with pytest.raises(MarlError, match=r"shape \(2, 5\)"):
        env.step({"ally": torch.ones(2, 4, dtype=torch.long)})
    with pytest.raises(MarlError, match=r"\[0, 11\)"):
        env.step({"ally": torch.full((2, 5), 11)})
    assert all(f.log == [] for f in FakeWrapper.created)  # nothing reached the games
    env.step({"ally": torch.ones(2, 5, dtype=torch.long)})  # stop is always legal while alive


def test_game_restart_is_a_truncation(fake_game):
    env = make_env("smacv2", "terran_5_vs_5", num_envs=2)
    env.reset()
    FakeWrapper.crash_at = 2
    s = env.step({"ally": torch.ones(2, 5, dtype=torch.long)})
    s = env.step(env.random_actions(s))
    assert s.truncated.all() and not s.terminated.any()
    assert s.info["restarts"].tolist() == [1, 1]
    assert s.info["episode_metrics"]["win_rate"].tolist() == [0.0, 0.0]
