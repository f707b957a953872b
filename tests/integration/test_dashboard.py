"""The web dashboard against a real PostgreSQL: every page, the jobs filters and keyset
pages, the job page, and every action checked in the database afterwards."""

from __future__ import annotations

import logging
import re
import tempfile
from typing import Any

import psycopg
import pytest

import pgqueue
from pgqueue import ops
from pgqueue.dashboard import DashboardConfig
from pgqueue.dashboard.views import overview
from tests.dashboard_support import Conn, add_job, client_for, csrf, job_ids, post, state_of

PAGES = ["/", "/live", "/jobs", "/failures", "/workers", "/cron", "/queues"]


def test_every_page_renders_with_jobs_in_every_state(conn: Conn, dsn: str) -> None:
    for state in ("available", "scheduled", "running", "retryable", "completed", "discarded", "cancelled"):
        add_job(conn, state=state, queue="mail", task="send")
    add_job(
        conn,
        state="discarded",
        task="resize",
        errors=[{"type": "builtins.ValueError", "message": "bad size", "at": "2026-12-01T10:00:00+00:00"}],
    )
    conn.execute(
        "INSERT INTO pgqueue.worker_registry (worker_id, host, pid, queues, concurrency, in_flight, started_at,"
        " last_heartbeat, expires_at, listener_connected, version)"
        " VALUES ('w-1', 'box', 42, ARRAY['mail'], 10, 3, now(), now(), now() + interval '1 minute', true, 'x')"
    )
    with client_for(dsn) as client:
        for path in PAGES:
            response = client.get(path)
            assert response.status_code == 200, (path, response.text)
            assert "htmx.min.js" in response.text or path == "/live"
        home = client.get("/").text
        assert 'data-queue="mail"' in home
        assert "<svg" in home
        assert 'hx-trigger="every 5.0s"' in home
        assert re.search(r'id="total-available">1<', home)
        failures = client.get("/failures").text
        assert "builtins.ValueError" in failures
        assert "bad size" in failures
        workers = client.get("/workers").text
        assert "w-1" in workers
        assert "box" in workers
        assert "connected" in workers
        assert client.get("/static/htmx.min.js").status_code == 200


def test_overview_reads_everything_in_one_round_trip(conn: Conn, dsn: str) -> None:
    add_job(conn, state="completed", queue="a")
    add_job(conn, state="discarded", queue="a")
    config = DashboardConfig(dsn=dsn)
    with psycopg.connect(dsn, autocommit=True) as c, tempfile.TemporaryFile("w+") as trace:
        c.pgconn.trace(trace.fileno())
        c.pgconn.set_trace_flags(psycopg.pq.Trace.SUPPRESS_TIMESTAMPS)
        data = overview(c, config)
        c.pgconn.untrace()
        trace.seek(0)
        lines = trace.read().splitlines()
    # One round trip: the whole request (one statement, one Sync) goes out before any answer.
    sent = [i for i, ln in enumerate(lines) if ln.startswith("F")]
    received = [i for i, ln in enumerate(lines) if ln.startswith("B")]
    assert sent
    assert received
    assert max(sent) < min(received), "\n".join(lines)
    assert sum(1 for ln in lines if ln.startswith("F") and "Sync" in ln) == 1
    assert [q.queue for q in data.queues] == ["a"]
    assert data.queues[0].completed_1m == 1
    assert data.queues[0].discarded_1m == 1


def test_jobs_filters_match_state_queue_task_text_and_time(conn: Conn, dsn: str) -> None:
    a = add_job(conn, state="available", queue="mail", task="send", args={"to": "alice@example.com"})
    b = add_job(conn, state="available", queue="mail", task="secret", args={"to": "alice@example.com"})
    c = add_job(
        conn,
        state="discarded",
        queue="img",
        task="resize",
        errors=[{"type": "builtins.KeyError", "message": "no alice_here", "at": "2026-12-01T10:00:00+00:00"}],
    )
    d = add_job(conn, state="completed", queue="img", task="resize")
    conn.execute("UPDATE pgqueue.jobs SET created_at = now() - interval '3 days' WHERE id = %s", [d])
    with client_for(dsn, show_args=frozenset({"send"})) as client:

        def ids(query: str) -> list[int]:
            response = client.get("/jobs?" + query)
            assert response.status_code == 200, response.text
            return job_ids(response.text)

        assert ids("") == [d, c, b, a]
        assert ids("state=available") == [b, a]
        assert ids("queue=img") == [d, c]
        assert ids("task=resize&state=completed") == [d]
        # Text: in the errors of every task, in the args only of tasks whose args may show.
        assert ids("text=alice") == [c, a]
        assert ids("text=ALICE_HERE") == [c]
        assert ids("text=alice%25") == []  # % is a character, not a wildcard
        assert ids("created_to=" + "2099-01-01T00:00") == [d, c, b, a]
        old = client.get("/jobs?state=completed").text
        assert str(d) in old
        assert ids("created_from=2000-01-01T00:00&created_to=" + _days_ago(conn, 1)) == [d]
        assert client.get("/jobs?created_from=yesterday").status_code == 400
        assert "created_from" in client.get("/jobs?created_from=yesterday").text


