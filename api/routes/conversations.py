"""Conversations: append and read messages, the turn lifecycle (preflight, commit), chat commands, turns."""

from __future__ import annotations

from ninja import Field as QField
from ninja import Query, Router, Schema

from api import idempotency
from api import schemas as s
from fermix_site.conf import conf
from memory.compactor import compact_now, compaction_preflight
from memory.conversations import ConversationKey, message_append, window_clear, window_read
from memory.prompt import compose_system_prompt
from memory.turn_runner import prompt_for, turn_run
from memory.turns import turn_commit

router = Router(tags=["conversations"])
CONV = "/agents/{agent}/conversations/{conv}"
CLEARED = "Started a new conversation. Long-term memory, prompt file revisions and scheduled jobs are kept."


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
                 "A replay of the first answer (201) to the same Idempotency-Key and body"))
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


@router.get(CONV + "/messages", response=s.WindowOut)
def read_window(request, agent: str, conv: str, query: Query[WindowQuery]):
    """The current window (after the latest checkpoint, which comes first), oldest first."""
    key = _key(conv)
    window = window_read(agent_id=agent, conversation=key, limit=query.limit)
    return {"conversation": str(key), "messages": [message_out(m) for m in window]}


@router.post(CONV + "/commit", response=s.CommitOut)
def commit(request, agent: str, conv: str, payload: s.CommitIn):
    """The turn was delivered: record its peak, start the background review, check compaction."""
    return turn_commit(agent_id=agent, conversation=str(_key(conv)), owner_id=payload.owner_id,
                       trust=request.auth.trust(payload.trust), peak_prompt_tokens=payload.peak_prompt_tokens,
                       context_window=payload.context_window, chat_type=payload.chat_type)


@router.post(CONV + "/preflight", response=s.PreflightOut)
def preflight(request, agent: str, conv: str, payload: s.PreflightIn):
    """Before a turn: compact when the previous turn's peak crossed the threshold."""
    return compaction_preflight(agent_id=agent, conversation=str(_key(conv)), owner_id=payload.owner_id,
                                context_window=payload.context_window)


@router.post(CONV + "/compact", response=s.CompactOut)
def compact(request, agent: str, conv: str, payload: s.CommandIn):
    """`/compact`: summarise the window now (operator trust)."""
    key = _key(conv)
    request.auth.require_operator_trust(payload.trust, "/compact")
    return compact_now(agent_id=agent, conversation=str(key))


@router.post(CONV + "/clear", response=s.ClearOut)
def clear(request, agent: str, conv: str, payload: s.CommandIn):
    """`/new`, `/clear`: start a new window (operator trust). Nothing is deleted."""
    key = _key(conv)
    request.auth.require_operator_trust(payload.trust, "/clear")
    return {"cleared": window_clear(agent_id=agent, conversation=key), "message": CLEARED}


@router.post(CONV + "/turns", response=s.TurnOut, openapi_extra=idempotency.documented(
    "The turn's answer; a retry with the same Idempotency-Key and body replays it"))
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


@router.get("/agents/{agent}/prompt", response=s.PromptOut, tags=["prompt"])
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
