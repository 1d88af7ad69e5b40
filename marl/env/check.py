"""``check_env``: run an env with random legal actions and check every :class:`Step` against its :class:`EnvInfo`.

After Stable-Baselines3's ``check_env`` (Raffin et al. 2021, "Stable-Baselines3:
Reliable Reinforcement Learning Implementations", JMLR 22(268)), for marl's
batched multi-agent contract (docs/envs.md, "Checking an env"). It takes a marl
env, or a raw PettingZoo (AEC or parallel) or Gymnasium multi-agent env, which
it wraps as :func:`marl.make_env` does. Every failure is an
:class:`~marl.env.rules.EnvRuleError` (a :class:`~marl.errors.MarlError`)
whose message starts with the broken rule's name (``[rule obs_shape]``, the
rules of :data:`marl.env.rules.RULES`) and names the env, the step, the field,
the group and the row where it applies, and what was expected. On success it
prints (and returns) a summary of the env.
"""

from __future__ import annotations

import pickle
from typing import Any, Dict, List, Optional, Tuple

import gymnasium as gym
import torch

from marl.env.contract import EnvInfo, GroupInfo, MultiAgentEnv, Step
from marl.env.obs import obs_dtypes, obs_leaves
from marl.env.guard import EnvGuard
from marl.env.rules import EnvRuleError, env_name


def check_env(env: Any, steps: int = 100, seed: Optional[int] = 0, num_envs: int = 2, verbose: bool = True) -> str:
    """Reset ``env``, take ``steps`` steps of uniformly random legal actions, check each :class:`Step`.

    Checks, besides :func:`check_step` on the reset and on every step (after the per-step guard
    of the env runners, :class:`~marl.env.guard.EnvGuard`, which casts float64 / integer
    observations to float32 and notes it once): the :class:`EnvInfo` itself (``Box``
    observation spaces of any rank >= 1 or ``Dict`` spaces of such Boxes, ``Discrete`` or 1-D ``Box`` action spaces, positive ``num_envs`` /
    ``state_dim``) and that no episode runs longer than ``info.episode_limit`` steps (when it
    is > 0); for an env that saves its state (:meth:`MultiAgentEnv.get_state` not ``None``),
    that the state pickles and that after ``set_state`` the env takes the same
    :data:`STATE_STEPS` steps again.

    Args:
        env: the env to check (it is reset and stepped): a marl :class:`MultiAgentEnv`, or a
            PettingZoo ``ParallelEnv`` / ``AECEnv`` or Gymnasium multi-agent env (an instance or
            a class), wrapped through :func:`marl.make_env`'s adapters.
        steps: number of steps after the reset.
        seed: seed of the reset and of the random actions (``None``: unseeded).
        num_envs: copies ``B`` of a raw PettingZoo env or Gymnasium env class (a Gymnasium
            instance is one copy); a marl env keeps its own.
        verbose: print the summary.
    Returns:
        The summary: agents and groups, spaces, episode limit, state size, action masks,
        what was cast.
    Raises:
        EnvRuleError: the first violation found (the message names the rule).
    """
    env = as_marl_env(env, num_envs)
    info = _check_info(env)
    gen = torch.Generator()
    gen.manual_seed(0 if seed is None else int(seed))
    guard = EnvGuard(info, "check_env")
    _watch_reset_rows(env, guard)
    try:
        step, masks = _run(env, guard, gen, seed, int(steps))
        _check_state(env, step, gen, min(int(steps), STATE_STEPS))
    finally:
        for method in ("step_env", "reset_rows"):  # the watchers of _watch_reset_rows
            env.__dict__.pop(method, None)
    text = summary(env, int(steps), [*getattr(env, "cast_notes", []), *guard.casts], masks)
    if verbose:
        print(text, flush=True)
    return text


