"""Results without a database: encoding a handler's return value (what is refused, and
why), the JobHandle as an id, and the errors a finished job's row turns into."""

from __future__ import annotations

import copy
import json
import math
import pickle
from typing import Any

import pytest

import pgqueue
from pgqueue._db.jobs import outcome_params
from pgqueue._db.results import ResultRow
from pgqueue.models import JobState, Outcome
from pgqueue.results.encode import DEFAULT_MAX_RESULT_BYTES, check_max_result_bytes, encode_result
from pgqueue.results.outcome import result_of, value_of

# -- encoding -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "value",
    [{"a": 1, "b": [1, 2.5, None, True]}, [1, "two"], "text with é and 😀", 0, -3.5, False, 2**62, {"": {}}],
)
def test_json_values_encode_to_what_json_decodes_back(value: Any) -> None:
    assert json.loads(encode_result("t", value, DEFAULT_MAX_RESULT_BYTES)) == value


def test_tuples_become_lists() -> None:
    assert json.loads(encode_result("t", (1, (2, 3)), 100)) == [1, [2, 3]]


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        ({1, 2}, "Object of type set is not JSON serializable"),
        (object(), "Object of type object is not JSON serializable"),
        (math.nan, "Out of range float values are not JSON compliant"),
        ({"x": math.inf}, "Out of range float values are not JSON compliant"),
        (b"bytes", "Object of type bytes is not JSON serializable"),
    ],
)
def test_values_that_are_not_json_are_refused_naming_the_problem(value: Any, problem: str) -> None:
    with pytest.raises(pgqueue.ResultError, match=r"task 'my\.task' returned a value that is not JSON") as info:
        encode_result("my.task", value, DEFAULT_MAX_RESULT_BYTES)
    assert problem in str(info.value)


def test_a_nul_character_is_refused_as_jsonb_cannot_store_it() -> None:
    with pytest.raises(pgqueue.ResultError, match="NUL character"):
        encode_result("t", {"s": "a\x00b"}, 1000)
    # A backslash followed by "u0000" is not a NUL character.
    assert json.loads(encode_result("t", "\\u0000", 1000)) == "\\u0000"


def test_a_lone_surrogate_is_refused() -> None:
    with pytest.raises(pgqueue.ResultError, match="not JSON"):
        encode_result("t", "\ud800", 1000)


def test_nesting_deeper_than_the_limit_is_refused() -> None:
    deep: Any = []
    for _ in range(150):
        deep = [deep]
    with pytest.raises(pgqueue.ResultError, match="nested more than 100 levels"):
        encode_result("t", deep, DEFAULT_MAX_RESULT_BYTES)
    very_deep: Any = []
    for _ in range(100_000):
        very_deep = [very_deep]
    with pytest.raises(pgqueue.ResultError, match="nested too deeply"):
        encode_result("t", very_deep, DEFAULT_MAX_RESULT_BYTES)


def test_the_size_cap_counts_utf8_bytes_and_names_the_setting() -> None:
    assert encode_result("t", "é" * 4, 10) == '"éééé"'  # 10 bytes: at the cap
    with pytest.raises(pgqueue.ResultError, match=r"returned 12 bytes of JSON, over the 11-byte limit") as info:
        encode_result("t", "é" * 5, 11)
    assert "App(max_result_bytes=...)" in str(info.value)


@pytest.mark.parametrize("bad", [0, -1, True, 1.5, "1", 65 * 1024 * 1024])
def test_max_result_bytes_is_checked(bad: Any) -> None:
    with pytest.raises(pgqueue.ConfigError, match="max_result_bytes"):
        check_max_result_bytes(bad)
    with pytest.raises(pgqueue.ConfigError, match="max_result_bytes"):
        pgqueue.App(dsn="postgresql://localhost/x", max_result_bytes=bad)


def test_outcome_json_is_unchanged_for_jobs_without_a_result() -> None:
    import uuid

    token = uuid.UUID(int=1)
    plain = json.loads(outcome_params([(1, token, Outcome(JobState.COMPLETED))])["outcomes"])
    assert plain == [{"id": 1, "token": str(token), "state": "completed", "delay": 0.0, "error": None}]
    with_result = json.loads(outcome_params([(2, token, Outcome(JobState.COMPLETED, result='{"a":1}'))])["outcomes"])
    assert with_result[0]["result"] == '{"a":1}'


# -- the handle -----------------------------------------------------------------------------


