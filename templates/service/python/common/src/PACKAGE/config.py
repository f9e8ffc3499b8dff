"""Settings, read from the environment once at start, so the same image runs in every environment."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Config:
    # PORT: where gRPC is served; 0 picks a free port (tests), and the "listening" log names it.
    port: int = 8080
    host: str = "0.0.0.0"
    # METRICS_PORT: Prometheus' /metrics over plain HTTP (gRPC's port speaks only HTTP/2 gRPC).
    # None (METRICS_PORT=off) serves no metrics; 0 picks a free port.
    metrics_port: int | None = 9464
    # DATABASE_URL: PostgreSQL (postgresql://user:password@host:port/db). Unset: no database.
    database_url: str | None = None
    # How long a start waits for the database before it gives up (a pod waits for its database
    # rather than crash-looping while the two come up together).
    database_wait_seconds: float = 30.0
    # SHUTDOWN_GRACE_SECONDS: how long calls in flight may finish after SIGTERM; keep it below the
    # orchestrator's own grace period (Kubernetes: 30 s).
    shutdown_grace_seconds: float = 10.0
    max_workers: int = 16
    migrations_dir: Path = Path("migrations")
    log_level: str = "INFO"

    @classmethod
    def from_env(cls, env: Mapping[str, str] = os.environ) -> Config:
        metrics = env.get("METRICS_PORT", "9464").strip()
        return cls(
            port=_port("PORT", env.get("PORT", "8080")),
            host=env.get("HOST", "0.0.0.0"),
            metrics_port=None if metrics.lower() in ("", "off") else _port("METRICS_PORT", metrics),
            database_url=env.get("DATABASE_URL") or None,
            database_wait_seconds=_seconds("DATABASE_WAIT_SECONDS", env.get("DATABASE_WAIT_SECONDS", "30")),
            shutdown_grace_seconds=_seconds("SHUTDOWN_GRACE_SECONDS", env.get("SHUTDOWN_GRACE_SECONDS", "10")),
            max_workers=_positive("GRPC_MAX_WORKERS", env.get("GRPC_MAX_WORKERS", "16")),
            migrations_dir=Path(env.get("MIGRATIONS_DIR") or Path.cwd() / "migrations"),
            log_level=env.get("LOG_LEVEL", "INFO").upper(),
        )


def _port(name: str, text: str) -> int:
    if not text.isdigit() or int(text) > 65535:
        raise ValueError(f"{name} must be a port number from 0 to 65535, not {text!r}")
    return int(text)


def _seconds(name: str, text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1
    if value < 0:
        raise ValueError(f"{name} must be a number of seconds (0 or more), not {text!r}")
    return value


def _positive(name: str, text: str) -> int:
    if not text.isdigit() or int(text) == 0:
        raise ValueError(f"{name} must be a whole number above 0, not {text!r}")
    return int(text)
