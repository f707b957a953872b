"""Loads the SQL in ``sql/`` (the single source of truth) and binds it to a schema.

Queries live in ``sql/queries/*.sql`` as ``-- name: NAME`` blocks; a ``-- fragment: NAME``
block is a piece several queries share, spliced in where a query says ``-- include: NAME``.
Migrations live in ``sql/migrations/NNNN_name.sql``. Both use ``{schema}``-style placeholders that are filled
with :mod:`psycopg.sql` objects, so a schema name can never change a statement's meaning.
In a wheel the files ship as ``pgqueue/_sql``; in a source checkout they are read from
the repository's top-level ``sql/`` folder.
"""

from __future__ import annotations

import functools
import re
import string
from collections.abc import Mapping
from dataclasses import dataclass
from importlib import resources
from importlib.resources.abc import Traversable
from pathlib import Path
from typing import Literal

from psycopg import sql

from ..errors import ConfigError

__all__ = [
    "LockPurpose",
    "Migration",
    "Queries",
    "channel_name",
    "load_migrations",
    "lock_name",
    "queries_for",
    "results_channel_name",
    "sql_root",
    "validate_schema",
]

_NAME_LINE = re.compile(r"^-- (name|fragment): ([a-z_][a-z0-9_]*)\s*$", re.MULTILINE)
_INCLUDE_LINE = re.compile(r"^[ \t]*-- include: ([a-z_][a-z0-9_]*)\s*$", re.MULTILINE)
_MIGRATION_FILE = re.compile(r"^(\d{4})_([a-z0-9_]+)\.sql$")
_SCHEMA_NAME = re.compile(r"^[a-z_][a-z0-9_]{0,47}$")


def validate_schema(schema: str) -> str:
    """Return ``schema`` if it is a safe schema name, else raise :class:`ConfigError`."""
    if not isinstance(schema, str) or not _SCHEMA_NAME.fullmatch(schema):
        raise ConfigError(
            f"invalid schema name {schema!r}: use 1-48 lowercase letters, digits or _, not starting with a digit"
        )
    return schema


def channel_name(schema: str) -> str:
    """The LISTEN/NOTIFY channel of a schema (payloads carry only a queue name)."""
    return f"{validate_schema(schema)}_wakeup"


def results_channel_name(schema: str) -> str:
    """The channel on which finishing an awaited job is announced (empty payload)."""
    return f"{validate_schema(schema)}_results"


#: What an advisory lock serialises; each has its own key per schema.
LockPurpose = Literal["migrate", "partitions", "maintenance", "vacuum", "cron", "limit"]


def lock_name(purpose: LockPurpose, schema: str) -> str:
    """The one source of advisory-lock keys: SQL locks ``hashtextextended(<this>, 0)``.

    The names are ``pgqueue.migrate:<schema>`` (migrations), ``pgqueue.partitions:<schema>``
    (creating and dropping day partitions), ``pgqueue.maintenance:<schema>`` (the tick),
    ``pgqueue.vacuum:<schema>`` (vacuuming the live partition), ``pgqueue.cron:<schema>``
    (materialising cron ticks) and ``pgqueue.limit:<schema>`` (a prefix: the limited claim
    locks ``pgqueue.limit:<schema>:q:<queue>`` and ``...:t:<task>`` for each controlled
    scope it may start jobs of).
    """
    return f"pgqueue.{purpose}:{validate_schema(schema)}"


def sql_root() -> Traversable:
    """The folder holding ``migrations/`` and ``queries/``."""
    packaged = resources.files("pgqueue") / "_sql"
    if packaged.is_dir():
        return packaged
    source = Path(__file__).resolve().parents[2] / "sql"  # a source checkout: <repo>/sql
    if source.is_dir():
        return source
    raise FileNotFoundError("pgqueue's SQL files are missing from this installation")


def _placeholders(schema: str) -> dict[str, sql.Composable]:
    ident = sql.Identifier(validate_schema(schema))
    return {
        "schema": ident,
        "channel": sql.Literal(channel_name(schema)),
        "channel_ident": sql.Identifier(channel_name(schema)),
        "results_channel": sql.Literal(results_channel_name(schema)),
        "results_channel_ident": sql.Identifier(results_channel_name(schema)),
        "id_seq": sql.Literal(f'"{schema}".jobs_id_seq'),
    }


_FIXED = frozenset(_placeholders("pgqueue"))


