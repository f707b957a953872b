"""The chaos suite's short mode: about two minutes of every fault kind against real
``pgqueue work`` processes on a private PostgreSQL cluster, then the invariant checker.

The long mode is run by hand: ``python -m tests.chaos --minutes 10``.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.chaos.cluster import unavailable_reason
from tests.chaos.faults import FAULT_KINDS
from tests.chaos.limits import Limits
from tests.chaos.run import run_chaos

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(unavailable_reason() is not None, reason=f"no private cluster: {unavailable_reason()}"),
]


@pytest.mark.timeout(420)
def test_short_chaos_run_keeps_every_invariant(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    report = run_chaos(60, workers=3, rate=12, seed=4, drain_timeout=180, keep=tmp_path / "logs")
    line = report.line()
    with capsys.disabled():
        print(f"\n{line}")
    missing = [k for k in FAULT_KINDS if not report.faults[k]]
    assert not missing, f"fault kinds never injected: {missing}\n{line}"
    for handler_fault in ("handler_hang", "handler_hang_sync", "handler_hog", "handler_exit"):
        assert report.faults[handler_fault], f"no {handler_fault} ran\n{line}"
    assert report.committed > 100, line
    assert report.rolled_back > 10, line
    assert report.wakes["quiet"], f"no job of a burst relied on the NOTIFY window's echo\n{line}"
    assert not report.unrun, f"completed jobs whose handler never finished a run {report.unrun[:20]}\n{line}"
    assert not report.lost, f"lost jobs {report.lost[:20]}\n{line}"
    assert not report.phantom, f"phantom jobs {report.phantom[:20]}\n{line}"
    assert not report.overlaps_unexplained, (
        f"runs overlapping under a valid lease {report.overlaps_unexplained}\n{line}"
    )
    assert not report.duplicates_unexplained, f"unexplained duplicate runs {report.duplicates_unexplained}\n{line}"
    assert not report.tx_wrong, f"transactional effects not exactly once {report.tx_wrong}\n{line}"
    assert not report.over_max, f"attempts above max_attempts {report.over_max}\n{line}"
    assert not report.side_task_deaths, f"a worker stopped on an unexpected error (see its log)\n{line}"
    assert report.ok, line


@pytest.mark.timeout(480)
def test_limits_hold_under_faults(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The queue under a global limit, a per-key limit, a task limit, a queue rate and a key
    rate, paused for a while in the middle, while workers are killed, frozen past their
    lease and cut off: the ledger never shows more running than a limit allows, more claims
    in a window than a rate allows, or a claim while paused; and nothing is lost."""
    limits = Limits()
    report = run_chaos(60, workers=3, rate=12, seed=7, drain_timeout=240, keep=tmp_path / "logs", limits=limits)
    line = report.line()
    with capsys.disabled():
        print(f"\n{line}")
    assert report.limits is not None, line
    assert not report.limits.violations, line
    # The limits were reached, not just respected by a queue too quiet to hit them.
    assert report.limits.max_queue == limits.queue_concurrency, line
    assert report.limits.max_key == limits.key_concurrency, line
    assert report.limits.pauses == 1, line
    assert not report.lost, f"lost jobs {report.lost[:20]}\n{line}"
    assert not report.phantom, f"phantom jobs {report.phantom[:20]}\n{line}"
    assert report.ok, line


@pytest.mark.timeout(480)
def test_key_limits_hold_under_faults_while_workers_claim_ahead(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Per-key concurrency alone (the claim's one-statement key walk, and workers claiming
    ahead into their buffers, which every other control turns off), paused in the middle,
    under the same faults: no key ever runs more than its limit, nothing is lost."""
    limits = Limits.keys_only()
    report = run_chaos(45, workers=3, rate=12, seed=13, drain_timeout=240, keep=tmp_path / "logs", limits=limits)
    line = report.line()
    with capsys.disabled():
        print(f"\n{line}")
    assert report.limits is not None, line
    assert not report.limits.violations, line
    assert report.limits.max_key == limits.key_concurrency, line
    assert report.limits.pauses == 1, line
    assert not report.lost, f"lost jobs {report.lost[:20]}\n{line}"
    assert report.ok, line


@pytest.mark.timeout(480)
def test_workflows_hold_under_faults(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Diamond graphs and batches created while workers are killed, frozen past their lease
    and cut off and Postgres restarts: no child starts before its parents completed, each
    batch fires its callbacks exactly once, nothing is stuck, rolled-back creations leave
    nothing. (The full-size run is `python -m tests.chaos --workflows`.)"""
    report = run_chaos(45, workers=3, rate=4, seed=11, drain_timeout=240, keep=tmp_path / "logs", workflow_rate=6)
    line = report.line()
    with capsys.disabled():
        print(f"\n{line}")
    assert report.workflows is not None, line
    assert not report.workflows.violations, line
    assert report.workflows.diamonds > 50, line
    assert report.workflows.batches > 5, line
    assert report.workflows.rolled_back > 0, line
    assert report.workflows.parents_failed > 0, line
    assert not report.lost, f"lost jobs {report.lost[:20]}\n{line}"
    assert report.ok, line
