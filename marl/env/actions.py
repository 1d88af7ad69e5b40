"""Checks of a joint action before an env steps (:meth:`marl.env.MultiAgentEnv.step`): every group present,
its shape ``[B, N_g]`` (discrete, int) or ``[B, N_g, act_dim]`` (continuous, real), discrete values in range.
The groups are :class:`marl.env.GroupInfo` / :class:`marl.env.EnvInfo` objects, read by attribute only, so this
module imports nothing of marl but :mod:`marl.errors` (:mod:`marl.env.contract` re-exports it).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Dict, List

import torch

from marl.errors import MarlError

if TYPE_CHECKING:
    from marl.env.contract import EnvInfo, GroupInfo


def _missing(actions: Any, name: str, groups: List[str]) -> MarlError:
    got = list(actions) if isinstance(actions, dict) else type(actions).__name__
    return MarlError(f"Missing actions for group '{name}'. Expected groups: {', '.join(groups)} (got {got}).")


def check_discrete_actions(
    actions: Dict[str, Any], group: GroupInfo, num_envs: int, check_range: bool = True
) -> torch.Tensor:
    """Validate one discrete group's actions for :meth:`MultiAgentEnv.step`.

    Args:
        actions: group name -> ``[B, N_g]`` integer actions.
        group: the group to check (``actions[group.name]``).
        num_envs: ``B``.
        check_range: also require values in ``[0, group.n_actions)``.
    Returns:
        ``[B, N_g]`` int64 tensor (on the device it came on).
    Raises:
        MarlError: the group is missing, or the shape, dtype or range is wrong
            (the message names the group and what was expected).
    """
    name = group.name
    if not isinstance(actions, dict) or name not in actions:
        raise _missing(actions, name, [name])
    a = torch.as_tensor(actions[name])
    if tuple(a.shape) != (num_envs, group.n_agents):
        raise MarlError(
            f"Actions of group '{name}' must have shape {(num_envs, group.n_agents)} (int64), got {tuple(a.shape)}."
        )
    if a.is_floating_point() or a.dtype == torch.bool or a.is_complex():
        raise MarlError(f"Actions of group '{name}' must be integers, got {a.dtype}.")
    a = a.long()
    if check_range and a.numel() and (int(a.min()) < 0 or int(a.max()) >= group.n_actions):
        raise MarlError(
            f"Actions of group '{name}' must lie in [0, {group.n_actions}), got values in [{int(a.min())}, {int(a.max())}]."
        )
    return a


def check_continuous_actions(actions: Dict[str, Any], group: GroupInfo, num_envs: int) -> torch.Tensor:
    """Validate one continuous group's actions: ``[B, N_g, act_dim]`` numbers -> float32 tensor.

    Values are not clipped here; adapters clip them to the action space.

    Raises:
        MarlError: the group is missing, or the shape or dtype is wrong.
    """
    name = group.name
    if not isinstance(actions, dict) or name not in actions:
        raise _missing(actions, name, [name])
    a = torch.as_tensor(actions[name])
    want = (num_envs, group.n_agents, group.n_actions)
    if tuple(a.shape) != want:
        raise MarlError(f"Actions of group '{name}' must have shape {want} (float32), got {tuple(a.shape)}.")
    if a.dtype == torch.bool or a.is_complex():
        raise MarlError(f"Actions of group '{name}' must be real numbers, got {a.dtype}.")
    return a.detach().float()


def check_actions(actions: Dict[str, Any], info: EnvInfo) -> Dict[str, torch.Tensor]:
    """Validate a joint action against ``info`` (every group present, shapes, dtypes, discrete ranges).

    Args:
        actions: group -> ``[B, N_g]`` int (discrete) or ``[B, N_g, act_dim]`` float (continuous).
        info: the env's :class:`EnvInfo`.
    Returns:
        group -> int64 / float32 tensor on the device it came on (groups not in ``info`` are dropped).
    Raises:
        MarlError: the first problem found, naming the group and what was expected.
    """
    names = list(info.groups)
    out = {}
    for name, g in info.groups.items():
        if not isinstance(actions, dict) or name not in actions:
            raise _missing(actions, name, names)
        if g.discrete:
            out[name] = check_discrete_actions(actions, g, info.num_envs)
        else:
            out[name] = check_continuous_actions(actions, g, info.num_envs)
    return out
