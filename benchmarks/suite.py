"""Benchmark suites: a YAML file of envs x algorithms x seeds, checked before anything runs.

A suite (bundled ones in ``configs/benchmarks/<name>.yaml``, or any YAML path)::

    name: mpe
    seeds: 5                      # or a list: [0, 1, 2]
    budget: {env_steps: 1000000}
    evaluation: {interval: 50000, episodes: 32, absolute_factor: 10, actions: greedy}   # or sample
    checkpoint_every: 20          # iterations between checkpoints (interrupted runs resume there)
    resources: {cpus_per_run: 1, gpus_per_run: 0}
    envs:
      mpe:                        # an env family (marl.list_envs())
        tasks: [simple_spread, simple_speaker_listener]
        kwargs: {}                # make_env keyword arguments of every task
        task_kwargs: {simple_spread: {max_cycles: 25}}   # and of one task (over kwargs)
        overrides: {qmix: {lr: 0.0005}}   # config overrides of one algorithm on this env
    algos:
      mappo: {}                   # config overrides on every env
      hpn_qmix: {algo: qmix, agent: hpn}  # a label for a configured algorithm
    references:                   # published numbers shown beside ours (report)
      - {env: smax, task: 2s3z, algo: mappo, metric: win_rate, value: 1.0, ci: null,
         source: "...", budget: "10M env steps"}
    targets:                      # time to target (report): env steps and seconds to first reach it
      - {env: smax, task: 3m, algo: qmix, metric: win_rate, value: 0.9}
    bounds:                       # per task: random play and the best known score (the aggregate's 0 and 1)
      - {env: smax, task: 3m, metric: win_rate, random: 0.0, best: 1.0,
         random_source: "marl benchmark random smax_short", best_source: "..."}

:func:`load_suite` checks every name (top-level keys, families, tasks, algorithms,
config keys of every (env, algorithm) pair) and raises :class:`~marl.errors.MarlError`
naming the closest valid choice; :meth:`Suite.runs` lists the ``(env, task, algo, seed)``
runs. The evaluation protocol is Gorsane et al. 2022, "Towards a standardised
performance evaluation protocol for cooperative MARL" (arXiv:2209.10485), Section 4.
"""

from __future__ import annotations

import copy
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Sequence

import yaml

from marl.errors import MarlError, closest, unknown_choice
from marl.benchmarks.bounds import check_bounds

SUITE_DIR = Path(__file__).resolve().parent.parent / "configs" / "benchmarks"
_TOP = {
    "name",
    "description",
    "seeds",
    "budget",
    "evaluation",
    "checkpoint_every",
    "resources",
    "envs",
    "algos",
    "references",
    "targets",
    "bounds",
}
_ENV_KEYS = {"tasks", "kwargs", "task_kwargs", "overrides"}
_EVAL_KEYS = {"interval", "episodes", "absolute_factor", "actions"}
EVAL_ACTIONS = ("greedy", "sample")  # evaluation.actions: the policy's argmax, or a draw from it
_BUDGET_KEYS = {"env_steps"}
_RESOURCE_KEYS = {"cpus_per_run", "gpus_per_run"}
_REFERENCE_KEYS = {"env", "task", "algo", "metric", "value", "ci", "source", "budget", "note"}
_TARGET_KEYS = {"env", "task", "algo", "metric", "value"}
_METRICS = ("return", "win_rate")
_RUNNER_KEYS = {  # config keys every run gets from the runner, and the suite key that sets them
    "seed": "the suite's seeds",
    "log_dir": "the run's folder under --out",
    "progress": "the runner's progress view",
    "eval_episodes": "the suite's evaluation",
    "checkpoint_every": "the suite's checkpoint_every",
}
_LABEL = re.compile(r"^[a-z0-9_\-]+$")  # marl-eval lower-cases keys and refuses commas in algorithm names


@dataclass(frozen=True)
class RunSpec:
    """One run of a suite: train ``algo`` (config ``overrides``) on ``env``/``task`` with ``seed``."""

    env: str
    task: str
    algo_label: str
    algo: str
    seed: int
    env_kwargs: Dict[str, Any]
    overrides: Dict[str, Any]

    @property
    def key(self) -> str:
        """``"<env>/<task>/<algo label>/seed_<k>"``: the run's place in results.json and under ``runs/``."""
        return f"{self.env}/{self.task}/{self.algo_label}/seed_{self.seed}"


