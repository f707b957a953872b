"""The worker's view of flow control, without a database: when a limited claim looks for
jobs without a key in a queue with per-key controls."""

from __future__ import annotations

from pgqueue._db.jobs import ClaimHint, JobsDB
from pgqueue.worker.flow import UNKEYED_INTERVAL, FlowControl


def flow() -> FlowControl:
    return FlowControl(JobsDB("pgqueue"), ["keyed", "plain"], ["t"], refresh_interval=5.0)


def test_every_queue_is_searched_for_unkeyed_jobs_until_a_claim_finds_none() -> None:
    view = flow()
    assert view.unkeyed(0.0) == {"keyed": True, "plain": True}
    view.observe([ClaimHint("keyed", None, False, "k", unkeyed=False), ClaimHint("plain", None, False, None)], 10.0)
    assert view.unkeyed(10.0) == {"keyed": False, "plain": True}
    assert view.unkeyed(10.0 + UNKEYED_INTERVAL / 2) == {"keyed": False, "plain": True}
    assert view.unkeyed(10.0 + UNKEYED_INTERVAL) == {"keyed": True, "plain": True}


def test_a_search_that_finds_unkeyed_jobs_keeps_searching_at_every_claim() -> None:
    view = flow()
    view.observe([ClaimHint("keyed", None, False, "k", unkeyed=False)], 10.0)
    view.observe([ClaimHint("keyed", None, False, "k", unkeyed=True)], 10.5)
    assert view.unkeyed(10.5)["keyed"] is True
    view.observe([ClaimHint("keyed", None, False, "k", unkeyed=None)], 10.6)  # did not look: no change
    assert view.unkeyed(10.6)["keyed"] is True
