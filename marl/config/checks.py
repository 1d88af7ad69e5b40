"""Checks across config keys: values that are each valid but do not fit together.

The schema checks one key at a time (type, range, choices: :mod:`marl.config.schema`). A
:class:`Rule` relates several keys, for example ``num_minibatches`` and the rows a rollout
gives, and is decided once per rule: an *error* (:class:`~marl.errors.MarlError`) when the
run cannot do what the values ask (it would fail, never learn, or silently do something
else), a *warning* (:class:`~marl.errors.ConfigWarning`) when it runs as documented but
probably not as meant. ``docs/configuration.md`` ("Checks across keys") lists every rule
with its decision and the reason, generated from the rules themselves.

A schema class lists its rules in a class attribute ``RULES`` (a tuple of :class:`Rule`;
the rules of its base classes apply too). Two scopes:

* ``config``: the keys alone, checked when the configuration is loaded
  (:func:`marl.config.load_config`, so also on the command line);
* ``run``: the keys with what the run is made of (:class:`RunFacts`: the env, the policy
  mapping, the CPUs), checked before Ray starts (``Trainer.check_mapping``, which
  ``marl.api.prepare`` calls).

Within a scope, errors are raised before any warning is given.
"""

from __future__ import annotations

import os
import sys
import warnings
from dataclasses import dataclass
from typing import Any, Callable, Iterable, List, Optional, Sequence, Tuple

from marl.errors import ConfigWarning, MarlError

ERROR, WARNING = "error", "warning"
CONFIG, RUN = "config", "run"


@dataclass(frozen=True)
class RunFacts:
    """What a run is made of, beside its config: the env's :class:`~marl.env.EnvInfo`, its
    :class:`~marl.mapping.PolicyMapping` and the CPUs the run gets (Ray's when Ray is running,
    else this machine's, ``os.cpu_count()``)."""

    info: Any
    mapping: Any
    cpus: float
    cpus_of: str  # "Ray has" or "this machine has", for messages

    @classmethod
    def of(cls, mapping: Any) -> RunFacts:
        """The facts of a run with ``mapping`` (its ``info`` is the env's, with the run's ``num_envs``)."""
        return cls(mapping.info, mapping, *available_cpus())

    def env_copies(self, cfg: Any) -> int:
        """Env copies sampled at once: the env's ``num_envs`` per runner, ``max(1, num_env_runners)`` runners."""
        return int(self.info.num_envs) * max(1, int(cfg.num_env_runners))


def available_cpus() -> Tuple[float, str]:
    """``(CPUs, whose)``: Ray's CPUs when Ray is running (a cluster the user joined may have more
    than this machine), else this machine's (``os.cpu_count()``, what ``marl.api.start_ray`` gives Ray)."""
    ray = sys.modules.get("ray")
    if ray is not None and ray.is_initialized():
        return float(ray.cluster_resources().get("CPU", 1)), "Ray has"
    return float(os.cpu_count() or 1), "this machine has"


@dataclass(frozen=True)
class Rule:
    """One check across ``keys``: ``test(cfg)`` (scope ``config``) or ``test(cfg, facts)`` (scope
    ``run``) returns the message of a violation, or ``None``. ``kind`` is ``"error"`` or
    ``"warning"``; ``why`` is the one-line reason for that decision shown in the docs."""

    keys: Tuple[str, ...]
    kind: str
    scope: str
    why: str
    test: Callable[..., Optional[str]]

    @property
    def name(self) -> str:
        return getattr(self.test, "__name__", "rule")


def rule(keys: Sequence[str], kind: str, why: str, scope: str = CONFIG) -> Callable[[Callable], Rule]:
    """Decorator: the function below becomes a :class:`Rule` (list it in a schema's ``RULES``).

    Raises:
        ValueError: ``kind`` or ``scope`` not one of the choices, or a ``why`` of several lines
            (for marl's developers: it is a table cell of the docs).
    """
    if kind not in (ERROR, WARNING) or scope not in (CONFIG, RUN) or "\n" in why:
        raise ValueError(f"rule {tuple(keys)}: kind {kind!r}, scope {scope!r} or a why of several lines")

    def make(test: Callable[..., Optional[str]]) -> Rule:
        return Rule(tuple(keys), kind, scope, why, test)

    return make


def rules_of(cls: type) -> List[Rule]:
    """The rules of schema class ``cls``: its base classes' first (each rule once)."""
    out: List[Rule] = []
    for c in reversed(cls.__mro__):
        out += [r for r in vars(c).get("RULES", ()) if r not in out]
    return out


