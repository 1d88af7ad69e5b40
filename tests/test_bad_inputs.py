"""About a hundred bad inputs a new user tries, each answered by a clear MarlError before Ray starts.

Every case names the input, the module that catches it (checked: the module whose code raises)
and an excerpt of the message, which names the bad value and what is valid. Config values of
every family (engine, PPO, agent network, value decomposition, LLM self-play), stop criteria,
env names and keywords, env kinds an algorithm cannot train, actions, policies, checkpoint
paths and command lines. Ray is replaced by a function that fails the test if called.
"""

import sys

import pytest
import torch

import marl
from marl.cli import main
from marl.env import MarlError
from marl.results import Result
from toy_envs import MatchEnv, MultiDiscreteEnv

NAN, INF = float("nan"), float("inf")


@pytest.fixture(autouse=True)
def no_ray(monkeypatch):
    import marl.api as api

    def started(*args, **kwargs):
        raise AssertionError("Ray was started before the bad input was caught")

    monkeypatch.setattr(api, "init_ray", started)
    monkeypatch.setattr(api, "start_ray", started)
    if "ray" in sys.modules:  # an earlier test's Ray session: each case runs as in a process that has none
        monkeypatch.setattr(sys.modules["ray"], "is_initialized", lambda: False)


def match():
    return MatchEnv(num_envs=2)


def spread(**kw):
    return marl.make_env("mpe", "simple_spread", num_envs=2, **kw)


def climbing():
    return marl.make_env("matrix", "climbing", num_envs=2)


def ipd():
    pytest.importorskip("transformers")
    return marl.make_env("ipd", rounds=2)


def tiny_model():
    """A ``transformers`` config (random weights, no files, no download): passes the model-path check,
    so the case reaches the check it is about (a name like "gpt2" is refused first as a missing folder)."""
    from marl.algos.llm.policy import tiny_config

    return tiny_config(64)


def fit(make, algo, stop=None, **kw):
    """A thunk: ``marl.fit(make(), algo, ...)`` (one iteration unless ``stop`` says otherwise)."""
    return lambda: marl.fit(make(), algo, stop={"iterations": 1} if stop is None else stop, **kw)


def mk(*args, **kw):
    return lambda: marl.make_env(*args, **kw)


SCHEMA, LOADER, STOP = "marl.config.schema", "marl.config.loader", "marl.config.parse"
MATCH_ROWS = 2 * 2 * 25  # env copies x agents x rollout_length (engine.yaml)