@dataclass
class Suite:
    """A checked benchmark suite (see the module docstring for the YAML keys).

    Attributes:
        env_steps: training budget of every run, env steps (summed over env copies).
        eval_interval: env steps between greedy evaluations; eval_episodes: episodes per evaluation.
        absolute_factor: the absolute metric re-evaluates the best policy over this many
            times ``eval_episodes`` episodes (10 in the protocol).
        eval_actions: ``"greedy"`` (the protocol's default) or ``"sample"``: evaluation episodes draw
            actions from the policy, as EPyMARL tests its policy-gradient methods (its
            ``soft_policies`` action selector samples in test mode too).
    """

    name: str
    seeds: List[int]
    env_steps: int
    eval_interval: int
    eval_episodes: int
    absolute_factor: int
    checkpoint_every: int
    cpus_per_run: float
    gpus_per_run: float
    envs: Dict[str, Dict[str, Any]]
    algos: Dict[str, Dict[str, Any]]
    references: List[Dict[str, Any]] = field(default_factory=list)
    targets: List[Dict[str, Any]] = field(default_factory=list)
    bounds: List[Dict[str, Any]] = field(default_factory=list)  # marl.benchmarks.bounds.check_bounds
    eval_actions: str = "greedy"
    description: str = ""
    source: Dict[str, Any] = field(default_factory=dict)
    seeds_given: bool = False  # seeds came from with_seeds (--seeds), not from the file
    tasks_given: List[str] = field(default_factory=list)  # with_tasks (--tasks): run only these tasks
    algos_given: List[str] = field(default_factory=list)  # with_algos (--algos): run only these algorithms
    origin: str = ""  # what load_suite was given (a bundled name or a file path), for the relaunch hint

    def runs(self) -> List[RunSpec]:
        """Every ``(env, task, algo, seed)`` run, in the order env, task, algo, seed."""
        out = []
        for env, e in self.envs.items():
            for task in e["tasks"]:
                for label, a in self.algos.items():
                    overrides = {**{k: v for k, v in a.items() if k != "algo"}, **e["overrides"].get(label, {})}
                    for seed in self.seeds:
                        out.append(
                            RunSpec(
                                env,
                                task,
                                label,
                                a.get("algo", label),
                                seed,
                                self.env_kwargs(env, task),
                                {**overrides, "seed": seed},
                            )
                        )
        return out

    def env_kwargs(self, family: str, task: str) -> Dict[str, Any]:
        """The ``make_env`` keyword arguments of ``family``/``task``: the env's ``kwargs``, then its
        ``task_kwargs`` of that task over them."""
        e = self.envs[family]
        return {**e["kwargs"], **e.get("task_kwargs", {}).get(task, {})}

    def with_seeds(self, seeds: Sequence[int]) -> "Suite":
        """A copy running ``seeds`` instead (``marl benchmark run --seeds``)."""
        out = copy.deepcopy(self)
        out.seeds = _seeds(list(seeds))
        out.seeds_given = True
        return out

    def with_tasks(self, tasks: Sequence[str]) -> "Suite":
        """A copy running only ``tasks`` of the suite's tasks (``marl benchmark run --tasks``), e.g. to
        add one task to results kept earlier (``marl benchmark tables --import --merge``).

        A task is named by itself (``3m``) or, where two env families share a task name, as
        ``<env>/<task>``; an env family left with no task is dropped.

        Raises:
            MarlError: a name that is no task of the suite (naming the suite's tasks).
        """
        valid = {f"{env}/{t}": (env, t) for env, e in self.envs.items() for t in e["tasks"]}
        keep = set()
        for name in tasks:
            hits = [v for k, v in valid.items() if name in (k, v[1])]
            if len(hits) != 1:
                why = "names tasks of two env families (give <env>/<task>)" if hits else "is no task of this suite"
                raise MarlError(f"--tasks {name!r} {why}; suite {self.name!r} has tasks: {', '.join(sorted(valid))}.")
            keep.add(hits[0])
        out = copy.deepcopy(self)
        out.envs = {
            env: {**e, "tasks": [t for t in e["tasks"] if (env, t) in keep]}
            for env, e in self.envs.items()
            if any((env, t) in keep for t in e["tasks"])
        }
        out.tasks_given = list(tasks)
        return out

    def with_algos(self, labels: Sequence[str]) -> "Suite":
        """A copy running only the algorithms ``labels`` of the suite's ``algos`` (``marl benchmark run
        --algos``), e.g. to add a task for two of a suite's algorithms and keep the rest for later.

        Raises:
            MarlError: a label that is not in the suite's ``algos`` (naming them).
        """
        unknown = [a for a in labels if a not in self.algos]
        if unknown:
            raise MarlError(
                f"--algos {unknown[0]!r} is not an algorithm of suite {self.name!r}; it has: {', '.join(self.algos)}."
            )
        out = copy.deepcopy(self)
        out.algos = {label: a for label, a in self.algos.items() if label in labels}
        out.algos_given = list(labels)
        return out


