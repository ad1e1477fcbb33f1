"""`[fermix_core.storage] durability = "full"` on the real server: in force (doctor, run on the server's
FERMIX_HOME, reads it from a connection opened with the same settings), and every acknowledged append still
there after the whole stack is killed with SIGKILL (docs/reliability.md)."""

import json

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.live]

MESSAGES = "/api/v1/agents/main/conversations/telegram:5/messages"


def test_durability_full_is_in_force_and_acknowledged_appends_survive_a_crash(fermix_server):
    server = fermix_server(config='[fermix_core.storage]\ndurability = "full"\n')
    doctor = json.loads(server.manage("doctor", "--json", check=False).stdout)
    durability = {c["name"]: c for c in doctor["checks"]}["durability"]
    assert durability["status"] == "ok"
    assert durability["details"] == {"durability": "full", "synchronous": "FULL"}
    key = server.key("bot", "channel")
    with server.client(key) as client:
        acknowledged = []
        for i in range(30):
            response = client.post(MESSAGES, json={"role": "user", "content": f"message {i}"})
            assert response.status_code == 201
            acknowledged.append(response.json()["id"])
    server.kill()
    server.start()
    with server.client(key) as client:
        listed = client.get(MESSAGES, params={"limit": 100}).json()["messages"]
    assert [(m["id"], m["content"]) for m in listed] == [(id_, f"message {i}") for i, id_ in enumerate(acknowledged)]
    print(f"\ndurability full (synchronous {durability['details']['synchronous']}): {len(acknowledged)} appends "
          f"acknowledged, the stack killed with SIGKILL, {len(listed)} found after the restart")
