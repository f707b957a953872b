"""The log formats (--log-format kv|json) and their handler, without a database."""

from __future__ import annotations

import json
import logging
import re
import sys
from typing import Any

import pytest
from typer.testing import CliRunner

from pgqueue.cli import app as cli_app
from pgqueue.logging_setup import JsonFormatter, KeyValueFormatter, configure_logging, make_formatter


def record(msg: str, **extra: Any) -> logging.LogRecord:
    return logging.getLogger("pgqueue.test").makeRecord(
        "pgqueue.test", logging.INFO, __file__, 1, msg, (), None, extra=extra
    )


def parse_kv(line: str) -> dict[str, str]:
    """Parse a logfmt line (values bare or JSON-quoted)."""
    out: dict[str, str] = {}
    for key, quoted, bare in re.findall(r'(\w+)=(?:("(?:[^"\\]|\\.)*")|(\S*))', line):
        out[key] = json.loads(quoted) if quoted else bare
    return out


def test_kv_formatter_quotes_what_needs_quoting() -> None:
    line = KeyValueFormatter().format(record("job 1 done", job_id=1, task="a.b", note='say "hi"', ok=True))
    fields = parse_kv(line)
    assert fields["level"] == "INFO"
    assert fields["logger"] == "pgqueue.test"
    assert fields["msg"] == "job 1 done"
    assert fields["job_id"] == "1"
    assert fields["task"] == "a.b"
    assert fields["note"] == 'say "hi"'
    assert fields["ok"] == "true"
    assert re.match(r"^ts=\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z ", line)


def test_json_formatter_writes_one_object_per_record_with_exceptions() -> None:
    try:
        raise ValueError("bad thing")
    except ValueError:
        rec = logging.getLogger("x").makeRecord("x", logging.ERROR, __file__, 1, "failed %s", ("here",), None)
        rec.exc_info = sys.exc_info()
    doc = json.loads(JsonFormatter().format(rec))
    assert doc["msg"] == "failed here"
    assert doc["level"] == "ERROR"
    assert "ValueError: bad thing" in doc["exc"]
    assert "\n" not in JsonFormatter().format(record("multi\nline"))


def test_unknown_format_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown log format 'xml'"):
        make_formatter("xml")
    result = CliRunner().invoke(cli_app, ["work", "tests.apps.basic:app", "--log-format", "xml"])
    assert result.exit_code != 0
    assert "unknown log format 'xml'" in result.output


def test_configure_logging_replaces_its_own_handler_only() -> None:
    root = logging.getLogger()
    other = logging.NullHandler()
    root.addHandler(other)
    old_level = root.level
    try:
        configure_logging(logging.WARNING, "json")
        configure_logging(logging.INFO, "kv")
        ours = [h for h in root.handlers if type(h).__name__ == "_PgQueueHandler"]
        assert len(ours) == 1
        assert isinstance(ours[0].formatter, KeyValueFormatter)
        assert other in root.handlers
        assert root.level == logging.INFO
    finally:
        for h in [h for h in root.handlers if type(h).__name__ == "_PgQueueHandler"]:
            root.removeHandler(h)
        root.removeHandler(other)
        root.setLevel(old_level)
