"""Env families and env wrappers by name: ``make_env`` and the registries behind it (docs/envs.md).

marl core never imports a concrete env or wrapper. Packages register them
with ``"module:callable"`` strings (imported when first used): env families
with :func:`register_env`, wrappers with :func:`register_wrapper`. The
packages themselves are found through the ``marl.plugins`` entry points
(:func:`marl.plugins.load_plugins`); marl's own ``marl.envs`` registers the
built-in families and the ``offbeat`` and ``crash`` wrappers.
"""

from __future__ import annotations

import copy
import numbers
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Tuple

from marl.errors import MarlError, unknown_choice
from marl.plugins import load_plugins, load_target

if TYPE_CHECKING:  # the contract imports torch: the registries here are used without it (marl list)
    from marl.env.contract import MultiAgentEnv


@dataclass
class EnvSpec:
    """How to rebuild an env in another process (remote env runners, checkpoints).

    ``kwargs`` are the keyword arguments of :func:`make_env`, including those
    of the registered wrappers (``crash=``, ``offbeat=``) and ``entity_layout``.
    """

    family: str
    scenario: Optional[str]
    kwargs: Dict[str, Any]

    def make(self, **overrides: Any) -> MultiAgentEnv:
        """``make_env(family, scenario, **kwargs)`` with ``overrides`` replacing kwargs (e.g. ``num_envs``)."""
        kw = {**self.kwargs, **overrides}
        return make_env(self.family, self.scenario, **kw)

    def make_eval(self, eval_kwargs: Optional[Dict[str, Any]] = None, **overrides: Any) -> MultiAgentEnv:
        """An evaluation copy of the env: :meth:`make` with ``overrides`` and then the env's declared
        :attr:`~marl.env.contract.MultiAgentEnv.eval_kwargs` on top (e.g. Overcooked's shaped reward
        switched off). ``eval_kwargs``: those kwargs when already read from a built copy; ``None``
        builds one copy to read them and rebuilds only when they are non-empty (else that copy is it)."""
        if eval_kwargs is None:
            env = self.make(**overrides)
            eval_kwargs = dict(env.eval_kwargs)
            if not eval_kwargs:
                return env
            env.close()
        return self.make(**{**overrides, **eval_kwargs})


@dataclass
class _Family:
    factory: str  # "module:callable", imported lazily so marl core never imports an env family
    description: str
    scenarios: Optional[str] = None  # "module:callable" returning the scenario names
    from_object: Optional[str] = None  # "module:callable": object -> env, or None to decline


@dataclass
class _Wrapper:
    factory: str  # "module:callable" taking (env, options, seed=...) and returning the wrapped env
    description: str
    order: int


_FAMILIES: Dict[str, _Family] = {}
_WRAPPERS: Dict[str, _Wrapper] = {}


def register_env(
    family: str,
    factory: str,
    description: str = "",
    scenarios: Optional[str] = None,
    from_object: Optional[str] = None,
) -> None:
    """Register an env family.

    Args:
        family: the name users pass to :func:`make_env`.
        factory: ``"module:callable"``; the callable takes ``(scenario, **kwargs)``
            and returns a :class:`MultiAgentEnv`.
        description: one line shown by ``marl list``.
        scenarios: optional ``"module:callable"`` returning the list of scenario names.
        from_object: optional ``"module:callable"`` taking ``(obj, **kwargs)``: the
            env built from an object passed to :func:`make_env` instead of a name
            (an env instance, a constructor, a module), or ``None`` when it does
            not recognise ``obj`` (then the next family that registered one is asked).
    """
    _FAMILIES[family] = _Family(factory, description, scenarios, from_object)


def register_wrapper(name: str, factory: str, description: str = "", order: int = 0) -> None:
    """Register an env wrapper, applied by ``make_env(..., name=options)``.

    Args:
        name: the :func:`make_env` keyword that applies it (``"crash"``, ``"offbeat"``).
        factory: ``"module:callable"``; the callable takes ``(env, options, seed=None)``
            (``seed``: the ``seed`` given to :func:`make_env`) and returns the wrapped env.
        description: one line shown by :func:`list_wrappers`.
        order: where the wrapper sits in the stack: :func:`make_env` applies the
            requested wrappers by increasing ``order`` (the smallest is innermost).
            Built-in: ``offbeat`` 10 (inside), ``crash`` 20 (outside).
    """
    _WRAPPERS[name] = _Wrapper(factory, description, int(order))


def _builtin_families() -> Dict[str, _Family]:
    load_plugins()  # the installed env packages register their families and wrappers (marl.plugins)
    return _FAMILIES


def _wrapper_order() -> List[Tuple[str, _Wrapper]]:
    load_plugins()
    return sorted(_WRAPPERS.items(), key=lambda kv: kv[1].order)


def list_envs(with_scenarios: bool = False, families: Optional[List[str]] = None) -> Dict[str, Any]:
    """Registered env families -> description, or with ``with_scenarios`` their scenario names
    (which imports each family's module: the descriptions alone import none).

    Args:
        families: only these registered families (default: all).
    """
    fams = _builtin_families()
    if families is not None:
        fams = {k: fams[k] for k in families}
    if not with_scenarios:
        return {k: f.description for k, f in fams.items()}
    out = {}
    for k, f in fams.items():
        try:
            out[k] = list(load_target(f.scenarios)()) if f.scenarios else []
        except ImportError as e:  # an optional extra that is not installed
            out[k] = [f"<unavailable: {e}>"]
    return out


