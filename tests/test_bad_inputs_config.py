"""Bad policy-mapping functions, config values that do not fit together, ``log_dir`` and
``callbacks`` of the wrong type, unknown keys and broken YAML files: each a clear MarlError
(or a documented ConfigWarning) before Ray starts or a run folder is written.

One table per class; every case asserts the MarlError and fragments of its message (the
agent, the value, the keys). Ray is replaced by a function that fails the test if called.
The rules across keys and their decisions are in docs/configuration.md ("Checks across keys").
"""

import itertools
import re
import warnings
from pathlib import Path

import pytest

import marl
import marl.config.checks as checks
import marl.config.registry as registry
from marl.api import build_trainer, prepare
from marl.callbacks import Callback
from marl.cli import main
from marl.config import config_dir, load_config
from marl.env import MarlError
from marl.errors import ConfigWarning
from toy_envs import MatchEnv

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(autouse=True)
def no_ray_four_cpus(monkeypatch):
    """No Ray (the bad input must be caught first), and 4 CPUs for the checks that count them,
    whatever this machine or an earlier test's Ray has."""
    import marl.api as api

    def started(*args, **kwargs):
        raise AssertionError("Ray was started before the bad input was caught")

    monkeypatch.setattr(api, "init_ray", started)
    monkeypatch.setattr(api, "start_ray", started)
    monkeypatch.setattr(checks, "available_cpus", lambda: (4.0, "this machine has"))
    monkeypatch.setattr(api.os, "cpu_count", lambda: 4)
    registry.list_algos()  # the built-in and plug-in algorithms register on first use
    monkeypatch.setattr(registry, "_ALGOS", dict(registry._ALGOS))  # algorithms a case registers go away


def match():
    return MatchEnv(num_envs=2)  # agents agent_0, agent_1; one group 'agent'


def climbing():
    return marl.make_env("matrix", "climbing", num_envs=2)  # team 'team'


def adversary():
    return marl.make_env("mpe", "simple_adversary", num_envs=2)


def spread():
    return marl.make_env("mpe", "simple_spread", num_envs=2)


def fit(make, algo, **kw):
    """A case: given the test's folder, the thunk ``marl.fit(make(), algo, ...)`` for one iteration,
    with its run folders under ``<folder>/runs`` unless the case gives ``log_dir``."""
    return lambda tmp: lambda: marl.fit(make(), algo, stop={"iterations": 1}, **{"log_dir": str(tmp / "runs"), **kw})


def shared(fn, make=match, algo="mappo"):
    return fit(make, algo, share=fn)


# ------------------------------------------------------------------ mapping functions that misbehave
CALLS = itertools.count()


def counting(agent):
    return f"m{next(CALLS)}"  # another module at every call


def order_dependent():
    seen = []

    def first_caller_alone(agent):
        seen.append(agent)
        return "first" if len(seen) == 1 else "rest"

    return first_caller_alone


def rllib_style(agent_id, episode, worker, **kwargs):
    return "shared"


def keyword_only(*, agent):
    return "shared"


def lookup_table(agent):
    return {"agent_0": "a"}[agent]  # forgets agent_1


