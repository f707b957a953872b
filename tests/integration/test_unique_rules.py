"""Unique rules (pgqueue.Unique) against the real database: keys by task + chosen args or
given, held in chosen states (finished ones within a period), keep / replace / debounce,
through enqueue, enqueue_many and the SQL function; bad rules write nothing; the ledger is
pruned without racing enqueues. The races under 16 producers are in test_unique_races.py."""

from __future__ import annotations

import concurrent.futures
from datetime import timedelta
from typing import Any

import psycopg
import pytest
from typer.testing import CliRunner

import pgqueue
from pgqueue import Unique
from pgqueue.cli.main import app as cli_app
from pgqueue.maintenance.retention import prune_unique_keys
from pgqueue.models import JobState
from tests.apps.support import state_of
from tests.conftest import wait_until
from tests.enqueue_support import claim, complete, count_jobs, db_now, must_get_job

Conn = psycopg.Connection[Any]
Report = pgqueue.Task[..., None]


def ledger(conn: Conn) -> dict[str, tuple[int, list[str], timedelta | None]]:
    """key -> (job_id, states, period) of every ledger row."""
    return {
        r[0]: (r[1], r[2], r[3])
        for r in conn.execute("SELECT key, job_id, states::text[], held_until - held_since FROM pgqueue.unique_keys")
    }


def end_periods(conn: Conn) -> None:
    """Move every key's period into the past (what waiting would do, without waiting)."""
    conn.execute(
        "UPDATE pgqueue.unique_keys SET held_since = now() - interval '2 days',"
        " held_until = now() - interval '1 second' WHERE held_until IS NOT NULL"
    )


def job(conn: Conn, job_id: int) -> dict[str, Any]:
    cur = conn.execute(
        "SELECT state::text AS state, args, priority, run_at, scheduled_at, concurrency_key, expires_at, dedupe_key,"
        " unique_key FROM pgqueue.jobs WHERE id = %s",
        [job_id],
    )
    found = cur.fetchone()
    assert found is not None
    assert cur.description is not None
    return dict(zip([c.name for c in cur.description], found, strict=True))


@pytest.fixture
def report(app: pgqueue.App) -> Report:
    @app.task(name="t.report", queue="q", unique=Unique(args=["customer_id"]))
    def report(customer_id: int, day: str = "mon") -> None: ...

    return report


# -- keep -------------------------------------------------------------------------------------


def test_keep_by_chosen_arguments(conn: Conn, report: Report) -> None:
    first = report.enqueue(conn, customer_id=1, day="mon")
    assert report.enqueue(conn, customer_id=1, day="tue") == first  # day is not part of the key
    other = report.enqueue(conn, customer_id=2)
    assert other != first
    assert job(conn, first)["args"] == {"customer_id": 1, "day": "mon"}  # the holder is unchanged
    assert job(conn, first)["dedupe_key"] == 't.report:{"customer_id":1}'
    assert job(conn, first)["unique_key"] is None  # the live-only index is not involved
    assert count_jobs(conn) == 2
    assert ledger(conn)['t.report:{"customer_id":1}'] == (
        first,
        ["available", "scheduled", "running", "retryable"],
        None,
    )


def test_keep_holds_the_key_while_running_and_frees_it_when_finished(conn: Conn, report: Report) -> None:
    first = report.enqueue(conn, customer_id=1)
    [claimed] = claim(conn, "q", {"t.report": 3})
    assert report.enqueue(conn, customer_id=1) == first  # running: still holds it
    complete(conn, first, claimed[7])
    second = report.enqueue(conn, customer_id=1)  # finished, no period: free again
    assert second != first
    assert state_of(conn, first) == "completed"
    assert ledger(conn)['t.report:{"customer_id":1}'][0] == second


def test_finished_states_hold_the_key_for_the_period(conn: Conn, report: Report) -> None:
    daily = report.options(unique=Unique(args=["customer_id"], period=86400, states=[*JobState]))
    first = daily.enqueue(conn, customer_id=1)
    [claimed] = claim(conn, "q", {"t.report": 3})
    complete(conn, first, claimed[7])  # moved to a finished partition
    assert daily.enqueue(conn, customer_id=1) == first  # completed within the period: held
    [(_, states, period)] = ledger(conn).values()
    assert period == timedelta(days=1)  # sliding: from when the job took the key
    assert "completed" in states
    end_periods(conn)
    second = daily.enqueue(conn, customer_id=1)
    assert second != first
    assert daily.enqueue(conn, customer_id=1) == second


