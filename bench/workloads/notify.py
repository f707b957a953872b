"""What a NOTIFY in every enqueue costs the database, with the clients' CPU out of the way.

A transaction that sends a NOTIFY holds a database-wide lock from its commit until its
commit record is flushed, so notifying commits cannot share an fsync. This workload runs
pgqueue's own single-job statement (``job_insert``, each one its own transaction) from
pgbench, a C client whose CPU cost is negligible, with ``clients`` connections at once:

* ``every job notifies``: pgqueue's default;
* ``1 in N notifies``: what ``App(notify_window=...)`` sends from producers each
  enqueueing N jobs per window;
* ``none``: the statement without its NOTIFY (the ceiling).

On a machine where the producers' Python cannot saturate the server (as on a 2-CPU box
with the producers beside PostgreSQL), ``bench enqueue`` cannot show this limit; here it
is the database's own.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import tempfile
from glob import glob
from pathlib import Path
from typing import Any

import psycopg

from bench import _db, _runner
from bench._contenders import PGQUEUE, _pgqueue_app

_TPS = re.compile(r"^tps = ([0-9.]+)", re.MULTILINE)


def pgbench() -> str | None:
    found = shutil.which("pgbench")
    if found:
        return found
    candidates = sorted(glob("/usr/lib/postgresql/*/bin/pgbench"))
    return candidates[-1] if candidates else None


def statements(dsn: str) -> tuple[str, str]:
    """pgqueue's single-job statement with and without its NOTIFY, values inlined."""
    from pgqueue._db.enqueue import _query, params
    from pgqueue._wake import Plan, Wake

    spec = _pgqueue_app().tasks["bench.noop"].job(k="pgbench", t=0.0)
    with psycopg.connect(dsn) as conn:
        cur = psycopg.ClientCursor(conn)
        text = [
            cur.mogrify(_query("pgqueue", spec), params(spec, Plan((None, spec.queue), wake, 0.0)))
            for wake in (Wake.PLAIN, Wake.QUIET)
        ]
    return text[0], text[1]


def script(notify: str, quiet: str, one_in: int) -> str:
    if one_in == 1:
        return notify + ";\n"
    if one_in == 0:
        return quiet + ";\n"
    return f"\\set r random(1, {one_in})\n\\if :r = 1\n{notify};\n\\else\n{quiet};\n\\endif\n"


def label(one_in: int) -> str:
    return {0: "none", 1: "every job notifies"}.get(one_in, f"1 in {one_in} notifies")


def run(dsn: str, *, clients: int, duration: float, repeat: int, one_in: list[int]) -> dict[str, Any]:
    exe = pgbench()
    if exe is None:
        raise SystemExit("pgbench not found (Debian: postgresql-client); this workload needs it")
    PGQUEUE.setup(dsn)
    notify, quiet = statements(dsn)
    variants = {label(n): script(notify, quiet, n) for n in one_in}
    with tempfile.TemporaryDirectory() as tmp:
        files = {}
        for name, text in variants.items():
            files[name] = Path(tmp) / f"{len(files)}.sql"
            files[name].write_text(text)

        def one(name: str, _rep: int) -> dict[str, float]:
            with _db.connect(dsn) as conn:
                PGQUEUE.reset(conn)
            out = subprocess.run(
                [exe, "-n", "-M", "prepared", "-c", str(clients), "-j", str(min(clients, 2)), "-T", str(int(duration)),
                 "-f", str(files[name]), dsn],
                capture_output=True, text=True, check=True,
            ).stdout  # fmt: skip
            found = _TPS.search(out)
            if found is None:
                raise RuntimeError(f"no tps in pgbench's output:\n{out}")
            return {"jobs/s": float(found.group(1))}

        runs = _runner.interleaved(list(variants), repeat, one)
    med = _runner.medians(runs)
    ceiling = med.get("none", {}).get("jobs/s")
    ratios = {f"{n} / none": m["jobs/s"] / ceiling for n, m in med.items() if ceiling and n != "none"}
    return {
        "workload": "notify",
        "params": {"clients": clients, "duration": duration, "repeat": repeat, "one_in": one_in},
        "runs": runs,
        "medians": med,
        "ratios": ratios,
    }
