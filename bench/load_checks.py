"""What the soak checks once the stack has stopped: its database, prompt files and log, read directly.

`failures(report)` is the one list of what makes a soak fail (`make soak` exits 1 when it is not empty).
"""

from __future__ import annotations

import json
import re
import sqlite3
import subprocess
import sys
from collections import Counter
from pathlib import Path

from bench.load_traffic import AGENT, GUEST_MARK, Report

DOCTOR_CHECKS = ("migrations", "fts_triggers", "revision_hashes", "prompt_files")
LOG_PROBLEM = re.compile(r" (ERROR|CRITICAL) |\[(ERROR|CRITICAL)\]")
TRACEBACK = "Traceback (most recent call last)"


def verify(stack, report: Report) -> dict:
    """Every end check, from the database, `doctor` and the server's log."""
    conn = sqlite3.connect(stack.db, timeout=20)
    try:
        checks = _messages(conn, report)
        checks["revision_chain_gaps"] = _chain_gaps(conn)
        checks["fts_integrity_errors"] = _fts_integrity(conn)
        checks["integrity_check"] = "; ".join(row[0] for row in conn.execute("PRAGMA integrity_check"))
        checks["review_runs"] = dict(conn.execute("SELECT status, count(*) FROM review_runs GROUP BY status"))
        checks["checkpoints"] = conn.execute("SELECT count(*) FROM messages WHERE kind = 'checkpoint'").fetchone()[0]
        checks.update(_guest_end_state(conn, stack.home, report))
    finally:
        conn.close()
    checks["doctor"] = doctor(stack)
    checks.update(log_problems(stack.home / "serve.log"))
    return checks


def _messages(conn, report: Report) -> dict:
    """Every acknowledged message stored exactly, none twice, each found by its unique first word."""
    stored = dict(conn.execute("SELECT id, content FROM messages WHERE content LIKE 'soak%' AND role = 'user'"))
    lost = [i for i, content in report.acknowledged.items() if stored.get(i) != content]
    duplicated = [c[:40] for c, n in Counter(stored.values()).items() if n > 1]
    unfound = []
    for message_id, content in stored.items():
        hits = [r[0] for r in conn.execute("SELECT rowid FROM messages_fts WHERE messages_fts MATCH ?",
                                           (f'"{content.split()[0]}"',))]
        if hits != [message_id]:
            unfound.append(message_id)
    return {"lost": len(lost), "duplicated": len(duplicated), "fts_mismatches": len(unfound),
            "messages_stored": len(stored)}


def _chain_gaps(conn) -> list[str]:
    gaps = []
    for agent, rtype, scope, current in conn.execute(
            "SELECT agent_id, resource_type, scope_id, current_revision FROM resources"):
        numbers = [r[0] for r in conn.execute(
            "SELECT revision FROM resource_revisions WHERE agent_id=? AND resource_type=? AND scope_id=? "
            "ORDER BY revision", (agent, rtype, scope))]
        if numbers != list(range(1, len(numbers) + 1)) or current != len(numbers):
            gaps.append(f"{agent}/{rtype}/{scope}: {numbers[:5]}… current {current}")
    return gaps


def _fts_integrity(conn) -> list[str]:
    problems = []
    for mirror in ("messages_fts", "memories_fts"):
        try:
            conn.execute(f"INSERT INTO {mirror}({mirror}, rank) VALUES ('integrity-check', 1)")
        except sqlite3.DatabaseError as exc:
            problems.append(f"{mirror}: {exc}")
    return problems


def _guest_end_state(conn, home: Path, report: Report) -> dict:
    """CONTRACT §8 Trust, afterwards: guest words only in conversation notes, the owner's rows untouched."""
    outside = conn.execute("SELECT count(*) FROM memories WHERE value LIKE ? AND scope_type <> 'conversation'",
                           (f"%{GUEST_MARK}%",)).fetchone()[0]
    marks = ",".join("?" * len(report.sentinels))
    now = {row_id: (value, archived) for row_id, value, archived in conn.execute(
        f"SELECT id, value, archived_at FROM memories WHERE id IN ({marks})", list(report.sentinels))}
    changed = [f"#{row_id}" for row_id, value in report.sentinels.items() if now.get(row_id) != (value, None)]
    in_files = [name for name in ("USER.md", "MEMORY.md")
                if GUEST_MARK in _text(home / "memory" / AGENT / name)]
    return {"guest_rows_outside_conversation": outside, "sentinels_changed": changed,
            "guest_text_in_prompt_files": in_files}


def _text(path: Path) -> str:
    return path.read_text(errors="replace") if path.exists() else ""


def doctor(stack) -> dict:
    """`manage.py doctor --json` on the stopped stack: {check: {"status", "message"}} for DOCTOR_CHECKS."""
    done = subprocess.run([sys.executable, "manage.py", "doctor", "--json"], cwd=stack.root, env=stack.env,
                          capture_output=True, text=True, timeout=300)
    try:
        checks = json.loads(done.stdout)["checks"]
    except (ValueError, KeyError):
        return {"doctor": {"status": "error", "message": (done.stderr or done.stdout)[-500:]}}
    ran = {c["name"]: {"status": c["status"], "message": c["message"]} for c in checks}
    return {name: ran.get(name, {"status": "missing", "message": "doctor has no such check"}) for name in DOCTOR_CHECKS}


def log_problems(log: Path) -> dict:
    """Tracebacks and ERROR/CRITICAL lines in the server's log (an expected race is an INFO line)."""
    text = _text(log)
    problems = [line[:200] for line in text.splitlines() if LOG_PROBLEM.search(line)]
    return {"tracebacks_logged": text.count(TRACEBACK), "errors_logged": len(problems),
            "error_lines": problems[:10]}


def failures(report: Report) -> list[str]:
    """Every check that failed, as `name: what`; empty when the soak passed."""
    checks = report.checks
    found = {
        "server_errors (5xx, dropped connections, timeouts)": len(report.server_errors),
        "locked_errors": report.locked_errors,
        "stalls (requests over their kind's limit)": len(report.stalls),
        "lost": checks["lost"],
        "duplicated": checks["duplicated"],
        "idempotency_mismatches": len(report.idempotency_mismatches),
        "revision_chain_gaps": len(checks["revision_chain_gaps"]),
        "fts_integrity_errors": len(checks["fts_integrity_errors"]),
        "fts_mismatches": checks["fts_mismatches"],
        "integrity_check": checks["integrity_check"] if checks["integrity_check"] != "ok" else 0,
        "failed_review_runs": checks["review_runs"].get("failed", 0),
        "queue_left": checks["queue_left"],
        "doctor": [f"{name} {c['status']}: {c['message']}" for name, c in checks["doctor"].items()
                   if c["status"] != "ok"],
        "guest_violations": len(report.guest_violations),
        "guest_rows_outside_conversation": checks["guest_rows_outside_conversation"],
        "sentinels_changed": checks["sentinels_changed"],
        "guest_text_in_prompt_files": checks["guest_text_in_prompt_files"],
        "tracebacks_logged": checks["tracebacks_logged"],
        "errors_logged": checks["errors_logged"],
    }
    return [f"{name}: {value}" for name, value in found.items() if value]