def _run(
    env: MultiAgentEnv, guard: EnvGuard, gen: torch.Generator, seed: Optional[int], steps: int
) -> Tuple[Step, bool]:
    """Reset and take ``steps`` random steps, each through ``guard`` and :func:`check_step`, with no
    episode longer than ``info.episode_limit``. Returns the last step and whether any action was masked."""
    info = env.info
    step = guard(env.reset(seed=seed), reset=True)
    check_step(env, step, reset=True, where="reset")
    masks = _has_masks(step)
    length = torch.zeros(info.num_envs, dtype=torch.long)
    for t in range(1, steps + 1):
        step = guard(env.step(env.random_actions(step, gen)))
        check_step(env, step, where=f"step {t}")
        masks |= _has_masks(step)
        length += 1
        if info.episode_limit > 0 and bool((length > info.episode_limit).any()):
            b = int((length > info.episode_limit).nonzero()[0])
            raise _fail(
                "episode_limit",
                f"env {env_name(env)} at step {t}: the episode in row {b} has run {int(length[b])} steps without "
                f"ending; expected it to end by info.episode_limit = {info.episode_limit}.",
            )
        length[step.done.cpu()] = 0
    return step, masks


def as_marl_env(env: Any, num_envs: int = 2) -> MultiAgentEnv:
    """``env`` itself if it is a marl env; a raw PettingZoo / Gymnasium env wrapped by the adapter
    :func:`marl.make_env` uses (``num_envs`` copies; one for a Gymnasium instance).

    Raises:
        EnvRuleError: rule ``env_type``: neither.
    """
    if isinstance(env, MultiAgentEnv):
        return env
    from marl.env.registry import make_env

    pettingzoo = hasattr(env, "possible_agents") and hasattr(env, "step")
    gym_env = isinstance(env, gym.Env) or (isinstance(env, type) and issubclass(env, gym.Env))
    if not (pettingzoo or gym_env):
        raise _fail(
            "env_type",
            f"expected a marl MultiAgentEnv, a PettingZoo env (AEC or parallel) or a Gymnasium multi-agent "
            f"env, got {type(env).__name__}.",
        )
    return make_env(env, num_envs=1 if isinstance(env, gym.Env) else num_envs)


def _watch_reset_rows(env: MultiAgentEnv, guard: EnvGuard) -> None:
    """In an env on :meth:`MultiAgentEnv.step`'s template (``step_env`` + ``reset_rows``), check
    that ``reset_rows(rows)`` keeps the rows it is not asked to reset (rule
    ``reset_rows_keeps_others``): it must return their current observation, which the raw
    ``step_env`` just gave. Watchers are set on the instance; :func:`check_env` removes them."""
    cls = type(env)
    if cls.step_env is MultiAgentEnv.step_env or cls.reset_rows is MultiAgentEnv.reset_rows:
        return
    raw_step, raw_reset_rows = env.step_env, env.reset_rows
    last: Dict[str, Any] = {}

    def watched_step_env(actions: Any) -> Step:
        raw = raw_step(actions)
        last["state"] = raw.state.clone() if isinstance(raw.state, torch.Tensor) else None
        return raw

    def watched_reset_rows(rows: torch.Tensor) -> Any:
        fresh = raw_reset_rows(rows)
        before = last.get("state")
        if (
            isinstance(before, torch.Tensor)
            and isinstance(fresh.state, torch.Tensor)
            and fresh.state.shape == before.shape
        ):
            row = _first_row(fresh.state, before, ~rows.cpu())
            if row is not None:
                raise EnvRuleError(
                    "reset_rows_keeps_others",
                    env_name(env),
                    f"reset_rows(rows={rows.tolist()}) changed the state of row {row}, which it was not asked to reset; "
                    f"it must return the current observation there (step_env's)",
                    key="state",
                    step=f"step {guard.steps + 1}",
                    copy=row,
                )
        return fresh

    env.__dict__["step_env"], env.__dict__["reset_rows"] = watched_step_env, watched_reset_rows


def _has_masks(step: Step) -> bool:
    """Some action of some agent is masked in ``step``."""
    return any(av is not None and not bool(av.all()) for av in step.avail_actions.values())


