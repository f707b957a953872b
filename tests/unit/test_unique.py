"""pgqueue.Unique: its rules are checked where they are written, and keys derived from a
task and its arguments are canonical (argument order, handler defaults) and bounded."""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

import pytest

import pgqueue
from pgqueue import ConfigError, JobState, Unique
from pgqueue.unique import MAX_KEY


def test_defaults_depend_on_the_mode() -> None:
    keep = Unique()
    assert (keep.args, keep.period, keep.mode) == (None, None, "keep")
    assert keep.states == ("available", "scheduled", "running", "retryable")
    # replace and debounce change only waiting jobs: a running one does not hold the key.
    assert Unique(mode="replace").states == ("available", "scheduled", "retryable")
    assert Unique(mode="debounce").states == ("available", "scheduled", "retryable")


def test_values_are_normalised() -> None:
    rule = Unique(
        args=["b", "a", "b"], period=timedelta(minutes=2), states=[JobState.COMPLETED, "available"], mode="keep"
    )
    assert rule.args == ("a", "b")
    assert rule.period == 120.0
    assert rule.states == ("available", "completed")  # in lifecycle order, once each
    assert rule == Unique(args=("a", "b"), period=120, states=["completed", "available", "completed"])
    assert hash(rule) == hash(Unique(args=("a", "b"), period=120, states=["completed", "available"]))
    assert rule != Unique(args=("a", "b"), period=121, states=["completed", "available"])
    assert "period=120.0" in repr(rule)


@pytest.mark.parametrize(
    ("kwargs", "problem"),
    [
        ({"mode": "latest"}, "mode=...) must be one of keep, replace, debounce"),
        ({"period": 0}, "period=...) must be positive"),
        ({"period": -5}, "period=...) must be positive"),
        ({"period": float("nan")}, "period=...) must be positive"),
        ({"period": float("inf")}, "period=...) must be positive"),
        ({"period": 11 * 365 * 86400}, "up to ten years"),
        ({"period": timedelta(0)}, "period=...) must be positive"),
        ({"period": True}, "period=...) must be positive"),
        ({"period": "1h"}, "period=...) must be positive"),
        ({"states": ["waiting"]}, "unknown state 'waiting'"),
        ({"states": []}, "at least one state"),
        ({"states": "available"}, "must be a list of states"),
        ({"states": ["completed"]}, "needs a period"),
        ({"states": ["available", "discarded"], "mode": "replace"}, "needs a period"),
        ({"args": "customer_id"}, "must be a list of argument names"),
        ({"args": [""]}, "must name arguments by their names"),
        ({"args": [3]}, "must name arguments by their names"),
    ],
)
def test_bad_rules_are_one_clear_error(kwargs: dict[str, Any], problem: str) -> None:
    with pytest.raises(ConfigError, match="Unique") as info:
        Unique(**kwargs)
    assert problem in str(info.value)


def test_finished_states_with_a_period_are_fine() -> None:
    rule = Unique(states=[*JobState], period=3600)
    assert rule.states == tuple(s.value for s in JobState)


def test_key_from_chosen_arguments_is_canonical() -> None:
    rule = Unique(args=["customer_id", "region"])
    key = rule.key_for("reports.build", {"region": "eu", "customer_id": 42, "day": "mon"})
    assert key == 'reports.build:{"customer_id":42,"region":"eu"}'
    # Argument order and arguments outside the rule change nothing; values do.
    assert rule.key_for("reports.build", {"customer_id": 42, "region": "eu", "day": "tue"}) == key
    assert rule.key_for("reports.build", {"customer_id": 43, "region": "eu"}) != key
    assert rule.key_for("reports.other", {"customer_id": 42, "region": "eu"}) != key  # per task
    # An argument left out reads as the handler's default (else null).
    assert rule.key_for("reports.build", {"customer_id": 42}, {"region": "eu"}) == key
    assert rule.key_for("reports.build", {"customer_id": 42}) == 'reports.build:{"customer_id":42,"region":null}'