def bundled_suites() -> List[str]:
    """Names of the suites in ``configs/benchmarks/`` (``smoke``, ``mpe``, ``smax``, ...)."""
    return sorted(p.stem for p in SUITE_DIR.glob("*.yaml"))


def load_suite(name_or_path: str) -> Suite:
    """Read and check a suite: a bundled name (:func:`bundled_suites`) or a YAML file path.

    Raises:
        MarlError: no such suite or file; a YAML error; an unknown key, env family, task,
            algorithm or config key (the message names the closest valid choice); a value
            out of range (seeds, budget, interval, episodes, resources).
    """
    path = Path(name_or_path)
    if not path.is_file():  # a bundled name, even where a folder of that name sits here (an output folder)
        if name_or_path in bundled_suites():
            path = SUITE_DIR / f"{name_or_path}.yaml"
        elif not path.suffix:
            raise MarlError(
                f"No benchmark suite {name_or_path!r}: bundled suites are {bundled_suites()}, or give "
                f"the path of a YAML file.{closest(name_or_path, bundled_suites())}"
            )
    if not path.is_file():
        raise MarlError(f"Benchmark suite file {str(path)!r} does not exist.")
    try:
        raw = yaml.safe_load(path.read_text())
    except yaml.YAMLError as e:
        raise MarlError(f"Benchmark suite {str(path)!r} is not valid YAML: {e}") from e
    if not isinstance(raw, dict):
        raise MarlError(f"Benchmark suite {str(path)!r} must be a mapping of keys {sorted(_TOP)}.")
    suite = parse_suite(raw, default_name=path.stem)
    suite.origin = name_or_path if path.parent == SUITE_DIR else str(path.resolve())
    return suite


def parse_suite(raw: Dict[str, Any], default_name: str = "suite") -> Suite:
    """Check a suite given as a dict (the parsed YAML); see :func:`load_suite` for the errors."""
    _known_keys("suite", raw, _TOP)
    evaluation = _section(raw, "evaluation", _EVAL_KEYS)
    resources = _section(raw, "resources", _RESOURCE_KEYS)
    budget = _section(raw, "budget", _BUDGET_KEYS)
    if not raw.get("envs") or not raw.get("algos"):
        raise MarlError("A benchmark suite needs 'envs' (family -> tasks) and 'algos' (name -> overrides).")
    suite = Suite(
        name=_label("name", raw.get("name", default_name)),
        seeds=_seeds(raw.get("seeds", 3)),
        env_steps=_positive("budget.env_steps", budget.get("env_steps"), int),
        eval_interval=_positive("evaluation.interval", evaluation.get("interval"), int),
        eval_episodes=_positive("evaluation.episodes", evaluation.get("episodes", 32), int),
        absolute_factor=_positive("evaluation.absolute_factor", evaluation.get("absolute_factor", 10), int),
        eval_actions=_eval_actions(evaluation.get("actions", "greedy")),
        checkpoint_every=_positive("checkpoint_every", raw.get("checkpoint_every", 20), int),
        cpus_per_run=_positive("resources.cpus_per_run", resources.get("cpus_per_run", 1), float),
        gpus_per_run=_non_negative("resources.gpus_per_run", resources.get("gpus_per_run", 0)),
        envs={},
        algos=_algos(raw["algos"]),
        description=str(raw.get("description", "")),
        source=copy.deepcopy(raw),
    )
    suite.envs = _envs(raw["envs"], suite.algos)
    suite.references = _references(raw.get("references") or [], suite)
    suite.targets = _targets(raw.get("targets") or [], suite)
    tasks = [f"{env}/{task}" for env, e in suite.envs.items() for task in e["tasks"]]
    suite.bounds = check_bounds(raw.get("bounds"), suite.name, tasks)
    return suite


