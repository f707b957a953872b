"""A throwaway data directory for the embedded server, stopped and removed afterwards."""

from __future__ import annotations

import os
import shutil
import signal
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from pgqueue.embedded import running_server
from tests.conftest import wait_until


@contextmanager
def throwaway_pgdata() -> Iterator[Path]:
    """Where one test's embedded server lives; stopped (if running) and removed afterwards.

    Not under pytest's tmp_path: any pytest run starting meanwhile resets the shared
    ``pytest-of-USER`` directory to mode 0700, which locks out the system user the wheel runs
    the server as when tests run as root.
    """
    parent = Path(tempfile.mkdtemp(prefix="pgqueue-embedded-test-"))
    path = parent / "pg"
    try:
        yield path
    finally:
        server = running_server(path)
        if server is not None:
            os.kill(server.pid, signal.SIGINT)  # fast shutdown
            wait_until(lambda: running_server(path) is None, timeout=60)
        shutil.rmtree(parent, ignore_errors=True)
