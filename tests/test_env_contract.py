"""The env base class (step / step_env template), Wrapper, the wrapper and object registries, extra
columns, the fit entry, and the import rules of the env layer. No Ray, no simulator but the matrix and
grid games: about two seconds.
"""

import ast
import pathlib
import subprocess
import sys

import gymnasium as gym
import numpy as np
import pytest
import torch
from toy_envs import MatchEnv

import marl
from marl.env import (
    EnvInfo,
    GroupInfo,
    MarlError,
    MultiAgentEnv,
    Observation,
    Step,
    Wrapper,
    make_env,
    register_env,
    register_wrapper,
    registry,
    set_fit_entry,
)

ROOT = pathlib.Path(__file__).resolve().parents[1]
B = 4


class Counter(MultiAgentEnv):
    """One group of 2 agents (Discrete(3)) and one continuous agent; row b's episode lasts b + 1 steps.
    Records what step_env and reset_rows receive."""

    def __init__(self):
        box = lambda n: gym.spaces.Box(-1.0, 1.0, (n,), np.float32)  # noqa: E731
        groups = {
            "a": GroupInfo("a", ["a_0", "a_1"], box(1), gym.spaces.Discrete(3)),
            "c": GroupInfo("c", ["c_0"], box(1), box(2)),
        }
        self.info = EnvInfo("toy", "counter", ["a_0", "a_1", "c_0"], groups, state_dim=3, episode_limit=B, num_envs=B)
        self.t = torch.zeros(B)
        self.sent, self.resets = [], []

    def _observation(self):
        x = self.t[:, None, None]
        return Observation(
            {"a": x.expand(B, 2, 1).clone(), "c": x.clone()},
            self.t[:, None].expand(B, 3).clone(),
            {"a": torch.ones(B, 2, 3, dtype=torch.bool), "c": None},
            {"a": torch.ones(B, 2, dtype=torch.bool), "c": torch.ones(B, 1, dtype=torch.bool)},
        )

    def reset(self, seed=None):
        self.t.zero_()
        z = torch.zeros(B, dtype=torch.bool)
        return Step(
            *self._observation(),
            reward={"a": torch.zeros(B, 2), "c": torch.zeros(B, 1)},
            terminated=z,
            truncated=z.clone(),
        )

    def step_env(self, actions):
        self.sent.append(actions)
        self.t += 1
        ended = self.t >= torch.arange(1, B + 1)
        return Step(
            *self._observation(),
            reward={"a": torch.ones(B, 2), "c": torch.ones(B, 1)},
            terminated=ended,
            truncated=torch.zeros(B, dtype=torch.bool),
        )

    def reset_rows(self, rows):
        self.resets.append(rows.clone())
        self.t[rows] = 0
        return self._observation()


def acts(a=0, c=0.5):
    return {"a": torch.full((B, 2), a), "c": torch.full((B, 1, 2), c, dtype=torch.float64)}


# --------------------------------------------------------------------------- the step template


def test_template_resets_ended_rows_and_fills_the_finals():
    env = Counter()
    env.reset()
    s = env.step(acts())  # row 0 ends (episodes of 1 step)
    assert env.resets[-1].tolist() == [True, False, False, False]
    assert s.terminated.tolist() == [True, False, False, False]
    assert s.final_state[:, 0].tolist() == [1, 1, 1, 1] and s.state[:, 0].tolist() == [0, 1, 1, 1]
    assert s.final_obs["a"][0].tolist() == [[1.0], [1.0]] and s.obs["a"][0].tolist() == [[0.0], [0.0]]
    assert s.final_avail_actions["c"] is None and s.final_avail_actions["a"].all()
    # the checked actions step_env received: int64 and float32
    assert env.sent[-1]["a"].dtype == torch.int64 and env.sent[-1]["c"].dtype == torch.float32
    marl.check_env(env, steps=10)


def test_template_copies_nothing_when_no_row_ended():
    env = Counter()
    env.reset()
    env.t.fill_(-5)  # no row can end at the next step
    s = env.step(acts())
    assert env.resets == [] and not s.done.any()
    assert s.final_obs["a"] is s.obs["a"] and s.final_state is s.state
    assert s.final_avail_actions["a"] is s.avail_actions["a"]


