"""Repeated stop signals with an injected clock: one request, a second one, then force."""

from __future__ import annotations

import signal

from pgqueue.runner.stop_signals import REPEAT_WINDOW, StopSignals, Verdict


def test_the_same_signal_within_the_window_counts_once() -> None:
    now = [100.0]
    signals = StopSignals(clock=lambda: now[0])
    assert signals.receive(signal.SIGINT) is Verdict.STOP
    now[0] += REPEAT_WINDOW - 0.01
    assert signals.receive(signal.SIGINT) is Verdict.REPEAT
    now[0] += 0.02  # past the window, counted from the first signal
    assert signals.receive(signal.SIGINT) is Verdict.FORCE
    assert signals.receive(signal.SIGINT) is Verdict.FORCE


def test_another_signal_within_the_window_is_a_second_request() -> None:
    signals = StopSignals(clock=lambda: 5.0)
    assert signals.receive(signal.SIGTERM) is Verdict.STOP
    assert signals.receive(signal.SIGINT) is Verdict.FORCE
