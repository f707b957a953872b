"""The pytest plugin and the sample app's test file of docs/testing.md, run by pytest
in a subprocess as a user would run them."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

from tests.conftest import REPO, server_dsn

SAMPLE = REPO / "docs" / "testing_sample"


def run_pytest(*args: str, cwd: Path = SAMPLE) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PGQUEUE_TEST_DSN": server_dsn(), "PYTHONPATH": f"{REPO}{os.pathsep}{cwd}"}
    env.pop("PGQUEUE_DSN", None)
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:asyncio", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_the_sample_apps_tests_pass() -> None:
    proc = run_pytest("--durations=0", "--durations-min=0")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert re.search(r"\b5 passed\b", proc.stdout), proc.stdout
    calls = re.findall(r"^([\d.]+)s call ", proc.stdout, re.MULTILINE)
    assert len(calls) == 5, proc.stdout  # the timings are printed (docs/testing.md quotes them)
    # The orders table is in the template, so no test changes the structure: the database
    # cloned for the first test is reset for each next one, never replaced.
    assert "pgqueue test databases (reset): 1 cloned, 5 reset for the next test, 0 replaced" in proc.stdout
    print(proc.stdout)


def test_isolation_clone_gives_each_sample_test_its_own_clone() -> None:
    proc = run_pytest("-o", "pgqueue_isolation=clone")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "pgqueue test databases (clone): 5 cloned, 0 reset for the next test, 0 replaced" in proc.stdout


def test_a_job_left_by_one_test_is_not_in_the_next(tmp_path: Path) -> None:
    (tmp_path / "pytest.ini").write_text("[pytest]\npgqueue_fixtures = true\npgqueue_app = tasks:app\n", "utf-8")
    (tmp_path / "tasks.py").write_text(
        "import pgqueue\n\napp = pgqueue.App()\n\n\n@app.task\ndef ping(n: int) -> None:\n    pass\n", "utf-8"
    )
    (tmp_path / "test_order.py").write_text(
        textwrap.dedent(
            """
            from pgqueue import testing
            from tasks import ping


            def test_leaves_jobs_and_a_table(pgqueue_app, pgqueue_conn):
                assert int(ping.enqueue(pgqueue_conn, n=1)) == 1
                ping.enqueue(pgqueue_conn, n=2)
                testing.assert_enqueued(ping, n=1)


            def test_sees_none_of_them(pgqueue_app, pgqueue_conn):
                testing.refute_enqueued(ping)
                assert int(ping.enqueue(pgqueue_conn, n=3)) == 1  # job ids start again
                pgqueue_conn.execute("CREATE TABLE scratch (id int)")  # DDL: replaced after this test


            def test_after_ddl(pgqueue_app, pgqueue_conn):
                testing.refute_enqueued(ping)
                assert pgqueue_conn.execute("SELECT to_regclass('scratch')").fetchone() == (None,)
            """
        ),
        "utf-8",
    )
    proc = run_pytest("-p", "no:randomly", cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert re.search(r"\b3 passed\b", proc.stdout), proc.stdout
    assert "2 cloned, 2 reset for the next test, 1 replaced after other changes (DDL)" in proc.stdout, proc.stdout


def test_the_plugin_stays_off_unless_enabled() -> None:
    proc = run_pytest("-o", "pgqueue_fixtures=false", "test_myshop.py")
    assert proc.returncode != 0
    assert "fixture 'pgqueue_app' not found" in proc.stdout, proc.stdout


def test_the_docs_show_the_sample_test_file() -> None:
    page = (REPO / "docs" / "testing.md").read_text("utf-8")
    for name in ("conftest.py", "test_myshop.py", "myshop/tasks.py"):
        assert (SAMPLE / name).read_text("utf-8").strip() in page, f"docs/testing.md must show {name} as it is"
