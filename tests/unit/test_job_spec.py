"""The fast paths of building a job: new_spec() and the arguments' JSON encoder must give
exactly what JobSpec(...) and json.dumps would."""

from __future__ import annotations

import dataclasses
import json
import math
from datetime import UTC, datetime
from typing import Any

import pytest

from pgqueue import _enqueue
from pgqueue.errors import InvalidArgumentsError
from pgqueue.models import JobSpec, new_spec


def _distinct_values() -> dict[str, Any]:
    """A different value for every field, so that two fields swapped cannot compare equal."""
    return {
        "task": "t.task",
        "args_json": '{"a":1}',
        "queue": "q1",
        "priority": 7,
        "run_at": datetime(2030, 1, 2, tzinfo=UTC),
        "delay": 1.5,
        "unique_key": "uk",
        "max_attempts": 9,
        "concurrency_key": "ck",
        "expires_at": datetime(2031, 3, 4, tzinfo=UTC),
        "expires_in": 2.5,
        "unique_period": 3.5,
        "unique_states": ("available",),
        "unique_mode": "skip",
        "depends_on": ((11, "run"),),
    }


def test_new_spec_fills_every_field_like_the_dataclass() -> None:
    values = _distinct_values()
    assert [f.name for f in dataclasses.fields(JobSpec)] == list(values), "a field was added: extend new_spec()"
    fast = new_spec(*values.values())
    assert fast == JobSpec(**values)
    assert {name: getattr(fast, name) for name in values} == values


def test_new_spec_builds_a_frozen_spec() -> None:
    spec = new_spec(*_distinct_values().values())
    with pytest.raises(dataclasses.FrozenInstanceError):
        spec.queue = "other"  # type: ignore[misc]
    assert hash(spec) == hash(JobSpec(**_distinct_values()))


@pytest.mark.parametrize(
    "args",
    [
        {},
        {"k": "x", "t": 1.5},
        {"nested": {"list": [1, 2.25, None, True, False, "é", "\u2603"], "deep": [[[]]]}},
        {"big": 10**30, "neg": -0.0, "s": 'quote " and \\ backslash', "ctl": "\n\t\x01"},
    ],
)
def test_encoder_matches_json_dumps(args: dict[str, Any]) -> None:
    text = _enqueue.encode_args("t", args, 1 << 20)
    assert text == json.dumps(args, allow_nan=False, ensure_ascii=False, separators=(",", ":"))
    assert json.loads(text) == args


def test_encoder_refuses_cycles_and_non_finite_numbers_by_name() -> None:
    cyclic: dict[str, Any] = {}
    cyclic["self"] = cyclic
    with pytest.raises(InvalidArgumentsError, match="argument 'loop'"):
        _enqueue.encode_args("t", {"ok": 1, "loop": cyclic}, 1 << 20)
    with pytest.raises(InvalidArgumentsError, match="argument 'x'"):
        _enqueue.encode_args("t", {"x": math.nan}, 1 << 20)
    # The encoder holds no state between calls: a refused job does not taint the next one.
    assert _enqueue.encode_args("t", {"y": [1]}, 1 << 20) == '{"y":[1]}'
