"""The pytest plugin and the sample app's test file of docs/testing.md, run by pytest
in a subprocess as a user would run them."""

from __future__ import annotations

import os
import re
import subprocess
import sys

from tests.conftest import REPO, server_dsn

SAMPLE = REPO / "docs" / "testing_sample"


def run_pytest(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PGQUEUE_TEST_DSN": server_dsn(), "PYTHONPATH": str(REPO)}
    env.pop("PGQUEUE_DSN", None)
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:asyncio", *args],
        cwd=SAMPLE,
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
    print(proc.stdout)


def test_the_plugin_stays_off_unless_enabled() -> None:
    proc = run_pytest("-o", "pgqueue_fixtures=false", "test_myshop.py")
    assert proc.returncode != 0
    assert "fixture 'pgqueue_app' not found" in proc.stdout, proc.stdout


def test_the_docs_show_the_sample_test_file() -> None:
    page = (REPO / "docs" / "testing.md").read_text("utf-8")
    for name in ("test_myshop.py", "myshop/tasks.py"):
        assert (SAMPLE / name).read_text("utf-8").strip() in page, f"docs/testing.md must show {name} as it is"
