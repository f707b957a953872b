"""``python -m tests.chaos --minutes N``: a long chaos run by hand; prints one summary line."""

from __future__ import annotations

import argparse
import signal
import sys
from pathlib import Path

from .limits import Limits
from .run import run_chaos


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def main() -> int:
    # Stop cleanly (workers, proxies, the private cluster) on SIGTERM, and on SIGINT even
    # when started in the background, where a shell ignores it.
    signal.signal(signal.SIGINT, _interrupt)
    signal.signal(signal.SIGTERM, _interrupt)
    parser = argparse.ArgumentParser(prog="python -m tests.chaos", description=__doc__)
    parser.add_argument("--minutes", type=float, default=10.0, help="how long faults are injected")
    parser.add_argument("--workers", type=int, default=3, help="pgqueue work processes")
    parser.add_argument("--rate", type=float, default=15.0, help="producer transactions per second")
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--keep", type=Path, default=Path("chaos-logs"), help="where the logs are copied")
    parser.add_argument(
        "--limits",
        nargs="?",
        const="all",
        choices=("all", "keys"),
        default=None,
        help="run the queue under flow control and check it: every kind of limit, rates and a pause (all),"
        " or per-key concurrency alone and a pause (keys: workers claim ahead)",
    )
    parser.add_argument(
        "--workflows",
        type=float,
        nargs="?",
        const=10.0,
        default=None,
        metavar="RATE",
        help="also create diamond graphs and batches (RATE per second, default 10; one in ten a batch) and check them",
    )
    args = parser.parse_args()
    report = run_chaos(
        args.minutes * 60,
        workers=args.workers,
        rate=args.rate,
        seed=args.seed,
        keep=args.keep,
        keep_always=True,
        limits=None if args.limits is None else Limits() if args.limits == "all" else Limits.keys_only(),
        workflow_rate=args.workflows,
    )
    print(report.line())
    return 0 if report.ok else 1


if __name__ == "__main__":
    sys.exit(main())
