"""Typed configuration: types, ranges, family ownership of keys, YAML inheritance, the algorithm
registry and the generated docs/configuration.md (no Ray started)."""

import dataclasses
import pickle
import subprocess
import sys
import typing
from dataclasses import dataclass
from pathlib import Path

import pytest

from marl.config import (
    ConfigBase,
    EngineConfig,
    algo_chain,
    algo_defaults,
    builtin_algos,
    config_class,
    config_dir,
    field_specs,
    key,
    list_algos,
    load_config,
    read_yaml,
    register_algo,
    restore_config,
)
from marl.config import registry
from marl.errors import MarlError


def mappo(**overrides):
    return load_config("mappo", "mpe", overrides)


# ------------------------------------------------------------------ types
def test_int_keys_take_whole_numbers_and_numbers_are_never_strings():
    assert mappo(epochs=3.0).epochs == 3 and type(mappo(epochs=3.0).epochs) is int
    with pytest.raises(MarlError, match=r"'epochs' expects a whole number, got 3.5"):
        mappo(epochs=3.5)
    assert type(mappo(lr=1).lr) is float
    with pytest.raises(MarlError, match=r"'lr' expects a number, got '1e-3'"):
        mappo(lr="1e-3")
    with pytest.raises(MarlError, match=r"'epochs' expects a number, got True"):
        mappo(epochs=True)


def test_bool_str_null_list_and_dict_keys():
    with pytest.raises(MarlError, match=r"'recurrent' expects true/false, got 1"):
        mappo(recurrent=1)
    with pytest.raises(MarlError, match=r"'critic' expects a string, got 3"):
        mappo(critic=3)
    assert mappo(num_envs=None).num_envs is None  # Optional: null allowed
    assert mappo(init_from=Path("runs/x")).init_from == "runs/x"  # a path is kept as its string
    with pytest.raises(MarlError, match=r"'lr' expects a number, got None"):
        mappo(lr=None)
    cfg = load_config("reinforce", "ipd", {"lora_target": ("c_attn",), "opponents": {"self": 1, "pool": 0.5}})
    assert cfg.lora_target == ["c_attn"] and cfg.opponents == {"self": 1.0, "pool": 0.5}
    with pytest.raises(MarlError, match=r"'lora_target' expects a list of strings or null, got 'c_attn'"):
        load_config("reinforce", "ipd", {"lora_target": "c_attn"})
    with pytest.raises(MarlError, match=r"'opponents' expects a dict of string -> number, got \{'self': 'x'\}"):
        load_config("reinforce", "ipd", {"opponents": {"self": "x"}})


def test_share_takes_a_mode_or_a_callable():
    fn = lambda agent: "all"  # noqa: E731
    assert mappo(share=fn).share is fn and mappo(share="group").share == "group"
    with pytest.raises(MarlError, match=r"Unknown share 'groups'. Did you mean 'group'"):
        mappo(share="groups")
    with pytest.raises(MarlError, match=r"'share' expects a string or a callable, got 3"):
        mappo(share=3)


# ------------------------------------------------------------------ ranges and choices
@pytest.mark.parametrize(
    "algo, key_, bad, valid, range_",
    [
        ("mappo", "gamma", 0.0, 1.0, r"in \(0, 1\]"),
        ("mappo", "gamma", 1.5, 0.5, r"in \(0, 1\]"),
        ("mappo", "lr", 0.0, 1e-4, "> 0"),
        ("mappo", "clip", 0.0, 0.1, "> 0"),
        ("mappo", "max_grad_norm", -1.0, 0.5, "> 0"),
        ("mappo", "hpn_heads", 0, 2, ">= 1"),
        ("mappo", "eval_episodes", -1, 0, ">= 0"),
        ("mappo", "torch_threads", 0, 2, ">= 1"),
        ("qmix", "target_update_interval", 0, 1, ">= 1"),
        ("qmix", "td_lambda", 1.5, 1.0, r"in \[0, 1\]"),
        ("reinforce", "dual_clip", 0.5, 0.0, r"0 \(off\) or > 1"),
        ("reinforce", "adam_beta2", 1.0, 0.99, r"in \[0, 1\)"),
    ],
)
def test_ranges_name_key_value_and_range(algo, key_, bad, valid, range_):
    family = {"mappo": "mpe", "qmix": "mpe", "reinforce": "ipd"}[algo]
    with pytest.raises(MarlError, match=rf"'{key_}' must be {range_}, got {bad!r}"):
        load_config(algo, family, {key_: bad})
    assert load_config(algo, family, {key_: valid})[key_] == valid


