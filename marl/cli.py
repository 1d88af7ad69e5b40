"""Command line: ``marl train | eval | league | list | bench``.

    marl train env=mpe:simple_spread algo=mappo stop.env_steps=1000000 lr=7e-4
    marl train env=mpe:simple_adversary algo=ippo env.num_envs=16 share=group
    marl eval marl_runs/<run>            # or a checkpoint folder; episodes=100
    marl eval marl_runs/<run> env=smax:8m     # transfer: act on another scenario (HPN / DPN agents)
    marl eval <checkpoint> --trust-checkpoint  # one from a trusted source, without marl's limits (docs/security.md)
    marl league marl_runs/<run> bots=[random] episodes=50   # cross-play matrix + ratings of its checkpoints
    marl list                            # env families and algorithms; marl list mpe: mpe's scenarios
    marl bench throughput --iters 10     # from the marl.benchmarks plugin

``train`` takes ``key=value`` pairs: ``env=family:scenario``, ``algo=name``,
``env.<kwarg>=value`` for the env (e.g. ``env.N=4``), ``stop.<criterion>=value``,
``resume=path``, and any config key of the algorithm (see ``configs/``);
``marl train algo=mappo [env=mpe] [key=value ...] --help`` lists the algorithm's keys
with the values it would train with (checked, without starting Ray).
"""

from __future__ import annotations

import argparse
import functools
import json
import shlex
import sys
from pathlib import Path
from typing import Callable, Dict, List, Optional, Tuple

from marl.errors import MarlError, RunInterrupted
from marl.noise import quiet_third_party
from marl.plugins import load_plugins, load_target


TRAIN_USAGE = """usage: marl train env=<family>:<scenario> algo=<name> [env.<kwarg>=value ...]
                  [stop.<criterion>=value ...] [resume=<checkpoint or run>] [<key>=value ...]
       marl train algo=<name> [env=<family>] [<key>=value ...] --help   (the algorithm's keys and values)

Trains <name> on the env and prints the final metrics, checkpoint and run folder as JSON.
stop criteria: env_steps, iterations, time_s, episode_return_mean (default stop.env_steps=1000000)."""


def _train(items: List[str]) -> int:
    import marl
    from marl.config import parse_cli_overrides

    if "--help" in items or "-h" in items:
        return _train_help([i for i in items if i not in ("--help", "-h")])
    env_kwargs = parse_cli_overrides([i[len("env.") :] for i in items if i.startswith("env.")])
    kv = parse_cli_overrides([i for i in items if not i.startswith("env.")])
    env_name = kv.pop("env", None)
    algo = kv.pop("algo", None)
    if not env_name or not algo:
        raise MarlError(
            "marl train needs env=<family>:<scenario> and algo=<name>, e.g. "
            "'marl train env=mpe:simple_spread algo=mappo' (marl train --help: the algorithms and keys)."
        )
    env = _make_env(env_name, env_kwargs)
    stop = kv.pop("stop", None)
    resume = kv.pop("resume", None)
    try:
        result = marl.fit(env, algo, stop=stop, resume=resume, **kv)
    except RunInterrupted as e:
        print(f"marl train: {e.message}", file=sys.stderr)
        if e.checkpoint:
            again = [i for i in items if not i.startswith("resume=")] + [f"resume={e.checkpoint}"]
            print(f"resume with: marl train {shlex.join(again)}", file=sys.stderr)
        return 130
    print(
        json.dumps(
            {
                "env_steps": result.metrics.get("env_steps"),
                "episode_return_mean": result.metrics.get("episode_return_mean"),
                "eval": result.eval,
                "checkpoint": result.checkpoint,
                "log_dir": result.log_dir,
            },
            indent=2,
        )
    )
    return 0


def _train_help(items: List[str]) -> int:
    """``marl train [algo=<name>] [env=<family>] [key=value ...] --help``: the usage, and with ``algo``
    the algorithm's keys with the values it would train with on ``env`` (checked; imports no torch, no Ray).

    Raises:
        MarlError: unknown algorithm, env family or key, or a bad value.
    """
    from marl.config import config_class, load_config, parse_cli_overrides, spec_map
    from marl.config.docs import fmt
    from marl.config.schema import type_name
    from marl.env import list_envs
    from marl.errors import unknown_choice

    kv = parse_cli_overrides([i for i in items if not i.startswith(("env.", "stop.", "resume="))])
    algo, env = kv.pop("algo", None), kv.pop("env", None)
    if algo is None:
        print(TRAIN_USAGE + "\n")
        _print_algos()
        return 0
    family = None if env is None else str(env).partition(":")[0]
    if family is not None and family not in list_envs():
        raise unknown_choice("env family", family, list(list_envs()))
    cfg = load_config(str(algo), family, kv)
    specs = spec_map(config_class(str(algo)))
    print(TRAIN_USAGE)
    where = f" on {family}" if family else ""
    print(f"\nKeys of {algo}{where} (key=value; the value it would train with, the type and range):")
    for layer in dict.fromkeys(s.layer for s in specs.values() if not s.internal):
        print(f"\n  {layer}:")
        for spec in (s for s in specs.values() if s.layer == layer and not s.internal):
            kind = type_name(spec.type) + (f", {spec.range_text()}" if spec.range_text() else "")
            print(f"    {spec.name}={fmt(getattr(cfg, spec.name))}  ({kind})  {spec.doc}")
    return 0


