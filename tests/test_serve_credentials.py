"""The storage credentials `serve` hands its replicas (serving/credentials.py) travel through the serve
process's own object store and go with that process: a replica holding the reference reads them (the
storage settings only) while it lives, and finds them gone once it is killed with SIGKILL, where no
exit path of its own runs; the cluster's key-value store never holds them."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from reliability_records import record

SECRET = "not-a-real-secret-8c2e71"
PLANTED = "http://planted.invalid:5000"
NAMESPACE = "credentials-test"
HANDING = """
import sys, time, ray
from orchestrator.serving import credentials
ray.init(address=sys.argv[1], namespace=sys.argv[2], logging_level="ERROR")
sealed = credentials.hand_over({"AWS_SECRET_ACCESS_KEY": sys.argv[3], "MLFLOW_TRACKING_URI": sys.argv[4]})
ray.get(ray.get_actor("holder").take.remote(sealed))
print("handed", flush=True)
time.sleep(600)
"""


def kv_values_holding(secret: str) -> list[str]:
    """The keys of the cluster's key-value store (this job's namespace and Serve's) whose value holds `secret`."""
    from ray.experimental.internal_kv import _internal_kv_get, _internal_kv_list
    from ray.serve._private.storage.kv_store import SERVE_INTERNAL_KV_NAMESPACE

    found = []
    for namespace in (None, SERVE_INTERNAL_KV_NAMESPACE):
        for key in _internal_kv_list(b"", namespace=namespace):
            if secret.encode() in (_internal_kv_get(key, namespace=namespace) or b""):
                found.append(key.decode(errors="replace"))
    return found


def test_the_replicas_credentials_go_with_the_serve_process_however_it_ends(ray_cluster):
    import ray

    @ray.remote(num_cpus=0)
    class Holder:
        """A replica's side: it keeps the reference it was given and reads it on demand."""

        def __init__(self) -> None:
            self.sealed = None

        def take(self, sealed) -> None:
            self.sealed = sealed

        def read(self) -> dict:
            from orchestrator.serving import credentials

            tracking = os.environ.get("MLFLOW_TRACKING_URI")
            try:
                credentials.load_into_replica(self.sealed, timeout_s=30)
            except credentials.CredentialsGone as e:
                return {"gone": str(e)}
            read = {"secret": os.environ.pop("AWS_SECRET_ACCESS_KEY", None)}
            return read | {"tracking_kept": os.environ.get("MLFLOW_TRACKING_URI") == tracking}

    holder = Holder.options(name="holder", namespace=NAMESPACE).remote()  # type: ignore[attr-defined]
    repository = Path(__file__).resolve().parents[1]
    env = {**os.environ, "PYTHONPATH": f"{repository}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    argv = [sys.executable, "-c", HANDING, ray_cluster.address, NAMESPACE, SECRET, PLANTED]
    serving = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, text=True)
    try:
        assert serving.stdout is not None and serving.stdout.readline().strip() == "handed"
        while_alive = ray.get(holder.read.remote(), timeout=60)
        in_kv_while_alive = kv_values_holding(SECRET)
    finally:
        serving.kill()  # SIGKILL: nothing of the process's own runs
        serving.wait(timeout=60)
    deadline, after = time.monotonic() + 60, {}
    while "gone" not in after and time.monotonic() < deadline:
        after = ray.get(holder.read.remote(), timeout=60)
        time.sleep(0.5)
    ray.kill(holder)
    assert while_alive == {"secret": SECRET, "tracking_kept": True}  # storage settings only: no planted store
    assert in_kv_while_alive == [] and kv_values_holding(SECRET) == []
    assert "went with the `congruent serve`" in after.get("gone", ""), after
    record("serving_security", check="the replicas' storage credentials reach them through the serve process's "
           "object store, never the cluster's key-value store; storage settings only; gone once serve is "
           "killed (SIGKILL)", passed=True)  # fmt: skip
