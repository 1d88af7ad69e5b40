"""Test-only budget clamp for the doc examples (tests/test_doc_examples.py).

tests/test_doc_examples.py puts this folder first on ``PYTHONPATH`` of the subprocess that runs a
page's code blocks, so Python imports this module at start-up (the ``site`` module's
``sitecustomize`` hook, https://docs.python.org/3/library/site.html). It does nothing unless
``MARL_DOC_TEST_ITERATIONS`` is set; then every training call (``marl.fit``, ``env.fit``,
``marl train``) stops after that many iterations from its start (added to the example's own stop
criteria, which stay, e.g. for a learning-rate schedule over its env steps), and
the greedy evaluation at the end of ``fit`` plays at most ``MARL_DOC_TEST_EVAL_EPISODES`` episodes.
The example's own ``stop`` is still checked as ``fit`` checks it, so a wrong stop in a doc fails.

marl itself has no test-only branch: the clamp wraps :func:`marl.fit` from outside, when
``marl.api`` is first imported (a hook on the import system, so that processes that never import
marl, such as Ray's own helper processes, start as fast as without it), and installs the wrapper
behind ``MultiAgentEnv.fit`` with the public :func:`marl.env.set_fit_entry`.
"""

import functools
import importlib.abc
import os
import sys


def _iterations_done(resume: str) -> int:
    """Iterations already trained in the checkpoint ``resume`` names (a checkpoint or a run folder)."""
    import json

    from marl.checkpoint import resolve_checkpoint

    manifest = resolve_checkpoint(resume) / "marl_manifest.json"
    return int(json.loads(manifest.read_text())["iteration"])


def _start_ray(start_ray, tries: int = 3) -> None:
    """Start Ray as ``fit`` would, trying again when its node does not come up within Ray's 30 s
    (seen on a 2-core machine shared by many jobs); ``fit`` then uses the running Ray."""
    import ray

    for attempt in range(tries):
        try:
            start_ray()
            return
        except Exception as e:  # noqa: BLE001 - Ray raises a bare Exception on a startup timeout
            if "timed out during startup" not in str(e) or attempt == tries - 1:
                raise
            ray.shutdown()


def _install(api, iterations: int, eval_cap: int) -> None:
    """Wrap ``api.fit`` (the module ``marl.api``, just executed) with the clamp."""
    from marl.env import MultiAgentEnv, set_fit_entry

    full = api.fit

    @functools.wraps(full)
    def fit(env, algo, *, stop=None, resume=None, **overrides):
        done = _iterations_done(resume) if resume else 0
        if isinstance(env, MultiAgentEnv):  # text games evaluate against opponents, not here
            overrides["eval_episodes"] = min(int(overrides.get("eval_episodes", eval_cap)), eval_cap)
        _start_ray(api.start_ray)
        # the example's own criteria stay (a linear lr schedule needs its env_steps); one more ends it first
        small = {**(stop or {}), "iterations": done + iterations}
        return full(env, algo, stop=small, resume=resume, **overrides)

    api.fit = fit
    set_fit_entry(fit)


class _PatchMarlApi(importlib.abc.MetaPathFinder):
    """Finds ``marl.api`` with the other finders and runs :func:`_install` right after it executes."""

    def __init__(self, iterations: int, eval_cap: int):
        self.iterations, self.eval_cap = iterations, eval_cap

    def find_spec(self, name, path, target=None):
        if name != "marl.api":
            return None
        for finder in sys.meta_path:
            find = getattr(finder, "find_spec", None)
            spec = find(name, path, target) if finder is not self and find else None
            if spec is not None:
                break
        else:
            return None
        exec_module = spec.loader.exec_module

        def exec_and_patch(module):
            exec_module(module)
            _install(module, self.iterations, self.eval_cap)

        spec.loader.exec_module = exec_and_patch
        return spec


if os.environ.get("MARL_DOC_TEST_ITERATIONS"):
    sys.meta_path.insert(
        0,
        _PatchMarlApi(
            int(os.environ["MARL_DOC_TEST_ITERATIONS"]), int(os.environ.get("MARL_DOC_TEST_EVAL_EPISODES", "4"))
        ),
    )
