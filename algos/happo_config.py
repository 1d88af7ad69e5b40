"""The config schemas of HAPPO and HATRPO (:class:`HAPPOConfig`, :class:`HATRPOConfig`), apart from the trainer so that a config is
loaded and checked without importing torch or Ray (the algorithm is in :mod:`marl.algos.happo`).

Sources: Kuba et al. 2022, "Trust Region Policy Optimisation in Multi-Agent Reinforcement
Learning" (ICLR 2022, arXiv 2109.11251: HAPPO and HATRPO, Algorithms 1 and 2 of its appendix); Zhong et al. 2024,
"Heterogeneous-Agent Reinforcement Learning" (JMLR, arXiv 2304.09870) and its code HARL
(``fixed_order``, ``share_param: False``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

from marl.algos.ppo_config import PPOConfig
from marl.algos.trpo_config import TRPOConfig
from marl.config import key
from marl.config.checks import ERROR, RUN, RunFacts, rule


@rule(
    ("share",),
    ERROR,
    "HAPPO updates the agents one after another, each with its own parameters: a module shared by "
    "several agents cannot be updated once per agent",
    scope=RUN,
)
def one_agent_per_module(c: Any, run: RunFacts) -> Optional[str]:
    """The first module of the run's policy mapping that serves more than one agent, as a message; ``None``
    when every module serves one agent (``share='individual'``, or a mapping that keeps every agent apart)."""
    from marl.mapping import fn_name  # the run is being checked: torch is already imported

    shared = {mid: agents for mid, agents in run.mapping.modules.items() if len(agents) > 1}
    if not shared:
        return None
    mid, agents = next(iter(shared.items()))
    share = run.mapping.share
    if callable(share):
        named = f"share={fn_name(share)}"
    else:  # 'auto' resolves per env: say what it became
        named = f"share={share!r}" + (f" (here '{run.mapping.mode}')" if share != run.mapping.mode else "")
    return (
        f"{c.algo} needs one module per agent (heterogeneous agents, Kuba et al. 2022): {named} maps agents "
        f"{agents} to the one module '{mid}'. Use share='individual' (the default of {c.algo}), or a mapping "
        f"function that gives every agent its own module."
    )


@dataclass(frozen=True, kw_only=True)
class HAPPOConfig(PPOConfig):
    """HAPPO keys (``docs/algorithms/happo.md``): PPO's keys (``docs/algorithms/ppo.md``) plus the update
    order; values in ``configs/algos/happo.yaml``."""

    LAYER = "HAPPO"
    RULES = (one_agent_per_module,)  # beside PPO's (marl/config/checks.py)

    fixed_order: bool = key(
        "update the agents in the env's agent order every iteration instead of a fresh random order"
    )


@dataclass(frozen=True, kw_only=True)
class HATRPOConfig(HAPPOConfig, TRPOConfig):
    """HATRPO keys (``docs/algorithms/happo.md``): HAPPO's update order and TRPO's trust-region keys
    (``docs/algorithms/trpo.md``); values in ``configs/algos/hatrpo.yaml``. As in TRPO, PPO's ``clip`` is
    not read and ``epochs`` x ``num_minibatches`` are the critic's Adam steps."""

    RULES = HAPPOConfig.RULES + TRPOConfig.RULES  # no LAYER: every key is HAPPO's, TRPO's or below
