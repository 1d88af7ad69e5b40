"""Result of :func:`marl.fit` and the greedy policy it carries; :func:`load` reads a checkpoint."""
from __future__ import annotations

import pickle
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional

import numpy as np
import torch

from marl.env import EnvSpec, EpisodeStats, MarlError, MultiAgentEnv, Step
from marl.mapping import PolicyMapping

META_FILE = "marl_meta.pkl"


class Policy:
    """Decentralised policy of a trained run: one module per module id.

    Call :meth:`act` with a batched :class:`~marl.env.Step` (or its ``obs`` /
    ``avail_actions`` dicts, group -> ``[B, N_g, D]``) to get group ->
    ``[B, N_g]`` actions (``[B, N_g, A]`` for continuous groups), or with a
    PettingZoo-style dict ``agent_id -> observation`` for one env. Recurrent
    modules keep their hidden state between calls; :meth:`reset` clears it.
    """

    def __init__(self, mapping: PolicyMapping, modules: Dict[str, Any], explore: bool = False):
        self.mapping = mapping
        self.modules = modules
        self.explore = explore
        self._h: Dict[str, Optional[torch.Tensor]] = {}

    def reset(self) -> None:
        self._h = {}

    def act(self, obs, avail_actions: Optional[Dict[str, torch.Tensor]] = None, done: Optional[torch.Tensor] = None):
        """Greedy actions (sampled if ``explore``).

        Args:
            obs: a :class:`Step`, group -> ``[B, N_g, D]`` tensors, or ``agent_id -> array``.
            avail_actions: group -> ``[B, N_g, A]`` bool (taken from the Step if given one).
            done: ``[B]`` bool, episodes that ended at the previous step (resets hidden state).
        """
        if isinstance(obs, Step):
            obs, avail_actions, done = obs.obs, obs.avail_actions, obs.done
        if obs and next(iter(obs)) in self.mapping.info.agents:
            return self._act_single(obs)
        avail_actions = avail_actions or {}
        out = {}
        m = self.mapping
        for mid, module in self.modules.items():
            o = m.add_agent_id(mid, m.gather(mid, {g: torch.as_tensor(v, dtype=torch.float32) for g, v in obs.items()}))
            g = m.group_info(mid)
            av = m.gather(mid, avail_actions) if g.discrete and avail_actions.get(g.name) is not None else None
            h = self._h.get(mid)
            if h is None or h.shape[0] != o.shape[0]:
                h = module.initial_state(o.shape[:2])
            elif done is not None:
                h = h * (~done).view(-1, 1, 1).to(h.dtype)
            a, _, self._h[mid] = module.act(o, av, h, explore=self.explore)
            out[mid] = a
        return m.scatter(out)

    __call__ = act

    def _act_single(self, obs: Dict[str, Any]) -> Dict[str, Any]:
        info = self.mapping.info
        batched = {}
        for name, g in info.groups.items():
            rows = [np.asarray(obs[a], dtype=np.float32).reshape(-1) if a in obs else np.zeros(g.obs_dim, np.float32) for a in g.agents]
            batched[name] = torch.as_tensor(np.stack(rows))[None]
        acts = self.act(batched)
        out = {}
        for name, g in info.groups.items():
            for i, a in enumerate(g.agents):
                if a in obs:
                    v = acts[name][0, i]
                    out[a] = int(v) if g.discrete else v.numpy()
        return out


