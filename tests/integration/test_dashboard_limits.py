"""Queue limits from the dashboard's queues page against a real PostgreSQL: every limit
``pgqueue.ops.set_queue_limits`` knows, posted as the browser posts the form; only the
fields changed are applied; bad input is refused with a clear message and changes
nothing; CSRF, authentication and read-only mode as for every action; logged with who."""

from __future__ import annotations

import html
import logging
import re
from typing import Any

import pytest

from pgqueue import ops
from pgqueue.ops.queues import QueueControl
from tests.dashboard_support import Conn, add_job, client_for, post
from tests.roles_support import RolesDB

TOKEN = "s3cret-token-0123456789"


def control(conn: Conn, queue: str = "mail") -> QueueControl:
    return {c.queue: c for c in ops.queue_controls(conn, "pgqueue")}[queue]


def limits_form(page: str, queue: str) -> list[tuple[str, str]]:
    """The fields the queue's limits form posts as shown (a checkbox only when checked),
    in page order, without the CSRF token."""
    row = re.search(rf'<tr data-queue="{re.escape(queue)}">(.*?)</tr>', page, re.S)
    assert row is not None, page
    form = re.search(r'<form [^>]*class="limits"[^>]*>(.*?)</form>', row[1], re.S)
    assert form is not None, row[1]
    fields = []
    for tag in re.findall(r"<input [^>]*>", form[1]):
        name = re.search(r'name="([^"]*)"', tag)
        value = re.search(r'value="([^"]*)"', tag)
        if name is None or name[1] == "csrf" or ('type="checkbox"' in tag and " checked" not in tag):
            continue
        fields.append((name[1], html.unescape(value[1]) if value else ""))
    return fields


def with_values(fields: list[tuple[str, str]], **changes: str) -> dict[str, Any]:
    """The form as posted after typing ``changes`` into it (repeated names become lists)."""
    out: dict[str, list[str]] = {}
    for name, value in fields:
        out.setdefault(name, []).append(changes.get(name, value))
    return {name: values[0] if len(values) == 1 else values for name, values in out.items()}


def test_every_limit_is_set_from_the_form(conn: Conn, dsn: str, caplog: pytest.LogCaptureFixture) -> None:
    add_job(conn, queue="mail")
    caplog.set_level(logging.INFO, logger="pgqueue.dashboard")
    with client_for(dsn) as client:
        fields = limits_form(client.get("/queues").text, "mail")
        assert [n for n, _ in fields] == [
            "queue",
            "concurrency",
            "concurrency_was",
            "rate_limit",
            "rate_period",
            "rate_limit_was",
            "rate_period_was",
            "key_concurrency",
            "key_concurrency_was",
            "key_fifo",
            "key_fifo_was",
            "key_rate_limit",
            "key_rate_period",
            "key_rate_limit_was",
            "key_rate_period_was",
        ]
        form = with_values(
            fields,
            concurrency="4",
            rate_limit="100",
            rate_period="1m",
            key_concurrency="1",
            key_rate_limit="5",
            key_rate_period="1.5s",
        )
        form["key_fifo"] = ["off", "on"]  # the hidden default, then the checked box
        response = post(client, "/actions/queues/limit", form)
        assert response.status_code == 303
        assert "concurrency%204%3B%20rate%20100%20per%201m" in response.headers["location"]
        c = control(conn)
        assert (c.concurrency, c.rate_limit, c.rate_period_seconds) == (4, 100, 60.0)
        assert (c.key_concurrency, c.key_fifo, c.key_rate_limit, c.key_rate_period_seconds) == (1, True, 5, 1.5)
        # The page shows them, and the form is filled with them.
        page = client.get("/queues").text
        assert "100 per 1m" in page
        assert "5 per 1.5s per key" in page
        shown = dict(limits_form(page, "mail"))
        assert (shown["concurrency"], shown["rate_period"], shown["key_fifo"]) == ("4", "1m", "on")
        # Posted back unchanged, the form changes nothing.
        before = control(conn).changed_at
        response = post(client, "/actions/queues/limit", with_values(limits_form(page, "mail")))
        assert "no%20limit%20changed" in response.headers["location"]
        assert control(conn).changed_at == before
        # Emptied, the limits are removed (FIFO goes with the key concurrency).
        form = with_values(
            limits_form(page, "mail"),
            concurrency="",
            rate_limit="",
            rate_period="",
            key_concurrency="none",
            key_rate_limit="",
            key_rate_period="",
        )
        form["key_fifo"] = "off"
        assert post(client, "/actions/queues/limit", form).status_code == 303
        c = control(conn)
        assert (c.concurrency, c.rate_limit, c.key_concurrency, c.key_fifo, c.key_rate_limit) == (
            None,
            None,
            None,
            False,
            None,
        )
    logged = [r.getMessage() for r in caplog.records if r.name == "pgqueue.dashboard"]
    assert any(
        "queue 'mail' limits set by anonymous@testclient: concurrency 4, rate 100 per 1m, key concurrency 1,"
        " key FIFO on, key rate 5 per 1.5s" in m
        for m in logged
    ), logged