# (id, thunk, module that raises, message excerpt)
CONFIG = [
    # engine keys (every family)
    ("lr=0", fit(match, "mappo", lr=0), LOADER, "Config key 'lr' must be > 0, got 0."),
    ("lr<0", fit(match, "mappo", lr=-1e-3), LOADER, "Config key 'lr' must be > 0, got -0.001."),
    ("lr=nan", fit(match, "mappo", lr=NAN), LOADER, "Config key 'lr' expects a finite number, got nan."),
    ("lr=inf", fit(match, "ippo", lr=INF), LOADER, "Config key 'lr' expects a finite number, got inf."),
    ("lr='abc'", fit(match, "mappo", lr="abc"), LOADER, "Config key 'lr' expects a number, got 'abc'."),
    ("max_grad_norm=0", fit(match, "mappo", max_grad_norm=0), LOADER, "'max_grad_norm' must be > 0, got 0."),
    ("torch_threads=0", fit(match, "mappo", torch_threads=0), LOADER, "'torch_threads' must be >= 1, got 0."),
    ("rollout_length=0", fit(match, "mappo", rollout_length=0), LOADER, "'rollout_length' must be >= 1, got 0."),
    (
        "rollout_length=2.5",
        fit(match, "mappo", rollout_length=2.5),
        LOADER,
        "'rollout_length' expects a whole number, got 2.5.",
    ),
    ("num_envs=0", fit(spread, "mappo", num_envs=0), LOADER, "'num_envs' must be >= 1, got 0."),
    ("num_env_runners=-1", fit(match, "mappo", num_env_runners=-1), LOADER, "'num_env_runners' must be >= 0, got -1."),
    (
        "num_env_runners=999",
        fit(match, "mappo", num_env_runners=999),
        "marl.api",
        "num_env_runners=999 is more than the",
    ),
    (
        "num_cpus_per_env_runner=0",
        fit(match, "mappo", num_cpus_per_env_runner=0),
        LOADER,
        "'num_cpus_per_env_runner' must be > 0, got 0.",
    ),
    (
        "num_gpus_per_learner=-1",
        fit(match, "mappo", num_gpus_per_learner=-1),
        LOADER,
        "'num_gpus_per_learner' must be >= 0, got -1.",
    ),
    ("seed=-1", fit(match, "mappo", seed=-1), LOADER, "'seed' must be >= 0, got -1."),
    (
        "checkpoint_every=-1",
        fit(match, "mappo", checkpoint_every=-1),
        LOADER,
        "'checkpoint_every' must be >= 0, got -1.",
    ),
    (
        "keep_checkpoints=-2",
        fit(match, "mappo", keep_checkpoints=-2),
        LOADER,
        "'keep_checkpoints' must be >= 0, got -2.",
    ),
    ("eval_episodes=-1", fit(match, "mappo", eval_episodes=-1), LOADER, "'eval_episodes' must be >= 0, got -1."),
    (
        "lr_schedule='cosine'",
        fit(match, "mappo", lr_schedule="cosine"),
        LOADER,
        ("Unknown lr_schedule 'cosine'.", "Valid choices: constant, linear."),
    ),
    (
        "share='everyone'",
        fit(match, "mappo", share="everyone"),
        LOADER,
        "Unknown share 'everyone'. Valid choices: all, auto, group, individual.",
    ),
    (
        "non_finite='ignore'",
        fit(match, "mappo", non_finite="ignore"),
        LOADER,
        "Unknown non_finite 'ignore'. Valid choices: mask, off, raise.",
    ),
    (
        "progress='yes'",
        fit(match, "mappo", progress="yes"),
        LOADER,
        "Config key 'progress' expects true/false, got 'yes'.",
    ),
    ("log_dir=5", fit(match, "mappo", log_dir=5), LOADER, "Config key 'log_dir' expects a string, got 5."),
    (
        "lrr=1e-3 (typo)",
        fit(match, "mappo", lrr=1e-3),
        LOADER,
        "Unknown config key 'lrr' for algorithm 'mappo'. Did you mean 'lr'?",
    ),
    (
        "mixer on mappo",
        fit(match, "mappo", mixer="vdn"),
        LOADER,
        "and a value decomposition key (iql, qmix, vdn)",
    ),
    ("algo='qmixx'", fit(match, "qmixx"), "marl.config.registry", "Unknown algorithm 'qmixx'. Did you mean 'qmix'?"),
    # PPO keys
    ("gamma=0", fit(match, "mappo", gamma=0), LOADER, "Config key 'gamma' must be in (0, 1], got 0."),
    ("gamma=1.5", fit(match, "ippo", gamma=1.5), LOADER, "Config key 'gamma' must be in (0, 1], got 1.5."),
    ("gae_lambda=2", fit(match, "mappo", gae_lambda=2), LOADER, "'gae_lambda' must be in [0, 1], got 2."),
    ("clip=0", fit(match, "mappo", clip=0), LOADER, "Config key 'clip' must be > 0, got 0."),
    ("epochs=0", fit(match, "mappo", epochs=0), LOADER, "'epochs' must be >= 1, got 0."),
    ("num_minibatches=0", fit(match, "mappo", num_minibatches=0), LOADER, "'num_minibatches' must be >= 1, got 0."),
    (
        "num_minibatches > rows",
        fit(match, "mappo", num_minibatches=MATCH_ROWS + 1),
        "marl.config.checks",
        f"num_minibatches={MATCH_ROWS + 1} is more than the {MATCH_ROWS} rows a learner gets per update",
    ),
    ("hidden=0", fit(match, "mappo", hidden=0), LOADER, "'hidden' must be >= 1, got 0."),
    ("layers=0", fit(match, "mappo", layers=0), LOADER, "'layers' must be >= 1, got 0."),
    ("activation='gelu2'", fit(match, "mappo", activation="gelu2"), LOADER, "Unknown activation 'gelu2'."),
    (
        "critic='both'",
        fit(match, "mappo", critic="both"),
        LOADER,
        "Unknown critic 'both'. Valid choices: auto, obs, state, team.",
    ),
    ("chunk_length<0", fit(match, "mappo", chunk_length=-1), LOADER, "'chunk_length' must be 0 (off) or >= 1, got -1."),
    ("entropy_coef<0", fit(match, "mappo", entropy_coef=-0.1), LOADER, "'entropy_coef' must be >= 0, got -0.1."),
    ("adam_eps=0", fit(match, "mappo", adam_eps=0), LOADER, "'adam_eps' must be > 0, got 0."),
    ("value_clip<0", fit(match, "mappo", value_clip=-1), LOADER, "'value_clip' must be >= 0, got -1."),
    (
        "log_std_init=inf",
        fit(match, "mappo", log_std_init=INF),
        LOADER,
        "'log_std_init' expects a finite number, got inf.",
    ),
    (
        "reward_redistribution='legem' on mappo",
        fit(match, "mappo", reward_redistribution="legem"),
        "marl.transforms",
        "reward_redistribution='legem' transforms data at on_episodes; mappo calls on_rollout, on_batch. "
        "Algorithms that can use it: iql, qmix, vdn.",
    ),
    (
        "reward_redistribution='legme'",
        fit(match, "mappo", reward_redistribution="legme"),
        LOADER,
        "Unknown reward_redistribution 'legme'. Did you mean 'legem'? Valid choices: causal_shift, legem, none.",
    ),
    (
        "legem section key 'betta'",
        fit(climbing, "qmix", reward_redistribution="legem", legem={"betta": 0.1}),
        LOADER,
        "Unknown key 'betta' in config section 'legem'. Did you mean 'beta'? Valid keys: beta, key_dim,",
    ),
    (
        "legem section without legem",
        fit(climbing, "qmix", legem={"beta": 0.1}),
        LOADER,
        "sets keys of reward_redistribution='legem', but reward_redistribution is 'none'",
    ),
    (
        "legem beta<0",
        fit(climbing, "qmix", reward_redistribution="legem", legem={"beta": -1}),
        LOADER,
        "Config section 'legem': Config key 'beta' must be >= 0, got -1.",
    ),
    # agent network keys
    ("hpn_heads=0", fit(match, "mappo", hpn_heads=0), LOADER, "'hpn_heads' must be >= 1, got 0."),
    ("hpn_hyper_dim=0", fit(match, "qmix", hpn_hyper_dim=0), LOADER, "'hpn_hyper_dim' must be >= 1, got 0."),
    ("agent='transformer'", fit(match, "mappo", agent="transformer"), LOADER, "Unknown agent 'transformer'."),
    (
        "agent='hpn' without layout",
        fit(match, "mappo", agent="hpn"),
        "marl.algos.networks.registry",
        "agent='hpn' needs an entity layout for group 'agent' of toy:match",
    ),
    # value decomposition keys
    ("qmix gamma=0", fit(climbing, "qmix", gamma=0), LOADER, "Config key 'gamma' must be in (0, 1], got 0."),
    ("td_lambda=1.5", fit(climbing, "qmix", td_lambda=1.5), LOADER, "'td_lambda' must be in [0, 1], got 1.5."),
    ("epsilon_start=2", fit(climbing, "vdn", epsilon_start=2), LOADER, "'epsilon_start' must be in [0, 1], got 2."),
    ("batch_size=0", fit(climbing, "qmix", batch_size=0), LOADER, "'batch_size' must be >= 1, got 0."),
    (
        "target_update_interval=0",
        fit(climbing, "qmix", target_update_interval=0),
        LOADER,
        "'target_update_interval' must be >= 1, got 0.",
    ),
    (
        "mixer='qplex'",
        fit(climbing, "qmix", mixer="qplex"),
        LOADER,
        "Unknown mixer 'qplex'. Valid choices: none, qmix, vdn.",
    ),
    (
        "hypernet_layers=3",
        fit(climbing, "qmix", hypernet_layers=3),
        LOADER,
        "Unknown hypernet_layers '3'. Valid choices: 1, 2.",
    ),
    (
        "optimizer='sgd'",
        fit(climbing, "iql", optimizer="sgd"),
        LOADER,
        "Unknown optimizer 'sgd'. Valid choices: adam, rmsprop.",
    ),
    ("q_abs_max<0", fit(climbing, "qmix", q_abs_max=-1), LOADER, "'q_abs_max' must be 0 (off) or > 0, got -1."),
    (
        "buffer_size too small",
        fit(climbing, "qmix", buffer_size=4, batch_size=2),
        "marl.config.checks",
        "buffer_size=4 episodes is too small for 2 env copies writing at once; use buffer_size > 4.",
    ),
    (
        "batch_size > buffer_size",
        fit(climbing, "qmix", buffer_size=100, batch_size=200),
        "marl.config.checks",
        "batch_size=200 episodes can never be in a buffer of buffer_size=100 episodes",
    ),
    (
        "learning_starts > buffer_size",
        fit(climbing, "vdn", buffer_size=200, learning_starts_episodes=500),
        "marl.config.checks",
        "learning_starts_episodes=500 episodes can never be in a buffer of buffer_size=200",
    ),
    # LLM self-play keys
    ("top_p=0", fit(ipd, "reinforce", model="gpt2", top_p=0), LOADER, "'top_p' must be in (0, 1], got 0."),
    ("temperature<0", fit(ipd, "mars", model="gpt2", temperature=-1), LOADER, "'temperature' must be >= 0, got -1."),
    ("lora_r=0", fit(ipd, "reinforce", model="gpt2", lora_r=0), LOADER, "'lora_r' must be >= 1, got 0."),
    (
        "dual_clip=0.5",
        fit(ipd, "reinforce", model="gpt2", dual_clip=0.5),
        LOADER,
        "'dual_clip' must be 0 (off) or > 1, got 0.5.",
    ),
    ("llm clip<0", fit(ipd, "grpo", model="gpt2", clip=-0.1), LOADER, "'clip' must be >= 0, got -0.1."),
    (
        "games_per_iteration=0",
        fit(ipd, "reinforce", model="gpt2", games_per_iteration=0),
        LOADER,
        "'games_per_iteration' must be >= 1, got 0.",
    ),
    (
        "aa_gamma=0",
        fit(ipd, "advantage_alignment", model="gpt2", aa_gamma=0),
        LOADER,
        "'aa_gamma' must be in (0, 1], got 0.",
    ),
    ("loss_agg='sum'", fit(ipd, "reinforce", model="gpt2", loss_agg="sum"), LOADER, "Unknown loss_agg 'sum'."),
    (
        "opponents={'self': -1}",
        lambda: fit(ipd, "reinforce", model=tiny_model(), opponents={"self": -1.0})(),
        "marl.algos.llm.selfplay",
        "opponents must be a dict name -> probability (>= 0, not all 0)",
    ),
    (
        "opponents={'grim': 1}",
        lambda: fit(ipd, "reinforce", model=tiny_model(), opponents={"grim": 1.0})(),
        "marl.algos.llm.games",
        "Unknown opponent 'grim'.",
    ),
    ("no model", fit(ipd, "reinforce"), "marl.algos.llm.selfplay", "reinforce needs model=: a local path or hub id"),
    (
        "model path missing",
        fit(ipd, "mars", model="/nonexistent/model"),
        "marl.algos.llm.models",
        "model='/nonexistent/model': no such folder",
    ),
    (
        "num_envs on a text game",
        lambda: fit(ipd, "reinforce", model=tiny_model(), num_envs=4)(),
        "marl.api",
        "num_envs=4: a text game is one game per env; play more games per iteration with games_per_iteration=N",
    ),
]