def test_key_from_all_arguments_fills_in_defaults() -> None:
    rule = Unique()
    full = rule.key_for("t", {"a": 1, "b": [1, {"y": 2, "x": 1}]})
    assert full == 't:{"a":1,"b":[1,{"x":1,"y":2}]}'
    # f(a=1) and f(a=1, b=default) are the same call, so the same key.
    assert rule.key_for("t", {"a": 1}, {"b": 2}) == rule.key_for("t", {"a": 1, "b": 2})
    assert Unique(args=[]).key_for("t", {"a": 1}) == "t:{}"  # the task alone


def test_long_keys_are_hashed_into_the_column_limit() -> None:
    rule = Unique()
    long_args = {"text": "x" * 500}
    key = rule.key_for("t" * 200, long_args)
    assert len(key) <= MAX_KEY
    assert key.startswith("t" * 100 + ":sha256:")
    assert key == rule.key_for("t" * 200, dict(long_args))
    assert key != rule.key_for("t" * 200, {"text": "x" * 499})
    # Unicode keeps its characters (length is counted in characters, like the CHECK).
    short = rule.key_for("t", {"name": "é" * 50})
    assert json.loads(short.split(":", 1)[1]) == {"name": "é" * 50}


# -- on a task ----------------------------------------------------------------------------


def test_a_task_refuses_rules_naming_arguments_it_does_not_take() -> None:
    app = pgqueue.App()

    with pytest.raises(ConfigError, match=r"Unique\(args=...\) names 'customer'.*handler does not take"):

        @app.task(name="t.bad", unique=Unique(args=["customer"]))
        def bad(customer_id: int) -> None: ...

    @app.task(name="t.good", unique=Unique(args=["customer_id"]))
    def good(customer_id: int) -> None: ...

    with pytest.raises(ConfigError, match="names 'nope'"):
        good.options(unique=Unique(args=["nope"]))
    with pytest.raises(ConfigError, match=r"must be a pgqueue\.Unique"):
        good.options(unique="yes")  # type: ignore[arg-type]

    # A handler taking **kwargs may get any argument.
    @app.task(name="t.any", unique=Unique(args=["whatever"]))
    def any_args(**kwargs: Any) -> None: ...

    assert any_args.unique == Unique(args=["whatever"])


def test_task_jobs_carry_the_rules_and_the_derived_key() -> None:
    app = pgqueue.App()

    @app.task(name="t.report", unique=Unique(args=["customer_id"], period=600))
    def report(customer_id: int, day: str = "mon") -> None: ...

    spec = report.job(customer_id=7, day="tue")
    assert spec.unique_key == 't.report:{"customer_id":7}'
    assert (spec.unique_period, spec.unique_states, spec.unique_mode) == (
        600.0,
        ("available", "scheduled", "running", "retryable"),
        "keep",
    )
    # Per enqueue: another rule, an explicit key, or none at all.
    other = report.options(unique=Unique(mode="debounce")).job(customer_id=7)
    assert other.unique_key == 't.report:{"customer_id":7,"day":"mon"}'
    assert other.unique_mode == "debounce"
    named = report.options(unique_key="daily-7").job(customer_id=7)
    assert (named.unique_key, named.unique_period) == ("daily-7", 600.0)
    plain = report.options(unique=False).job(customer_id=7)
    assert (plain.unique_key, plain.unique_mode) == (None, None)
    assert not plain.unique_rules


def test_unique_key_alone_keeps_its_meaning() -> None:
    app = pgqueue.App()

    @app.task(name="t.plain")
    def plain(n: int) -> None: ...

    spec = plain.options(unique_key="k").job(n=1)
    assert (spec.unique_key, spec.unique_mode, spec.unique_states, spec.unique_period) == ("k", None, None, None)
