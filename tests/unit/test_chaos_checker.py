"""The chaos checker's judgement of one job's runs (tests/chaos/checker.py), on
hand-built histories: which overlaps and duplicate runs a lost lease explains."""

from __future__ import annotations

from collections import defaultdict
from datetime import UTC, datetime, timedelta
from typing import Any

from tests.chaos.checker import Report, Run, check_runs
from tests.chaos.limits import _peak, _Run, _window_peak, lease_intervals
from tests.chaos.workers import ProcEvent

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
JOB = 7


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def run(attempt: int, pid: int, start: float, end: float | None, result: str | None = "ok") -> Run:
    return Run(
        token=f"lease-{attempt}",
        job_id=JOB,
        attempt=attempt,
        kind="ok",
        pid=pid,
        started_at=at(start),
        ended_at=None if end is None else at(end),
        result=result if end is not None else None,
    )


def rescued(attempt: int, when: float) -> dict[str, Any]:
    """The error entry a rescue (or a failure outcome) records for ``attempt``."""
    return {"attempt": attempt, "type": "pgqueue.LeaseExpired", "at": at(when).isoformat()}


def judge(
    runs: list[Run],
    errors: list[dict[str, Any]] | None = None,
    troubled: dict[int, list[float]] | None = None,
    deaths: dict[int, float] | None = None,
) -> Report:
    rep = Report()
    trouble: dict[int, list[datetime]] = defaultdict(list)
    for pid, times in (troubled or {}).items():
        trouble[pid].extend(at(t) for t in times)
    died = {pid: at(t) for pid, t in (deaths or {}).items()}
    check_runs(rep, sorted(runs, key=lambda r: r.started_at), errors or [], trouble, died)
    return rep


def overlaps(rep: Report) -> tuple[int, list[int]]:
    return rep.overlaps_explained, rep.overlaps_unexplained


# -- overlaps -----------------------------------------------------------------------------


def test_runs_one_after_another_do_not_overlap() -> None:
    rep = judge([run(1, 100, 0, 1, result="error"), run(2, 200, 5, 6)], errors=[rescued(1, 1)])
    assert overlaps(rep) == (0, [])
    assert rep.ok


def test_two_runs_under_valid_leases_at_once_are_an_unexplained_overlap() -> None:
    rep = judge([run(1, 100, 0, 10, result="error"), run(2, 200, 5, 6)])
    assert overlaps(rep) == (0, [JOB])
    assert not rep.ok


def test_the_earlier_run_rescued_while_it_ran_explains_the_overlap() -> None:
    # Attempt 1's worker was partitioned away: rescued at 30s, attempt 2 started at 31s
    # while attempt 1's handler was still running (it learns at its next heartbeat).
    rep = judge([run(1, 100, 0, 40, result="cancelled"), run(2, 200, 31, 32)], errors=[rescued(1, 30)])
    assert overlaps(rep) == (1, [])


def test_a_stale_attempt_started_after_its_lease_ended_explains_the_overlap() -> None:
    # A frozen worker (SIGSTOP) held attempt 1; it was rescued at 30s and attempt 2 started
    # at 31s. Thawed at 35s, the old worker started attempt 1's handler anyway, was
    # cancelled within milliseconds and fenced (no end written). The stale run is the
    # later one: its own lease had ended before it began.
    valid = run(2, 200, 31, 40)
    stale = run(1, 100, 35.0, None)
    rep = judge([valid, stale], errors=[rescued(1, 30)])
    assert overlaps(rep) == (1, [])
    assert rep.ok


def test_the_later_runs_lease_ending_only_during_the_overlap_does_not_explain_it() -> None:
    # Both leases were valid when the second run started: a lease lost afterwards (here
    # attempt 2's own failure at 8s) does not excuse the double run that came first.
    rep = judge([run(1, 100, 0, 10), run(2, 200, 5, 9, result="error")], errors=[rescued(2, 8)])
    assert overlaps(rep) == (0, [JOB])


def test_the_earlier_runs_worker_stopped_before_the_later_started_explains_the_overlap() -> None:
    # SIGSTOPped at 3s (a graceful stop or a kill counts the same); attempt 2 started at 5s.
    rep = judge([run(1, 100, 0, 10), run(2, 200, 5, 6)], troubled={100: [3]})
    assert overlaps(rep) == (1, [])
    assert (rep.duplicates_explained, rep.duplicates_unexplained) == (1, [])


