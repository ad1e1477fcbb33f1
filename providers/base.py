"""The neutral request and answer shapes every adapter translates from and to.

Messages use OpenAI-style roles: `system`, `user`, `assistant` (optionally with `tool_calls`) and `tool`
(with `tool_call_id`). A tool call inside an assistant message may be given in the OpenAI wire form
(`{"id", "type": "function", "function": {"name", "arguments": "<json>"}}`) or in the neutral form a
`ChatResult` returns (`{"id", "name", "arguments": {...}}`); `assistant_message` builds the former.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

ROLES = {"system", "user", "assistant", "tool"}
REASONING_EFFORTS = {"minimal", "low", "medium", "high"}


@dataclass(frozen=True)
class ChatRequest:
    messages: list[dict]
    tools: list[dict] | None = None
    max_tokens: int | None = None
    temperature: float | None = None
    reasoning_effort: str | None = None

    def __post_init__(self):
        if not isinstance(self.messages, list) or not self.messages:
            raise ValueError("messages must be a non-empty list")
        for message in self.messages:
            if not isinstance(message, dict) or message.get("role") not in ROLES:
                raise ValueError(f"each message needs a role of {sorted(ROLES)}, got {message!r:.200}")
        if self.max_tokens is not None and self.max_tokens < 1:
            raise ValueError("max_tokens must be a positive integer")
        if self.reasoning_effort is not None and self.reasoning_effort not in REASONING_EFFORTS:
            raise ValueError(f"reasoning_effort must be one of {sorted(REASONING_EFFORTS)}")


@dataclass
class ChatResult:
    """A model's answer. Each tool call is `{"id", "name", "arguments": dict}`.

    A tool call whose arguments were not a JSON object carries `arguments == {}` and an `error` key
    saying why, so the caller can answer the model with that error instead of running the tool.
    """

    text: str
    tool_calls: list[dict]
    finish_reason: str
    prompt_tokens: int
    completion_tokens: int
    provider: str = ""
    model: str = ""
    context_window: int = 0
    call_id: str = ""
    raw: dict = field(default_factory=dict, repr=False)


def tool_call_parts(call: dict) -> tuple[str, str, dict]:
    """(id, name, arguments) of a tool call given in the wire or the neutral form."""
    function = call.get("function")
    if isinstance(function, dict):
        name, arguments = function.get("name", ""), function.get("arguments", {})
    else:
        name, arguments = call.get("name", ""), call.get("arguments", {})
    if isinstance(arguments, str):
        arguments, _ = parse_arguments(arguments)
    return str(call.get("id", "")), str(name), arguments if isinstance(arguments, dict) else {}


def parse_arguments(value: Any) -> tuple[dict, str | None]:
    """Tool-call arguments as a dict, and an error text when they were not a JSON object."""
    if isinstance(value, dict):
        return value, None
    if value is None or (isinstance(value, str) and not value.strip()):
        return {}, None
    try:
        parsed = json.loads(value)
    except (TypeError, ValueError) as exc:
        return {}, f"arguments are not valid JSON: {exc}"
    if not isinstance(parsed, dict):
        return {}, "arguments are not a JSON object"
    return parsed, None


def text_of(content: Any) -> str:
    """Message content as plain text: a string, or the text parts of a content list."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(part.get("text", "") for part in content if isinstance(part, dict) and
                       part.get("type") == "text")
    return str(content)


def assistant_message(result: ChatResult) -> dict:
    """The history message for a model answer, ready to send back with the tool results."""
    message: dict = {"role": "assistant", "content": result.text or None}
    if result.tool_calls:
        message["tool_calls"] = [
            {"id": call["id"], "type": "function",
             "function": {"name": call["name"], "arguments": json.dumps(call["arguments"])}}
            for call in result.tool_calls
        ]
    return message


def tool_message(tool_call_id: str, content: str) -> dict:
    """The history message carrying one tool's result back to the model."""
    return {"role": "tool", "tool_call_id": tool_call_id, "content": content}


def tool_spec(tool: dict) -> tuple[str, str, dict]:
    """(name, description, JSON schema) of a tool given OpenAI-style or bare."""
    function = tool.get("function", tool)
    return function["name"], function.get("description", ""), function.get("parameters") or {
        "type": "object", "properties": {}}