def list_wrappers() -> Dict[str, str]:
    """Registered wrappers -> description, in the order :func:`make_env` applies them (innermost first)."""
    return {k: w.description for k, w in _wrapper_order()}


def scenarios_of(family: str) -> List[str]:
    fams = _builtin_families()
    f = fams[family]
    return list(load_target(f.scenarios)()) if f.scenarios else []


def make_env(name: Any, scenario: Optional[str] = None, **kwargs: Any) -> MultiAgentEnv:
    """Build a batched :class:`MultiAgentEnv`.

    Args:
        name: a family name (``"mpe"``, ``"vmas"``, ``"pettingzoo"``, see
            :func:`list_envs`), ``"family:scenario"``, or an object a
            registered family builds from (for ``"pettingzoo"``: a PettingZoo
            env instance, a constructor returning one, or a module).
        scenario: scenario name inside the family (e.g. ``"simple_spread"``);
            for ``"pettingzoo"`` a dotted path such as ``"mpe2.simple_tag_v3"``.
            With an object, the name recorded in ``info.scenario``.
        **kwargs: ``num_envs`` (batch size ``B``), ``seed``, ``entity_layout``,
            one keyword per registered wrapper, and family-specific options
            (e.g. ``N=3``, ``continuous_actions=True``).
            ``entity_layout`` (any family): group name -> layout (format:
            :class:`~marl.env.contract.EnvInfo`), checked by
            :func:`~marl.env.layout.check_entity_layout` against the built env
            and set as ``env.info.entity_layout``, replacing the env's own
            layout; ``env.spec`` keeps it, so ``env.spec.make()`` rebuilds the
            env with the same layout.
            Wrappers (:func:`list_wrappers`): every keyword that names a
            registered wrapper is taken out before the family is built, and the
            wrappers are applied by increasing ``order``: ``offbeat`` inside,
            ``crash`` outside. ``crash`` (discrete actions): a rate in
            ``[0, 1]``, a dict of options, or a coach strategy name
            (:func:`marl.envs.wrappers.crash.crash_options`). ``offbeat``
            (discrete actions): action -> duration in steps, e.g.
            ``{"catch": 3}``, or a dict with ``"durations"`` and the wrapper's
            options (docs/offbeat.md). A value of ``None`` applies no wrapper.
            ``env.spec`` keeps each wrapper's options (its ``options()`` where
            it has one), so ``env.spec.make()`` rebuilds the same stack.

    Raises:
        MarlError: unknown family or scenario (the message lists the valid
            choices), an object no family accepts, an invalid ``entity_layout``,
            or a ``seed`` that is not a whole number >= 0.
    """
    fams = _builtin_families()
    seed = kwargs.get("seed")
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, numbers.Integral) or seed < 0):
        raise MarlError(f"seed must be a whole number >= 0 or None, got {seed!r}.")
    wrappers = [(w, entry, kwargs.pop(w)) for w, entry in _wrapper_order() if w in kwargs]
    layout = kwargs.pop("entity_layout", None)
    if not isinstance(name, str):
        env = _from_object(name, fams, kwargs if scenario is None else {**kwargs, "scenario": scenario})
    else:
        if ":" in name and scenario is None:
            name, scenario = name.split(":", 1)
        if name not in fams:
            raise unknown_choice("env", name, list(fams))
        env = load_target(fams[name].factory)(scenario, **kwargs)
        if env.spec is None:
            env.spec = EnvSpec(name, scenario, dict(kwargs))
    if layout is not None:
        from marl.env.layout import check_entity_layout

        env.info.entity_layout = check_entity_layout(layout, env.info)
        if env.spec is not None:
            env.spec.kwargs = {**env.spec.kwargs, "entity_layout": copy.deepcopy(env.info.entity_layout)}
    for w, entry, options in wrappers:
        if options is not None:
            env = _wrap(env, w, entry, options, kwargs.get("seed"))
    return env


def _from_object(obj: Any, fams: Dict[str, _Family], kwargs: Dict[str, Any]) -> MultiAgentEnv:
    """Ask the families that registered a ``from_object`` factory, in registration order."""
    takers = {k: f.from_object for k, f in fams.items() if f.from_object}
    for factory in takers.values():
        env = load_target(factory)(obj, **kwargs)
        if env is not None:
            return env
    raise MarlError(
        f"Cannot build an env from {type(obj).__name__} {obj!r}: pass a family name (see marl.list_envs()) or an "
        f"env instance, constructor or module that a registered family accepts ({', '.join(takers) or 'none'})."
    )


def _wrap(env: MultiAgentEnv, name: str, entry: _Wrapper, options: Any, seed: Any) -> MultiAgentEnv:
    """Apply one registered wrapper; its options join the inner env's spec."""
    inner = env.spec
    wrapped = load_target(entry.factory)(env, options, seed=seed)
    if inner is not None:
        own = getattr(type(wrapped), "options", None)
        kept = wrapped.options() if callable(own) else copy.deepcopy(options)
        wrapped.spec = EnvSpec(inner.family, inner.scenario, {**inner.kwargs, name: kept})
    return wrapped
