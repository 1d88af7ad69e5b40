import os
import sys

import pytest
import torch

sys.path.insert(0, os.path.dirname(__file__))  # toy_envs
# Ray's workers inherit this process's environment: with tests/ on PYTHONPATH they import the env classes of
# toy_envs and of the test modules whichever test starts Ray (a plain fit starts it without the runtime_env of
# ray_session below, and a later remote env runner of the same worker could not unpickle a test module's env)
os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (os.path.dirname(__file__), os.environ.get("PYTHONPATH")) if p)
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
