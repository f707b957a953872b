"""What a result was measured on: PostgreSQL version and settings, CPUs, fsync latency."""

from __future__ import annotations

import os
import platform
import statistics
import tempfile
import time
from datetime import UTC, datetime
from typing import Any

import psycopg

SETTINGS = (
    "shared_buffers",
    "synchronous_commit",
    "fsync",
    "wal_level",
    "max_connections",
    "work_mem",
    "autovacuum",
    "deadlock_timeout",
)


def fsync_latency_ms(samples: int = 50) -> float:
    """Median time of a 4 KiB write + fsync in the temp directory (a disk sanity figure)."""
    times = []
    with tempfile.NamedTemporaryFile() as f:
        for _ in range(samples):
            t = time.perf_counter()
            f.write(b"x" * 4096)
            f.flush()
            os.fsync(f.fileno())
            times.append(time.perf_counter() - t)
    return statistics.median(times) * 1000


def describe(dsn: str) -> dict[str, Any]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        version = conn.execute("SHOW server_version").fetchone()
        settings = {name: conn.execute(f"SHOW {name}").fetchone()[0] for name in SETTINGS}  # type: ignore[index]
    return {
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "postgres": version[0] if version else "?",
        "settings": settings,
        "cpus": os.cpu_count(),
        "machine": f"{platform.system()} {platform.machine()}, Python {platform.python_version()}",
        "fsync_ms": round(fsync_latency_ms(), 3),
    }
