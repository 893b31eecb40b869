"""The driver's side of a swap (orchestrator/driver/serve.py `_move_gateway`): a gateway that answers
`POST /champion` with 409 (the registry or the new application did not answer it yet) is asked
again until it moves, and one that never moves ends the swap with its own reason. The replicas are
given this driver's registry, whatever registry the Ray nodes' environment names."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from orchestrator.driver.serve import _move_gateway, replica_env
from orchestrator.tracking.version_refs import RegistryError


def gateway(conflicts: int):
    """A server on 127.0.0.1 whose first `conflicts` answers to POST /champion are 409s; then 200."""
    calls = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):  # http.server's name
            self.rfile.read(int(self.headers.get("content-length", 0)))
            calls.append(self.path)
            status, body = (
                (409, {"error": "v2 is not deployed: TimeoutError"})
                if len(calls) <= conflicts
                else (
                    200,
                    {"model": "m", "version": "2"},
                )
            )
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_address[1]}", calls


def test_a_gateway_that_is_not_ready_is_asked_again_until_it_moves():
    server, url, calls = gateway(conflicts=2)
    try:
        assert _move_gateway(url, wait_s=30) == {"model": "m", "version": "2"}
        assert calls == ["/champion"] * 3
    finally:
        server.shutdown()


def test_a_gateway_that_never_moves_ends_the_swap_with_its_reason():
    server, url, calls = gateway(conflicts=1_000)
    try:
        with pytest.raises(RegistryError, match="did not move to the new champion: v2 is not deployed: TimeoutError"):
            _move_gateway(url, wait_s=1.5)
        assert 2 <= len(calls) <= 4
    finally:
        server.shutdown()


def test_the_replicas_registry_is_the_driver_s_store_not_one_the_nodes_inherited(monkeypatch, tmp_path):
    # a Ray node started from a shell where an earlier `mlflow.set_registry_uri` left another store
    # passes MLFLOW_REGISTRY_URI to every replica; the gateway then found no champion (CI, stop 80)
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    monkeypatch.setenv("MLFLOW_REGISTRY_URI", f"sqlite:///{tmp_path / 'another.db'}")
    env = replica_env()
    assert (env["MLFLOW_TRACKING_URI"], env["MLFLOW_REGISTRY_URI"]) == (uri, uri)
