"""
The server: gRPC (grpcio) on PORT with the service's handlers and the standard health service,
Prometheus metrics on METRICS_PORT, JSON logs, and the database (when DATABASE_URL is set) waited
for and migrated before the health service says SERVING. SIGTERM stops it gracefully: NOT_SERVING
at once, no new calls, and calls in flight get SHUTDOWN_GRACE_SECONDS to finish.
"""

from __future__ import annotations

import logging
import signal
import threading
from concurrent import futures
from dataclasses import dataclass
from http.server import HTTPServer

import grpc
from prometheus_client import start_http_server

from . import logs, service
from .config import Config
from .db import Database, Stopped
from .health import NOT_SERVING, SERVING, Health
from .metrics import MonitoringInterceptor

log = logging.getLogger(__name__)


@dataclass
class Running:
    """A started server: its ports (the real ones where 0 asked for any) and how to stop it."""

    server: grpc.Server
    port: int
    metrics_port: int | None
    health: Health
    database: Database | None
    metrics: HTTPServer | None

    def stop(self, grace: float) -> None:
        self.health.stop()
        # Refuses new calls now, cancels those still running after `grace` seconds.
        self.server.stop(grace).wait()
        if self.metrics is not None:
            self.metrics.shutdown()
        if self.database is not None:
            self.database.close()


def start(config: Config, stopping: threading.Event | None = None) -> Running:
    """
    Starts serving and returns once ready (database reachable and migrated, health SERVING). Setting
    `stopping` while it waits for the database makes it give up (db.Stopped).
    """
    health = Health([service.SERVICE])
    database = Database(config.database_url) if config.database_url else None
    server = grpc.server(
        futures.ThreadPoolExecutor(max_workers=config.max_workers),
        interceptors=[MonitoringInterceptor()],
        # grpcio shares a port with SO_REUSEPORT by default: a second copy would start "fine" and take
        # half the calls. Off, a taken port is an error at start.
        options=[("grpc.so_reuseport", 0)],
    )
    service.register(server, database)
    health.register(server)
    address = f"{config.host}:{config.port}"
    try:
        # grpcio answers 0 or raises, depending on its version, when the port is taken.
        port = server.add_insecure_port(address)
    except RuntimeError:
        port = 0
    if port == 0:
        raise RuntimeError(f"cannot listen on {address}: is the port in use? Set PORT to a free one")
    metrics = None
    metrics_port = config.metrics_port
    if metrics_port is not None:
        try:
            metrics, _ = start_http_server(metrics_port, addr=config.host)
        except OSError as e:
            raise RuntimeError(
                f"cannot serve metrics on {config.host}:{metrics_port} ({e}): set METRICS_PORT to a free port, or off"
            ) from e
        metrics_port = metrics.server_port
    server.start()
    log.info("listening", extra={"port": port, "metrics_port": metrics_port, "service": service.SERVICE})
    try:
        if database is not None:
            database.wait(config.database_wait_seconds, stopping)
            database.migrate(config.migrations_dir)
    except BaseException:
        server.stop(None)
        if metrics is not None:
            metrics.shutdown()
        raise
    health.set(SERVING)
    return Running(server, port, metrics_port, health, database, metrics)


def main() -> int:
    try:
        config = Config.from_env()
    except ValueError as e:
        logs.configure()
        log.error(f"bad configuration: {e}")
        return 2
    logs.configure(config.log_level)
    stopping = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda number, _frame: stopping.set())
    try:
        running = start(config, stopping)
    except Stopped:
        log.info("stopped before it was ready")
        return 0
    except Exception as e:
        log.error(f"cannot start: {e}")
        return 1
    log.info("ready")
    # Waits in slices: the signal handler runs between them, on this (the main) thread.
    while not stopping.wait(0.5):
        pass
    log.info("stopping", extra={"grace_seconds": config.shutdown_grace_seconds})
    running.health.set(NOT_SERVING)
    running.stop(config.shutdown_grace_seconds)
    log.info("stopped")
    return 0
