"""MaMuJoCo as a batched :class:`~marl.env.MultiAgentEnv`: ``make_env("mamujoco", "HalfCheetah", agent_conf="2x3")``.

Multi-Agent MuJoCo (Peng et al. 2021, "FACMAC: Factored Multi-Agent Centralised Policy
Gradients", arXiv:2003.06709, Section 5 and Appendix) splits the joints of a Gymnasium MuJoCo
robot into agents: ``agent_conf="2x3"`` gives HalfCheetah's back leg (3 joints) to ``agent_0`` and
its front leg to ``agent_1``. The adapter builds each copy through ``gymnasium_robotics``'s
``mamujoco_v1.parallel_env`` (its ``MultiAgentMujocoEnv``, on Gymnasium's ``<scenario>-v5``) and:

* **Agents** ``agent_0 .. agent_{n-1}`` of the partition; agents with equal spaces form one group
  (``envs/common.py``: ``build_groups``). Actions are ``Box`` per agent (one value per joint it
  drives, bounds of the robot's actuators; actions are clipped to them).
* **Observations**: each agent's ``agent_obsk``-hop neighbourhood of joints (``agent_obsk=1``: its
  own joints plus the joints one edge away, FACMAC's ``k``), float32. The **state** is MaMuJoCo's
  ``state()``: the single-agent Gymnasium observation of the whole robot (17 values for HalfCheetah).
* **Reward**: the robot's reward, the same for every agent (``shared_reward=True``). marl's episode
  ``return`` sums the agents' rewards, so it is ``n_agents`` times the MuJoCo episode return.
* **Episode end**: the robot's own termination (Hopper, Walker2d, Ant, Humanoid falling) is
  ``terminated``; reaching ``episode_limit`` steps (default 1000, Gymnasium's and FACMAC's) is
  ``truncated``, never ``terminated`` (an episode that terminates at that very step is a termination).
* **Seeds**: ``reset(seed)`` resets copy ``b`` with ``seed + b``; ended copies reset unseeded,
  continuing their own RNG streams.
* **Batching** (``vector=``): ``"loop"`` steps the ``B`` copies one after the other in this process;
  ``"subprocess"`` spreads them over ``num_workers`` worker processes that step their slices in
  parallel (one pipe round trip per step). The default is the one measured faster on a loaded
  2-core machine (docs/envs.md, "MaMuJoCo"; ``python -m marl.benchmarks.mamujoco_speed``).
"""

from __future__ import annotations

import ast
import contextlib
import functools
import inspect
import os
import re
import socket
import subprocess
import sys
import traceback
import warnings
import weakref
from multiprocessing.connection import Connection
from typing import Any, Dict, Iterator, List, Optional, Sequence, Tuple

import numpy as np
import torch

from marl.env import EnvInfo, MarlError, MultiAgentEnv, Observation, Step, unknown_choice
from marl.envs.common import AgentLayout, build_groups, check_kwargs, check_num_envs, flat_box

__all__ = ["MaMuJoCoEnv", "make", "scenarios", "agent_confs", "VECTOR_MODES"]

DEFAULT_NUM_ENVS = 8
DEFAULT_EPISODE_LIMIT = 1000
VECTOR_MODES = ("loop", "subprocess")
DEFAULT_VECTOR = "loop"
ANY_SPLIT = "<agents>x<segments per agent>"  # the agent_conf of the ManySegment robots, e.g. "4x2"
_INSTALL = "pip install 'marl-rllib[mamujoco]' (gymnasium-robotics and mujoco)"


def _obsk_module() -> Any:
    try:
        from gymnasium_robotics.envs.multiagent_mujoco import obsk
    except ImportError as e:
        raise MarlError(f"make_env('mamujoco', ...) needs gymnasium_robotics and mujoco ({e}): {_INSTALL}.") from e
    return obsk


