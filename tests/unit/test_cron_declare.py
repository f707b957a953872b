"""Declaring schedules: @app.periodic above or below @app.task, add_schedule, and errors at
declaration time (not at 3 a.m.)."""

from __future__ import annotations

from typing import Any

import pytest

import pgqueue
from pgqueue.errors import ConfigError, InvalidArgumentsError, InvalidQueueError, PgQueueError


def test_periodic_above_task() -> None:
    app = pgqueue.App(dsn="postgresql://unused")

    @app.periodic(cron="*/5 * * * *", timezone="Europe/Paris", args={"n": 1}, missed="all", max_catchup=7)
    @app.task(name="report", queue="reports", priority=3)
    def report(n: int) -> int:
        return n

    assert isinstance(report, pgqueue.Task)
    assert report(n=2) == 2
    schedule = app.schedules["report"]
    assert (schedule.task, schedule.cron, schedule.timezone) == ("report", "*/5 * * * *", "Europe/Paris")
    assert (schedule.queue, schedule.priority, schedule.args) == ("reports", 3, {"n": 1})
    assert (schedule.missed, schedule.max_catchup, schedule.grace) == ("all", 7, 60.0)
    assert schedule.args_json == '{"n":1}'


def test_periodic_below_task_and_several_schedules_per_task() -> None:
    app = pgqueue.App(dsn="postgresql://unused")

    @app.task(name="cleanup")
    @app.periodic(cron="0 3 * * *", name="cleanup-nightly", args={"deep": True})
    @app.periodic(cron="@hourly", name="cleanup-hourly", queue="maintenance", missed="skip")
    def cleanup(deep: bool = False) -> None: ...

    assert isinstance(cleanup, pgqueue.Task)
    assert sorted(app.schedules) == ["cleanup-hourly", "cleanup-nightly"]
    assert app.schedules["cleanup-nightly"].task == "cleanup"
    assert app.schedules["cleanup-hourly"].queue == "maintenance"
    assert app.schedules["cleanup-hourly"].cron == "@hourly"
    assert app.schedules["cleanup-hourly"].expr.expression == "0 * * * *"
    assert [s.name for s in app.declared_schedules()] == ["cleanup-hourly", "cleanup-nightly"]


def test_add_schedule_by_task_name() -> None:
    app = pgqueue.App(dsn="postgresql://unused")

    @app.task(name="known", queue="q1", priority=-2)
    def known() -> None: ...

    elsewhere = app.add_schedule("remote-sync", task="other_service.sync", cron="* * * * * */10")
    mine = app.add_schedule("known-daily", task="known", cron="@daily", timezone="America/New_York")
    assert (elsewhere.queue, elsewhere.priority) == ("default", 0)
    assert (mine.queue, mine.priority) == ("q1", -2)
    assert app.schedules == {"remote-sync": elsewhere, "known-daily": mine}


def test_periodic_on_a_function_that_never_becomes_a_task() -> None:
    app = pgqueue.App(dsn="postgresql://unused")

    @app.periodic(cron="* * * * *")
    def orphan() -> None: ...

    with pytest.raises(ConfigError, match=r"not a task: stack it directly above or below @app\.task"):
        app.declared_schedules()


def test_schedule_names_are_unique_per_app() -> None:
    app = pgqueue.App(dsn="postgresql://unused")

    @app.periodic(cron="* * * * *")
    @app.task(name="job")
    def job() -> None: ...

    with pytest.raises(ConfigError, match="already declared"):
        app.periodic(cron="0 * * * *")(job)
    app.periodic(cron="0 * * * *", name="job-hourly")(job)
    assert sorted(app.schedules) == ["job", "job-hourly"]


@pytest.mark.parametrize(
    ("options", "error", "message"),
    [
        ({"cron": "not cron"}, ConfigError, "invalid cron expression"),
        ({"cron": "* * * * *", "timezone": "Europe/Pariss"}, ConfigError, "unknown time zone"),
        ({"cron": "* * * * *", "missed": "sometimes"}, ConfigError, "missed must be"),
        ({"cron": "* * * * *", "max_catchup": 0}, ConfigError, "max_catchup"),
        ({"cron": "* * * * *", "max_catchup": 10_001}, ConfigError, "max_catchup"),
        ({"cron": "* * * * *", "grace": 0}, ConfigError, "grace"),
        ({"cron": "* * * * *", "name": "x" * 151}, ConfigError, "invalid schedule name"),
        ({"cron": "* * * * *", "name": "bad name; DROP TABLE"}, ConfigError, "invalid schedule name"),
        ({"cron": "* * * * *", "name": "ok\n"}, ConfigError, "invalid schedule name"),
        ({"cron": "* * * * *", "queue": "no spaces"}, InvalidQueueError, "invalid queue name"),
        ({"cron": "* * * * *", "priority": 40_000}, ConfigError, "priority"),
        ({"cron": "* * * * *", "args": {"when": object()}}, InvalidArgumentsError, "argument 'when'"),
        ({"cron": "* * * * *", "args": [1, 2]}, ConfigError, "args must be a mapping"),
    ],
)
def test_bad_declarations_fail_at_declaration(options: dict[str, Any], error: type[PgQueueError], message: str) -> None:
    app = pgqueue.App(dsn="postgresql://unused")
    with pytest.raises(error, match=message):
        app.periodic(**options)
    with pytest.raises(error, match=message):
        app.add_schedule(options.pop("name", "n"), task="t", **options)
    assert app.schedules == {}


def test_default_name_too_long_for_a_schedule_asks_for_name() -> None:
    app = pgqueue.App(dsn="postgresql://unused")
    with pytest.raises(ConfigError, match="invalid schedule name"):

        @app.periodic(cron="* * * * *")
        @app.task(name="t" * 160)
        def long_named() -> None: ...


def test_unique_key_names_schedule_and_tick_in_utc() -> None:
    from datetime import datetime
    from zoneinfo import ZoneInfo

    app = pgqueue.App(dsn="postgresql://unused")
    schedule = app.add_schedule("s", task="t", cron="30 2 * * *", timezone="Europe/Paris")
    tick = datetime(2026, 3, 30, 2, 30, tzinfo=ZoneInfo("Europe/Paris"))
    assert schedule.unique_key(tick) == "cron:s:2026-03-30T00:30:00Z"
    assert len(schedule.unique_key(tick).replace("s", "x" * 150, 1)) <= 200
