"""Capacity's wake-ups for limited queues (no database: the rules alone)."""

from __future__ import annotations

import asyncio

from pgqueue.worker.capacity import Capacity


def _capacity() -> Capacity:
    return Capacity(concurrency=4, fetch_batch=4, leases=[], wake=asyncio.Event(), queues=("a", "b"))


def test_outcomes_written_by_the_completer_wake_the_fetcher_for_a_held_back_queue() -> None:
    cap = _capacity()
    cap.blocked = {"a"}
    cap.outcomes_written(["b"])
    assert not cap.wake.is_set()  # b was not held back: its outcomes free nothing waited for
    cap.outcomes_written(["b", "a"])
    assert cap.wake.is_set()


def test_free_by_queue_adds_the_buffers_shortfall_only_when_asked() -> None:
    cap = _capacity()
    cap.take("a")
    cap.prefetch, cap.buffered = 5, 2
    assert cap.free_by_queue() == {"a": 3, "b": 3}
    assert cap.free_by_queue(prefetch=True) == {"a": 6, "b": 6}
