"""Unit tests need no database. A test here that asks for one through a fixture is a
collection error; one that connects anyway fails with a message saying where it belongs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import psycopg
import pytest

UNIT = Path(__file__).parent
DATABASE_FIXTURES = {"pg_server", "postgresql", "postgresql_noproc", "empty_dsn", "rdb"}


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    # Called with every collected item, not only this folder's.
    for item in items:
        if item.path.is_relative_to(UNIT):
            wanted = DATABASE_FIXTURES & set(getattr(item, "fixturenames", ()))
            if wanted:
                raise pytest.UsageError(f"{item.nodeid} needs a database ({', '.join(sorted(wanted))}): move it")


def _refuse(*args: Any, **kwargs: Any) -> Any:
    raise AssertionError("a unit test connected to PostgreSQL: it belongs in tests/integration")


@pytest.fixture(autouse=True)
def _no_database(monkeypatch: pytest.MonkeyPatch) -> None:
    for target in (psycopg, psycopg.Connection, psycopg.AsyncConnection):
        monkeypatch.setattr(target, "connect", _refuse)