def _days_ago(conn: Conn, days: int) -> str:
    row = conn.execute("SELECT to_char(now() - make_interval(days => %s), 'YYYY-MM-DD\"T\"HH24:MI')", [days]).fetchone()
    assert row is not None
    return str(row[0])


def test_keyset_pages_walk_every_job_once(conn: Conn, dsn: str) -> None:
    made = [add_job(conn, state="available", queue="a" if i % 3 else "b") for i in range(23)]
    with client_for(dsn, page_size=5, scan_limit=4) as client:
        seen: list[int] = []
        url: str | None = "/jobs"
        while url is not None:
            html = client.get(url).text
            seen += job_ids(html)
            m = re.search(r'href="http://testserver(/jobs\?[^"]*)" id="older"', html)
            url = m[1].replace("&amp;", "&") if m else None
        assert seen == sorted(made, reverse=True)
        # A narrowing filter looks at 4 jobs per page at most, and says how far it went.
        seen = []
        url = "/jobs?queue=b"
        pages = 0
        while url is not None:
            html = client.get(url).text
            pages += 1
            assert len(job_ids(html)) <= 4
            assert 'id="scan-note"' in html
            seen += job_ids(html)
            m = re.search(r'href="http://testserver(/jobs\?[^"]*)" id="older"', html)
            url = m[1].replace("&amp;", "&") if m else None
        assert seen == [j for j in sorted(made, reverse=True) if made.index(j) % 3 == 0]
        assert pages >= 23 // 4


def test_job_page_shows_args_attempts_result_and_cron_tick(conn: Conn, dsn: str) -> None:
    shown = add_job(
        conn,
        state="discarded",
        task="send",
        args={"to": "bob"},
        errors=[
            {"attempt": 1, "type": "builtins.OSError", "message": "down", "traceback": "Traceback: line 1", "at": None}
        ],
    )
    hidden = add_job(conn, state="completed", task="secret", args={"password": "hunter2"})
    conn.execute("UPDATE pgqueue.jobs SET result = '{\"rows\": 7}' WHERE id = %s", [hidden])
    conn.execute(
        "INSERT INTO pgqueue.cron_schedules (name, task, cron, timezone, queue, priority, missed, max_catchup,"
        " grace_seconds, last_seen_at, created_at, defined_at) VALUES ('nightly', 'send', '0 3 * * *', 'UTC',"
        " 'default', 0, 'latest', 1, 60, now(), now(), now())"
    )
    conn.execute(
        "INSERT INTO pgqueue.cron_ticks (schedule, tick, job_id, fired_by) VALUES ('nightly', now(), %s, 'w-1')",
        [shown],
    )
    with client_for(dsn, show_args=frozenset({"send"})) as client:
        page = client.get(f"/jobs/{shown}").text
        assert "&#34;bob&#34;" in page or '"bob"' in page
        assert "builtins.OSError: down" in page
        assert "Traceback: line 1" in page
        assert 'id="cron-tick"' in page
        assert "nightly" in page
        cron = client.get("/cron").text
        assert re.search(r'<td class="next-tick">\d{4}-\d\d-\d\d 03:00:00</td>', cron), cron
        assert 'id="job-retry"' in page
        assert 'id="job-delete"' in page
        assert 'id="job-cancel"' not in page
        secret = client.get(f"/jobs/{hidden}").text
        assert "hunter2" not in secret
        assert 'id="args-hidden"' in secret
        assert "rows" in secret
        assert "7" in secret
        assert client.get("/jobs/999999999").status_code == 404
        assert client.get("/jobs/abc").status_code == 400


