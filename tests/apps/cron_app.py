"""An app with a per-second schedule, for `pgqueue work` subprocess tests of cron."""

from __future__ import annotations

import pgqueue

app = pgqueue.App()  # the DSN comes from --dsn


@app.periodic(cron="* * * * * *", name="every-second", missed="all", max_catchup=1000)
@app.task(name="cron_tick")
def cron_tick() -> None:
    """Does nothing: the test counts jobs, one per tick."""


@app.task(name="cron_hourly")
@app.periodic(cron="@hourly", name="hourly-report", timezone="Europe/Paris", args={"report": "usage"})
def cron_hourly(report: str) -> None: ...