def test_a_handle_is_the_job_id_everywhere_code_uses_it() -> None:
    handle = pgqueue.JobHandle(42)
    assert handle == 42
    assert handle.id == 42
    assert type(handle.id) is int
    assert hash(handle) == hash(42)
    assert {42: "x"}[handle] == "x"
    assert str(handle) == "42"
    assert f"{handle}" == "42"
    assert "%d %s" % (handle, handle) == "42 42"  # noqa: UP031 - what older code does with an id
    assert repr(handle) == "JobHandle(42)"
    assert json.dumps({"job": handle}) == '{"job": 42}'
    assert handle + 1 == 43
    assert sorted([pgqueue.JobHandle(3), 1, pgqueue.JobHandle(2)]) == [1, 2, 3]
    assert isinstance(handle, int)


def test_a_handle_pickles_and_copies_as_a_plain_id() -> None:
    app = pgqueue.App(dsn="postgresql://localhost/x")
    handle = app.handle(7)
    for clone in (pickle.loads(pickle.dumps(handle)), copy.copy(handle), copy.deepcopy(handle)):
        assert clone == 7
        assert type(clone) is int


def test_an_unbound_handle_says_how_to_get_a_bound_one() -> None:
    with pytest.raises(TypeError, match=r"app\.handle\(job_id\)"):
        pgqueue.JobHandle(5).result(timeout=0)


@pytest.mark.parametrize("bad", [-1, math.nan, "1", True])
def test_timeouts_are_checked(bad: Any) -> None:
    app = pgqueue.App(dsn="postgresql://localhost/x")
    with pytest.raises(pgqueue.ConfigError, match="timeout"):
        app.handle(1).result(timeout=bad)


@pytest.mark.parametrize("bad", ["1", 1.0, True, None])
def test_job_ids_are_checked(bad: Any) -> None:
    app = pgqueue.App(dsn="postgresql://localhost/x")
    with pytest.raises(pgqueue.ConfigError, match="a job id is an int"):
        app.handle(bad)


# -- what a finished row becomes ------------------------------------------------------------


def test_a_completed_row_gives_its_decoded_result() -> None:
    assert value_of(ResultRow(1, "completed", '{"a": [1, 2]}', None, None)) == {"a": [1, 2]}
    assert value_of(ResultRow(1, "completed", None, None, None)) is None


@pytest.mark.parametrize(
    ("row", "state", "message"),
    [
        (
            ResultRow(3, "discarded", None, "builtins.RuntimeError", "boom"),
            "discarded",
            "job 3 was discarded: builtins.RuntimeError: boom",
        ),
        (ResultRow(4, "cancelled", None, None, None), "cancelled", "job 4 was cancelled: no error was recorded"),
        (
            ResultRow(5, "cancelled", None, "pgqueue.Expired", "expired: not started by its deadline X"),
            "cancelled",
            "job 5 expired (cancelled): pgqueue.Expired: expired: not started by its deadline X",
        ),
    ],
)
def test_a_failed_row_raises_job_failed_with_its_last_error(row: ResultRow, state: str, message: str) -> None:
    with pytest.raises(pgqueue.JobFailed) as info:
        value_of(row)
    error = info.value
    assert str(error) == message
    assert (error.job_id, error.state, error.error_type, error.error_message) == (
        row.id,
        state,
        row.error_type,
        row.error_message,
    )
    assert error.expired == (row.error_type == "pgqueue.Expired")
    assert isinstance(error, pgqueue.PgQueueError)


def test_a_live_or_missing_job_has_no_result_yet() -> None:
    with pytest.raises(pgqueue.JobNotFinishedError, match="job 9 has not finished: it is running") as info:
        result_of(9, [ResultRow(9, "running", None, None, None)])
    assert (info.value.job_id, info.value.state) == (9, "running")
    with pytest.raises(pgqueue.JobNotFoundError, match="no job with id 9"):
        result_of(9, [])


def test_a_result_timeout_is_a_timeout_error_and_a_not_finished_error() -> None:
    assert issubclass(pgqueue.ResultTimeout, TimeoutError)
    assert issubclass(pgqueue.ResultTimeout, pgqueue.JobNotFinishedError)
    error = pgqueue.JobFailed("x", job_id=1, state="discarded", error_type="T", error_message="m")
    clone = pickle.loads(pickle.dumps(error))
    assert (clone.job_id, clone.state, clone.error_type, str(clone)) == (1, "discarded", "T", "x")
