"""Replay buffers of the off-policy families: whole joint episodes (:class:`JointEpisodeBuffer`,
the QMIX family's) and joint transitions (:class:`TransitionBuffer`, for off-policy actor-critics).
Both are filled from :class:`~marl.engine.runner.BatchedEnvRunner` rollouts and sampled uniformly
with a numpy ``Generator`` by :class:`~marl.engine.off_policy.OffPolicyTrainer`.

Joint episode buffer (value decomposition, and the off-policy actor-critics' recurrent actors).

RLlib 2.60's ``MultiAgentEpisodeReplayBuffer`` samples single steps per module,
not aligned across agents and not as sequences, so a recurrent agent network
and a mixer over all agents of a team cannot be trained from it. This buffer stores whole episodes with all
agents aligned, in fixed-size numpy arrays (the ``EpisodeBatch`` layout of pymarl, the
QMIX authors' code released with SMAC: Samvelyan et al. 2019, arXiv 1902.04043).

It is filled straight from :class:`~marl.engine.runner.BatchedEnvRunner`
rollouts (time-major ``[T, B, ...]`` pieces of episodes that started and ended
anywhere in the rollout): each env copy ``b`` writes into an *open* slot until
its episode ends, then the slot is committed and becomes sampleable. Episodes
therefore may span several rollouts, and no Python loop runs over env copies.

Shapes (``C`` capacity in episodes, ``L`` = episode limit, ``N_m`` agents of
module ``m``):

==========================  ==============================  =============================
array                       shape                           meaning
==========================  ==============================  =============================
``<m>/obs``                 ``[C, L+1, N_m, D_m]`` float32  observation (with agent id),
                                                            the episode's last at index
                                                            ``length``; structured: one
                                                            ``<m>/obs/<key>`` per key, in
                                                            its dtype (uint8 stays uint8)
``<m>/avail``               ``[C, L+1, N_m, A_m]`` bool     legal actions (discrete)
``<m>/actions``             ``[C, L, N_m]`` int64           actions taken (continuous:
                            ``[C, L, N_m, K_m]`` float32
``<m>/rewards``             ``[C, L, N_m]`` float32         per-agent rewards
``<m>/alive``               ``[C, L, N_m]`` bool            agent acting at step t
``state``                   ``[C, L+1, S]`` float32         global state
``terminated``              ``[C, L]`` bool                 episode ended in an absorbing
                                                            state at t (truncation is not
                                                            termination: it bootstraps)
``filled``                  ``[C, L]`` bool                 t < episode length
==========================  ==============================  =============================
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Tuple

import numpy as np

from marl.config.checks import buffer_room
from marl.env import MarlError, flatten_columns


def obs_columns(shape: Dict[str, Any]) -> Dict[str, Tuple[Tuple[int, ...], Any]]:
    """A module's observation columns in a buffer: ``shape["obs"]`` (column -> ``(per-agent shape,
    numpy dtype)``, :meth:`marl.mapping.PolicyMapping.obs_columns`), else one float32 ``"obs"`` of
    ``obs_dim`` values (flat observations)."""
    return dict(shape.get("obs") or {"obs": ((int(shape["obs_dim"]),), np.float32)})


def rollout_columns(rollout: Dict[str, Any], drop: Tuple[str, ...] = ()) -> Dict[str, Dict[str, np.ndarray]]:
    """Module -> column -> numpy array of a runner rollout, structured observations flattened to
    ``obs/<key>`` and ``final_obs/<key>`` columns (:func:`~marl.env.contract.flatten_columns`)."""
    return {
        m: {k: v.numpy() for k, v in flatten_columns(cols).items() if k not in drop}
        for m, cols in rollout["modules"].items()
    }


class JointEpisodeBuffer:
    """FIFO buffer of whole, agent-aligned episodes (capacity counted in episodes).

    ``len(buffer)`` counts committed episodes, :attr:`ITEMS` names them in metrics
    (``buffer_episodes``) and :meth:`steps_in` counts the env steps of a sampled batch.

    Args:
        capacity: episodes kept; the oldest committed episode is evicted first.
        episode_limit: the longest episode ``L`` (steps); longer ones raise.
        num_envs: env copies ``B`` writing concurrently (each holds one open slot).
        module_shapes: module id -> ``{"n": N_m, "obs_dim": D_m}``, ``"action_dim": K_m`` (continuous; else
            indices) or ``"n_actions": A_m``, and ``"obs"`` (:func:`obs_columns`) for a structured observation.
        state_dim: ``S``.
        extra_columns: per-agent columns the env declares (``EnvInfo.extra_columns``):
            name -> ``(numpy dtype, fill value)``; stored as ``<m>/<name>`` ``[C, L, N_m]``
            for whoever rewrites committed episodes (e.g. off-beat reward redistribution),
            not sampled for the learners.

    Raises:
        MarlError: ``capacity`` is not larger than ``2 * num_envs`` (open slots of
            the running episodes would be evicted before they complete).
    """

    ITEMS = "episodes"  # what one entry is (the trainer's ``buffer_<ITEMS>`` metric)

    def __init__(
        self,
        capacity: int,
        episode_limit: int,
        num_envs: int,
        module_shapes: Dict[str, Dict[str, Any]],
        state_dim: int,
        extra_columns: Optional[Dict[str, Tuple[Any, Any]]] = None,
    ):
        check_buffer_size(capacity, num_envs)
        if episode_limit <= 0:
            raise MarlError("the joint episode buffer needs an env with a finite episode_limit (got 0 = unbounded).")
        self.capacity, self.limit, self.num_envs = int(capacity), int(episode_limit), int(num_envs)
        self.module_shapes = {m: dict(s) for m, s in module_shapes.items()}
        self.state_dim = int(state_dim)
        self.extra_columns = dict(extra_columns or {})
        C, L = self.capacity, self.limit
        self.data: Dict[str, np.ndarray] = {
            "state": np.zeros((C, L + 1, state_dim), np.float32),
            "terminated": np.zeros((C, L), bool),
            "filled": np.zeros((C, L), bool),
        }
        self.obs_cols = {m: list(obs_columns(s)) for m, s in self.module_shapes.items()}
        for m, s in self.module_shapes.items():
            n = s["n"]
            for col, (shape, dtype) in obs_columns(s).items():
                self.data[f"{m}/{col}"] = np.zeros((C, L + 1, n, *shape), dtype)
            self.data[f"{m}/actions"] = action_array((C, L, n), m, s, strict=False)
            self.data[f"{m}/rewards"] = np.zeros((C, L, n), np.float32)
            self.data[f"{m}/alive"] = np.zeros((C, L, n), bool)
            for col, (dtype, fill) in self.extra_columns.items():
                self.data[f"{m}/{col}"] = np.full((C, L, n), fill, dtype)
            if s.get("n_actions"):
                self.data[f"{m}/avail"] = np.zeros((C, L + 1, n, s["n_actions"]), bool)
        self.lengths = np.zeros(C, np.int64)
        self.committed = np.zeros(C, bool)
        self._ptr = 0  # next slot to hand out (ring)
        self._slot = np.full(self.num_envs, -1, np.int64)  # open slot per env copy (-1: none)
        self._pos = np.zeros(self.num_envs, np.int64)  # next step index in the open slot
        self.episodes_added = 0
        self._opened = 0  # slots handed out so far (slots [0, min(_opened, C)) have been used)
        self.steps_dropped = 0  # steps of open episodes dropped because their env copy was lost
        self.just_committed: List[int] = []  # slots committed by the last add_rollout (reward redistribution)

    # ---------------------------------------------------------------- filling
    def __len__(self) -> int:
        """Committed (sampleable) episodes."""
        return int(self.committed.sum())

    def _open(self, cols: np.ndarray) -> None:
        """Hand out fresh slots to env copies ``cols`` (a new episode starts there)."""
        slots = (self._ptr + np.arange(len(cols))) % self.capacity
        self._ptr = int((self._ptr + len(cols)) % self.capacity)
        self._opened += len(cols)
        self.committed[slots] = False
        self.data["filled"][slots] = False
        self.data["terminated"][slots] = False
        self._slot[cols] = slots
        self._pos[cols] = 0

    def add_rollout(self, rollout: Dict[str, Any]) -> int:
        """Write a time-major rollout of :class:`BatchedEnvRunner` (``[T, B, ...]`` torch
        tensors; see its ``sample``) into the open slots; return the episodes committed.

        ``rollout["env_copies"]`` (``[B]``, optional) says which of the ``num_envs`` copies the
        rollout's columns are; copies it lacks (a lost env runner's) have their open episodes
        dropped, and write again from their next episode start (a restarted runner starts fresh).

        Raises:
            MarlError: the rollout's ``B`` differs from ``num_envs`` and it has no ``env_copies``,
                its copies are not distinct copies of ``num_envs``, an episode is longer than
                ``episode_limit``, or a reward is NaN / infinite (never stored).
        """
        starts = rollout["starts"].numpy()
        T, B = starts.shape
        copies = self._copies(rollout, B)
        done = (rollout["terminated"] | rollout["truncated"]).numpy()
        term = rollout["terminated"].numpy()
        mods = rollout_columns(rollout)
        _check_finite_rewards(mods)
        state, final_state = rollout["state"].numpy(), rollout["final_state"].numpy()
        committed = 0
        self.just_committed = []
        for t in range(T):
            if starts[t].any():
                self._open(copies[np.flatnonzero(starts[t])])
            rcols = np.flatnonzero(self._slot[copies] >= 0)  # rollout columns whose episode start we saw
            if len(rcols) == 0:
                continue
            cols = copies[rcols]
            slot, pos = self._slot[cols], self._pos[cols]
            if (pos >= self.limit).any():
                raise MarlError(
                    f"an episode ran past episode_limit={self.limit} steps; the env's EnvInfo.episode_limit is wrong"
                )
            self._write_step(mods, state, t, rcols, slot, pos)
            ended = done[t, rcols]
            if ended.any():
                c, s, p = cols[ended], slot[ended], pos[ended]
                self._write_final(mods, final_state, t, rcols[ended], s, p + 1)
                self.data["terminated"][s, p] = term[t, rcols[ended]]
                self.lengths[s] = p + 1
                self.committed[s] = True
                self.just_committed.extend(int(x) for x in s)
                self._slot[c] = -1
                committed += len(c)
            self._pos[cols] += 1
        self.episodes_added += committed
        return committed

    def _copies(self, rollout: Dict[str, Any], B: int) -> np.ndarray:
        """The buffer's env copies of the rollout's ``B`` columns; the open episodes of the
        copies it lacks are dropped (counted in ``steps_dropped``)."""
        copies = rollout.get("env_copies")
        if copies is None and B != self.num_envs:
            raise MarlError(f"rollout has {B} env copies, the buffer was built for {self.num_envs}")
        copies = np.arange(B) if copies is None else np.asarray(copies, np.int64)
        if (
            len(copies) != B
            or len(np.unique(copies)) != B
            or (B and not 0 <= copies.min() <= copies.max() < self.num_envs)
        ):
            raise MarlError(
                f"rollout env_copies={copies.tolist()} are not {B} distinct copies of the "
                f"{self.num_envs} the buffer was built for (0..{self.num_envs - 1})"
            )
        missing = np.setdiff1d(np.arange(self.num_envs), copies)
        lost = missing[self._slot[missing] >= 0]
        self.steps_dropped += int(self._pos[lost].sum())
        self._slot[lost] = -1
        return copies

    def _write_step(
        self,
        mods: Dict[str, Dict[str, np.ndarray]],
        state: np.ndarray,
        t: int,
        cols: np.ndarray,
        slot: np.ndarray,
        pos: np.ndarray,
    ) -> None:
        """Step ``t`` of rollout columns ``cols`` (module -> column -> ``[T, B, ...]``, ``state [T, B, S]``)
        goes to index ``pos`` of episode slots ``slot``."""
        d = self.data
        d["state"][slot, pos] = state[t, cols]
        d["filled"][slot, pos] = True
        for m, x in mods.items():
            for col in self.obs_cols[m]:
                d[f"{m}/{col}"][slot, pos] = x[col][t, cols]
            d[f"{m}/actions"][slot, pos] = x["actions"][t, cols]
            d[f"{m}/rewards"][slot, pos] = x["rewards"][t, cols]
            d[f"{m}/alive"][slot, pos] = x["alive"][t, cols]
            for col in self.extra_columns:
                d[f"{m}/{col}"][slot, pos] = x[col][t, cols]
            if f"{m}/avail" in d:
                d[f"{m}/avail"][slot, pos] = x["avail"][t, cols]

    def _write_final(
        self,
        mods: Dict[str, Dict[str, np.ndarray]],
        final_state: np.ndarray,
        t: int,
        cols: np.ndarray,
        slot: np.ndarray,
        pos: np.ndarray,
    ) -> None:
        """The ended episode's last observation goes to index ``length`` (bootstrap input)."""
        d = self.data
        d["state"][slot, pos] = final_state[t, cols]
        for m, x in mods.items():
            for col in self.obs_cols[m]:
                d[f"{m}/{col}"][slot, pos] = x[f"final_{col}"][t, cols]
            if f"{m}/avail" in d:
                d[f"{m}/avail"][slot, pos] = x["final_avail"][t, cols]

    def _is_extra(self, key: str) -> bool:
        return key.rpartition("/")[2] in self.extra_columns and "/" in key

    def column(self, module: str, name: str, slot: int, length: int, default: Any = True) -> np.ndarray:
        """``[length, N_m]`` values of extra column ``name`` in episode ``slot``; ``default``
        everywhere when the env declares no such column."""
        key = f"{module}/{name}"
        if key in self.data:
            return self.data[key][slot, :length]
        return np.full((length, self.module_shapes[module]["n"]), default)

    # ---------------------------------------------------------------- sampling
    def sample(self, batch_size: int, rng: np.random.Generator) -> Dict[str, np.ndarray]:
        """``batch_size`` committed episodes drawn uniformly (with replacement, as
        pymarl), cut to the longest one ``T'``: step arrays ``[E, T', ...]``,
        observation-like arrays ``[E, T'+1, ...]``.

        Raises:
            MarlError: the buffer holds no committed episode.
        """
        idx = np.flatnonzero(self.committed)
        if len(idx) == 0:
            raise MarlError("the replay buffer is empty: sample after episodes have been added")
        pick = rng.choice(idx, size=int(batch_size), replace=len(idx) < batch_size)
        T = int(self.lengths[pick].max())
        out = {}
        for k, v in self.data.items():
            if self._is_extra(k):  # used when episodes are committed, not by the learners
                continue
            steps = T + 1 if v.shape[1] == self.limit + 1 else T
            out[k] = v[pick, :steps]
        return out

    @staticmethod
    def steps_in(batch: Dict[str, np.ndarray]) -> int:
        """Env steps in a batch of :meth:`sample` (its filled steps)."""
        return int(batch["filled"].sum())

    # ---------------------------------------------------------------- checkpoints
    def get_state(self) -> Dict[str, Any]:
        """The used slots as they are (committed episodes, the open slots of running episodes,
        the ring pointer and every copy's write position), so that a buffer of the same capacity
        and ``num_envs`` restored from it samples and fills exactly as this one would (exact
        resume, docs/index.md); slots never used are not saved."""
        n = min(self._opened, self.capacity)
        return {
            "capacity": self.capacity,
            "episode_limit": self.limit,
            "episodes_added": self.episodes_added,
            "used": n,
            "ptr": self._ptr,
            "opened": self._opened,
            "slot": self._slot.copy(),
            "pos": self._pos.copy(),
            "committed": self.committed[:n].copy(),
            "lengths": self.lengths[:n].copy(),
            "data": {k: v[:n].copy() for k, v in self.data.items()},
        }

    def set_state(self, state: Dict[str, Any]) -> None:
        """Restore from :meth:`get_state`: exactly (open slots included) into a buffer of the same
        capacity and ``num_envs``; otherwise the committed episodes only (a smaller capacity keeps
        the newest ones) and the env copies start new episodes. Checkpoints of older versions
        hold committed episodes only (oldest first) and load the second way.

        Raises:
            MarlError: the stored episodes have other shapes (another env or mapping).
        """
        optional = {k for k in self.data if self._is_extra(k)}  # absent in older checkpoints
        if int(state["episode_limit"]) != self.limit or not (
            set(self.data) - optional <= set(state["data"]) <= set(self.data)
        ):
            raise MarlError("the checkpoint's replay buffer was made for another env or policy mapping")
        for k, v in state["data"].items():
            if v.shape[1:] != self.data[k].shape[1:]:
                raise MarlError(f"replay buffer field '{k}' has shape {v.shape[1:]}, expected {self.data[k].shape[1:]}")
        if "slot" in state and int(state["capacity"]) == self.capacity and len(state["slot"]) == self.num_envs:
            self._load_exact(state)
        else:
            self._load_committed(*_committed_oldest_first(state))
        self.episodes_added = int(state["episodes_added"])

    def _load_exact(self, state: Dict[str, Any]) -> None:
        n = int(state["used"])
        for k, v in self.data.items():
            v[...] = self.extra_columns[k.rpartition("/")[2]][1] if self._is_extra(k) else 0  # as built
            if k in state["data"]:
                v[:n] = state["data"][k]
        self.committed[:] = False
        self.lengths[:] = 0
        self.committed[:n], self.lengths[:n] = state["committed"], state["lengths"]
        self._slot[:], self._pos[:] = state["slot"], state["pos"]
        self._ptr, self._opened = int(state["ptr"]), int(state["opened"])

    def _load_committed(self, lengths: np.ndarray, data: Dict[str, np.ndarray]) -> None:
        """Committed episodes ``lengths`` / ``data`` (oldest first) into slots ``0..n-1``; no open slots."""
        n = min(len(lengths), self.capacity)
        self.committed[:] = False
        self._slot[:] = -1
        for k, v in data.items():
            self.data[k][:n] = v[len(v) - n :]
        self.lengths[:n] = lengths[len(lengths) - n :]
        self.committed[:n] = True
        self._ptr = n % self.capacity
        self._opened = n


