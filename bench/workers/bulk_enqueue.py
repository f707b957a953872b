"""One ``enqueue_many`` of ``--jobs`` generated jobs in one transaction; prints the
process's resident memory before and at its peak (``RSS <base KiB> <peak KiB> <seconds>``)."""

from __future__ import annotations

import argparse
import resource
import time

import psycopg

from bench.workers.pgqueue_worker import build_app


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--dsn", required=True)
    p.add_argument("--jobs", type=int, required=True)
    args = p.parse_args()
    app = build_app(args.dsn)
    noop = app.tasks["bench.noop"]
    with psycopg.connect(args.dsn, autocommit=True) as conn:
        base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        start = time.perf_counter()
        with conn.transaction():
            app.enqueue_many(conn, (noop.job(k=f"job-{i}") for i in range(args.jobs)))
        took = time.perf_counter() - start
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(f"RSS {base} {peak} {took:.3f}", flush=True)


if __name__ == "__main__":
    main()
