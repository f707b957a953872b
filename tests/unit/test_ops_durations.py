"""The durations the operations commands take (``--older-than 7d``), parsed without a database."""

from __future__ import annotations

from datetime import timedelta

import pytest

import pgqueue
from pgqueue import ops


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("7d", 604800), ("12h", 43200), ("90m", 5400), ("30s", 30), ("1d12h", 129600), ("2w", 1209600), ("1.5h", 5400)],
)
def test_parse_duration(text: str, seconds: float) -> None:
    assert ops.parse_duration(text) == timedelta(seconds=seconds)


@pytest.mark.parametrize("text", ["", "7", "d", "7x", "-1d", "7d junk", "1h-"])
def test_parse_duration_rejects(text: str) -> None:
    with pytest.raises(pgqueue.ConfigError, match="invalid duration"):
        ops.parse_duration(text)
