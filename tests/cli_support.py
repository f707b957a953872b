"""Helpers for tests of the ``pgqueue`` command line: run it in-process with typer's
CliRunner, and check that a failure is one clear ``error:`` line."""

from __future__ import annotations

from typer.testing import CliRunner, Result

from pgqueue.cli import app as cli_app


def invoke(*args: str) -> Result:
    return CliRunner().invoke(cli_app, list(args), env={"PGQUEUE_DSN": None, "PGQUEUE_SCHEMA": None})


def error_lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.strip()]


def assert_one_clear_error(result_code: int, stderr: str, *needles: str) -> None:
    assert result_code != 0
    assert "Traceback" not in stderr, stderr
    lines = error_lines(stderr)
    assert len(lines) == 1, f"expected one line, got:\n{stderr}"
    assert lines[0].startswith("error:"), lines[0]
    for needle in needles:
        assert needle in lines[0], lines[0]
