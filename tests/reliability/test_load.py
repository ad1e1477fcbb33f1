"""The soak, briefly, on the real stack (2 web workers, 2 task workers, SQLite); `make soak` runs it for 10 minutes.

One run without faults checks what is stored and served; one with the faults held open (50 half-sent
connections, turns against a model that answers after 5 s) checks that nothing stalls meanwhile.
"""

import pytest

from bench.load import run_load
from bench.load_checks import failures
from bench.load_traffic import Report

pytestmark = pytest.mark.slow

GUEST_CHECKS = ("guest_", "sentinels_changed")


@pytest.fixture(scope="module")
def soak(tmp_path_factory):
    return run_load(home=tmp_path_factory.mktemp("soak"), seconds=15, bots=3, conversations=4, faults=False)


def test_a_bounded_load_loses_nothing_and_passes_every_storage_check(soak):
    checks = soak.checks
    assert soak.requests["append"] > 50 and soak.requests["commit"] > 5 and soak.turns_answered > 0
    assert soak.requests["append_retry"] > 0 and soak.requests["channel_append"] > 0
    assert [failure for failure in failures(soak) if not failure.startswith(GUEST_CHECKS)] == []
    assert checks["messages_stored"] >= len(soak.acknowledged)
    assert checks["integrity_check"] == "ok" and checks["doctor"]["prompt_files"]["status"] == "ok"
    assert sum(checks["review_runs"].values()) > 0
    assert set(soak.latency_ms()) >= {"append", "commit", "turn", "healthz", "guest_tool"}


def test_guest_traffic_in_the_soak_stays_in_its_conversation(soak):
    assert soak.requests["guest_tool"] > 0 and soak.requests["guest_turn"] > 0
    assert sum(soak.guest_refusals.values()) > 0
    assert [failure for failure in failures(soak) if failure.startswith(GUEST_CHECKS)] == []


def test_the_soak_with_faults_answers_every_request_in_time(tmp_path):
    report = run_load(home=tmp_path, seconds=15, bots=2, conversations=3, faults=True)
    assert report.faults["idle_connections"] == 50 and report.faults["idle_opened"] >= 50
    assert report.faults["slow_turns"] > 0
    assert report.stalls == [] and report.server_errors == []
    assert [failure for failure in failures(report) if not failure.startswith(GUEST_CHECKS)] == []


def test_a_failed_review_a_full_queue_or_a_corrupt_database_fails_the_soak():
    report = Report()
    report.checks = {"lost": 0, "duplicated": 0, "revision_chain_gaps": [], "fts_integrity_errors": [],
                     "fts_mismatches": 0, "integrity_check": "ok", "review_runs": {"ok": 3}, "queue_left": 0,
                     "doctor": {"prompt_files": {"status": "ok", "message": ""}},
                     "guest_rows_outside_conversation": 0, "sentinels_changed": [], "guest_text_in_prompt_files": [],
                     "tracebacks_logged": 0, "errors_logged": 0}
    assert failures(report) == []
    report.checks.update(review_runs={"ok": 3, "failed": 1}, queue_left=2, integrity_check="page 4 is never used",
                         doctor={"prompt_files": {"status": "warning", "message": "main/USER.md differs"}})
    assert [f.split(":")[0] for f in failures(report)] == ["integrity_check", "failed_review_runs", "queue_left",
                                                          "doctor"]