def test_choices_and_a_clip_of_zero_for_llm_only():
    with pytest.raises(MarlError, match=r"Unknown critic 'foo'. Valid choices: auto, obs, state, team"):
        mappo(critic="foo")
    with pytest.raises(MarlError, match=r"Unknown hypernet_layers '3'. Valid choices: 1, 2"):
        load_config("qmix", "mpe", {"hypernet_layers": 3})
    assert load_config("reinforce", "ipd", {"clip": 0.0}).clip == 0.0  # plain REINFORCE surrogate


def test_bad_yaml_value_names_its_file():
    cls = config_class("mappo")
    from marl.config.loader import algo_sources, build, layer_sources

    sources = layer_sources(cls) + algo_sources("mappo") + [("configs/envs/x.yaml (section 'mappo')", {"gamma": 2})]
    with pytest.raises(MarlError, match=r"'gamma' must be in \(0, 1\], got 2. \(from configs/envs/x.yaml"):
        build(cls, "mappo", sources)
    with pytest.raises(MarlError, match=r"configs/envs/x.yaml \(section 'mappo'\): Unknown config key 'gama'"):
        build(cls, "mappo", sources[:-1] + [("configs/envs/x.yaml (section 'mappo')", {"gama": 0.9})])


# ------------------------------------------------------------------ family ownership
ANY = r"[\w, ]*"  # a family's list grows with every algorithm of that family: a case names some members


def members(*algos: str) -> str:
    """A regex of a family's sorted algorithm list holding ``algos`` (sorted, not necessarily adjacent)."""
    return r"\(" + ANY + ANY.join(rf"\b{a}\b" for a in algos) + ANY + r"\)"


@pytest.mark.parametrize(
    "algo, family, key_, owner",
    [
        (
            "mappo",
            "mpe",
            "mixer",
            rf"'mixer' is a factored critic key {members('facmac')} and a value decomposition key "
            rf"{members('iql', 'qmix', 'vdn')} and a VD actor-critic key {members('vda2c', 'vdppo')}; mappo does not use it",
        ),
        ("reinforce", "ipd", "hpn_heads", rf"'hpn_heads' is an agent network key {members('ippo', 'mappo', 'qmix')}"),
        (
            "qmix",
            "mpe",
            "lora_r",
            r"'lora_r' is an LLM self-play key \(advantage_alignment, grpo, mars, reinforce, spiral\)",
        ),
        (
            "reinforce",
            "ipd",
            "hidden",
            rf"'hidden' is an on-policy key {members('coma', 'ia2c', 'mappo')} and an off-policy actor-critic "
            rf"key {members('iddpg', 'maddpg', 'matd3')} and a value decomposition key {members('iql', 'qmix')}",
        ),
        (
            "iql",
            "mpe",
            "critic",
            rf"'critic' is an actor-critic key {members('happo', 'ippo', 'mappo')} and an off-policy actor-critic "
            rf"key {members('iddpg', 'maddpg')} and a VD actor-critic key {members('vda2c', 'vdppo')}; iql does not use it",
        ),
    ],
)
def test_a_key_of_another_family_names_that_family(algo, family, key_, owner):
    with pytest.raises(MarlError, match=rf"Unknown config key '{key_}' for algorithm '{algo}'. {owner}"):
        load_config(algo, family, {key_: 1})


def test_internal_key_is_not_settable():
    with pytest.raises(MarlError, match="'algo' is set by marl"):
        mappo(algo="qmix")


def test_llm_family_has_no_agent_network_keys_and_tensor_families_no_llm_keys():
    llm = set(algo_defaults("reinforce"))
    assert not llm & {"agent", "hpn_heads", "init_from", "hidden", "critic", "mixer"}
    for algo in ("mappo", "qmix"):
        assert not set(algo_defaults(algo)) & {"model", "lora", "estimator", "max_new_tokens"}
        assert "opponents" in algo_defaults(algo)  # an engine key: self-play co-players of competitive envs
    assert not set(algo_defaults("mappo")) & {"mixer", "legem_beta", "buffer_size"}