def summary(env: MultiAgentEnv, steps: int, casts: List[str], masks: bool) -> str:
    """What :func:`check_env` prints on success: one line per group and the env's facts."""
    i = env.info
    lines = [f"check_env: {env_name(env)} passed ({steps} steps of {i.num_envs} env copies, {i.kind})."]
    for name, g in i.groups.items():
        acts = f"Discrete({g.n_actions})" if g.discrete else f"Box({g.n_actions},)"
        plural = "s" if g.n_agents > 1 else ""
        lines.append(
            f"  group '{name}' (team '{g.team}'): {g.n_agents} agent{plural} {g.agents}; obs {_show_space(g)}, actions {acts}"
        )
    limit = f"{i.episode_limit} steps" if i.episode_limit else "none (0: episodes end only when the env says so)"
    lines.append(f"  episode limit: {limit}; state: {i.state_dim} values")
    discrete = [n for n, g in i.groups.items() if g.discrete]
    lines.append(
        "  avail_actions: "
        + (
            "none (continuous actions)"
            if not discrete
            else "masked actions seen"
            if masks
            else "every action was legal at every step"
        )
    )
    lines.append("  cast: " + ("; ".join(casts) if casts else "nothing (every value had marl's dtype)"))
    return "\n".join(lines)


def _show_space(g: GroupInfo) -> str:
    """``Box(8,)``, ``Box(16, 16, 3) uint8`` or ``Dict(image: Box(16, 16, 3) uint8, vector: Box(4,))``."""
    dtypes = obs_dtypes(g.obs_space)

    def box(k: str, b: Any) -> str:
        return f"Box{tuple(b.shape)}" + (" uint8" if dtypes[k] == torch.uint8 else "")

    if isinstance(g.obs_space, gym.spaces.Dict):
        return "Dict(" + ", ".join(f"{k}: {box(k, b)}" for k, b in obs_leaves(g.obs_space).items()) + ")"
    return box("obs", g.obs_space)


STATE_STEPS = 10  # steps check_env replays after set_state(get_state())
_STEP_FIELDS = (
    "obs",
    "state",
    "avail_actions",
    "alive",
    "reward",
    "terminated",
    "truncated",
    "final_obs",
    "final_state",
    "final_avail_actions",
    "extras",
)


def _check_state(env: MultiAgentEnv, step: Step, gen: torch.Generator, steps: int) -> None:
    """An env that saves its state (:meth:`MultiAgentEnv.get_state` not ``None``): the state must
    pickle, and after ``set_state`` the env must take the same ``steps`` steps again."""
    saved = env.get_state()
    if saved is None or steps <= 0:
        return
    try:
        saved = pickle.loads(pickle.dumps(saved))
    except Exception as e:  # noqa: BLE001 - any pickling failure is the env's to fix
        raise _fail(
            "state_pickles",
            f"env {env_name(env)}: get_state() must return a picklable dict (checkpoints are pickles): {e}",
        ) from e
    actions, taken = [], []
    for _ in range(steps):
        actions.append(env.random_actions(step, gen))
        step = env.step(actions[-1])
        taken.append(step)
    env.set_state(saved)
    for t, (a, want) in enumerate(zip(actions, taken), 1):
        got = env.step(a)
        for name in _STEP_FIELDS:
            if not _same(getattr(got, name), getattr(want, name)):
                raise _fail(
                    "state_roundtrip",
                    f"env {env_name(env)}: after set_state(get_state()), step {t} gives another '{name}' than the saved "
                    f"env did; get_state must capture everything the steps depend on (docs/envs.md, "
                    f"'Saving the env state').",
                )


def _same(a: Any, b: Any) -> bool:
    """Equal tensors (bit for bit) in equal nested dicts; ``None`` only equals ``None``."""
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor):
        return a.dtype == b.dtype and a.shape == b.shape and torch.equal(a, b)
    return a is None and b is None


