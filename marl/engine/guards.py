"""Checks of what an env hands the env runner: shapes against its ``EnvInfo``, finite numbers.

A user env that returns a NaN or an infinite observation, state or reward would
otherwise poison the losses many steps later, far from its cause; an env whose
observation grows mid-run would fail in a matmul. :class:`StepGuard` checks
every :class:`~marl.env.Step` where it enters the sampler
(:class:`~marl.engine.runner.BatchedEnvRunner`), as Stable-Baselines3's
``VecCheckNan`` wrapper does for single-agent envs (Raffin et al. 2021,
"Stable-Baselines3: Reliable Reinforcement Learning Implementations", JMLR
22(268)); the full contract check of an env is :func:`marl.env.check_env`.

Cost per step: the env rules of :class:`~marl.env.guard.EnvGuard` (dtypes, shapes, legal
actions), then one ``sum`` per checked tensor (a NaN or
an infinity makes the sum non-finite); only then is the tensor searched for the
place to name. The engine config key ``non_finite`` picks what happens:
``raise`` (default) a :class:`~marl.errors.MarlError` naming the env, the
agent (or state index), the field, the env copy and the step; ``mask`` replaces
the values by 0 and counts them in the rollout metric ``non_finite_masked``;
``off`` checks shapes only.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Dict, Iterator, List, Optional, Tuple

import torch

from marl.env import EnvInfo, Step
from marl.env.guard import EnvGuard
from marl.errors import MarlError

# (field, group or None for the state, tensor, key of a Dict observation or None)
Item = Tuple[str, Optional[str], torch.Tensor, Optional[str]]


class StepGuard(EnvGuard):
    """Checks the :class:`Step` objects of one env (see the module docstring): the env rules of
    :class:`~marl.env.guard.EnvGuard` (groups, dtypes cast once, shapes, a legal action for every
    alive agent), then finite values.

    Args:
        info: the env's :class:`~marl.env.EnvInfo` (shapes: ``obs[g]`` ``[B, N_g, obs_dim_g]``,
            ``reward[g]`` ``[B, N_g]``, ``state`` ``[B, state_dim]``).
        mode: ``"raise"``, ``"mask"`` or ``"off"`` (the ``non_finite`` config key).
        where: how messages name the sampler, e.g. ``"env runner 1"``.
    """

    def __init__(self, info: EnvInfo, mode: str = "raise", where: str = "env runner"):
        super().__init__(info, where)
        self.mode = mode
        self.masked: List[int] = []

    def __call__(self, step: Step, reset: bool = False) -> Step:
        """``step`` checked (and, in ``mask`` mode, with non-finite values replaced by 0).

        Raises:
            EnvRuleError: a broken env rule (:class:`~marl.env.guard.EnvGuard`: env, step, agent, key named).
            MarlError: in ``raise`` mode, a NaN / infinite value (env, agent, field, env copy, step).
        """
        step = super().__call__(step, reset)
        if self.mode == "off":
            return step
        items = list(self._items(step))
        if math.isfinite(sum(float(t.sum()) for _, _, t, _ in items)):
            return step
        bad = [item for item in items if not bool(torch.isfinite(item[2]).all())]
        if not bad:  # the sum overflowed, every value is finite
            return step
        if self.mode == "raise":
            raise MarlError(self._describe(*bad[0]))
        return self._mask(step, bad)

    def pop_metrics(self) -> Dict[str, List[int]]:
        """``{"non_finite_masked": [values replaced since the last call]}`` in ``mask`` mode, else ``{}``."""
        if self.mode != "mask":
            return {}
        out = {"non_finite_masked": [sum(self.masked)]}
        self.masked = []
        return out

    # ------------------------------------------------------------------ internals
    def _items(self, step: Step) -> Iterator[Item]:
        """The tensors to check (floating ones: a uint8 image holds no NaN); ``final_*`` ones only where
        they are not the current ones."""
        for field in ("obs", "reward"):
            for g, t in getattr(step, field).items():  # every group: the EnvGuard checked them
                yield from _leaves(field, g, t)
        yield "state", None, step.state, None
        if step.final_obs is not None:
            for g, t in step.final_obs.items():
                if t is not step.obs.get(g):
                    yield from _leaves("final_obs", g, t)
        if step.final_state is not None and step.final_state is not step.state:
            yield "final_state", None, step.final_state, None

    def _describe(self, field: str, group: Optional[str], t: torch.Tensor, key: Optional[str] = None) -> str:
        idx = [int(i) for i in (~torch.isfinite(t)).nonzero()[0]]
        value = float(t[tuple(idx)])
        if group is None:
            who = f"(index {idx[1]})"
        else:
            who = f"of agent '{self.info.groups[group].agents[idx[1]]}' (group '{group}'"
            who += f", key '{key}'" if key is not None else ""
            who += f", feature {tuple(idx[2:]) if len(idx) > 3 else idx[2]})" if len(idx) > 2 else ")"
        return (
            f"Env {self.name} returned {value} in {field} {who}, env copy {idx[0]}, at step "
            f"{self.steps}{' (reset)' if self.steps == 0 else ''}. Fix the env, or set non_finite='mask' to "
            f"replace NaN/inf by 0 (counted in the metric non_finite_masked)."
        )

    def _mask(self, step: Step, bad: List[Item]) -> Step:
        """A copy of ``step`` with the non-finite values of ``bad`` replaced by 0 (the env's tensors stay)."""
        fields: Dict[str, Any] = {}  # Step field -> its clean value (a tensor or a group -> tensor dict)
        for field, group, t, key in bad:
            self.masked.append(int((~torch.isfinite(t)).sum()))
            clean: Any = torch.nan_to_num(t, nan=0.0, posinf=0.0, neginf=0.0)
            if key is not None:  # a Dict observation: the group's dict with the one key replaced
                assert group is not None
                per_group = getattr(step, field)
                clean = {**fields.get(field, per_group)[group], key: clean}
                t = per_group[group]
            # a final_* field that is the very same tensor (no episode ended) gets the clean one too
            for f in (field, f"final_{field}") if field in ("obs", "state") else (field,):
                if group is None and getattr(step, f) is t:
                    fields[f] = clean
                elif group is not None and getattr(step, f) is not None and getattr(step, f).get(group) is t:
                    fields.setdefault(f, dict(getattr(step, f)))[group] = clean
        return dataclasses.replace(step, **fields)


def _leaves(field: str, group: str, t: Any) -> Iterator[Item]:
    """``(field, group, tensor, key)`` of a group's value: the tensor itself (key ``None``), or each
    floating tensor of a Dict observation under its key."""
    if not isinstance(t, dict):
        if t.is_floating_point():
            yield field, group, t, None
        return
    for k, v in t.items():
        if v.is_floating_point():
            yield field, group, v, k
