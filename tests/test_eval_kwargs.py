"""Evaluation envs are built with the kwargs an env declares for them (``MultiAgentEnv.eval_kwargs``):
Overcooked trained with its shaped reward is evaluated on the game's score (20 per cook per soup)."""

from types import SimpleNamespace

import pytest
import torch

from marl import api
from marl.competitive import CompetitiveEval
from marl.engine.context import RunContext
from marl.env import make_env
from marl.mapping import PolicyMapping
from marl.policy import run_episodes

pytest.importorskip("jaxmarl")
from test_jaxmarl_envs import SOUP_SCRIPT  # noqa: E402 - needs jaxmarl

from benchmarks.protocol import EvaluationProtocol  # noqa: E402

STEPS = 70  # episode length: the scripted soup is delivered at step 49
STAY = 4


class SoupCook:
    """A duck-typed policy for ``run_episodes``: agent 0 plays the soup script, agent 1 stays."""

    modules: dict = {}  # no weights: what the protocol keeps of its best evaluation

    def __init__(self, num_envs: int):
        self.num_envs, self.t = num_envs, 0

    def reset(self) -> None:
        self.t = 0

    def act(self, step):
        t, self.t = self.t, (self.t + 1) % STEPS  # all copies end their episodes together
        a = SOUP_SCRIPT[t] if t < len(SOUP_SCRIPT) else STAY
        return {"agent": torch.tensor([[a, STAY]] * self.num_envs)}


def _trainer(env, num_envs: int = 2):
    """What the evaluation callbacks read of a trainer: the run context, the agent-id flag, the env
    steps and a policy (the soup script)."""
    return SimpleNamespace(
        run=RunContext.of(env, PolicyMapping(env.info)),
        cfg=SimpleNamespace(agent_id=False),
        progress={"env_steps": 0},
        make_policy=lambda mapping: SoupCook(num_envs),
    )


@pytest.fixture(scope="module")
def shaped():
    """Overcooked trained with the shaped reward (weight 1: a horizon far away)."""
    return make_env(
        "overcooked", "cramped_room", num_envs=2, seed=0, max_steps=STEPS, shaped_reward=True, shaping_horizon=10**9
    )


def test_overcooked_with_shaping_declares_shaping_off_for_evaluation(shaped):
    assert shaped.eval_kwargs == {"shaped_reward": False, "shaping_horizon": None}
    no_horizon = make_env("overcooked", "cramped_room", num_envs=2, max_steps=STEPS, shaped_reward=True)
    assert no_horizon.eval_kwargs == {"shaped_reward": False}
    assert make_env("overcooked", "cramped_room", num_envs=2, max_steps=STEPS).eval_kwargs == {}


def test_benchmark_protocol_evaluates_the_game_score(shaped):
    trainer = _trainer(shaped)
    protocol = EvaluationProtocol(interval=100, episodes=4, num_envs=2)
    protocol.on_fit_start(trainer)  # the evaluation at step 0
    env = protocol._eval_env(trainer)
    assert env.shaping_weight() == 0.0 and env.eval_kwargs == {}
    assert env.spec.kwargs["num_envs"] == 2 and env.spec.kwargs["max_steps"] == STEPS  # the rest as trained
    soups = run_episodes(env, SoupCook(2), 4)["soups"]  # the evaluated episodes again (scripted: the same)
    assert soups == [1.0] * 4  # the script delivers one soup per episode
    assert protocol.series[0]["return"] == [40.0 * s for s in soups]  # 20 per cook per soup
    # the check can fail: the training kwargs add the shaped reward (onions, plate, soup: 3 + 3 + 3 + 3 + 5)
    trained = run_episodes(trainer.run.make_env(num_envs=2), SoupCook(2), 2)
    assert trained["episode_return"] == [40.0 + 17.0] * 2


def test_competitive_eval_and_result_evaluate_build_shaping_off(shaped):
    cb = CompetitiveEval(num_envs=2)
    cb.on_fit_start(_trainer(shaped))
    assert cb._env.shaping_weight() == 0.0
    built = shaped.spec.make_eval(num_envs=3)  # Result.evaluate() without an env: the spec, kwargs read from a copy
    assert built.shaping_weight() == 0.0 and built.num_envs == 3


def test_fit_final_evaluation_uses_a_separate_shaping_off_env(shaped):
    seen = []
    result = SimpleNamespace(evaluate=lambda episodes, env: seen.append(env) or {})
    api._final_eval(result, 4, shaped, _trainer(shaped).run)
    assert seen[0] is not shaped and seen[0].shaping_weight() == 0.0 and seen[0].num_envs == shaped.num_envs
    plain = make_env("mpe", "simple_spread", num_envs=2, seed=0)
    api._final_eval(result, 4, plain, _trainer(plain).run)
    assert seen[1] is plain  # no eval kwargs: the training env itself, as before


class RandomPlay:
    """A duck-typed policy for ``run_episodes``: seeded random actions of ``env``."""

    def __init__(self, env):
        self.env, self.gen = env, torch.Generator()

    def reset(self) -> None:
        self.gen.manual_seed(0)

    def act(self, step):
        return self.env.random_actions(step, self.gen)


def test_plain_env_declares_none_and_evaluates_unchanged():
    env = make_env("mpe", "simple_spread", num_envs=2, seed=0, max_cycles=10)
    assert env.eval_kwargs == {}
    run = _trainer(env).run
    assert run.eval_kwargs == {}
    evaluated, trained = run.make_eval_env(num_envs=3), run.make_env(num_envs=3)
    assert evaluated.spec == trained.spec
    same = env.spec.make_eval(num_envs=3)
    assert same.spec == trained.spec
    returns = [run_episodes(e, RandomPlay(e), 4)["episode_return"] for e in (evaluated, trained, same)]
    assert returns[0] == returns[1] == returns[2]
