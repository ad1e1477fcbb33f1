"""Path traversal: hostile agent ids, owner ids, resource names and conversation keys never reach a path."""

import os

import pytest

from api.services import apikey_create
from fermix_site.conf import conf

pytestmark = [pytest.mark.django_db]

HOSTILE = ["..", "../..", "..%2f..%2fetc", "%2e%2e", "a%2fb", "a\\b", "..\\..", ".", "~root", "a%00b",
           "x" * 65, "%252e%252e"]


def files_under(path):
    return sorted(os.path.join(root, name) for root, _, names in os.walk(path) for name in names)


@pytest.fixture
def hostile_setup(home, client):
    key = apikey_create(name="ops", role="operator")[1]
    outside = home.home.parent
    return client, {"HTTP_AUTHORIZATION": f"Bearer {key}"}, outside, files_under(outside)


@pytest.mark.parametrize("bad", HOSTILE)
def test_hostile_names_in_paths_and_bodies_are_refused_and_write_nothing_outside_home(hostile_setup, bad):
    client, auth, outside, before = hostile_setup
    requests = [
        ("post", f"/api/v1/agents/{bad}/conversations/telegram:1/messages", {"role": "user", "content": "hi"}),
        ("post", "/api/v1/agents/main/conversations/telegram:1/messages",
         {"role": "user", "content": "hi", "owner_id": bad}),
        ("post", f"/api/v1/agents/main/conversations/{bad}/messages", {"role": "user", "content": "hi"}),
        ("get", f"/api/v1/agents/main/resources/{bad}/revisions", None),
        ("post", f"/api/v1/agents/{bad}/resources/user_md/rollback", {"revision": 1}),
        ("post", f"/api/v1/agents/main/resources/{bad}/rollback", {"revision": 1}),
        ("post", f"/api/v1/agents/{bad}/tools/memory_store",
         {"conversation": "telegram:1", "arguments": {"key": "k", "value": "v", "category": "identity"}}),
        ("post", f"/api/v1/agents/{bad}/realtime/transcripts", {"device_id": "d", "role": "user", "text": "hi"}),
        ("get", f"/api/v1/agents/{bad}/prompt", None),
    ]
    for method, path, body in requests:
        if body is None:
            response = getattr(client, method)(path, **auth)
        else:
            response = getattr(client, method)(path, body, content_type="application/json", **auth)
        assert response.status_code in (400, 404, 422), (path, body, response.status_code, response.content[:200])
        assert response.json()["error"]["code"]
    # A chat id is data, never a path: odd text there is stored as text, and nothing lands outside home.
    chat = client.post(f"/api/v1/agents/main/conversations/telegram:{bad}/messages",
                       {"role": "user", "content": "hi"}, content_type="application/json", **auth)
    assert chat.status_code in (201, 400, 404, 422)
    device = client.post("/api/v1/agents/main/realtime/transcripts", {"device_id": bad, "role": "user", "text": "hi"},
                         content_type="application/json", **auth)
    if bad in {".", ".."}:
        assert chat.status_code == device.status_code == 400
    created = set(files_under(outside)) - set(before)
    assert all(p.startswith(str(conf.home) + os.sep) for p in created), created


def test_file_paths_are_only_ever_under_home(home):
    from resources.errors import ResourceError
    from resources.files import resource_file_path

    for bad in ("..", "../x", "a/b", ""):
        with pytest.raises((ResourceError, Exception)):
            resource_file_path(agent_id=bad, resource_type="user_md")
    path = resource_file_path(agent_id="main", resource_type="user_md")
    assert str(path).startswith(str(conf.home) + os.sep)