def _committed_oldest_first(state: Dict[str, Any]) -> Tuple[np.ndarray, Dict[str, np.ndarray]]:
    """``(lengths, data)`` of the committed episodes of a saved buffer, oldest first."""
    if "slot" not in state:  # the older format holds exactly these
        return state["lengths"], state["data"]
    n, ptr = int(state["used"]), int(state["ptr"])
    order = np.arange(n) if int(state["opened"]) <= n else np.argsort((np.arange(n) - ptr) % n)
    keep = order[state["committed"][order]]
    return state["lengths"][keep], {k: v[keep] for k, v in state["data"].items()}


def _check_finite_rewards(mods: Dict[str, Dict[str, np.ndarray]]) -> None:
    """Raise a :class:`MarlError` naming the module, rollout step, env copy and agent of the first
    NaN / infinite reward (one would poison every TD target it reaches; ``non_finite='off'``)."""
    for m, x in mods.items():
        r = x["rewards"]  # [T, B, N_m]
        if not np.isfinite(r).all():
            t, b, i = (int(v) for v in np.argwhere(~np.isfinite(r))[0])
            raise MarlError(
                f"Replay buffer: module '{m}' has reward {r[t, b, i]} at rollout step {t} (env copy {b}, "
                f"agent {i} of the module); non-finite rewards are never stored. Fix the env, or set "
                f"non_finite='mask' to replace them by 0."
            )