def _fields(text: str) -> set[str]:
    return {field for _, field, _, _ in string.Formatter().parse(text) if field}


def _bind(text: str, schema: str) -> sql.Composed:
    # The text comes from our own package files, never from users.
    return sql.SQL(text).format(**_placeholders(schema))


@dataclass(frozen=True)
class Migration:
    version: int
    name: str
    text: str

    def bound(self, schema: str) -> sql.Composed:
        return _bind(self.text, schema)


def load_migrations() -> list[Migration]:
    found: list[Migration] = []
    for entry in (sql_root() / "migrations").iterdir():
        match = _MIGRATION_FILE.match(entry.name)
        if match:
            found.append(Migration(int(match[1]), match[2], entry.read_text("utf-8")))
    found.sort(key=lambda m: m.version)
    versions = [m.version for m in found]
    if len(set(versions)) != len(versions):
        raise RuntimeError(f"duplicate migration versions in {versions}")
    return found


def _statement(body: str) -> str:
    """A block's SQL without its comment lines (``-- include:`` lines are kept)."""
    keep = [ln for ln in body.strip().splitlines() if _INCLUDE_LINE.match(ln) or not ln.lstrip().startswith("--")]
    return "\n".join(keep).strip()


def _parse_queries(text: str, origin: str) -> tuple[dict[str, str], dict[str, str]]:
    """The ``(queries, fragments)`` of one file, by name; includes not yet spliced."""
    parts = _NAME_LINE.split(text)
    queries: dict[str, str] = {}
    fragments: dict[str, str] = {}
    for kind, name, body in zip(parts[1::3], parts[2::3], parts[3::3], strict=True):
        statement = _statement(body)
        if not statement:
            raise RuntimeError(f"{kind} {name} in {origin} is empty")
        if name in queries or name in fragments:
            raise RuntimeError(f"{name} defined twice in {origin}")
        (queries if kind == "name" else fragments)[name] = statement
    return queries, fragments


def _splice(name: str, text: str, fragments: Mapping[str, str]) -> str:
    def include(match: re.Match[str]) -> str:
        if match[1] not in fragments:
            raise RuntimeError(f"query {name} includes an unknown fragment {match[1]!r}")
        return fragments[match[1]]

    return _INCLUDE_LINE.sub(include, text)


@functools.cache
def _raw_queries() -> dict[str, str]:
    queries: dict[str, str] = {}
    fragments: dict[str, str] = {}
    for entry in sorted((sql_root() / "queries").iterdir(), key=lambda e: e.name):
        if entry.name.endswith(".sql"):
            file_queries, file_fragments = _parse_queries(entry.read_text("utf-8"), entry.name)
            for name in (*file_queries, *file_fragments):
                if name in queries or name in fragments:
                    raise RuntimeError(f"{name} defined in two files")
            queries.update(file_queries)
            fragments.update(file_fragments)
    return {name: _splice(name, text, fragments) for name, text in queries.items()}


class Queries:
    """Every named query, rendered once for one schema.

    Rendering to a plain string up front keeps the hot path free of composition work and
    lets psycopg prepare each statement once per connection.
    """

    def __init__(self, schema: str) -> None:
        self.schema = validate_schema(schema)
        raw = _raw_queries()
        #: Queries naming objects beyond the schema's own (a partition, a role) are bound
        #: per call by :meth:`compose`; all others are rendered here, once.
        self._templates = {name: text for name, text in raw.items() if _fields(text) - _FIXED}
        self._text: dict[str, bytes] = {
            name: _bind(text, schema).as_bytes(None) for name, text in raw.items() if name not in self._templates
        }

    def __getitem__(self, name: str) -> bytes:
        return self._text[name]

    def compose(
        self,
        name: str,
        identifiers: Mapping[str, str] | None = None,
        literals: Mapping[str, object] | None = None,
    ) -> sql.Composed:
        """A query naming further objects: ``identifiers`` are quoted as names and
        ``literals`` as constants (only for statements that cannot take parameters)."""
        extra: dict[str, sql.Composable] = {k: sql.Identifier(v) for k, v in (identifiers or {}).items()}
        extra.update({k: sql.Literal(v) for k, v in (literals or {}).items()})
        return sql.SQL(self._templates[name]).format(**_placeholders(self.schema), **extra)

    def names(self) -> list[str]:
        return sorted([*self._text, *self._templates])


@functools.cache
def queries_for(schema: str) -> Queries:
    return Queries(schema)
