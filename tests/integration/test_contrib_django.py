"""pgqueue.contrib.django with a real Django project (Django 5.2 + django-tasks in CI, or
Django 6) on a real database: transaction.atomic() decides whether the job exists, the
worker runs committed ones, results come back through the django.tasks API, the schema
comes with manage.py migrate, manage.py pgqueue runs pgqueue's commands."""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import django
import psycopg
import pytest
from django.conf import settings
from django.core.management import call_command
from django.db import connections, transaction
from psycopg.conninfo import conninfo_to_dict

import pgqueue
from pgqueue import testing
from pgqueue.contrib.django import _tasks_api, conf, enqueue, runtime
from tests.conftest import job_states, running_worker

if not settings.configured:
    settings.configure(
        DATABASES={"default": {"ENGINE": "django.db.backends.postgresql", "NAME": "postgres"}},
        INSTALLED_APPS=["pgqueue.contrib.django", *(["django_tasks"] if _tasks_api.PACKAGE == "django_tasks" else [])],
        TASKS={
            "default": {"BACKEND": "pgqueue.contrib.django.backend.PgQueueBackend", "QUEUES": ["default", "emails"]}
        },
        USE_TZ=True,
    )
    django.setup()

from tests.django_project import tasks  # after django.setup()


def point_django_at(dsn: str) -> None:
    """Make Django's default database the test's own."""
    info = conninfo_to_dict(dsn)
    db = connections["default"]
    db.close()
    db.settings_dict.update(
        NAME=info["dbname"], USER=info.get("user", ""), HOST=info.get("host", ""), PORT=str(info.get("port", ""))
    )
    settings.DATABASES["default"].update(db.settings_dict)
    runtime.get_app.cache_clear()


@pytest.fixture
def django_db(dsn: str, conn: psycopg.Connection[Any]) -> Iterator[pgqueue.App]:
    conn.execute("CREATE TABLE sent (user_id int, email text)")
    point_django_at(dsn)
    app = runtime.get_app()
    yield app
    connections["default"].close()
    if app._waiter is not None:
        app._waiter.close()


def test_atomic_rollback_drops_the_job_and_commit_keeps_it(
    django_db: pgqueue.App, conn: psycopg.Connection[Any]
) -> None:
    with transaction.atomic():
        tasks.send_welcome.enqueue(1, "ann@example.com")
        transaction.set_rollback(True)  # as when the view fails
    assert job_states(conn) == {}
    with transaction.atomic():
        result = tasks.send_welcome.enqueue(2, "bob@example.com")
        assert job_states(conn) == {}  # not committed yet
    row = conn.execute("SELECT id, queue, priority, task FROM pgqueue.jobs").fetchone()
    assert row == (int(result.id), "emails", 10, "django.tasks.run")
    assert result.status == _tasks_api.TaskResultStatus.READY


async def test_a_committed_task_runs_in_the_worker_and_its_result_comes_back(
    django_db: pgqueue.App, conn: psycopg.Connection[Any]
) -> None:
    from asgiref.sync import sync_to_async

    result = await sync_to_async(tasks.send_welcome.enqueue)(3, "cat@example.com")  # autocommit: at once
    async with running_worker(django_db):
        await sync_to_async(lambda: wait_finished(result))()
    assert conn.execute("SELECT user_id, email FROM sent").fetchall() == [(3, "cat@example.com")]


def wait_finished(result: Any) -> None:
    from tests.conftest import wait_until

    def finished() -> bool:
        result.refresh()
        return bool(result.is_finished)

    wait_until(finished)
    assert result.status == _tasks_api.TaskResultStatus.SUCCESSFUL
    assert result.return_value == {"sent_to": "cat@example.com"}
    assert result.worker_ids
    assert result.finished_at is not None


def test_results_failures_context_and_async_tasks(django_db: pgqueue.App) -> None:
    ok = tasks.with_context.enqueue(n=5)
    bad = tasks.explode.enqueue()
    doubled = tasks.async_double.enqueue(21)
    assert testing.drain(django_db) == testing.DrainResult(completed=2, discarded=1)
    done = tasks.with_context.get_result(ok.id)
    assert done.return_value == {"n": 5, "attempt": 1, "id": ok.id}
    failed = tasks.explode.get_result(bad.id)
    assert failed.status == _tasks_api.TaskResultStatus.FAILED
    assert failed.errors[0].exception_class_path == "builtins.ValueError"
    assert "the task exploded" in failed.errors[0].traceback
    assert tasks.async_double.get_result(doubled.id).return_value == 42
    with pytest.raises(_tasks_api.TaskResultDoesNotExist):
        tasks.explode.get_result("999999")
    with pytest.raises(_tasks_api.TaskResultDoesNotExist):
        tasks.explode.get_result("not-a-number")


def test_enqueue_a_pgqueue_task_on_djangos_connection(django_db: pgqueue.App, conn: psycopg.Connection[Any]) -> None:
    @django_db.task(name="plain")
    def plain(x: int) -> None:
        pass

    with transaction.atomic():
        enqueue(plain, x=1)
        transaction.set_rollback(True)
    with transaction.atomic():
        enqueue(plain, x=2)
    assert conn.execute("SELECT args FROM pgqueue.jobs WHERE task = 'plain'").fetchall() == [({"x": 2},)]


def test_manage_py_migrate_installs_the_schema(empty_dsn: str) -> None:
    point_django_at(empty_dsn)
    try:
        call_command("migrate", "pgqueue", verbosity=0)
        with psycopg.connect(empty_dsn) as c:
            assert c.execute("SELECT to_regclass('pgqueue.jobs') IS NOT NULL").fetchone() == (True,)
        call_command("migrate", "pgqueue", "zero", verbosity=0)  # reversing leaves the schema alone
        call_command("migrate", "pgqueue", verbosity=0)
    finally:
        connections["default"].close()


def test_manage_py_pgqueue_runs_pgqueue_commands_on_the_django_database(
    django_db: pgqueue.App, capsys: pytest.CaptureFixture[str]
) -> None:
    tasks.explode.enqueue()
    call_command("pgqueue", "jobs", "list")
    out = capsys.readouterr().out
    assert "django.tasks.run" in out
    with pytest.raises(Exception, match="exited with status"):
        call_command("pgqueue", "jobs", "show", "999999")
    assert "PGQUEUE_DSN" not in os.environ  # the command's environment does not leak


def test_other_databases_are_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(settings.DATABASES, "lite", {"ENGINE": "django.db.backends.sqlite3", "NAME": ":memory:"})
    with pytest.raises(pgqueue.ConfigError, match=r"needs PostgreSQL.*'lite' is sqlite"):
        conf.psycopg_connection("lite")
    with pytest.raises(pgqueue.ConfigError, match="no database 'nope'"):
        conf.psycopg_connection("nope")
    from django.db.backends.postgresql import psycopg_any

    monkeypatch.setattr(psycopg_any, "is_psycopg3", False)  # as on a project with only psycopg2
    with pytest.raises(pgqueue.ConfigError, match="uses psycopg2"):
        conf.psycopg_connection("default")