STOPS = [
    ("stop={}", fit(match, "mappo", stop={}), STOP, "stop={} has no criterion, so the run might never end"),
    (
        "stop=return only",
        fit(match, "mappo", stop={"episode_return_mean": 5}),
        STOP,
        "stop={'episode_return_mean': 5} has no bound, so the run might never end: give at least one of env_steps",
    ),
    ("stop=5", lambda: marl.fit(match(), "mappo", stop=5), STOP, "stop expects a dict of criteria"),
    (
        "stop env_steps=0",
        fit(match, "mappo", stop={"env_steps": 0}),
        STOP,
        "Stop criterion 'env_steps' must be positive, got 0.",
    ),
    (
        "stop iterations=-1",
        fit(match, "mappo", stop={"iterations": -1}),
        STOP,
        "Stop criterion 'iterations' must be positive, got -1.",
    ),
    (
        "stop time_s=nan",
        fit(match, "mappo", stop={"time_s": NAN}),
        STOP,
        "Stop criterion 'time_s' expects a finite number, got nan.",
    ),
    (
        "stop env_steps=inf",
        fit(match, "mappo", stop={"env_steps": INF}),
        STOP,
        "Stop criterion 'env_steps' expects a finite number, got inf.",
    ),
    (
        "stop env_steps='1e6'",
        fit(match, "mappo", stop={"env_steps": "1e6"}),
        STOP,
        "Stop criterion 'env_steps' expects a finite number, got '1e6'.",
    ),
    (
        "stop steps=10",
        fit(match, "mappo", stop={"steps": 10}),
        STOP,
        "Unknown stop criterion 'steps'. Did you mean 'env_steps'?",
    ),
    (
        "linear lr without env_steps",
        fit(match, "mappo", stop={"iterations": 2}, lr_schedule="linear"),
        "marl.api",
        "give stop={'env_steps': N}",
    ),
]