def test_job_relations_hook_lists_related_jobs(conn: Conn, dsn: str) -> None:
    parent = add_job(conn, state="completed")
    child = add_job(conn, state="available")

    def relations(_: Any, schema: str, job_id: int) -> list[tuple[str, list[int]]]:
        assert schema == "pgqueue"
        return [("children", [child])] if job_id == parent else []

    with client_for(dsn, job_relations=relations) as client:
        page = client.get(f"/jobs/{parent}").text
        assert "Related jobs" in page
        assert f"/jobs/{child}" in page
    with client_for(dsn) as client:
        assert "Related jobs" not in client.get(f"/jobs/{parent}").text


def test_a_job_page_shows_its_workflow_parents_children_and_batch_by_default(
    conn: Conn, dsn: str, app: pgqueue.App
) -> None:
    @app.task(name="wf.step")
    def step() -> None: ...

    first, middle, last = (int(h) for h in app.chain(step.job(), step.job(), step.job()).enqueue(conn))
    batch = app.create_batch(conn)
    (member,) = batch.add(conn, step.job())
    with client_for(dsn) as client:
        page = client.get(f"/jobs/{middle}").text
        assert "Related jobs" in page
        assert re.search(rf"parents: <a href=\"[^\"]*/jobs/{first}\">", page), page
        assert re.search(rf"Children: <a href=\"[^\"]*/jobs/{last}\">", page), page
        assert f"Member of batch {batch.id}" in client.get(f"/jobs/{member}").text
        assert "Related jobs" not in client.get(f"/jobs/{add_job(conn, state='available')}").text


def test_actions_on_one_job_and_a_selection(conn: Conn, dsn: str, caplog: pytest.LogCaptureFixture) -> None:
    dead = add_job(conn, state="discarded")
    live = add_job(conn, state="available")
    done = add_job(conn, state="completed")
    sel = [add_job(conn, state="cancelled") for _ in range(3)]
    caplog.set_level(logging.INFO, logger="pgqueue.dashboard")
    with client_for(dsn, batch_size=2) as client:
        r = post(client, "/actions/jobs", {"action": "retry", "ids": [str(dead)], "back": f"/jobs/{dead}"})
        assert r.status_code == 303
        assert r.headers["location"].startswith(f"/jobs/{dead}?msg=retry")
        assert state_of(conn, dead) == "available"
        post(client, "/actions/jobs", {"action": "cancel", "ids": [str(live)]})
        assert state_of(conn, live) == "cancelled"
        post(client, "/actions/jobs", {"action": "delete", "ids": [str(done)]})
        assert state_of(conn, done) is None
        # Delete never touches a live job.
        post(client, "/actions/jobs", {"action": "delete", "ids": [str(dead)]})
        assert state_of(conn, dead) == "available"
        r = post(client, "/actions/jobs", {"action": "retry", "ids": [str(i) for i in sel]})
        assert "retry%3A%203%20of%203" in r.headers["location"]
        assert {state_of(conn, i) for i in sel} == {"available"}
        assert post(client, "/actions/jobs", {"action": "explode", "ids": [str(dead)]}).status_code == 400
        assert post(client, "/actions/jobs", {"action": "retry"}).status_code == 400
        # An off-site "back" is ignored.
        r = post(client, "/actions/jobs", {"action": "cancel", "ids": [str(dead)], "back": "//evil.example/x"})
        assert r.headers["location"].startswith("http://testserver/jobs?")
    logged = [r.getMessage() for r in caplog.records if r.name == "pgqueue.dashboard"]
    assert any(f"retry by anonymous@testclient on jobs {dead}" in m for m in logged), logged


def _run_bulk(client: Any, first: dict[str, str]) -> tuple[int, str]:
    """Post "all matching" and every follow-up batch the page would post; (batches, last html)."""
    data = first
    batches = 0
    while True:
        r = post(client, "/actions/bulk", data)
        assert r.status_code == 200, r.text
        batches += 1
        html = r.text
        if 'data-done="yes"' in html:
            return batches, html
        fields = dict(re.findall(r'<input type="hidden" name="([a-z_]+)" value="([^"]*)">', html))
        fields.pop("csrf")
        data = fields


