"""Typed configuration: schemas, YAML defaults + overrides, the algorithm registry.

* :mod:`marl.config.schema`: :class:`ConfigBase` (a frozen dataclass that is also a
  read-only mapping), :func:`key` (declares a key: type, one-line doc, range or
  choices) and the type/range rules;
* :mod:`marl.config.engine`: :class:`EngineConfig`, the keys every algorithm has;
  the families' schemas live with the families (``marl.algos``);
* :mod:`marl.config.registry`: :func:`register_algo`, :func:`list_algos`;
* :mod:`marl.config.loader`: :func:`load_config` (engine, algorithm, env and user layers);
* :mod:`marl.config.parse`: ``key=value`` parsing and ``stop`` criteria;
* :mod:`marl.config.docs`: writes ``docs/configuration.md`` from the schemas
  (``python -m marl.config.docs``).
"""

from marl.config.engine import LR_SCHEDULES, EngineConfig
from marl.config.loader import (
    META_KEYS,
    algo_chain,
    algo_defaults,
    build,
    config_dir,
    env_overrides,
    load_config,
    read_yaml,
    restore_config,
)
from marl.config.parse import STOP_KEYS, parse_cli_overrides, parse_value, validate_stop
from marl.config.registry import (
    AlgoEntry,
    algo_entry,
    builtin_algos,
    config_class,
    list_algos,
    register_algo,
    resolve_algo,
    trainer_class,
)
from marl.config.schema import ConfigBase, ConfigValueError, FieldSpec, config_view, field_specs, key, spec_map

__all__ = [
    "AlgoEntry",
    "ConfigBase",
    "ConfigValueError",
    "EngineConfig",
    "FieldSpec",
    "LR_SCHEDULES",
    "META_KEYS",
    "STOP_KEYS",
    "algo_chain",
    "algo_defaults",
    "algo_entry",
    "build",
    "builtin_algos",
    "config_class",
    "config_dir",
    "config_view",
    "env_overrides",
    "field_specs",
    "key",
    "list_algos",
    "load_config",
    "parse_cli_overrides",
    "parse_value",
    "read_yaml",
    "register_algo",
    "resolve_algo",
    "restore_config",
    "spec_map",
    "trainer_class",
    "validate_stop",
]