def _flag_options(items: List[str]) -> List[str]:
    """GNU-style flags as key=value items: ``--crash-rates 0 0.1 0.5`` -> ``crash_rates=[0,0.1,0.5]``,
    ``--episodes=200`` -> ``episodes=200``; other items pass unchanged."""
    out: List[str] = []
    i = 0
    while i < len(items):
        item = items[i]
        if not item.startswith("--"):
            out.append(item)
            i += 1
            continue
        key, eq, value = item[2:].partition("=")
        key = key.replace("-", "_")
        values = [value] if eq else []
        i += 1
        while not eq and i < len(items) and not items[i].startswith("--") and "=" not in items[i]:
            values.append(items[i].strip(","))
            i += 1
        if len(values) > 1:
            joined = ",".join(v for part in values for v in part.split(",") if v)
            out.append(f"{key}=[{joined}]")
        else:
            out.append(f"{key}={values[0] if values else 'true'}")
    return out


def _eval(items: List[str]) -> int:
    import marl
    from marl.config import parse_cli_overrides

    items = _flag_options(items)
    if not items:
        raise MarlError("marl eval needs a checkpoint or run folder: 'marl eval <path> [episodes=100]'.")
    path = items[0]
    env_kwargs = parse_cli_overrides([i[len("env.") :] for i in items[1:] if i.startswith("env.")])
    rest = parse_cli_overrides([i for i in items[1:] if not i.startswith("env.")])
    load_plugins()
    protocols = {k: v for k, v in rest.items() if k in _EVAL_OPTIONS}
    trust = rest.pop("trust_checkpoint", False)
    if not isinstance(trust, bool):
        raise MarlError(f"marl eval: --trust-checkpoint takes no value (got {trust!r}).")
    unknown = sorted(set(rest) - {"episodes", "env", "opponent"} - set(_EVAL_OPTIONS))
    if unknown:
        extra = "".join(f", {name}=... ({target[1]})" for name, target in sorted(_EVAL_OPTIONS.items()))
        raise MarlError(
            f"marl eval: unknown option(s) {unknown}. Valid: episodes=N, env=family:scenario, "
            f"env.<kwarg>=value, opponent=<bot> (text games), --trust-checkpoint{extra}."
        )
    episodes = _positive_int("episodes", rest.get("episodes", 100))
    env = None
    if "env" in rest:
        env = _make_env(rest["env"], {"num_envs": min(episodes, 32), **env_kwargs})
    result = marl.load(path, env=env, trust_checkpoint=trust)
    if protocols:
        for name, value in protocols.items():
            print(json.dumps(load_target(_EVAL_OPTIONS[name][0])(result, value, episodes), indent=2))
        return 0
    opponent = {"opponent": str(rest["opponent"])} if "opponent" in rest else {}
    stats = result.evaluate(episodes=episodes, env=env, **opponent)
    played = stats.pop("episodes", episodes)  # the text games' policies play exactly `episodes` games
    where = f"env={rest['env']}" if "env" in rest else "the scenario it trained on"
    print(f"[marl] eval: played {played} greedy episodes ({where})", file=sys.stderr)
    print(json.dumps({"checkpoint": result.checkpoint, "episodes": played, **stats}, indent=2))
    return 0


def _positive_int(name: str, value: object) -> int:
    """A command-line count: a whole number >= 1 (``episodes=100``).

    Raises:
        MarlError: anything else (``episodes=abc``, ``episodes=0``, ``episodes=2.5``).
    """
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value != value or value < 1 or value % 1:
        raise MarlError(f"{name} expects a whole number >= 1, e.g. {name}=100; got {value!r}.")
    return int(value)


def _make_env(name: object, kwargs: Dict[str, object]):
    """``env=family:scenario`` with its ``env.<kwarg>=value`` items. A value of the wrong type that an
    env library rejects with a TypeError / ValueError of its own becomes a :class:`MarlError` naming it."""
    import marl

    family, _, scenario = str(name).partition(":")
    try:
        return marl.make_env(family, scenario or None, **kwargs)
    except (TypeError, ValueError) as e:
        if isinstance(e, MarlError):
            raise
        given = " ".join(f"env.{k}={v!r}" for k, v in kwargs.items())
        raise MarlError(
            f"Cannot build env={name} with {given or 'no env.<kwarg> values'}: {type(e).__name__}: {e}"
        ) from e


