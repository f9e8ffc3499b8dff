"""
What every service of this scaffold does whatever its handlers: the standard health service, the
metrics endpoint, JSON logs, and a graceful stop on SIGTERM of the real entry point.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import urllib.request
from pathlib import Path

import grpc

from {{package}} import service
from {{package}}.health import check
from {{package}}.server import Running

ROOT = Path(__file__).resolve().parents[1]


def test_health_says_serving(server: Running) -> None:
    target = f"127.0.0.1:{server.port}"
    assert check(target) == "SERVING"
    assert check(target, service.SERVICE) == "SERVING"


def test_health_of_an_unknown_service_is_not_found(server: Running) -> None:
    try:
        check(f"127.0.0.1:{server.port}", "no.such.Service")
    except grpc.RpcError as e:
        assert e.code() == grpc.StatusCode.NOT_FOUND
    else:
        raise AssertionError("expected NOT_FOUND")


def test_metrics_count_calls_per_rpc(server: Running) -> None:
    check(f"127.0.0.1:{server.port}")
    with urllib.request.urlopen(f"http://127.0.0.1:{server.metrics_port}/metrics", timeout=5) as response:
        text = response.read().decode()
    assert 'grpc_server_handled_total{grpc_code="OK",grpc_method="Check",grpc_service="grpc.health.v1.Health"' in text
    assert "grpc_server_handling_seconds_bucket" in text


def test_entry_point_logs_json_and_stops_on_sigterm() -> None:
    env = {
        **os.environ,
        "PORT": "0",
        "HOST": "127.0.0.1",
        "METRICS_PORT": "off",
        "MIGRATIONS_DIR": str(ROOT / "migrations"),
        # The child imports what this test imports, from the same places.
        "PYTHONPATH": os.pathsep.join(p for p in sys.path if p),
    }
    env.pop("DATABASE_URL", None)
    child = subprocess.Popen(
        [sys.executable, "-m", "{{package}}"], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        assert child.stdout is not None
        first = json.loads(child.stdout.readline())
        assert first["msg"] == "listening" and first["level"] == "info"
        assert json.loads(child.stdout.readline())["msg"] == "ready"
        assert check(f"127.0.0.1:{first['port']}") == "SERVING"
        child.send_signal(signal.SIGTERM)
        out, err = child.communicate(timeout=15)
    finally:
        child.kill()
    assert child.returncode == 0, err
    assert [json.loads(line)["msg"] for line in out.splitlines()][-2:] == ["stopping", "stopped"]
