"""Shared bits of the benchmark worker processes: options, stop signal, start reports."""

from __future__ import annotations

import argparse
import signal
import sys
import threading
import time


def parse(extra: list[tuple[str, type, object]] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser()
    p.add_argument("--dsn", required=True)
    p.add_argument("--concurrency", type=int, default=100)
    p.add_argument("--queues", default="default")
    p.add_argument("--report", action="store_true", help="print '<key> <time>' when a handler starts")
    p.add_argument("--no-listen", action="store_true")
    p.add_argument("--poll-interval", type=float, default=1.0)
    for name, typ, default in extra or []:
        p.add_argument(name, type=typ, default=default)
    return p.parse_args()


_lock = threading.Lock()


def report(key: object) -> None:
    """Print a handler start, keyed, with the wall clock (same machine as the producer)."""
    if key is None:
        return
    now = time.time()
    with _lock:
        sys.stdout.write(f"{key} {now:.6f}\n")
        sys.stdout.flush()


def on_stop(callback: object) -> None:
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: callback())  # type: ignore[operator]


def ready() -> None:
    sys.stdout.write("READY\n")
    sys.stdout.flush()
