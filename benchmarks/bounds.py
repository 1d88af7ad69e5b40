"""Per-task reference bounds of a suite: the score of random play and the best known score, used to
normalise the aggregate over tasks, and the command that measures random play.

A suite lists them under ``bounds`` (``configs/benchmarks/*.yaml``)::

    bounds:
      - {env: matrix, task: two_step, metric: return, random: 9.5, best: 16.0,
         random_source: "uniform random play, exact: ...; measured: marl benchmark random matrix",
         best_source: "the optimum, Rashid et al. 2018 (arXiv:1803.11485), the two-step game"}

A score ``s`` of that task then normalises to ``(s - random) / (best - random)``: 0 is random play,
1 the best known score, whatever the algorithms of the suite reach (a task on which every algorithm
scores the same no longer maps everyone to 0, as min-max normalisation over the algorithms did).
This is the human-normalised score of Atari (Mnih et al. 2015, Nature 518, "Methods") with random
play and the best known score as anchors, the form rliable's aggregates take (Agarwal et al. 2021,
arXiv:2108.13264, Section 4). The report leaves a task without bounds out of the aggregate and says so.

``marl benchmark random <suite>`` (:func:`random_play`) measures the ``random`` anchor.
"""

from __future__ import annotations

from typing import Any, Dict, List, Mapping, Optional, Sequence

import numpy as np

from marl.errors import MarlError, closest

BOUND_KEYS = ("env", "task", "metric", "random", "best", "random_source", "best_source")
_METRICS = ("return", "win_rate")


def check_bounds(raw: Any, suite: str, tasks: Optional[Sequence[str]] = None) -> List[Dict[str, Any]]:
    """Check a suite's ``bounds`` list; returns it as a list of dicts.

    Args:
        raw: the parsed YAML value of ``bounds`` (``None``: no bounds).
        suite: the suite's name, for the messages.
        tasks: ``["env/task", ...]`` of the suite (``None``: not checked, e.g. a report's folder).

    Raises:
        MarlError: naming the suite, the entry's env/task and the key: an entry that is not a mapping,
            an unknown or missing key, a task not in the suite, a metric other than ``return`` /
            ``win_rate``, a ``random`` or ``best`` that is not a finite number, ``random >= best``, an
            empty source, or two entries for one task.
    """
    if raw is None:
        return []
    if not isinstance(raw, list):
        raise MarlError(f"Suite {suite!r}: key bounds must be a list of mappings, got {raw!r}.")
    out, seen = [], set()
    for i, b in enumerate(raw):
        where = f"Suite {suite!r} bounds[{i}]"
        if not isinstance(b, dict):
            raise MarlError(f"{where} must be a mapping with keys {list(BOUND_KEYS)}, got {b!r}.")
        where += f" ({b.get('env')}/{b.get('task')})"
        for k in b:
            if k not in BOUND_KEYS:
                raise MarlError(
                    f"{where}: unknown key {k!r}; valid keys: {list(BOUND_KEYS)}.{closest(str(k), BOUND_KEYS)}"
                )
        missing = [k for k in BOUND_KEYS if k not in b]
        if missing:
            raise MarlError(f"{where} lacks {missing}; each entry needs {list(BOUND_KEYS)}.")
        _check_entry(where, b, tasks)
        key = (str(b["env"]), str(b["task"]))
        if key in seen:
            raise MarlError(f"{where}: a second entry for task {key[0]}/{key[1]}; give one per task.")
        seen.add(key)
        out.append(dict(b))
    return out


def _check_entry(where: str, b: Mapping[str, Any], tasks: Optional[Sequence[str]]) -> None:
    name = f"{b['env']}/{b['task']}"
    if tasks is not None and name not in tasks:
        raise MarlError(
            f"{where}: task {name!r} is not a task of this suite ({', '.join(tasks)}).{closest(name, tasks)}"
        )
    if b["metric"] not in _METRICS:
        raise MarlError(
            f"{where}: key metric {b['metric']!r} is not one of {list(_METRICS)}.{closest(str(b['metric']), _METRICS)}"
        )
    for k in ("random", "best"):
        v = b[k]
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not np.isfinite(v):
            raise MarlError(f"{where}: key {k} must be a finite number, got {v!r}.")
    if b["random"] >= b["best"]:
        raise MarlError(
            f"{where}: key random ({b['random']!r}) must be below key best ({b['best']!r}): "
            f"random play is the 0 of the normalised score and the best known score its 1."
        )
    for k in ("random_source", "best_source"):
        if not isinstance(b[k], str) or not b[k].strip():
            raise MarlError(
                f"{where}: key {k} must name where the number comes from (a paper, a command), got {b[k]!r}."
            )


def bounds_of_env(bounds: Sequence[Mapping[str, Any]], env: str) -> Dict[str, Dict[str, Any]]:
    """``{task: entry}`` of the checked ``bounds`` of one env."""
    return {str(b["task"]): dict(b) for b in bounds if str(b["env"]).lower() == env}


def random_play(family: str, task: str, kwargs: Mapping[str, Any], episodes: int, seed: int = 0) -> Dict[str, Any]:
    """Mean score of uniformly random legal actions (:meth:`MultiAgentEnv.random_actions`) on one task.

    Args:
        family, task, kwargs: what :func:`marl.make_env` takes.
        episodes: episodes to finish (counted over all env copies).
        seed: seed of the env's reset and of the actions (``torch.Generator``).

    Returns:
        ``{"episodes": n, "return": mean team return (summed over agents, the report's "return"),
        "win_rate": mean win rate (only where the env reports one)}``.

    Raises:
        MarlError: a bad env, or ``episodes`` not a whole number >= 1.
    """
    import torch

    import marl
    from marl.env.contract import EpisodeStats

    if isinstance(episodes, bool) or not isinstance(episodes, int) or episodes < 1:
        raise MarlError(f"episodes must be a whole number >= 1, got {episodes!r}.")
    env = marl.make_env(family, task, **dict(kwargs))
    gen = torch.Generator()
    gen.manual_seed(seed)
    stats, done = EpisodeStats(env.info), {"episode_return": []}
    step = env.reset(seed=seed)
    while len(done["episode_return"]) < episodes:
        step = env.step(env.random_actions(step, gen))
        stats.update(step)
        for k, v in stats.pop().items():
            done.setdefault(k, []).extend(v)
    out: Dict[str, Any] = {"episodes": len(done["episode_return"]), "return": float(np.mean(done["episode_return"]))}
    if done.get("win_rate"):
        out["win_rate"] = float(np.mean(done["win_rate"]))
    return out