def check_step(env: MultiAgentEnv, step: Step, reset: bool = False, where: str = "step") -> None:
    """Check one :class:`Step` of ``env`` (shapes and dtypes against ``env.info``, flags, final fields, extras).

    Rules: ``obs``, ``avail_actions``, ``alive``, ``reward`` are dicts over the
    groups of ``info`` in their order, holding ``[B, N_g, obs_dim]`` float32
    (finite; a structured space: ``[B, N_g, *shape]`` in its dtype, or a dict
    key -> such tensor for a ``Dict`` space, the error naming the key), ``[B, N_g, n_actions]`` bool (``None`` for continuous groups;
    every agent, alive or not, has at least one legal action: the sampler
    picks one for every agent), ``[B, N_g]`` bool and ``[B, N_g]`` float32
    (finite); ``state`` ``[B, state_dim]`` float32 (finite); ``terminated`` and
    ``truncated`` ``[B]`` bool, never both in one row (a time limit is not a
    termination), both False after a reset, where rewards are 0. ``final_obs``
    / ``final_state`` / ``final_avail_actions`` have the shapes of the current
    fields, are given whenever a row ended (``None`` means "same as current"),
    and equal the current fields in rows that did not end. ``extras`` holds
    exactly the columns of ``info.extra_columns``, each group -> ``[B, N_g]``
    of the declared dtype. ``info["episode_metrics"]`` values are ``[B]`` tensors.

    Args:
        env: the env that produced ``step``.
        step: the step to check.
        reset: ``step`` came from ``reset`` (no episode may have ended, rewards 0).
        where: how messages name the step (e.g. ``"step 3"``).
    Raises:
        MarlError: the first violation found.
    """
    if not isinstance(step, Step):
        raise _fail("step_type", f"{where}: expected a marl Step, got {type(step).__name__}.")
    where = f"env {env_name(env)} at {where}"
    info = env.info
    B = info.num_envs
    done = _flags(step, B, where, reset)
    state_shape = (B, info.state_dim)
    _tensor(step.state, state_shape, torch.float32, f"{where}: state", finite=True, rule="state_shape")
    for name in ("obs", "avail_actions", "alive", "reward"):
        _same_groups(getattr(step, name), info, f"{where}: {name}")
    for name, g in info.groups.items():
        what = f"{where}: group '{name}'"
        _check_obs(step.obs[name], g, B, f"{what}: obs")
        _tensor(step.alive[name], (B, g.n_agents), torch.bool, f"{what}: alive", rule="alive_shape")
        _tensor(step.reward[name], (B, g.n_agents), torch.float32, f"{what}: reward", True, "reward_shape")
        if reset and bool((step.reward[name] != 0).any()):
            raise _fail("reset_clean", f"{what}: reward after reset must be 0, got {step.reward[name].tolist()}.")
        _check_avail(step.avail_actions[name], g, B, f"{what}: avail_actions")
    _check_finals(env, step, done, where)
    _check_extras(step, info, where)
    metrics = (step.info or {}).get("episode_metrics", {})
    for k, v in metrics.items():
        _tensor(v, (B,), None, f"{where}: info['episode_metrics']['{k}']", rule="metrics")


def _check_info(env: MultiAgentEnv) -> EnvInfo:
    info = getattr(env, "info", None)
    if not isinstance(info, EnvInfo):
        raise _fail("info", f"env {env_name(env)}: env.info must be a marl EnvInfo, got {type(info).__name__}.")
    if int(info.num_envs) < 1 or int(info.state_dim) < 1 or int(info.episode_limit) < 0:
        raise _fail(
            "info",
            f"env {env_name(env)}: info needs num_envs >= 1, state_dim >= 1 and episode_limit >= 0; got num_envs "
            f"{info.num_envs}, state_dim {info.state_dim}, episode_limit {info.episode_limit}.",
        )
    for name, g in info.groups.items():
        _check_obs_space(env, name, g.obs_space)
        box = isinstance(g.action_space, gym.spaces.Box) and len(g.action_space.shape) == 1
        if not (g.discrete or box):
            raise _fail(
                "spaces",
                f"env {env_name(env)}: group '{name}': action_space must be Discrete or a 1-D Box, got {g.action_space!r}.",
            )
    return info


def _check_obs_space(env: MultiAgentEnv, name: str, space: Any) -> None:
    """``space`` is a ``Box`` of rank >= 1 or a non-empty ``Dict`` of such Boxes (rule ``spaces``; the
    message names the offending key)."""
    where = f"env {env_name(env)}: group '{name}'"
    valid = "a Box of rank >= 1 (a vector, an image [H, W, C]) or a gym.spaces.Dict of such Boxes"
    if isinstance(space, gym.spaces.Dict):
        if not space.spaces:
            raise _fail("spaces", f"{where}: obs_space is an empty Dict; expected {valid}.")
        for k, sub in space.spaces.items():
            if not isinstance(sub, gym.spaces.Box) or len(sub.shape) < 1:
                raise _fail("spaces", f"{where}: obs_space key '{k}' is {sub!r}; expected {valid}.")
        return
    if not isinstance(space, gym.spaces.Box) or len(space.shape) < 1:
        raise _fail("spaces", f"{where}: obs_space must be {valid}, got {space!r}.")


