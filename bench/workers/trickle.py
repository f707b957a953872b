"""A trickle of keyed jobs: ``python -m bench.workers.trickle --queue Q --keys 20 --rate 100``.

Single enqueues of ``bench.noop``, each in its own transaction, paced to ``--rate`` jobs/s
and spread round robin over ``--keys`` concurrency keys (``trickle-0`` ...). After each
commit it prints ``<job key> <commit wall time>``; it ends with ``DONE <jobs> <elapsed>``
(the format of ``bench.workers.producer``, read by ``bench._measure.Producers``).
"""

from __future__ import annotations

import argparse
import sys
import time
import uuid

import psycopg

from bench._contenders import _pgqueue_app


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--dsn", required=True)
    p.add_argument("--contender", default="pgqueue", choices=["pgqueue"])
    p.add_argument("--duration", type=float, default=5.0)
    p.add_argument("--rate", type=float, default=100.0, help="jobs/s, over all keys")
    p.add_argument("--keys", type=int, default=20)
    p.add_argument("--queue", default="default")
    p.add_argument("--start-at", type=float, default=0.0, help="wall-clock time to begin (aligns producers)")
    args = p.parse_args()
    noop = _pgqueue_app().tasks["bench.noop"].options(queue=args.queue)
    keyed = [noop.options(concurrency_key=f"trickle-{i}") for i in range(args.keys)]
    conn = psycopg.connect(args.dsn, autocommit=True)
    prefix = uuid.uuid4().hex[:8]
    if args.start_at:
        time.sleep(max(args.start_at - time.time(), 0))
    out = sys.stdout
    start = time.perf_counter()
    end = start + args.duration
    count = 0
    while True:
        now = time.perf_counter()
        if now >= end:
            break
        due = start + count / args.rate
        if due > now:
            time.sleep(due - now)
        key = f"{prefix}-{count}"
        with conn.transaction():
            keyed[count % args.keys].enqueue(conn, k=key, t=time.time())
        out.write(f"{key} {time.time():.6f}\n")
        count += 1
    out.write(f"DONE {count} {time.perf_counter() - start:.6f}\n")
    out.flush()
    conn.close()


if __name__ == "__main__":
    main()