def run_episodes(env: MultiAgentEnv, policy: Policy, num_episodes: int, seed: int = 12345) -> Dict[str, List[float]]:
    """Play until ``num_episodes`` episodes ended on the batched ``env``; per-episode statistics.

    Returns lists (length ``num_episodes``): ``episode_return`` (sum over all
    agents and steps), ``episode_length``, ``return_<group>``, and any
    env-provided ``episode_metrics`` (e.g. win rate).
    """
    step = env.reset(seed=seed)
    policy.reset()
    stats = EpisodeStats(env.info)
    limit = (env.info.episode_limit or 1000) * (num_episodes // env.num_envs + 2)
    for _ in range(limit):
        step = env.step(policy.act(step))
        stats.update(step)
        if len(stats.done["episode_return"]) >= num_episodes:
            break
    out = stats.pop()
    return {k: v[:num_episodes] for k, v in out.items()}


@dataclass
class Result:
    """What :func:`marl.fit` returns.

    Attributes:
        metrics: last iteration's metrics (env steps, returns, losses, steps/s).
        history: metrics of every iteration.
        checkpoint: path of the final checkpoint (reload with :func:`marl.load`).
        log_dir: run folder (TensorBoard logs in ``<log_dir>/tb``, ``progress.csv``).
        policy: greedy :class:`Policy`.
        eval: statistics of the greedy evaluation at the end of training (may be empty).
    """

    metrics: Dict[str, Any]
    history: List[Dict[str, Any]]
    checkpoint: Optional[str]
    log_dir: Optional[str]
    policy: Policy
    env_spec: Optional[EnvSpec] = None
    config: Dict[str, Any] = field(default_factory=dict)
    eval: Dict[str, float] = field(default_factory=dict)

    def evaluate(self, episodes: int = 32, env: Optional[MultiAgentEnv] = None, num_envs: Optional[int] = None,
                 opponent: str = "random") -> Dict[str, float]:
        """Greedy evaluation: mean of each episode statistic over ``episodes`` episodes
        (text games: ``episodes`` games against the bot ``opponent``, see ``TextPolicy.evaluate``)."""
        if hasattr(self.policy, "evaluate"):
            return self.policy.evaluate(opponent=opponent, games=episodes)
        if env is None:
            if self.env_spec is None:
                raise MarlError("This result has no env spec; pass env=marl.make_env(...).")
            env = self.env_spec.make(num_envs=num_envs or min(episodes, 32))
        stats = run_episodes(env, self.policy, episodes)
        return {f"{k}_mean": float(np.mean(v)) for k, v in stats.items() if v}

    def evaluate_crashes(self, rates=(0.0, 0.1, 0.2, 0.3, 0.5), episodes: int = 100, out_dir: Optional[str] = None,
                         **crash_options) -> List[Dict[str, float]]:
        """Greedy evaluation of the team at each test crash rate (Zhao et al. 2022's protocol, reference §5.2).

        Every rate plays ``episodes`` episodes of the trained scenario wrapped in a
        :class:`~marl.envs.wrappers.crash.CrashWrapper` (``crash_options``:
        ``crash_time``, ``behaviour``, ``max_crashed``, ``seed``; the training
        run's own crash options are the defaults, without its coach).

        Writes ``crash_eval.csv``, ``crash_eval.md`` and ``crash_eval.png`` (return,
        and win rate where the env reports one, against the crash rate) to
        ``out_dir`` (default: the run folder). Returns one row per rate.

        Raises:
            MarlError: no env spec to rebuild the scenario, or a rate outside [0, 1].
        """
        if self.env_spec is None:
            raise MarlError("evaluate_crashes needs a run made with marl.make_env (its env spec rebuilds the scenario).")
        base = dict(self.env_spec.kwargs.get("crash") or {})
        base.pop("strategy", None)
        base.pop("coach", None)
        base.pop("reference_share", None)  # every copy plays at the test rate
        base.update(crash_options)
        rows = []
        for p in rates:
            env = self.env_spec.make(num_envs=min(episodes, 32), crash={**base, "rate": float(p)})
            stats = run_episodes(env, self.policy, episodes)
            env.close()
            row = {"crash_rate": float(p)}
            row.update({f"{k}_mean": float(np.mean(v)) for k, v in stats.items() if v})
            rows.append(row)
        _write_crash_table(rows, Path(out_dir or self.log_dir or "."))
        return rows

    def __repr__(self) -> str:
        r = self.metrics.get("episode_return_mean")
        return f"Result(env_steps={self.metrics.get('env_steps')}, return={r}, checkpoint={self.checkpoint!r})"


def load(path: str, env: Optional[MultiAgentEnv] = None) -> Result:
    """Load a checkpoint (a checkpoint folder, or a run folder: its latest checkpoint) without Ray.

    Args:
        path: checkpoint or run folder.
        env: act in this env instead of the one trained on (transfer): the
            modules are rebuilt for its agents and entity counts and the trained
            weights copied in, which works for ``agent="hpn"`` / ``"dpn"``
            (see :mod:`marl.transfer`); ``result.evaluate()`` then plays ``env``'s scenario.

    Raises:
        MarlError: no marl checkpoint at ``path``; or, with ``env``, a network
            whose parameter shapes depend on the scenario.
    """
    from ray.rllib.core.rl_module.rl_module import RLModule

    ckpt = resolve_checkpoint(path)
    with open(ckpt / META_FILE, "rb") as f:
        meta = pickle.load(f)
    if "llm" in meta:  # a text-game run: the LM policy (marl.algos.llm.selfplay.TextPolicy)
        from marl.algos.llm.selfplay import LLMSelfPlay

        return _result(ckpt, meta, LLMSelfPlay.policy_from_checkpoint(ckpt, meta, env), meta.get("env_spec"))
    if env is not None:
        return _load_into(ckpt, meta, env)
    env = meta["env_spec"].make(num_envs=1) if meta.get("env_spec") else None
    info = env.info if env is not None else meta["env_info"]
    from marl.engine.runner import MappingFn

    mapping = PolicyMapping(info, share=MappingFn(meta["agent_to_module"]), agent_id=meta["config"]["agent_id"])
    modules = {}
    for mid in mapping.modules:
        m = RLModule.from_checkpoint(str(ckpt / "learner_group" / "learner" / "rl_module" / mid))
        m.eval()
        modules[mid] = m
    if env is not None:
        env.close()
    return _result(ckpt, meta, Policy(mapping, modules), meta.get("env_spec"))


def _result(ckpt: Path, meta: Dict[str, Any], policy: Policy, env_spec) -> Result:
    return Result(
        metrics=meta.get("metrics", {}),
        history=[],
        checkpoint=str(ckpt),
        log_dir=str(ckpt.parent.parent),
        policy=policy,
        env_spec=env_spec,
        config=meta["config"],
    )


def _load_into(ckpt: Path, meta: Dict[str, Any], env: MultiAgentEnv) -> Result:
    """Rebuild the checkpoint's modules for ``env`` and copy the trained weights in (transfer)."""
    from marl.api import algo_class
    from marl.engine.runner import MappingFn
    from marl.engine.trainer import agent_module_specs
    from marl.mapping import SHARE_MODES
    from marl.transfer import checkpoint_states, load_weights

    cfg = meta["config"]
    share = cfg["share"] if cfg.get("share") in SHARE_MODES else MappingFn(meta["agent_to_module"])
    mapping = PolicyMapping(env.info, share=share, agent_id=cfg["agent_id"])
    algo_cls = algo_class(cfg)
    algo_cls.check_env(cfg, env.info)
    specs = agent_module_specs(algo_cls, cfg, mapping, inference_only=True)
    states = checkpoint_states(ckpt, specs)
    modules = {}
    for mid, spec in specs.items():
        modules[mid] = spec.build()
        load_weights(modules[mid], states[mid], mid)
        modules[mid].eval()
    return _result(ckpt, meta, Policy(mapping, modules), env.spec)


def resolve_checkpoint(path: str) -> Path:
    """A checkpoint folder, or the latest checkpoint inside a run folder (absolute: RLlib reads
    relative paths as URIs)."""
    p = Path(path).resolve()
    if (p / META_FILE).exists():
        return p
    cands = sorted((p / "checkpoints").glob("checkpoint_*")) if (p / "checkpoints").is_dir() else []
    cands = [c for c in cands if (c / META_FILE).exists()]
    if not cands:
        raise MarlError(f"No marl checkpoint at '{path}' (expected '{META_FILE}' or a run folder with checkpoints/).")
    return cands[-1]


def _write_crash_table(rows: List[Dict[str, float]], folder: Path) -> None:
    """``crash_eval.csv`` / ``.md`` / ``.png`` of :meth:`Result.evaluate_crashes`."""
    import csv

    folder.mkdir(parents=True, exist_ok=True)
    keys = ["crash_rate"] + [k for k in ("episode_return_mean", "win_rate_mean", "crash_rate_mean") if k in rows[0]]
    with open(folder / "crash_eval.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=keys, extrasaction="ignore")
        w.writeheader()
        w.writerows(rows)
    lines = ["| " + " | ".join(keys) + " |", "|" + "---|" * len(keys)]
    lines += ["| " + " | ".join(f"{r.get(k, float('nan')):.3f}" for k in keys) + " |" for r in rows]
    (folder / "crash_eval.md").write_text("\n".join(lines) + "\n")
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    metric = "win_rate_mean" if "win_rate_mean" in rows[0] else "episode_return_mean"
    fig, ax = plt.subplots(figsize=(4.5, 3.2))
    ax.plot([r["crash_rate"] for r in rows], [r[metric] for r in rows], marker="o")
    ax.set_xlabel("test crash rate p")
    ax.set_ylabel(metric.replace("_mean", "").replace("_", " "))
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(folder / "crash_eval.png", dpi=120)
    plt.close(fig)
