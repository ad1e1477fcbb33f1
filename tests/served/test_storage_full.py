"""A full disk under the real server (gunicorn and the cluster on a small tmpfs as FERMIX_HOME): writes answer
`507 storage_full` and store nothing, `/healthz` is 503 with the free space until room returns, and a change
that committed is never reported as failed when only its prompt files could not be written."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from tests.tmpfs import fill, mount_tmpfs, unmount

pytestmark = [pytest.mark.slow, pytest.mark.live]

CONV = "/api/v1/agents/main/conversations/telegram:7"
BIG = "the disk fills up while this is being written " * 4000  # 184 KB: more than the WAL has spare


@pytest.fixture
def small_disk_server(fermix_server, tmp_path):
    """A started server whose FERMIX_HOME is a 48 MiB tmpfs (and an operator key made while there is room)."""
    home = tmp_path / "disk"
    mount_tmpfs(home, "48m")
    mounts = [home]
    server = fermix_server(home=home)
    server.operator = server.key("ops", "operator")
    server.mounts = mounts
    yield server
    server.stop()  # before the unmount: the server holds the database open
    for folder in reversed(mounts):
        unmount(folder)


def stored_messages(home: Path) -> list[tuple[int, str]]:
    db = sqlite3.connect(home / "memory.db")
    try:
        assert db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        return db.execute("SELECT id, content FROM messages ORDER BY id").fetchall()
    finally:
        db.close()


def test_a_full_disk_answers_507_and_healthz_503_until_space_returns(small_disk_server):
    server = small_disk_server
    reader = server.key("reader", "channel")
    with server.client(server.operator) as client, server.client(reader) as bot:
        first = client.post(CONV + "/messages", json={"role": "user", "content": "before the disk filled"})
        assert first.status_code == 201
        filler = fill(server.home)

        health = client.get("/healthz")
        assert health.status_code == 503
        assert health.json()["storage"] == {"ok": False, "free_bytes": 0}
        assert health.json()["database"]["ok"] is True
        for _ in range(3):
            refused = client.post(CONV + "/messages", json={"role": "user", "content": BIG})
            assert refused.status_code == 507, refused.text
            assert refused.json()["error"]["code"] == "storage_full"
        # Reads still answer, also with a key used for the first time (its last_used_at is not written).
        assert bot.get(CONV + "/messages").status_code == 200

        filler.unlink()
        health = client.get("/healthz")
        assert health.status_code == 200
        assert health.json()["storage"]["ok"] is True and health.json()["storage"]["free_bytes"] > 32 * 2**20
        after = client.post(CONV + "/messages", json={"role": "user", "content": BIG})
        assert after.status_code == 201
    # Exactly what was acknowledged, whole: no half of a refused message, nothing lost.
    stored = stored_messages(server.home)
    assert stored == [(first.json()["id"], "before the disk filled"), (after.json()["id"], BIG)]
    print(f"\nfull disk: 3 appends of {len(BIG):,} bytes answered 507; /healthz 503 with free_bytes 0; "
          f"room again: /healthz 200 with {health.json()['storage']['free_bytes']:,} bytes free, the append 201; "
          f"{len(stored)} messages stored = the 2 acknowledged, integrity_check ok")


def test_every_write_on_a_full_disk_is_refused_whole_or_stored_and_said_so(small_disk_server):
    """Whether a short write still fits in the last page SQLite's WAL holds depends on that page; whichever
    way each goes, the answer tells the truth about what was stored, and none is a 500."""
    server = small_disk_server
    server.env["DJANGO_SUPERUSER_PASSWORD"] = "a long password for the console"
    server.manage("createsuperuser", "--noinput", "--username", "ana", "--email", "ana@example.com")
    store = {"conversation": "telegram:7", "trust": "operator",
             "arguments": {"key": "home_city", "value": "lives in Porto", "category": "identity"}}
    with server.client(server.operator) as client, server.client() as console:
        token = console.get("/admin/login/").cookies["csrftoken"]
        filler = fill(server.home)
        answers = [client.post(CONV + "/messages", json={"role": "user", "content": "short"}),
                   client.post("/api/v1/agents/main/tools/memory_store", json=store),
                   console.post("/admin/login/", data={"username": "ana", "password": "a long password for the "
                                                       "console", "csrfmiddlewaretoken": token})]
        filler.unlink()
        memories = client.get("/api/v1/agents/main/memories").json()["memories"]
    for answer in answers:
        assert answer.status_code in (200, 201, 302, 507), answer.text
        if answer.status_code == 507:
            assert answer.json()["error"]["code"] == "storage_full"
    message, store, login = answers
    assert stored_messages(server.home) == ([(message.json()["id"], "short")] if message.status_code == 201 else [])
    assert [m["value"] for m in memories] == (["lives in Porto"] if store.status_code == 200 else [])
    if store.status_code == 200:
        assert store.json()["warnings"] == ["prompt_files_not_rebuilt"]  # no room for USER.md either
    assert login.status_code in (302, 507)  # the session is a database write too
    print(f"\nfull disk: append {message.status_code}, memory_store {store.status_code}, console login "
          f"{login.status_code}; {len(stored_messages(server.home))} messages and {len(memories)} rows stored")


def test_a_committed_change_whose_prompt_files_cannot_be_written_answers_200_with_a_warning(small_disk_server):
    server = small_disk_server
    folder = server.home / "memory" / "main"  # USER.md's folder on its own 16 KiB disk, filled: the rows fit
    mount_tmpfs(folder, "16k")
    server.mounts.append(folder)
    filler = fill(folder)
    with server.client(server.operator) as client:
        ids = []
        for key, value in (("home_city", "lives in Porto"), ("name", "is called Ana")):
            stored = client.post("/api/v1/agents/main/tools/memory_store", json={
                "conversation": "telegram:7", "trust": "operator",
                "arguments": {"key": key, "value": value, "category": "identity"}})
            assert stored.status_code == 200, stored.text
            assert stored.json()["ok"] is True and stored.json()["warnings"] == ["prompt_files_not_rebuilt"]
            ids.append(stored.json()["data"]["id"])
        listed = client.get("/api/v1/agents/main/memories").json()["memories"]
        assert sorted(m["id"] for m in listed) == sorted(ids)  # committed, as the answers said
        assert sorted(p.name for p in folder.iterdir()) == ["filler"]  # no USER.md, whole or half, no temp file

        filler.unlink()
        archived = client.post(f"/api/v1/memories/{ids[1]}/archive", json={"reason": "wrong name"})
        assert archived.status_code == 200
        assert archived.json()["warnings"] == [] and archived.json()["rendered_in"] == []
    # The next rebuild wrote what the earlier ones could not.
    assert (folder / "USER.md").read_text() == "## Identity\n- lives in Porto\n"
    print(f"\nmemory folder full: 2 memory_store calls answered 200 with {stored.json()['warnings']}, both rows "
          f"stored, no USER.md; room again: the archive answered 200 with no warning and USER.md holds the row")
