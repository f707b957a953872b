"""The benchmark database: found or created, and reset between runs."""

from __future__ import annotations

import os
from typing import Any

import psycopg
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo

DEFAULT_DB = "pgqueue_bench"

# The harness's own connections (preloading, polling, sampling) carry this application_name,
# so the server-CPU figure (bench/_cost.py) can leave them out and count the workers' only.
HARNESS_APP = "pgqueue-bench"


def connect(dsn: str) -> psycopg.Connection[Any]:
    """An autocommit connection for the harness itself, named :data:`HARNESS_APP`."""
    return psycopg.connect(dsn, autocommit=True, application_name=HARNESS_APP)


def resolve_dsn(dsn: str | None) -> str:
    """--dsn, else $PGQUEUE_BENCH_DSN, else a pgqueue_bench database on 127.0.0.1:5432
    (created if missing), else the embedded server."""
    dsn = dsn or os.environ.get("PGQUEUE_BENCH_DSN")
    if dsn:
        return dsn
    local = make_conninfo(host="127.0.0.1", port=5432, user="postgres", dbname="postgres")
    try:
        psycopg.connect(local, connect_timeout=3).close()
        base = local
    except psycopg.OperationalError:
        from pgqueue.embedded import embedded_dsn

        base = embedded_dsn()
    ensure_database(base, DEFAULT_DB)
    info = conninfo_to_dict(base)
    info["dbname"] = DEFAULT_DB
    return make_conninfo(**{k: str(v) for k, v in info.items() if v is not None})


def ensure_database(server_dsn: str, name: str) -> None:
    with psycopg.connect(server_dsn, autocommit=True) as conn:
        exists = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", [name]).fetchone()
        if not exists:
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
