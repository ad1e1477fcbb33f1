"""A job run now (`?wait=true`) through the real server, when the database refuses its summary."""

import sqlite3

import pytest

from tests.fakeprovider import Reply, provider_config_toml

pytestmark = [pytest.mark.slow, pytest.mark.live]

JOBS = "/api/v1/agents/main/jobs"


def test_a_summary_the_database_refuses_leaves_a_finished_run_with_the_reply_not_a_500(fermix_server, fake_provider):
    fake_provider.push(Reply(text="Three new emails."))
    server = fermix_server(config=provider_config_toml(fake_provider))
    with sqlite3.connect(server.home / "memory.db") as db:  # the database itself refuses the summary row
        db.execute("CREATE TRIGGER refuse_summary BEFORE INSERT ON memories WHEN NEW.key = 'latest' "
                   "BEGIN SELECT RAISE(ABORT, 'summary refused'); END")
    with server.client(server.key("ops", "operator")) as client:
        job = client.post(JOBS, json={"name": "digest", "prompt": "Write my digest.", "schedule_type": "cron",
                                      "cron": "0 8 * * *"}).json()
        run = client.post(f"{JOBS}/{job['id']}/run", params={"wait": "true"})
        runs = client.get(f"{JOBS}/{job['id']}/runs").json()["runs"]
    assert run.status_code == 200, run.text
    body = run.json()
    assert (body["status"], body["output"]) == ("ok", "Three new emails.") and body["finished_at"]
    assert body["error"].startswith("the summary was not written: ") and "summary refused" in body["error"]
    assert [(r["id"], r["status"]) for r in runs] == [(body["id"], "ok")] and len(fake_provider.requests) == 1
    with sqlite3.connect(server.home / "memory.db") as db:
        assert db.execute("SELECT count(*) FROM memories WHERE key = 'latest'").fetchone() == (0,)