@functools.lru_cache(maxsize=None)
def agent_confs() -> Dict[str, Tuple[str, ...]]:
    """Scenario -> its valid ``agent_conf`` values, read from ``gymnasium_robotics``'s partition table.

    The table is the ``if label in [...]`` / ``partitioning == "..."`` chain of the function
    ``gymnasium_robotics.envs.multiagent_mujoco.obsk.get_parts_and_edges``; the ManySegment
    robots take any ``"<agents>x<segments per agent>"`` (listed as :data:`ANY_SPLIT`).

    Raises:
        MarlError: gymnasium_robotics is not installed.
    """
    src = inspect.getsource(_obsk_module().get_parts_and_edges)
    out: Dict[str, Tuple[str, ...]] = {}
    blocks = re.split(r"\n\s*(?:el)?if label in (\[[^\]]*\]):", src)
    for labels, body in zip(blocks[1::2], blocks[2::2]):
        confs = tuple(dict.fromkeys(re.findall(r'partitioning == "([^"]+)"', body)))
        if not confs and 'partitioning.split("x")' in body:
            confs = (ANY_SPLIT,)
        for label in ast.literal_eval(labels):
            out[label] = confs
    return dict(sorted(out.items()))


def scenarios() -> List[str]:
    """The MaMuJoCo robots that have agent partitions (``Ant``, ``HalfCheetah``, ``Hopper``, ...); ``[]`` where
    gymnasium_robotics is not installed (listings and suite checks go on; ``make_env`` says what to install)."""
    try:
        return list(agent_confs())
    except MarlError:
        return []


def canonical_scenario(scenario: str) -> str:
    """``scenario`` spelt as gymnasium_robotics spells it, whatever its case (``"halfcheetah"`` ->
    ``"HalfCheetah"``): benchmark suites write tasks in lower case (marl-eval's keys). An unknown name is
    returned unchanged, for :func:`check_agent_conf` to reject with the closest valid one."""
    return {s.lower(): s for s in scenarios()}.get(str(scenario).lower(), scenario)


def check_agent_conf(scenario: str, agent_conf: Any) -> str:
    """``agent_conf`` checked against ``scenario``'s partitions (:func:`agent_confs`).

    Raises:
        MarlError: an unknown scenario (with the closest name) or an ``agent_conf`` the scenario does not
            have (the message lists the valid ones).
    """
    table = agent_confs()
    if scenario not in table:
        raise unknown_choice("MaMuJoCo scenario", scenario, list(table))
    valid = table[scenario]
    if valid == (ANY_SPLIT,):
        if isinstance(agent_conf, str) and re.fullmatch(r"[1-9]\d*x[1-9]\d*", agent_conf):
            return agent_conf
        raise MarlError(f"agent_conf {agent_conf!r} of MaMuJoCo {scenario} must be {ANY_SPLIT}, e.g. '4x2'.")
    if agent_conf not in valid:
        raise unknown_choice(f"agent_conf of MaMuJoCo {scenario}", agent_conf, list(valid))
    return agent_conf


def _robot(scenario: str) -> str:
    """The Gymnasium robot a MaMuJoCo scenario is built on (the ManySegment ones on Ant / Swimmer)."""
    return {"ManySegmentAnt": "Ant", "ManySegmentSwimmer": "Swimmer"}.get(scenario, scenario)


def robot_kwargs(scenario: str) -> List[str]:
    """The keywords of Gymnasium's ``<robot>-v5`` env class that a MaMuJoCo ``scenario`` is built on
    (``ctrl_cost_weight``, ``reset_noise_scale``, ...); ``[]`` where it has no registered v5 env."""
    import gymnasium

    try:
        spec = gymnasium.spec(f"{_robot(scenario)}-v5")
    except gymnasium.error.Error:
        return []
    entry = spec.entry_point
    creator = gymnasium.envs.registration.load_env_creator(entry) if isinstance(entry, str) else entry
    if creator is None:
        return []
    skip = {"self", "render_mode", "kwargs"}
    return [k for k in inspect.signature(creator).parameters if k not in skip]


