"""OpenAI-compatible chat completions: OpenAI itself, Ollama, vLLM, llama.cpp server, OpenRouter."""

from __future__ import annotations

import json

from fermix_site.conf import ProviderConf
from providers.base import ChatRequest, parse_arguments, text_of, tool_call_parts, tool_spec
from providers.errors import ProviderError
from providers.transport import error_text

MESSAGE_KEYS = {"role", "content", "name", "tool_calls", "tool_call_id"}


def endpoint(base_url: str) -> str:
    """`…/v1/chat/completions`; a base URL without a path gets the usual `/v1`."""
    return versioned(base_url) + "/chat/completions"


def versioned(base_url: str) -> str:
    return base_url if "/" in base_url.partition("://")[2] else base_url + "/v1"


def build(provider: ProviderConf, request: ChatRequest) -> tuple[str, dict, dict]:
    """(url, headers, body) of the request."""
    headers = {"accept": "application/json"}
    if provider.api_key:
        headers["authorization"] = f"Bearer {provider.api_key}"
    body: dict = {"model": provider.model, "messages": [_message(m) for m in request.messages]}
    if request.tools:
        body["tools"] = [tool_definition(tool) for tool in request.tools]
    if request.max_tokens is not None:
        body["max_tokens"] = request.max_tokens
    if request.temperature is not None:
        body["temperature"] = request.temperature
    if request.reasoning_effort is not None:
        body["reasoning_effort"] = request.reasoning_effort
    return endpoint(provider.base_url), headers, body


def _message(message: dict) -> dict:
    out = {key: value for key, value in message.items() if key in MESSAGE_KEYS}
    if message.get("tool_calls"):
        out["tool_calls"] = [_wire_call(call) for call in message["tool_calls"]]
    if message["role"] == "tool" and not isinstance(out.get("content"), str):
        content = out.get("content")
        out["content"] = text_of(content) if isinstance(content, list) else json.dumps(content)
    out.setdefault("content", None if message["role"] == "assistant" else "")
    return out


def _wire_call(call: dict) -> dict:
    call_id, name, arguments = tool_call_parts(call)
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": json.dumps(arguments)}}


def tool_definition(tool: dict) -> dict:
    """A tool given OpenAI-style or bare, in this API's format."""
    name, description, parameters = tool_spec(tool)
    return {"type": "function", "function": {"name": name, "description": description, "parameters": parameters}}


def parse(data: dict) -> dict:
    """The ChatResult fields of a chat completion, or a transient ProviderError if it is not one."""
    choices = data.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        # OpenRouter and some proxies answer 200 with an error object when the upstream failed.
        detail = error_text(json.dumps(data["error"]).encode()) if "error" in data else "no choices"
        raise ProviderError(f"not a chat completion: {detail}", transient=True, status=200)
    message = choices[0].get("message")
    if not isinstance(message, dict):
        raise ProviderError("not a chat completion: the choice has no message", transient=True, status=200)
    tool_calls = [_result_call(index, call) for index, call in enumerate(message.get("tool_calls") or [])]
    usage = data.get("usage") if isinstance(data.get("usage"), dict) else {}
    return {
        "text": text_of(message.get("content")),
        "tool_calls": tool_calls,
        "finish_reason": choices[0].get("finish_reason") or ("tool_calls" if tool_calls else "stop"),
        "prompt_tokens": count(usage.get("prompt_tokens")),
        "completion_tokens": count(usage.get("completion_tokens")),
    }


def _result_call(index: int, call) -> dict:
    function = call.get("function") if isinstance(call, dict) else None
    if not isinstance(function, dict) or not isinstance(function.get("name"), str):
        raise ProviderError(f"not a chat completion: malformed tool call {call!r:.200}", transient=True, status=200)
    arguments, error = parse_arguments(function.get("arguments"))
    # Some local servers leave out the id; the tool result still needs one to point back at.
    result = {"id": call.get("id") or f"call_{index}", "name": function["name"], "arguments": arguments}
    if error:
        result["error"] = error
    return result


def count(value) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else 0
