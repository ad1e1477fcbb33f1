"""Conversations: append and read messages, the turn lifecycle (preflight, commit), chat commands, turns."""

from __future__ import annotations

import re

from django.db.models import OuterRef, Q, Subquery, Value
from django.db.models.functions import Coalesce
from ninja import Field as QField
from ninja import Query, Router, Schema

from api import idempotency
from api import schemas as s
from api.errors import ApiError
from fermix_site.conf import conf
from memory.compactor import compact_now, compaction_preflight
from memory.conversations import ConversationKey, message_append, window_clear, window_read
from memory.models import Conversation, Message
from memory.prompt import compose_system_prompt
from memory.turn_runner import prompt_for, turn_run
from memory.turns import turn_commit

router = Router(tags=["conversations"])
CONV = "/agents/{agent}/conversations/{conv}"
CLEARED = "Started a new conversation. Long-term memory, prompt file revisions and scheduled jobs are kept."


CURSOR = re.compile(r"([0-9]{1,19})\.([0-9]{1,19})")  # `<last message id>.<conversation id>` of a page's end
MAX_ID = 2**63 - 1  # the widest id column


class ConversationListQuery(Schema):
    cursor: str | None = QField(None, max_length=100, json_schema_extra={"pattern": "^" + CURSOR.pattern + "$"},
                                description="the `next_cursor` of the previous page")
    limit: int = QField(50, ge=1, le=500)


def _cursor(text: str) -> tuple[int, int]:
    """(last message id, conversation id) of a page's cursor; a 400 for anything else."""
    found = CURSOR.fullmatch(text)
    numbers = (int(found[1]), int(found[2])) if found else (-1, -1)
    if not all(0 <= number <= MAX_ID for number in numbers):
        raise ApiError(400, "invalid_cursor", "cursor must be the next_cursor of a previous page")
    return numbers


@router.get("/agents/{agent}/conversations", response=s.ConversationListOut,
            summary="List conversations, newest activity first")
def conversations(request, agent: str, query: Query[ConversationListQuery]):
    """The agent's conversations, newest activity (its newest message) first, a page at a time."""
    newest = Message.objects.filter(agent_id=agent, channel=OuterRef("channel"), chat_id=OuterRef("chat_id"),
                                    thread_scope=OuterRef("thread_scope")).order_by("-id").values("id")[:1]
    rows = Conversation.objects.filter(agent_id=agent).annotate(last=Coalesce(Subquery(newest), Value(0)))
    if query.cursor is not None:
        last, pk = _cursor(query.cursor)
        rows = rows.filter(Q(last__lt=last) | Q(last=last, pk__lt=pk))
    page = list(rows.order_by("-last", "-pk")[: query.limit + 1])
    more, page = len(page) > query.limit, page[: query.limit]
    said = dict(Message.objects.filter(pk__in=[c.last for c in page if c.last]).values_list("pk", "created_at"))
    return {"conversations": [conversation_out(c, said.get(c.last)) for c in page],
            "next_cursor": f"{page[-1].last}.{page[-1].pk}" if more else None}


def conversation_out(conversation: Conversation, last_said) -> dict:
    return {"conversation": conversation.key, "channel": conversation.channel, "chat_id": conversation.chat_id,
            "thread_scope": conversation.thread_scope, "owner_id": conversation.owner_id,
            "created_at": conversation.created_at, "last_message_id": conversation.last or None,
            "last_activity_at": last_said or conversation.created_at}


def _key(conv: str) -> ConversationKey:
    return ConversationKey.parse(conv)


def message_out(message) -> dict:
    return {"id": message.id, "role": message.role, "kind": message.kind, "content": message.content,
            "sender": message.sender, "trust": message.trust, "owner_id": message.owner_id,
            "metadata": message.metadata or {}, "created_at": message.created_at}


def _endpoint(agent: str, key: ConversationKey, action: str) -> str:
    return f"POST /agents/{agent}/conversations/{key}/{action}"


@router.post(CONV + "/messages", response={201: s.MessageCreated, 200: s.MessageCreated},
             openapi_extra=idempotency.documented(
                 "A replay of the first answer (201) to the same Idempotency-Key and body"), summary="Append a message")
def append_message(request, agent: str, conv: str, payload: s.MessageIn, idempotency_key: idempotency.KeyHeader):
    """Append one message to the conversation (the bot's record of what was said)."""
    key = _key(conv)
    if payload.created_at is not None:
        request.auth.require_operator("backfilling created_at")
    once = idempotency.keyed(request, key=idempotency_key, endpoint=_endpoint(agent, key, "messages"),
                             payload=payload)

    def append(also):
        return message_append(agent_id=agent, conversation=key, role=payload.role, content=payload.content,
                              owner_id=payload.owner_id, sender=payload.sender, trust=request.auth.trust(payload.trust),
                              kind=payload.kind, metadata=payload.metadata, created_at=payload.created_at,
                              chat_type=payload.chat_type, also=also)

    def created(message) -> dict:
        return {"id": message.id, "conversation": message.conversation_key, "created_at": message.created_at}

    return idempotency.append_once(once, append, created, s.MessageCreated)


