"""Cron arithmetic without a database: expressions, time zones, DST, missed-tick policies."""

from __future__ import annotations

import itertools
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest

from pgqueue.cron import Schedule, due_ticks
from pgqueue.cron.ticks import CronExpr
from pgqueue.errors import ConfigError

PARIS = ZoneInfo("Europe/Paris")
NEW_YORK = ZoneInfo("America/New_York")


def utc(year: int, month: int, day: int, hour: int = 0, minute: int = 0, second: int = 0, micro: int = 0) -> datetime:
    return datetime(year, month, day, hour, minute, second, micro, tzinfo=UTC)


def local(ticks: list[datetime], zone: ZoneInfo) -> list[str]:
    return [t.astimezone(zone).isoformat() for t in ticks]


def gaps(ticks: list[datetime]) -> set[timedelta]:
    return {b - a for a, b in itertools.pairwise(ticks)}


# -- DST: Europe/Paris 2026 springs forward on 29 March at 01:00 UTC (02:00 -> 03:00) and
# falls back on 25 October at 01:00 UTC (03:00 -> 02:00). New York: 8 March 07:00 UTC
# (02:00 -> 03:00) and 1 November 06:00 UTC (02:00 -> 01:00).


def test_daily_0230_paris_spring_forward_fires_once_at_first_valid_instant() -> None:
    expr = CronExpr("30 2 * * *", "Europe/Paris")
    assert expr.fixed_time
    ticks = expr.ticks(utc(2026, 3, 27), utc(2026, 3, 31))
    assert local(ticks, PARIS) == [
        "2026-03-27T02:30:00+01:00",
        "2026-03-28T02:30:00+01:00",
        "2026-03-29T03:00:00+02:00",  # 02:30 does not exist that day: fired when the gap ends
        "2026-03-30T02:30:00+02:00",
    ]


def test_daily_0230_paris_fall_back_fires_once_at_first_occurrence() -> None:
    expr = CronExpr("30 2 * * *", "Europe/Paris")
    ticks = expr.ticks(utc(2026, 10, 23), utc(2026, 10, 27))
    assert local(ticks, PARIS) == [
        "2026-10-23T02:30:00+02:00",
        "2026-10-24T02:30:00+02:00",
        "2026-10-25T02:30:00+02:00",  # 02:30 happens twice; the second (+01:00) does not fire
        "2026-10-26T02:30:00+01:00",
    ]
    # Also when a window starts inside the repeated hour, after the first 02:30.
    assert expr.ticks(utc(2026, 10, 25, 0, 45), utc(2026, 10, 25, 3)) == []
    assert expr.next_after(utc(2026, 10, 25, 0, 30)) == utc(2026, 10, 26, 1, 30)


def test_new_york_both_transitions() -> None:
    spring = CronExpr("30 2 * * *", "America/New_York")
    assert local(spring.ticks(utc(2026, 3, 7, 12), utc(2026, 3, 9, 12)), NEW_YORK) == [
        "2026-03-08T03:00:00-04:00",
        "2026-03-09T02:30:00-04:00",
    ]
    fall = CronExpr("30 1 * * *", "America/New_York")
    assert local(fall.ticks(utc(2026, 10, 31, 12), utc(2026, 11, 2, 12)), NEW_YORK) == [
        "2026-11-01T01:30:00-04:00",
        "2026-11-02T01:30:00-05:00",
    ]


def test_interval_like_schedules_keep_real_time_rhythm_through_both_transitions() -> None:
    half_hourly = CronExpr("*/30 * * * *", "Europe/Paris")
    assert not half_hourly.fixed_time
    fall = half_hourly.ticks(utc(2026, 10, 24, 22), utc(2026, 10, 25, 4))
    assert gaps(fall) == {timedelta(minutes=30)}
    assert len(fall) == 12  # 6 real hours, the repeated hour included
    spring = half_hourly.ticks(utc(2026, 3, 28, 22), utc(2026, 3, 29, 4))
    assert gaps(spring) == {timedelta(minutes=30)}
    assert "2026-03-29T02:00:00+01:00" not in local(spring, PARIS)
    hourly = CronExpr("@hourly", "America/New_York")
    assert gaps(hourly.ticks(utc(2026, 10, 31, 20), utc(2026, 11, 1, 12))) == {timedelta(hours=1)}
    assert gaps(hourly.ticks(utc(2026, 3, 7, 20), utc(2026, 3, 8, 12))) == {timedelta(hours=1)}


def test_several_gap_matches_fire_once() -> None:
    expr = CronExpr("0,30 2,3 * * *", "Europe/Paris")
    ticks = expr.ticks(utc(2026, 3, 28, 23), utc(2026, 3, 29, 3))
    assert local(ticks, PARIS) == ["2026-03-29T03:00:00+02:00", "2026-03-29T03:30:00+02:00"]


# -- expressions ---------------------------------------------------------------------------


def test_seconds_field_is_the_sixth() -> None:
    expr = CronExpr("* * * * * */15", "UTC")
    assert expr.ticks(utc(2026, 1, 1), utc(2026, 1, 1, 0, 1)) == [
        utc(2026, 1, 1, 0, 0, 15),
        utc(2026, 1, 1, 0, 0, 30),
        utc(2026, 1, 1, 0, 0, 45),
        utc(2026, 1, 1, 0, 1, 0),
    ]


