"""Batched JAX envs (JaxMARL's API) as one :class:`~marl.env.MultiAgentEnv`: the machinery SMAX and the
JaxMARL families (:mod:`marl.envs.jaxmarl_envs`) share.

JaxMARL (Rutherford et al. 2023, "JaxMARL: Multi-Agent RL Environments and Algorithms in JAX",
arXiv:2311.10090) writes each env as pure functions ``reset(key) -> (obs, state)`` and
``step_env(key, state, actions) -> (obs, state, rewards, dones, infos)`` of one copy. Here the
``B`` copies are one ``jax.vmap`` of those functions inside one ``jax.jit``: a call steps every
copy, resets (inside the same jitted function, with ``jnp.where``; only in calls where some copy
ended) the copies whose episode ended, and returns the ended episodes' last observation / state /
legal actions as ``final_*``.
Each field is moved to torch once per step (``jax.device_get`` -> numpy -> ``torch.from_numpy``).

What an env family supplies is a :class:`JaxSpec`: how to read one copy's JaxMARL output as
per-agent arrays (``observe``) and how to read a transition's reward, end flags and episode
metrics (``outcome``). :func:`batched_fns` turns a spec into the jitted batched pair and
:class:`JaxBatchEnv` into the marl env (PRNG streams, groups, torch conversion, exact resume).

Seeds: ``reset(seed)`` gives copy ``b`` the key ``jax.random.PRNGKey(seed + b)``; each copy then
splits its own key every step (``key, k_step, k_reset = split(key, 3)``), so copy ``b`` of a batch
equals copy 0 of a batch reset with ``seed + b`` fed the same actions.
"""

from __future__ import annotations

import functools
import importlib
import io
import os
import sys
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import gymnasium as gym
import numpy as np
import torch

from marl.env import MarlError, MultiAgentEnv, Observation, Step
from marl.env.rules import EnvRuleError
from marl.envs.common import per_copy

JAXMARL_HINT = 'pip install "marl-rllib[jaxmarl]"  (i.e. pip install jaxmarl==0.2.0)'


def limit_xla_threads() -> None:
    """Keep XLA's CPU backend to one intra-op thread unless the user set ``XLA_FLAGS``.

    Only effective before jax creates its CPU backend (the first jax computation
    in the process). Batched JAX env steps are many small ops; on a shared
    2-core machine a single thread is as fast and leaves the other core to torch.
    """
    if "XLA_FLAGS" not in os.environ:
        os.environ["XLA_FLAGS"] = "--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1"
    os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")  # a GPU jax must not grab all memory


def import_quietly(module: str) -> None:
    """Import ``module`` with its prints swallowed and ``sys.stdout`` / ``sys.stderr`` preserved.

    jaxmarl 0.2.0 prints a note about optional envs on import, and its mabrax
    module resets ``sys.stdout`` / ``sys.stderr`` to ``sys.__stdout__`` /
    ``sys.__stderr__`` (which breaks notebook and pytest output capture).
    """
    if module in sys.modules:
        return
    saved = sys.stdout, sys.stderr, sys.__stdout__
    sink = io.StringIO()
    # jaxmarl "restores" stdout to __stdout__: keep it ours
    sys.stdout = sys.__stdout__ = sink  # type: ignore[misc,assignment]
    try:
        importlib.import_module(module)
    finally:
        sys.stdout, sys.stderr, sys.__stdout__ = saved  # type: ignore[misc]


def import_jaxmarl(family: str, hint: str = JAXMARL_HINT):
    """``(jax, jaxmarl)`` with XLA limited to one thread first.

    Raises:
        MarlError: jax or jaxmarl cannot be imported; the message names ``family`` and ``hint``
            (the pip command).
    """
    limit_xla_threads()
    try:
        import jax

        import_quietly("jaxmarl")
        import jaxmarl
    except ImportError as e:
        raise MarlError(
            f"The '{family}' env family needs JaxMARL (and jax), which could not be imported ({e}). "
            f"Install it with: {hint}"
        ) from e
    return jax, jaxmarl