class WindowQuery(Schema):
    limit: int | None = QField(None, ge=1, le=10_000, description="only the newest N messages")


@router.get(CONV + "/messages", response=s.WindowOut, summary="Read the conversation's window")
def read_window(request, agent: str, conv: str, query: Query[WindowQuery]):
    """The current window (after the latest checkpoint, which comes first), oldest first."""
    key = _key(conv)
    window = window_read(agent_id=agent, conversation=key, limit=query.limit)
    return {"conversation": str(key), "messages": [message_out(m) for m in window]}


@router.post(CONV + "/commit", response=s.CommitOut, summary="Commit a delivered turn")
def commit(request, agent: str, conv: str, payload: s.CommitIn):
    """The turn was delivered: record its peak, start the background review, check compaction."""
    return turn_commit(agent_id=agent, conversation=str(_key(conv)), owner_id=payload.owner_id,
                       trust=request.auth.trust(payload.trust), peak_prompt_tokens=payload.peak_prompt_tokens,
                       context_window=payload.context_window, chat_type=payload.chat_type)


@router.post(CONV + "/preflight", response=s.PreflightOut, summary="Compact before a turn if needed")
def preflight(request, agent: str, conv: str, payload: s.PreflightIn):
    """Before a turn: compact when the previous turn's peak crossed the threshold."""
    return compaction_preflight(agent_id=agent, conversation=str(_key(conv)), owner_id=payload.owner_id,
                                context_window=payload.context_window)


@router.post(CONV + "/compact", response=s.CompactOut, summary="/compact: summarise the window now")
def compact(request, agent: str, conv: str, payload: s.CommandIn):
    """`/compact`: summarise the window now (operator trust)."""
    key = _key(conv)
    request.auth.require_operator_trust(payload.trust, "/compact")
    return compact_now(agent_id=agent, conversation=str(key))


@router.post(CONV + "/clear", response=s.ClearOut, summary="/new, /clear: start a new window")
def clear(request, agent: str, conv: str, payload: s.CommandIn):
    """`/new`, `/clear`: start a new window (operator trust). Nothing is deleted."""
    key = _key(conv)
    request.auth.require_operator_trust(payload.trust, "/clear")
    return {"cleared": window_clear(agent_id=agent, conversation=key), "message": CLEARED}


@router.post(CONV + "/turns", response=s.TurnOut, openapi_extra=idempotency.documented(
    "The turn's answer; a retry with the same Idempotency-Key and body replays it"),
             summary="Run a whole turn through the model")
def turn(request, agent: str, conv: str, payload: s.TurnIn, idempotency_key: idempotency.KeyHeader):
    """A whole turn through the provider chain, with the memory tools offered to the model."""
    key = _key(conv)
    once = idempotency.keyed(request, key=idempotency_key, endpoint=_endpoint(agent, key, "turns"), payload=payload)

    def run(**hooks):
        return turn_run(agent_id=agent, conversation=key, content=payload.content, owner_id=payload.owner_id,
                        trust=request.auth.trust(payload.trust), sender=payload.sender,
                        context_window=payload.context_window, chat_type=payload.chat_type, **hooks)

    return idempotency.turn_once(once, run, s.TurnOut)


class PromptQuery(Schema):
    conversation: s.ConversationText | None = None
    owner_id: s.Ident | None = None
    realtime: bool = False
    chat_type: s.ChatType | None = QField(None, description="default: the conversation's, else `direct`")
    trust: s.Trust = "guest"


@router.get("/agents/{agent}/prompt", response=s.PromptOut, tags=["prompt"], summary="Show the composed prompt")
def prompt(request, agent: str, query: Query[PromptQuery]):
    """What the model sees: the composed system messages, the conversation's window and the prompt hash.

    USER.md and MEMORY.md render the agent's owner's rows (`owner_id` in the answer), whoever asks; the
    prompt is the one a speaker of `trust` sees in a chat of `chat_type` (USER.md left out for guests and
    outside direct chats, `parts` says so).
    """
    trust = request.auth.trust(query.trust)
    if query.conversation is not None:
        key = _key(query.conversation)
        composed, history = prompt_for(agent_id=agent, conversation=key, realtime=query.realtime,
                                       chat_type=query.chat_type, trust=trust)
    else:
        key, history = None, []
        composed = compose_system_prompt(agent_id=agent, realtime=query.realtime,
                                         chat_type=query.chat_type or "direct", trust=trust)
    return {"agent_id": agent, "owner_id": conf.memory.owner_id, "conversation": str(key) if key else None,
            "system_messages": list(composed.system_messages), "history": history,
            "prompt_hash": composed.prompt_hash, "parts": list(composed.parts), "usage": composed.usage}
