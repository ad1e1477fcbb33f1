"""What a model answers reaches the bot and the store through the real server, whatever characters it holds."""

import pytest

from tests.fakeprovider import Reply, provider_config_toml

pytestmark = [pytest.mark.slow, pytest.mark.live]

CONV = "/api/v1/agents/main/conversations/telegram:9"


def test_a_nul_in_the_models_reply_is_dropped_and_the_turn_answers_200(fermix_server, fake_provider):
    fake_provider.push(Reply(text="Green\x00 tea."))
    server = fermix_server(config=provider_config_toml(fake_provider))
    with server.client(server.key("bot", "channel")) as client:
        answer = client.post(CONV + "/turns", json={"content": "Which tea do I like?"})
        stored = client.get(CONV + "/messages").json()["messages"]
    assert answer.status_code == 200 and answer.json()["reply"] == "Green tea."
    assert [(m["role"], m["content"]) for m in stored] == [("user", "Which tea do I like?"),
                                                          ("assistant", "Green tea.")]