def _check_obs(x: Any, g: GroupInfo, B: int, what: str) -> None:
    """A group's ``obs`` / ``final_obs``: ``[B, N_g, obs_dim]`` float32 (flat) or, structured,
    ``[B, N_g, *shape]`` per key in the key's dtype (the message names the key)."""
    if not g.structured:
        _tensor(x, (B, g.n_agents, g.obs_dim), torch.float32, what, True, "obs_shape")
        return
    dtypes, leaves = obs_dtypes(g.obs_space), obs_leaves(g.obs_space)
    if not isinstance(g.obs_space, gym.spaces.Dict):
        _tensor(x, (B, g.n_agents, *leaves["obs"].shape), dtypes["obs"], what, True, "obs_shape")
        return
    if not isinstance(x, dict) or list(x) != list(leaves):
        got = list(x) if isinstance(x, dict) else type(x).__name__
        raise _fail("obs_space", f"{what} must be a dict with the keys {list(leaves)} (in this order), got {got}.")
    for k, box in leaves.items():
        _tensor(x[k], (B, g.n_agents, *box.shape), dtypes[k], f"{what}['{k}']", True, "obs_shape")


def _first_obs_row(a: Any, b: Any, rows: torch.Tensor) -> Optional[int]:
    """:func:`_first_row` over an observation's keys (a tensor, or key -> tensor)."""
    if not isinstance(a, dict):
        return _first_row(a, b, rows)
    found = [r for r in (_first_row(a[k], b[k], rows) for k in a) if r is not None]
    return min(found) if found else None


def _tensor(
    x: Any, shape: tuple, dtype: Optional[torch.dtype], what: str, finite: bool = False, rule: str = "step_type"
) -> None:
    """``x`` is a tensor of ``shape`` (rule ``rule``), of ``dtype`` and, with ``finite``, finite."""
    if not isinstance(x, torch.Tensor):
        raise _fail("step_type", f"{what} must be a torch tensor of shape {shape}, got {type(x).__name__}.")
    if tuple(x.shape) != tuple(shape):
        raise _fail(rule, f"{what} has shape {tuple(x.shape)}, expected {tuple(shape)}.")
    if dtype is not None and x.dtype != dtype:
        dtype_rule = {torch.float32: "obs_dtype", torch.bool: "bool_dtype"}.get(dtype, rule)
        raise _fail(dtype_rule, f"{what} has dtype {x.dtype}, expected {dtype}.")
    if finite and not bool(torch.isfinite(x).all()):
        row = int((~torch.isfinite(x)).reshape(x.shape[0], -1).any(-1).nonzero()[0])
        raise _fail("finite", f"{what} holds a NaN or infinite value in row {row}; expected finite values.")


def _fail(rule: str, text: str) -> EnvRuleError:
    """The :class:`EnvRuleError` of ``rule``; ``text`` names the env, the step, the group and the field."""
    return EnvRuleError(rule, "", f"check_env: {text}")


def _same_groups(d: Any, info: EnvInfo, what: str) -> None:
    want = list(info.groups)
    if not isinstance(d, dict) or list(d) != want:
        got = list(d) if isinstance(d, dict) else type(d).__name__
        raise _fail("groups", f"{what} must be a dict over the groups {want} (in this order), got {got}.")


def _flags(step: Step, B: int, where: str, reset: bool) -> torch.Tensor:
    """Check ``terminated`` / ``truncated``; return ``done`` ``[B]`` on the CPU."""
    _tensor(step.terminated, (B,), torch.bool, f"{where}: terminated", rule="flags")
    _tensor(step.truncated, (B,), torch.bool, f"{where}: truncated", rule="flags")
    both = (step.terminated & step.truncated).cpu()
    if bool(both.any()):
        raise _fail(
            "flags",
            f"{where}: row {int(both.nonzero()[0])} is both terminated and truncated; a time limit "
            f"is a truncation, never a termination: set exactly one.",
        )
    done = (step.terminated | step.truncated).cpu()
    if reset and bool(done.any()):
        raise _fail("reset_clean", f"{where}: row {int(done.nonzero()[0])} is terminated or truncated after reset.")
    return done