def _check_int(name: str, value: Any, low: int) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < low:
        raise MarlError(f"{name} must be an int >= {low}, got {value!r}.")
    return int(value)


@contextlib.contextmanager
def _mujoco_warnings() -> Iterator[None]:
    """Route MuJoCo's warnings to Python's ``warnings`` (shown once per message) while a model compiles.

    MuJoCo otherwise prints each one and appends it to ``MUJOCO_LOG.TXT`` in the working directory, once
    per copy (mujoco 4.0 warns that Gymnasium's HalfCheetah XML uses the deprecated ``settotalmass``).
    The previous handler is restored afterwards.
    """
    import mujoco

    old = mujoco.get_mju_user_warning()
    mujoco.set_mju_user_warning(lambda msg: warnings.warn(f"MuJoCo: {msg}", RuntimeWarning, stacklevel=2))
    try:
        yield
    finally:
        mujoco.set_mju_user_warning(old)


def build_copy(scenario: str, agent_conf: str, agent_obsk: int, episode_limit: int, kwargs: Dict[str, Any]) -> Any:
    """One ``mamujoco_v1.parallel_env`` (a PettingZoo ``ParallelEnv``) on Gymnasium's ``<scenario>-v5``,
    its own time limit at ``episode_limit`` steps and without Gymnasium's per-step env checker.

    Raises:
        MarlError: gymnasium_robotics is missing, or it failed to build the env (e.g. a MuJoCo keyword the
            robot does not take; the message names the scenario, agent_conf and keywords).
    """
    _obsk_module()
    from gymnasium_robotics import mamujoco_v1

    try:
        with _mujoco_warnings():
            return mamujoco_v1.parallel_env(
                scenario,
                agent_conf,
                agent_obsk=agent_obsk,
                max_episode_steps=episode_limit,
                disable_env_checker=True,
                **kwargs,
            )
    except Exception as e:  # gymnasium_robotics raises bare Exceptions and TypeErrors of gymnasium.make
        raise MarlError(
            f"gymnasium_robotics could not build MaMuJoCo {scenario} agent_conf={agent_conf!r} "
            f"agent_obsk={agent_obsk} with keywords {sorted(kwargs)}: {type(e).__name__}: {e}"
        ) from e


class CopyBlock:
    """``k`` MaMuJoCo copies stepped one after the other (the unit a worker process holds).

    Arrays in and out (``A`` = sum of the agents' action sizes, ``O`` = sum of their observation
    sizes, ``S`` = the state size): actions ``[k, A]`` float32 in agent order; observations ``[k, O]``
    and states ``[k, S]`` float32; rewards ``[k]`` float32; ``terminated`` / ``truncated`` ``[k]`` bool.
    """

    def __init__(self, k: int, scenario: str, agent_conf: str, agent_obsk: int, limit: int, kwargs: Dict[str, Any]):
        self.envs = [build_copy(scenario, agent_conf, agent_obsk, limit, kwargs) for _ in range(k)]
        first = self.envs[0]
        self.agents = list(first.possible_agents)
        act = [int(first.action_space(a).shape[0]) for a in self.agents]
        self.act_cuts = np.cumsum(act)[:-1]
        self.limit = limit
        self.steps = np.zeros(k, np.int64)
        self.obs = np.zeros((k, sum(int(first.observation_space(a).shape[0]) for a in self.agents)), np.float32)
        self.state = np.zeros((k, int(np.asarray(first.state()).shape[0])), np.float32)

    def _write(self, i: int, obs: Dict[str, np.ndarray]) -> None:
        env = self.envs[i]
        self.obs[i] = np.concatenate([obs[a] for a in self.agents])
        self.state[i] = env.state()

    def reset(self, rows: Sequence[int], seeds: Sequence[Optional[int]]) -> Tuple[np.ndarray, np.ndarray]:
        """Reset copies ``rows`` (seeded with ``seeds``); returns all ``(obs, state)``."""
        for i, seed in zip(rows, seeds):
            obs, _ = self.envs[i].reset(seed=seed)
            self.steps[i] = 0
            self._write(i, obs)
        return self.obs.copy(), self.state.copy()

    def step(self, actions: np.ndarray) -> Tuple[np.ndarray, ...]:
        """One step of every copy; returns ``(obs, state, reward, terminated, truncated)``."""
        k = len(self.envs)
        reward, term, trunc = np.zeros(k, np.float32), np.zeros(k, bool), np.zeros(k, bool)
        for i, env in enumerate(self.envs):
            parts = np.split(actions[i], self.act_cuts)
            obs, rew, te, tr, _ = env.step(dict(zip(self.agents, parts)))
            a0 = self.agents[0]
            self.steps[i] += 1
            reward[i], term[i] = rew[a0], te[a0]
            # the time limit is a truncation even where the robot's own TimeLimit says so too
            trunc[i] = (tr[a0] or self.steps[i] >= self.limit) and not term[i]
            self._write(i, obs)
        return self.obs.copy(), self.state.copy(), reward, term, trunc

    def close(self) -> None:
        for env in self.envs:
            env.close()


