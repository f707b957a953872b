"""The dashboard's pure parts, no database: filters, settings, charts, formats."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from pgqueue._duration import parse_duration
from pgqueue.dashboard.charts import Point, bar_chart, line_chart
from pgqueue.dashboard.config import DashboardConfig, is_loopback, parse_basic_auth
from pgqueue.dashboard.filters import JobFilter, like_pattern, parse_before
from pgqueue.dashboard.format import percent, seconds
from pgqueue.dashboard.limits import LimitsChange, duration_text, parse_limits
from pgqueue.errors import ConfigError
from pgqueue.models import JobState
from pgqueue.ops.queues import KEEP


def test_like_pattern_takes_wildcards_literally() -> None:
    assert like_pattern("50%_off\\") == "%50\\%\\_off\\\\%"


def test_filter_parse_round_trips_and_names_bad_fields() -> None:
    flt = JobFilter.parse({"state": "discarded", "queue": " q ", "text": " boom ", "created_from": "2026-12-01T10:00"})
    assert flt.state is JobState.DISCARDED
    assert flt.queue == " q "  # names are exact
    assert flt.text == "boom"
    assert flt.created_from == datetime(2026, 12, 1, 10, 0, tzinfo=UTC)
    assert JobFilter.parse(flt.params()) == flt
    assert flt.narrows
    assert not JobFilter.parse({"state": "running"}).narrows
    for params, field in (
        ({"state": "nope"}, "state"),
        ({"created_to": "soon"}, "created_to"),
        ({"task": "x" * 301}, "task"),
        ({"text": "a\x00b"}, "text"),
    ):
        with pytest.raises(ConfigError, match=field):
            JobFilter.parse(params)


def test_page_query_scans_a_window_only_when_a_filter_narrows() -> None:
    plain = JobFilter.parse({"state": "completed"}).page_query(before=None, limit=50, scan_limit=1000, args_tasks=None)
    assert (plain.scan, plain.before, plain.state) == (50, 2**63 - 1, "completed")
    narrow = JobFilter.parse({"task": "t"}).page_query(before=7, limit=50, scan_limit=1000, args_tasks=["t"])
    assert (narrow.scan, narrow.before, narrow.args_tasks) == (1000, 7, ["t"])


def test_parse_before() -> None:
    assert parse_before("") is None
    assert parse_before("42") == 42
    for bad in ("-1", "1e3", "9" * 20, "4 2"):
        with pytest.raises(ConfigError, match="before"):
            parse_before(bad)


def test_settings_are_checked() -> None:
    with pytest.raises(ConfigError, match="schema"):
        DashboardConfig(dsn="x", schema="Bad-Schema")
    with pytest.raises(ConfigError, match="16 characters"):
        DashboardConfig(dsn="x", token="short")
    with pytest.raises(ConfigError, match="page_size"):
        DashboardConfig(dsn="x", page_size=0)
    with pytest.raises(ConfigError, match="failure_window"):
        DashboardConfig(dsn="x", failure_window=0)
    with pytest.raises(ConfigError, match="role prefix"):
        DashboardConfig(dsn="x", read_only=True, role_prefix="pg_x")
    with pytest.raises(ConfigError, match="basic auth"):
        DashboardConfig(dsn="x", basic_auth={"a:b": "c"})
    config = DashboardConfig(dsn="x", show_args=frozenset({"b", "a"}))
    assert config.args_visible("a")
    assert not config.args_visible("c")
    assert config.args_tasks() == ["a", "b"]
    assert DashboardConfig(dsn="x").args_tasks() == []
    assert DashboardConfig(dsn="x", show_args=True).args_tasks() is None
    assert DashboardConfig(dsn="x", read_only=True, role_prefix="app").inspector_role == "app_inspector"


def test_loopback_and_basic_auth_values() -> None:
    assert is_loopback("127.0.0.1")
    assert is_loopback("::1")
    assert is_loopback("localhost")
    assert not is_loopback("0.0.0.0")
    assert not is_loopback("dashboard.internal")
    assert parse_basic_auth("ops:pa:ss") == ("ops", "pa:ss")
    for bad in ("nopassword", ":x", "u:"):
        with pytest.raises(ConfigError, match="USER:PASSWORD"):
            parse_basic_auth(bad)


def test_charts_are_numbers_and_escaped_labels() -> None:
    points = [Point("<b>", (3.0, 1.0)), Point("12:01", (0.0, 0.0))]
    svg = bar_chart('a "title" <x>', points, ("completed", "discarded"))
    assert svg.startswith("<svg")
    assert "<b>" not in svg
    assert "&lt;b&gt;" in svg
    assert svg.count("<rect") == 2
    line = line_chart("rate", [Point("a", (50.0,)), Point("b", (0.0,))], "%", floor=5.0)
    assert "<polyline" in line
    assert ">50%<" in line
    assert bar_chart("empty", [], ("x",)).endswith("</svg>")


def test_formats() -> None:
    assert seconds(None) == "—"
    assert seconds(0.25) == "250 ms"
    assert seconds(90) == "90.0 s"
    assert seconds(3000) == "50.0 min"
    assert percent(0.123) == "12.3%"


class Form(dict[str, list[str]]):
    def getlist(self, key: str) -> list[str]:
        return self.get(key, [])


def test_limits_form_applies_what_changed_and_keeps_the_rest() -> None:
    shown = {"concurrency": ["2"], "concurrency_was": ["2"], "rate_limit": ["10"], "rate_limit_was": ["10"]}
    shown |= {"rate_period": ["1m"], "rate_period_was": ["1m"], "key_fifo": ["off"], "key_fifo_was": ["off"]}
    assert parse_limits(Form(shown)).empty
    change = parse_limits(Form({**shown, "concurrency": [" 5 "], "key_fifo": ["off", "on"]}))
    assert change == LimitsChange(concurrency=5, key_fifo=True)
    assert change.describe() == "concurrency 5, key FIFO on"
    assert parse_limits(Form({**shown, "rate_period": ["90s"]})).rate == (10, 90.0)
    assert parse_limits(Form({**shown, "rate_limit": ["none"], "rate_period": [""]})).rate is None
    # Posted without what the form showed (a script): every posted field is applied.
    assert parse_limits(Form({"concurrency": [""]})) == LimitsChange(concurrency=None)
    assert parse_limits(Form({})).key_rate is KEEP
    for bad in ("0", "-1", "1e3", "x"):
        with pytest.raises(ConfigError, match="positive whole number"):
            parse_limits(Form({"key_concurrency": [bad]}))
    with pytest.raises(ConfigError, match="longer than zero"):
        parse_limits(Form({"key_rate_limit": ["3"], "key_rate_period": ["0m"]}))


def test_duration_text_reads_back() -> None:
    for value, text in ((60, "1m"), (90, "1m30s"), (0.5, "0.5s"), (86_400, "1d"), (3_725, "1h2m5s"), (0.001, "0.001s")):
        assert duration_text(value) == text
        assert parse_duration(text).total_seconds() == pytest.approx(value)
    assert duration_text(None) == ""
