"""A test app whose ``worker_config`` sets values, some of which ``pgqueue work`` has no
option for (``worker_id``), so a test can see which settings a started worker used."""

from __future__ import annotations

import pgqueue

CONFIG = pgqueue.WorkerConfig(
    worker_id="configured-in-code",  # no CLI option
    queues=("alpha", "beta"),
    concurrency=7,
    lease=40.0,
    heartbeat_interval=4.0,
    poll_interval=0.2,
)

app = pgqueue.App(worker_config=CONFIG)  # the DSN comes from --dsn / PGQUEUE_DSN


@app.task(name="noop", queue="alpha")
def noop() -> None:
    pass