def test_an_unended_run_whose_process_died_before_the_next_started_is_no_overlap() -> None:
    rep = judge([run(1, 100, 0, None), run(2, 200, 5, 6)], deaths={100: 4})
    assert overlaps(rep) == (0, [])


# -- duplicates ---------------------------------------------------------------------------


def test_two_finished_runs_are_explained_when_all_but_one_lost_the_lease() -> None:
    rep = judge([run(1, 100, 0, 40), run(2, 200, 31, 32)], errors=[rescued(1, 30)])
    assert (rep.duplicates_explained, rep.duplicates_unexplained) == (1, [])


def test_two_finished_runs_both_holding_their_leases_are_unexplained() -> None:
    rep = judge([run(1, 100, 0, 1), run(2, 200, 100, 101)])
    assert (rep.duplicates_explained, rep.duplicates_unexplained) == (0, [JOB])
    assert not rep.ok


# -- the limits checker's arithmetic ------------------------------------------------------------


def test_peak_counts_runs_open_at_one_instant_and_an_end_closes_before_a_start() -> None:
    t = datetime(2026, 1, 1, tzinfo=UTC)
    s = timedelta(seconds=1)
    assert _peak([]) == 0
    assert (
        _peak([(t, t + 2 * s), (t + s, t + 3 * s), (t + 2 * s, t + 4 * s)]) == 2
    )  # the first ends as the third starts
    assert _peak([(t, t + 5 * s), (t + s, t + 2 * s), (t + s, t + 3 * s)]) == 3


def test_window_peak_counts_claims_in_any_window_of_the_period() -> None:
    t = datetime(2026, 1, 1, tzinfo=UTC)
    ms = timedelta(milliseconds=1)
    second = timedelta(seconds=1)
    assert _window_peak([], second) == 0
    # Three claims within one second, then one exactly a second after the first: (t - 1s, t] excludes it.
    times = [t, t + 100 * ms, t + 900 * ms, t + 1000 * ms]
    assert _window_peak(times, second) == 3
    assert _window_peak([*times, t + 999 * ms], second) == 4


def limited_run(job_id: int, pid: int, start: float, end: float | None) -> _Run:
    return _Run(job_id, 1, "chaos.ok", "k", pid, at(start), None if end is None else at(end), at(start))


def test_a_stopped_workers_unfinished_run_holds_its_slot_until_the_shutdown_timeout_only() -> None:
    # Worker 1 is told to stop at 10 s; its hung run is released once the 3 s shutdown timeout
    # has passed (no earlier than 13 s), and another worker starts a job in the freed slot at 13.2 s.
    hung = limited_run(1, pid=1, start=5, end=None)
    later = limited_run(2, pid=2, start=13.2, end=14)
    intervals, reasons = lease_intervals([hung, later], {}, [ProcEvent(1, "sigterm", at(10))], 3.0)
    assert _peak([(s, e) for _, s, e in intervals]) == 1
    assert reasons[(1, 1)] == "stopped"
    # Started before the release could have happened: both held a lease at once.
    early = limited_run(3, pid=2, start=12.5, end=14)
    intervals, _ = lease_intervals([hung, early], {}, [ProcEvent(1, "sigterm", at(10))], 3.0)
    assert _peak([(s, e) for _, s, e in intervals]) == 2


def test_a_run_ends_at_the_first_of_its_end_its_error_entry_and_its_workers_death() -> None:
    a = limited_run(1, pid=1, start=0, end=9)
    b = limited_run(2, pid=2, start=0, end=9)
    c = limited_run(3, pid=3, start=0, end=None)
    errors = {2: [rescued(1, 4)]}
    intervals, reasons = lease_intervals([a, b, c], errors, [ProcEvent(3, "sigkill", at(6))], 3.0)
    ends = {r.job_id: e for r, _, e in intervals}
    assert ends == {1: at(9), 2: at(4), 3: at(6)}
    assert reasons == {(1, 1): "ended", (2, 1): "error pgqueue.LeaseExpired", (3, 1): "died"}
