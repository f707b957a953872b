"""Jinja2 filters: times, durations, numbers and JSON as the pages print them."""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from typing import Any

from jinja2 import Environment

from ..ops import jsonable
from .limits import duration_text

__all__ = ["install_filters"]


def when(value: datetime | None) -> str:
    """UTC, to the second: every time on the dashboard is the database's."""
    if value is None:
        return "—"
    return value.strftime("%Y-%m-%d %H:%M:%S") if value.utcoffset() in (None, timedelta(0)) else value.isoformat()


def seconds(value: float | timedelta | None) -> str:
    if value is None:
        return "—"
    s = value.total_seconds() if isinstance(value, timedelta) else float(value)
    if abs(s) < 1:
        return f"{s * 1000:.0f} ms"
    if abs(s) < 120:
        return f"{s:.1f} s"
    if abs(s) < 7200:
        return f"{s / 60:.1f} min"
    if abs(s) < 172_800:
        return f"{s / 3600:.1f} h"
    return f"{s / 86400:.1f} d"


def between(start: datetime | None, end: datetime | None) -> str:
    if start is None or end is None:
        return "—"
    return seconds(end - start)


def number(value: int | float | None) -> str:
    if value is None:
        return "—"
    return f"{value:,}" if isinstance(value, int) else f"{value:,.2f}"


def percent(value: float | None) -> str:
    return "—" if value is None else f"{100 * value:.1f}%"


def pretty_json(value: Any) -> str:
    return json.dumps(jsonable(value), indent=2, ensure_ascii=False, sort_keys=True)


def install_filters(env: Environment) -> None:
    env.filters.update(
        when=when,
        seconds=seconds,
        between=between,
        number=number,
        percent=percent,
        pretty_json=pretty_json,
        duration=duration_text,
    )
    env.autoescape = True
