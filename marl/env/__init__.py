"""marl's env layer (docs/envs.md): the batched multi-agent contract, entity layouts, the registries, check_env.

Modules, each importing only those before it (and :mod:`marl.errors`, :mod:`marl.plugins`):

* :mod:`marl.env.contract`: :class:`EnvInfo`, :class:`GroupInfo`, :class:`Step`,
  :class:`MultiAgentEnv` (with the ``step`` / ``step_env`` template),
  the action checks, :class:`EpisodeStats`;
* :mod:`marl.env.wrapper`: :class:`Wrapper`, the base of env wrappers;
* :mod:`marl.env.layout`: :func:`check_entity_layout`;
* :mod:`marl.env.registry`: :func:`make_env`, :func:`register_env`,
  :func:`register_wrapper`, :class:`EnvSpec`;
* :mod:`marl.env.check`: :func:`check_env`.

Nothing here imports the training code, a concrete env or a wrapper.
"""
from marl.env.contract import (
    KINDS,
    EnvInfo,
    EpisodeStats,
    ExtraColumn,
    GroupInfo,
    MultiAgentEnv,
    Observation,
    Step,
    check_actions,
    check_continuous_actions,
    check_discrete_actions,
    fit_env,
    set_fit_entry,
    spaces_equal,
)
from marl.env.wrapper import Wrapper
from marl.env.layout import check_entity_layout
from marl.env.registry import EnvSpec, list_envs, list_wrappers, make_env, register_env, register_wrapper, scenarios_of
from marl.env.check import check_env, check_step
from marl.errors import MarlError, closest, unknown_choice

__all__ = [
    "KINDS", "EnvInfo", "EpisodeStats", "ExtraColumn", "GroupInfo", "MultiAgentEnv", "Observation", "Step",
    "Wrapper", "check_actions", "check_continuous_actions", "check_discrete_actions", "fit_env", "set_fit_entry",
    "spaces_equal", "check_entity_layout", "EnvSpec", "list_envs", "list_wrappers", "make_env", "register_env",
    "register_wrapper", "scenarios_of", "check_env", "check_step", "MarlError", "closest", "unknown_choice",
]
