"""One whole turn: store the message, compact if needed, ask the model (with the memory tools), store
the reply, commit.

    turn_run(agent_id="main", conversation="telegram:42", content="hi", owner_id=None, trust="guest",
             sender="ana", context_window=None)
    → {"reply": "...", "notices": [...], "usage": {...}, "message_id": 17, "commit": {...}, "warnings": []}

The model sees the composed system prompt, then the conversation window (which already ends with the
new message), and is offered the memory tools as function tools. Tool calls are run with the caller's
trust (a guest's stay in its conversation, whatever the model was talked into) and fed back, at most
MAX_TOOL_ROUNDS times, so a model that keeps calling tools cannot hold a request for ever; and the whole
turn has `[fermix_core.timeouts] turn_ms`: once it is spent the chain raises BudgetSpent (the API's
`504 turn_timeout`), the user's message stays stored. The web server's worker timeout is above that
budget (see `serve`). `answer_with_tools` is shared with scheduled job runs.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from django.db import transaction

from fermix_site.conf import conf
from fermix_site.storage import is_storage_full
from memory.compactor import CompactionError, compaction_preflight
from memory.conversations import (
    ConversationKey,
    chat_type_of,
    chat_type_set,
    message_append,
    retry_when_locked,
    window_read,
)
from memory.models import Message, Role, Trust
from memory.prompt import ComposedPrompt, compose_system_prompt
from memory.tool_definitions import definitions
from memory.tools import ToolContext, ToolResult, refuse, run_tool
from memory.turns import turn_commit
from providers.base import ChatResult, assistant_message, tool_message
from providers.chain import chat
from providers.errors import ProviderError

logger = logging.getLogger("fermix.memory")

AGENT_TAG = "agent"
MAX_TOOL_ROUNDS = 5
TOOL_LIMIT_REPLY = "I could not finish looking things up in my memory this time; please ask again."
REPLAYED_ROLES = {Role.USER, Role.ASSISTANT, Role.SYSTEM}
REPLAYED_KINDS = {"chat", "voice_turn", "checkpoint"}
TOOL_DEFINITIONS = definitions("openai")


@dataclass
class ToolLoop:
    """The outcome of one model answer, however many tool rounds it took."""

    text: str = ""
    prompt_tokens: int = 0
    completion_tokens: int = 0
    peak_prompt_tokens: int = 0
    model_calls: int = 0
    tool_calls: list[dict] = field(default_factory=list)  # {"name", "ok", "code"}
    provider: str = ""
    model: str = ""
    context_window: int = 0
    call_ids: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)  # of the tool calls, each once

    def add(self, result: ChatResult) -> None:
        self.model_calls += 1
        self.prompt_tokens += result.prompt_tokens
        self.completion_tokens += result.completion_tokens
        # Each round resends the whole prompt, so the largest prompt is what the context window must hold.
        self.peak_prompt_tokens = max(self.peak_prompt_tokens, result.prompt_tokens)
        self.provider, self.model, self.context_window = result.provider, result.model, result.context_window
        self.call_ids.append(result.call_id)

    def usage(self) -> dict:
        return {"prompt_tokens": self.prompt_tokens, "completion_tokens": self.completion_tokens,
                "peak_prompt_tokens": self.peak_prompt_tokens, "model_calls": self.model_calls,
                "tool_calls": len(self.tool_calls), "provider": self.provider, "model": self.model}


def _run_call(call: dict, ctx: ToolContext, conversation_key: str) -> ToolResult:
    """The tool's answer to the model. A tool that fails (the database refusing a write, a fault of ours) is
    logged with its traceback and answered to the model as a refusal, `internal_error` (or `storage_full`):
    the model has been paid for and the user's message is stored, so the turn goes on and the model can
    still answer, instead of the whole turn failing."""
    if call.get("error"):  # the model's arguments were not a JSON object: tell it, run nothing
        return refuse("invalid_argument", call["error"])
    name = call.get("name", "")
    try:
        return run_tool(name, ctx, call.get("arguments", {}))
    except Exception as exc:  # noqa: BLE001 - see above; the error is logged, and recorded on the reply
        logger.exception("%s: the tool %s failed", conversation_key, name)
        if is_storage_full(exc):
            return refuse("storage_full", f"{name} failed: the server's storage is full; answer without it")
        return refuse("internal_error", f"{name} failed on the server (the error is logged); answer without it")


def answer_with_tools(*, messages: list[dict], ctx: ToolContext, agent_tag: str, conversation_key: str,
                      max_rounds: int = MAX_TOOL_ROUNDS, deadline: float | None = None) -> ToolLoop:
    """Ask the provider chain, running the memory tools the model calls, until it answers in text.

    Raises ProviderError (ContextLengthError when the prompt does not fit, BudgetSpent past
    `deadline`, a `time.monotonic()` value). Call it outside a transaction: the model may think for
    minutes.
    """
    loop, messages = ToolLoop(), list(messages)
    for round_number in range(max_rounds + 1):
        result = chat(messages=messages, tools=TOOL_DEFINITIONS, agent_tag=agent_tag, agent_id=ctx.agent_id,
                      conversation_key=conversation_key, deadline=deadline)
        loop.add(result)
        if not result.tool_calls:
            loop.text = result.text
            return loop
        if round_number == max_rounds:
            break
        messages.append(assistant_message(result))
        for call in result.tool_calls:
            outcome = _run_call(call, ctx, conversation_key)
            loop.warnings += [w for w in outcome.warnings if w not in loop.warnings]
            loop.tool_calls.append({"name": call.get("name", ""), "ok": outcome.ok,
                                    "code": outcome.data.get("error", "") if isinstance(outcome.data, dict) else ""})
            messages.append(tool_message(call["id"], json.dumps(outcome.as_dict(), ensure_ascii=False, default=str)))
    logger.warning("%s: the model still asked for tools after %d rounds; answering without them",
                   conversation_key, max_rounds)
    loop.text = result.text or TOOL_LIMIT_REPLY
    return loop


def history_messages(window: list[Message]) -> list[dict]:
    """The window as chat messages. Tool exchanges and notices are not replayed: a tool message
    without its call is refused by the providers, and notices were for the people in the chat."""
    return [{"role": m.role, "content": m.content} for m in window
            if m.role in REPLAYED_ROLES and m.kind in REPLAYED_KINDS]


def prompt_for(*, agent_id: str, conversation: ConversationKey, realtime: bool = False, chat_type: str | None = None,
               trust: str = Trust.OPERATOR) -> tuple[ComposedPrompt, list[dict]]:
    """The composed system prompt and the conversation's current window, as the model will see them when
    `trust` speaks in it; `chat_type` as given, else as the conversation last said."""
    chat_type = chat_type or chat_type_of(agent_id=agent_id, key=conversation)
    composed = compose_system_prompt(agent_id=agent_id, realtime=realtime, chat_type=chat_type, trust=trust)
    return composed, history_messages(window_read(agent_id=agent_id, conversation=conversation))


def _preflight(*, agent_id: str, key: ConversationKey, owner_id: str, context_window: int | None) -> str | None:
    try:
        outcome = compaction_preflight(agent_id=agent_id, conversation=str(key), owner_id=owner_id,
                                       context_window=context_window)
    except (CompactionError, ProviderError) as exc:
        # A failed compaction is recorded (and backed off) by the compactor; the turn still goes ahead.
        logger.warning("%s/%s: preflight compaction failed: %s", agent_id, key, exc)
        return None
    return outcome.get("notice") if outcome.get("compacted") else None


def _commit(*, agent_id: str, key: ConversationKey, owner_id: str, trust: str, peak: int | None,
            context_window: int | None) -> dict:
    try:
        return turn_commit(agent_id=agent_id, conversation=str(key), owner_id=owner_id, trust=trust,
                           peak_prompt_tokens=peak, context_window=context_window)
    except Exception:  # noqa: BLE001 - the reply is stored and must still be delivered
        logger.exception("%s/%s: turn commit failed after the reply was stored", agent_id, key)
        return {"review": "failed", "compacted": False, "notice": None}


def turn_run(*, agent_id: str, conversation: str | ConversationKey, content: str, owner_id: str | None = None,
             trust: str = Trust.GUEST, sender: str = "", context_window: int | None = None, resume: bool = False,
             chat_type: str | None = None,
             on_message: Callable[[Message], None] | None = None,
             on_answer: Callable[[dict], None] | None = None) -> dict:
    """Run one turn end to end and return `{reply, notices, usage, message_id, commit, warnings}`.

    The user message is stored first (with the caller's trust, so a guest's words stay flagged as a
    guest's), so it is kept even when the provider fails. A ContextLengthError is raised for the
    caller to answer with advice to /compact or /new.

    `resume`: an earlier attempt of this turn stored the user message already; it is not stored again.
    `chat_type`: as `message_append`'s; in a group or channel, or with a guest speaking, the prompt
    leaves USER.md out (`memory.prompt.user_md_withheld`).
    `on_message(message)` runs in the transaction of the user message, `on_answer(answer)` in the one
    of the reply and the commit: a record the caller writes there commits with them or not at all.
    """
    deadline = time.monotonic() + conf.timeouts.turn_ms / 1000
    key = ConversationKey.parse(conversation)
    owner_id = owner_id or conf.memory.owner_id
    if not resume:
        message_append(agent_id=agent_id, conversation=key, role=Role.USER, content=content, owner_id=owner_id,
                       sender=sender, trust=trust, chat_type=chat_type, also=on_message)
    elif chat_type is not None:
        chat_type_set(agent_id=agent_id, key=key, chat_type=chat_type)
    notices = []
    notice = _preflight(agent_id=agent_id, key=key, owner_id=owner_id, context_window=context_window)
    if notice:
        notices.append(notice)
    composed, history = prompt_for(agent_id=agent_id, conversation=key, chat_type=chat_type, trust=trust)
    ctx = ToolContext(agent_id=agent_id, owner_id=owner_id, conversation=key, trust=trust, actor_id="turn")
    loop = answer_with_tools(messages=[*composed.system_messages, *history], ctx=ctx, agent_tag=AGENT_TAG,
                             conversation_key=str(key), deadline=deadline)
    return retry_when_locked(lambda: _reply(agent_id=agent_id, key=key, owner_id=owner_id, trust=trust, loop=loop,
                                            notices=notices, context_window=context_window, on_answer=on_answer),
                             f"the reply on {agent_id}/{key}")


def _reply(*, agent_id: str, key: ConversationKey, owner_id: str, trust: str, loop: ToolLoop, notices: list[str],
           context_window: int | None, on_answer: Callable[[dict], None] | None) -> dict:
    """Store the reply and commit the turn in one transaction, so its answer is recorded whole or not at all."""
    with transaction.atomic():
        reply = message_append(
            agent_id=agent_id, conversation=key, role=Role.ASSISTANT, content=loop.text, owner_id=owner_id,
            sender=agent_id, trust=trust,
            metadata={"provider": loop.provider, "model": loop.model, "call_ids": loop.call_ids,
                      "tool_calls": loop.tool_calls, "peak_prompt_tokens": loop.peak_prompt_tokens},
        )
        committed = _commit(agent_id=agent_id, key=key, owner_id=owner_id, trust=trust,
                            peak=loop.peak_prompt_tokens or None,
                            context_window=context_window or loop.context_window or None)
        answer = {"reply": loop.text, "notices": notices + ([committed["notice"]] if committed.get("notice") else []),
                  "usage": loop.usage(), "message_id": reply.id, "commit": committed, "warnings": loop.warnings}
        if on_answer is not None:
            on_answer(answer)
    return answer
