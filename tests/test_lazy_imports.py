"""What the light paths import: loading and checking a config, ``marl list`` and ``marl train --help``
import neither torch nor Ray (each algorithm names its schema in a module without them), and the
one ``"module:attribute"`` loader behind the registries."""

import subprocess
import sys
import textwrap

import pytest

from marl.config import (
    ConfigValueError,
    algo_defaults,
    config_class,
    config_dir,
    list_algos,
    load_config,
    register_algo,
)
from marl.errors import MarlError
from marl.plugins import load_target

HEAVY = ("torch", "ray", "ray.rllib")
# every built-in algorithm, with an env family it trains on and an override of a key of its own family
ALGOS = {
    "mappo": ("mpe", {"critic": "state", "agent": "hpn"}),
    "ippo": ("vmas", {"gae_lambda": 0.9}),
    "qmix": ("smax", {"mixing_embed": 16, "agent": "asn"}),
    "vdn": ("smax", {"td_lambda": 0.6}),
    "iql": ("matrix", {"epsilon_end": 0.1}),
    "reinforce": ("ipd", {"model": "/models/x", "lora": True}),
    "mars": ("openspiel", {"role_norm": False}),
    "advantage_alignment": ("ipd", {"beta": 2.0}),
    "advantage_alignment_tensor": ("iterated_matrix", {"aa_gamma": 0.9}),
    "grpo": ("stag_hunt", {"group_size": 4}),
    "spiral": ("textarena", {"rae_decay": 0.9}),
    "happo": ("mamujoco", {"fixed_order": True}),
    "hatrpo": ("mpe", {"kl_threshold": 0.02, "fixed_order": True}),
    "matrpo": ("mpe", {"kl_threshold": 0.02}),
    "itrpo": ("smax", {"cg_iters": 5}),
    "maa2c": ("mpe", {"nstep": 3, "critic": "team", "recurrent": False}),
    "ia2c": ("smax", {"target_tau": 1.0}),
    "vda2c": ("mpe", {"mixer": "vdn"}),
    "vdppo": ("smax", {"actor_loss": "a2c", "critic": "state"}),
    "coma": ("matrix", {"td_lambda": 0.5}),
    "maddpg": ("mpe", {"critic": "state", "tau": 0.01}),
    "iddpg": ("vmas", {"exploration_noise_end": 0.05}),
    "matd3": ("mpe", {"policy_delay": 3, "target_noise": 0.1}),
    "facmac": ("vmas", {"mixer": "qmix_nonmonotonic", "actor_reg": 0.0}),
    "masac": ("mpe", {"target_entropy": -1.5, "alpha_init": 0.5}),
    "isac": ("vmas", {"target_entropy": "auto", "fixed_alpha": True}),
}
# (an override outside its range, the key named by the error) per algorithm family
BAD = {
    "mappo": ("clip", -0.1),
    "qmix": ("hypernet_layers", 3),
    "reinforce": ("dtype", "float8"),
    "coma": ("td_lambda", 1.5),
    "maddpg": ("policy_delay", 0),
    "masac": ("alpha_init", 0.0),
}


