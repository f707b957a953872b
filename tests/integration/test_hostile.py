"""Hostile argument values, one test each, against a real PostgreSQL and real workers.

Every input either gets a clear error naming the problem, or is stored and run intact
(round trip through a worker). Afterwards the `intact` fixture (tests/hostile_support.py)
proves that nothing else moved: a canary table outside pgqueue, two bystander jobs (one
available, one scheduled) and the schema's relations, constraints and functions.
"""

from __future__ import annotations

import hashlib
import os
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

import psycopg
import pytest
from psycopg.types.json import Jsonb

import pgqueue
from pgqueue._enqueue import MAX_ARGS_DEPTH
from pgqueue.migrate import migrate
from tests.enqueue_support import Conn, count_jobs, must_get_job
from tests.hostile_support import (
    Check,
    EchoTask,
    poison_outcome,
    run_until_final,
    sql_enqueue,
)

# -- NUL ---------------------------------------------------------------------------------


def test_nul_character_is_refused_on_every_path(conn: Conn, app: pgqueue.App, echo: EchoTask, intact: Check) -> None:
    # Python API: a clear error before anything is sent.
    with pytest.raises(pgqueue.InvalidArgumentsError, match="NUL"):
        echo.enqueue(conn, note="a\x00b")
    with pytest.raises(pgqueue.InvalidArgumentsError, match="NUL"):
        echo.enqueue(conn, nested={"k": ["ok", "\x00"]})
    with pytest.raises(pgqueue.InvalidArgumentsError, match="NUL"):
        app.enqueue_many(conn, [echo.job(note="\x00")])
    with pytest.raises(pgqueue.ConfigError, match="NUL"):
        echo.options(unique_key="key\x00").enqueue(conn)
    with pytest.raises(pgqueue.InvalidQueueError):
        echo.options(queue="hq\x00").enqueue(conn)
    # SQL function: jsonb itself refuses \u0000, naming it, whatever the client.
    for value in ('{"note": "a\\u0000b"}', Jsonb({"note": "a\x00b"})):
        with pytest.raises(psycopg.errors.UntranslatableCharacter, match=r"\\u0000"):
            sql_enqueue(conn, value)
    with pytest.raises(psycopg.errors.ProgramLimitExceeded, match="null character not permitted"):
        conn.execute("SELECT pgqueue.enqueue('hostile.echo', jsonb_build_object('note', chr(0)))")
    # A literal backslash-u0000 is just text, stored intact.
    job_id = echo.enqueue(conn, note="\\u0000")
    assert must_get_job(conn, job_id)["args"] == {"note": "\\u0000"}
    assert count_jobs(conn) == 3
    intact()


# -- lone surrogates -------------------------------------------------------------------------


async def test_lone_surrogates_are_refused_and_pairs_round_trip(
    conn: Conn, app: pgqueue.App, echo: EchoTask, received: dict[int, dict[str, Any]], intact: Check
) -> None:
    with pytest.raises(pgqueue.InvalidArgumentsError, match="'broken'") as info:
        echo.enqueue(conn, fine="ok", broken="x\ud800y")
    assert "surrogates not allowed" in str(info.value)
    with pytest.raises(pgqueue.InvalidArgumentsError, match="'deep'"):
        app.enqueue_many(conn, [echo.job(deep={"k": ["\udfff"]})])
    with pytest.raises(pgqueue.ConfigError, match="unique_key is not valid Unicode"):
        echo.options(unique_key="k\ud800").enqueue(conn)
    for escaped in ('{"s": "\\ud800"}', '{"s": "\\udc00x"}', '{"s": "\\ud800\\ud800"}'):
        with pytest.raises(psycopg.errors.InvalidTextRepresentation, match="surrogate"):
            sql_enqueue(conn, escaped)
    # Valid pairs, written either way, are one character and survive a worker's round trip.
    via_sql = sql_enqueue(conn, '{"s": "\\ud83d\\ude00"}')
    via_python = echo.enqueue(conn, s="\U0001f600 \u00e9\u0301 \u202eRTL")
    states = await run_until_final(app, [via_sql, via_python], conn)
    assert states == {via_sql: "completed", via_python: "completed"}
    assert received[via_sql] == {"s": "\U0001f600"}
    assert received[via_python] == {"s": "\U0001f600 \u00e9\u0301 \u202eRTL"}
    intact()


# -- NaN and Infinity ------------------------------------------------------------------------