MAPPING = [
    ("returns None", shared(lambda a: None), ("returned None (NoneType)", "for agent 'agent_0'")),
    ("returns int", shared(lambda a: 3), ("returned 3 (int)", "for agent 'agent_0'")),
    ("returns bool", shared(lambda a: a == "agent_0"), ("returned True (bool)", "agent 'agent_0'")),
    ("returns tuple", shared(lambda a: (a,)), ("returned ('agent_0',) (tuple)",)),
    ("returns bytes", shared(lambda a: b"shared"), ("returned b'shared' (bytes)",)),
    ("returns ''", shared(lambda a: ""), ("returned '' (a string) for agent 'agent_0'",)),
    ("returns a path", shared(lambda a: "../escape"), ("returned '../escape' (a string)", "without '/'")),
    ("returns 'team/a'", shared(lambda a: "team/a"), ("returned 'team/a'",)),
    ("returns '..'", shared(lambda a: ".."), ("returned '..' (a string)", "not '.' or '..'")),
    ("returns a control character", shared(lambda a: "a\tb"), ("returned 'a\\tb' (a string)", "control characters")),
    ("returns '__all_modules__'", shared(lambda a: "__all_modules__"), ("'__all_modules__'", "not starting with '__'")),
    ("raises KeyError", shared(lookup_table), ("raised KeyError: 'agent_1' for agent 'agent_1'",)),
    ("raises ZeroDivisionError", shared(lambda a: 1 / 0), ("raised ZeroDivisionError", "agent 'agent_0'")),
    (
        "not deterministic (counter)",
        shared(counting),
        ("share=counting is not deterministic", "agent 'agent_1' to module 'm"),
    ),
    (
        "not deterministic (call order)",
        lambda tmp: fit(match, "mappo", share=order_dependent())(tmp),  # a fresh function for every run
        ("is not deterministic", "agent 'agent_0' to module 'first', then to 'rest'"),
    ),
    ("two arguments", shared(lambda a, b: "x"), ("has the signature (a, b)", "takes one argument, the agent id")),
    ("no argument", shared(lambda: "x"), ("has the signature ()", "too many positional arguments")),
    ("RLlib's signature", shared(rllib_style), ("(agent_id, episode, worker, **kwargs)", "RLlib's policy_mapping_fn")),
    ("keyword-only argument", shared(keyword_only), ("has the signature (*, agent)",)),
    (
        "different spaces in one module",
        shared(lambda a: "one", make=adversary),
        ("maps agents 'adversary_0' and 'agent_0' to the same module 'one'", "different spaces"),
    ),
    (
        "module id of QMIX's mixer",
        shared(lambda a: "mixer_team", make=climbing, algo="qmix"),
        ("maps agents ['agent_0', 'agent_1'] to module 'mixer_team'", "a name qmix gives its own module"),
    ),
]


# ------------------------------------------------------------------ keys that do not fit together
CROSS_KEYS = [
    (
        "num_minibatches > GRU chunks",
        fit(match, "mappo", recurrent=True, rollout_length=20, chunk_length=10, num_minibatches=9),
        ("num_minibatches=9 is more than the 8 rows", "2 chunk(s) of 10 steps", "2 agent(s) of module 'shared'"),
    ),
    (
        "num_minibatches > whole-rollout chunk",
        fit(match, "mappo", recurrent=True, rollout_length=25, chunk_length=10, num_minibatches=5),
        ("num_minibatches=5 is more than the 4 rows", "1 chunk(s) of 25 steps (rollout_length=25, chunk_length=10)"),
    ),
    (
        "num_minibatches > team-critic env steps",
        fit(spread, "mappo", critic="team", num_minibatches=51),
        ("num_minibatches=51 is more than the 50 rows", "env steps (team critic)"),
    ),
    (
        "num_minibatches > rows per learner",
        fit(match, "mappo", num_learners=2, num_minibatches=51),
        ("num_minibatches=51 is more than the 50 rows", "/ num_learners=2"),
    ),
    (
        "num_minibatches > rows of the smallest module",
        fit(match, "ippo", share="individual", num_minibatches=51),
        ("num_minibatches=51 is more than the 50 rows", "1 agent(s) of module 'agent_0'"),
    ),
    (
        "buffer_size < copies of 2 runners",
        fit(climbing, "qmix", num_env_runners=2, buffer_size=8, batch_size=4, episodes_per_update=4),
        ("buffer_size=8 episodes is too small for 4 env copies writing at once; use buffer_size > 8.",),
    ),
    (
        "batch_size > buffer_size (iql)",
        fit(climbing, "iql", batch_size=64, buffer_size=32),
        ("batch_size=64 episodes can never be in a buffer of buffer_size=32", "training would never start"),
    ),
    (
        "epsilon rises",
        fit(climbing, "qmix", epsilon_start=0.05, epsilon_end=0.5),
        ("epsilon_start=0.05 is below epsilon_end=0.5", "Swap the two values"),
    ),
    (
        "epsilon rises from 0 (vdn)",
        fit(climbing, "vdn", epsilon_start=0.0, epsilon_end=1.0, epsilon_anneal_steps=500),
        ("epsilon_start=0.0 is below epsilon_end=1.0", "epsilon_anneal_steps=500"),
    ),
    (
        "num_learners > CPUs, no GPU",
        fit(match, "mappo", num_learners=5),
        ("num_learners=5 learner processes without a GPU", "more than the 4 CPUs", "num_learners <= 4"),
    ),
    (
        "num_learners > CPUs, no GPU (qmix)",
        fit(climbing, "qmix", num_learners=8, num_gpus_per_learner=0),
        ("num_learners=8", "num_gpus_per_learner=1"),
    ),
]


