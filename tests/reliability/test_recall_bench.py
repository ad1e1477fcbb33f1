"""`bench.recall` at a tiny size in hybrid mode: every class, source and scope measured in hybrid (each scope's
first query on a row of its own), the memory recall right after a memory row changes and the recall right
after a new message in a conversation measured too, and the world left whole (every live memory row with its
vector again, the messages it appended from a sender the sample leaves out), so a later `--reuse` run
measures the same world."""

import json
import os
import re
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from bench import recall

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[2]


def test_a_tiny_hybrid_run_measures_every_class_and_the_query_after_a_change(tmp_path):
    out, home = tmp_path / "recall.json", tmp_path / "home"
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "FERMIX_HOME")}
    ran = subprocess.run([sys.executable, "-m", "bench.recall", "--messages", "3000", "--home", str(home), "--mode",
                          "hybrid", "--repeat", "2", "--json", str(out)], cwd=ROOT, env=env, check=True,
                         capture_output=True, text=True, timeout=600)
    report = json.loads(out.read_text())
    assert report["vendor"] == "sqlite" and report["mode"] == "hybrid"
    assert {(r["source"], r["scope"]) for r in report["timings"]} == {
        (source, scope) for source in ("history", "memories") for scope in ("current", "owner", "all")}
    assert all(r["modes"] == {"hybrid": 2} for r in report["timings"])
    # Each scope's first query in the process is a row of its own, asked before the scope's classes.
    for source in ("history", "memories"):
        for scope in ("current", "owner", "all"):
            rows = [r["class"] for r in report["timings"] if (r["source"], r["scope"]) == (source, scope)]
            assert rows[0] == "first of a scope" and rows.count("first of a scope") == 1 and len(rows) == 7
    changed = report["after_a_change"]
    assert changed["changes"] == 5 and changed["first"]["n"] == 5 and changed["next"]["n"] == 5
    assert changed["first"]["p50"] > 0 and set(report["relevance"]) == {"current", "owner", "all"}
    appended = report["after_a_message"]
    assert appended["messages"] == 10 and appended["first"]["n"] == 10 and appended["next"]["n"] == 10
    assert appended["conversation_size"] > 10 and appended["first"]["p50"] > 0
    # Both, with their goals: 20 ms in one conversation, 50 over all conversations.
    assert re.search(r"\| history \| current \| after a new message in the largest conversation \| [\d.]+ \| "
                     r"[\d.]+ \| ≤ 20 \| (met|not met) \|", ran.stdout)
    assert re.search(r"\| memories \| all \| after a memory row changed \| [\d.]+ \| [\d.]+ \| ≤ 50 \| "
                     r"(met|not met) \|", ran.stdout)
    db = sqlite3.connect(home / "memory.db")
    assert db.execute("SELECT count(*) FROM memories m WHERE archived_at IS NULL AND NOT EXISTS (SELECT 1 FROM "
                      "embeddings e WHERE e.kind = 'memory' AND e.object_id = m.id)").fetchone() == (0,)
    assert db.execute("SELECT count(*) FROM memories WHERE value LIKE 'changed for the benchmark%'").fetchone() == (5,)
    assert db.execute("SELECT count(*) FROM messages WHERE sender = ?", [recall.SENDER]).fetchone() == (10,)