# ------------------------------------------------------------------ YAML inheritance
def test_base_chains_and_ippo_is_mappo_with_an_independent_critic():
    assert algo_chain("ippo") == ["mappo", "ippo"] and algo_chain("iql") == ["qmix", "iql"]
    assert algo_chain("mars") == ["reinforce", "mars"] and algo_chain("mappo") == ["mappo"]
    assert read_yaml(config_dir() / "algos" / "ippo.yaml") == {"base": "mappo", "critic": "obs"}
    a, b = algo_defaults("mappo").to_dict(), algo_defaults("ippo").to_dict()
    assert {k for k in a if a[k] != b[k]} == {"algo", "critic"}


def test_env_sections_apply_along_the_base_chain():
    assert load_config("ippo", "vmas").epochs == 3 and load_config("ippo", "smax").rollout_length == 50
    assert load_config("iql", "mpe").standardise_rewards and load_config("vdn", "smax").buffer_size == 3000
    assert load_config("qmix", "vmas").rollout_length == 25  # section all


def test_base_cycle_and_missing_values_are_errors(tmp_path, monkeypatch):
    monkeypatch.setattr(registry, "_ALGOS", dict(registry._ALGOS))
    (tmp_path / "a.yaml").write_text("base: cyc_b\n")
    (tmp_path / "b.yaml").write_text("base: cyc_a\n")
    register_algo("cyc_a", "marl.algos.ppo:PPO", defaults=tmp_path / "a.yaml")
    register_algo("cyc_b", "marl.algos.ppo:PPO", defaults=tmp_path / "b.yaml")
    with pytest.raises(MarlError, match="'base: cyc_a' makes a cycle"):
        algo_chain("cyc_a")
    (tmp_path / "c.yaml").write_text("critic: state\n")
    register_algo("sparse", "marl.algos.ppo:PPO", defaults=tmp_path / "c.yaml")
    with pytest.raises(MarlError, match=r"No value for config key\(s\) gamma, .*gae_lambda.* of algorithm 'sparse'"):
        algo_defaults("sparse")


def test_every_key_gets_a_value_from_the_yaml_for_every_algorithm_and_env_file():
    for algo in builtin_algos():
        cfg = algo_defaults(algo)  # raises if a key has no value or a YAML key is unknown
        assert set(cfg) == {s.name for s in field_specs(type(cfg))}
        for path in sorted((config_dir() / "envs").glob("*.yaml")):
            load_config(algo, path.stem)


# ------------------------------------------------------------------ schema hygiene
UNBOUNDED = {"log_std_init", "target_entropy"}  # any real number is valid
FREE_TEXT = {"log_dir", "init_from", "chat_template"}  # paths, a Jinja template
# "auto" or a number: choices would refuse the numbers, so a rule of the schema refuses any other word
# (the SAC family's target_entropy_is_auto_or_number; tests/test_bad_inputs_sac.py)
WORD_OR_NUMBER = {"target_entropy"}


def test_every_key_has_a_one_line_doc_and_a_range_or_choices():
    for algo in builtin_algos():
        for s in field_specs(config_class(algo)):
            assert s.doc and "\n" not in s.doc, s.name
            union = typing.get_origin(s.type) is typing.Union
            types = set(typing.get_args(s.type)) if union else {s.type}  # the scalar types (Optional[int]: int)
            if types & {int, float} and s.name not in UNBOUNDED:
                assert s.range_text(), f"{s.name} has no range"
            if types & {str} and s.name not in FREE_TEXT | WORD_OR_NUMBER and not s.internal:
                assert s.choices, f"{s.name} has no choices"


