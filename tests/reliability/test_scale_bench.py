"""`bench.scale` at a tiny size: every figure of the scale curve is measured and written, and the world is
left as built (the appended messages deleted), so `--reuse` measures the same world again."""

import json
import sqlite3

import pytest

from bench import scale

pytestmark = pytest.mark.slow


def test_a_tiny_scale_run_measures_every_figure_and_leaves_the_world_as_built(tmp_path, monkeypatch):
    monkeypatch.delenv("DATABASE_URL", raising=False)
    out = tmp_path / "scale.json"
    scale.main(["--sizes", "2000", "--home", str(tmp_path / "homes"), "--json", str(out), "--repeat", "3",
                "--reads", "10", "--appends", "30"])
    report = json.loads(out.read_text())
    assert report["vendor"] == "sqlite" and [r["messages"] for r in report["sizes"]] == [2000]
    size = report["sizes"][0]
    assert size["ingest"]["messages_per_s"] > 0 and size["ingest"]["n"] == 30
    for figure in ("window", "prompt"):
        assert size[figure]["cached"]["p95"] > 0 and size[figure]["uncached"]["p95"] > 0
    assert 0 < size["window"]["window_messages_mean"] <= 100
    for mode in ("lexical", "hybrid"):
        for source in scale.SOURCES:
            for scope in scale.SCOPES:
                assert scale.worst(size, mode, source, scope) > 0
    assert all(set(r["ran"]) == {"hybrid"} for r in size["recall"]["hybrid"].values())
    assert 0 < size["db_bytes"] < size["db_bytes_with_vectors"]
    assert size["vector_cache_bytes"] > 0 and size["peak_rss_bytes"] > 0 and size["query_embedding"]["p95"] > 0
    assert 0 < size["vectors_bytes"] < size["db_bytes_with_vectors"]
    assert set(size["load"]) >= {"build", "window", "prompt", "recall lexical", "recall hybrid", "ingest", "end"}
    db = sqlite3.connect(tmp_path / "homes" / "sqlite-2000" / "memory.db")
    assert db.execute("SELECT count(*) FROM messages").fetchone()[0] == 2000