# ------------------------------------------------------------------ unknown keys: what the user meant
UNKNOWN_KEYS = [
    ("learning_rate (an alias)", fit(match, "mappo", learning_rate=1e-3), ("'learning_rate'", "Did you mean 'lr'?")),
    ("LR (case)", fit(match, "mappo", LR=1e-3), ("Unknown config key 'LR'", "Did you mean 'lr'?")),
    ("numMinibatches (camel case)", fit(match, "mappo", numMinibatches=2), ("Did you mean 'num_minibatches'?",)),
    ("ent_coef (SB3)", fit(match, "ippo", ent_coef=0.0), ("Did you mean 'entropy_coef'?",)),
    ("num_workers (RLlib)", fit(match, "mappo", num_workers=1), ("Did you mean 'num_env_runners'?",)),
    ("epsilon_finish (pymarl)", fit(climbing, "qmix", epsilon_finish=0.1), ("Did you mean 'epsilon_end'?",)),
    (
        "ent_coef on qmix (another family's key)",
        fit(climbing, "qmix", ent_coef=0.0),
        ("marl calls it 'entropy_coef'", "qmix does not use it"),
    ),
]


# ------------------------------------------------------------------ log_dir and callbacks of the wrong type
class Recorder(Callback):
    pass


def with_callbacks(callbacks):
    return fit(match, "mappo", callbacks=callbacks)


def runs_as(wrap):
    """A case whose ``log_dir`` is the test's run folder ``wrap``-ped into the wrong type."""
    return lambda tmp: fit(match, "mappo", log_dir=wrap(str(tmp / "runs")))(tmp)


TYPES = [
    ("log_dir list", runs_as(lambda d: [d]), ("Config key 'log_dir' expects a string, got ['",)),
    ("log_dir dict", runs_as(lambda d: {"path": d}), ("'log_dir' expects a string, got {'path'",)),
    ("log_dir bytes", runs_as(str.encode), ("'log_dir' expects a string, got b'",)),
    ("log_dir True", fit(match, "mappo", log_dir=True), ("'log_dir' expects a string, got True.",)),
    ("log_dir None", fit(match, "mappo", log_dir=None), ("'log_dir' expects a string, got None.",)),
    ("log_dir 3.5", fit(match, "mappo", log_dir=3.5), ("'log_dir' expects a string, got 3.5.",)),
    (
        "callbacks: a class",
        with_callbacks(Recorder),
        ("callbacks takes a list of marl.callbacks.Callback instances, got Recorder (type)", "callbacks=[Recorder()]"),
    ),
    (
        "callbacks: one instance",
        with_callbacks(Recorder()),
        ("got Recorder() (Recorder)", "(one callback: callbacks=[Recorder()])"),
    ),
    (
        "callbacks: [class]",
        with_callbacks([Recorder]),
        ("callbacks[0] is the class Recorder, not an instance: pass Recorder().",),
    ),
    (
        "callbacks: [object()]",
        with_callbacks([Recorder(), object()]),
        ("callbacks[1] is <object object at", "(object), not a marl.callbacks.Callback"),
    ),
    (
        "callbacks: [a function]",
        with_callbacks([print]),
        ("callbacks[0] is <built-in function print> (builtin_function_or_method)",),
    ),
    ("callbacks: a string", with_callbacks("Recorder"), ("got 'Recorder' (str).",)),
    ("callbacks: a dict", with_callbacks({"rec": Recorder()}), ("got {'rec': <", "(dict).")),
    ("callbacks: two of one name", with_callbacks([Recorder(), Recorder()]), ("share the name 'Recorder'",)),
    (
        "build_trainer callbacks: [1]",
        lambda tmp: lambda: build_trainer(match(), "mappo", run_dir=tmp / "runs", callbacks=[1]),
        ("callbacks[0] is 1 (int), not a marl.callbacks.Callback",),
    ),
]


