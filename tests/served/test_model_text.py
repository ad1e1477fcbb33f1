"""What a model answers reaches the bot and the store through the real server, whatever characters it holds."""

import pytest

from tests.fakeprovider import Reply, provider_config_toml

pytestmark = [pytest.mark.slow, pytest.mark.live]

CONV = "/api/v1/agents/main/conversations/telegram:9"


def test_a_reply_with_a_nul_or_half_an_emoji_is_stored_and_answered_200(fermix_server, fake_provider):
    fake_provider.push(Reply(text="Green\x00 tea."), Reply(text="Green tea \ud83d"))
    server = fermix_server(config=provider_config_toml(fake_provider))
    with server.client(server.key("bot", "channel")) as client:
        answers = [client.post(CONV + "/turns", json={"content": "Which tea do I like?"}) for _ in range(2)]
        stored = client.get(CONV + "/messages").json()["messages"]
    assert [(a.status_code, a.json()["reply"]) for a in answers] == [(200, "Green tea."), (200, "Green tea \ufffd")]
    assert [m["content"] for m in stored if m["role"] == "assistant"] == ["Green tea.", "Green tea \ufffd"]
