"""
Where items are kept: PostgreSQL (the items table of migrations/0001_init.sql) when the service has
a database, memory otherwise (tests, a quick local run). Both order items by creation and page
through them after a position, so a page token stays valid while items are added.
"""

from __future__ import annotations

import threading
import uuid
from dataclasses import dataclass
from typing import Protocol

from .db import Database


@dataclass(frozen=True)
class Item:
    id: str
    name: str
    description: str
    seq: int


class Store(Protocol):
    def create(self, name: str, description: str) -> Item: ...
    def get(self, item_id: str) -> Item | None: ...
    def list(self, after: int, limit: int) -> list[Item]:
        """Up to `limit` items created after position `after` (0: from the first), oldest first."""
        ...


def new_id() -> str:
    return str(uuid.uuid4())


class MemoryStore:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._items: list[Item] = []
        self._by_id: dict[str, Item] = {}

    def create(self, name: str, description: str) -> Item:
        with self._lock:
            item = Item(new_id(), name, description, len(self._items) + 1)
            self._items.append(item)
            self._by_id[item.id] = item
            return item

    def get(self, item_id: str) -> Item | None:
        return self._by_id.get(item_id)

    def list(self, after: int, limit: int) -> list[Item]:
        with self._lock:
            # seq n sits at index n - 1.
            return self._items[after : after + limit]


class PostgresStore:
    def __init__(self, database: Database) -> None:
        self._database = database

    def create(self, name: str, description: str) -> Item:
        with self._database.connection() as conn:
            row = conn.execute(
                "INSERT INTO items (id, name, description) VALUES (%s, %s, %s) RETURNING id, name, description, seq",
                (new_id(), name, description),
            ).fetchone()
        assert row is not None
        return Item(*row)

    def get(self, item_id: str) -> Item | None:
        with self._database.connection() as conn:
            row = conn.execute("SELECT id, name, description, seq FROM items WHERE id = %s", (item_id,)).fetchone()
        return None if row is None else Item(*row)

    def list(self, after: int, limit: int) -> list[Item]:
        with self._database.connection() as conn:
            rows = conn.execute(
                "SELECT id, name, description, seq FROM items WHERE seq > %s ORDER BY seq LIMIT %s", (after, limit)
            ).fetchall()
        return [Item(*row) for row in rows]