def serve(fd: int) -> None:
    """Worker process entry (``python -c "...; serve(fd)"``): builds a :class:`CopyBlock` from the first
    message on the socket ``fd``, then answers ``(method, args)`` messages until ``close`` or end of input."""
    conn = Connection(fd)
    try:
        block = CopyBlock(*conn.recv())
        conn.send(("ok", None))
    except Exception as e:  # reported to the parent, which raises it
        conn.send(("error", f"{type(e).__name__}: {e}"))
        return
    while True:
        try:
            cmd, payload = conn.recv()
        except EOFError:  # the parent is gone
            cmd = "close"
        if cmd == "close":
            block.close()
            return
        try:
            conn.send(("ok", getattr(block, cmd)(*payload)))
        except Exception:
            conn.send(("error", traceback.format_exc()))


class _Workers:
    """Worker processes each holding a contiguous slice of the copies (``vector="subprocess"``).

    Workers are fresh interpreters (``subprocess.Popen``), not ``multiprocessing`` children: a forked
    child may inherit locks held by torch or Ray threads, and a spawned one re-imports the user's
    ``__main__`` (a script without an ``if __name__ == "__main__"`` guard would start again).
    """

    def __init__(self, B: int, workers: int, args: Tuple[Any, ...]):
        sizes = [len(c) for c in np.array_split(np.arange(B), workers)]
        self.starts = np.concatenate([[0], np.cumsum(sizes)]).astype(int)
        self.conns: List[Connection] = []
        self.procs: List[subprocess.Popen] = []
        for k in sizes:
            mine, theirs = socket.socketpair()
            code = f"from marl.envs.mamujoco import serve; serve({theirs.fileno()})"
            self.procs.append(subprocess.Popen([sys.executable, "-c", code], pass_fds=(theirs.fileno(),)))
            theirs.close()
            conn = Connection(mine.detach())
            conn.send((k, *args))
            self.conns.append(conn)
        self._finalizer = weakref.finalize(self, _stop, self.conns, self.procs)
        self._gather()

    def _gather(self) -> List[Any]:
        out = []
        for conn in self.conns:
            try:
                status, value = conn.recv()
            except EOFError:
                status, value = "error", "the worker process exited"
            if status != "ok":
                self.close()
                raise MarlError(f"A MaMuJoCo worker process failed: {value}")
            out.append(value)
        return out

    def reset(self, rows: Sequence[int], seeds: Sequence[Optional[int]]) -> Tuple[np.ndarray, ...]:
        for w, conn in enumerate(self.conns):
            lo, hi = self.starts[w], self.starts[w + 1]
            mine = [(r - lo, s) for r, s in zip(rows, seeds) if lo <= r < hi]
            conn.send(("reset", ([r for r, _ in mine], [s for _, s in mine])))
        return tuple(np.concatenate(x) for x in zip(*self._gather()))

    def step(self, actions: np.ndarray) -> Tuple[np.ndarray, ...]:
        for w, conn in enumerate(self.conns):
            conn.send(("step", (actions[self.starts[w] : self.starts[w + 1]],)))
        return tuple(np.concatenate(x) for x in zip(*self._gather()))

    def close(self) -> None:
        self._finalizer()