# ------------------------------------------------------------------ YAML files that do not parse
def broken_yaml(text):
    """A case: an algorithm registered with a defaults file (``register_algo(defaults=...)``) that
    starts with ``base: mappo`` and goes on with ``text``; the lines named count from line 2."""

    def make(tmp):
        path = tmp / "my_ppo.yaml"
        path.write_bytes(b"base: mappo\n" + (text if isinstance(text, bytes) else text.encode()))
        marl.config.register_algo(
            "my_ppo", "marl.algos.ppo:PPO", "test", defaults=str(path), schema="marl.algos.ppo_config:PPOConfig"
        )
        return fit(match, "my_ppo")(tmp)

    return make


YAML = [
    (
        "unclosed [",
        broken_yaml("lr: 0.001\nnum_minibatches: [1, 2\nepochs: 3\n"),
        ("my_ppo.yaml is not valid YAML: line 4, column 7", "started at line 3, column 18"),
    ),
    ("tab indent", broken_yaml("lr: 0.001\n\tepochs: 3\n"), ("line 3, column 1", "found character '\\t'")),
    (
        "a: b: c",
        broken_yaml("lr: 0.001\nepochs: gamma: 3\n"),
        ("line 3, column 14", "mapping values are not allowed here"),
    ),
    ("unclosed quote", broken_yaml('activation: "relu\nepochs: 3\n'), ("quoted scalar started at line 2, column 13",)),
    (
        "bad indentation",
        broken_yaml("opponents:\n  self: 1.0\n pool: 0.0\n"),
        ("line 4, column 2", "expected <block end>"),
    ),
    (
        "key given twice",
        broken_yaml("lr: 0.001\nepochs: 3\nlr: 0.01\n"),
        ("line 4, column 1", "key 'lr' is given twice (lines 2 and 4)"),
    ),
    ("not UTF-8", broken_yaml(b"lr: 0.001\n\xff\xfe: 1\n"), ("my_ppo.yaml cannot be read as UTF-8 text",)),
]


# ------------------------------------------------------------------ the tests
def assert_error(thunk, fragments):
    with pytest.raises(MarlError) as e:
        thunk()
    for part in fragments:
        assert part in str(e.value), str(e.value)
    return e.value


CLASSES = {"mapping": MAPPING, "keys": CROSS_KEYS, "unknown key": UNKNOWN_KEYS, "type": TYPES, "yaml": YAML}
CASES = [(f"{cls}: {name}", case, fragments) for cls, table in CLASSES.items() for name, case, fragments in table]


