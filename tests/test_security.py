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


MODES = """
import json, os, stat, sys
from pathlib import Path
import marl
from marl.api import start_ray
from toy_envs import MatchEnv

home = Path.home()
token = home / ".ray" / "auth_token"
if sys.argv[1] == "old-token":  # a token an earlier Ray left readable by everyone
    token.parent.mkdir(mode=0o755)
    token.write_text("0" * 64)
    os.chmod(token, 0o644)
start_ray(num_cpus=2)
res = MatchEnv(num_envs=4).fit("ippo", stop={"iterations": 1}, log_dir=str(home / "runs" / "deep"), progress=False,
                               eval_episodes=0, rollout_length=5, epochs=1)
mode = lambda p: stat.S_IMODE(p.stat().st_mode)
print(json.dumps({"token": mode(token), "ray_dir": mode(token.parent), "run": mode(Path(res.log_dir)),
                  "log_dir": mode(home / "runs" / "deep"), "log_parent": mode(home / "runs"),
                  "ray_results": (home / "ray_results").exists()}))
"""


def test_secrets_and_run_folders_are_private(tmp_path):
    """With a fresh HOME: the token Ray makes is 0600 in a 0700 ~/.ray (Ray's own writer leaves 0644); a
    token left 0644 by an earlier run is made 0600; the run folder and the log_dir folders marl makes are
    0750; a run makes no ~/ray_results (Ray makes that folder 0777)."""
    for start in ("new-token", "old-token"):
        home = tmp_path / start
        home.mkdir()
        env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_AUTH")}
        env.update(HOME=str(home), PYTHONPATH=os.pathsep.join([str(TESTS), env.get("PYTHONPATH", "")]))
        r = subprocess.run([sys.executable, "-c", MODES, start], capture_output=True, text=True, env=env, timeout=300)
        assert r.returncode == 0, r.stderr[-3000:]
        out = json.loads(next(x for x in r.stdout.splitlines() if x.startswith("{")))
        assert out == {
            "token": 0o600,
            "ray_dir": 0o700,
            "run": 0o750,
            "log_dir": 0o750,
            "log_parent": 0o750,
            "ray_results": False,
        }, {k: oct(v) if isinstance(v, int) and not isinstance(v, bool) else v for k, v in out.items()}