REG, PZ = "marl.env.registry", "marl.envs.common"
ENVS = [
    ("env 'mpee'", mk("mpee", "simple_spread"), REG, "Unknown env 'mpee'. Did you mean 'mpe'?"),
    ("scenario typo", mk("mpe", "simple_sprad"), "marl.envs.mpe", "'simple_sprad'. Did you mean 'simple_spread'?"),
    (
        "unknown env kwarg",
        mk("mpe", "simple_spread", foo=1),
        "marl.envs.common",
        "Unknown keyword argument 'foo' for MPE scenario 'simple_spread'.",
    ),
    ("env kwarg of wrong type", mk("mpe", "simple_spread", N="abc"), "marl.envs.mpe", "Invalid kwargs {'N': 'abc'}"),
    (
        "make_env num_envs=0",
        mk("mpe", "simple_spread", num_envs=0),
        "marl.envs.common",
        "num_envs must be a positive int, got 0.",
    ),
    (
        "make_env num_envs=2.5",
        mk("matrix", "climbing", num_envs=2.5),
        "marl.envs.common",
        "num_envs must be a positive int, got 2.5.",
    ),
    ("make_env seed=-1", mk("mpe", "simple_spread", seed=-1), REG, "seed must be a whole number >= 0 or None, got -1."),
    (
        "make_env seed='x'",
        mk("mpe", "simple_spread", seed="x"),
        REG,
        "seed must be a whole number >= 0 or None, got 'x'.",
    ),
    (
        "crash=2",
        mk("mpe", "simple_spread", crash=2.0),
        "marl.envs.wrappers.crash",
        "crash rate must be a number in [0, 1], got 2.0.",
    ),
    (
        "crash='nonsense'",
        mk("mpe", "simple_spread", crash="nonsense"),
        "marl.envs.wrappers.crash",
        "Unknown crash strategy 'nonsense'.",
    ),
    (
        "entity_layout group",
        mk("mpe", "simple_spread", entity_layout={"nogroup": {}}),
        "marl.env.layout",
        "Unknown entity_layout group 'nogroup'. Valid choices: agent.",
    ),
    ("make_env(42)", mk(42), REG, "Cannot build an env from int 42"),
    (
        "matrix game typo",
        mk("matrix", "climbng"),
        "marl.envs.matrix",
        "Unknown matrix game 'climbng'. Did you mean 'climbing'?",
    ),
    ("pettingzoo os:system", mk("pettingzoo", "os:system"), PZ, "'os:system' is builtin_function_or_method 'system'"),
    (
        "pettingzoo subprocess:run",
        mk("pettingzoo", "subprocess:run"),
        PZ,
        "'subprocess:run' is function 'run' of module 'subprocess', not a PettingZoo env constructor",
    ),
    (
        "pettingzoo builtins:eval",
        mk("pettingzoo", "builtins:eval"),
        PZ,
        "'builtins:eval' is builtin_function_or_method 'eval'",
    ),
    ("pettingzoo shutil:rmtree", mk("pettingzoo", "shutil:rmtree"), PZ, "'shutil:rmtree' is function 'rmtree'"),
    ("pettingzoo module without env", mk("pettingzoo", "os"), PZ, "Module 'os' has none of parallel_env, env, raw_env"),
    (
        "pettingzoo module typo",
        mk("pettingzoo", "mpe2.simple_sprad_v3"),
        "marl.envs.pettingzoo.names",
        "Unknown PettingZoo env module 'mpe2.simple_sprad_v3'. Did you mean 'mpe2.simple_spread_v3'?",
    ),
    (
        "pettingzoo short name typo",
        mk("pettingzoo", "classic.tictacto_v3"),
        "marl.envs.pettingzoo.names",
        "Unknown PettingZoo env module 'classic.tictacto_v3'. Did you mean 'classic.tictactoe_v3'?",
    ),
    (
        "pettingzoo third-party module typo",
        mk("pettingzoo", "mypkg_envs.arena_v1"),
        PZ,
        "Unknown PettingZoo env module 'mypkg_envs.arena_v1'.",
    ),
    (
        "pettingzoo registry id",
        mk("pettingzoo", "classic/tictactoe-v9"),
        "marl.envs.pettingzoo",
        "Unknown PettingZoo env id 'classic/tictactoe-v9'.",
    ),
    (
        "pettingzoo without a name",
        mk("pettingzoo"),
        "marl.envs.pettingzoo",
        "make_env('pettingzoo', name) needs a name",
    ),
]

