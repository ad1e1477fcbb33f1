"""A short bounded load on the real stack (2 web workers, 2 task workers, SQLite): nothing lost or broken.

`make soak` runs the same for 10 minutes.
"""

import pytest

from bench.load import run_load

pytestmark = pytest.mark.slow


def test_a_bounded_load_loses_nothing_and_never_reports_a_locked_database(tmp_path):
    report = run_load(home=tmp_path, seconds=15, bots=3, conversations=4)
    checks = report.checks
    assert report.requests["append"] > 50 and report.requests["commit"] > 5 and report.turns_answered > 0
    assert report.server_errors == [] and report.locked_errors == 0
    assert checks["lost"] == 0 and checks["duplicated"] == 0
    assert checks["messages_stored"] >= len(report.acknowledged)
    assert checks["revision_chain_gaps"] == []
    assert checks["fts_integrity_errors"] == [] and checks["fts_mismatches"] == 0
    assert checks["queue_left"] == 0
    assert sum(checks["review_runs"].values()) > 0 and checks["review_runs"].get("failed", 0) == 0