def test_a_finished_state_outside_the_rules_frees_the_key(conn: Conn, report: Report) -> None:
    # Only completed jobs hold it: a discarded one does not.
    rule = report.options(unique=Unique(args=["customer_id"], period=3600, states=["available", "completed"]))
    first = rule.enqueue(conn, customer_id=1)
    [claimed] = claim(conn, "q", {"t.report": 3})
    assert rule.enqueue(conn, customer_id=1) != first  # running is not in its states
    assert state_of(conn, first) == "running"
    complete(conn, first, claimed[7], JobState.DISCARDED)
    assert count_jobs(conn) == 2


def test_explicit_key_and_the_holder_rules_decide(conn: Conn, report: Report) -> None:
    # A job holds the key under the rules it was enqueued with; the mode is the newcomer's.
    first = report.options(unique_key="nightly", unique=Unique(period=3600)).enqueue(conn, customer_id=1)
    assert report.options(unique_key="nightly").enqueue(conn, customer_id=2) == first
    assert job(conn, first)["dedupe_key"] == "nightly"
    assert ledger(conn)["nightly"][2] == timedelta(hours=1)


# -- replace and debounce ---------------------------------------------------------------------------


def test_replace_updates_a_waiting_holder(conn: Conn, app: pgqueue.App) -> None:
    @app.task(name="t.sync", queue="q", unique=Unique(args=["account"], mode="replace"))
    def sync(account: int, cursor: int) -> None: ...

    with conn.transaction():
        now = db_now(conn)
        first = sync.options(delay=600).enqueue(conn, account=1, cursor=10)
        again = sync.options(priority=5, concurrency_key="a1", expires_in=60).enqueue(conn, account=1, cursor=11)
    assert again == first
    replaced = job(conn, first)
    assert (replaced["state"], replaced["args"], replaced["priority"]) == ("available", {"account": 1, "cursor": 11}, 5)
    assert (replaced["run_at"], replaced["scheduled_at"]) == (now, now)
    assert (replaced["concurrency_key"], replaced["expires_at"]) == ("a1", now + timedelta(seconds=60))
    assert count_jobs(conn) == 1

    # A running holder is never changed: by default it does not hold the key (waiting
    # states), so a new job is made; with running in the states it is returned untouched.
    [claimed] = claim(conn, "q", {"t.sync": 3})
    assert claimed[0] == first
    second = sync.enqueue(conn, account=1, cursor=12)
    assert second != first
    assert job(conn, first)["args"]["cursor"] == 11
    held = sync.options(unique=Unique(args=["account"], mode="replace", states=["running"]))
    assert held.enqueue(conn, account=2, cursor=1) != first  # another account: its own key
    third = held.enqueue(conn, account=2, cursor=2)
    [running] = claim(conn, "q", {"t.sync": 3}, limit=1)
    assert running[0] in (second, third)


def test_replace_keeps_a_retryable_holder_retryable(conn: Conn, app: pgqueue.App) -> None:
    @app.task(name="t.retry", queue="q", unique=Unique(args=["n"], mode="replace"))
    def retried(n: int, v: int) -> None: ...

    first = retried.enqueue(conn, n=1, v=1)
    scheduled_for = job(conn, first)["scheduled_at"]
    [claimed] = claim(conn, "q", {"t.retry": 3})
    complete(conn, first, claimed[7], JobState.RETRYABLE)
    conn.execute("UPDATE pgqueue.jobs_live SET run_at = now() + interval '1 hour' WHERE id = %s", [first])
    assert retried.options(delay=7200).enqueue(conn, n=1, v=2) == first
    after = job(conn, first)
    assert (after["state"], after["args"]["v"]) == ("retryable", 2)
    assert after["scheduled_at"] == scheduled_for  # the time first scheduled for stays
    assert must_get_job(conn, first)["attempt"] == 1


