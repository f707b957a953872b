"""The dashboard's defences against a real PostgreSQL: read-only mode refused by the
database itself, authentication, CSRF, hidden arguments, and hostile filter values (every
one a bound parameter: no match, or a clear error naming the field; nothing moves)."""

from __future__ import annotations

import base64
import logging
from typing import Any

import pytest

from tests.dashboard_support import Conn, add_job, client_for, csrf, job_ids, post, state_of
from tests.hostile_support import INJECTIONS, LOOKALIKES
from tests.roles_support import RolesDB

TOKEN = "s3cret-token-0123456789"
PAGES = ["/", "/live", "/jobs", "/failures", "/workers", "/cron", "/queues"]


def test_read_only_mode_is_refused_by_postgres(rdb: RolesDB) -> None:
    with rdb.connect() as admin:
        dead = add_job(admin, state="discarded", queue="mail")
        live = add_job(admin, state="available", queue="mail")
    prefix = rdb.names.inspector.removesuffix("_inspector")
    with client_for(rdb.dsn("inspector"), read_only=True, role_prefix=prefix) as client:
        for path in [*PAGES, f"/jobs/{dead}"]:
            response = client.get(path)
            assert response.status_code == 200, (path, response.text)
            assert "read-only" in response.text or path == "/live"
        assert 'id="sel-retry"' not in client.get("/jobs").text
        assert 'id="job-retry"' not in client.get(f"/jobs/{dead}").text
        # A forged POST reaches the database, which refuses it: the connection is the inspector's.
        for action, job in (("retry", dead), ("cancel", live), ("delete", dead)):
            response = post(client, "/actions/jobs", {"action": action, "ids": [str(job)]})
            assert response.status_code == 403
            assert "PostgreSQL refused the change: permission denied" in response.text
        response = post(client, "/actions/queues/pause", {"queue": "mail"})
        assert response.status_code == 403
        response = post(client, "/actions/bulk", {"action": "cancel"})
        assert response.status_code == 403
    with rdb.connect() as admin:
        assert (state_of(admin, dead), state_of(admin, live)) == ("discarded", "available")


def test_a_token_guards_every_page_and_action(conn: Conn, dsn: str) -> None:
    job = add_job(conn, state="discarded")
    with client_for(dsn, token=TOKEN) as client:
        for path in [*PAGES, f"/jobs/{job}", "/static/htmx.min.js"]:
            response = client.get(path)
            assert response.status_code == 303, path
            assert response.headers["location"].endswith("/login")
        assert client.get("/static/style.css").status_code == 200  # the login page's look
        assert client.get("/", headers={"HX-Request": "true"}).status_code == 401
        assert client.post("/actions/jobs", data={"action": "retry", "ids": str(job)}).status_code == 401
        assert client.get("/", headers={"Authorization": f"Bearer {TOKEN}"}).status_code == 200
        assert client.get("/", headers={"Authorization": "Bearer wrong-token-0123456789"}).status_code == 303
        # The login form: a wrong token, then the right one (a session cookie, not the token).
        assert post(client, "/login", {"token": "nope"}).status_code == 401
        response = post(client, "/login", {"token": TOKEN})
        assert response.status_code == 303
        assert TOKEN not in response.headers["set-cookie"]
        assert client.get("/jobs").status_code == 200
        assert post(client, "/actions/jobs", {"action": "retry", "ids": [str(job)]}).status_code == 303
    assert state_of(conn, job) == "available"
    with client_for(dsn, token=TOKEN) as other:  # another process: another key, the old cookie is void
        other.cookies.set("pgqueue_session", response.cookies.get("pgqueue_session") or "")
        assert other.get("/jobs").status_code == 303


