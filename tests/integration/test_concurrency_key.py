"""concurrency_key is stored through every enqueue path (task, app by name, enqueue_many's
COPY, the SQL function, the CLI), given per enqueue or derived from an argument; a bad
key is one clear error and writes nothing; jobs without one are as before (NULL)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from typer.testing import CliRunner

import pgqueue
from pgqueue import ConfigError, InvalidArgumentsError, ops
from pgqueue.cli.main import app as cli_app
from pgqueue.models import Job
from tests.enqueue_support import claim, count_jobs

Conn = psycopg.Connection[Any]


def keys(conn: Conn) -> list[tuple[str, str | None]]:
    return [(r[0], r[1]) for r in conn.execute("SELECT args->>'tag', concurrency_key FROM pgqueue.jobs ORDER BY id")]


@pytest.fixture
def by_customer(app: pgqueue.App) -> pgqueue.Task[..., None]:
    @app.task(name="t.by_customer", queue="q", concurrency_key="customer_id")
    def by_customer(customer_id: int | str, tag: str = "") -> None: ...

    return by_customer


async def test_every_enqueue_path_stores_the_key(
    dsn: str, conn: Conn, app: pgqueue.App, by_customer: pgqueue.Task[..., None]
) -> None:
    @app.task(name="t.free", queue="q")
    def free(tag: str = "") -> None: ...

    by_customer.enqueue(conn, customer_id=42, tag="derived-int")
    by_customer.enqueue(conn, customer_id="c-7", tag="derived-str")
    by_customer.options(concurrency_key="vip").enqueue(conn, customer_id=1, tag="explicit")
    free.enqueue(conn, tag="none")
    free.options(concurrency_key="k1").enqueue(conn, tag="plain-explicit")
    app.enqueue(conn, "t.by_customer", customer_id=5, tag="by-name")
    by_customer.options(unique_key="u1").enqueue(conn, customer_id=6, tag="keyed")  # through enqueue()
    assert app.enqueue_many(conn, [by_customer.job(customer_id=8, tag="copy"), free.job(tag="copy-none")]) == 2
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as aconn:
        await by_customer.enqueue_async(aconn, customer_id=9, tag="async")
        await app.enqueue_many_async(aconn, [by_customer.job(customer_id=10, tag="copy-async")])
    conn.execute("SELECT pgqueue.enqueue('t.sql', '{\"tag\": \"sql\"}', concurrency_key => 'sql-key')")
    conn.execute("SELECT pgqueue.enqueue('t.sql', '{\"tag\": \"sql-none\"}')")
    ops.enqueue_job(conn, "pgqueue", ops.make_job("t.ops", {"tag": "ops"}, concurrency_key="ops-key"))
    result = CliRunner().invoke(
        cli_app,
        ["enqueue", "t.cli", "--args", '{"tag": "cli"}', "--concurrency-key", "cli-key"],
        env={"PGQUEUE_DSN": dsn, "PGQUEUE_SCHEMA": None},
    )
    assert result.exit_code == 0, result.output

    assert keys(conn) == [
        ("derived-int", "42"),
        ("derived-str", "c-7"),
        ("explicit", "vip"),
        ("none", None),
        ("plain-explicit", "k1"),
        ("by-name", "5"),
        ("keyed", "6"),
        ("copy", "8"),
        ("copy-none", None),
        ("async", "9"),
        ("copy-async", "10"),
        ("sql", "sql-key"),
        ("sql-none", None),
        ("ops", "ops-key"),
        ("cli", "cli-key"),
    ]
    # The claim hands the key to the worker (ctx.job.concurrency_key).
    claimed = [Job(*row) for row in claim(conn, "q", {"t.by_customer": 3, "t.free": 3}, limit=20)]
    assert {(j.args["tag"], j.concurrency_key) for j in claimed} >= {("derived-int", "42"), ("none", None)}


@pytest.mark.parametrize(
    ("options", "kwargs", "error", "problem"),
    [
        ({}, {"customer_id": None}, InvalidArgumentsError, "must be a str or an int, got NoneType"),
        ({}, {"customer_id": 1.5}, InvalidArgumentsError, "must be a str or an int, got float"),
        ({}, {"customer_id": "x" * 201}, InvalidArgumentsError, "1-200 characters, got 201 characters"),
        ({"concurrency_key": ""}, {"customer_id": 1}, ConfigError, "1-200 characters"),
    ],
)
def test_a_bad_key_is_one_clear_error_and_writes_nothing(
    conn: Conn,
    app: pgqueue.App,
    by_customer: pgqueue.Task[..., None],
    options: dict[str, Any],
    kwargs: dict[str, Any],
    error: type[Exception],
    problem: str,
) -> None:
    def specs() -> Iterator[pgqueue.JobSpec]:
        yield by_customer.job(customer_id=3)
        yield by_customer.options(**options).job(**kwargs)  # refused while the stream is read

    with pytest.raises(error) as single:
        by_customer.options(**options).enqueue(conn, **kwargs)
    assert problem in str(single.value)
    with pytest.raises(error, match="enqueue_many row 2") as many:
        app.enqueue_many(conn, specs())
    assert problem in str(many.value)
    assert count_jobs(conn) == 0


def test_the_database_refuses_a_bad_key_on_every_other_path(conn: Conn) -> None:
    with pytest.raises(psycopg.errors.InvalidParameterValue, match="concurrency_key must be 1-200 characters"):
        conn.execute("SELECT pgqueue.enqueue('t', concurrency_key => repeat('x', 201))")
    with pytest.raises(psycopg.errors.CheckViolation, match="jobs_concurrency_key_length"):
        conn.execute(
            "INSERT INTO pgqueue.jobs_live (task, queue, state, concurrency_key) VALUES ('t', 'q', 'available', '')"
        )
    assert count_jobs(conn) == 0


def test_cli_refuses_a_bad_key_before_connecting(dsn: str, conn: Conn) -> None:
    result = CliRunner().invoke(
        cli_app, ["enqueue", "t.cli", "--concurrency-key", "x" * 201], env={"PGQUEUE_DSN": dsn, "PGQUEUE_SCHEMA": None}
    )
    assert result.exit_code == 1
    assert "concurrency_key must be a string of 1-200 characters" in result.stderr
    assert count_jobs(conn) == 0