def test_debounce_moves_run_at_later_only(conn: Conn, app: pgqueue.App) -> None:
    @app.task(name="t.index", queue="q", unique=Unique(args=["doc"], mode="debounce"))
    def index(doc: int, note: str = "") -> None: ...

    with conn.transaction():
        now = db_now(conn)
        first = index.options(delay=10).enqueue(conn, doc=1, note="first")
        assert index.options(delay=30).enqueue(conn, doc=1, note="second") == first
        assert (job(conn, first)["run_at"], job(conn, first)["state"]) == (now + timedelta(seconds=30), "scheduled")
        assert index.options(delay=5).enqueue(conn, doc=1) == first  # never earlier
    moved = job(conn, first)
    assert moved["run_at"] == now + timedelta(seconds=30)
    assert moved["scheduled_at"] == now + timedelta(seconds=30)
    assert moved["args"] == {"doc": 1, "note": "first"}  # debounce keeps the arguments
    assert count_jobs(conn) == 1


# -- enqueue_many ------------------------------------------------------------------------------


def test_enqueue_many_honours_the_rules(conn: Conn, app: pgqueue.App, report: Report) -> None:
    existing = report.enqueue(conn, customer_id=1)
    specs = [report.job(customer_id=c % 3, day=f"d{i}") for i, c in enumerate(range(1, 10))]
    assert app.enqueue_many(conn, specs) == 9
    rows = conn.execute("SELECT id, args->>'customer_id', args->>'day' FROM pgqueue.jobs ORDER BY id").fetchall()
    assert sorted(r[1] for r in rows) == ["0", "1", "2"]  # one job per key
    assert [r[0] for r in rows if r[1] == "1"] == [existing]

    @app.task(name="t.last", queue="q", unique=Unique(args=["k"], mode="replace"))
    def last(k: int, v: int) -> None: ...

    assert app.enqueue_many(conn, [last.job(k=1, v=v) for v in range(5)]) == 5
    [(args,)] = conn.execute("SELECT args FROM pgqueue.jobs WHERE task = 't.last'").fetchall()
    assert args == {"k": 1, "v": 4}  # a key's jobs keep their order: the last one wins


# -- SQL and CLI ------------------------------------------------------------------------------------


def test_sql_function_rules(conn: Conn) -> None:
    def enqueue(args: str, **rules: Any) -> int:
        named = "".join(f", {k} => %({k})s" for k in rules)
        row = conn.execute(f"SELECT pgqueue.enqueue('t.sql', '{args}', unique_key => 'k'{named})", rules).fetchone()
        assert row is not None
        return int(row[0])

    first = enqueue('{"v": 1}', unique_period=timedelta(minutes=5), unique_states=["available", "completed"])
    assert enqueue('{"v": 2}', unique_mode="keep") == first
    assert enqueue('{"v": 3}', unique_mode="replace") == first
    assert job(conn, first)["args"] == {"v": 3}
    assert ledger(conn)["k"] == (first, ["available", "completed"], timedelta(minutes=5))


@pytest.mark.parametrize(
    ("rules", "problem"),
    [
        ("unique_period => '0 seconds'", "unique_period must be positive"),
        ("unique_period => '-1 hour'", "unique_period must be positive"),
        ("unique_period => '3651 days'", "at most 3650 days"),
        ("unique_states => '{waiting}'", "unknown state 'waiting'"),
        ("unique_states => '{available,NULL}'", "unknown state NULL"),
        ("unique_states => '{}'", "unique_states must name at least one state"),
        ("unique_mode => 'latest'", "unknown unique_mode 'latest'"),
        ("unique_states => '{completed}'", "need a unique_period"),
        ("unique_key => NULL, unique_mode => 'keep'", "need a unique_key"),
        ("unique_key => repeat('k', 201), unique_mode => 'keep'", "unique_key must be 1-200 characters"),
    ],
)
def test_sql_function_refuses_bad_rules_and_writes_nothing(conn: Conn, rules: str, problem: str) -> None:
    key = "" if "unique_key" in rules else "unique_key => 'k', "
    with pytest.raises(psycopg.errors.InvalidParameterValue) as info:
        conn.execute(f"SELECT pgqueue.enqueue('t.sql', {key}{rules})")
    assert problem in str(info.value)
    assert count_jobs(conn) == 0
    assert ledger(conn) == {}