def _list(items: List[str]) -> int:
    """``marl list``: env families and algorithms (imports no env, no torch, no Ray);
    ``marl list <family> ...``: the scenarios of those families; ``marl list envs``: of every family.

    Raises:
        MarlError: an unknown family (names the closest).
    """
    from marl.env import list_envs
    from marl.errors import unknown_choice

    families = list_envs()
    if items:
        names = list(families) if items == ["envs"] else items
        for name in names:
            if name not in families:
                raise unknown_choice("env family", name, ["envs", *families])
            print(f"{name}: {', '.join(list_envs(with_scenarios=True, families=[name])[name]) or '(one game)'}")
        return 0
    print("Environments (marl.make_env(family, scenario); the scenarios: marl list <family>):")
    for fam, desc in families.items():
        print(f"  {fam:<15} {desc}")
    _print_algos()
    return 0


def _print_algos() -> None:
    from marl.config import list_algos

    print("Algorithms (env.fit(algo), marl train algo=<name>; the keys: marl train algo=<name> --help):")
    for name, desc in list_algos().items():
        print(f"  {name:<19} {desc}")


def _league(items: List[str]) -> int:
    """``marl league <run or checkpoint>... [bots=[random]] [episodes=50] [out=DIR] [seed=0]`` (marl.league)."""
    from marl.config import parse_cli_overrides
    from marl.league import run_league

    items = _flag_options(items)
    paths = [i for i in items if "=" not in i]
    opts = parse_cli_overrides([i for i in items if "=" in i])
    unknown = sorted(set(opts) - {"bots", "episodes", "out", "seed"})
    if unknown or not paths:
        raise MarlError(
            "usage: marl league <run or checkpoint>... [bots=[random]] [episodes=50] [out=DIR] [seed=0]"
            + (f"; unknown option(s) {unknown}" if unknown else "; no run or checkpoint folder given")
        )
    bots = opts.get("bots", ["random"])
    bots = [bots] if isinstance(bots, str) else list(bots or [])
    report = run_league(
        paths, bots, _positive_int("episodes", opts.get("episodes", 50)), opts.get("out"), int(opts.get("seed", 0))
    )
    print(Path(report["out"], "league.md").read_text())
    print(f"written to {report['out']}")
    return 0


COMMANDS: Dict[str, Callable[[List[str]], int]] = {"train": _train, "eval": _eval, "list": _list, "league": _league}
_PLUGIN_COMMANDS: Dict[str, str] = {}


_EVAL_OPTIONS: Dict[str, Tuple[str, str]] = {}


def register_eval_option(name: str, target: str, help: str) -> None:
    """Add an evaluation protocol to ``marl eval <run> <name>=<value>`` (also ``--<name-with-dashes> v ...``).

    ``target`` is ``"module:function"``; the function takes ``(result, value, episodes)``
    (a :class:`~marl.results.Result`, the parsed value, the ``episodes=`` option) and
    returns a JSON-serialisable dict that is printed. Plugins register their protocols
    with it (e.g. the crash wrapper's ``crash_rates``); ``help`` is shown in errors.
    """
    _EVAL_OPTIONS[name] = (target, help)


def register_command(name: str, target: str) -> None:
    """Add ``marl <name> ...``: ``target`` is ``"module:function"``, a function taking the
    remaining command-line arguments (a list of str) and returning the exit code. Plugins
    (``marl.plugins`` entry points, e.g. the benchmarks) register their commands with it."""
    _PLUGIN_COMMANDS[name] = target


def _run_plugin_command(target: str, items: List[str]) -> int:
    """Run the command a plugin registered as ``"module:function"`` (imported on first use)."""
    return load_target(target)(items)


def _commands() -> Dict[str, Callable[[List[str]], int]]:
    load_plugins()
    out = dict(COMMANDS)
    for name, target in _PLUGIN_COMMANDS.items():
        out[name] = functools.partial(_run_plugin_command, target)
    return out


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(
        prog="marl", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    commands = _commands()
    parser.add_argument("command", choices=sorted(commands), help="what to do")
    parser.add_argument("args", nargs=argparse.REMAINDER, help="key=value arguments of the command")
    ns = parser.parse_args(argv)
    quiet_third_party()
    try:
        return commands[ns.command](ns.args)
    except MarlError as e:
        print(f"marl {ns.command}: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:  # Ctrl-C outside training (which answers with RunInterrupted): no traceback
        print(f"marl {ns.command}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    # Under `python -m marl.cli` this file runs as `__main__`, a second module object: plugins register
    # their commands in the imported `marl.cli`, so run that module's main.
    from marl.cli import main as _main

    sys.exit(_main())
