"""marl's benchmarks, installed as ``marl.benchmarks`` (the top-level ``benchmarks/`` folder).

A plugin like ``marl.envs`` and ``marl.algos``: setup.py lists it in the
``marl.plugins`` entry points (:mod:`marl.plugins`), and importing it registers
the ``marl bench`` command by name, so its modules are imported only when the
command runs. The benchmarks use marl through its public API
(:func:`marl.make_env`, :func:`marl.api.build_trainer`) and return result
dataclasses that format their own text report and JSON.

Modules:

- :mod:`~marl.benchmarks.common`: the measurement method, :class:`SideResult`,
  clocks, Ray, JSON and table rows shared by every benchmark.
- :mod:`~marl.benchmarks.marl_side`: one marl side (any env family and algorithm).
- :mod:`~marl.benchmarks.rllib_anchor`: RLlib's stock multi-agent PPO, the anchor.
- :mod:`~marl.benchmarks.throughput`: ``marl bench throughput`` (marl vs RLlib on MPE, and VMAS).
- :mod:`~marl.benchmarks.smax`: ``marl bench smax`` (QMIX and MAPPO on SMAX).
- :mod:`~marl.benchmarks.agents`: ``marl bench agents`` (HPN / DPN / ASN vs the plain network).
- :mod:`~marl.benchmarks.cli`: the ``marl bench`` command line.
- :mod:`~marl.benchmarks.bounds`: a suite's reference bounds (random play, best known score) that
  normalise the report's aggregate, and ``marl benchmark random``.
- :mod:`~marl.benchmarks.figures`: the report's figures, in one style.
- :mod:`~marl.benchmarks.guardian`: ends the processes of a ``marl benchmark run`` that died (SIGKILL).
- :mod:`~marl.benchmarks.tables`: ``marl benchmark tables``, the result tables of README.md and docs/
  written from the runner's JSON kept in ``docs/results/``.
"""

from marl.cli import register_command
from marl.plugins import register_function

register_command("bench", "marl.benchmarks.cli:main")
register_command("benchmark", "marl.benchmarks.benchmark_cli:main")
register_function("benchmark", "marl.benchmarks.driver:benchmark")
