"""Memory: the tools over HTTP, listing and searching rows, archive and restore, review, sources,
realtime transcripts."""

from __future__ import annotations

from typing import Literal

from django.db import transaction
from jsonschema import Draft202012Validator
from ninja import Field, Query, Router, Schema, Status

from api import schemas as s
from api.errors import ApiError
from fermix_site.conf import conf
from memory.admission import Writer, admit_add, admit_replace
from memory.conversations import ConversationKey
from memory.models import Memory, MemorySource, ReviewRun, Trust
from memory.prompt_files import prompt_files_rebuild_after_commit
from memory.reviewer import review_now
from memory.reviewer import review_undo as undo
from memory.rows import memory_archive, memory_decide, memory_history, memory_list, memory_pending, memory_restore
from memory.search import search_memories
from memory.tool_definitions import FORMATS, ToolDefinition, definitions
from memory.tool_definitions import TOOLS as TOOL_DEFINITIONS
from memory.tools import run_tool
from memory.transcripts import realtime_conversation, transcript_store

router = Router(tags=["memory"])
TRANSCRIPTS_OFF = "persist_transcripts is off ([fermix_core.memory] in config.toml); nothing was stored"


def memory_out(row: Memory) -> dict:
    return {"id": row.id, "key": row.key, "value": row.value, "category": row.category,
            "scope_type": row.scope_type, "scope_id": row.scope_id, "owner_id": row.owner_id,
            "archived": row.archived_at is not None, "archived_at": row.archived_at,
            "archive_reason": row.archive_reason, "source_type": row.source_type,
            "state": row.state, "approval": row.approval or None,
            "created_at": row.created_at, "updated_at": row.updated_at}



class ToolsQuery(Schema):
    format: Literal[FORMATS] = Field("openai", description="openai (function tools), anthropic (tools with "
                                                          "`input_schema`) or mcp (MCP `Tool`s, with `agent` and "
                                                          "`conversation` among the arguments)")


@router.get("/agents/{agent}/tools", response=s.ToolDefinitionsOut,
            summary="Get the memory tools' definitions for a model")
def tool_definitions(request, agent: str, query: Query[ToolsQuery]):
    """The memory tools' definitions, ready to hand to a model: run the model's calls with `POST …/tools/{tool}`."""
    return {"format": query.format, "tools": definitions(query.format)}


TOOL_HELP = ("Run the tool as the model would, with the arguments it gave. A refusal is `ok: false` with the "
             "reason in `data.error`; with guest trust the tool touches only the conversation named (see "
             "`memory.admission`).")


def _tool_operation(definition: ToolDefinition) -> None:
    """`POST /agents/{agent}/tools/<tool>`, one operation per tool: the document types each tool's arguments
    with the tool's own definition, and a call is checked against it (422) before the tool runs."""
    arguments = Draft202012Validator(definition.parameters)

    def run(request, agent, payload):
        problems = sorted(arguments.iter_errors(payload.arguments), key=lambda e: [str(p) for p in e.path])
        problem = problems[0] if problems else None
        if problem is not None:
            where = ".".join(["arguments", *map(str, problem.path)])
            raise ApiError(422, "invalid_input", f"{where}: {problem.message}"[:500])
        ctx = request.auth.tool_context(agent_id=agent, conversation=payload.conversation,
                                        asserted_trust=payload.trust, owner_id=payload.owner_id)
        return run_tool(definition.name, ctx, payload.arguments).as_dict()

    run.__name__ = run.__qualname__ = definition.name
    run.__doc__ = f"{definition.description}\n\n{TOOL_HELP}"
    run.__annotations__ = {"agent": str, "payload": s.tool_body(definition)}
    router.post(f"/agents/{{agent}}/tools/{definition.name}", response=s.ToolOut,
                summary=f"Run {definition.name}: {definition.title[0].lower()}{definition.title[1:]}")(run)


for _definition in TOOL_DEFINITIONS:
    _tool_operation(_definition)


class MemoryQuery(Schema):
    owner_id: s.Ident | None = None
    category: Literal["identity", "preference", "interest", "goal", "context", "directive"] | None = None
    scope_type: Literal["owner", "agent", "conversation", "job"] | None = None
    archived: Literal["false", "true", "all"] = Field("false", description="live rows, archived rows, or both")
    q: str | None = Field(None, max_length=1000, description="full-text search over keys and values")
    state: Literal["pending"] | None = Field(None, description="`pending`: only the rows with a change waiting "
                                                               "for the owner's approval (directive_approval), "
                                                               "oldest first")
    limit: int = Field(100, ge=1, le=500)


ARCHIVED = {"false": False, "true": True, "all": None}