def test_only_the_fields_changed_are_applied(conn: Conn, dsn: str) -> None:
    add_job(conn, queue="mail")
    ops.set_queue_limits(conn, "pgqueue", "mail", concurrency=2, rate=(10, 60))
    with client_for(dsn) as client:
        fields = limits_form(client.get("/queues").text, "mail")
        # Meanwhile someone else changes the rate; this form changes the concurrency only.
        ops.set_queue_limits(conn, "pgqueue", "mail", rate=(50, 1))
        response = post(client, "/actions/queues/limit", with_values(fields, concurrency="3"))
        assert response.status_code == 303
    c = control(conn)
    assert (c.concurrency, c.rate_limit, c.rate_period_seconds) == (3, 50, 1.0)


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"concurrency": "0"}, "concurrency: give a positive whole number"),
        ({"concurrency": "-1"}, "concurrency: give a positive whole number"),
        ({"concurrency": "2.5"}, "concurrency: give a positive whole number"),
        ({"concurrency": "9" * 40}, "concurrency: give a positive whole number"),
        ({"concurrency": "2000000"}, "concurrency must be an int between 1 and 1000000"),
        ({"key_concurrency": "0"}, "key concurrency: give a positive whole number"),
        ({"rate_limit": "10", "rate_period": "0s"}, "rate period: give a length of time longer than zero"),
        ({"rate_limit": "10", "rate_period": "60"}, "rate period: invalid duration '60': needs a unit"),
        ({"rate_limit": "10", "rate_period": "soon"}, "rate period: invalid duration 'soon'"),
        ({"rate_limit": "10", "rate_period": "30d"}, "rate period must be between 1 millisecond and 7 days"),
        ({"rate_limit": "0", "rate_period": "1m"}, "rate limit: give a positive whole number"),
        ({"rate_limit": "10", "rate_period": ""}, "rate: give both the number of starts and the period"),
        ({"key_rate_limit": "", "key_rate_period": "1s"}, "key rate: give both"),
        ({"key_rate_limit": "-5", "key_rate_period": "1s"}, "key rate limit: give a positive whole number"),
        ({"key_concurrency": "2", "key_fifo": ["off", "on"]}, "fifo needs a key concurrency of 1"),
    ],
)
def test_bad_limits_are_refused_and_change_nothing(conn: Conn, dsn: str, changes: dict[str, Any], message: str) -> None:
    add_job(conn, queue="mail")
    ops.set_queue_limits(conn, "pgqueue", "mail", concurrency=2)
    before = control(conn)
    with client_for(dsn) as client:
        fields = limits_form(client.get("/queues").text, "mail")
        typed = {"concurrency": "7", **{k: v for k, v in changes.items() if isinstance(v, str)}}
        form = with_values(fields, **typed)
        form.update({k: v for k, v in changes.items() if isinstance(v, list)})
        response = post(client, "/actions/queues/limit", form)
        assert response.status_code == 400, response.text
        assert 'id="error"' in response.text
        assert message in html.unescape(response.text), response.text
    # Nothing changed, not even the valid concurrency posted with the bad value.
    assert control(conn) == before


def test_limits_need_csrf_and_authentication(conn: Conn, dsn: str) -> None:
    ops.add_queue(conn, "pgqueue", "mail")
    with client_for(dsn) as client:
        client.get("/queues")
        assert client.post("/actions/queues/limit", data={"queue": "mail", "concurrency": "3"}).status_code == 403
    with client_for(dsn, token=TOKEN) as client:
        response = post(client, "/actions/queues/limit", {"queue": "mail", "concurrency": "3"})
        assert response.status_code == 401
        assert client.get("/queues").status_code == 303  # to the login form
        assert control(conn).concurrency is None
        bearer = {"Authorization": f"Bearer {TOKEN}"}
        response = post(client, "/actions/queues/limit", {"queue": "mail", "concurrency": "3"}, headers=bearer)
        assert response.status_code == 303
    assert control(conn).concurrency == 3


def test_read_only_mode_shows_no_form_and_postgres_refuses_a_forged_post(rdb: RolesDB) -> None:
    with rdb.connect() as admin:
        add_job(admin, queue="mail")
        ops.add_queue(admin, "pgqueue", "mail")
    prefix = rdb.names.inspector.removesuffix("_inspector")
    with client_for(rdb.dsn("inspector"), read_only=True, role_prefix=prefix) as client:
        page = client.get("/queues").text
        assert 'data-queue="mail"' in page
        assert 'class="limits"' not in page
        response = post(client, "/actions/queues/limit", {"queue": "mail", "concurrency": "3"})
        assert response.status_code == 403
        assert "PostgreSQL refused the change: permission denied" in response.text
    with rdb.connect() as admin:
        assert control(admin).concurrency is None