def test_basic_auth_names_who_acted(conn: Conn, dsn: str, caplog: pytest.LogCaptureFixture) -> None:
    job = add_job(conn, state="available")
    caplog.set_level(logging.INFO, logger="pgqueue.dashboard")

    def basic(user: str, password: str) -> dict[str, str]:
        return {"Authorization": "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()}

    with client_for(dsn, basic_auth={"alice": "pa:ss"}) as client:
        response = client.get("/")
        assert response.status_code == 401
        assert response.headers["www-authenticate"] == 'Basic realm="pgqueue"'
        assert client.get("/", headers=basic("alice", "wrong")).status_code == 401
        assert client.get("/", headers={"Authorization": "Basic !!notbase64"}).status_code == 401
        assert client.get("/", headers=basic("alice", "pa:ss")).status_code == 200
        response = post(
            client, "/actions/jobs", {"action": "cancel", "ids": [str(job)]}, headers=basic("alice", "pa:ss")
        )
        assert response.status_code == 303
    assert state_of(conn, job) == "cancelled"
    assert any("cancel by alice@testclient" in r.getMessage() for r in caplog.records)


def test_posts_need_the_csrf_token_and_this_site_as_origin(conn: Conn, dsn: str) -> None:
    job = add_job(conn, state="available", queue="mail")
    with client_for(dsn) as client:
        token = csrf(client)
        for data, headers in (
            ({"action": "cancel", "ids": str(job)}, {}),
            ({"action": "cancel", "ids": str(job), "csrf": "x" * 43}, {}),
            ({"action": "cancel", "ids": str(job), "csrf": token}, {"Origin": "http://evil.example"}),
        ):
            response = client.post("/actions/jobs", data=data, headers=headers)
            assert response.status_code == 403
            assert "CSRF" in response.text or "cross-site" in response.text
        assert client.post("/actions/queues/pause", data={"queue": "mail"}).status_code == 403
        assert client.post("/actions/bulk", data={"action": "cancel"}).status_code == 403
        assert state_of(conn, job) == "available"
        # The header htmx sends works as well as the form field.
        response = client.post(
            "/actions/jobs",
            data={"action": "cancel", "ids": str(job)},
            headers={"X-CSRF-Token": token, "Origin": "http://testserver"},
        )
        assert response.status_code == 303
    assert state_of(conn, job) == "cancelled"
    with client_for(dsn) as client:
        cookie = client.get("/jobs").headers["set-cookie"].lower()
        assert "httponly" in cookie
        assert "samesite=strict" in cookie


def test_messages_in_links_must_be_the_dashboards_own(conn: Conn, dsn: str) -> None:
    job = add_job(conn, state="discarded")
    with client_for(dsn) as client:
        crafted = client.get("/jobs", params={"msg": "Your session expired: log in at evil.example"}).text
        assert "evil.example" not in crafted
        forged = client.get("/jobs", params={"msg": "hello", "sig": "0" * 32}).text
        assert 'id="flash"' not in forged
        location = post(client, "/actions/jobs", {"action": "retry", "ids": [str(job)]}).headers["location"]
        assert 'id="flash"' in client.get(location).text


def test_args_show_only_for_tasks_that_opt_in(conn: Conn, dsn: str) -> None:
    secret = add_job(conn, task="billing.charge", args={"card": "4111-1111"})
    open_ = add_job(conn, task="mail.send", args={"to": "4111-1111"})
    with client_for(dsn, show_args=False) as client:
        page = client.get(f"/jobs/{secret}").text
        assert "4111" not in page
        assert 'id="args-hidden"' in page
        # Searching args is no oracle for hidden ones either.
        assert job_ids(client.get("/jobs?text=4111").text) == []
    with client_for(dsn, show_args=frozenset({"mail.send"})) as client:
        assert "4111" not in client.get(f"/jobs/{secret}").text
        assert "4111" in client.get(f"/jobs/{open_}").text
        assert job_ids(client.get("/jobs?text=4111").text) == [open_]


HOSTILE = [
    *INJECTIONS,
    *(v for v in LOOKALIKES if "\x00" not in v),
    "%",
    "_",
    "\\",
    "' OR 1=1 --",
    "<script>x</script>",
]


@pytest.mark.parametrize("field", ["queue", "task", "text"])
def test_hostile_filter_values_are_bound(conn: Conn, dsn: str, field: str) -> None:
    conn.execute("CREATE TABLE canary (x int)")
    jobs = [add_job(conn, state=s, queue="default", task="t") for s in ("available", "discarded", "completed")]
    with client_for(dsn) as client:
        for value in HOSTILE:
            response = client.get("/jobs", params={field: value})
            assert response.status_code == 200, (value, response.text)
            assert job_ids(response.text) == [], value
            assert "<script>x</script>" not in response.text
            bulk = post(client, "/actions/bulk", {"action": "delete", field: value})
            assert bulk.status_code == 200, (value, bulk.text)
            assert "0 changed of 0" in bulk.text
        for bad, needle in (("\x00", "NUL"), ("x" * 400, "longer than")):
            response = client.get("/jobs", params={field: bad})
            assert response.status_code == 400
            assert field in response.text
            assert needle in response.text
    assert conn.execute("SELECT to_regclass('canary')").fetchone() == ("canary",)
    assert [state_of(conn, j) for j in jobs] == ["available", "discarded", "completed"]


@pytest.mark.parametrize(
    ("path", "params"),
    [
        ("/jobs", {"state": "available' OR '1'='1"}),
        ("/jobs", {"before": "1 OR 1=1"}),
        ("/jobs", {"before": "99999999999999999999999"}),
        ("/jobs", {"created_from": "2026-01-01'; DROP TABLE canary; --"}),
        ("/jobs/1%20OR%201=1", {}),
        ("/jobs/-1", {}),
    ],
)
def test_hostile_values_get_a_clear_error(conn: Conn, dsn: str, path: str, params: dict[str, Any]) -> None:
    conn.execute("CREATE TABLE canary (x int)")
    with client_for(dsn) as client:
        response = client.get(path, params=params)
        assert response.status_code == 400, response.text
        assert 'id="error"' in response.text
    assert conn.execute("SELECT to_regclass('canary')").fetchone() == ("canary",)


@pytest.mark.parametrize("queue", [*INJECTIONS, *LOOKALIKES, "", "x" * 100])
def test_hostile_queue_names_in_controls(conn: Conn, dsn: str, queue: str) -> None:
    add_job(conn, queue="default")
    with client_for(dsn) as client:
        response = post(client, "/actions/queues/pause", {"queue": queue})
        assert response.status_code in (400, 404), response.text
        assert 'id="error"' in response.text
        response = post(client, "/actions/queues/limit", {"queue": queue, "concurrency": "1"})
        assert response.status_code in (400, 404)
    rows = conn.execute("SELECT name, paused FROM pgqueue.queues").fetchall()
    assert all(name == "default" for name, _ in rows)


def test_authentication_when_mounted_under_a_prefix(dsn: str) -> None:
    from starlette.applications import Starlette
    from starlette.routing import Mount
    from starlette.testclient import TestClient

    from pgqueue.dashboard import create_app

    outer = Starlette(routes=[Mount("/admin/queue", app=create_app(dsn=dsn, token=TOKEN))])
    with TestClient(outer, follow_redirects=False) as client:
        response = client.get("/admin/queue/jobs")
        assert response.status_code == 303
        assert response.headers["location"] == "http://testserver/admin/queue/login"
        assert client.get("/admin/queue/login").status_code == 200
        assert client.get("/admin/queue/static/style.css").status_code == 200
        assert client.get("/admin/queue/static/htmx.min.js").status_code == 303
        headers = {"Authorization": f"Bearer {TOKEN}"}
        assert client.get("/admin/queue/jobs", headers=headers).status_code == 200