# ------------------------------------------------------------------ checks
def _targets(raw: Any, suite: Suite) -> List[Dict[str, Any]]:
    """``targets`` (docs/benchmarks.md, "Time to target"): each names a task of the suite, a metric
    and a number; ``algo`` (optional) one of its algorithms."""
    if not isinstance(raw, list):
        raise MarlError(f"Suite key targets must be a list of mappings, got {raw!r}.")
    tasks = [f"{env}/{task}" for env, e in suite.envs.items() for task in e["tasks"]]
    for i, t in enumerate(raw):
        _known_keys(f"targets[{i}]", t, _TARGET_KEYS)
        missing = [k for k in ("env", "task", "metric", "value") if k not in t]
        if missing:
            raise MarlError(f"targets[{i}] lacks {missing}; each target needs env, task, metric, value.")
        if f"{t['env']}/{t['task']}" not in tasks:
            name = f"{t['env']}/{t['task']}"
            raise MarlError(
                f"targets[{i}] names {name!r}, not a task of this suite (tasks: {', '.join(tasks)})."
                f"{closest(name, tasks)}"
            )
        if t.get("algo") is not None and t["algo"] not in suite.algos:
            raise MarlError(
                f"targets[{i}].algo {t['algo']!r} is not an algorithm of this suite "
                f"({', '.join(suite.algos)}).{closest(str(t['algo']), list(suite.algos))}"
            )
        if t["metric"] not in _METRICS:
            raise MarlError(
                f"targets[{i}].metric {t['metric']!r} is not one of {list(_METRICS)}."
                f"{closest(str(t['metric']), _METRICS)}"
            )
        if isinstance(t["value"], bool) or not isinstance(t["value"], (int, float)):
            raise MarlError(f"targets[{i}].value must be a number, got {t['value']!r}.")
    return [dict(t) for t in raw]


def _known_keys(where: str, d: Any, valid: set) -> None:
    if not isinstance(d, dict):
        raise MarlError(f"Suite key {where!r} must be a mapping, got {d!r}.")
    for k in d:
        if k not in valid:
            raise MarlError(f"Unknown key {k!r} in {where}; valid keys: {sorted(valid)}.{closest(k, sorted(valid))}")


def _eval_actions(value: Any) -> str:
    if value not in EVAL_ACTIONS:
        raise unknown_choice("evaluation.actions", value, EVAL_ACTIONS)
    return value


def _section(raw: Dict[str, Any], name: str, valid: set) -> Dict[str, Any]:
    d = raw.get(name) or {}
    _known_keys(name, d, valid)
    return d


def _positive(name: str, value: Any, kind: type) -> Any:
    if value is None:
        raise MarlError(f"The suite needs {name} (a number > 0).")
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float))
        or value <= 0
        or (kind is int and float(value) != int(value))
    ):
        what = "a whole number > 0" if kind is int else "a number > 0"
        raise MarlError(f"Suite key {name} must be {what}, got {value!r}.")
    return kind(value)


