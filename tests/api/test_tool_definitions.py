"""GET /agents/{agent}/tools: the memory tools in the shapes the OpenAI, Anthropic and MCP SDKs publish, and the
very definitions a turn offers the model."""

import json

import anthropic.types
import mcp_types
import openai.types.chat
import pytest
from jsonschema import Draft202012Validator
from pydantic import TypeAdapter

from memory.tools import TOOLS
from tests.fakeprovider import provider_config_toml, tool_call, use_config
from tests.personas import error_of

pytestmark = pytest.mark.django_db

NAMES = ["memory_store", "memory_recall", "memory_forget", "memory_sources_list"]


def definitions(caller, format=None):
    response = caller.get("/agents/main/tools", **({"format": format} if format else {}))
    assert response.status_code == 200, response.content
    body = response.json()
    assert body["format"] == (format or "openai")
    return body["tools"]


def published(shape, tool: dict) -> dict:
    """The tool as the SDK's own type reads it: a key the type does not know is dropped, so a round trip that
    changes nothing means every key is one the format defines."""
    return TypeAdapter(shape).validate_python(tool)


def test_the_openai_form_is_an_openai_function_tool(bot):
    tools = definitions(bot)
    assert [t["function"]["name"] for t in tools] == NAMES == list(TOOLS)
    for tool in tools:
        assert published(openai.types.chat.ChatCompletionFunctionToolParam, tool) == tool
        assert published(openai.types.chat.ChatCompletionToolParam, tool) == tool
        Draft202012Validator.check_schema(tool["function"]["parameters"])
        assert len(tool["function"]["description"]) > 40
    assert definitions(bot, "openai") == tools


def test_the_anthropic_form_is_an_anthropic_tool_with_input_schema(bot):
    tools = definitions(bot, "anthropic")
    assert [t["name"] for t in tools] == NAMES
    openai_form = {t["function"]["name"]: t["function"] for t in definitions(bot)}
    for tool in tools:
        assert published(anthropic.types.ToolParam, tool) == tool
        assert tool["input_schema"] == openai_form[tool["name"]]["parameters"]
        assert tool["input_schema"]["type"] == "object"


def test_the_mcp_form_is_an_mcp_tool_that_names_the_agent_and_conversation(bot):
    tools = definitions(bot, "mcp")
    openai_form = {t["function"]["name"]: t["function"] for t in definitions(bot)}
    for tool in tools:
        read = mcp_types.Tool.model_validate(tool)
        assert read.model_dump(by_alias=True, exclude_none=True) == tool
        schema = tool["inputSchema"]
        Draft202012Validator.check_schema(schema)
        assert schema["required"][:2] == ["agent", "conversation"]
        assert {k: v for k, v in schema["properties"].items() if k not in ("agent", "conversation")} == \
            openai_form[tool["name"]]["parameters"]["properties"]
    recall = next(t for t in tools if t["name"] == "memory_recall")
    Draft202012Validator(recall["inputSchema"]).validate({"agent": "main", "conversation": "telegram:1",
                                                          "query": "where do I live", "scope": "owner"})
    assert not Draft202012Validator(recall["inputSchema"]).is_valid({"agent": "main", "conversation": "nochannel",
                                                                     "query": "x"})
    assert {t["name"]: t["annotations"]["readOnlyHint"] for t in tools} == {
        "memory_store": False, "memory_recall": True, "memory_forget": False, "memory_sources_list": True}


def test_an_unknown_format_is_a_json_refusal(bot, anonymous, other_bot):
    assert error_of(bot.get("/agents/main/tools", format="gemini")) == (422, "invalid_input")
    assert error_of(bot.get("/agents/main/tools", formt="mcp")) == (400, "unknown_parameter")
    assert error_of(anonymous.get("/agents/main/tools")) == (401, "missing_key")
    assert error_of(other_bot.get("/agents/main/tools")) == (403, "agent_not_allowed")


def test_a_turn_offers_the_model_exactly_the_openai_form(script, bot):
    """What a bot author fetches is what Fermix's own turns hand the model, and a call the model builds from it
    runs."""
    tools = definitions(bot)
    script.push("turn", tool_call("memory_store", {"key": "pet", "value": "has a cat named Rui"}))
    body = bot.turn("I have a cat named Rui").json()
    assert body["usage"]["tool_calls"] == 1
    first, second = script.requests("turn")
    assert first.body["tools"] == tools
    answer = json.loads(second.body["messages"][-1]["content"])
    assert answer["ok"] and answer["data"]["value"] == "has a cat named Rui"


def test_an_anthropic_turn_offers_the_anthropic_form(script, bot, fake_provider):
    tools = definitions(bot, "anthropic")
    with use_config(provider_config_toml(fake_provider, kind="anthropic", context_window=8192)):
        assert bot.turn("hello").status_code == 200
    assert script.requests("turn")[-1].body["tools"] == tools


def test_a_tool_call_over_http_is_checked_against_the_tools_definition(bot):
    def call(tool, arguments):
        return bot.post(f"/agents/main/tools/{tool}", {"conversation": "telegram:1", "arguments": arguments})

    assert call("memory_recall", {"query": "x", "limit": "five"}).json()["error"]["message"].startswith(
        "arguments.limit: 'five' is not of type 'integer'")
    assert error_of(call("memory_recall", {"query": "x", "scope": "everywhere"})) == (422, "invalid_input")
    assert error_of(call("memory_store", {"key": "k"})) == (422, "invalid_input")  # value is required
    assert error_of(call("memory_forget", {"id": 1, "extra": True})) == (422, "invalid_input")
    assert error_of(bot.post("/agents/main/tools/memory_forget", {"conversation": "telegram:1"})) == (
        422, "invalid_input")
    assert error_of(call("memory_delete_all", {})) == (404, "unknown_endpoint")
    assert call("memory_sources_list", {}).json()["ok"] is True
    # What the schema allows but the tool refuses is the tool's answer, for the model to correct itself.
    too_long = call("memory_store", {"key": "k", "value": "x" * 201}).json()
    assert (too_long["ok"], too_long["data"]["error"]) == (False, "value_too_long")
