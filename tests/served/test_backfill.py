"""Backfilled message times through the real server: who may, in what order, and the error shape."""

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.live]

MESSAGES = "/api/v1/agents/main/conversations/telegram:backfill/messages"


def test_backfill_is_for_operator_keys_in_order_and_refusals_are_json(shared_server):
    operator = shared_server.client(shared_server.key("backfill-ops", "operator"))
    bot = shared_server.client(shared_server.key("backfill-bot", "channel", "--may-assert-operator"))
    first = operator.post(MESSAGES, json={"role": "user", "content": "we adopted Biscuit", "trust": "operator",
                                          "created_at": "2023-08-05T18:30:00+01:00"})
    assert first.status_code == 201 and first.json()["created_at"].startswith("2023-08-05T17:30:00")
    refusals = [
        (bot.post(MESSAGES, json={"role": "user", "content": "x", "created_at": "2023-08-06T09:00:00Z"}), 403,
         "operator_key_required"),
        (operator.post(MESSAGES, json={"role": "user", "content": "x", "created_at": "2023-08-01T09:00:00Z"}), 400,
         "created_at_out_of_order"),
        (operator.post(MESSAGES, json={"role": "user", "content": "x", "created_at": "2999-01-01T00:00:00Z"}), 400,
         "created_at_in_future"),
    ]
    for response, status, code in refusals:
        assert (response.status_code, response.json()["error"]["code"]) == (status, code)
    naive = operator.post(MESSAGES, json={"role": "user", "content": "x", "created_at": "2023-08-06T09:00:00"})
    assert naive.status_code == 422 and set(naive.json()) == {"error"}
    window = operator.get(MESSAGES).json()
    assert [m["content"] for m in window["messages"]] == ["we adopted Biscuit"]
