"""An app that names its database in code, ``App(dsn=...)`` (read here from ``$TEST_APP_DSN``)."""

from __future__ import annotations

import os

import pgqueue

app = pgqueue.App(dsn=os.environ["TEST_APP_DSN"])


@app.task(name="noop")
def noop() -> None:
    pass
