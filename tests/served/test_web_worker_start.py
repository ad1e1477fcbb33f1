"""What a web worker does as it starts, before its first request."""

import re
import time
from pathlib import Path

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.live]

LOADED = re.compile(r"local embedding model (\S+) loaded ahead of the first query in \d+ ms \(process (\d+)\)")


def loaded_ahead(server, count: int, timeout: float = 90) -> list[tuple[str, int]]:
    deadline = time.monotonic() + timeout
    while True:
        found = [(m[1], int(m[2])) for m in LOADED.finditer(server.log_text())]
        if len(found) >= count or time.monotonic() > deadline:
            return found
        time.sleep(0.2)


def test_each_web_worker_loads_the_local_embedding_model_before_its_first_request(fermix_server):
    server = fermix_server(env={"FERMIX_LOG_LEVEL": "INFO"}, web_workers=2)
    found = loaded_ahead(server, 2)
    assert len(found) == 2, server.log_text()[-3000:]
    assert {name for name, _ in found} == {"all-MiniLM-L6-v2-int8"}
    workers = {pid for _, pid in found}
    assert len(workers) == 2  # once in each worker, and in no other process
    for pid in workers:
        assert b"gunicorn" in Path(f"/proc/{pid}/cmdline").read_bytes()
    # The node's first load optimised the graph and kept it in FERMIX_HOME, with no query asked.
    kept = [p.name for p in (server.home / "cache" / "embeddings").iterdir() if not p.name.startswith(".")]
    assert len(kept) == 1 and kept[0].startswith("all-MiniLM-L6-v2-int8@") and kept[0].endswith(".onnx")
    assert "GET /api/" not in server.log_text()  # only /healthz was asked


def test_a_web_worker_loads_nothing_ahead_without_a_local_model(fermix_server):
    server = fermix_server(env={"FERMIX_LOG_LEVEL": "INFO"}, web_workers=1,
                           config='[fermix_core.embeddings]\nbackend = "none"\n')
    with server.client(server.key("ops", "operator")) as client:  # served: the worker has started
        assert client.get("/api/v1/agents/main/memories").status_code == 200
    assert not LOADED.search(server.log_text()) and not (server.home / "cache" / "embeddings").exists()
