"""`pgqueue dashboard` end to end: a real process serving real pages, stopped by SIGTERM."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request

from tests.cli_support import invoke
from tests.conftest import REPO


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _get(url: str, headers: dict[str, str] | None = None) -> tuple[int, str]:
    request = urllib.request.Request(url, headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=5) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def test_the_command_serves_pages_and_stops_on_sigterm(dsn: str) -> None:
    port = _port()
    env = {**os.environ, "PGQUEUE_DASHBOARD_TOKEN": "t" * 20}
    proc = subprocess.Popen(
        [sys.executable, "-m", "pgqueue", "dashboard", "--dsn", dsn, "--port", str(port), "--host", "127.0.0.1"],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            assert proc.poll() is None, proc.communicate()
            try:
                status, _ = _get(f"http://127.0.0.1:{port}/static/style.css")
                break
            except (urllib.error.URLError, ConnectionError):
                assert time.monotonic() < deadline, "the dashboard did not start listening"
                time.sleep(0.05)
        assert status == 200
        status, body = _get(f"http://127.0.0.1:{port}/jobs", {"Authorization": "Bearer " + "t" * 20})
        assert status == 200
        assert 'id="jobs"' in body
        status, _ = _get(f"http://127.0.0.1:{port}/jobs", {"Authorization": "Bearer wrong"})
        assert status == 200  # redirected to the login form (urllib follows it)
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=20)
    # uvicorn shuts down gracefully, then lets the signal end the process as it would have.
    assert proc.returncode in (0, -signal.SIGTERM), err
    assert "Traceback" not in err
    assert f"pgqueue dashboard on http://127.0.0.1:{port}/" in err


def test_missing_auth_off_loopback_is_one_clear_error(dsn: str) -> None:
    result = invoke("dashboard", "--dsn", dsn, "--host", "0.0.0.0")
    assert result.exit_code == 1
    assert "error: --host 0.0.0.0 is reachable from other machines" in result.stderr
    result = invoke("dashboard", "--dsn", dsn, "--basic-auth", "nopassword")
    assert result.exit_code == 1
    assert "USER:PASSWORD" in result.stderr


def test_start_fails_clearly_without_the_schema_or_the_role(dsn: str, empty_dsn: str) -> None:
    result = invoke("dashboard", "--dsn", empty_dsn)
    assert result.exit_code == 1
    assert "pgqueue migrate" in result.stderr
    result = invoke("dashboard", "--dsn", dsn, "--read-only", "--role-prefix", "nosuchprefix")
    assert result.exit_code == 1
    assert "nosuchprefix_inspector" in result.stderr