@pytest.mark.parametrize(
    "actions, message",
    [
        ({"a": torch.zeros(B, 2, dtype=torch.long)}, r"Missing actions for group 'c'. Expected groups: a, c"),
        ({**acts(), "a": torch.zeros(B, 3, dtype=torch.long)}, r"group 'a' must have shape \(4, 2\)"),
        ({**acts(), "a": torch.zeros(B, 2)}, r"group 'a' must be integers, got torch.float32"),
        ({**acts(), "a": torch.full((B, 2), 3)}, r"group 'a' must lie in \[0, 3\), got values in \[3, 3\]"),
        ({**acts(), "c": torch.zeros(B, 2)}, r"group 'c' must have shape \(4, 1, 2\) \(float32\), got \(4, 2\)"),
        ({**acts(), "c": torch.zeros(B, 1, 2, dtype=torch.bool)}, r"group 'c' must be real numbers"),
    ],
)
def test_template_checks_actions_before_the_raw_step(actions, message):
    env = Counter()
    env.reset()
    with pytest.raises(MarlError, match=message):
        env.step(actions)
    assert env.sent == []


def test_envs_that_override_step_or_implement_nothing():
    env = MatchEnv(num_envs=3)  # overrides step() itself
    s = env.reset(seed=0)
    s = env.step(env.random_actions(s))
    assert s.reward["agent"].shape == (3, 2)

    class Bare(Counter):
        step_env = MultiAgentEnv.step_env

    env = Bare()
    env.reset()
    with pytest.raises(NotImplementedError, match="implements neither step"):
        env.step(acts())


# --------------------------------------------------------------------------- wrappers and extra columns


class Tag(Wrapper):
    """Test wrapper: remembers its options and adds a constant to the rewards."""

    def __init__(self, env, bonus):
        super().__init__(env)
        self.bonus = bonus

    def step(self, actions):
        s = self.env.step(actions)
        s.reward = {g: r + self.bonus for g, r in s.reward.items()}
        return s


def wrap_tag(env, options, seed=None):
    return Tag(env, options["bonus"])


@pytest.fixture
def tag_wrapper(monkeypatch):
    registry._wrapper_order()  # plugins registered before the registry is swapped for a copy
    monkeypatch.setattr(registry, "_WRAPPERS", dict(registry._WRAPPERS))
    register_wrapper("tag", "test_env_contract:wrap_tag", "test wrapper", order=15)


def test_wrapper_forwards_and_has_no_spec_by_hand():
    inner = make_env("stag_hunter", num_envs=2, seed=0)
    env = Tag(inner, 1.0)
    assert env.info is inner.info and env.action_names == inner.action_names and env.unwrapped is inner
    assert env.spec is None and inner.spec is not None  # rebuilding inner's spec would drop the wrapper
    s = env.reset(seed=0)
    assert env.stag_captures is inner.stag_captures  # unknown attributes come from the inner env
    s2 = env.step(env.random_actions(s))
    assert (s2.reward["hunter"] >= 1.0).all()
    with pytest.raises(MarlError, match="Tag wraps a marl MultiAgentEnv, got int"):
        Tag(3, 1.0)


def test_registered_wrappers_apply_in_order_and_ride_in_the_spec(tag_wrapper):
    assert list(marl.env.list_wrappers()) == ["flatten_obs", "offbeat", "tag", "crash"]
    env = make_env("stag_hunter", num_envs=3, seed=1, crash=0.0, tag={"bonus": 2.0}, offbeat={"catch": 2})
    kinds = [type(env).__name__, type(env.env).__name__, type(env.env.env).__name__, type(env.env.env.env).__name__]
    assert kinds == ["CrashWrapper", "Tag", "OffBeatWrapper", "StagHunter"]
    assert env.spec.kwargs["tag"] == {"bonus": 2.0} and env.spec.kwargs["offbeat"] == {"catch": 2}
    again = env.spec.make()
    assert again.spec == env.spec and type(again.env).__name__ == "Tag"
    sa, sb = env.reset(seed=4), again.reset(seed=4)
    gen = torch.Generator().manual_seed(0)
    for _ in range(6):
        a = env.random_actions(sa, gen)
        sa, sb = env.step(a), again.step(a)
        assert torch.equal(sa.reward["hunter"], sb.reward["hunter"]) and torch.equal(sa.state, sb.state)
    assert make_env("stag_hunter", num_envs=2, tag=None).spec.kwargs == {"num_envs": 2}  # None: no wrapper


