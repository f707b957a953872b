"""Unique rules under 16 concurrent producers, each in its own real transactions: exactly
one job per key and window, whatever the interleaving, also while a worker moves the
holders from the live partition to the finished ones mid-race."""

from __future__ import annotations

import collections
import random
import threading
from collections.abc import Callable
from typing import Any

import psycopg
import pytest

import pgqueue
from pgqueue import JobState, Unique
from tests.enqueue_support import claim, complete

Conn = psycopg.Connection[Any]
PRODUCERS = 16
ROUNDS = 8
KEYS = 4


def race(dsn: str, produce: Callable[[Conn, int, int], list[int]]) -> list[tuple[int, int]]:
    """Run ``produce(conn, thread, round)`` ROUNDS times in each of PRODUCERS threads, every
    call in a transaction of its own that commits, all threads released together; returns
    (thread, job id) for every id an enqueue returned."""
    barrier = threading.Barrier(PRODUCERS)
    returned: list[tuple[int, int]] = []
    failures: list[BaseException] = []
    lock = threading.Lock()

    def producer(n: int) -> None:
        try:
            with psycopg.connect(dsn) as conn:
                conn.execute("SET lock_timeout = '60s'")
                conn.commit()
                barrier.wait(timeout=60)
                for r in range(ROUNDS):
                    with conn.transaction():
                        ids = produce(conn, n, r)
                    with lock:
                        returned.extend((n, i) for i in ids)
        except BaseException as exc:  # noqa: BLE001 - reported below
            failures.append(exc)
            barrier.abort()

    threads = [threading.Thread(target=producer, args=(n,)) for n in range(PRODUCERS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    assert not any(t.is_alive() for t in threads), "a producer hung"
    assert failures == []
    return returned


def jobs_per_key(conn: Conn) -> dict[str, list[tuple[int, str]]]:
    out: dict[str, list[tuple[int, str]]] = collections.defaultdict(list)
    for key, job_id, state in conn.execute("SELECT dedupe_key, id, state::text FROM pgqueue.jobs ORDER BY id"):
        out[key].append((job_id, state))
    return dict(out)


def completer(dsn: str, stop: threading.Event, done: list[int]) -> threading.Thread:
    """A worker stand-in: claims and completes jobs as fast as it can until ``stop``,
    moving holders to the finished partitions while the producers race."""

    def run() -> None:
        with psycopg.connect(dsn, autocommit=True) as conn:
            while not stop.is_set():
                for row in claim(conn, "q", {"t.race": 3}, limit=5):
                    complete(conn, row[0], row[7])
                    done.append(row[0])

    thread = threading.Thread(target=run)
    thread.start()
    return thread


@pytest.mark.parametrize("path", ["enqueue", "enqueue_many"])
def test_keep_within_a_period_one_job_per_key_while_holders_finish(
    dsn: str, conn: Conn, app: pgqueue.App, path: str
) -> None:
    @app.task(name="t.race", queue="q", unique=Unique(args=["key"], period=3600, states=[*JobState]))
    def raced(key: int, who: int) -> None: ...

    def produce(c: Conn, n: int, r: int) -> list[int]:
        keys = list(range(KEYS))
        if path == "enqueue_many":
            app.enqueue_many(c, [raced.job(key=k, who=n) for k in random.sample(keys, KEYS)])
            return []
        return [raced.enqueue(c, key=k, who=n) for k in keys]  # one order: no deadlock between producers

    stop = threading.Event()
    done: list[int] = []
    worker = completer(dsn, stop, done)
    try:
        returned = race(dsn, produce)
    finally:
        stop.set()
        worker.join(timeout=60)
    per_key = jobs_per_key(conn)
    assert sorted(per_key) == [f't.race:{{"key":{k}}}' for k in range(KEYS)]
    assert [len(v) for v in per_key.values()] == [1] * KEYS, per_key  # one per key and window
    winners = {v[0][0] for v in per_key.values()}
    assert {i for _, i in returned} <= winners  # every enqueue got the holder's id
    if path == "enqueue":
        assert len(returned) == PRODUCERS * ROUNDS * KEYS
    assert set(done) <= winners


def test_replace_one_job_per_key_holding_the_last_committed_args(dsn: str, conn: Conn, app: pgqueue.App) -> None:
    @app.task(name="t.race", queue="q", unique=Unique(args=["key"], mode="replace"))
    def raced(key: int, who: int, round: int) -> None: ...

    def produce(c: Conn, n: int, r: int) -> list[int]:
        ids: list[int] = [raced.enqueue(c, key=k, who=n, round=r) for k in range(KEYS)]
        # What this transaction wrote is what the key's job holds until the next one commits.
        held = c.execute(
            "SELECT count(*) FROM pgqueue.jobs WHERE task = 't.race' AND (args->>'who')::int = %s"
            " AND (args->>'round')::int = %s",
            [n, r],
        ).fetchone()
        assert held == (KEYS,)
        return ids

    returned = race(dsn, produce)
    per_key = jobs_per_key(conn)
    assert [len(v) for v in per_key.values()] == [1] * KEYS, per_key
    assert len({i for _, i in returned}) == KEYS
    states = {state for v in per_key.values() for _, state in v}
    assert states == {"available"}
    ledger = dict(conn.execute("SELECT key, job_id FROM pgqueue.unique_keys").fetchall())
    assert ledger == {k: v[0][0] for k, v in per_key.items()}
