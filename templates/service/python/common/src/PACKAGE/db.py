"""
PostgreSQL through psycopg 3 (with its bundled libpq: psycopg[binary]). The service applies the SQL
files in migrations/ at start, in name order, each once, recording them in schema_migrations; an
advisory lock keeps replicas that start together from applying the same file twice. Plain SQL,
no ORM: the schema is what the files say, and reviewers read it as it will run.
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import psycopg

log = logging.getLogger(__name__)

MIGRATION = re.compile(r"^\d{4}_[a-z0-9_]+\.sql$")
# pg_advisory_lock's key for migrations: any number the service's other locks do not use.
MIGRATION_LOCK = 7_432_001


class Stopped(Exception):
    """The server was told to stop before it was ready."""


class Database:
    """
    One connection, shared by the handlers' threads one at a time, and opened again when it broke
    (a database restart). Plenty for a new service; add psycopg_pool when the load asks for it.
    """

    def __init__(self, url: str) -> None:
        self._url = url
        self._lock = threading.Lock()
        self._conn: psycopg.Connection | None = None

    @contextmanager
    def connection(self) -> Iterator[psycopg.Connection]:
        with self._lock:
            if self._conn is None or self._conn.closed or self._conn.broken:
                self._conn = psycopg.connect(self._url, autocommit=True, connect_timeout=5)
            try:
                yield self._conn
            except psycopg.OperationalError:
                # The connection is gone (a database restart, a network cut): this call fails, the
                # next one opens a new connection.
                self._conn.close()
                self._conn = None
                raise

    def wait(self, seconds: float, stopping: threading.Event | None = None) -> None:
        """Returns once the database answers; raises after `seconds` of trying, or once `stopping` is set."""
        deadline = time.monotonic() + seconds
        stopping = stopping or threading.Event()
        while True:
            try:
                with self.connection() as conn:
                    conn.execute("SELECT 1")
                return
            except psycopg.OperationalError as e:
                if time.monotonic() >= deadline:
                    raise RuntimeError(
                        f"the database at DATABASE_URL did not answer within {seconds:g}s ({e}); "
                        "check DATABASE_URL and that PostgreSQL is running, or raise DATABASE_WAIT_SECONDS"
                    ) from e
                log.warning("waiting for the database", extra={"error": str(e).strip()})
                # A SIGTERM while waiting stops the wait at once, not after DATABASE_WAIT_SECONDS.
                if stopping.wait(1):
                    raise Stopped("stopped while waiting for the database") from e

    def migrate(self, directory: Path) -> list[str]:
        """Applies the migrations not applied yet; returns their names."""
        if not directory.is_dir():
            raise RuntimeError(f"no migrations directory at {directory}: set MIGRATIONS_DIR to it")
        files = sorted(p for p in directory.iterdir() if p.suffix == ".sql")
        misnamed = [p.name for p in files if not MIGRATION.match(p.name)]
        if misnamed:
            raise RuntimeError(f"migrations must be named NNNN_name.sql (lowercase): rename {', '.join(misnamed)}")
        applied: list[str] = []
        with self.connection() as conn:
            conn.execute("SELECT pg_advisory_lock(%s)", (MIGRATION_LOCK,))
            try:
                conn.execute(
                    "CREATE TABLE IF NOT EXISTS schema_migrations"
                    " (version text PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now())"
                )
                done = {row[0] for row in conn.execute("SELECT version FROM schema_migrations")}
                for path in files:
                    if path.name in done:
                        continue
                    sql = path.read_text()
                    # A file of comments only is recorded too; PostgreSQL would answer it "empty query".
                    statements = re.sub(r"--[^\n]*", "", sql).strip()
                    with conn.transaction():
                        if statements:
                            conn.execute(sql)
                        conn.execute("INSERT INTO schema_migrations (version) VALUES (%s)", (path.name,))
                    log.info("migration applied", extra={"migration": path.name})
                    applied.append(path.name)
            finally:
                conn.execute("SELECT pg_advisory_unlock(%s)", (MIGRATION_LOCK,))
        return applied

    def close(self) -> None:
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None
