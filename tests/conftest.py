import os
import sys

import pytest
import torch

sys.path.insert(0, os.path.dirname(__file__))  # toy_envs
torch.set_num_threads(1)


@pytest.fixture(scope="session")
def ray_session():
    """One Ray instance for the whole test run, started as marl starts it (2 CPUs, no dashboard,
    loopback only, token authentication on); remote workers import toy_envs from here."""
    import ray

    from marl.api import start_ray

    start_ray(num_cpus=2, runtime_env={"env_vars": {"PYTHONPATH": os.path.dirname(__file__)}})
    yield
    ray.shutdown()


@pytest.fixture
def run_dir(tmp_path):
    return str(tmp_path / "runs")
