"""The OpenAI-compatible adapter against a real chat-completions server on loopback."""

import json

import pytest

from providers.base import assistant_message, tool_message
from providers.chain import chat
from tests.fakeprovider import Reply, provider_config_toml, tool_call, use_config

pytestmark = pytest.mark.django_db

RECALL = {
    "type": "function",
    "function": {
        "name": "memory_recall",
        "description": "Look up what is remembered.",
        "parameters": {"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]},
    },
}


def ask(messages, **options):
    options.setdefault("agent_tag", "turn")
    options.setdefault("agent_id", "main")
    return chat(messages=messages, **options)


def test_it_returns_the_text_and_the_usage(openai_chain):
    openai_chain.push(Reply(text="Hello, Ana.", prompt_tokens=12, completion_tokens=3))

    result = ask([{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}])

    assert (result.text, result.finish_reason) == ("Hello, Ana.", "stop")
    assert (result.prompt_tokens, result.completion_tokens) == (12, 3)
    assert (result.provider, result.model, result.tool_calls) == ("primary", "primary-model", [])
    assert result.raw["choices"][0]["message"]["content"] == "Hello, Ana."


def test_a_nul_in_the_text_is_dropped_and_a_lone_surrogate_replaced(openai_chain):
    # Whatever the caller does with the answer (a message, a review's output, a job's summary), no column
    # keeps a NUL on PostgreSQL, and messages refuse one everywhere.
    openai_chain.push(Reply(text="Hello,\x00 Ana.\x00"), Reply(text="\ud83d\ude00 cut: \ud83d"))
    assert ask([{"role": "user", "content": "Hi"}]).text == "Hello, Ana."
    # A lone surrogate (an emoji cut in half) is not UTF-8: U+FFFD in its place, a whole pair kept.
    assert ask([{"role": "user", "content": "Hi"}]).text == "\U0001f600 cut: \ufffd"
    # The same in a tool call's arguments, keys included.
    openai_chain.push(tool_call("memory_recall", {"query": "tea\x00 \ud83d", "k\ud83d": ["\x00"]}))
    call = ask([{"role": "user", "content": "Hi"}], tools=[RECALL]).tool_calls[0]
    assert call["arguments"] == {"query": "tea \ufffd", "k\ufffd": [""]}


def test_it_posts_the_messages_to_chat_completions(openai_chain):
    ask([{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi", "sender": "ana"}])

    [request] = openai_chain.requests
    assert request.path == "/v1/chat/completions"
    assert request.body["model"] == "primary-model"
    # Fields the API does not know (our `sender`) stay at home.
    assert request.body["messages"] == [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}]
    assert "authorization" not in request.headers
    assert not {"tools", "max_tokens", "temperature", "reasoning_effort"} & set(request.body)


def test_it_sends_the_options_it_is_given(openai_chain):
    bare_tool = {"name": "memory_store", "parameters": {"type": "object", "properties": {}}}

    ask([{"role": "user", "content": "Hi"}], tools=[RECALL, bare_tool], max_tokens=300, temperature=0.2,
        reasoning_effort="low")

    body = openai_chain.requests[0].body
    assert (body["max_tokens"], body["temperature"], body["reasoning_effort"]) == (300, 0.2, "low")
    assert body["tools"][0] == RECALL
    assert body["tools"][1] == {"type": "function", "function": {
        "name": "memory_store", "description": "", "parameters": {"type": "object", "properties": {}}}}


def test_it_round_trips_a_tool_call(openai_chain):
    openai_chain.push(tool_call("memory_recall", {"query": "pets"}, call_id="call_7"), Reply(text="You have a cat."))
    messages = [{"role": "user", "content": "What pets do I have?"}]

    first = ask(messages, tools=[RECALL])
    assert first.finish_reason == "tool_calls"
    assert first.tool_calls == [{"id": "call_7", "name": "memory_recall", "arguments": {"query": "pets"}}]

    messages += [assistant_message(first), tool_message("call_7", "cat: Miso")]
    second = ask(messages, tools=[RECALL])

    assert second.text == "You have a cat."
    sent = openai_chain.requests[1].body["messages"]
    assert sent[1] == {"role": "assistant", "content": None, "tool_calls": [
        {"id": "call_7", "type": "function", "function": {"name": "memory_recall", "arguments": '{"query": "pets"}'}}]}
    assert sent[2] == {"role": "tool", "tool_call_id": "call_7", "content": "cat: Miso"}


def test_it_accepts_tool_calls_in_the_neutral_form(openai_chain):
    openai_chain.push(Reply(text="ok"))
    messages = [
        {"role": "user", "content": "Remember I like tea"},
        {"role": "assistant", "content": "", "tool_calls": [{"id": "c1", "name": "memory_store",
                                                              "arguments": {"key": "drink", "value": "tea"}}]},
        {"role": "tool", "tool_call_id": "c1", "content": {"ok": True}},
    ]

    ask(messages)

    sent = openai_chain.requests[0].body["messages"]
    assert json.loads(sent[1]["tool_calls"][0]["function"]["arguments"]) == {"key": "drink", "value": "tea"}
    assert sent[2]["content"] == '{"ok": true}'


def test_it_flags_tool_arguments_that_are_not_json(openai_chain):
    openai_chain.push(tool_call("memory_recall", '{"query": "pe', call_id="call_1"))

    [call] = ask([{"role": "user", "content": "pets?"}], tools=[RECALL]).tool_calls

    assert (call["id"], call["name"], call["arguments"]) == ("call_1", "memory_recall", {})
    assert "not valid JSON" in call["error"]


def test_it_names_tool_calls_that_come_without_an_id(openai_chain):
    openai_chain.push(Reply(body=json.dumps({"choices": [{"message": {"role": "assistant", "content": None,
        "tool_calls": [{"function": {"name": "memory_recall", "arguments": "{}"}}]}}]}).encode()))

    [call] = ask([{"role": "user", "content": "pets?"}]).tool_calls

    assert call == {"id": "call_0", "name": "memory_recall", "arguments": {}}


def test_missing_usage_counts_as_zero_tokens(openai_chain):
    openai_chain.push(Reply(body=b'{"choices": [{"message": {"role": "assistant", "content": "hi"}}]}'))

    result = ask([{"role": "user", "content": "Hi"}])

    assert (result.text, result.finish_reason, result.prompt_tokens, result.completion_tokens) == ("hi", "stop", 0, 0)


def test_it_sends_the_api_key_from_the_named_environment_variable(home, fake_provider, monkeypatch):
    monkeypatch.setenv("FAKE_OPENAI_KEY", "sk-test-123")
    with use_config(provider_config_toml(fake_provider, api_key_env="FAKE_OPENAI_KEY")):
        ask([{"role": "user", "content": "Hi"}])

    assert fake_provider.requests[0].headers["authorization"] == "Bearer sk-test-123"


def test_a_base_url_without_a_path_gets_v1(home, fake_provider):
    with use_config(provider_config_toml(fake_provider, base_url=fake_provider.url)):
        assert ask([{"role": "user", "content": "Hi"}]).text == "fake reply"

    assert fake_provider.requests[0].path == "/v1/chat/completions"
