"""Stop requests (SIGINT, SIGTERM) as one process of a process group receives them.

A Ctrl-C on a terminal, or ``kill -TERM -PGID`` (what systemd sends to a whole service),
reaches every worker process directly *and* through the supervisor, which forwards it:
the same stop arrives twice within milliseconds. So the same signal repeated within
:data:`REPEAT_WINDOW` counts once; a signal after the window (or a different one) is a
second request and forces an immediate exit.
"""

from __future__ import annotations

import signal
import time
from collections.abc import Callable
from enum import Enum

__all__ = ["REPEAT_WINDOW", "STOP_SIGNALS", "StopSignals", "Verdict", "signal_name"]

#: Seconds during which a repeat of the first stop signal is the same request.
REPEAT_WINDOW = 2.0
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


class Verdict(Enum):
    STOP = "stop"  # the first request: stop gracefully
    REPEAT = "repeat"  # the first request again (delivered twice): nothing to do
    FORCE = "force"  # a second request: exit now


def signal_name(signum: int) -> str:
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"


class StopSignals:
    """Turns the stop signals a process receives into :class:`Verdict` values."""

    def __init__(self, window: float = REPEAT_WINDOW, clock: Callable[[], float] = time.monotonic) -> None:
        self._window = window
        self._clock = clock
        self._first: tuple[int, float] | None = None
        self._forced = False

    @property
    def stopping(self) -> bool:
        return self._first is not None

    def receive(self, signum: int) -> Verdict:
        now = self._clock()
        if self._first is None:
            self._first = (signum, now)
            return Verdict.STOP
        first_signal, first_at = self._first
        if not self._forced and signum == first_signal and now - first_at < self._window:
            return Verdict.REPEAT
        self._forced = True
        return Verdict.FORCE