def _run(code: str, forbidden=HEAVY) -> str:
    """Run ``code`` in a fresh interpreter, then fail if it imported any module of ``forbidden``."""
    code = textwrap.dedent(code) + (
        f"\nimport sys\nheavy = [m for m in {tuple(forbidden)!r} if m in sys.modules]\n"
        "assert not heavy, f'imported {heavy}'\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr + r.stdout
    return r.stdout


def test_every_builtin_algorithm_is_covered():
    assert set(ALGOS) == set(list_algos())


def test_loading_and_checking_every_algorithms_config_imports_neither_torch_nor_ray():
    out = _run(f"""
        from marl.config import ConfigBase, ConfigValueError, load_config, restore_config
        for algo, (family, overrides) in {ALGOS!r}.items():
            cfg = load_config(algo, family, overrides)
            assert isinstance(cfg, ConfigBase) and cfg.algo == algo, cfg
            assert all(getattr(cfg, k) == v for k, v in overrides.items()), (algo, overrides)
            assert restore_config(algo, cfg.to_dict()) == cfg, algo
        for algo, (name, value) in {BAD!r}.items():
            try:
                load_config(algo, None, {{name: value}})
            except ConfigValueError as e:
                assert e.key == name and e.value == value, e
            else:
                raise AssertionError(f"{{algo}}: {{name}}={{value!r}} was accepted")
        print("checked")
    """)
    assert "checked" in out


@pytest.mark.parametrize(
    "args, words",
    [
        (["list"], ["mpe", "vmas", "smax", "mappo", "qmix", "mars", "marl list <family>"]),
        (["train", "--help"], ["usage: marl train", "algo=<name>", "mappo", "spiral"]),
        (
            ["train", "algo=qmix", "env=smax", "lr=0.001", "--help"],
            ["Keys of qmix on smax", "lr=0.001", "mixer=qmix", "agent=mlp", "(str, none, vdn, qmix)"],
        ),
        (["train", "algo=mars", "-h"], ["Keys of mars", "estimator=mars", "max_new_tokens="]),
    ],
)
def test_cli_list_and_train_help_import_neither_torch_nor_ray(args, words):
    out = _run(f"""
        from marl.cli import main
        assert main({args!r}) == 0
    """)
    missing = [w for w in words if w not in out]
    assert not missing, (missing, out)


def test_train_help_checks_the_config(capsys):
    from marl.cli import main

    assert main(["train", "algo=mappo", "mixer=qmix", "--help"]) == 2
    assert "'mixer' is a factored critic key (facmac) and a value decomposition key" in capsys.readouterr().err
    assert main(["train", "algo=mappo", "env=mep", "--help"]) == 2
    assert "Did you mean 'mpe'" in capsys.readouterr().err


def test_list_names_a_family_scenarios(capsys):
    from marl.cli import main

    assert main(["list", "mpe"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("mpe: ") and "simple_spread" in out and "vmas" not in out
    assert main(["list", "mep"]) == 2
    assert "Did you mean 'mpe'" in capsys.readouterr().err


def test_the_schema_choices_are_the_networks():
    """The choices spelled in the torch-free schema modules are what the network modules build."""
    from marl.algos.networks import asn, config, mlp, registry

    assert set(config.ACTIVATIONS) == set(mlp.ACTIVATIONS)
    assert asn.ENV_INPUTS is config.ENV_INPUTS and asn.ENTITY_MODULES is config.ENTITY_MODULES
    builtin = list(dict.fromkeys(n for f in registry.FAMILIES for n in registry.agent_networks(f)))
    assert builtin[: len(config.BUILTIN_AGENTS)] == list(config.BUILTIN_AGENTS)


def test_a_registered_network_is_a_valid_agent(monkeypatch):
    from marl.algos.networks import registry

    monkeypatch.setattr(registry, "_NETWORKS", dict(registry._NETWORKS))  # the registration ends with the test
    with pytest.raises(ConfigValueError, match="agent"):
        load_config("qmix", None, {"agent": "probe_net"})
    registry.register_agent_network("probe_net", lambda c, n: None)
    assert load_config("qmix", None, {"agent": "probe_net"}).agent == "probe_net"


def test_schema_is_read_without_the_trainer_and_must_match_it(monkeypatch):
    from marl.config import registry

    monkeypatch.setattr(registry, "_ALGOS", dict(registry._ALGOS))
    register_algo(
        "mixed_up",
        "marl.algos.ppo:PPO",
        schema="marl.algos.value_decomp_config:ValueDecompConfig",
        defaults=registry.defaults_path("qmix", config_dir()),
    )
    from marl.algos.value_decomp_config import ValueDecompConfig

    assert config_class("mixed_up") is ValueDecompConfig
    with pytest.raises(MarlError, match=r"PPO.config_class is .*PPOConfig.*schema='marl.algos.value_decomp_config"):
        registry.trainer_class("mixed_up")
    with pytest.raises(MarlError, match="schema must be a 'module:Class' string"):
        register_algo("bad", "marl.algos.ppo:PPO", schema="marl.algos.ppo_config.PPOConfig")
    register_algo("not_a_schema", "marl.algos.ppo:PPO", schema="marl.algos.ppo_config:CRITICS")
    with pytest.raises(MarlError, match=r"schema 'marl.algos.ppo_config:CRITICS' must be a marl.config.ConfigBase"):
        algo_defaults("not_a_schema")


def test_load_target_names_the_string_module_and_attribute(tmp_path, monkeypatch):
    from marl.algos.ppo_config import PPOConfig

    assert load_target("marl.algos.ppo_config:PPOConfig") is PPOConfig
    with pytest.raises(MarlError, match=r"Expected a 'module:attribute' string, got 'marl.algos.ppo_config.PPOConfig'"):
        load_target("marl.algos.ppo_config.PPOConfig")
    with pytest.raises(MarlError, match=r"Cannot load 'marl.algos.nope:X': there is no module 'marl.algos.nope'"):
        load_target("marl.algos.nope:X")
    with pytest.raises(
        MarlError,
        match=r"Cannot load 'marl.algos.ppo_config:PPOConfg': module "
        r"'marl.algos.ppo_config' has no attribute 'PPOConfg'",
    ):
        load_target("marl.algos.ppo_config:PPOConfg")
    # a module that exists but needs a package that is not installed: the ImportError of that package
    (tmp_path / "needs_extra.py").write_text("import surely_not_installed_pkg\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(ModuleNotFoundError, match="surely_not_installed_pkg"):
        load_target("needs_extra:thing")


def test_env_fit_imports_the_training_entry_by_name():
    """``import marl`` no longer imports marl.api; ``env.fit`` reaches marl.fit anyway."""
    _run(
        """
        import marl.env.contract as c
        assert c._fit_entry is None
        try:
            c.fit_env(object(), "mappo")  # marl.fit's own check answers, not 'No training entry'
        except Exception as e:
            assert "fit() needs an env from marl.make_env" in str(e), e
        import marl.api
        assert c._fit_entry is marl.api.fit
    """,
        forbidden=(),
    )  # fit itself imports torch and RLlib (the text-game contract)
