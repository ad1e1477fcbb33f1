"""The Anthropic adapter against a real Messages API server on loopback."""

import pytest

from providers.base import assistant_message, tool_message
from providers.chain import chat
from providers.models import ModelCall
from tests.fakeprovider import Reply, tool_call

pytestmark = pytest.mark.django_db

RECALL = {
    "type": "function",
    "function": {
        "name": "memory_recall",
        "description": "Look up what is remembered.",
        "parameters": {"type": "object", "properties": {"query": {"type": "string"}}},
    },
}


def ask(messages, **options):
    return chat(messages=messages, agent_tag="turn", agent_id="main", **options)


def test_it_returns_the_text_and_the_usage(anthropic_chain):
    anthropic_chain.push(Reply(text="Hello, Ana.", prompt_tokens=40, completion_tokens=4))

    result = ask([{"role": "user", "content": "Hi"}])

    assert (result.text, result.finish_reason) == ("Hello, Ana.", "stop")
    assert (result.prompt_tokens, result.completion_tokens) == (40, 4)
    assert (result.provider, result.model) == ("primary", "claude-test")


def test_a_nul_in_the_text_is_dropped(anthropic_chain):
    anthropic_chain.push(Reply(text="Hello,\x00 Ana."))
    assert ask([{"role": "user", "content": "Hi"}]).text == "Hello, Ana."


def test_it_sends_the_key_the_version_and_a_separate_system_prompt(anthropic_chain):
    ask([{"role": "system", "content": "You are Fermix."}, {"role": "system", "content": "<memory-context>…"},
         {"role": "user", "content": "Hi"}])

    [request] = anthropic_chain.requests
    assert request.path == "/v1/messages"
    assert request.headers["x-api-key"] == "sk-ant-test"
    assert request.headers["anthropic-version"] == "2023-06-01"
    assert "authorization" not in request.headers
    assert request.body["system"] == "You are Fermix.\n\n<memory-context>…"
    assert request.body["messages"] == [{"role": "user", "content": [{"type": "text", "text": "Hi"}]}]
    assert request.body["max_tokens"] == 4096


def test_cached_prompt_tokens_count_as_prompt_tokens(anthropic_chain):
    anthropic_chain.push(Reply(text="ok", prompt_tokens=1000, cache_read_tokens=900, completion_tokens=2))

    result = ask([{"role": "user", "content": "Hi"}])

    assert anthropic_chain.requests[0].body["max_tokens"] == 4096
    assert result.raw["usage"]["input_tokens"] == 100
    assert (result.prompt_tokens, result.completion_tokens) == (1000, 2)
    assert ModelCall.objects.get().prompt_tokens == 1000


def test_it_converts_a_tool_use_round_trip(anthropic_chain):
    anthropic_chain.push(tool_call("memory_recall", {"query": "pets"}, call_id="toolu_1", text="Let me look."),
                         Reply(text="You have a cat."))
    messages = [{"role": "user", "content": "What pets do I have?"}]

    first = ask(messages, tools=[RECALL])
    assert (first.text, first.finish_reason) == ("Let me look.", "tool_calls")
    assert first.tool_calls == [{"id": "toolu_1", "name": "memory_recall", "arguments": {"query": "pets"}}]

    messages += [assistant_message(first), tool_message("toolu_1", "cat: Miso")]
    assert ask(messages, tools=[RECALL]).text == "You have a cat."

    body = anthropic_chain.requests[1].body
    assert body["tools"] == [{"name": "memory_recall", "description": "Look up what is remembered.",
                              "input_schema": RECALL["function"]["parameters"]}]
    assert body["messages"][1:] == [
        {"role": "assistant", "content": [
            {"type": "text", "text": "Let me look."},
            {"type": "tool_use", "id": "toolu_1", "name": "memory_recall", "input": {"query": "pets"}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "cat: Miso"}]},
    ]


def test_results_of_parallel_tool_calls_travel_in_one_user_message(anthropic_chain):
    messages = [
        {"role": "user", "content": "Who am I and what do I like?"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "t1", "type": "function", "function": {"name": "memory_recall", "arguments": '{"q": "name"}'}},
            {"id": "t2", "type": "function", "function": {"name": "memory_recall", "arguments": '{"q": "likes"}'}}]},
        tool_message("t1", "Ana"),
        tool_message("t2", "tea"),
        {"role": "user", "content": [{"type": "text", "text": "Be short."}]},
    ]

    assert ask(messages).text == "fake reply"  # the fake refuses unanswered or stray tool ids, as the API does

    sent = anthropic_chain.requests[0].body["messages"]
    assert [m["role"] for m in sent] == ["user", "assistant", "user"]
    assert sent[2]["content"] == [
        {"type": "tool_result", "tool_use_id": "t1", "content": "Ana"},
        {"type": "tool_result", "tool_use_id": "t2", "content": "tea"},
        {"type": "text", "text": "Be short."},
    ]


def test_reasoning_effort_becomes_a_thinking_budget(anthropic_chain):
    ask([{"role": "user", "content": "Summarise"}], reasoning_effort="medium", max_tokens=1000, temperature=0.3)

    body = anthropic_chain.requests[0].body
    assert body["thinking"] == {"type": "enabled", "budget_tokens": 4096}
    assert body["max_tokens"] == 1000 + 4096
    assert "temperature" not in body  # the API allows no temperature with thinking


def test_no_thinking_when_answering_tool_results(anthropic_chain):
    messages = [
        {"role": "user", "content": "pets?"},
        {"role": "assistant", "content": None, "tool_calls": [{"id": "t1", "name": "memory_recall", "arguments": {}}]},
        tool_message("t1", "cat"),
    ]

    ask(messages, reasoning_effort="high", temperature=0.3)

    body = anthropic_chain.requests[0].body
    assert "thinking" not in body
    assert (body["max_tokens"], body["temperature"]) == (4096, 0.3)


def test_max_tokens_stop_reason_reads_as_length(anthropic_chain):
    anthropic_chain.push(Reply(text="cut sh", finish_reason="max_tokens"))

    assert ask([{"role": "user", "content": "Tell me everything"}]).finish_reason == "length"


def test_unsupported_content_parts_are_refused_before_any_call(anthropic_chain):
    with pytest.raises(ValueError, match="not supported"):
        ask([{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "data:…"}}]}])

    assert anthropic_chain.requests == []
