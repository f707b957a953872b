from __future__ import annotations

from typing import Any

import psycopg
import pytest
from myshop.tasks import place_order, send_confirmation

import pgqueue
from pgqueue import testing


@pytest.fixture
def conn(pgqueue_app: pgqueue.App, pgqueue_conn: psycopg.Connection[Any]) -> psycopg.Connection[Any]:
    return pgqueue_conn  # the orders table comes from the template (conftest.py)


def test_placing_an_order_enqueues_its_email(conn: psycopg.Connection[Any]) -> None:
    place_order(conn, 1, "ann@example.com")
    testing.assert_enqueued(send_confirmation, order_id=1)
    testing.refute_enqueued(send_confirmation, order_id=2)


def test_a_failed_order_enqueues_nothing(conn: psycopg.Connection[Any]) -> None:
    place_order(conn, 1, "ann@example.com")
    with pytest.raises(psycopg.errors.UniqueViolation):
        place_order(conn, 1, "ann@example.com")
    assert len(testing.enqueued_jobs(send_confirmation)) == 1


def test_the_email_handler(conn: psycopg.Connection[Any]) -> None:
    assert testing.perform_job(send_confirmation, order_id=1, email="ann@example.com") == (
        "mailed order 1 to ann@example.com"
    )
    with pytest.raises(ValueError, match="cannot mail"):
        testing.perform_job(send_confirmation, order_id=1, email="bob@elsewhere.org")


def test_everything_runs_the_next_day(pgqueue_app: pgqueue.App, conn: psycopg.Connection[Any]) -> None:
    place_order(conn, 1, "ann@example.com")
    place_order(conn, 2, "bob@elsewhere.org")
    result = testing.drain(pgqueue_app)  # retries and the delayed job: no waiting
    assert result == testing.DrainResult(completed=3, retryable=2, discarded=1)
    assert conn.execute("SELECT count(*) FROM orders WHERE shipped").fetchone() == (2,)


def test_inline_mode_runs_jobs_at_commit(pgqueue_app: pgqueue.App, conn: psycopg.Connection[Any]) -> None:
    with testing.inline(pgqueue_app) as runs:
        place_order(conn, 1, "ann@example.com")
    assert [r.value for r in runs.runs] == ["mailed order 1 to ann@example.com", None]
