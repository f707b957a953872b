"""Which database: one resolution order, a password-free display, one way to connect.

Order: an explicit DSN (``--dsn``, ``App(dsn=...)``), else ``$PGQUEUE_DSN``, else the
embedded server. Every entry point resolves through :func:`resolve_database`, so the
worker, the CLI and every hint agree on the database in use.
"""

from __future__ import annotations

import os
import shlex
import sys
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, urlencode

import psycopg
from psycopg.conninfo import conninfo_to_dict, make_conninfo, timeout_from_conninfo

from .errors import ConfigError, DatabaseUnavailableError

__all__ = [
    "DEFAULT_CONNECT_TIMEOUT",
    "ENV_VAR",
    "FROM_APP",
    "FROM_EMBEDDED",
    "FROM_ENV",
    "FROM_OPTION",
    "Database",
    "announce",
    "announced_by_parent",
    "display_dsn",
    "migrate_hint",
    "open_connection",
    "resolve_database",
    "server_address",
]

ENV_VAR = "PGQUEUE_DSN"
DEFAULT_CONNECT_TIMEOUT = 10  # seconds, unless the DSN or $PGCONNECT_TIMEOUT says otherwise

# Where a DSN came from, as the one-line notice says it.
FROM_OPTION = "--dsn"
FROM_APP = "App(dsn=…)"
FROM_ENV = "$PGQUEUE_DSN"
FROM_EMBEDDED = "embedded server"

_SECRET_KEYS = frozenset({"password", "sslpassword"})
_URL_KEYS = ("user", "password", "host", "port", "dbname")


@dataclass(frozen=True)
class Database:
    """A resolved connection string and where it came from (one of the ``FROM_*``)."""

    dsn: str
    source: str

    @property
    def display(self) -> str:
        """The DSN as it may be printed or logged: never with its password."""
        return display_dsn(self.dsn)

    def describe(self) -> str:
        return f"database {self.display} (from {self.source})"


def resolve_database(dsn: str | None, *, source: str = FROM_OPTION) -> Database:
    """The database to use: ``dsn`` (given by ``source``), else ``$PGQUEUE_DSN``, else embedded.

    Starting the embedded server is the last resort, and the only side effect.

    Raises:
        ConfigError: the DSN is not a valid connection string (the message says which one).
        DatabaseUnavailableError: the embedded server is needed but cannot start.
    """
    if dsn:
        return Database(_checked(dsn, source), source)
    env = os.environ.get(ENV_VAR)
    if env:
        return Database(_checked(env, FROM_ENV), FROM_ENV)
    from .embedded import embedded_dsn

    return Database(embedded_dsn(announce=False), FROM_EMBEDDED)


def _checked(dsn: str, source: str) -> str:
    try:
        conninfo_to_dict(dsn)
    except psycopg.ProgrammingError as exc:
        raise ConfigError(f"the DSN from {source} is not a valid PostgreSQL connection string: {exc}") from None
    return dsn


_announced: set[Database] = set()


def announce(db: Database) -> None:
    """Say on stderr which database is used, once per process, unless ``--dsn`` named it."""
    if db.source == FROM_OPTION or db in _announced:
        return
    _announced.add(db)
    line = f"pgqueue: {db.describe()}"
    if db.source == FROM_EMBEDDED:
        from .embedded import last_announcement

        # Started or reused, where its data lives, how to stop it: one line.
        line = (last_announcement() or line) + "; set PGQUEUE_DSN to use your own database"
    print(line, file=sys.stderr, flush=True)


def announced_by_parent(db: Database) -> None:
    """Keep :func:`announce` quiet about ``db`` in a worker process its parent announced."""
    _announced.add(db)


# -- display ------------------------------------------------------------------------------


def display_dsn(dsn: str, *, password: bool = True) -> str:
    """``dsn`` as a ``postgresql://`` URL with any password masked as ``***``.

    ``password=False`` leaves the password out altogether, for a command to copy (``psql``
    then asks for it, ``pgqueue`` reads ``$PGPASSWORD`` or ``~/.pgpass``).
    """
    try:
        params = conninfo_to_dict(dsn)
    except psycopg.ProgrammingError:
        return "(an invalid connection string)"  # never echo it: it may hold a password
    if not password:
        params.pop("password", None)
    return _render(params)


