"""
Fixtures: the server started in this process on free ports (as `python -m {{package}}` starts it),
and a real gRPC channel to it. TEST_DATABASE_URL runs the tests against PostgreSQL; without it the
service runs without a database.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from {{package}}.config import Config
from {{package}}.server import Running, start

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="session")
def server() -> Iterator[Running]:
    config = Config(
        port=0,
        host="127.0.0.1",
        metrics_port=0,
        database_url=os.environ.get("TEST_DATABASE_URL") or None,
        database_wait_seconds=5,
        migrations_dir=ROOT / "migrations",
    )
    running = start(config)
    yield running
    running.stop(0)


@pytest.fixture(scope="session")
def channel(server: Running) -> Iterator[grpc.Channel]:
    with grpc.insecure_channel(f"127.0.0.1:{server.port}") as channel:
        yield channel
