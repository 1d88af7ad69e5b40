"""Security of what marl starts and reads: a loopback-only Ray with token authentication on."""

import ipaddress
import json
import os
import subprocess
import sys

from run_helpers import TESTS

CODE = """
import json, os, sys, time
from pathlib import Path
import grpc, ray
from ray.core.generated import gcs_service_pb2, gcs_service_pb2_grpc
from marl.api import start_ray
from run_helpers import listening_sockets

assert start_ray(num_cpus=1) is True
assert start_ray() is False  # one cluster: a second call starts nothing
gcs = ray.get_runtime_context().gcs_address
time.sleep(2)  # the raylet's agents open their ports after ray.init returns


def ask_gcs(token):
    # one GCS request, as a client that sends `token` (None: no authorization header)
    md = None if token is None else [("authorization", "Bearer " + token)]
    with grpc.insecure_channel(gcs) as channel:
        try:
            gcs_service_pb2_grpc.NodeInfoGcsServiceStub(channel).GetAllNodeInfo(
                gcs_service_pb2.GetAllNodeInfoRequest(), metadata=md, timeout=30)
            return "OK"
        except grpc.RpcError as e:
            return e.code().name


token_file = Path.home() / ".ray" / "auth_token"  # where Ray puts the token it makes for a new cluster
token = token_file.read_text().strip() if token_file.exists() else ""
print(json.dumps({"gcs": gcs, "node": ray.nodes()[0]["NodeManagerAddress"], "mode": os.environ.get("RAY_AUTH_MODE"),
                  "listening": listening_sockets(os.getpid()),
                  "answers": {"none": ask_gcs(None), "wrong": ask_gcs("0" * 32), "token": ask_gcs(token)}}))
ray.shutdown()
"""


def _loopback(address: str) -> bool:
    ip = ipaddress.ip_address(address)
    return ip.is_loopback or bool(ip.version == 6 and ip.ipv4_mapped and ip.ipv4_mapped.is_loopback)


def test_the_cluster_marl_starts_listens_on_loopback_with_authentication(tmp_path):
    """Every TCP port of the Ray that marl starts (GCS, raylet, workers, agents) is bound to a loopback
    address, and its GCS refuses requests without the cluster's token. HOME is a fresh folder, so Ray
    makes the token there (no token of this machine's user is read) and no RAY_AUTH_MODE is set."""
    env = {k: v for k, v in os.environ.items() if k not in ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH")}
    env.update(HOME=str(tmp_path), PYTHONPATH=os.pathsep.join([str(TESTS), env.get("PYTHONPATH", "")]))
    r = subprocess.run([sys.executable, "-c", CODE], capture_output=True, text=True, env=env, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    out = json.loads(next(x for x in r.stdout.splitlines() if x.startswith("{")))
    assert out["gcs"].startswith("127.0.0.1:") and out["node"] == "127.0.0.1"
    gcs_port = int(out["gcs"].rsplit(":", 1)[1])
    assert gcs_port in {port for _, port, _ in out["listening"]}, out["listening"]
    assert all(_loopback(address) for address, _, _ in out["listening"]), out["listening"]
    assert out["mode"] == "token"  # Ray's default for a new local cluster; marl never opts out
    assert out["answers"] == {"none": "UNAUTHENTICATED", "wrong": "UNAUTHENTICATED", "token": "OK"}, out["answers"]