def files(folder: Path):
    return {p.relative_to(folder): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.mark.parametrize("case, fragments", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_bad_input_is_a_marl_error_naming_it_that_writes_nothing(case, fragments, tmp_path):
    """The MarlError names the agent / keys / value / file and line; no run folder is made and the
    user's files (a YAML file of the case) are as they were."""
    thunk = case(tmp_path)
    before = files(tmp_path)
    assert_error(thunk, fragments)
    assert files(tmp_path) == before and not (tmp_path / "runs").exists()


def test_yaml_syntax_error_in_a_configs_file_names_it(tmp_path, monkeypatch):
    """A broken env file of the installed configs: named as configs/envs/<family>.yaml, with the line."""
    import shutil

    import marl.config.loader as loader

    copy = tmp_path / "configs"
    shutil.copytree(config_dir(), copy)
    (copy / "envs" / "mpe.yaml").write_text("all:\n  rollout_length: 25\n mappo: {}\n")
    monkeypatch.setattr(loader, "config_dir", lambda: copy)
    assert_error(
        lambda: load_config("mappo", "mpe"),
        ("Config file configs/envs/mpe.yaml is not valid YAML: line 3, column 2",),
    )


def test_cli_reports_a_rising_epsilon_as_an_error(capsys):
    argv = ["train", "env=matrix:climbing", "algo=iql", "epsilon_start=0", "epsilon_end=1"]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "epsilon_start=0.0 is below epsilon_end=1.0" in err and "Traceback" not in err, err


def test_docs_index_unknown_key_example_is_what_fit_prints():
    """docs/index.md's example, `MarlError: Unknown config key 'learning_rate' ... Did you mean 'lr'? Valid
    keys: ...`, is the start of the message of that very call."""
    text = (REPO / "docs" / "index.md").read_text()
    example = re.search(r"`MarlError: (Unknown config key 'learning_rate'[^`]*?)\.\.\.`", text)
    assert example, "the example left docs/index.md"
    err = assert_error(lambda: marl.fit(match(), "mappo", learning_rate=1e-3), ())  # raised before a run folder
    assert str(err).startswith(example.group(1)), (str(err), example.group(1))
    assert (
        example.group(1) == "Unknown config key 'learning_rate' for algorithm 'mappo'. Did you mean 'lr'? Valid keys: "
    )


# ------------------------------------------------------------------ documented warnings
WARNINGS = [
    (
        "episodes_per_update > buffer_size",
        climbing,
        "qmix",
        {"episodes_per_update": 40, "buffer_size": 20, "batch_size": 20},
        "episodes_per_update=40 is more than buffer_size=20",
    ),
    (
        "batch_size < episodes_per_update",
        climbing,
        "vdn",
        {"batch_size": 4, "episodes_per_update": 8},
        "an episode is replayed 0.5 times on average",
    ),
    (
        "epsilon never anneals",
        climbing,
        "iql",
        {"epsilon_anneal_steps": 0},
        "epsilon_anneal_steps=0 with epsilon_start=1.0 and epsilon_end=0.05: epsilon is 0.05 from the first step",
    ),
    (
        "training waits for slots that running episodes hold",
        climbing,
        "qmix",
        {"buffer_size": 10, "batch_size": 9},
        "it holds at most buffer_size - 2 = 8 finished episodes while they run",
    ),
]


@pytest.mark.parametrize("make, algo, kw, text", [c[1:] for c in WARNINGS], ids=[c[0] for c in WARNINGS])
def test_values_that_run_but_probably_not_as_meant_warn(make, algo, kw, text):
    with pytest.warns(ConfigWarning) as record:
        prepare(make(), algo, kw)
    assert any(text in str(w.message) for w in record), [str(w.message) for w in record]


def test_the_share_of_episodes_never_sampled_is_computed():
    """episodes_per_update=40 over buffer_size=30: at least 1 - 30/40 = 25% are never sampled."""
    with pytest.warns(ConfigWarning) as record:
        load_config("qmix", None, {"episodes_per_update": 40, "buffer_size": 30, "batch_size": 30})
    texts = [str(w.message) for w in record]
    assert any("at least 25% of the episodes leave it" in t for t in texts), texts
    assert any("replayed 0.75 times on average" in t for t in texts), texts  # 30 per 40: the other warning


# ------------------------------------------------------------------ the boundaries are accepted
@pytest.mark.parametrize(
    "make, algo, kw",
    [
        (match, "mappo", {"num_minibatches": 100}),  # 2 copies x 2 agents x 25 steps: exactly the rows
        (match, "mappo", {"recurrent": True, "rollout_length": 20, "chunk_length": 10, "num_minibatches": 8}),
        (match, "mappo", {"num_learners": 4}),  # one learner per CPU
        (match, "mappo", {"num_learners": 8, "num_gpus_per_learner": 1}),  # learners with a GPU
        (climbing, "qmix", {"epsilon_start": 0.3, "epsilon_end": 0.3, "epsilon_anneal_steps": 0}),  # constant
        (climbing, "qmix", {"buffer_size": 10, "batch_size": 8, "episodes_per_update": 8}),  # 8 + 2 copies fit
        (match, "mappo", {"share": lambda a: "even" if a.endswith(("0", "2")) else "odd"}),
        (match, "mappo", {"share": str.upper}),  # a builtin without a signature: called, checked
    ],
)
def test_values_at_the_boundary_pass_without_warning(make, algo, kw):
    with warnings.catch_warnings():
        warnings.simplefilter("error", ConfigWarning)
        cfg, _, _, mapping = prepare(make(), algo, kw)
    assert all(isinstance(m, str) and m and "/" not in m for m in mapping.modules)


def test_shipped_defaults_raise_no_rule():
    """Every built-in algorithm's YAML values (with each env file) pass every rule of scope config."""
    with warnings.catch_warnings():
        warnings.simplefilter("error", ConfigWarning)
        for algo in registry.builtin_algos():
            for family in (None, "mpe", "smax", "vmas", "pettingzoo", "matrix"):
                load_config(algo, family)
