"""Security of what marl starts and reads: a loopback-only Ray with token authentication on."""
import subprocess
import sys

CODE = """
import os, ray
import marl
from marl.api import start_ray
assert start_ray(num_cpus=1) is True
assert start_ray() is False  # one cluster: a second call starts nothing
gcs = ray.get_runtime_context().gcs_address
node = ray.nodes()[0]["NodeManagerAddress"]
print("ADDR", gcs, node, os.environ.get("RAY_AUTH_MODE"))
ray.shutdown()
"""


def test_the_cluster_marl_starts_listens_on_loopback_with_authentication():
    env = {k: v for k, v in __import__("os").environ.items() if k != "RAY_AUTH_MODE"}
    r = subprocess.run([sys.executable, "-c", CODE], capture_output=True, text=True, env=env, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    line = next(x for x in r.stdout.splitlines() if x.startswith("ADDR"))
    _, gcs, node, auth = line.split()
    assert gcs.startswith("127.0.0.1:") and node == "127.0.0.1"
    assert auth != "disabled"  # marl never turns token authentication off (Ray itself sets "token")