ENV_KINDS = [
    ("fit('notanenv')", lambda: marl.fit("notanenv", "mappo"), "marl.api", "fit() needs an env from marl.make_env"),
    (
        "MultiDiscrete actions",
        fit(MultiDiscreteEnv, "mappo"),
        "marl.algos.ppo",
        "mappo cannot handle the action space MultiDiscrete",
    ),
    (
        "qmix on continuous",
        fit(lambda: spread(continuous_actions=True), "qmix"),
        "marl.algos.value_decomp",
        "qmix needs discrete actions, but group 'agent' of mpe:simple_spread has Box",
    ),
    (
        "LLM algo on a tensor env",
        fit(spread, "reinforce", model="x"),
        "marl.algos.llm.selfplay",
        "reinforce trains language models on text games",
    ),
    ("mappo on a text game", fit(ipd, "mappo"), "marl.algos.ppo", "mappo cannot handle the action space Text"),
    (
        "share='all' across spaces",
        fit(lambda: marl.make_env("mpe", "simple_adversary", num_envs=2), "mappo", share="all"),
        "marl.mapping",
        "map to the same module 'shared' but have different spaces",
    ),
    (
        "num_envs on a hand-built env",
        fit(match, "mappo", num_envs=4),
        "marl.api",
        "num_envs=4 was given, but <MatchEnv toy:match B=2 [agentx2] cooperative> has 2 copies and was built by hand",
    ),
]