def _stop(conns: List[Connection], procs: List[subprocess.Popen]) -> None:
    for conn in conns:
        try:
            conn.send(("close", ()))
            conn.close()
        except OSError:
            pass
    for proc in procs:
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


class MaMuJoCoEnv(MultiAgentEnv):
    """``B`` copies of a MaMuJoCo task (rules: module docstring).

    Args:
        scenario: robot, e.g. ``"HalfCheetah"`` (:func:`scenarios`).
        agent_conf: its partition into agents, e.g. ``"2x3"`` (:func:`agent_confs`).
        num_envs: ``B`` (default 8).
        agent_obsk: observation depth ``k`` (joints up to ``k`` edges away; default 1).
        episode_limit: steps per episode, then truncation (default 1000).
        vector: ``"loop"`` (this process) or ``"subprocess"`` (worker processes).
        num_workers: worker processes of ``vector="subprocess"`` (default ``min(B, cpu count)``).
        seed: seed of ``reset()`` without one.
        **mujoco_kwargs: keywords of Gymnasium's MuJoCo env (e.g. ``ctrl_cost_weight=0.1``).

    Shapes: ``obs[g]`` ``[B, N_g, obs_dim_g]`` float32, ``state`` ``[B, state_dim]`` float32 (MaMuJoCo's
    ``state()``), ``reward[g]`` ``[B, N_g]`` float32 (the team reward), actions ``[B, N_g, act_dim_g]``
    in the actuator bounds (clipped), ``avail_actions[g]`` ``None``, ``alive`` all True.

    Raises:
        MarlError: unknown scenario or agent_conf (with the valid ones), bad ``num_envs`` /
            ``agent_obsk`` / ``episode_limit`` / ``vector`` / ``num_workers``, keywords the robot
            does not take, a failed worker, ``step`` before ``reset``.
    """

    def __init__(
        self,
        scenario: str,
        agent_conf: str,
        num_envs: int = DEFAULT_NUM_ENVS,
        agent_obsk: int = 1,
        episode_limit: int = DEFAULT_EPISODE_LIMIT,
        vector: str = DEFAULT_VECTOR,
        num_workers: Optional[int] = None,
        seed: Optional[int] = None,
        **mujoco_kwargs: Any,
    ):
        agent_conf = check_agent_conf(scenario, agent_conf)
        B = check_num_envs(num_envs)
        args = (
            scenario,
            agent_conf,
            _check_int("agent_obsk", agent_obsk, 0),
            _check_int("episode_limit", episode_limit, 1),
            dict(mujoco_kwargs),
        )
        valid = robot_kwargs(scenario)
        if valid:
            check_kwargs(f"MaMuJoCo {scenario} (Gymnasium's {_robot(scenario)}-v5 env)", mujoco_kwargs, valid)
        if vector not in VECTOR_MODES:
            raise unknown_choice("vector", vector, list(VECTOR_MODES))
        probe = build_copy(*args)  # spaces and agents, read in this process
        agents = list(probe.possible_agents)
        obs_spaces = {a: flat_box(probe.observation_space(a)) for a in agents}
        act_spaces = {a: probe.action_space(a) for a in agents}
        state_dim = int(np.asarray(probe.state()).shape[0])
        groups = build_groups(agents, obs_spaces, act_spaces, {a: "team" for a in agents})
        self.layout = AgentLayout(agents, groups)
        self.info = EnvInfo(
            family="mamujoco",
            scenario=f"{scenario}-{agent_conf}",
            agents=agents,
            groups=groups,
            state_dim=state_dim,
            episode_limit=args[3],
            kind="cooperative",
            shared_reward=True,
            num_envs=B,
        )
        probe.close()
        self.vector, self._default_seed, self._started = vector, seed, False
        if vector == "loop":
            self._copies: Any = CopyBlock(B, *args)
        else:
            workers = min(B, os.cpu_count() or 1) if num_workers is None else _check_int("num_workers", num_workers, 1)
            self._copies = _Workers(B, min(workers, B), args)
        self._obs = np.zeros((B, self.layout.state_dim), np.float32)
        self._state = np.zeros((B, state_dim), np.float32)

    # ------------------------------------------------------------------ API
    def reset(self, seed: Optional[int] = None) -> Step:
        """Reset copy ``b`` with ``seed + b`` and return the first :class:`Step`."""
        seed = self._default_seed if seed is None else seed
        B = self.num_envs
        self._obs, self._state = self._copies.reset(
            list(range(B)), [None if seed is None else int(seed) + b for b in range(B)]
        )
        self._started = True
        return Step.at_reset(self._observation())

    def step_env(self, actions: Dict[str, torch.Tensor]) -> Step:
        """One step of every copy (:meth:`MultiAgentEnv.step_env`); actions clipped to the actuator bounds."""
        if not self._started:
            raise MarlError("Call reset() before step().")
        joint = np.concatenate(self.layout.split_actions(actions), axis=1)
        self._obs, self._state, rew, term, trunc = self._copies.step(joint)
        return self._make_step(rew, torch.from_numpy(term), torch.from_numpy(trunc))

    def reset_rows(self, rows: torch.Tensor) -> Observation:
        """Reset the copies in ``rows`` unseeded (each continues its RNG stream)."""
        idx = rows.nonzero().flatten().tolist()
        self._obs, self._state = self._copies.reset(idx, [None] * len(idx))
        return self._observation()

    def close(self) -> None:
        self._copies.close()

    # ------------------------------------------------------------------ internals
    def _observation(self) -> Observation:
        B, groups = self.num_envs, self.info.groups
        return Observation(
            obs=self.layout.obs(self._obs),
            state=torch.from_numpy(self._state.copy()),
            avail_actions={n: None for n in groups},
            alive={n: torch.ones(B, g.n_agents, dtype=torch.bool) for n, g in groups.items()},
        )

    def _make_step(self, reward: np.ndarray, terminated: torch.Tensor, truncated: torch.Tensor) -> Step:
        team = np.repeat(reward[:, None], len(self.info.agents), axis=1)
        return Step(
            *self._observation(), reward=self.layout.per_group(team), terminated=terminated, truncated=truncated
        )


def make(scenario: Optional[str] = None, agent_conf: Optional[str] = None, **kwargs: Any) -> MaMuJoCoEnv:
    """Registry factory of the ``"mamujoco"`` family: ``make_env("mamujoco", "HalfCheetah", agent_conf="2x3")``.

    See :class:`MaMuJoCoEnv` for the arguments.

    Raises:
        MarlError: no scenario or no agent_conf (the messages list the valid ones), gymnasium_robotics
            missing, or what :class:`MaMuJoCoEnv` raises.
    """
    if scenario is None:
        raise MarlError(
            f"make_env('mamujoco', scenario, agent_conf=...) needs a scenario. Valid choices: {', '.join(scenarios())}."
        )
    scenario = canonical_scenario(scenario)
    if agent_conf is None:
        confs = agent_confs().get(scenario)
        if confs is None:
            raise unknown_choice("MaMuJoCo scenario", scenario, scenarios())
        raise MarlError(
            f"make_env('mamujoco', {scenario!r}) needs agent_conf=..., its partition into agents. "
            f"Valid choices: {', '.join(confs)}."
        )
    return MaMuJoCoEnv(scenario, agent_conf, **kwargs)
