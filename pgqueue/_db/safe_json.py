"""Decoding job arguments on the worker's connections so that no row can take a worker down.

The Python API refuses arguments that a worker could not decode (too deep, integers past
Python's digit limit), but rows can also come from the SQL function, from a producer's
own INSERT, or from older versions. PostgreSQL's jsonb accepts nesting thousands of levels
deep and integers with thousands of digits; Python's ``json.loads`` raises on both. With
psycopg's default loader that exception escapes from the claim, after the claim committed:
the worker dies and the job is claimed again by the next one.

On the worker's connections, a value that cannot be decoded becomes an
:class:`UndecodableArgs` instead. The job then fails like any other, with an
:class:`UndecodableArgsError` naming the reason, and is discarded at once (retrying cannot
help); every other job of the batch runs normally.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from typing import Any, NoReturn

import psycopg
from psycopg.types.json import set_json_loads

from ..errors import UndecodableArgsError

__all__ = ["UndecodableArgs", "configure_connection", "loads"]


class UndecodableArgs(Mapping[str, Any]):
    """Stands in for arguments that could not be decoded; using them raises."""

    def __init__(self, reason: str) -> None:
        self.reason = reason

    def _fail(self) -> NoReturn:
        raise UndecodableArgsError(f"the job's arguments cannot be decoded: {self.reason}")

    def __getitem__(self, key: str) -> Any:
        self._fail()

    def __iter__(self) -> Iterator[str]:
        self._fail()

    def __len__(self) -> int:
        self._fail()

    def keys(self) -> Any:  # what f(**args) calls first
        self._fail()

    def __repr__(self) -> str:
        return f"<UndecodableArgs: {self.reason}>"


def loads(data: str | bytes) -> Any:
    try:
        return json.loads(data)
    except RecursionError:
        return UndecodableArgs("nested too deeply for Python's JSON decoder")
    except ValueError as exc:  # e.g. an integer past sys.get_int_max_str_digits()
        return UndecodableArgs(str(exc)[:200])


async def configure_connection(conn: psycopg.AsyncConnection[Any]) -> None:
    """Pool ``configure`` hook: decode json/jsonb on this connection with :func:`loads`."""
    set_json_loads(loads, conn)
