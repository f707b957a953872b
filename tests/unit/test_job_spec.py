"""The fast paths of building a job: new_spec() and the arguments' JSON encoder must give
exactly what JobSpec(...) and json.dumps would."""

from __future__ import annotations

import dataclasses
import enum
import json
import math
import subprocess
import sys
import textwrap
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from pgqueue import Unique, _enqueue
from pgqueue._db.enqueue import _Batch
from pgqueue.errors import InvalidArgumentsError
from pgqueue.models import JobSpec, new_spec


class Colour(enum.IntEnum):
    RED = 1


class Money(float):
    def __repr__(self) -> str:
        return "Money()"


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
        {"colour": Colour.RED, "money": Money(2.5), "pair": (1, "a"), "flag": True, "none": None},
        {"deep": {"a": {"b": [{"c": 1}]}}, "plain": 1},
    ],
)
def test_encoder_matches_json_dumps(args: dict[str, Any]) -> None:
    text = _enqueue.encode_args("t", args, 1 << 20)
    assert text == json.dumps(args, allow_nan=False, ensure_ascii=False, separators=(",", ":"))
    assert json.loads(text) == json.loads(json.dumps(args))


def test_encoder_refuses_cycles_and_non_finite_numbers_by_name() -> None:
    cyclic: dict[str, Any] = {}
    cyclic["self"] = cyclic
    with pytest.raises(InvalidArgumentsError, match="argument 'loop'"):
        _enqueue.encode_args("t", {"ok": 1, "loop": cyclic}, 1 << 20)
    with pytest.raises(InvalidArgumentsError, match="argument 'x'"):
        _enqueue.encode_args("t", {"x": math.nan}, 1 << 20)
    # The encoder holds no state between calls: a refused job does not taint the next one.
    assert _enqueue.encode_args("t", {"y": [1]}, 1 << 20) == '{"y":[1]}'


def test_a_cycle_is_refused_at_once_even_with_a_raised_recursion_limit() -> None:
    """A cycle must be caught by the encoder's memo, not by recursing: where an app has
    raised the recursion limit, recursing would overflow the C stack (the process dies)."""
    script = textwrap.dedent(
        """
        import sys, threading
        sys.setrecursionlimit(200_000)
        threading.stack_size(1 << 20)
        from pgqueue import _enqueue
        from pgqueue.errors import InvalidArgumentsError
        def run():
            wide = {f"k{i}": "x" for i in range(1000)}
            wide["self"] = wide
            for args in ({"loop": wide}, {"loop": [wide]}):
                try:
                    _enqueue.encode_args("t", args, 1 << 20)
                except InvalidArgumentsError as exc:
                    print("refused:", exc)
        t = threading.Thread(target=run)
        t.start()
        t.join()
        """
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.count("refused: task 't': argument 'loop'") == 2, done.stdout


@pytest.mark.parametrize("with_unique", [False, True])
def test_make_spec_puts_every_option_in_its_field(with_unique: bool) -> None:
    unique = Unique(period=60, states=["available", "scheduled"], mode="replace") if with_unique else None
    # Options that make_spec() passes through unchanged, each with a value of its own.
    same: dict[str, Any] = {
        "queue": "q1",
        "priority": 7,
        "run_at": datetime(2030, 1, 2, tzinfo=UTC),
        "delay": None,
        "unique_key": "uk",
        "max_attempts": 9,
        "concurrency_key": "ck",
        "expires_at": None,
        "depends_on": (),
    }
    spec = _enqueue.make_spec(
        "t.task", {"a": 1}, max_bytes=1 << 20, expires_in=timedelta(seconds=2.5), unique=unique, **same
    )
    expected = JobSpec(
        task="t.task",
        args_json='{"a":1}',
        expires_in=2.5,
        unique_period=60.0 if unique else None,
        unique_states=("available", "scheduled") if unique else None,
        unique_mode="replace" if unique else None,
        **same,
    )
    assert spec == expected
    delayed = _enqueue.make_spec(
        "t.task", {}, queue="q1", priority=0, run_at=None, delay=3, unique_key=None, max_attempts=None,
        max_bytes=1 << 20, expires_at=datetime(2031, 1, 1, tzinfo=UTC),
    )  # fmt: skip
    assert (delayed.run_at, delayed.delay, delayed.expires_at, delayed.expires_in) == (
        None,
        3.0,
        datetime(2031, 1, 1, tzinfo=UTC),
        None,
    )


def test_copy_rows_compute_run_at_state_and_wake_ups() -> None:
    now = datetime(2030, 5, 6, 7, 8, 9, 123456, tzinfo=UTC)

    def spec(
        queue: str, delay: float | None = None, run_at: datetime | None = None, expires_in: float | None = None
    ) -> JobSpec:
        return JobSpec(task="t", args_json="{}", queue=queue, run_at=run_at, delay=delay, expires_in=expires_in)

    batch = _Batch(now)
    rows = list(
        batch.rows(
            [
                spec("due-none"),
                spec("due-zero", delay=0.0),
                spec("due-negative", delay=-1.0),
                spec("later", delay=5.0, expires_in=10.0),
                spec("past", run_at=now - timedelta(hours=1)),
                spec("future", run_at=now + timedelta(hours=1)),
            ]
        )
    )
    got = [(r[2], r[4], r[5], r[6], r[9]) for r in rows]  # queue, run_at, scheduled_at, state, expires_at
    at = [
        now,
        now,
        now - timedelta(seconds=1),
        now + timedelta(seconds=5),
        now - timedelta(hours=1),
        now + timedelta(hours=1),
    ]
    assert got == [
        ("due-none", str(at[0]), str(at[0]), "available", None),
        ("due-zero", str(at[1]), str(at[1]), "available", None),
        ("due-negative", str(at[2]), str(at[2]), "available", None),
        ("later", str(at[3]), str(at[3]), "scheduled", at[3] + timedelta(seconds=10)),
        ("past", str(at[4]), str(at[4]), "available", None),
        ("future", str(at[5]), str(at[5]), "scheduled", None),
    ]
    assert batch.wake == {"due-none", "due-zero", "due-negative", "past"}
    assert batch.count == 6
