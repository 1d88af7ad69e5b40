"""The rules a multi-agent env keeps, by name, and the error that names the one an env broke.

Every check of a user env (:func:`marl.env.check_env`, the adapters of
:mod:`marl.envs`, the per-step guard of the env runners
(:class:`marl.env.guard.EnvGuard`) and evaluation) raises an
:class:`EnvRuleError`: a :class:`~marl.errors.MarlError` whose message starts
with ``[rule <name>]`` and names the env (``family:scenario``), the step
(``reset`` or ``step t``), the env copy, the agent and the key (``obs``,
``reward``, ...) where they apply. ``docs/envs.md`` ("Checking an env") lists
the rules.

This module imports nothing of marl but :mod:`marl.errors`.
"""

from __future__ import annotations

import warnings
from typing import Any, Dict, Optional

from marl.errors import MarlError

RULES: Dict[str, str] = {
    "env_type": "check_env takes a marl MultiAgentEnv, a PettingZoo env (AEC or parallel) or a Gymnasium multi-agent env",
    "info": "env.info is an EnvInfo with num_envs >= 1, state_dim >= 1 and episode_limit >= 0",
    "spaces": "observation spaces are Boxes (a vector, an image [H, W, C]) or Dicts of Boxes; action spaces are Discrete or 1-D Boxes",
    "step_type": "reset() and step() return a marl Step",
    "groups": "obs, avail_actions, alive, reward (and final_*, extras) are dicts over info.groups, in that order",
    "obs_shape": "obs[g] and final_obs[g] are [B, N_g, obs_dim_g] (structured: [B, N_g, *shape] per key) as info declares, for the whole run",
    "obs_space": "every agent's observation has the shape (and, for a Dict, the keys) of its declared observation space, at reset and step",
    "obs_dtype": "observations, state and rewards are float32 (float64 / integer / bool values are cast, once noted); observations of a uint8 image or Dict key stay uint8",
    "bool_dtype": "alive, avail_actions, terminated and truncated are bool (integer 0 / 1 values are read as bool)",
    "state_shape": "state and final_state are [B, state_dim]",
    "reward_shape": "reward[g] is [B, N_g]: one number per agent and env copy",
    "alive_shape": "alive[g] is [B, N_g] bool",
    "avail_shape": "avail_actions[g] is [B, N_g, n_actions_g] bool (None for a continuous group)",
    "flags": "terminated and truncated are [B] bool, never both True in one row",
    "finite": "observations, state and rewards hold no NaN or infinity",
    "no_legal_action": "every agent has at least one legal action (avail_actions); a dead agent its no-op",
    "reset_clean": "after reset no row is terminated or truncated and every reward is 0",
    "final_given": "a row whose episode ended gives final_obs / final_state (its last observation)",
    "final_matches": "in rows that did not end, final_obs / final_state / final_avail_actions equal the current ones",
    "reset_rows_keeps_others": "reset_rows(rows) returns the current observation in rows it does not reset",
    "episode_limit": "no episode runs longer than info.episode_limit steps (when it is > 0)",
    "episode_ends": "episodes end (evaluation plays whole episodes): declare a limit where the env has none",
    "extras": "step.extras holds exactly the columns of info.extra_columns, [B, N_g] of the declared dtype",
    "metrics": "info['episode_metrics'] values are [B] tensors",
    "state_pickles": "get_state() returns a picklable dict",
    "state_roundtrip": "after set_state(get_state()) the env takes the same steps again",
    "reset_api": "a PettingZoo / Gymnasium reset(seed=...) returns (observations, infos)",
    "step_api": "a PettingZoo / Gymnasium step returns (observations, rewards, terminations, truncations, infos)",
    "reward_space": "the wrapped library gives one reward per agent and env copy",
}