def _check_avail(av: Any, g: Any, B: int, what: str) -> None:
    if not g.discrete:
        if av is not None:
            raise _fail("avail_shape", f"{what} must be None for a continuous group, got {type(av).__name__}.")
        return
    _tensor(av, (B, g.n_agents, g.n_actions), torch.bool, what, rule="avail_shape")
    none = ~av.any(-1).cpu()
    if bool(none.any()):
        b, i = (int(x) for x in none.nonzero()[0])
        raise _fail(
            "no_legal_action",
            f"{what}: row {b}, agent {g.agents[i]} has no legal action; every agent (alive or not) "
            f"needs at least one (a dead agent: its no-op).",
        )


def _first_row(a: torch.Tensor, b: torch.Tensor, rows: torch.Tensor) -> Optional[int]:
    """The first row in ``rows`` (``[B]`` bool) where ``a`` and ``b`` differ, or ``None``."""
    differ = (a != b).reshape(a.shape[0], -1).any(-1).cpu() & rows
    return int(differ.nonzero()[0]) if bool(differ.any()) else None


def _final_differs(env: MultiAgentEnv, text: str) -> EnvRuleError:
    """A ``final_*`` field that differs from the current one in a row that did not end."""
    return _fail("final_matches", text)


def _check_finals(env: MultiAgentEnv, step: Step, done: torch.Tensor, where: str) -> None:
    info = env.info
    B, live = info.num_envs, ~done
    if bool(done.any()) and (step.final_obs is None or step.final_state is None):
        raise _fail(
            "final_given",
            f"{where}: row {int(done.nonzero()[0])} ended but final_obs / final_state is None; "
            f"expected the ended episode's last observation there.",
        )
    if step.final_state is not None:
        _tensor(step.final_state, (B, info.state_dim), torch.float32, f"{where}: final_state", True, "state_shape")
        row = _first_row(step.final_state, step.state, live)
        if row is not None:
            raise _final_differs(env, f"{where}: final_state differs from state in row {row}, which did not end.")
    if step.final_obs is not None:
        _same_groups(step.final_obs, info, f"{where}: final_obs")
    fa = step.final_avail_actions
    if fa is not None:
        _same_groups(fa, info, f"{where}: final_avail_actions")
    for name, g in info.groups.items():
        what = f"{where}: group '{name}'"
        if step.final_obs is not None:
            fo = step.final_obs[name]
            _check_obs(fo, g, B, f"{what}: final_obs")
            row = _first_obs_row(fo, step.obs[name], live)
            if row is not None:
                raise _final_differs(env, f"{what}: final_obs differs from obs in row {row}, which did not end.")
        if fa is not None:
            final_avail, avail = fa[name], step.avail_actions[name]
            _check_avail(final_avail, g, B, f"{what}: final_avail_actions")
            if final_avail is not None and avail is not None:  # a discrete group: both checked tensors
                row = _first_row(final_avail, avail, live)
                if row is not None:
                    raise _final_differs(
                        env, f"{what}: final_avail_actions differs from avail_actions in row {row}, which did not end."
                    )


def _check_extras(step: Step, info: EnvInfo, where: str) -> None:
    declared: Dict[str, Any] = info.extra_columns or {}
    extras = step.extras if step.extras is not None else {}
    if not isinstance(extras, dict) or sorted(extras) != sorted(declared):
        got = sorted(extras) if isinstance(extras, dict) else type(extras).__name__
        raise _fail(
            "extras",
            f"{where}: extras must hold exactly the columns declared in info.extra_columns "
            f"{sorted(declared)}, got {got}.",
        )
    B = info.num_envs
    for col, spec in declared.items():
        _same_groups(extras[col], info, f"{where}: extras['{col}']")
        for name, g in info.groups.items():
            _tensor(
                extras[col][name],
                (B, g.n_agents),
                spec.dtype,
                f"{where}: extras['{col}'] of group '{name}'",
                rule="extras",
            )
