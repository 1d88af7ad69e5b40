"""The capability matrix of every on-policy algorithm (the table in docs/index.md, "Train"): discrete and
continuous actions, MLP and GRU actors, and every ``share=`` mapping ("all", "group", "individual", a function of
the agent id), each proven by a one-iteration fit on a tiny MPE env that must move every module's weights, build
the modules the mapping asks for, and act with the action space's dtype and shape. Combinations a method does not
allow (COMA's continuous actions, a value-decomposition team split over modules, a module shared by several
agents in HAPPO/HATRPO) are a clear MarlError before Ray starts."""

import gymnasium as gym
import pytest
import torch

import marl
from marl.api import prepare
from marl.callbacks import Callback
from marl.env import MarlError

SPREAD = ["agent_0", "agent_1", "agent_2"]  # mpe:simple_spread, one group 'agent', one cooperative team
ADVERSARY = {"adversary": ["adversary_0"], "agent": ["agent_0", "agent_1"]}  # mpe:simple_adversary, two teams


def pair(agent: str) -> str:
    """Splits simple_spread's one group: agents 0 and 1 share a module, agent 2 has its own."""
    return "solo" if agent == "agent_2" else "pair"


def sides(agent: str) -> str:
    """simple_adversary's two teams, under names of our own (one module per team, as value decomposition needs)."""
    return "red" if agent.startswith("adversary") else "blue"


def own(agent: str) -> str:
    """Every agent its own module, named by the function (HAPPO/HATRPO's sequential update needs this)."""
    return f"pi_{agent}"


MODULES = {  # (scenario, share) -> module id -> its agents, by hand from docs/mapping.md
    ("spread", "all"): {"shared": SPREAD},
    ("spread", "individual"): {a: [a] for a in SPREAD},
    ("spread", pair): {"pair": SPREAD[:2], "solo": SPREAD[2:]},
    ("spread", own): {f"pi_{a}": [a] for a in SPREAD},
    ("adversary", "individual"): {a: [a] for agents in ADVERSARY.values() for a in agents},
    ("adversary", "group"): ADVERSARY,
    ("adversary", own): {f"pi_{a}": [a] for agents in ADVERSARY.values() for a in agents},
    ("adversary", sides): {"red": ADVERSARY["adversary"], "blue": ADVERSARY["agent"]},
}
DISC, CONT, MLP, GRU = False, True, False, True
# (scenario, continuous, recurrent, share): each plan crosses discrete/continuous actions (where the method allows
# continuous ones) with MLP/GRU actors, and gives every share value the method allows one of the four fits
PLANS = {
    "generic": [
        ("spread", DISC, MLP, "all"),
        ("spread", CONT, GRU, "individual"),
        ("adversary", DISC, GRU, "group"),
        ("spread", CONT, MLP, pair),
    ],
    # COMA: a critic output per action, so discrete only (Foerster et al. 2018, section 4)
    "coma": [
        ("spread", DISC, MLP, "all"),
        ("spread", DISC, GRU, "individual"),
        ("adversary", DISC, GRU, "group"),
        ("spread", DISC, MLP, pair),
    ],
    # value decomposition mixes one module's agents: one module per team
    "vd": [
        ("spread", DISC, MLP, "all"),
        ("adversary", CONT, GRU, "group"),
        ("adversary", DISC, GRU, sides),
        ("spread", CONT, MLP, "all"),
    ],
    # HAPPO/HATRPO update agent by agent: one module per agent
    "ha": [
        ("spread", DISC, MLP, "individual"),
        ("spread", CONT, GRU, own),
        ("adversary", DISC, GRU, "individual"),
        ("adversary", CONT, MLP, own),
    ],
}
REFUSED = {  # plan -> (scenario, continuous, share, fragments of the MarlError)
    "coma": [("spread", CONT, "all", ["cannot handle the action space Box", "supported: Discrete"])],
    "vd": [
        ("spread", DISC, "individual", ["team 'team' (3 agents) maps to modules", "Use share='all'"]),
        ("spread", CONT, pair, ["maps to modules ['pair', 'solo']", "share='group' where each team is one group"]),
    ],
    "ha": [
        ("spread", DISC, "all", ["share='all' maps agents ['agent_0', 'agent_1', 'agent_2'] to the one module"]),
        ("adversary", CONT, "group", ["share='group' maps agents ['agent_0', 'agent_1'] to the one module 'agent'"]),
        ("spread", DISC, pair, ["share=pair maps agents ['agent_0', 'agent_1'] to the one module 'pair'"]),
    ],
}
ALGOS = {  # algorithm -> its plan
    **dict.fromkeys(["ia2c", "maa2c", "ippo", "mappo", "itrpo", "matrpo", "advantage_alignment"], "generic"),
    **{"coma": "coma", "vda2c": "vd", "vdppo": "vd", "happo": "ha", "hatrpo": "ha"},
}


def _share_id(share) -> str:
    return share if isinstance(share, str) else share.__name__


def _case_id(algo, scenario, continuous, recurrent, share) -> str:
    return f"{algo}-{'cont' if continuous else 'disc'}-{'gru' if recurrent else 'mlp'}-{_share_id(share)}"


FITS = [(a, *c) for a, plan in ALGOS.items() for c in PLANS[plan]]
REFUSALS = [(a, *c) for a, plan in ALGOS.items() for c in REFUSED.get(plan, [])]