def _step(actions, **kw):
    def go():
        env = spread(**kw)
        env.reset(seed=0)
        env.step(actions)

    return go


ACTIONS = [
    ("actions: no group", _step({}), "marl.env.actions", "Missing actions for group 'agent'. Expected groups: agent"),
    (
        "actions: agent count",
        _step({"agent": torch.zeros(2, 2, dtype=torch.long)}),
        "marl.env.actions",
        "Actions of group 'agent' must have shape (2, 3) (int64), got (2, 2).",
    ),
    (
        "actions: floats",
        _step({"agent": torch.zeros(2, 3)}),
        "marl.env.actions",
        "Actions of group 'agent' must be integers",
    ),
    (
        "actions: out of range",
        _step({"agent": torch.full((2, 3), 7)}),
        "marl.env.actions",
        "Actions of group 'agent' must lie in [0, 5), got values in [7, 7].",
    ),
    (
        "actions: continuous shape",
        _step({"agent": torch.zeros(2, 3)}, continuous_actions=True),
        "marl.env.actions",
        "Actions of group 'agent' must have shape (2, 3, 5) (float32), got (2, 3).",
    ),
]

_POLICY = {}


def policy():
    """A real greedy MAPPO policy for simple_spread (3 agents, obs 18, 5 actions), built without Ray."""
    if "p" not in _POLICY:
        from marl.api import prepare
        from marl.engine.spec import agent_module_specs
        from marl.policy import Policy

        cfg, cls, env, mapping = prepare(spread(), "mappo", {})
        specs = agent_module_specs(cls, cfg, mapping, inference_only=True)
        _POLICY["p"] = Policy(mapping, {mid: spec.build() for mid, spec in specs.items()})
    return _POLICY["p"]


