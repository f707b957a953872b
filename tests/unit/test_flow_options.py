"""Enqueue-side checks of concurrency keys and deadlines, and the Snooze outcome rules:
pure validation, no database."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

import pgqueue
from pgqueue import ConfigError, InvalidArgumentsError, JobState, Snooze
from pgqueue.models import Job, Outcome
from pgqueue.worker.cancels import CancelFlags
from pgqueue.worker.handler import failure_outcome

NOW = datetime(2026, 1, 1, tzinfo=UTC)


@pytest.fixture
def app() -> pgqueue.App:
    return pgqueue.App()


# -- concurrency_key ----------------------------------------------------------------------


def test_derived_concurrency_key_is_the_argument_as_text(app: pgqueue.App) -> None:
    @app.task(name="t.by_customer", concurrency_key="customer_id")
    def by_customer(customer_id: int | str, region: str = "eu") -> None: ...

    @app.task(name="t.by_region", concurrency_key="region")
    def by_region(customer_id: int, region: str = "eu") -> None: ...

    assert by_customer.job(customer_id=42).concurrency_key == "42"
    assert by_customer.job(customer_id="c-9").concurrency_key == "c-9"
    assert by_region.job(customer_id=1).concurrency_key == "eu"  # the handler's default
    # Given per enqueue, it wins over the declaration.
    assert by_customer.options(concurrency_key="vip").job(customer_id=42).concurrency_key == "vip"


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        (None, "must be a str or an int, got NoneType"),
        (True, "must be a str or an int, got bool"),
        (1.5, "must be a str or an int, got float"),
        ([1], "must be a str or an int, got list"),
        ("", "must be a string of 1-200 characters"),
        ("x" * 201, "must be a string of 1-200 characters, got 201 characters"),
        ("a\x00b", "NUL character"),
    ],
)
def test_bad_derived_concurrency_key_is_one_clear_error(app: pgqueue.App, value: Any, problem: str) -> None:
    @app.task(name="t.keyed", concurrency_key="customer_id")
    def keyed(customer_id: Any) -> None: ...

    with pytest.raises(InvalidArgumentsError) as info:
        keyed.job(customer_id=value)
    message = str(info.value)
    assert "concurrency_key comes from argument 'customer_id'" in message
    assert problem in message


def test_missing_concurrency_key_argument(app: pgqueue.App) -> None:
    @app.task(name="t.kw", concurrency_key="tenant")
    def kw(**kwargs: Any) -> None: ...

    with pytest.raises(InvalidArgumentsError, match="argument 'tenant', which was not given"):
        kw.job(other=1)
    assert kw.job(tenant="t1").concurrency_key == "t1"


def test_concurrency_key_must_name_a_parameter_at_declaration(app: pgqueue.App) -> None:
    with pytest.raises(ConfigError, match=r"concurrency_key names 'customer'.*the handler takes customer_id"):

        @app.task(name="t.typo", concurrency_key="customer")
        def typo(customer_id: int) -> None: ...

    assert "t.typo" not in app.tasks


@pytest.mark.parametrize("key", ["", "x" * 201, "a\x00"])
def test_explicit_concurrency_key_is_checked(app: pgqueue.App, key: str) -> None:
    @app.task(name="t.plain")
    def plain() -> None: ...

    with pytest.raises(ConfigError, match="concurrency_key"):
        plain.options(concurrency_key=key).job()


# -- deadlines ----------------------------------------------------------------------------


def test_deadlines_per_enqueue_and_per_task(app: pgqueue.App) -> None:
    @app.task(name="t.fresh", expires_in=timedelta(minutes=5))
    def fresh() -> None: ...

    assert (fresh.job().expires_at, fresh.job().expires_in) == (None, 300.0)
    assert fresh.options(expires_in=10).job().expires_in == 10.0
    at = NOW + timedelta(hours=1)
    assert (fresh.options(expires_at=at).job().expires_at, fresh.options(expires_at=at).job().expires_in) == (at, None)


@pytest.mark.parametrize(
    ("options", "problem"),
    [
        ({"expires_in": 0}, "expires_in must be positive"),
        ({"expires_in": -1}, "expires_in must be positive"),
        ({"expires_in": float("nan")}, "expires_in must be positive"),
        ({"expires_in": 11 * 365 * 86400}, "up to ten years"),
        ({"expires_in": 5, "expires_at": NOW}, "give expires_at or expires_in, not both"),
        ({"expires_at": datetime(2026, 1, 1)}, "expires_at must be a timezone-aware datetime"),
        ({"expires_at": datetime(1800, 1, 1, tzinfo=UTC)}, "expires_at must be between 1900-01-01"),
        ({"expires_at": NOW, "run_at": NOW}, "is not after run_at"),
        ({"expires_at": NOW, "run_at": NOW + timedelta(seconds=1)}, "could never start"),
    ],
)
def test_bad_deadlines_are_one_clear_error(app: pgqueue.App, options: dict[str, Any], problem: str) -> None:
    @app.task(name="t.deadline")
    def deadline() -> None: ...

    with pytest.raises(ConfigError) as info:
        deadline.options(**options).job()
    assert problem in str(info.value)


def test_task_default_deadline_is_checked_at_declaration(app: pgqueue.App) -> None:
    with pytest.raises(ConfigError, match="expires_in must be positive"):

        @app.task(name="t.never", expires_in=0)
        def never() -> None: ...


# -- Snooze -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "after", [-1, -0.001, float("nan"), float("inf"), 11 * 365 * 86400, timedelta(seconds=-1), "soon", True]
)
def test_bad_snooze_is_a_config_error_where_it_is_made(after: Any) -> None:
    with pytest.raises(ConfigError, match=r"Snooze\(after=...\) must be seconds"):
        Snooze(after=after)


def job(attempt: int, max_attempts: int) -> Job:
    return Job(
        id=1,
        queue="q",
        task="t",
        args={},
        priority=0,
        attempt=attempt,
        max_attempts=max_attempts,
        lease_token=uuid.uuid4(),
        run_at=NOW,
        created_at=NOW,
        pickup_delay=timedelta(0),
    )


def test_snooze_outcome_gives_the_attempt_back_even_on_the_last_one() -> None:
    later = failure_outcome(None, job(3, 3), Snooze(after=timedelta(seconds=30)), "w")
    assert later == Outcome(JobState.SCHEDULED, delay=30.0)
    assert later.snoozed
    assert later.error is None
    now = failure_outcome(None, job(1, 3), Snooze(), "w")
    assert now == Outcome(JobState.AVAILABLE, delay=0.0)
    assert now.snoozed
    # A Retry on the last attempt still discards: only Snooze gives attempts back.
    assert failure_outcome(None, job(3, 3), pgqueue.Retry(after=30), "w").state is JobState.DISCARDED
    assert not Outcome(JobState.RETRYABLE).snoozed


def test_a_snooze_after_an_operator_cancel_ends_cancelled() -> None:
    flags = CancelFlags()
    flags.open(1, interruptible=False)
    flags.request({1: True})
    assert flags.adjust(1, Outcome(JobState.SCHEDULED, delay=5)) == Outcome(JobState.CANCELLED)
    assert flags.adjust(2, Outcome(JobState.SCHEDULED, delay=5)) == Outcome(JobState.SCHEDULED, delay=5)
