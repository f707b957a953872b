"""``pgqueue top``'s throughput estimate and sparkline, from made-up snapshots (no database)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from pgqueue import ops
from pgqueue.cli.top import Throughput, sparkline


def _snap(at: datetime, c1: int, c5: int) -> ops.StatusSnapshot:
    queue = ops.QueueStats(queue="q", completed_1m=c1, completed_5m=c5)
    return ops.StatusSnapshot(at=at, queues=[queue], workers=[], failures=[], health=None, retention=[])


def test_throughput_estimate_for_a_burst_and_a_steady_rate() -> None:
    t0 = datetime(2026, 1, 1, tzinfo=UTC)
    tp = Throughput()
    tp.update(_snap(t0, 0, 0))
    assert list(tp.history) == []
    tp.update(_snap(t0 + timedelta(seconds=1), 500, 500))  # a burst: all new
    tp.update(_snap(t0 + timedelta(seconds=2), 500, 500))  # nothing since
    assert list(tp.history) == [500, 0]
    assert list(tp.rates) == [500, 0]

    steady = Throughput()  # 10 jobs/s for minutes: the 1-minute window no longer grows
    for i in range(4):
        steady.update(_snap(t0 + timedelta(seconds=2 * i), 600, 3000))
    assert list(steady.history) == [20, 20, 20]
    assert list(steady.rates) == [10, 10, 10]


def test_sparkline_scales_to_the_peak() -> None:
    assert sparkline([0, 0]) == "▁▁"
    assert sparkline([0, 50, 100]) == "▁▅█"
    assert sparkline([]) == ""