def test_config_is_frozen_mapping_picklable_and_replace_checks():
    cfg = mappo()
    assert cfg["lr"] == cfg.lr == 7e-4 and dict(cfg)["critic"] == {**cfg}["critic"] == "auto"
    assert "lr" in cfg and "mixer" not in cfg and cfg.get("mixer") is None and cfg["algo"] == "mappo"
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.lr = 1.0
    with pytest.raises(KeyError):
        cfg["mixer"]
    assert cfg.replace(lr=0.1).lr == 0.1 and dataclasses.replace(cfg, epochs=2.0).epochs == 2 and cfg.lr == 7e-4
    with pytest.raises(MarlError, match=r"'gamma' must be in \(0, 1\]"):
        cfg.replace(gamma=2)
    assert pickle.loads(pickle.dumps(cfg)) == cfg


def test_a_saved_config_is_restored_typed_with_new_keys_from_yaml_and_old_keys_dropped():
    """A checkpoint's meta["config"] (a plain dict) of an older version: values the schema
    accepts are kept, keys added since and values saved as text take the YAML values."""
    saved = {
        **mappo(lr=1e-3, epochs=4, critic="state").to_dict(),
        "share": "<function <lambda> at 0x7f>",
        "retired_key": 1,
    }
    del saved["huber_delta"]
    cfg = restore_config("mappo", saved)
    assert type(cfg).__name__ == "PPOConfig" and cfg.lr == 1e-3 and cfg.epochs == 4 and cfg.critic == "state"
    assert cfg.huber_delta == algo_defaults("mappo").huber_delta and cfg.share == algo_defaults("mappo").share
    assert not hasattr(cfg, "retired_key")


# ------------------------------------------------------------------ registry
@dataclass(frozen=True, kw_only=True)
class ToyConfig(EngineConfig):
    """A plugin's schema."""

    LAYER = "toy"
    speed: float = key("how fast", gt=0)
    critic: str = key("a choice PPO's critic key does not offer", choices=("twin",))


class ToyTrainer:
    config_class = ToyConfig


def test_a_plugin_algorithm_brings_its_schema_and_owns_its_keys(tmp_path, monkeypatch):
    monkeypatch.setattr(registry, "_ALGOS", dict(registry._ALGOS))
    (tmp_path / "toy.yaml").write_text("speed: 1.5\nlr: 0.01\ncritic: twin\n")
    register_algo("toy", f"{__name__}:ToyTrainer", "a toy", defaults=tmp_path / "toy.yaml")
    assert list_algos()["toy"] == "a toy" and config_class("toy") is ToyConfig
    cfg = load_config("toy", None, {"speed": 2})
    assert isinstance(cfg, ConfigBase) and cfg.speed == 2.0 and cfg.lr == 0.01 and cfg.rollout_length == 25
    with pytest.raises(MarlError, match=r"'speed' is a toy key \(toy\); mappo does not use it"):
        mappo(speed=1.0)
    with pytest.raises(MarlError, match=r"'twin' is a toy choice of 'critic' \(toy\); mappo does not offer it"):
        mappo(critic="twin")  # a choice of another family's key of the same name
    with pytest.raises(MarlError, match="'module:Class' string"):
        register_algo("bad", "marl.algos.ppo.PPO")
    register_algo("noschema", f"{__name__}:NoSchema")
    with pytest.raises(MarlError, match="config_class must be a marl.config.ConfigBase"):
        config_class("noschema")


class NoSchema:
    pass


def test_listing_algorithms_imports_neither_ray_nor_algorithm_modules():
    code = (
        "import sys; from marl.config import list_algos; names = list_algos(); "
        "assert {'mappo', 'ippo', 'qmix', 'vdn', 'iql', 'mars'} <= set(names), names; "
        "bad = [m for m in ('ray', 'marl.algos.ppo', 'marl.algos.value_decomp', 'marl.algos.llm.selfplay') "
        "if m in sys.modules]; assert not bad, bad"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


def test_unknown_algorithm():
    with pytest.raises(MarlError, match="Unknown algorithm 'qmx'. Did you mean 'qmix'"):
        load_config("qmx", "mpe")


# ------------------------------------------------------------------ generated docs
def test_docs_configuration_md_is_generated_from_the_schemas():
    from marl.config.docs import DEFAULT_PATH, render

    text = render()
    assert "| `mixer` | str | none, vdn, qmix |" in text and "## LLM self-play keys" in text
    assert Path(DEFAULT_PATH).read_text() == text, "docs/configuration.md is stale: run python -m marl.config.docs"
