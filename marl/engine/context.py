"""What a run's trainer, env runners and learners are given beside RLlib's own settings.

Two typed objects travel in RLlib's ``learner_config_dict`` (RLlib deep-copies it into
every remote runner and learner, so both pickle):

* ``"config"``: the run's validated config, an instance of the algorithm's schema
  (:class:`marl.config.ConfigBase`, e.g. ``PPOConfig``): what the user chose;
* ``"run"``: a :class:`RunContext`: what marl derived from the env and the policy
  mapping (env spec, agent -> module table, module spaces, env copies) and the
  family's own static layout (e.g. value decomposition's teams).

:class:`RunAccess` gives the objects built from a run's ``AlgorithmConfig``
(:class:`~marl.engine.trainer.Trainer`, env runners, learners) the two as ``cfg`` and ``run``.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Dict, Optional

from marl.config import ConfigBase
from marl.env import EnvSpec, MultiAgentEnv

if TYPE_CHECKING:
    from marl.mapping import PolicyMapping

CONFIG, RUN = "config", "run"  # the keys of learner_config_dict


@dataclass(frozen=True)
class RunContext:
    """The parts of a run that are not user config (built by :meth:`of` before Ray starts).

    Attributes:
        agent_to_module: env agent id -> policy-mapping module id.
        num_envs: env copies ``B`` each env runner steps (the env's, after ``num_envs`` is applied).
        env_spec: how remote runners rebuild the env (``None`` for an env built by hand).
        env_object: an env built by hand (no spec): remote runners get a copy of it; else ``None``.
        module_spaces: module id -> ``PolicySpec`` (observation widened by the agent one-hot,
            action space); empty for families whose runners need no spaces (text games).
        family: the algorithm family's static extras, a dataclass the family declares
            (``Trainer.family_context``), or ``None``.
        eval_kwargs: the trained env's :attr:`~marl.env.contract.MultiAgentEnv.eval_kwargs`, applied
            by :meth:`make_eval_env` (``{}``: evaluation envs are built like training ones).
    """

    agent_to_module: Dict[str, str]
    num_envs: int
    env_spec: Optional[EnvSpec] = None
    env_object: Optional[Any] = None
    module_spaces: Dict[str, Any] = field(default_factory=dict)
    family: Any = None
    eval_kwargs: Dict[str, Any] = field(default_factory=dict)

    @classmethod
    def of(
        cls,
        env: MultiAgentEnv,
        mapping: PolicyMapping,
        module_spaces: Optional[Dict[str, Any]] = None,
        family: Any = None,
    ) -> "RunContext":
        """The context of training on ``env`` with policy mapping ``mapping``. The driver's env
        object travels only for envs built by hand (no spec)."""
        return cls(
            agent_to_module=dict(mapping.agent_to_module),
            num_envs=env.num_envs,
            env_spec=env.spec,
            env_object=env if env.spec is None else None,
            module_spaces=dict(module_spaces or {}),
            family=family,
            eval_kwargs=dict(getattr(env, "eval_kwargs", {})),  # a TextEnv declares none
        )

    def make_env(self, **overrides: Any) -> Any:
        """A runner's own env: rebuilt from :attr:`env_spec` (``overrides``, e.g. ``num_envs``,
        replace its keyword arguments), or a copy of the env built by hand."""
        if self.env_spec is None:
            return copy.deepcopy(self.env_object)
        return self.env_spec.make(**overrides)

    def make_eval_env(self, **overrides: Any) -> Any:
        """An evaluation env: :meth:`make_env` with the trained env's declared
        :attr:`~marl.env.contract.MultiAgentEnv.eval_kwargs` (:attr:`eval_kwargs`) applied on top;
        exactly :meth:`make_env` when it declares none. An env built by hand (no spec) cannot be
        rebuilt with other kwargs: its copy is returned as trained."""
        if self.env_spec is None or not self.eval_kwargs:
            return self.make_env(**overrides)
        return self.env_spec.make_eval(self.eval_kwargs, **overrides)


def learner_config_dict(cfg: ConfigBase, run: RunContext) -> Dict[str, Any]:
    """RLlib's ``learner_config_dict`` of a marl run: ``{"config": cfg, "run": run}``."""
    return {CONFIG: cfg, RUN: run}


class RunAccess:
    """Mixin for the RLlib objects built from a marl run's ``AlgorithmConfig`` (``self.config``):
    the trainer, env runners and learners read the run's typed config as ``self.cfg`` and its
    :class:`RunContext` as ``self.run``.

    ``self.config`` is the RLlib class's own (``Algorithm``, ``EnvRunner``, ``Learner``), which RLlib
    annotates differently in each (``Algorithm``: optional): hence the ``attr-defined`` ignores below."""

    @property
    def cfg(self) -> Any:
        """The run's config: an instance of the algorithm's schema (read keys as attributes)."""
        return self.config.learner_config_dict[CONFIG]  # type: ignore[attr-defined]

    @property
    def run(self) -> RunContext:
        """The run's :class:`RunContext`."""
        return self.config.learner_config_dict[RUN]  # type: ignore[attr-defined]