def act(*args, **kw):
    return lambda: policy().act(*args, **kw)


OBS = torch.zeros(2, 3, 18)
POL = "marl.policy"
POLICIES = [
    (
        "act: group name",
        act({"agents": OBS}),
        POL,
        "Policy.act takes a Step, a dict group -> observations {'agent': [B, 3, 18]}, or agent id -> observation",
    ),
    (
        "act: agent count",
        act({"agent": torch.zeros(2, 4, 18)}),
        POL,
        "observations of group 'agent' have shape (2, 4, 18); expected [B, 3, 18]",
    ),
    ("act: obs size", act({"agent": torch.zeros(2, 3, 20)}), POL, "have shape (2, 3, 20); expected [B, 3, 18]"),
    ("act: no batch axis", act({"agent": torch.zeros(3, 18)}), POL, "have shape (3, 18); expected [B, 3, 18]"),
    (
        "act: avail shape",
        act({"agent": OBS}, {"agent": torch.ones(2, 3, 4, dtype=torch.bool)}),
        POL,
        "avail_actions of group 'agent' have shape (2, 3, 4); expected [B, N_g, n_actions] = (2, 3, 5).",
    ),
    (
        "act: done shape",
        act({"agent": OBS}, None, torch.zeros(5, dtype=torch.bool)),
        POL,
        "done has shape (5,); expected [B] = (2,).",
    ),
    ("act: tensor instead of dict", act(OBS), POL, "got Tensor"),
    (
        "act: unknown agent id",
        act({"agent_0": torch.zeros(18), "agent_9": torch.zeros(18)}),
        POL,
        "Policy.act: unknown agent 'agent_9'.",
    ),
    (
        "act: one agent's obs size",
        act({"agent_0": torch.zeros(17)}),
        POL,
        "the observation of agent 'agent_0' has 17 values (shape (17,)); expected 18",
    ),
    (
        "evaluate: episodes=0",
        lambda: policy().evaluate_episodes(0, env=spread()),
        POL,
        "episodes must be a positive whole number, got 0.",
    ),
    (
        "evaluate: episodes='abc'",
        lambda: policy().evaluate_episodes("abc", env=spread()),
        POL,
        "episodes must be a positive whole number, got 'abc'.",
    ),
    (
        "evaluate: other agent count",
        lambda: policy().evaluate_episodes(2, env=spread(N=4)),
        POL,
        "This policy acts for group 'agent' with 3 agents, obs [18], actions Discrete(5); env mpe:simple_spread has 4 agents",
    ),
    (
        "evaluate: no env",
        lambda: policy().evaluate_episodes(2),
        POL,
        "This policy has no env spec to rebuild its scenario",
    ),
    (
        "Result.evaluate: episodes=-3",
        lambda: Result({}, [], None, None, policy()).evaluate(-3, env=spread()),
        POL,
        "episodes must be a positive whole number, got -3.",
    ),
]

CHECKPOINTS = [
    (
        "load missing path",
        lambda: marl.load("/nonexistent/run"),
        "marl.checkpoint",
        "No marl checkpoint at '/nonexistent/run'",
    ),
    (
        "resume missing path",
        fit(match, "mappo", resume="/nonexistent/run"),
        "marl.checkpoint",
        "No marl checkpoint at '/nonexistent/run'",
    ),
    (
        "init_from missing path",
        fit(match, "mappo", init_from="/nonexistent/run"),
        "marl.checkpoint",
        "No marl checkpoint at '/nonexistent/run'",
    ),
]

CASES = CONFIG + STOPS + ENVS + ENV_KINDS + ACTIONS + POLICIES + CHECKPOINTS