def test_window_is_open_below_and_closed_above_and_ignores_microseconds() -> None:
    expr = CronExpr("* * * * * *", "UTC")
    lo = utc(2026, 1, 1, 0, 0, 1) + timedelta(microseconds=500_000)
    assert expr.ticks(lo, utc(2026, 1, 1, 0, 0, 3)) == [utc(2026, 1, 1, 0, 0, 2), utc(2026, 1, 1, 0, 0, 3)]
    assert expr.ticks(utc(2026, 1, 1, 0, 0, 2), utc(2026, 1, 1, 0, 0, 2)) == []
    assert expr.ticks(utc(2026, 1, 1), utc(2026, 1, 1, 0, 0, 10), limit=3)[-1] == utc(2026, 1, 1, 0, 0, 3)


def test_aliases_next_after_and_latest() -> None:
    assert CronExpr("@daily", "UTC").expression == "0 0 * * *"
    yearly = CronExpr("@yearly", "Europe/Paris")
    assert yearly.next_after(utc(2026, 1, 2)) == utc(2026, 12, 31, 23)
    minutely = CronExpr("* * * * *", "UTC")
    assert minutely.latest(utc(2026, 1, 1), utc(2026, 1, 1, 5, 0, 30), 3) == [
        utc(2026, 1, 1, 4, 58),
        utc(2026, 1, 1, 4, 59),
        utc(2026, 1, 1, 5, 0),
    ]
    assert minutely.latest(utc(2026, 1, 1, 4, 59), utc(2026, 1, 1, 5, 0, 30), 10) == [utc(2026, 1, 1, 5, 0)]


def test_hashed_fields_depend_only_on_the_schedule_name() -> None:
    a1 = CronExpr("H H * * *", "UTC", hash_key="report")
    a2 = CronExpr("H H * * *", "UTC", hash_key="report")
    start = utc(2026, 1, 1)
    assert a1.next_after(start) == a2.next_after(start)


@pytest.mark.parametrize(
    ("expression", "timezone", "message"),
    [
        ("61 * * * *", "UTC", "invalid cron expression"),
        ("* * * *", "UTC", "give 5 fields"),
        ("0 0 * * * 0 2030", "UTC", "give 5 fields"),
        ("@reboot", "UTC", "give 5 fields"),
        ("R * * * *", "UTC", "random"),
        ("0 0 30 2 *", "UTC", "never fires"),
        ("", "UTC", "non-empty"),
        ("* * * * *", "Mars/Olympus", "unknown time zone"),
        ("* * * * *", "../../etc/passwd", "unknown time zone"),
        ("* * * * *", "", "IANA"),
    ],
)
def test_bad_expressions_and_zones_are_clear_errors(expression: str, timezone: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        CronExpr(expression, timezone)


# -- missed-tick policies (the database clock is injected as `now`) -------------------------


def hourly(missed: str, max_catchup: int = 100) -> Schedule:
    return Schedule(name="s", task="t", cron="0 * * * *", missed=missed, max_catchup=max_catchup)  # type: ignore[arg-type]


CURSOR = utc(2026, 5, 1, 10)


@pytest.mark.parametrize(
    ("missed", "max_catchup", "hours"),
    [
        ("skip", 100, [15]),
        ("latest", 100, [14, 15]),
        ("all", 2, [13, 14, 15]),
        ("all", 100, [11, 12, 13, 14, 15]),
    ],
)
def test_policies_after_downtime(missed: str, max_catchup: int, hours: list[int]) -> None:
    # Ticks 11:00-14:00 are more than a minute overdue (missed); 15:00 is on time.
    due = due_ticks(hourly(missed, max_catchup), CURSOR, utc(2026, 5, 1, 15, 0, 30))
    assert due.fire == [utc(2026, 5, 1, h) for h in hours]
    assert due.cursor == utc(2026, 5, 1, 15)
    assert due.dropped == (hours[0] != 11)


def test_policies_when_every_due_tick_was_missed() -> None:
    now = utc(2026, 5, 1, 15, 5)
    assert due_ticks(hourly("skip"), CURSOR, now).fire == []
    assert due_ticks(hourly("skip"), CURSOR, now).cursor == utc(2026, 5, 1, 15)
    assert due_ticks(hourly("latest"), CURSOR, now).fire == [utc(2026, 5, 1, 15)]


def test_on_time_ticks_always_fire_and_nothing_is_due_twice() -> None:
    schedule = Schedule(name="s", task="t", cron="* * * * * *", missed="skip")
    due = due_ticks(schedule, utc(2026, 5, 1, 10), utc(2026, 5, 1, 10, 0, 3, 500))
    assert due.fire == [utc(2026, 5, 1, 10, 0, s) for s in (1, 2, 3)]
    assert not due.dropped
    again = due_ticks(schedule, due.cursor or CURSOR, utc(2026, 5, 1, 10, 0, 3, 900))
    assert again.fire == []
    assert again.cursor is None
    assert due_ticks(schedule, CURSOR, CURSOR).fire == []
