"""The loader of sql/queries: named blocks, shared fragments, schema binding. No database."""

from __future__ import annotations

import pytest

from pgqueue._db.sql import _parse_queries, _raw_queries, _splice, queries_for

FILE = """-- A file header comment.

-- fragment: tail
-- shared by two queries
RETURNING id

-- name: first
-- what it does
UPDATE {schema}.t SET a = 1
-- include: tail

-- name: second
DELETE FROM {schema}.t
    -- include: tail
"""


def test_fragments_are_spliced_where_a_query_includes_them() -> None:
    queries, fragments = _parse_queries(FILE, "f.sql")
    assert set(queries) == {"first", "second"}
    assert fragments == {"tail": "RETURNING id"}
    assert _splice("first", queries["first"], fragments) == "UPDATE {schema}.t SET a = 1\nRETURNING id"
    assert _splice("second", queries["second"], fragments) == "DELETE FROM {schema}.t\nRETURNING id"


def test_an_unknown_fragment_is_an_error_naming_it() -> None:
    queries, fragments = _parse_queries("-- name: q\nSELECT 1\n-- include: nope\n", "f.sql")
    with pytest.raises(RuntimeError, match="q includes an unknown fragment 'nope'"):
        _splice("q", queries["q"], fragments)


@pytest.mark.parametrize(
    ("text", "error"),
    [
        ("-- name: q\n-- only a comment\n", "name q in f.sql is empty"),
        ("-- name: q\nSELECT 1\n-- fragment: q\nSELECT 2\n", "q defined twice in f.sql"),
    ],
)
def test_empty_or_duplicate_blocks_are_refused(text: str, error: str) -> None:
    with pytest.raises(RuntimeError, match=error):
        _parse_queries(text, "f.sql")


def test_the_shipped_queries_have_no_include_left_and_bind_a_quoted_schema() -> None:
    assert all("-- include:" not in text for text in _raw_queries().values())
    claim = queries_for("my_schema")["job_claim_one_queue"].decode()
    assert 'UPDATE "my_schema".jobs_live AS j' in claim
    assert "RETURNING j.id, j.queue" in claim