def test_all_matching_runs_in_bounded_batches(conn: Conn, dsn: str, caplog: pytest.LogCaptureFixture) -> None:
    failed = [add_job(conn, state="discarded", task="flaky") for _ in range(7)]
    other = [add_job(conn, state="discarded", task="other") for _ in range(2)]
    caplog.set_level(logging.INFO, logger="pgqueue.dashboard")
    with client_for(dsn, batch_size=3, scan_limit=5) as client:
        batches, html = _run_bulk(client, {"action": "retry", "state": "discarded", "task": "flaky"})
        assert batches >= 3
        assert "7 changed of 7" in html
        assert {state_of(conn, i) for i in failed} == {"available"}
        assert {state_of(conn, i) for i in other} == {"discarded"}
        # A state the action cannot apply to is refused with a clear message.
        r = post(client, "/actions/bulk", {"action": "retry", "state": "available"})
        assert r.status_code == 400
        assert "cannot retry available jobs" in r.text
        # Cancel everything live, then delete every cancelled job: the filter carries over.
        _run_bulk(client, {"action": "cancel"})
        assert ops.list_jobs(conn, "pgqueue", state="available") == []
        _run_bulk(client, {"action": "delete", "state": "cancelled"})
        assert {state_of(conn, i) for i in failed} == {None}
        assert {state_of(conn, i) for i in other} == {"discarded"}
    logged = [r.getMessage() for r in caplog.records if r.name == "pgqueue.dashboard"]
    assert any("retry of all jobs matching" in m and "'flaky'" in m for m in logged), logged


def test_interrupted_bulk_action_leaves_the_rest(conn: Conn, dsn: str) -> None:
    jobs = [add_job(conn, state="discarded") for _ in range(6)]
    with client_for(dsn, batch_size=2) as client:
        r = post(client, "/actions/bulk", {"action": "retry", "state": "discarded"})
        assert 'data-done="no"' in r.text  # the page would post the next batch; it does not
    assert sorted(state_of(conn, i) or "" for i in jobs) == ["available"] * 2 + ["discarded"] * 4
    # The two newest went first.
    assert {state_of(conn, i) for i in jobs[-2:]} == {"available"}


def test_queue_controls_pause_resume_and_limit(conn: Conn, dsn: str) -> None:
    add_job(conn, queue="mail")
    with client_for(dsn) as client:
        assert 'data-queue="mail"' in client.get("/queues").text
        r = post(client, "/actions/queues/pause", {"queue": "mail"})
        assert r.status_code == 303
        assert {c.queue: c.paused for c in ops.queue_controls(conn, "pgqueue")}["mail"] is True
        assert "paused" in client.get("/").text
        post(client, "/actions/queues/limit", {"queue": "mail", "concurrency": "3"})
        assert {c.queue: c.concurrency for c in ops.queue_controls(conn, "pgqueue")}["mail"] == 3
        post(client, "/actions/queues/limit", {"queue": "mail", "concurrency": ""})
        post(client, "/actions/queues/resume", {"queue": "mail"})
        control = {c.queue: c for c in ops.queue_controls(conn, "pgqueue")}["mail"]
        assert (control.paused, control.concurrency) == (False, None)
        r = post(client, "/actions/queues/limit", {"queue": "mail", "concurrency": "-1"})
        assert r.status_code == 400
        assert "concurrency" in r.text
        r = post(client, "/actions/queues/pause", {"queue": "nosuchqueue"})
        assert r.status_code == 404
        assert "nosuchqueue" in r.text


def test_mounted_under_a_path_prefix(conn: Conn, dsn: str) -> None:
    from starlette.applications import Starlette
    from starlette.routing import Mount
    from starlette.testclient import TestClient

    from pgqueue.dashboard import create_app

    job = add_job(conn, state="discarded")
    outer = Starlette(routes=[Mount("/ops/queue", app=create_app(dsn=dsn))])
    with TestClient(outer, follow_redirects=False) as client:
        home = client.get("/ops/queue/").text
        assert 'href="http://testserver/ops/queue/jobs"' in home
        assert "/ops/queue/static/htmx.min.js" in home
        assert client.get("/ops/queue/static/style.css").status_code == 200
        client.get("/ops/queue/jobs")
        r = client.post(
            "/ops/queue/actions/jobs",
            data={"csrf": csrf(client), "action": "retry", "ids": str(job), "back": f"/ops/queue/jobs/{job}"},
        )
        assert r.status_code == 303
        assert r.headers["location"].startswith(f"/ops/queue/jobs/{job}")
    assert state_of(conn, job) == "available"
