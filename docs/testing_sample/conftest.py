from __future__ import annotations

from typing import Any

import psycopg
import pytest

from pgqueue.testing.database import TemplateSetup


@pytest.fixture(scope="session")
def pgqueue_template_setup() -> TemplateSetup:
    def create_tables(conn: psycopg.Connection[Any]) -> None:  # once, in the template
        conn.execute("CREATE TABLE orders (id int PRIMARY KEY, email text, shipped bool DEFAULT false)")

    return create_tables