def test_offbeat_declares_and_fills_the_decision_column_through_the_crash_wrapper():
    env = make_env("stag_hunter", num_envs=4, seed=0, offbeat={"catch": 3}, crash=0.3)
    col = env.info.extra_columns["decision"]
    assert col.dtype == torch.bool and col.fill is False and col.doc
    s = env.reset(seed=0)
    assert not s.extras["decision"]["hunter"].any()
    for _ in range(12):
        s = env.step(env.random_actions(s))
        assert s.extras["decision"]["hunter"] is s.info["offbeat"]["decision"]["hunter"]
    marl.check_env(env, steps=30)
    assert make_env("stag_hunter", num_envs=2).info.extra_columns == {}


# --------------------------------------------------------------------------- object factories


class Marker:
    """An object only the test family "toyfam" builds an env from."""


def toy_from_object(obj, **kwargs):
    return MatchEnv(**kwargs) if isinstance(obj, Marker) else None


def test_objects_go_to_the_families_that_accept_them(monkeypatch):
    registry._builtin_families()
    monkeypatch.setattr(registry, "_FAMILIES", dict(registry._FAMILIES))
    register_env("toyfam", "toy_envs:MatchEnv", "test family", from_object="test_env_contract:toy_from_object")
    env = make_env(Marker(), num_envs=3)
    assert isinstance(env, MatchEnv) and env.num_envs == 3 and env.spec is None
    with pytest.raises(
        MarlError,
        match=r"Cannot build an env from int 42: .*constructor or module .*\(.*"
        r"pettingzoo, toyfam\)",
    ):
        make_env(42)


# --------------------------------------------------------------------------- fit entry


def test_fit_goes_through_the_installed_entry(monkeypatch):
    import marl.api  # noqa: F401  installs marl.fit now, so fit_env's import of it below installs nothing
    import marl.env.contract as contract

    calls = []
    monkeypatch.setattr(contract, "_fit_entry", lambda env, algo, **kw: calls.append((env, algo, kw)) or "done")
    env = MatchEnv()
    assert env.fit("mappo", lr=0.1) == "done" and calls == [(env, "mappo", {"lr": 0.1})]
    set_fit_entry(None)
    with pytest.raises(MarlError, match="No training entry is installed"):
        env.fit("mappo")


def test_marl_fit_is_installed_without_ray():
    code = (
        "import sys, marl, marl.env.contract as c; fit = marl.fit; "
        "assert c._fit_entry is fit, c._fit_entry; assert 'ray' not in sys.modules"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


# --------------------------------------------------------------------------- import rules


def _imports(path):
    """Every module a file imports, at any depth (function-level imports included)."""
    out = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            out.append(node.module)
    return out


def test_the_env_layer_imports_nothing_above_it():
    allowed = ("marl.env", "marl.errors", "marl.plugins")
    for path in sorted((ROOT / "marl" / "env").glob("*.py")):
        bad = [m for m in _imports(path) if m.split(".")[0] == "marl" and not m.startswith(allowed)]
        assert not bad, (path.name, bad)


def test_adapters_share_helpers_only_through_the_common_modules():
    shared = ("marl.envs.common", "marl.envs.grid", "marl.envs.jax_batch")  # jax_batch: the JAX families' batched path
    for path in sorted((ROOT / "envs").glob("*.py")):
        if path.name == "__init__.py":
            continue
        bad = [m for m in _imports(path) if m.startswith("marl.envs.") and not m.startswith(shared)]
        assert not bad, (path.name, bad)