def make(scenario: str, continuous: bool):
    """Tiny MPE: 4 env copies, 5-step episodes (one rollout of 5 steps is one episode)."""
    name = {"spread": "simple_spread", "adversary": "simple_adversary"}[scenario]
    return marl.make_env("mpe", name, num_envs=4, max_cycles=5, continuous_actions=continuous)


# one iteration of one 5-step rollout per env copy (one GRU chunk), small networks, no evaluation
TINY = dict(stop={"iterations": 1}, rollout_length=5, chunk_length=5, hidden=16, eval_episodes=0, progress=False)


class Weights(Callback):
    """The learners' module weights (every parameter and buffer, critics included) before and after the fit."""

    @staticmethod
    def read(trainer, inference_only=False):
        state = trainer.learner_group.get_state(components="learner/rl_module", inference_only=inference_only)
        return {
            m: {k: torch.as_tensor(v).clone() for k, v in s.items()} for m, s in state["learner"]["rl_module"].items()
        }

    def on_fit_start(self, trainer):
        self.before, self.before_actor = self.read(trainer), self.read(trainer, inference_only=True)

    def on_fit_end(self, trainer, result):
        self.after = self.read(trainer)


def _moved(before, after, part: str):
    """The entries of ``part`` ("actor.", "critic.", "mixer.") that moved by more than 1e-6: a first Adam step
    moves a weight by about the learning rate (3e-4 or 5e-4 here; TRPO's actor by its line-searched step); a
    step too small to learn moves only the zero-initialised biases (tried with lr=1e-30: by 1e-30)."""
    keys = [k for k in before if k.startswith(part) and before[k].is_floating_point()]
    return [k for k in keys if (after[k] - before[k]).abs().max() > 1e-6]


@pytest.mark.parametrize("algo, scenario, continuous, recurrent, share", FITS, ids=[_case_id(*c) for c in FITS])
def test_fit_trains_the_mapped_modules_and_acts_in_the_action_space(
    ray_session, run_dir, algo, scenario, continuous, recurrent, share
):
    env, weights = make(scenario, continuous), Weights()
    one_epoch = {} if algo in ("ia2c", "maa2c") else {"epochs": 1}  # A2C: one step per rollout, no epochs key
    res = env.fit(algo, share=share, recurrent=recurrent, log_dir=run_dir, callbacks=[weights], **TINY, **one_epoch)
    if algo == "advantage_alignment":  # the registry's tensor variant on a tensor env
        assert res.config.algo == "advantage_alignment_tensor"
    expected = MODULES[(scenario, share)]
    policy = res.policy
    assert policy.mapping.modules == expected and set(policy.modules) == set(expected) == set(weights.after)
    for mid, module in policy.modules.items():
        # the acting part, and each trained network beside it (critic, VD's mixer), moved in one iteration
        assert _moved(weights.before_actor[mid], module.state_dict(), "actor."), f"module {mid}'s policy did not move"
        trained = [p for p in ("critic.", "mixer.") if any(k.startswith(p) for k in weights.before[mid])]
        assert "critic." in trained  # every method here learns a critic beside the policy
        for part in trained:
            assert _moved(weights.before[mid], weights.after[mid], part), f"module {mid}'s {part[:-1]} did not move"
        assert any(isinstance(m, torch.nn.GRU) for m in module.modules()) == recurrent
    step = env.reset(seed=0)
    for _ in range(2):  # the second call reads the GRU state the first left
        actions = policy.act(step)
        assert set(actions) == set(env.info.groups)
        for g, a in actions.items():
            group = env.info.groups[g]
            assert isinstance(group.action_space, gym.spaces.Box) == continuous
            if continuous:
                assert a.dtype == torch.float32 and a.shape == (4, group.n_agents, *group.action_space.shape)
                assert torch.isfinite(a).all()
            else:
                assert a.dtype == torch.int64 and a.shape == (4, group.n_agents)
                assert ((a >= 0) & (a < group.action_space.n)).all()
        step = env.step(actions)


@pytest.mark.parametrize(
    "algo, scenario, continuous, share, fragments",
    REFUSALS,
    ids=[_case_id(a, s, c, False, sh).replace("-mlp", "") for a, s, c, sh, _ in REFUSALS],
)
def test_a_combination_the_method_does_not_allow_is_a_clear_error(algo, scenario, continuous, share, fragments):
    with pytest.raises(MarlError) as e:
        make(scenario, continuous).fit(algo, stop={"iterations": 1}, share=share, eval_episodes=0, progress=False)
    for part in [algo, *fragments]:
        assert part in str(e.value), str(e.value)


@pytest.mark.parametrize("algo", ALGOS)
def test_share_auto_is_all_on_a_cooperative_env_and_group_otherwise(algo):
    """share='auto' (docs/mapping.md) becomes 'all' on simple_spread (cooperative, one group) and 'group' on
    simple_adversary (two teams): the mappings the fits above train. HAPPO/HATRPO name what 'auto' became."""
    for scenario, mode in (("spread", "all"), ("adversary", "group")):
        env = make(scenario, False)
        if ALGOS[algo] == "ha":
            with pytest.raises(MarlError, match=rf"share='auto' \(here '{mode}'\) maps agents"):
                prepare(env, algo, {"share": "auto"})
        else:
            mapping = prepare(env, algo, {"share": "auto"})[3]
            assert (mapping.mode, mapping.modules) == (mode, MODULES[(scenario, mode)])
