"""Every scenario of each batched env family (VMAS, MPE, SMAX) trains one ``fit`` iteration (issue 29, item 1).

The adapters must normalise every shape the wrapped library emits (VMAS ``wheel`` gives its reward as
``[B, 1]``): under ``fit`` the env runner's guard (:class:`marl.env.guard.EnvGuard`) stops any step whose
shapes or dtypes differ from ``env.info``. Smallest budget: 2 env copies, 2 steps per copy, one epoch, no
evaluation, sampling in the driver (``num_env_runners=0``), one Ray session for all cases (``ray_session``).
A family whose package is not installed is skipped; SMAX scenarios but one are marked slow (XLA compiles each).
"""

from __future__ import annotations

import importlib

import pytest

import marl
from marl.env import scenarios_of

FAMILIES = {"vmas": "vmas", "mpe": "mpe2", "smax": "jaxmarl"}  # family -> the package it needs
B, T = 2, 2
# SMAX compiles each scenario with XLA first: 55 to 240 s per scenario on 2 busy cores (measured with
# this test's budget). One runs by default; the others are marked slow (CI runs them, -m "not slow" skips).
QUICK_SMAX = {"3m"}


def _cases():
    out = []
    for family, package in FAMILIES.items():
        try:
            importlib.import_module(package)
        except ImportError:
            out.append(pytest.param(family, None, marks=pytest.mark.skip(reason=f"{package} is not installed")))
            continue
        for s in scenarios_of(family):
            slow = family == "smax" and s not in QUICK_SMAX
            out.append(pytest.param(family, s, marks=[pytest.mark.slow] if slow else []))
    return out


@pytest.mark.parametrize("family, scenario", _cases())
def test_every_batched_scenario_fits_one_iteration(ray_session, run_dir, family, scenario):
    env = marl.make_env(family, scenario, num_envs=B)
    result = env.fit(
        "ippo",
        stop={"iterations": 1},
        rollout_length=T,
        epochs=1,
        eval_episodes=0,
        num_env_runners=0,
        checkpoint_every=0,
        progress=False,
        log_dir=run_dir,
    )
    assert result.metrics["env_steps"] == B * T