@pytest.mark.parametrize("thunk, where, excerpt", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_bad_input_is_a_clear_error_before_ray(thunk, where, excerpt):
    with pytest.raises(MarlError) as e:
        thunk()
    for part in (excerpt,) if isinstance(excerpt, str) else excerpt:
        assert part in str(e.value), str(e.value)
    assert e.traceback[-1].frame.f_globals["__name__"] == where


SPREAD = ["train", "env=mpe:simple_spread", "algo=mappo"]
CLI = [
    ("cli stop=5", SPREAD + ["stop=5"], "(on the command line stop.<criterion>=N, e.g. stop.env_steps=1e6), got 5."),
    ("stop.steps=5", SPREAD + ["stop.steps=5"], "Unknown stop criterion 'steps'. Did you mean 'env_steps'?"),
    ("stop.env_steps=-5", SPREAD + ["stop.env_steps=-5"], "Stop criterion 'env_steps' must be positive, got -5."),
    (
        "stop.env_steps=abc",
        SPREAD + ["stop.env_steps=abc"],
        "Stop criterion 'env_steps' expects a finite number, got 'abc'.",
    ),
    (
        "episodes=abc",
        ["eval", "/nonexistent/run", "episodes=abc"],
        "episodes expects a whole number >= 1, e.g. episodes=100; got 'abc'.",
    ),
    (
        "episodes=0",
        ["eval", "/nonexistent/run", "episodes=0"],
        "episodes expects a whole number >= 1, e.g. episodes=100; got 0.",
    ),
    ("env.num_envs=x", SPREAD + ["env.num_envs=x"], "num_envs must be a positive int, got 'x'."),
    ("env.N=abc", SPREAD + ["env.N=abc"], "Invalid kwargs {'N': 'abc'} for MPE scenario 'simple_spread'"),
    ("unknown key", SPREAD + ["foo=1"], "Unknown config key 'foo' for algorithm 'mappo'."),
    ("lr=abc", SPREAD + ["lr=abc"], "Config key 'lr' expects a number, got 'abc'."),
    ("gamma=2", SPREAD + ["gamma=2"], "Config key 'gamma' must be in (0, 1], got 2."),
    ("no env", ["train", "algo=mappo"], "marl train needs env=<family>:<scenario> and algo=<name>"),
    ("no algo", ["train", "env=mpe:simple_spread"], "marl train needs env=<family>:<scenario> and algo=<name>"),
    ("not key=value", SPREAD + ["justaword"], "Expected key=value, got 'justaword'."),
    ("env family typo", ["train", "env=mpee:simple_spread", "algo=mappo"], "Unknown env 'mpee'. Did you mean 'mpe'?"),
    (
        "env=pettingzoo:os:system",
        ["train", "env=pettingzoo:os:system", "algo=mappo", "env.command=true"],
        "not a PettingZoo env constructor",
    ),
    ("eval missing path", ["eval", "/nonexistent/run"], "No marl checkpoint at '/nonexistent/run'"),
    ("eval no path", ["eval"], "marl eval needs a checkpoint or run folder"),
    ("eval unknown option", ["eval", "/nonexistent/run", "foo=1"], "marl eval: unknown option(s) ['foo']"),
]


@pytest.mark.parametrize("argv, excerpt", [c[1:] for c in CLI], ids=[c[0] for c in CLI])
def test_cli_value_that_does_not_parse_is_an_error_not_a_traceback(argv, excerpt, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"marl {argv[0]}: error: ") and excerpt in err and "Traceback" not in err, err


def test_env_names_never_run_a_command(tmp_path, capsys):
    """A string never calls os.system / subprocess / eval, from Python or from the command line."""
    marker = tmp_path / "ran"
    for name, kw in [
        ("os:system", {"command": f"touch {marker}"}),
        ("subprocess:run", {"args": ["touch", str(marker)]}),
        ("builtins:eval", {"source": f"open({str(marker)!r}, 'w')"}),
        ("builtins:exec", {}),
    ]:
        with pytest.raises(MarlError, match="not a PettingZoo env constructor"):
            marl.make_env("pettingzoo", name, **kw)
    assert main(["train", "env=pettingzoo:os:system", "algo=mappo", f"env.command=touch {marker}"]) == 2
    assert "not a PettingZoo env constructor" in capsys.readouterr().err
    assert not marker.exists()
    # the Python API keeps accepting callables (checked when called)
    with pytest.raises(MarlError, match="did not return a PettingZoo env"):
        marl.make_env(lambda: 42)


def test_num_envs_given_to_fit_rebuilds_an_env_made_by_name():
    from marl.api import prepare

    cfg, _, env, mapping = prepare(spread(), "mappo", {"num_envs": 4})
    assert env.num_envs == 4 and mapping.info.num_envs == 4 and env.info.scenario == "simple_spread"