@dataclass(frozen=True)
class JaxSpec:
    """How one copy of a JaxMARL env is read (all functions are traced inside ``jax.jit(jax.vmap(...))``).

    Attributes:
        env: the JaxMARL env object (``reset``, ``step_env``).
        agents: JaxMARL's agent keys in marl's agent order.
        observe: ``(obs_out, state) -> (obs, world_state, avail, alive)``: ``obs`` ``[n, *shape]`` (or a
            dict key -> ``[n, *shape_k]``), ``world_state`` ``[S]`` float32, ``avail`` ``[n, A]`` bool,
            ``alive`` ``[n]`` bool. ``obs_out`` is what JaxMARL's ``reset`` / ``step_env`` returned.
        outcome: ``(old_state, new_state, rewards, dones, infos) -> (reward [n] float32, terminated,
            truncated, metrics)``, ``metrics`` a dict name -> scalar float32 (episode metrics, read
            in rows whose episode ended).
        metric_names: the keys of ``metrics`` (the zeros :meth:`JaxBatchEnv.reset` reports).
        action_dtype: the dtype JaxMARL's actions take (jax runs without x64: int32).
        summed_metrics: the metrics that ``outcome`` reports per step (e.g. a soup delivered on this
            step) and the env reports summed over the episode (the soups of the episode).
    """

    env: Any
    agents: Sequence[Any]
    observe: Callable[..., Tuple[Any, Any, Any, Any]]
    outcome: Callable[..., Tuple[Any, Any, Any, Dict[str, Any]]]
    metric_names: Tuple[str, ...] = ()
    action_dtype: Any = np.int32
    summed_metrics: Tuple[str, ...] = ()


def batched_fns(jax, spec: JaxSpec):
    """The jitted batched ``reset(keys)`` and ``step(keys, states, actions)`` of ``spec``.

    reset: ``keys [B, 2]`` -> ``(keys, states, current)``.
    step:  ``(keys, states, actions [B, n])`` -> ``(keys, states, current, final, (reward [B, n],
    terminated [B], truncated [B], metrics {name: [B]}))`` where ``current`` and ``final`` are
    ``(obs [B, n, ...], state [B, S], avail [B, n, A] bool, alive [B, n] bool)``: ``current`` after
    the reset of the copies whose episode ended, ``final`` before it.
    """
    jnp = jax.numpy
    env, agents = spec.env, list(spec.agents)

    def strong(tree):
        # reset leaves some Python-scalar leaves weakly typed while step outputs are
        # strongly typed; equal avals keep step from compiling a second time
        return jax.tree.map(lambda x: jnp.asarray(x, dtype=x.dtype), tree)

    def reset_one(key):
        key, k_reset = jax.random.split(key)
        obs_out, st = env.reset(k_reset)
        return key, strong(st), spec.observe(obs_out, st)

    def transition(key, st, actions):
        key, k_step, k_reset = jax.random.split(key, 3)
        obs_out, new_st, rew, dones, infos = env.step_env(k_step, st, {a: actions[i] for i, a in enumerate(agents)})
        outcome = spec.outcome(st, new_st, rew, dones, infos)
        return key, k_reset, new_st, spec.observe(obs_out, new_st), outcome

    def restart(done, k_reset, new_st, final):
        fresh_obs, fresh_st = env.reset(k_reset)
        fresh = spec.observe(fresh_obs, fresh_st)
        pick = functools.partial(jax.tree.map, lambda new, old: jnp.where(done, new, old))
        return strong(pick(fresh_st, new_st)), pick(fresh, final)

    def step(keys, states, actions):
        keys, k_reset, new_st, final, outcome = jax.vmap(transition)(keys, states, actions)
        done = outcome[1] | outcome[2]
        # JaxMARL's auto-reset computes a reset every step. Under vmap a per-copy cond runs both
        # branches, so the batch-wide cond is what skips it in steps where no copy ended (most
        # steps of fixed-length episodes; STORM's reset is as costly as its step)
        st, current = jax.lax.cond(
            done.any(),
            lambda: jax.vmap(restart)(done, k_reset, new_st, final),
            lambda: (strong(new_st), final),
        )
        return keys, st, current, final, outcome

    return jax.jit(jax.vmap(reset_one)), jax.jit(step)


def _obs_dtype(space: gym.spaces.Space) -> Any:
    """numpy dtype of one observation field: uint8 stays uint8, other dtypes become float32."""
    return np.uint8 if space.dtype == np.uint8 else np.float32


