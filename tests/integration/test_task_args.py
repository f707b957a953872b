"""Job arguments are bound to the handler's signature: at enqueue (a typo is refused with a
suggestion), at cron declaration, and in the worker, where arguments that do not fit send
the job to the dead letter at once instead of burning its retries."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

import pgqueue
from pgqueue._task_args import ArgsChecker
from tests.apps.support import is_final, job_row
from tests.cli_support import invoke
from tests.conftest import async_wait_until, running_worker
from tests.enqueue_support import count_jobs, count_uploads

Conn = psycopg.Connection[Any]


def resize_task(app: pgqueue.App) -> pgqueue.Task[..., None]:
    @app.task(name="images.resize")
    def resize(image_id: int, width: int, height: int, *, quality: int = 90) -> None:
        return None

    return resize


# -- at enqueue ---------------------------------------------------------------------------


def test_typo_is_refused_with_a_suggestion_and_nothing_is_written(app: pgqueue.App, uploads: Conn) -> None:
    conn = uploads
    resize = resize_task(app)
    with conn.transaction():
        conn.execute("INSERT INTO uploads (name) VALUES ('cat.png')")
        with pytest.raises(pgqueue.InvalidArgumentsError) as info:
            resize.enqueue(conn, image_id=42, width=800, hieght=600)
        # The caller's transaction is still usable: nothing was sent to the database.
        job_id = resize.enqueue(conn, image_id=42, width=800, height=600)
    message = str(info.value)
    assert message.startswith("task 'images.resize': unexpected argument 'hieght' (did you mean 'height'?)"), message
    assert "the handler takes image_id, width, height, quality=..." in message
    assert isinstance(info.value, pgqueue.EnqueueError)
    assert isinstance(info.value, TypeError)
    assert count_uploads(conn) == 1
    assert count_jobs(conn) == 1
    row = conn.execute("SELECT args FROM pgqueue.jobs WHERE id = %s", [job_id]).fetchone()
    assert row == ({"image_id": 42, "width": 800, "height": 600},)


def test_missing_required_argument(app: pgqueue.App, conn: Conn) -> None:
    resize = resize_task(app)
    with pytest.raises(pgqueue.InvalidArgumentsError, match=r"missing required argument 'height' \("):
        resize.enqueue(conn, image_id=1, width=2)
    with pytest.raises(pgqueue.InvalidArgumentsError, match="missing required arguments 'width', 'height'"):
        app.enqueue(conn, "images.resize", image_id=1)  # by name, for a task this app knows
    assert count_jobs(conn) == 0


def test_unknown_argument_without_a_close_name(app: pgqueue.App, conn: Conn) -> None:
    resize = resize_task(app)
    with pytest.raises(pgqueue.InvalidArgumentsError) as info:
        resize.options(priority=3).enqueue(conn, image_id=1, width=2, height=3, colour="red")
    assert str(info.value).startswith("task 'images.resize': unexpected argument 'colour' (the handler takes")
    assert count_jobs(conn) == 0


async def test_async_enqueue_checks_too(dsn: str, app: pgqueue.App, conn: Conn) -> None:
    resize = resize_task(app)
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as aconn:
        with pytest.raises(pgqueue.InvalidArgumentsError, match="did you mean 'width'"):
            await resize.enqueue_async(aconn, image_id=1, widht=2, height=3)
        with pytest.raises(pgqueue.InvalidArgumentsError, match="missing required argument 'image_id'"):
            await app.enqueue_async(aconn, "images.resize", width=2, height=3)
    assert count_jobs(conn) == 0


def test_enqueue_many_checks_each_job(app: pgqueue.App, conn: Conn) -> None:
    resize = resize_task(app)

    def jobs() -> Iterator[pgqueue.JobSpec]:
        for i in range(5):
            if i == 3:
                yield resize.job(image_id=i, width=1, heigth=1)
            yield resize.job(image_id=i, width=1, height=1)

    with pytest.raises(pgqueue.InvalidArgumentsError) as info, conn.transaction():
        app.enqueue_many(conn, jobs())
    assert str(info.value).startswith(
        "enqueue_many row 4: task 'images.resize': unexpected argument 'heigth' (did you mean 'height'?)"
    )
    with pytest.raises(pgqueue.InvalidArgumentsError, match="missing required argument 'width'"):
        app.enqueue_many(conn, [resize.job(image_id=1, width=1, height=1), resize.job(image_id=2, height=1)])
    assert count_jobs(conn) == 0


def test_handlers_taking_kwargs_or_a_context(app: pgqueue.App, conn: Conn) -> None:
    @app.task(name="anything")
    def anything(first: int, **rest: Any) -> None:
        return None

    @app.task(name="with_ctx", pass_context=True)
    def with_ctx(ctx: pgqueue.JobContext, user_id: int) -> None:
        return None

    @app.task(name="with_ctx_and_kwargs", pass_context=True)
    def with_ctx_and_kwargs(ctx: pgqueue.JobContext, **rest: Any) -> None:
        return None

    anything.enqueue(conn, first=1, whatever="x", more=[1])
    with_ctx.enqueue(conn, user_id=7)  # the context is not a job argument
    with_ctx_and_kwargs.enqueue(conn, a=1)
    assert count_jobs(conn) == 3
    with pytest.raises(pgqueue.InvalidArgumentsError, match="missing required argument 'first'"):
        anything.enqueue(conn, whatever="x")
    with pytest.raises(pgqueue.InvalidArgumentsError, match="missing required argument 'user_id'"):
        with_ctx.enqueue(conn)
    for task in (with_ctx, with_ctx_and_kwargs):  # the call would pass ctx twice
        with pytest.raises(pgqueue.InvalidArgumentsError, match="'ctx' names the parameter that receives the job's"):
            task.enqueue(conn, ctx=1, user_id=7)
    assert count_jobs(conn) == 3


def test_handlers_that_cannot_take_job_arguments_are_refused_at_declaration(app: pgqueue.App) -> None:
    # The worker calls fn(ctx, **args): without a positional parameter for ctx every run
    # would fail with "too many positional arguments".
    with pytest.raises(pgqueue.ConfigError, match=r"'no_room' takes a context .* needs a first positional parameter"):

        @app.task(name="no_room", pass_context=True)
        def no_room(*, user_id: int) -> None:
            return None

    with pytest.raises(pgqueue.ConfigError, match="'tx_no_room' takes a context"):

        @app.task(name="tx_no_room", transactional=True)
        def tx_no_room() -> None:
            return None

    # Job arguments are passed by name: a required positional-only parameter never gets one.
    with pytest.raises(pgqueue.ConfigError, match="parameter 'x' is positional-only"):

        @app.task(name="positional")
        def positional(x: int, /) -> None:
            return None

    assert app.tasks == {}


def test_a_handler_without_a_signature_is_not_checked() -> None:
    checker = ArgsChecker("t", max, pass_context=False)  # a builtin with no signature to read
    assert not checker.checked
    assert checker.problem({"anything": 1}) is None


def test_by_name_for_a_task_this_process_does_not_know_is_accepted(dsn: str, conn: Conn) -> None:
    # The CLI (and SQL) enqueue by name for tasks that may live in another service.
    result = invoke("enqueue", "billing.charge", "--args", json.dumps({"anything": 1}), "--dsn", dsn)
    assert result.exit_code == 0, result.output
    assert job_row(conn, int(result.stdout))["state"] == "available"


# -- cron declarations --------------------------------------------------------------------


def test_cron_args_are_checked_at_declaration(app: pgqueue.App) -> None:
    resize = resize_task(app)
    with pytest.raises(pgqueue.ConfigError) as info:
        app.periodic(cron="0 3 * * *", name="nightly-thumbs", args={"image_id": 1, "width": 1, "hieght": 1})(resize)
    assert str(info.value).startswith(
        "schedule 'nightly-thumbs': args do not fit task 'images.resize': unexpected argument 'hieght' "
        "(did you mean 'height'?)"
    )
    with pytest.raises(pgqueue.ConfigError, match=r"schedule 'by-name': args do not fit .* missing required argument"):
        app.add_schedule("by-name", task="images.resize", cron="* * * * *", args={"image_id": 1})
    with pytest.raises(pgqueue.ConfigError, match="schedule 'below': args do not fit task 'report'"):

        @app.task(name="report")
        @app.periodic(cron="* * * * *", name="below", args={"day": "monday"})
        def report(date: str) -> None:
            return None

    assert "nightly-thumbs" not in app.schedules
    assert "by-name" not in app.schedules
    args = {"image_id": 1, "width": 1, "height": 1}
    good = app.add_schedule("good", task="images.resize", cron="* * * * *", args=args)
    assert app.schedules["good"] is good


def test_cron_for_a_task_declared_later_is_checked_when_it_is(app: pgqueue.App) -> None:
    # A task of another service cannot be checked; one registered later in this app is.
    app.add_schedule("elsewhere", task="billing.invoice", cron="0 * * * *", args={"anything": True})
    app.add_schedule("early", task="later", cron="0 * * * *", args={"n": 1})
    with pytest.raises(pgqueue.ConfigError, match=r"schedule 'early': args do not fit task 'later': unexpected .*'n'"):

        @app.task(name="later")
        def later(count: int) -> None:
            return None


# -- in the worker ------------------------------------------------------------------------


async def test_arguments_that_do_not_fit_go_to_the_dead_letter_at_once(app: pgqueue.App, conn: Conn) -> None:
    calls: list[Any] = []

    @app.task(name="images.resize", max_attempts=5)
    def resize(image_id: int, width: int, height: int) -> None:
        calls.append(image_id)

    # Enqueued by name from SQL (or another service): nothing could check it.
    row = conn.execute(
        "SELECT pgqueue.enqueue('images.resize', %s)", [json.dumps({"image_id": 1, "width": 2, "hieght": 3})]
    ).fetchone()
    assert row is not None
    job_id = int(row[0])
    async with running_worker(app) as worker:
        await async_wait_until(lambda: is_final(conn, job_id))
    job = job_row(conn, job_id)
    assert (job["state"], job["attempt"], job["max_attempts"]) == ("discarded", 1, 5)
    assert calls == []
    [error] = job["errors"]
    assert error["type"] == "pgqueue.errors.InvalidArgumentsError"
    assert error["message"].startswith(
        "task 'images.resize': the job's arguments do not fit the handler: unexpected argument 'hieght' "
        "(did you mean 'height'?)"
    )
    assert "TypeError" in error["traceback"]  # the call's own error is kept as the cause
    assert worker.stats.discarded == 1
    assert worker.stats.retried == 0


async def test_handler_changed_since_enqueue(dsn: str, conn: Conn) -> None:
    old = pgqueue.App(dsn=dsn)

    @old.task(name="mail.send")
    def send_v1(to: str) -> None:
        return None

    job_id = send_v1.enqueue(conn, to="a@example.com")
    new = pgqueue.App(dsn=dsn)

    @new.task(name="mail.send", max_attempts=3, pass_context=True)
    async def send_v2(ctx: pgqueue.JobContext, to: str, subject: str) -> None:
        return None

    async with running_worker(new):
        await async_wait_until(lambda: is_final(conn, job_id))
    job = job_row(conn, job_id)
    assert (job["state"], job["attempt"]) == ("discarded", 1)
    assert "missing required argument 'subject'" in job["errors"][0]["message"]


async def test_a_type_error_inside_the_handler_is_still_retried(app: pgqueue.App, conn: Conn) -> None:
    @app.task(name="buggy", max_attempts=2, retry=pgqueue.Backoff(base=0.01, jitter=False))
    def buggy(n: int) -> None:
        len(n)  # type: ignore[arg-type]

    job_id = buggy.enqueue(conn, n=1)
    async with running_worker(app):
        await async_wait_until(lambda: is_final(conn, job_id), timeout=10)
    job = job_row(conn, job_id)
    assert (job["state"], job["attempt"]) == ("discarded", 2)
    assert [e["type"] for e in job["errors"]] == ["builtins.TypeError", "builtins.TypeError"]
