"""Anthropic Messages API: the system prompt travels apart, tool calls are tool_use/tool_result blocks."""

from __future__ import annotations

import json

from fermix_site.conf import ProviderConf
from providers.base import ChatRequest, text_of, tool_call_parts, tool_spec
from providers.errors import ProviderError
from providers.openai import count, versioned

API_VERSION = "2023-06-01"
DEFAULT_MAX_TOKENS = 4096
THINKING_BUDGET = {"low": 1024, "medium": 4096, "high": 16384}  # "minimal" means no extended thinking
FINISH_REASONS = {"end_turn": "stop", "stop_sequence": "stop", "max_tokens": "length", "tool_use": "tool_calls",
                  "refusal": "content_filter"}


def endpoint(base_url: str) -> str:
    """`…/v1/messages`; a base URL without a path (`https://api.anthropic.com`) gets `/v1`."""
    return versioned(base_url) + "/messages"


def build(provider: ProviderConf, request: ChatRequest) -> tuple[str, dict, dict]:
    """(url, headers, body) of the request."""
    headers = {"accept": "application/json", "anthropic-version": API_VERSION}
    if provider.api_key:
        headers["x-api-key"] = provider.api_key
    system, messages = convert(request.messages)
    body: dict = {"model": provider.model, "max_tokens": request.max_tokens or DEFAULT_MAX_TOKENS,
                  "messages": messages}
    if system:
        body["system"] = system
    if request.tools:
        body["tools"] = [tool_definition(tool) for tool in request.tools]
    # Thinking in the middle of a tool loop needs the earlier thinking blocks sent back, which the
    # neutral message shape does not carry; so a call that answers tool results thinks no more.
    budget = THINKING_BUDGET.get(request.reasoning_effort or "")
    if budget and request.messages[-1]["role"] != "tool":
        body["thinking"] = {"type": "enabled", "budget_tokens": budget}
        body["max_tokens"] += budget  # the budget is spent out of max_tokens
    elif request.temperature is not None:
        body["temperature"] = request.temperature  # not allowed together with thinking
    return endpoint(provider.base_url), headers, body


def convert(messages: list[dict]) -> tuple[str, list[dict]]:
    """(system prompt, Messages API messages) of OpenAI-style messages.

    Every system message joins the system prompt, in order. Tool results become tool_result blocks of a
    user message, and consecutive messages of one role merge, as the API wants the roles to alternate.
    """
    system, out = [], []
    for message in messages:
        role = message["role"]
        if role == "system":
            system.append(text_of(message.get("content")))
            continue
        if role == "tool":
            role, blocks = "user", [_tool_result(message)]
        else:
            blocks = _text_blocks(message.get("content"))
            if role == "assistant":
                blocks += [_tool_use(call) for call in message.get("tool_calls") or []]
        if not blocks:
            continue
        if out and out[-1]["role"] == role:
            out[-1]["content"].extend(blocks)
        else:
            out.append({"role": role, "content": blocks})
    return "\n\n".join(part for part in system if part.strip()), out


def _text_blocks(content) -> list[dict]:
    if isinstance(content, list):
        for part in content:
            if not isinstance(part, dict) or part.get("type") != "text":
                raise ValueError(f"content part {part!r:.100} is not supported by the anthropic adapter")
    text = text_of(content)
    # The API refuses empty text blocks.
    return [{"type": "text", "text": text}] if text.strip() else []


def _tool_use(call: dict) -> dict:
    call_id, name, arguments = tool_call_parts(call)
    return {"type": "tool_use", "id": call_id, "name": name, "input": arguments}


def _tool_result(message: dict) -> dict:
    content = message.get("content")
    if not isinstance(content, str):
        content = text_of(content) if isinstance(content, list) else json.dumps(content)
    block = {"type": "tool_result", "tool_use_id": str(message.get("tool_call_id", ""))}
    if content:
        block["content"] = content
    return block


def tool_definition(tool: dict) -> dict:
    """A tool given OpenAI-style or bare, in this API's format."""
    name, description, parameters = tool_spec(tool)
    return {"name": name, "description": description, "input_schema": parameters}


def parse(data: dict) -> dict:
    """The ChatResult fields of a Messages API answer, or a transient ProviderError if it is not one."""
    content = data.get("content")
    if not isinstance(content, list) or data.get("type") == "error":
        raise ProviderError(f"not a Messages API answer: {json.dumps(data)[:300]}", transient=True, status=200)
    blocks = [block for block in content if isinstance(block, dict)]
    tool_calls = [_result_call(block) for block in blocks if block.get("type") == "tool_use"]
    usage = data.get("usage") if isinstance(data.get("usage"), dict) else {}
    stop_reason = data.get("stop_reason") or ("tool_use" if tool_calls else "end_turn")
    return {
        # Thinking blocks are the model's scratch work, not its answer.
        "text": "".join(block.get("text", "") for block in blocks if block.get("type") == "text"),
        "tool_calls": tool_calls,
        "finish_reason": FINISH_REASONS.get(stop_reason, stop_reason),
        # Cached prompt tokens still fill the context window, which is what compaction measures.
        "prompt_tokens": count(usage.get("input_tokens")) + count(usage.get("cache_creation_input_tokens"))
        + count(usage.get("cache_read_input_tokens")),
        "completion_tokens": count(usage.get("output_tokens")),
    }


def _result_call(block: dict) -> dict:
    if not isinstance(block.get("name"), str) or not block.get("id"):
        raise ProviderError(f"not a Messages API answer: malformed tool_use {block!r:.200}", transient=True,
                            status=200)
    arguments = block.get("input")
    result = {"id": block["id"], "name": block["name"], "arguments": arguments if isinstance(arguments, dict) else {}}
    if not isinstance(arguments, dict):
        result["error"] = "arguments are not a JSON object"
    return result
