"""The producer's NOTIFY window (pgqueue/_wake.py): its decisions, on a clock the test moves."""

from __future__ import annotations

import math

import pytest

from pgqueue._wake import Plan, Wake, WakeThrottle, check_window, parse_echo
from pgqueue.errors import ConfigError

DB = ("127.0.0.1", "5432", "app")


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def throttle(window: float = 0.05) -> tuple[WakeThrottle, Clock]:
    t, clock = WakeThrottle(window), Clock()
    t.clock = clock
    return t, clock


def run(t: WakeThrottle, clock: Clock, queue: str = "q", took: float = 0.0, ok: bool = True) -> tuple[Plan, bool]:
    plan = t.plan(DB, queue)
    clock.now += took
    return plan, t.settle(plan, ok)


def test_a_quiet_queue_notifies_every_job() -> None:
    t, clock = throttle()
    for _ in range(3):
        plan, repair = run(t, clock)
        assert plan.wake is Wake.PLAIN
        assert plan.notify
        assert plan.echo is None
        assert not repair
        clock.now += 1.0  # far apart: never a burst


def test_a_burst_opens_a_window_whose_jobs_skip_the_notify() -> None:
    t, clock = throttle(0.05)
    assert run(t, clock)[0].wake is Wake.PLAIN
    clock.now += 0.001
    echo, _ = run(t, clock, took=0.001)
    assert echo.wake is Wake.ECHO
    assert echo.notify
    assert echo.echo == "~50 q"
    for _ in range(5):
        clock.now += 0.002
        quiet, repair = run(t, clock, took=0.001)
        assert quiet.wake is Wake.QUIET
        assert not quiet.notify
        assert not repair
        assert quiet.window_end == pytest.approx(echo.started + 0.05)
    # The window closed having covered jobs: the next job opens another one at once.
    clock.now = echo.started + 0.06
    assert run(t, clock)[0].wake is Wake.ECHO
    assert t.planned == {Wake.PLAIN: 1, Wake.ECHO: 2, Wake.QUIET: 5}


def test_a_quiet_job_that_returns_after_its_window_closed_is_repaired() -> None:
    t, clock = throttle(0.05)
    run(t, clock)
    clock.now += 0.001
    run(t, clock, took=0.001)
    clock.now += 0.001
    quiet, repair = run(t, clock, took=0.2)  # a slow commit: past the window's end
    assert quiet.wake is Wake.QUIET
    assert repair
    assert t.repairs == 1


def test_no_job_skips_while_the_echo_request_is_unconfirmed_or_after_it_failed() -> None:
    t, clock = throttle(0.05)
    run(t, clock)
    clock.now += 0.001
    echo = t.plan(DB, "q")
    assert echo.wake is Wake.ECHO
    # In flight: another thread's job notifies (never relies on an unconfirmed echo).
    clock.now += 0.001
    assert t.plan(DB, "q").wake is Wake.PLAIN
    assert not t.settle(echo, ok=False)  # rolled back: no window was opened
    clock.now += 0.001
    assert t.plan(DB, "q").wake is not Wake.QUIET


def test_queues_have_their_own_windows() -> None:
    t, clock = throttle(0.05)
    run(t, clock, "a")
    clock.now += 0.001
    run(t, clock, "a", took=0.001)
    assert t.plan(DB, "a").wake is Wake.QUIET
    assert t.plan(DB, "b").wake is Wake.PLAIN


def test_the_round_trip_margin_keeps_a_job_from_skipping_near_the_window_end() -> None:
    t, clock = throttle(0.05)
    run(t, clock, took=0.01)
    clock.now += 0.001
    echo, _ = run(t, clock, took=0.01)
    assert t.rtt == pytest.approx(0.01)
    clock.now = echo.started + 0.05 - 0.015  # less than two round trips left
    assert t.plan(DB, "q").wake is not Wake.QUIET


@pytest.mark.parametrize("bad", [-0.001, 0.0005, 1.5, math.nan, math.inf, "0.01", True, None])
def test_a_bad_window_is_refused_by_name(bad: object) -> None:
    with pytest.raises(ConfigError, match="notify_window"):
        check_window(bad)  # type: ignore[arg-type]


def test_window_bounds_are_accepted() -> None:
    assert check_window(0) == 0.0
    assert check_window(1) == 1.0
    assert check_window(0.005) == 0.005


@pytest.mark.parametrize(
    ("payload", "parsed"),
    [
        ("~50 default", ("default", 0.05)),
        ("~5 q.a:b-c", ("q.a:b-c", 0.005)),
        ("default", None),
        ("*flow", None),
        ("~", None),
        ("~50", None),
        ("~x default", None),
        ("~-5 default", None),
        ("~99999 default", None),
        ("~\u00b2 default", None),  # a digit to str.isdigit(), not to int()
        ("~" + "9" * 5000 + " default", None),
    ],
)
def test_echo_payloads(payload: str, parsed: tuple[str, float] | None) -> None:
    assert parse_echo(payload) == parsed


def test_a_quiet_job_whose_statement_failed_closes_the_window() -> None:
    t, clock = throttle(0.05)
    run(t, clock)
    clock.now += 0.001
    run(t, clock, took=0.001)
    quiet, repair = run(t, clock, ok=False)  # it may have committed: nothing follows it
    assert quiet.wake is Wake.QUIET
    assert not repair
    assert t.unsure == 1
    clock.now += 0.001
    assert t.plan(DB, "q").wake is Wake.PLAIN  # the next job wakes the workers plainly


def test_databases_have_their_own_windows() -> None:
    t, clock = throttle(0.05)
    run(t, clock)
    clock.now += 0.001
    run(t, clock, took=0.001)
    assert t.plan(DB, "q").wake is Wake.QUIET
    # The same queue in another database: its workers never heard this window's echo.
    assert t.plan(("127.0.0.1", "5432", "other"), "q").wake is Wake.PLAIN


def test_the_window_cannot_be_changed_past_its_check() -> None:
    t = WakeThrottle(0.01)
    with pytest.raises(AttributeError):
        t.window = 5  # type: ignore[misc]
