"""The chaos producer: enqueues jobs in its own transactions, rolls a share back on
purpose, and records its intent (committed, rolled back, or unknown) for the checker."""

from __future__ import annotations

import json
import random
import threading
import uuid
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import psycopg

from .app import app

__all__ = ["BURST_SHARE", "KINDS", "Producer"]

#: Task kinds and their weights in the mix.
KINDS: dict[str, int] = {
    "chaos.ok": 40,
    "chaos.ok_async": 25,
    "chaos.tx": 10,
    "chaos.tx_async": 8,
    "chaos.hang": 2,
    "chaos.hang_sync": 2,
    "chaos.hog": 2,
    "chaos.exit": 1,
    "chaos.fail": 2,
}
#: Share of the producer's turns that enqueue a burst of single-statement transactions
#: (exercising the app's NOTIFY window) instead of one transaction of 1-3 jobs.
BURST_SHARE = 0.3
#: Handler run time in ms: mostly short, some long enough to be caught by a fault.
_DURATIONS = [(0, 60), (0, 60), (0, 60), (20, 300), (1000, 4000)]


class _RollbackError(Exception):
    pass


@dataclass
class Intent:
    committed: dict[int, str] = field(default_factory=dict)  # job id -> task
    rolled_back: dict[int, str] = field(default_factory=dict)
    unknown: dict[int, str] = field(default_factory=dict)  # the COMMIT's answer was lost


class Producer:
    def __init__(self, dsn: str, *, rate: float, rollback_share: float = 0.2, seed: int = 0, keys: int = 0) -> None:
        self.dsn = dsn
        #: With keys, every job gets one of this many concurrency keys (k0, k1, ...).
        self.keys = keys
        self.rate = rate  # transactions per second
        self.rollback_share = rollback_share
        self.rng = random.Random(seed)
        self.intent = Intent()
        self.kinds: Counter[str] = Counter()
        self.errors = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="chaos-producer", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(60)

    def _pick(self) -> tuple[str, int]:
        kind = self.rng.choices(list(KINDS), weights=list(KINDS.values()))[0]
        lo, hi = self.rng.choice(_DURATIONS)
        return kind, self.rng.randint(lo, hi)

    def _run(self) -> None:
        conn: psycopg.Connection[Any] | None = None
        burst_conn: psycopg.Connection[Any] | None = None
        backoff = 0.05
        while not self._stop.is_set():
            try:
                if conn is None or conn.closed:
                    conn = psycopg.connect(self.dsn, connect_timeout=5)
                if not self.keys and self.rng.random() < BURST_SHARE:
                    if burst_conn is None or burst_conn.closed:
                        burst_conn = psycopg.connect(self.dsn, connect_timeout=5, autocommit=True)
                    self._burst(burst_conn)
                else:
                    self._one_transaction(conn)
                backoff = 0.05
            except psycopg.OperationalError:
                self.errors += 1
                for c in (conn, burst_conn):
                    if c is not None:
                        c.close()
                conn = burst_conn = None
                self._stop.wait(backoff)
                backoff = min(backoff * 2, 2.0)
                continue
            self._stop.wait(self.rng.expovariate(self.rate))
        for c in (conn, burst_conn):
            if c is not None:
                c.close()

    def _burst(self, conn: psycopg.Connection[Any]) -> None:
        """A few jobs at once, each statement its own transaction (autocommit): the app's
        NOTIFY window lets most of them skip their NOTIFY. A job is committed once its
        statement returned; one lost in flight has no id to track (the checker then sees
        an untracked job at most, never a missing one)."""
        for _ in range(self.rng.randint(2, 6)):
            kind, ms = self._pick()
            job_id = app.enqueue(conn, kind, tag=uuid.uuid4().hex, ms=ms)
            self.intent.committed[job_id] = kind
            self.kinds[kind] += 1

    def _one_transaction(self, conn: psycopg.Connection[Any]) -> None:
        ids: dict[int, str] = {}
        roll_back = self.rng.random() < self.rollback_share
        try:
            with conn.transaction():
                for _ in range(self.rng.randint(1, 3)):
                    kind, ms = self._pick()
                    if self.keys:
                        job_id = self._enqueue_keyed(conn, kind, ms)
                    else:
                        job_id = app.enqueue(conn, kind, tag=uuid.uuid4().hex, ms=ms)
                    ids[job_id] = kind
                if roll_back:
                    raise _RollbackError
        except _RollbackError:
            self.intent.rolled_back.update(ids)
            return
        except psycopg.OperationalError:
            # Lost before or during COMMIT: the outcome is unknown, the checker finds out.
            self.intent.unknown.update(ids)
            raise
        self.intent.committed.update(ids)
        self.kinds.update(ids.values())

    def _enqueue_keyed(self, conn: psycopg.Connection[Any], kind: str, ms: int) -> int:
        key = f"k{self.rng.randrange(self.keys)}"
        row = conn.execute(
            "SELECT pgqueue.enqueue(%s, %s::jsonb, concurrency_key => %s)",
            [kind, json.dumps({"tag": uuid.uuid4().hex, "ms": ms}), key],
        ).fetchone()
        assert row is not None
        return int(row[0])

    @property
    def enqueued(self) -> int:
        i = self.intent
        return len(i.committed) + len(i.rolled_back) + len(i.unknown)