def check_rules(cfg: Any, facts: Optional[RunFacts] = None, extra: Sequence[Rule] = ()) -> None:
    """Apply the rules of ``cfg``'s schema and ``extra`` (a trainer's own): those of scope ``config``
    without ``facts``, those of scope ``run`` with them.

    Raises:
        MarlError: the first error rule that ``cfg`` violates (its message names keys and values).
    Warns:
        ConfigWarning: for each warning rule it violates (only when no error rule is violated).
    """
    scope = CONFIG if facts is None else RUN
    rules = rules_of(type(cfg))
    rules += [r for r in extra if r not in rules]
    found = [(r, msg) for r in rules if r.scope == scope for msg in [violation(r, cfg, facts)] if msg]
    for r, msg in found:
        if r.kind == ERROR:
            raise MarlError(msg)
    for _, msg in found:
        warnings.warn(msg, ConfigWarning, stacklevel=3)


def violation(r: Rule, cfg: Any, facts: Optional[RunFacts]) -> Optional[str]:
    """The message of ``cfg`` violating ``r``, or ``None``."""
    return r.test(cfg) if facts is None else r.test(cfg, facts)


def join_keys(keys: Iterable[str]) -> str:
    return ", ".join(f"`{k}`" for k in keys)


# ============================================================ rules shared by families
@rule(
    ("num_learners", "num_gpus_per_learner"),
    ERROR,
    "DDP splits each update's batch between k learner processes; without a GPU, on fewer than k "
    "cores they take turns, so the run is no faster than with one learner per core and each "
    "gradient all-reduce waits for the last of them",
    scope=RUN,
)
def learners_beyond_cores(c: Any, run: RunFacts) -> Optional[str]:
    if c.num_gpus_per_learner > 0 or c.num_learners <= run.cpus:
        return None
    return (
        f"num_learners={c.num_learners} learner processes without a GPU (num_gpus_per_learner=0) is more "
        f"than the {run.cpus:g} CPUs {run.cpus_of}: they would take turns on the cores, no faster than "
        f"{int(run.cpus)} learners on the same batch. Use num_learners <= {int(run.cpus)} (0: one learner in the driver), "
        f"or give each learner a GPU (num_gpus_per_learner=1)."
    )


def chunk_steps(chunk_length: int, rollout_length: int) -> int:
    """Steps of one recurrent training chunk: ``chunk_length``, or the whole rollout when it is 0 or
    does not divide ``rollout_length`` (whole-sequence backpropagation, as EPyMARL trains its GRU agents
    on whole episodes)."""
    if chunk_length == 0 or rollout_length % chunk_length:
        return rollout_length
    return chunk_length


def on_policy_rows(c: Any, mapping: Any, env_copies: int) -> Tuple[int, str]:
    """The rows one learner splits into minibatches per update, and how they are counted.

    Mirrors ``OnPolicyLearner.training_rows`` (marl/engine/on_policy.py): a row is one step of
    one agent (``rollout_length`` per env copy and agent of a module); with a GRU
    (``recurrent``) one chunk of :func:`chunk_steps` steps; with the team critic
    (``critic_kind == "team"``) one env step (not one per agent). The smallest module
    counts; ``num_learners > 1`` learners split the rows between them.
    """
    T = c.rollout_length
    per_copy = f"rollout_length={T} steps"
    if getattr(c, "recurrent", False):
        L = chunk_steps(c.chunk_length, T)
        T, per_copy = T // L, f"{T // L} chunk(s) of {L} steps (rollout_length={T}, chunk_length={c.chunk_length})"
    team = getattr(c, "critic_kind", None) == "team"
    mid = min(mapping.modules, key=lambda m: 1 if team else mapping.n_agents(m))
    agents = 1 if team else mapping.n_agents(mid)
    learners = max(1, c.num_learners)
    rows = env_copies * agents * T // learners
    who = "env steps (team critic)" if team else f"{agents} agent(s) of module '{mid}'"
    how = f"{per_copy} x {env_copies} env copies x {who}" + (f" / num_learners={learners}" if learners > 1 else "")
    return rows, how


@rule(
    ("num_minibatches", "rollout_length", "num_envs", "num_env_runners", "chunk_length", "num_learners"),
    ERROR,
    "the extra minibatches would be empty: gradient steps on no rows",
    scope=RUN,
)
def minibatches_beyond_rows(c: Any, run: RunFacts) -> Optional[str]:
    rows, how = on_policy_rows(c, run.mapping, run.env_copies(c))
    if c.num_minibatches <= rows:
        return None
    return (
        f"num_minibatches={c.num_minibatches} is more than the {rows} rows a learner gets per update "
        f"({how}); use num_minibatches <= {rows}, or more env copies (num_envs) or a longer rollout_length."
    )


def buffer_room(capacity: int, copies: int) -> Optional[str]:
    """Why a replay buffer of ``capacity`` episodes cannot take ``copies`` env copies writing at
    once (each holds an open slot; the ring would evict open slots before they complete), or ``None``."""
    if capacity > 2 * copies:
        return None
    return (
        f"buffer_size={capacity} episodes is too small for {copies} env copies writing at once; "
        f"use buffer_size > {2 * copies}."
    )