async def test_nan_and_infinity_are_refused_and_huge_numbers_round_trip(
    conn: Conn, app: pgqueue.App, echo: EchoTask, received: dict[int, dict[str, Any]], intact: Check
) -> None:
    for bad in (float("nan"), float("inf"), -float("inf"), [0.5, {"x": float("nan")}]):
        with pytest.raises(pgqueue.InvalidArgumentsError, match=r"'ratio'.*Out of range float values"):
            echo.enqueue(conn, ok=1, ratio=bad)
    with pytest.raises(pgqueue.InvalidArgumentsError, match=r"'amount'.*Decimal"):
        echo.enqueue(conn, amount=Decimal("NaN"))
    for token in ("NaN", "Infinity", "-Infinity"):
        with pytest.raises(psycopg.errors.InvalidTextRepresentation, match=f'Token "{token}" is invalid'):
            sql_enqueue(conn, f'{{"ratio": {token}}}')
    assert count_jobs(conn) == 2  # the bystanders
    # Values JSON can carry but a float cannot: jsonb keeps them exact, Python gets ints.
    big = sql_enqueue(conn, '{"big": 1e400, "neg": -1E+300, "tiny": 5e-324, "max": 1.7976931348623157e308}')
    py = echo.enqueue(conn, huge=10**300, edge=1.7976931348623157e308, small=5e-324)
    assert await run_until_final(app, [big, py], conn) == {big: "completed", py: "completed"}
    # jsonb keeps numbers as exact decimals and prints them without an exponent, so a
    # float written in exponent form comes back as the int of the same decimal value.
    assert received[big] == {"big": 10**400, "neg": -(10**300), "tiny": 5e-324, "max": 17976931348623157 * 10**292}
    assert received[py] == {"huge": 10**300, "edge": 17976931348623157 * 10**292, "small": 5e-324}
    intact()


# -- deep nesting ------------------------------------------------------------------------------


def _nested(depth: int) -> Any:
    value: Any = "leaf"
    for i in range(depth):
        value = [value] if i % 2 else {"k": value}
    return value


async def test_deep_nesting_is_refused_past_the_limit_and_round_trips_under_it(
    conn: Conn, app: pgqueue.App, echo: EchoTask, received: dict[int, dict[str, Any]], intact: Check
) -> None:
    deepest = _nested(MAX_ARGS_DEPTH - 1)  # inside the args object: exactly MAX_ARGS_DEPTH levels
    job_id = echo.enqueue(conn, tree=deepest)
    for too_deep in (MAX_ARGS_DEPTH, 990, 5000, 100_000):
        with pytest.raises(pgqueue.InvalidArgumentsError, match=f"'tree': nested more than {MAX_ARGS_DEPTH} levels"):
            echo.enqueue(conn, fine=1, tree=_nested(too_deep))
        with pytest.raises(pgqueue.InvalidArgumentsError, match="'tree': nested more than"):
            echo.job(tree=_nested(too_deep))
    # Many brackets, shallow: not mistaken for depth.
    wide = echo.enqueue(conn, rows=[[i] for i in range(5000)], text="[[[[" * 100)
    assert await run_until_final(app, [job_id, wide], conn) == {job_id: "completed", wide: "completed"}
    assert received[job_id] == {"tree": deepest}
    assert received[wide]["rows"][4999] == [4999]
    intact()


async def test_deep_nesting_stored_through_sql_cannot_crash_a_worker(
    conn: Conn, app: pgqueue.App, echo: EchoTask, received: dict[int, dict[str, Any]], intact: Check
) -> None:
    # jsonb accepts nesting far deeper than Python's decoder; such a job must fail alone.
    poison = sql_enqueue(conn, '{"tree": ' + "[" * 5000 + "]" * 5000 + "}")
    good: list[int] = [echo.enqueue(conn, n=n) for n in range(5)]
    with pytest.raises(psycopg.errors.StatementTooComplex, match="stack depth"):
        sql_enqueue(conn, '{"tree": ' + "[" * 500_000 + "]" * 500_000 + "}")
    states = await run_until_final(app, [poison, *good], conn)
    assert states == {poison: "discarded", **{g: "completed" for g in good}}
    assert sorted(received) == good
    attempt, errors = poison_outcome(conn, poison)
    assert attempt == 1  # discarded at once: retrying cannot decode it either
    assert errors[0]["type"] == "pgqueue.errors.UndecodableArgsError"
    assert "nested too deeply" in errors[0]["message"]
    assert conn.execute("SELECT jsonb_typeof(args->'tree') FROM pgqueue.jobs WHERE id = %s", [poison]).fetchone() == (
        "array",
    )  # stored as it came: nothing was rewritten
    intact()