def check_buffer_size(capacity: int, num_envs: int) -> None:
    """Raise a :class:`MarlError` for a buffer of ``capacity`` episodes that cannot work with ``num_envs``
    copies writing at once (their open slots would be evicted before they complete); the config rules
    of the families check the same before Ray starts (:func:`marl.config.checks.buffer_room`)."""
    problem = buffer_room(capacity, num_envs)
    if problem:
        raise MarlError(problem)


class TransitionBuffer:
    """Ring buffer of joint transitions for the off-policy actor-critic families (IDDPG, MADDPG,
    MATD3, FACMAC, ISAC, MASAC): one row per env step of one env copy, with every agent of every
    module of that step side by side (a centralised critic reads all agents' actions of one step;
    MADDPG: Lowe et al. 2017, arXiv 1706.02275, Algorithm 1's replay buffer ``D``).

    Columns (``C`` capacity in transitions, ``N_m`` agents of module ``m``):

    ==============================  ===============================  ==============================
    array                           shape                            meaning
    ==============================  ===============================  ==============================
    ``<m>/obs``, ``<m>/next_obs``   ``[C, N_m, D_m]`` float32        observation at t and t+1 (the
                                                                     episode's last one if it ended;
                                                                     structured: per key, its dtype)
    ``<m>/actions``                 ``[C, N_m]`` int64 (discrete),   actions taken at t
                                    ``[C, N_m, K_m]`` float32
    ``<m>/rewards``                 ``[C, N_m]`` float32             per-agent rewards
    ``<m>/alive``                   ``[C, N_m]`` bool                agent acting at t
    ``<m>/avail``,                  ``[C, N_m, A_m]`` bool           legal actions at t and t+1
    ``<m>/next_avail``                                               (discrete modules only)
    ``state``, ``next_state``       ``[C, S]`` float32               global state at t and t+1
    ``terminated``                  ``[C]`` bool                     absorbing state at t+1 (a
                                                                     truncation bootstraps)
    ==============================  ===============================  ==============================

    Every transition of a rollout is complete when it is written (the runner gives the next
    observation of every step, ``final_obs``), so nothing stays open between rollouts and a lost
    env runner loses nothing. :attr:`just_committed` holds the rows the last :meth:`add_rollout`
    wrote.

    Args:
        capacity: transitions kept; the oldest is overwritten first.
        module_shapes: module id -> ``{"n": N_m, "obs_dim": D_m}`` and either ``"n_actions": A_m``
            (discrete) or ``"action_dim": K_m`` (continuous).
        state_dim: ``S``.

    Raises:
        MarlError: ``capacity < 1``, or a module with neither or both of ``n_actions`` / ``action_dim``.
    """

    ITEMS = "transitions"  # what one entry is (the trainer's ``buffer_<ITEMS>`` metric)

    def __init__(self, capacity: int, module_shapes: Dict[str, Dict[str, Any]], state_dim: int):
        if int(capacity) < 1:
            raise MarlError(f"a transition buffer needs capacity >= 1 transition, got {capacity}.")
        self.capacity, C = int(capacity), int(capacity)
        self.data: Dict[str, np.ndarray] = {
            "state": np.zeros((C, state_dim), np.float32),
            "next_state": np.zeros((C, state_dim), np.float32),
            "terminated": np.zeros(C, bool),
        }
        self.obs_cols = {m: list(obs_columns(s)) for m, s in module_shapes.items()}
        for m, s in module_shapes.items():
            n = s["n"]
            for col, (shape, dtype) in obs_columns(s).items():
                self.data[f"{m}/{col}"] = np.zeros((C, n, *shape), dtype)
                self.data[f"{m}/next_{col}"] = np.zeros((C, n, *shape), dtype)
            self.data[f"{m}/actions"] = action_array((C, n), m, s)  # checks n_actions xor action_dim
            self.data[f"{m}/rewards"] = np.zeros((C, n), np.float32)
            self.data[f"{m}/alive"] = np.zeros((C, n), bool)
            if s.get("n_actions"):
                for col in ("avail", "next_avail"):
                    self.data[f"{m}/{col}"] = np.zeros((C, n, s["n_actions"]), bool)
        self.ptr = 0  # next row to write (ring)
        self.size = 0  # rows holding a transition
        self.transitions_added = 0
        self.episodes_added = 0  # episodes that ended in the added rollouts (terminated or truncated)
        self.just_committed = np.zeros(0, np.int64)

    def __len__(self) -> int:
        """Transitions held (sampleable)."""
        return self.size

    def add_rollout(self, rollout: Dict[str, Any]) -> int:
        """Write the ``T x B`` transitions of a time-major rollout of :class:`BatchedEnvRunner`
        (``[T, B, ...]`` torch tensors; see its ``sample``), time-major; return how many.

        Raises:
            MarlError: a reward is NaN / infinite (never stored).
        """
        mods = rollout_columns(rollout, drop=("h",))
        _check_finite_rewards(mods)
        cols = self.rollout_columns(rollout, mods)
        n = len(cols["terminated"])
        keep = min(n, self.capacity)  # a rollout larger than the ring keeps its newest rows
        rows = (self.ptr + np.arange(n - keep, n)) % self.capacity
        for k, v in cols.items():
            self.data[k][rows] = v[n - keep :]
        self.ptr = int((self.ptr + n) % self.capacity)
        self.size = min(self.size + n, self.capacity)
        self.transitions_added += n
        self.episodes_added += int((rollout["terminated"] | rollout["truncated"]).sum())
        self.just_committed = rows
        return n

    def rollout_columns(self, rollout: Dict[str, Any], mods: Dict[str, Dict[str, np.ndarray]]) -> Dict[str, np.ndarray]:
        """The buffer's columns of a rollout, one row per ``(t, b)`` in time-major order ``t * B + b``."""
        T, B = rollout["terminated"].shape

        def rows(x: np.ndarray) -> np.ndarray:
            return x[:T].reshape(T * B, *x.shape[2:])

        cols = {
            "state": rows(rollout["state"].numpy()),
            "next_state": rows(rollout["final_state"].numpy()),
            "terminated": rows(rollout["terminated"].numpy()),
        }
        for m, x in mods.items():
            for c in self.obs_cols[m]:
                cols[f"{m}/{c}"], cols[f"{m}/next_{c}"] = rows(x[c]), rows(x[f"final_{c}"])
            for col, src in (
                ("actions", "actions"),
                ("rewards", "rewards"),
                ("alive", "alive"),
                ("avail", "avail"),
                ("next_avail", "final_avail"),
            ):
                if f"{m}/{col}" in self.data:
                    cols[f"{m}/{col}"] = rows(x[src])
        return cols

    def sample(self, batch_size: int, rng: np.random.Generator) -> Dict[str, np.ndarray]:
        """``batch_size`` transitions drawn uniformly with replacement: every column ``[batch_size, ...]``.

        Raises:
            MarlError: the buffer is empty.
        """
        if self.size == 0:
            raise MarlError("the transition buffer is empty: sample after rollouts have been added")
        idx = rng.integers(0, self.size, size=int(batch_size))
        return {k: v[idx] for k, v in self.data.items()}

    @staticmethod
    def steps_in(batch: Dict[str, np.ndarray]) -> int:
        """Env steps in a batch of :meth:`sample` (one per transition)."""
        return len(batch["terminated"])

    # ---------------------------------------------------------------- checkpoints
    def get_state(self) -> Dict[str, Any]:
        """The rows holding transitions, the ring pointer and the counters: a buffer of the same
        capacity restored from it samples and fills exactly as this one would."""
        return {
            "capacity": self.capacity,
            "ptr": self.ptr,
            "size": self.size,
            "transitions_added": self.transitions_added,
            "episodes_added": self.episodes_added,
            "data": {k: v[: self.size].copy() for k, v in self.data.items()},
        }

    def set_state(self, state: Dict[str, Any]) -> None:
        """Restore from :meth:`get_state`: exactly into a buffer of the same capacity; into another
        capacity the newest ``min(size, capacity)`` transitions, oldest first.

        Raises:
            MarlError: the saved columns differ from this buffer's (another env or mapping).
        """
        if set(state["data"]) != set(self.data):
            raise MarlError(
                f"the checkpoint's transition buffer has columns {sorted(state['data'])}, this one "
                f"{sorted(self.data)}: it was made for another env or policy mapping"
            )
        for k, v in state["data"].items():
            if v.shape[1:] != self.data[k].shape[1:]:
                raise MarlError(
                    f"transition buffer column '{k}' has shape {v.shape[1:]}, expected {self.data[k].shape[1:]}"
                )
        size, cap, ptr = int(state["size"]), int(state["capacity"]), int(state["ptr"])
        if cap == self.capacity:
            order, self.ptr = np.arange(size), ptr
        else:  # oldest first: a full ring starts at its pointer
            order = (ptr + np.arange(size)) % size if size == cap else np.arange(size)
            order = order[len(order) - min(size, self.capacity) :]
            self.ptr = len(order) % self.capacity
        for k, v in state["data"].items():
            self.data[k][: len(order)] = v[order]
        self.size = len(order)
        self.transitions_added, self.episodes_added = int(state["transitions_added"]), int(state["episodes_added"])


def action_array(lead: Tuple[int, ...], module: str, shape: Dict[str, Any], strict: bool = True) -> np.ndarray:
    """Zeros for module ``module``'s stored actions: ``[*lead]`` int64 indices (discrete, ``n_actions``) or
    ``[*lead, K]`` float32 (continuous, ``action_dim`` ``K``). ``strict`` (the transition buffer): a
    :class:`MarlError` for neither or both keys; otherwise (the episode buffer) indices unless ``action_dim``."""
    discrete, continuous = bool(shape.get("n_actions")), bool(shape.get("action_dim"))
    if strict and discrete == continuous:
        raise MarlError(
            f"replay buffer module '{module}' needs exactly one of n_actions (discrete) or "
            f"action_dim (continuous), got {dict(shape)}"
        )
    return np.zeros((*lead, int(shape["action_dim"])), np.float32) if continuous else np.zeros(lead, np.int64)
