"""marl's env layer (docs/envs.md): the batched multi-agent contract, entity layouts, the registries, check_env.

Modules, each importing only those before it (and :mod:`marl.errors`, :mod:`marl.plugins`):

* :mod:`marl.env.obs`: the structured-observation helpers (:func:`obs_leaves`, :func:`map_obs`, ...);
* :mod:`marl.env.contract`: :class:`EnvInfo`, :class:`GroupInfo`, :class:`Step`,
  :class:`MultiAgentEnv` (with the ``step`` / ``step_env`` template),
  the action checks, :class:`EpisodeStats`;
* :mod:`marl.env.wrapper`: :class:`Wrapper`, the base of env wrappers;
* :mod:`marl.env.layout`: :func:`check_entity_layout`;
* :mod:`marl.env.registry`: :func:`make_env`, :func:`register_env`,
  :func:`register_wrapper`, :class:`EnvSpec`;
* :mod:`marl.env.check`: :func:`check_env`.

Nothing here imports the training code, a concrete env or a wrapper. The names are
imported from their modules on first use (PEP 562): the registries (``list_envs``,
``register_env``) import no torch, the contract and ``make_env``'s envs do.
"""

from typing import Any, List

# public name -> the module that defines it
_LAZY = {
    **dict.fromkeys(
        [
            "KINDS",
            "EnvInfo",
            "EpisodeStats",
            "ExtraColumn",
            "GroupInfo",
            "MultiAgentEnv",
            "Observation",
            "Step",
            "check_actions",
            "check_continuous_actions",
            "check_discrete_actions",
            "fit_env",
            "set_fit_entry",
            "spaces_equal",
        ],
        "marl.env.contract",
    ),
    **dict.fromkeys(
        [
            "OBS_KEY",
            "is_structured",
            "obs_leaves",
            "obs_dtype",
            "obs_dtypes",
            "map_obs",
            "flatten_columns",
            "nest_columns",
        ],
        "marl.env.obs",
    ),
    "Wrapper": "marl.env.wrapper",
    "check_entity_layout": "marl.env.layout",
    **dict.fromkeys(
        ["EnvSpec", "list_envs", "list_wrappers", "make_env", "register_env", "register_wrapper", "scenarios_of"],
        "marl.env.registry",
    ),
    **dict.fromkeys(["check_env", "check_step"], "marl.env.check"),
    **dict.fromkeys(["MarlError", "closest", "unknown_choice"], "marl.errors"),
}

__all__ = list(_LAZY)


def __getattr__(name: str) -> Any:
    import importlib

    if name not in _LAZY:
        raise AttributeError(f"module 'marl.env' has no attribute {name!r}")
    value = getattr(importlib.import_module(_LAZY[name]), name)
    globals()[name] = value
    return value


def __dir__() -> List[str]:
    return sorted(set(globals()) | set(__all__))