async def test_integer_past_pythons_digit_limit_cannot_crash_a_worker(
    conn: Conn, app: pgqueue.App, echo: EchoTask, received: dict[int, dict[str, Any]], intact: Check
) -> None:
    with pytest.raises(pgqueue.InvalidArgumentsError, match="'n'"):
        echo.enqueue(conn, n=10**5000)  # Python refuses to write it
    poison = sql_enqueue(conn, '{"n": ' + "9" * 5000 + "}")
    good = echo.enqueue(conn, n=1)
    states = await run_until_final(app, [poison, good], conn)
    assert states == {poison: "discarded", good: "completed"}
    assert received == {good: {"n": 1}}
    attempt, errors = poison_outcome(conn, poison)
    assert attempt == 1
    assert "4300 digits" in errors[0]["message"]
    intact()


# -- 10 MiB payloads ---------------------------------------------------------------------------


async def test_ten_mib_payloads_meet_the_client_then_the_server_limit(
    dsn: str, conn: Conn, app: pgqueue.App, echo: EchoTask, received: dict[int, dict[str, Any]], intact: Check
) -> None:
    blob = os.urandom(5 * 1024 * 1024).hex()  # 10 MiB of incompressible JSON text
    digest = hashlib.sha256(blob.encode()).hexdigest()
    with pytest.raises(pgqueue.PayloadTooLargeError, match="over the 1048576-byte limit"):
        echo.enqueue(conn, blob=blob)  # the client's 1 MiB default
    big_app = pgqueue.App(dsn=dsn, max_payload_bytes=16 * 1024 * 1024)
    big_received: dict[int, str] = {}

    @big_app.task(name="hostile.big", queue="hq", pass_context=True)
    def big(ctx: pgqueue.JobContext, blob: str) -> None:
        big_received[ctx.job.id] = hashlib.sha256(blob.encode()).hexdigest()

    with pytest.raises(pgqueue.PayloadTooLargeError, match="server's payload limit"):
        big.enqueue(conn, blob=blob)  # the server's 8 MiB CHECK
    with pytest.raises(pgqueue.PayloadTooLargeError, match=r"enqueue_many row 2: .*server's payload limit"):
        big_app.enqueue_many(conn, [big.job(blob="small"), big.job(blob=blob)])
    with pytest.raises(psycopg.errors.CheckViolation, match="jobs_args_size"):
        conn.execute("SELECT pgqueue.enqueue('hostile.big', jsonb_build_object('blob', %s::text))", [blob])
    assert count_jobs(conn) == 2  # the bystanders only
    migrate(conn, "pgqueue", max_payload_bytes=16 * 1024 * 1024)
    job_id = big.enqueue(conn, blob=blob)
    states = await run_until_final(big_app, [job_id], conn)
    assert states == {job_id: "completed"}
    assert big_received == {job_id: digest}
    migrate(conn, "pgqueue", max_payload_bytes=8 * 1024 * 1024)  # back to the default
    intact()


# -- values JSON cannot carry --------------------------------------------------------------------


class Custom:
    pass


@pytest.mark.parametrize(
    ("value", "needle"),
    [
        (datetime(2030, 1, 1, tzinfo=UTC), "datetime"),
        ({1, 2}, "set"),
        (Custom(), "Custom"),
        (b"bytes", "bytes"),
        (Decimal("1.5"), "Decimal"),
        ({"nested": [1, {"deeper": frozenset()}]}, "frozenset"),
    ],
    ids=["datetime", "set", "custom-class", "bytes", "decimal", "nested-frozenset"],
)
def test_non_serialisable_arguments_are_named(
    conn: Conn, app: pgqueue.App, echo: EchoTask, intact: Check, value: Any, needle: str
) -> None:
    for call in (
        lambda: echo.enqueue(conn, good=1, culprit=value),
        lambda: echo.job(good=1, culprit=value),
        lambda: app.enqueue(conn, "hostile.echo", good=1, culprit=value),
    ):
        with pytest.raises(pgqueue.InvalidArgumentsError) as info:
            call()
        message = str(info.value)
        assert "'culprit'" in message
        assert needle in message
        assert "'good'" not in message
    assert count_jobs(conn) == 2
    intact()