def _non_negative(name: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
        raise MarlError(f"Suite key {name} must be a number >= 0, got {value!r}.")
    return float(value)


def _label(what: str, value: Any) -> str:
    if not isinstance(value, str) or not _LABEL.match(value):
        raise MarlError(
            f"Suite {what} {value!r} must be lower-case letters, digits, '_' or '-' "
            f"(marl-eval lower-cases names and refuses commas)."
        )
    return value


def _seeds(value: Any) -> List[int]:
    if isinstance(value, int) and not isinstance(value, bool):
        if value < 1:
            raise MarlError(f"Suite key seeds must be a number of seeds >= 1 or a list of seeds, got {value!r}.")
        return list(range(value))
    if (
        not isinstance(value, list)
        or not value
        or any(isinstance(s, bool) or not isinstance(s, int) or s < 0 for s in value)
    ):
        raise MarlError(
            f"Suite key seeds must be a number of seeds >= 1 or a list of whole numbers >= 0, got {value!r}."
        )
    if len(set(value)) != len(value):
        raise MarlError(f"Suite seeds repeat a seed: {value!r}.")
    return list(value)


def _algos(raw: Any) -> Dict[str, Dict[str, Any]]:
    from marl.api import list_algos

    if isinstance(raw, list):  # [mappo, qmix]: no overrides
        raw = {a: {} for a in raw}
    if not isinstance(raw, dict):
        raise MarlError(f"Suite key algos must map algorithm names to overrides, got {raw!r}.")
    valid = sorted(list_algos())
    out = {}
    for label, over in raw.items():
        over = dict(over or {})
        algo = over.get("algo", label)
        if algo not in valid:
            raise MarlError(f"Unknown algorithm {algo!r} in the suite's algos; valid: {valid}.{closest(algo, valid)}")
        out[_label("algorithm label", label)] = over
    return out


def _envs(raw: Any, algos: Dict[str, Dict[str, Any]]) -> Dict[str, Dict[str, Any]]:
    from marl.env.registry import list_envs, scenarios_of

    if not isinstance(raw, dict):
        raise MarlError(f"Suite key envs must map env families to their tasks, got {raw!r}.")
    families = sorted(list_envs())
    out = {}
    for family, e in raw.items():
        if family not in families:
            raise MarlError(
                f"Unknown env family {family!r} in the suite; valid: {families}.{closest(family, families)}"
            )
        e = {"tasks": e} if isinstance(e, list) else dict(e or {})
        _known_keys(f"envs.{family}", e, _ENV_KEYS)
        tasks = e.get("tasks") or []
        scenarios = scenarios_of(family)
        for t in tasks:
            if scenarios and str(t).lower() not in {s.lower() for s in scenarios}:
                raise MarlError(
                    f"Unknown task {t!r} of env family {family!r}; valid: {scenarios}.{closest(t, scenarios)}"
                )
            if str(t) != str(t).lower():  # checked here, not after the runs: results.json keys must be lower case
                raise MarlError(
                    f"Task {t!r} of env family {family!r}: suite tasks are written in lower case "
                    f"(marl-eval lower-cases every key of results.json); use {str(t).lower()!r}."
                )
        if not tasks:
            raise MarlError(f"envs.{family} lists no tasks; valid tasks: {scenarios}.")
        overrides = e.get("overrides") or {}
        _known_keys(f"envs.{family}.overrides", overrides, set(algos))
        per_task = e.get("task_kwargs") or {}
        _known_keys(f"envs.{family}.task_kwargs", per_task, set(tasks))
        for t, kw in per_task.items():
            if not isinstance(kw, dict):
                raise MarlError(f"Suite key envs.{family}.task_kwargs.{t} must map make_env arguments, got {kw!r}.")
        out[family] = {
            "tasks": list(tasks),
            "kwargs": dict(e.get("kwargs") or {}),
            "task_kwargs": {t: dict(kw) for t, kw in per_task.items()},
            "overrides": overrides,
        }
        for label, a in algos.items():
            _check_config(family, label, a, overrides.get(label, {}))
    return out


def _check_config(family: str, label: str, algo_overrides: Dict[str, Any], env_overrides: Dict[str, Any]) -> None:
    """The config of ``label`` on ``family`` loads (types, ranges, known keys) before anything runs."""
    from marl.config import load_config

    over = {**{k: v for k, v in algo_overrides.items() if k != "algo"}, **env_overrides}
    for k in over:
        if k in _RUNNER_KEYS:
            raise MarlError(
                f"Suite algorithm {label!r} on env {family!r} sets {k!r}, which the benchmark runner sets "
                f"for every run ({_RUNNER_KEYS[k]})."
            )
    try:
        load_config(algo_overrides.get("algo", label), family, over)
    except MarlError as e:
        raise MarlError(f"Suite algorithm {label!r} on env {family!r}: {e}") from e


def _references(raw: Any, suite: Suite) -> List[Dict[str, Any]]:
    if not isinstance(raw, list):
        raise MarlError(f"Suite key references must be a list of mappings, got {raw!r}.")
    out = []
    for i, r in enumerate(raw):
        _known_keys(f"references[{i}]", r, _REFERENCE_KEYS)
        missing = [k for k in ("env", "task", "algo", "metric", "value", "source") if k not in r]
        if missing:
            raise MarlError(
                f"references[{i}] lacks {missing}; each reference needs env, task, algo, metric, value, source."
            )
        if r["metric"] not in _METRICS:
            raise MarlError(
                f"references[{i}].metric {r['metric']!r} is not one of {list(_METRICS)}."
                f"{closest(r['metric'], _METRICS)}"
            )
        ci = r.get("ci")
        if ci is not None and (not isinstance(ci, list) or len(ci) != 2 or ci[0] > ci[1]):
            raise MarlError(f"references[{i}].ci must be [low, high] or null, got {ci!r}.")
        out.append({"ci": None, "budget": "", "note": "", **r})
    return out
