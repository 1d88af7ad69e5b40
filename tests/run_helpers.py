"""Helpers of the run-folder tests: file snapshots, checkpoints without Ray, Ray processes of a temp dir."""

from __future__ import annotations

import hashlib
import os
import pickle
from pathlib import Path
from typing import Dict, List, Tuple

from marl.checkpoint import write_manifest, write_meta
from marl.rundir import RUN_MARKER, write_json

TESTS = Path(__file__).resolve().parent
QUICK = dict(progress=False, eval_episodes=0, rollout_length=5, epochs=1)  # MatchEnv(num_envs=4): 20 steps/iteration


def snapshot(root: Path) -> Dict[str, Tuple[int, int, str]]:
    """Every file under ``root``: relative path -> (size, mtime in ns, sha256); equal snapshots = nothing written."""
    out = {}
    for p in sorted(Path(root).rglob("*")):
        if p.is_file():
            st = p.stat()
            out[str(p.relative_to(root))] = (st.st_size, st.st_mtime_ns, hashlib.sha256(p.read_bytes()).hexdigest())
    return out


class FakeTrainer:
    """Just enough of a Trainer for :func:`marl.checkpoint.save_checkpoint` (writes one small file)."""

    def __init__(self, fail: bool = False):
        self.progress = {"iterations": 0, "env_steps": 0}
        self.last_metrics: Dict[str, float] = {}
        self.fail = fail

    def advance(self, iterations: int = 1, steps_per_iteration: int = 20) -> "FakeTrainer":
        self.progress["iterations"] += iterations
        self.progress["env_steps"] += iterations * steps_per_iteration
        self.last_metrics = {"iteration": self.progress["iterations"], "env_steps": self.progress["env_steps"]}
        return self

    def save_to_path(self, path: str) -> None:
        Path(path).mkdir(parents=True)
        (Path(path) / "algorithm_state.pkl").write_bytes(pickle.dumps(dict(self.progress)))
        if self.fail:
            raise OSError("disk full")


def fake_checkpoint(run: Path, iteration: int, meta: Dict, env_steps: int = 0, manifest: bool = True) -> Path:
    """A checkpoint folder with marl's metadata (no RLlib state) inside run folder ``run``."""
    path = Path(run) / "checkpoints" / f"checkpoint_{iteration:06d}"
    path.mkdir(parents=True)
    write_meta(path, {**meta, "metrics": {"iteration": iteration, "env_steps": env_steps}})
    if manifest:
        write_manifest(path, iteration, env_steps)
    if not (Path(run) / RUN_MARKER).exists():
        write_json(Path(run) / RUN_MARKER, {"created": "test"})
    return path


def ray_processes(tmp_root: str) -> List[str]:
    """Command lines of live processes that mention ``tmp_root`` (a ``RAY_TMPDIR``: that Ray's daemons and workers)."""
    found = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit() or int(pid) == os.getpid():
            continue
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            state = next(
                (line for line in Path(f"/proc/{pid}/status").read_text().splitlines() if line.startswith("State:")), ""
            )
        except OSError:
            continue
        if tmp_root in cmd and "zombie" not in state:
            found.append(f"{pid}: {cmd[:200]}")
    return found


def _proc_children() -> Dict[int, List[int]]:
    kids: Dict[int, List[int]] = {}
    for p in Path("/proc").iterdir():
        if not p.name.isdigit():  # /proc/self, /proc/net, ...
            continue
        try:
            line = next(x for x in (p / "status").read_text().splitlines() if x.startswith("PPid:"))
        except (OSError, StopIteration):
            continue
        kids.setdefault(int(line.split()[1]), []).append(int(p.name))
    return kids


def _hex_address(text: str) -> str:
    """An address of /proc/net/tcp (IPv4: one little-endian word) or tcp6 (four little-endian words) as text."""
    import socket

    raw = bytes.fromhex(text)
    raw = b"".join(raw[i : i + 4][::-1] for i in range(0, len(raw), 4))
    return socket.inet_ntop(socket.AF_INET if len(raw) == 4 else socket.AF_INET6, raw)


def listening_sockets(root_pid: int) -> List[Tuple[str, int, str]]:
    """TCP sockets in the LISTEN state that process ``root_pid`` or one of its descendants holds (Linux
    ``/proc``): ``(local address, port, program)``, IPv6 addresses as ``inet_ntop`` writes them."""
    kids, todo, owner = _proc_children(), [root_pid], {}
    while todo:
        pid = todo.pop()
        todo += kids.get(pid, [])
        try:
            fds = list(Path(f"/proc/{pid}/fd").iterdir())
            program = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0].decode(errors="replace")
        except OSError:
            continue
        for fd in fds:
            try:
                link = os.readlink(fd)
            except OSError:
                continue
            if link.startswith("socket:["):
                owner[link[8:-1]] = os.path.basename(program)
    found = []
    for table in ("tcp", "tcp6"):
        for line in Path(f"/proc/net/{table}").read_text().splitlines()[1:]:
            f = line.split()  # sl local_address rem_address st ... inode (column 9); st 0A = LISTEN
            if f[3] == "0A" and f[9] in owner:
                address, port = f[1].rsplit(":", 1)
                found.append((_hex_address(address), int(port, 16), owner[f[9]]))
    return found


def ppo_module(
    obs_dim: int = 4,
    n_actions: int = 3,
    discrete: bool = True,
    recurrent: bool = False,
    team: bool = False,
    n_agents: int = 3,
    critic_dim: int = 6,
    policy_gain: float = 1.0,
    inference_only: bool = False,
):
    """A small :class:`marl.algos.ppo.PPOModule` (hidden 16, 2 layers) for unit tests: ``obs_dim`` inputs,
    ``n_actions`` discrete actions (or a ``[-1, 1]^n_actions`` Box), a critic on ``critic_dim`` inputs
    (``team``: one value head per agent of ``n_agents``)."""
    import gymnasium as gym
    import numpy as np

    from marl.algos.ppo import PPOModule

    space = gym.spaces.Discrete(n_actions) if discrete else gym.spaces.Box(-1, 1, (n_actions,), np.float32)
    cfg = dict(
        obs_dim=obs_dim,
        critic_dim=critic_dim,
        critic_heads=n_agents if team else 1,
        team_critic=team,
        n_actions=n_actions,
        discrete=discrete,
        hidden=16,
        layers=2,
        activation="relu",
        layer_norm=True,
        recurrent=recurrent,
        policy_gain=policy_gain,
        log_std_init=-0.5,
    )
    return PPOModule(
        observation_space=gym.spaces.Box(-np.inf, np.inf, (obs_dim,), np.float32),
        action_space=space,
        inference_only=inference_only,
        model_config=cfg,
    )