def _render(params: dict[str, Any]) -> str:
    user = str(params.get("user") or "")
    password = "***" if params.get("password") else ""
    host = str(params.get("host") or "")
    port = str(params.get("port") or "")
    dbname = str(params.get("dbname") or "")
    query = {k: str(v) for k, v in params.items() if k not in _URL_KEYS and k not in _SECRET_KEYS}
    netloc = ""
    if host.startswith("/"):  # a socket directory: URLs carry it as a parameter
        query = {"host": host, **({"port": port} if port else {}), **query}
    elif host:
        hosts = host.split(",")
        ports = port.split(",") if port else []
        if len(ports) == 1:
            ports *= len(hosts)
        netloc = ",".join(
            (f"[{h}]" if ":" in h else h) + (f":{ports[i]}" if i < len(ports) and ports[i] else "")
            for i, h in enumerate(hosts)
        )
    elif port:
        query = {"port": port, **query}
    if user or password:
        netloc = quote(user, safe="") + (f":{password}" if password else "") + "@" + netloc
    url = f"postgresql://{netloc}/{quote(dbname, safe='')}" if dbname else f"postgresql://{netloc}"
    return f"{url}?{urlencode(query, safe='/')}" if query else url


def server_address(dsn: str) -> str:
    """Where ``dsn`` points, for error messages: ``host:port`` or ``socket /dir/.s.PGSQL.port``."""
    try:
        params = conninfo_to_dict(dsn)
    except psycopg.ProgrammingError:
        return "(an invalid connection string)"
    host = str(params.get("host") or os.environ.get("PGHOST") or "")
    port = str(params.get("port") or os.environ.get("PGPORT") or "5432")
    if not host:
        return f"the default local socket (port {port})"
    hosts = host.split(",")
    ports = port.split(",")
    out = []
    for i, h in enumerate(hosts):
        p = ports[i] if i < len(ports) and ports[i] else ports[0]
        if h.startswith("/"):
            out.append(f"socket {h.rstrip('/')}/.s.PGSQL.{p}")
        else:
            out.append(f"[{h}]:{p}" if ":" in h else f"{h}:{p}")
    return ", ".join(out)


# -- connecting ---------------------------------------------------------------------------


def open_connection(db: Database | str, *, autocommit: bool = True) -> psycopg.Connection[Any]:
    """Connect to ``db``; a failure raises :class:`DatabaseUnavailableError` naming the cause.

    The connect timeout is the DSN's, else ``$PGCONNECT_TIMEOUT``, else 10 seconds.
    """
    dsn = db.dsn if isinstance(db, Database) else db
    params = conninfo_to_dict(dsn)
    if params.get("connect_timeout") is None and not os.environ.get("PGCONNECT_TIMEOUT"):
        params["connect_timeout"] = DEFAULT_CONNECT_TIMEOUT
    try:
        return psycopg.connect(make_conninfo("", **params), autocommit=autocommit)
    except psycopg.OperationalError as exc:
        raise unavailable(exc, params) from exc


def unavailable(exc: BaseException, dsn: str | dict[str, Any]) -> DatabaseUnavailableError:
    """The :class:`DatabaseUnavailableError` for a failed connection to ``dsn``."""
    try:
        params = conninfo_to_dict(dsn) if isinstance(dsn, str) else dsn
        timeout: float | None = timeout_from_conninfo(params)
        where = server_address(make_conninfo("", **params))
    except psycopg.Error:
        timeout, where = None, None
    return DatabaseUnavailableError.from_exc(exc, where, timeout)


# -- hints --------------------------------------------------------------------------------


def migrate_hint(conn: psycopg.Connection[Any] | psycopg.AsyncConnection[Any], schema: str, *flags: str) -> str:
    """``run `pgqueue migrate --dsn ...```, naming the database ``conn`` is connected to."""
    words = ["pgqueue", "migrate"]
    try:
        info = conn.info
        target = _render({"user": info.user, "host": info.host, "port": info.port, "dbname": info.dbname})
        words += ["--dsn", target]
    except psycopg.Error:
        pass  # a closed connection cannot tell: the hint still names the command
    if schema != "pgqueue":
        words += ["--schema", schema]
    return f"run `{shlex.join([*words, *flags])}`"