class EnvRuleError(MarlError):
    """An env broke one of the :data:`RULES`.

    Attributes:
        rule: the rule's name (a key of :data:`RULES`).
        env: ``"family:scenario"`` (or the env's class name).
        agent: the agent (or agents) concerned, or ``None``.
        key: the field concerned (``"obs"``, ``"reward"``, ``"avail_actions"``, ...), or ``None``.
        step: ``"reset"``, ``"step 3"``, ... or ``None``.
    """

    def __init__(
        self,
        rule: str,
        env: str,
        detail: str,
        *,
        agent: Optional[str] = None,
        key: Optional[str] = None,
        step: Optional[str] = None,
        copy: Optional[int] = None,
    ):
        self.rule, self.env, self.agent, self.key, self.step = rule, env, agent, key, step
        where = [f"env {env}"] if env else []
        if step is not None:
            where.append(f"at {step}")
        if copy is not None:
            where.append(f"env copy {copy}")
        if agent is not None:
            where.append(f"agent {agent}")
        if key is not None:
            where.append(f"key '{key}'")
        head = f"[rule {rule}] {', '.join(where)}: " if where else f"[rule {rule}] "
        super().__init__(f"{head}{detail} (rule: {RULES.get(rule, rule)}.)")

    def __reduce__(self) -> Any:
        # pickled across processes (a remote env runner's error reaches the driver): rebuilt from the message
        return (_rebuild, (str(self), self.rule, self.env, self.agent, self.key, self.step))


def _rebuild(message: str, rule: str, env: str, agent: Any, key: Any, step: Any) -> EnvRuleError:
    """An :class:`EnvRuleError` with ``message`` as it was (unpickling)."""
    err = EnvRuleError.__new__(EnvRuleError)
    MarlError.__init__(err, message)
    err.rule, err.env, err.agent, err.key, err.step = rule, env, agent, key, step
    return err


def env_name(env: Any) -> str:
    """``"family:scenario"`` of a marl env (its ``info``), else the class name of ``env``."""
    info = getattr(env, "info", None)
    family, scenario = getattr(info, "family", None), getattr(info, "scenario", None)
    if family is not None:
        return f"{family}:{scenario}"
    return type(env).__name__


def agents_of(info: Any, group: Optional[str], index: Optional[int] = None) -> Optional[str]:
    """How a message names the agent ``index`` of ``group`` (or all its agents), ``None`` for no group."""
    if group is None or info is None or group not in getattr(info, "groups", {}):
        return None if group is None else f"(group '{group}')"
    agents = info.groups[group].agents
    if index is not None and 0 <= index < len(agents):
        return f"'{agents[index]}' (group '{group}')"
    return f"{', '.join(repr(a) for a in agents)} (group '{group}')"


def episode_limit_hint(family: Any, scenario: Any) -> str:
    """How to give the env ``family:scenario`` an episode limit, as the call to write (errors of
    algorithms that need one, and of evaluation when episodes never end).

    Every built-in family takes ``episode_limit=`` (steps after which an episode is truncated);
    an env of one's own declares it in its :class:`~marl.env.EnvInfo`.
    """
    args = ", ".join(repr(str(a)) for a in (family, scenario) if a)
    return (
        f"Set one when making the env, e.g. make_env({args}, episode_limit=50) (steps after which an episode "
        f"is truncated); an env of your own sets truncated=True after T steps and declares "
        f"EnvInfo(episode_limit=T)"
    )


class EnvCastWarning(UserWarning):
    """An env gave values of another dtype than marl's (float64 observations, integer rewards, ...):
    marl casts them, and says so once per env and key."""


def note_cast(env: str, key: str, got: Any, to: str, agent: Optional[str] = None, warn: bool = True) -> str:
    """The line saying that ``key`` of ``env`` is cast from ``got`` to ``to`` (check_env's summary lists
    it), also warned (:class:`EnvCastWarning`) with ``warn``. Callers keep the keys they noted: once each."""
    who = f" of agent {agent}" if agent else ""
    line = f"env {env}: {key}{who} has dtype {got}; marl casts it to {to} (noted once per env and key)."
    if warn:
        warnings.warn(line, EnvCastWarning, stacklevel=3)
    return line