def test_cli_enqueue_with_rules(dsn: str, conn: Conn) -> None:
    env = {"PGQUEUE_DSN": dsn, "PGQUEUE_SCHEMA": None, "COLUMNS": "200"}
    args = ["enqueue", "t.cli", "--args", '{"n": 1}', "--unique-period", "1h", "--unique-states", "available,completed"]
    first = CliRunner().invoke(cli_app, args, env=env)
    assert first.exit_code == 0, first.output
    again = CliRunner().invoke(cli_app, args, env=env)
    assert again.stdout == first.stdout
    assert ledger(conn) == {'t.cli:{"n":1}': (int(first.stdout), ["available", "completed"], timedelta(hours=1))}
    shown = CliRunner().invoke(cli_app, ["jobs", "show", first.stdout.strip()], env=env)
    assert 't.cli:{"n":1} (unique rules)' in shown.stdout
    bad = CliRunner().invoke(cli_app, ["enqueue", "t.cli", "--unique-mode", "latest"], env=env)
    assert bad.exit_code == 1
    assert "Unique(mode=...) must be one of keep, replace, debounce" in bad.stderr
    assert count_jobs(conn) == 1


# -- the ledger's retention ---------------------------------------------------------------------------


def test_prune_removes_rows_that_hold_nothing(conn: Conn, report: Report) -> None:
    live = report.enqueue(conn, customer_id=1)  # live holder: kept
    finished = report.enqueue(conn, customer_id=2)
    claimed = {c[0]: c[7] for c in claim(conn, "q", {"t.report": 3})}
    complete(conn, finished, claimed[finished])  # live-only rules, finished: removed
    conn.execute(
        "UPDATE pgqueue.jobs_live SET state = 'available', lease_token = NULL, lease_expires_at = NULL WHERE id = %s",
        [live],
    )
    windowed = report.options(unique=Unique(args=["customer_id"], period=3600, states=[*JobState]))
    in_period = windowed.enqueue(conn, customer_id=3)  # finished within its period: kept
    claimed = {c[0]: c[7] for c in claim(conn, "q", {"t.report": 3})}
    complete(conn, in_period, claimed[in_period])
    over = windowed.enqueue(conn, customer_id=4)  # its period over: removed
    conn.execute(
        "UPDATE pgqueue.unique_keys SET held_since = now() - interval '2 hours', held_until = now() - interval '1 hour'"
        " WHERE job_id = %s",
        [over],
    )
    assert prune_unique_keys(conn, "pgqueue", batch=1) == 2  # in batches
    assert sorted(v[0] for v in ledger(conn).values()) == sorted([live, in_period])
    assert prune_unique_keys(conn, "pgqueue") == 0


def test_prune_removes_rows_whose_holder_retention_dropped(conn: Conn, report: Report) -> None:
    windowed = report.options(unique=Unique(args=["customer_id"], period=30 * 86400, states=[*JobState]))
    gone = windowed.enqueue(conn, customer_id=1)
    claimed = claim(conn, "q", {"t.report": 3})
    complete(conn, gone, claimed[0][7])
    # Taken before the oldest partition retention keeps, and no longer stored anywhere.
    conn.execute("DELETE FROM pgqueue.jobs WHERE id = %s", [gone])
    conn.execute("UPDATE pgqueue.unique_keys SET held_since = now() - interval '10 days'")
    assert prune_unique_keys(conn, "pgqueue") == 1
    assert ledger(conn) == {}


def test_prune_leaves_a_row_an_enqueue_is_taking_over(dsn: str, conn: Conn, report: Report) -> None:
    first = report.enqueue(conn, customer_id=1)
    [claimed] = claim(conn, "q", {"t.report": 3})
    complete(conn, first, claimed[7])  # the row holds nothing: prunable...
    with psycopg.connect(dsn) as producer, concurrent.futures.ThreadPoolExecutor(1) as pool:
        second = report.enqueue(producer, customer_id=1)  # ...but a new holder takes it (not committed)
        pending = pool.submit(prune_on_own_connection, dsn)
        wait_until(lambda: _waits_on_lock(conn, "unique_keys"))
        producer.commit()
        assert pending.result(timeout=30) == 0  # re-checked on the new row: not removed
    assert ledger(conn)['t.report:{"customer_id":1}'][0] == second
    assert report.enqueue(conn, customer_id=1) == second


def prune_on_own_connection(dsn: str) -> int:
    with psycopg.connect(dsn, autocommit=True) as other:
        return prune_unique_keys(other, "pgqueue")


def _waits_on_lock(conn: Conn, table: str) -> bool:
    row = conn.execute(
        "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE %s",
        [f"%{table}%"],
    ).fetchone()
    return row is not None and row[0] > 0
