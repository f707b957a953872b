"""Shared pieces of the command line: options, error handling, connections, consoles.

Each command group lives in its own ``cli_*`` module and registers on :data:`app`.
"""

from __future__ import annotations

import sys
import traceback
from collections.abc import Callable
from typing import Annotated, Any, TypeVar

import psycopg
import typer
from rich.console import Console
from rich.markup import escape

from .. import _dsn
from ..errors import DatabaseUnavailableError, PgQueueError
from ..runner.loader import AppImportError

__all__ = [
    "STATE_STYLE",
    "DsnOpt",
    "SchemaOpt",
    "app",
    "connect",
    "console",
    "database",
    "err",
    "fail",
    "guard",
    "settings",
]

app = typer.Typer(
    name="pgqueue",
    help="pgqueue: a transactional job queue and cron scheduler on PostgreSQL.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
console = Console()
err = Console(stderr=True)

# No envvar=: the command itself reads $PGQUEUE_DSN, so that it can say where the DSN came from.
DsnOpt = Annotated[
    str | None,
    typer.Option(
        "--dsn",
        help="PostgreSQL connection string (default: $PGQUEUE_DSN, else the embedded server).",
        show_default=False,
    ),
]
SchemaOpt = Annotated[str, typer.Option("--schema", envvar="PGQUEUE_SCHEMA", help="Schema holding pgqueue's tables.")]
T = TypeVar("T")


class Settings:
    """Global options, set by the top-level callback before any command runs."""

    traceback: bool = False  #: ``pgqueue --traceback``: print full tracebacks of errors


settings = Settings()


def fail(message: str, code: int = 1) -> typer.Exit:
    err.print(f"[bold red]error:[/] {escape(message)}", highlight=False, soft_wrap=True)
    return typer.Exit(code)


def guard(fn: Callable[[], T]) -> T:
    """Run ``fn``, turning expected failures into one line and a non-zero exit."""
    try:
        return fn()
    except AppImportError as exc:
        raise _failed(exc, str(exc), exc.user_frames) from None
    except PgQueueError as exc:
        raise _failed(exc, str(exc)) from None
    except psycopg.OperationalError as exc:
        if exc.sqlstate is not None:  # the server refused a statement (lock or statement timeout, ...)
            raise _failed(exc, f"database error: {str(exc).strip().splitlines()[0]}") from None
        raise _failed(exc, str(DatabaseUnavailableError.from_exc(exc))) from None  # lost after connecting
    except psycopg.Error as exc:
        raise _failed(exc, f"database error: {str(exc).strip().splitlines()[0]}") from None


def _failed(exc: BaseException, message: str, user_frames: str = "") -> typer.Exit:
    """The one error line; before it the full traceback with ``--traceback``, after it the
    user's own frames (if any) and how to see the rest."""
    if settings.traceback:
        sys.stderr.write("".join(traceback.format_exception(exc)))
        sys.stderr.flush()
        return fail(message)
    exit_ = fail(message)
    if user_frames:
        sys.stderr.write(user_frames)
        sys.stderr.write("(`pgqueue --traceback COMMAND ...` prints the full traceback)\n")
    return exit_


def database(dsn: str | None) -> _dsn.Database:
    """The database a command uses: ``--dsn``, else ``$PGQUEUE_DSN``, else the embedded server.

    Unless ``--dsn`` named it, one line on stderr says which database and why.
    """
    db = _dsn.resolve_database(dsn)
    _dsn.announce(db)
    return db


def connect(dsn: str | None) -> psycopg.Connection[Any]:
    return _dsn.open_connection(database(dsn))


#: How every command colours a job state.
STATE_STYLE = {
    "available": "cyan",
    "scheduled": "blue",
    "running": "yellow",
    "retryable": "magenta",
    "completed": "green",
    "discarded": "red",
    "cancelled": "dim",
}