@router.get("/agents/{agent}/memories", response=s.MemoryListOut, summary="List or search memory rows")
def memories(request, agent: str, query: Query[MemoryQuery]):
    """List rows newest first, or search them with `q` (best match first)."""
    archived = ARCHIVED[query.archived]
    if query.state == "pending":
        rows = memory_pending(agent_id=agent)[: query.limit]
    elif query.q:
        filters = {"agent_id": agent, "owner_id": query.owner_id, "category": query.category,
                   "scope_type": query.scope_type}
        if archived is not None:
            filters["archived_at__isnull"] = not archived
        rows = search_memories(query=query.q, filters=filters, limit=query.limit)
    else:
        rows = memory_list(agent_id=agent, owner_id=query.owner_id, category=query.category,
                           scope_type=query.scope_type, archived=archived)[: query.limit]
    return {"memories": [memory_out(row) for row in rows]}


def event_out(event) -> dict:
    return {"id": event.id, "action": event.action, "before_value": event.before_value,
            "after_value": event.after_value, "before_category": event.before_category,
            "after_category": event.after_category, "actor_type": event.actor_type, "actor_id": event.actor_id,
            "run_id": event.run_id, "reason": event.reason, "created_at": event.created_at}


def _operator_writer(request, *, agent_id: str, owner_id: str) -> Writer:
    """An operator's change through the API: admission's operator column (owner or agent scope by category)."""
    return Writer(kind="operator", agent_id=agent_id, owner_id=owner_id, trust=Trust.OPERATOR,
                  actor_id=request.auth.actor)


@router.post("/agents/{agent}/memories", response={201: s.MemoryAddedOut, 200: s.MemoryAddedOut},
             summary="Add a long-term memory")
def memory_add(request, agent: str, payload: s.MemoryIn):
    """Add a long-term row (operator key), through admission: the category decides the scope, and a live row
    with the same key is replaced (200) rather than duplicated. The prompt files are rebuilt."""
    request.auth.require_operator("adding a memory")
    writer = _operator_writer(request, agent_id=agent, owner_id=payload.owner_id or conf.memory.owner_id)
    with transaction.atomic():
        row, action = admit_add(writer, key=payload.key, value=payload.value, category=payload.category,
                                reason=payload.reason)
    return Status(201 if action == "add" else 200, {**_rebuilt(row, "api_add"), "action": action})


@router.get("/memories/{memory_id}", response=s.MemoryDetailOut, summary="Get a memory and its history")
def memory_detail(request, memory_id: int):
    """One row, archived or not, with every change to it (who, when, why), oldest first."""
    row = _row_of(request, memory_id)
    return {"memory": memory_out(row), "history": [event_out(e) for e in memory_history(memory_id=row.id)]}


@router.patch("/memories/{memory_id}", response=s.MemoryChangeOut, summary="Correct a memory")
def memory_edit(request, memory_id: int, payload: s.MemoryPatchIn):
    """Correct a row's value or category (operator key), through admission, recorded in its history with the
    reason. The prompt files are rebuilt."""
    row = _row_for(request, memory_id, "changing a memory")
    if payload.value is None and payload.category is None:
        raise ApiError(400, "nothing_to_change", "send value, category or both")
    writer = _operator_writer(request, agent_id=row.agent_id, owner_id=row.owner_id)
    row = admit_replace(writer, memory_id=row.id, value=row.value if payload.value is None else payload.value,
                        category=payload.category, reason=payload.reason)
    return _rebuilt(row, "api_edit")


def _row_of(request, memory_id: int) -> Memory:
    row = Memory.objects.filter(pk=memory_id).first()
    if row is None:
        raise ApiError(404, "not_found", f"memory row {memory_id} does not exist")
    request.auth.require_agent(row.agent_id)
    return row


def _row_for(request, memory_id: int, action: str) -> Memory:
    request.auth.require_operator(action)
    return _row_of(request, memory_id)


def _rebuilt(row: Memory, trigger: str) -> dict:
    """Rebuild USER.md and MEMORY.md so the change shows in the next prompt, and say where the row is."""
    rebuild = prompt_files_rebuild_after_commit(agent_id=row.agent_id, trigger=trigger, memory_ids=[row.id])
    return {"memory": memory_out(row), "rendered_in": rebuild.shown_in(row.id), "warnings": rebuild.warnings}


@router.post("/memories/{memory_id}/archive", response=s.MemoryChangeOut, summary="Archive a memory")
def archive(request, memory_id: int, payload: s.ArchiveIn):
    """Archive a row (operator key); it leaves the prompt files and recall, and can be restored."""
    row = _row_for(request, memory_id, "archiving a memory")
    row = memory_archive(memory_id=row.id, archived_by=request.auth.actor, reason=payload.reason,
                         actor_type="operator", actor_id=request.auth.actor)
    return _rebuilt(row, "api_archive")


@router.post("/memories/{memory_id}/approve", response=s.MemoryChangeOut, summary="Approve a waiting directive change")
def approve(request, memory_id: int, payload: s.DecisionIn):
    """Approve the change waiting on a row (operator key): made now, the prompt files rebuilt."""
    return _decide(request, memory_id, payload, approve=True)