class JaxBatchEnv(MultiAgentEnv):
    """Base of the batched JAX adapters: ``B = num_envs`` copies stepped as one jitted ``jax.vmap`` call.

    A subclass sets ``self.info`` (its groups list the agents in the spec's order; a group's agents are
    contiguous) and calls :meth:`_init_batch`. Tensors: ``obs[g]`` ``[B, N_g, *shape]`` with the group's
    space dtype (a ``Dict`` space: one such tensor per key), ``state`` ``[B, S]`` float32,
    ``avail_actions[g]`` ``[B, N_g, A]`` bool, ``alive[g]`` / ``reward[g]`` ``[B, N_g]`` bool / float32,
    ``info["episode_metrics"][name]`` ``[B]`` float32.

    Raises (methods): :class:`MarlError` on ``step`` before ``reset``; :class:`EnvRuleError` when JaxMARL
    returns a reward or flag that is not one value per copy (and agent).
    """

    def _init_batch(self, jax, spec: JaxSpec, fns: Tuple[Any, Any], seed: Optional[int]) -> None:
        """Keep the jitted pair ``fns`` (from :func:`batched_fns` of ``spec``) and the seed of the first reset."""
        self._jax = jax
        self._reset_fn, self._step_fn = fns
        self._metric_names = tuple(spec.metric_names)
        self._summed = tuple(spec.summed_metrics)
        self._sums: Dict[str, np.ndarray] = {}  # summed metric -> [B] running sum of the current episodes
        self._action_dtype = spec.action_dtype
        self._default_seed = 0 if seed is None else int(seed)
        self._keys = None  # [B, 2] uint32, one PRNG stream per copy
        self._states = None  # batched JaxMARL State pytree
        self._current = None  # (obs, state, avail, alive) jax arrays after the last step's resets
        self._slices = {}  # group -> its agents' slice of the agent axis
        for g in self.info.groups.values():
            start = self.info.agents.index(g.agents[0])
            self._slices[g.name] = slice(start, start + g.n_agents)
        # every group of a JAX env has the same observation fields (one vmapped observation function)
        self._dtypes = _field_dtypes(next(iter(self.info.groups.values())).obs_space)

    # ------------------------------------------------------------------ API

    def reset(self, seed: Optional[int] = None) -> Step:
        """Reset all copies: copy ``b`` gets ``PRNGKey(seed + b)``.

        ``seed=None``: the constructor ``seed`` on the first reset, afterwards the
        copies' own key streams continue (fresh, still reproducible episodes).
        """
        jnp = self._jax.numpy
        B = self.num_envs
        if seed is None and self._keys is not None:
            keys = self._keys
        else:
            base = self._default_seed if seed is None else int(seed)
            seeds = np.arange(base, base + B, dtype=np.int64) % (2**32)
            keys = self._jax.vmap(self._jax.random.PRNGKey)(jnp.asarray(seeds.astype(np.uint32)))
        self._keys, self._states, cur = self._reset_fn(keys)
        self._sums = {k: np.zeros(B, np.float32) for k in self._summed}
        first = self._to_torch(self._jax.device_get(cur))
        return Step.at_reset(first, info={"episode_metrics": {k: torch.zeros(B) for k in self._metric_names}})

    def step_env(self, actions: Dict[str, torch.Tensor]) -> Step:
        """Step every copy in one jitted call (see :meth:`MultiAgentEnv.step_env`).

        The same XLA call also resets the copies whose episode ended (keeping
        one PRNG split per step, as in JaxMARL); :meth:`reset_rows` hands out
        their first observation.

        Args:
            actions: group -> ``[B, N_g]`` int (checked by :meth:`step`).
        """
        if self._states is None:
            raise MarlError("Call reset() before step().")
        acts = self._join_actions(actions)
        self._keys, self._states, self._current, final, rest = self._step_fn(self._keys, self._states, acts)
        final, (reward, terminated, truncated, metrics) = self._jax.device_get((final, rest))
        obs, state, avail, alive = self._to_torch(final)
        B, n = self.num_envs, len(self.info.agents)
        reward_t = per_copy(self._reward(np.array(reward), metrics), (B, n), self._fail("reward"))
        flags = [
            per_copy(np.array(x), (B,), self._fail(k))
            for x, k in ((terminated, "terminated"), (truncated, "truncated"))
        ]
        metrics = self._episode_sums(metrics, (flags[0] | flags[1]).numpy())
        return Step(
            obs=obs,
            state=state,
            avail_actions=avail,
            alive=alive,
            reward=self._split(reward_t),
            terminated=flags[0],
            truncated=flags[1],
            info={
                "episode_metrics": {
                    k: per_copy(np.array(metrics[k], dtype=np.float32), (B,), self._fail(k)) for k in self._metric_names
                }
            },
        )

    def reset_rows(self, rows: torch.Tensor) -> Observation:
        """The observation after the reset of the copies in ``rows``, which :meth:`step_env` already did."""
        return self._to_torch(self._jax.device_get(self._current))

    def close(self) -> None:
        self._states = self._keys = self._current = None

    def get_state(self) -> Dict[str, Any]:
        """The copies' PRNG keys, JaxMARL state pytrees, last observations and the running sums of the
        summed metrics as numpy (exact resume)."""
        host = self._jax.device_get((self._keys, self._states, self._current))
        return {"arrays": self._jax.tree.map(np.array, host), "sums": {k: v.copy() for k, v in self._sums.items()}}

    def set_state(self, state: Dict[str, Any]) -> None:
        """Restore a :meth:`get_state` dict of an env of the same scenario, options and ``num_envs``."""
        jnp = self._jax.numpy
        self._keys, self._states, self._current = self._jax.tree.map(jnp.asarray, state["arrays"])
        self._sums = {k: np.array(v, dtype=np.float32) for k, v in state.get("sums", {}).items()}

    # ------------------------------------------------------------------ helpers

    def _episode_sums(self, metrics: Dict[str, Any], done: np.ndarray) -> Dict[str, Any]:
        """``metrics`` with each summed metric replaced by its sum over the episode so far (this step
        included); the sums of the copies whose episode ended (``done`` ``[B]`` bool) restart at 0."""
        out = dict(metrics)
        for k, total in self._sums.items():
            total += np.asarray(metrics[k], dtype=np.float32)
            out[k] = total.copy()
            total[done] = 0.0
        return out

    def _reward(self, reward: np.ndarray, metrics: Dict[str, Any]) -> np.ndarray:
        """The ``[B, n]`` reward handed out: JaxMARL's (a family may add e.g. a shaped reward from ``metrics``)."""
        return reward

    def _join_actions(self, actions: Dict[str, torch.Tensor]) -> np.ndarray:
        """group -> ``[B, N_g]`` actions (continuous: ``[B, N_g, d]``, clipped to the group's ``Box``) ->
        ``[B, n]`` (``[B, n, d]``) in agent order, in the spec's action dtype."""
        parts = []
        for name, g in self.info.groups.items():
            a = actions[name].cpu().numpy()
            box = g.action_space
            if isinstance(box, gym.spaces.Box):
                a = np.clip(a, box.low, box.high)
            parts.append(a)
        joined = parts[0] if len(parts) == 1 else np.concatenate(parts, axis=1)
        return joined.astype(self._action_dtype)

    def _split(self, t: Any) -> Dict[str, Any]:
        """``[B, n, ...]`` in agent order (a tensor or a dict of them) -> group -> ``[B, N_g, ...]``."""
        if len(self._slices) == 1:
            return {g: t for g in self._slices}
        if isinstance(t, dict):
            return {g: {k: v[:, s] for k, v in t.items()} for g, s in self._slices.items()}
        return {g: t[:, s] for g, s in self._slices.items()}

    def _to_torch(self, fields: Tuple[Any, ...]) -> Observation:
        """(obs, state, avail, alive) numpy -> an :class:`Observation` of group dicts of torch tensors
        (obs in its space's dtype; ``avail`` ``None`` for continuous groups, as the contract has it)."""
        obs, state, avail, alive = fields
        dtypes = self._dtypes
        if isinstance(obs, dict):
            obs_t: Any = {k: torch.from_numpy(np.array(v, dtype=dtypes[k])) for k, v in obs.items()}
        else:
            obs_t = torch.from_numpy(np.array(obs, dtype=dtypes[None]))
        masks = self._split(torch.from_numpy(np.array(avail, dtype=bool)))
        groups = self.info.groups
        return Observation(
            self._split(obs_t),
            torch.from_numpy(np.array(state, dtype=np.float32)),
            {g: (m if groups[g].discrete else None) for g, m in masks.items()},
            self._split(torch.from_numpy(np.array(alive, dtype=bool))),
        )

    def _fail(self, key: str):
        """``detail -> EnvRuleError`` for a JaxMARL output the adapter cannot read as one value per copy (and agent)."""
        rule = "reward_space" if key == "reward" else "flags"
        return lambda detail: EnvRuleError(rule, f"{self.info.family}:{self.info.scenario}", detail, key=key)


def _field_dtypes(space: gym.spaces.Space) -> Dict[Optional[str], Any]:
    """Observation field -> numpy dtype (``None`` for a ``Box``, the keys of a ``Dict``)."""
    if isinstance(space, gym.spaces.Dict):
        return {k: _obs_dtype(s) for k, s in space.spaces.items()}
    return {None: _obs_dtype(space)}


def agent_ids(prefix: str, n: int) -> List[str]:
    """marl agent ids ``prefix_0 .. prefix_{n-1}``."""
    return [f"{prefix}_{i}" for i in range(n)]
