"""Cron: declaring schedules and deciding which ticks are due (pure, in :mod:`.schedule`
and :mod:`.ticks`), and the scheduler every worker runs (:mod:`.scheduler`)."""

from __future__ import annotations

from .schedule import (
    DEFAULT_GRACE,
    DEFAULT_MAX_CATCHUP,
    DEFAULT_MISSED,
    Due,
    MissedPolicy,
    Schedule,
    due_ticks,
)

__all__ = [
    "DEFAULT_GRACE",
    "DEFAULT_MAX_CATCHUP",
    "DEFAULT_MISSED",
    "Due",
    "MissedPolicy",
    "Schedule",
    "due_ticks",
]