@router.post("/memories/{memory_id}/reject", response=s.MemoryChangeOut, summary="Reject a waiting directive change")
def reject(request, memory_id: int, payload: s.DecisionIn):
    """Reject the change waiting on a row (operator key): nothing changes; the history keeps it."""
    return _decide(request, memory_id, payload, approve=False)


def _decide(request, memory_id: int, payload, *, approve: bool) -> dict:
    row = _row_for(request, memory_id, "deciding on a pending memory change")
    row = memory_decide(memory_id=row.id, approve=approve, actor_id=request.auth.actor, reason=payload.reason)
    return _rebuilt(row, "api_approve" if approve else "api_reject")


@router.post("/memories/{memory_id}/restore", response=s.MemoryChangeOut, summary="Restore an archived memory")
def restore(request, memory_id: int):
    """Un-archive a row (operator key); the prompt files are rebuilt so it reappears at once."""
    row = _row_for(request, memory_id, "restoring a memory")
    row = memory_restore(memory_id=row.id, actor_type="operator", actor_id=request.auth.actor,
                         reason="restored through the API")
    return _rebuilt(row, "api_restore")


@router.post("/agents/{agent}/review", response=s.ReviewOut, summary="Review the conversation now")
def review(request, agent: str, payload: s.ReviewIn):
    """`memory_review --now` (operator key): review now, past the interval gates; same JSON."""
    request.auth.require_operator("a memory review")
    conversation = str(ConversationKey.parse(payload.conversation)) if payload.conversation is not None else None
    return review_now(agent_id=agent, conversation=conversation, owner_id=payload.owner_id)


class ReviewRunQuery(Schema):
    conversation: s.ConversationText | None = None
    limit: int = Field(50, ge=1, le=500)


@router.get("/agents/{agent}/review-runs", response=s.ReviewRunListOut, summary="List review runs")
def review_runs(request, agent: str, query: Query[ReviewRunQuery]):
    """Review runs newest first, with their outcome: the ids to undo one with."""
    runs = ReviewRun.objects.filter(agent_id=agent).order_by("-started_at", "-id")
    if query.conversation is not None:
        runs = runs.filter(conversation_key=str(ConversationKey.parse(query.conversation)))
    return {"runs": [{"id": r.id, "conversation": r.conversation_key, "owner_id": r.owner_id, "trigger": r.trigger,
                      "status": r.status, "reason": r.reason, "ops_added": r.ops_added, "ops_replaced": r.ops_replaced,
                      "ops_archived": r.ops_archived, "ops_skipped": r.ops_skipped, "input_tokens": r.input_tokens,
                      "started_at": r.started_at, "finished_at": r.finished_at, "undone_at": r.undone_at}
                     for r in runs[: query.limit]]}


@router.post("/review-runs/{run_id}/undo", response=s.UndoOut, summary="Undo a review run")
def review_undo(request, run_id: int):
    """Undo a review run's operations (operator key)."""
    request.auth.require_operator("undoing a review")
    agent_id = ReviewRun.objects.filter(pk=run_id).values_list("agent_id", flat=True).first()
    if agent_id is None:
        raise ApiError(404, "not_found", f"review run {run_id} does not exist")
    request.auth.require_agent(agent_id)
    return undo(run_id=run_id, actor=request.auth.actor)


@router.get("/agents/{agent}/memory-sources", response=s.MemorySourcesOut, summary="List memory sources")
def memory_sources(request, agent: str):
    """Where the agent's memories come from: conversations and scheduled jobs (`job:<id>`)."""
    sources = MemorySource.objects.filter(agent_id=agent).order_by("source_type", "key")[:1000]
    return {"sources": [{"id": x.id, "key": x.key, "source_type": x.source_type, "name": x.name,
                         "description": x.description} for x in sources]}


@router.post("/agents/{agent}/realtime/transcripts", response={200: s.TranscriptOut, 201: s.TranscriptOut},
             tags=["realtime"], summary="Store a voice transcript")
def transcript(request, agent: str, payload: s.TranscriptIn):
    """A final voice transcript: stored as a `voice_turn` (201) when `persist_transcripts` is on, else 200.

    A transcript is stored as the owner's words (operator trust), so only a key that may speak for the
    owner may send one: an operator key, or a channel key made with `--may-assert-operator`."""
    request.auth.trust(Trust.OPERATOR)
    conversation = str(realtime_conversation(payload.device_id))
    message = transcript_store(agent_id=agent, device_id=payload.device_id, role=payload.role, text=payload.text,
                               owner_id=payload.owner_id)
    if message is None:
        return Status(200, {"stored": False, "conversation": conversation, "reason": TRANSCRIPTS_OFF})
    return Status(201, {"stored": True, "id": message.id, "conversation": conversation})
