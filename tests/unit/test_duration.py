"""The one duration grammar: <number><unit> parts (s, m, h, d, w), units required;
``forever`` only where the option allows it (retention)."""

from __future__ import annotations

from datetime import timedelta

import pytest

from pgqueue import ops
from pgqueue._duration import GRAMMAR, parse_duration, parse_retention
from pgqueue.errors import ConfigError


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("90s", 90),
        ("15m", 900),
        ("36h", 129_600),
        ("14d", 1_209_600),
        ("2w", 1_209_600),
        ("1d12h", 129_600),
        ("1h30m", 5_400),
        ("1.5h", 5_400),
        ("0s", 0),
        (" 7d ", 604_800),
        ("7D", 604_800),
    ],
)
def test_grammar(text: str, seconds: float) -> None:
    assert parse_duration(text) == timedelta(seconds=seconds)
    assert ops.parse_duration(text) == timedelta(seconds=seconds)  # the operations API shares it


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("3", "needs a unit, e.g. 3s or 3d"),
        ("1.5", "needs a unit, e.g. 1.5s or 1.5d"),
        ("1d12", "'12' at the end needs a unit"),
        ("", "empty"),
        ("   ", "empty"),
        ("3 days", "not a duration"),
        ("1d 12h", "not a duration"),
        ("7x", "not a duration"),
        ("-1d", "not a duration"),
        ("d", "not a duration"),
        ("7d junk", "not a duration"),
        ("forever", "'forever' is not accepted here"),
        ("9" * 400 + "w", "too long"),
    ],
)
def test_errors_name_the_option_the_value_and_the_grammar(text: str, problem: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_duration(text, option="--older-than")
    message = str(info.value)
    assert message.startswith(f"--older-than: invalid duration {text!r}: {problem}"), message
    assert GRAMMAR in message


def test_retention_accepts_forever_and_returns_seconds() -> None:
    assert parse_retention("forever") == 0.0  # WorkerConfig's "keep forever"
    assert parse_retention(" Forever ") == 0.0
    assert parse_retention("1d12h") == 129_600.0
    assert parse_retention("90s") == 90.0


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("3", "needs a unit, e.g. 3s or 3d"),  # used to mean 3 seconds, silently
        ("0", "needs a unit"),
        ("0s", "must be longer than zero (use 'forever' to keep jobs forever)"),
        ("never", "not a duration"),
    ],
)
def test_retention_errors(text: str, problem: str) -> None:
    with pytest.raises(ConfigError, match=r"^--retention-completed: invalid duration") as info:
        parse_retention(text, option="--retention-completed")
    assert problem in str(info.value)
