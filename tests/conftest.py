import os
import sys

import pytest
import torch

sys.path.insert(0, os.path.dirname(__file__))  # toy_envs
os.environ.setdefault("RAY_AUTH_MODE", "disabled")
torch.set_num_threads(1)


@pytest.fixture(scope="session")
def ray_session():
    """One Ray instance for the whole test run (2 CPUs, no dashboard)."""
    import ray

    if not ray.is_initialized():
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False,
                 runtime_env={"env_vars": {"PYTHONPATH": os.path.dirname(__file__)}})
    yield
    ray.shutdown()


@pytest.fixture
def run_dir(tmp_path):
    return str(tmp_path / "runs")
