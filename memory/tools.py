"""The memory tools offered to the model (and to bots over HTTP): store, recall, forget, list sources.

Each tool takes a `ToolContext` (who is asking, from which conversation or job run, with what trust)
and the model's arguments, and answers a `ToolResult`: `ok`, a short `result` text for the model, and
structured `data` (with row ids) for callers. A tool never raises on bad arguments: the refusal is
the answer, so the model can correct itself.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from django.db import transaction

from memory import prompt_files, search
from memory.admission import AdmissionError, Writer, admit_add, admit_archive, admit_replace, confined
from memory.conversations import ConversationError, ConversationKey
from memory.models import Memory, MemorySource, Message, ScopeType, Trust
from memory.rows import MemoryRowError, conversation_source
from memory.search import recall
from memory.search.when import parse_bound

SCOPES = ("current", "owner", "all")
SOURCES = ("memories", "history", "all")
OPERATOR_ONLY = "operator_only"
DEFAULT_LIMIT, MAX_LIMIT = 10, 50
SNIPPET = 500
# The longest text each argument may be, whichever way a call arrives (the HTTP tools, the MCP server, a
# model's call in a turn); the definitions a model is given say the same (`maxLength`). Without a bound, a
# query of a megabyte of quoted phrases or dates kept a worker busy for seconds to minutes.
MAX_CHARS = {"query": 1000, "key": 200, "reason": 2000}


@dataclass(frozen=True)
class ToolContext:
    agent_id: str
    owner_id: str
    conversation: ConversationKey | None = None
    trust: str = Trust.GUEST
    job_source_key: str = ""  # set for scheduled job runs: `job:<id>`
    actor_id: str = ""

    @property
    def is_job(self) -> bool:
        return bool(self.job_source_key)

    @property
    def confined(self) -> bool:
        """Guest trust: the tools touch and read only the current conversation (admission decides)."""
        return confined(self.writer())

    def writer(self) -> Writer:
        return Writer(kind="job" if self.is_job else "tool", agent_id=self.agent_id, owner_id=self.owner_id,
                      trust=self.trust, conversation=self.conversation, job_source_key=self.job_source_key,
                      actor_id=self.actor_id or ("job" if self.is_job else "memory_store"))


@dataclass
class ToolResult:
    ok: bool
    result: str
    data: dict | list = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)  # the change was made, but not all of it shows yet
    meta: dict | None = None  # recall: which mode ran, and why a weaker one did

    def as_dict(self) -> dict:
        answer = {"ok": self.ok, "result": self.result, "data": self.data, "warnings": self.warnings}
        return answer if self.meta is None else {**answer, "meta": self.meta}


def refuse(code: str, message: str) -> ToolResult:
    return ToolResult(False, message, {"error": code})


def _text(arguments: dict, name: str) -> str | None:
    value = arguments.get(name)
    if value is None:
        return None
    return value if isinstance(value, str) else str(value)


def _int(arguments: dict, name: str) -> int | None:
    value = arguments.get(name)
    if value is None or isinstance(value, bool):
        return None
    try:
        return int(value)
    except (TypeError, ValueError):
        raise MemoryRowError("invalid_argument", f"{name} must be a whole number") from None


def memory_row_data(row: Memory) -> dict:
    return {"type": "memory", "id": row.id, "key": row.key, "value": row.value, "category": row.category,
            "scope_type": row.scope_type, "scope_id": row.scope_id, "owner_id": row.owner_id,
            "archived": row.archived_at is not None, "updated_at": row.updated_at.isoformat()}


def message_data(message: Message) -> dict:
    return {"type": "message", "id": message.id, "conversation": message.conversation_key, "role": message.role,
            "kind": message.kind, "content": message.content[:SNIPPET], "created_at": message.created_at.isoformat()}


def _source_for(ctx: ToolContext) -> MemorySource | None:
    if ctx.is_job:
        return MemorySource.objects.filter(agent_id=ctx.agent_id, key=ctx.job_source_key).first()
    if ctx.conversation is None:
        return None
    return conversation_source(ctx.agent_id, ctx.conversation)


def _rebuild_if_rendered(row: Memory, trigger: str) -> list[str]:
    """Rebuild when the row may appear in a prompt file (the rebuild writes nothing if nothing changed);
    the warnings of a rebuild that failed after the row was committed."""
    if not row.promote_target or row.scope_type == ScopeType.JOB:
        return []
    return prompt_files.prompt_files_rebuild_after_commit(agent_id=row.agent_id, trigger=trigger,
                                                          memory_ids=[row.id]).warnings


def memory_store(ctx: ToolContext, arguments: dict) -> ToolResult:
    """key+value: a conversation note (never rendered); +category: a long-term row (prompt files rebuilt);
    id+value: correct an existing row."""
    try:
        value, memory_id = _text(arguments, "value"), _int(arguments, "id")
        category = _text(arguments, "category") or ""
        if memory_id is not None:
            if value is None:
                return refuse("invalid_argument", "give the new value with the id")
            row = admit_replace(ctx.writer(), memory_id=memory_id, value=value, category=category or None,
                                reason=_text(arguments, "reason") or "")
            warnings = _rebuild_if_rendered(row, "memory_store")
            return ToolResult(True, f"Updated memory #{row.id}: {row.value}", memory_row_data(row), warnings)
        key = _text(arguments, "key")
        if not key or value is None:
            return refuse("invalid_argument", "memory_store needs key and value (or id and value to correct a row)")
        with transaction.atomic():
            row, action = admit_add(ctx.writer(), key=key, value=value, category=category, source=_source_for(ctx),
                                    reason=_text(arguments, "reason") or "")
        warnings = _rebuild_if_rendered(row, "memory_store")
        kind = "note for this conversation" if not row.category else f"{row.category} memory"
        text = f"Stored {kind} #{row.id} ({action}): {row.value}"
        if category and not row.category:  # admission keeps a guest's facts in its conversation
            text += f" (with guest trust a fact stays a note of this conversation, not {category} memory)"
        return ToolResult(True, text, {**memory_row_data(row), "action": action}, warnings)
    except (AdmissionError, MemoryRowError) as exc:
        return refuse(exc.code, str(exc))


def _memory_filters(ctx: ToolContext, scope: str) -> dict:
    if ctx.is_job:
        return {"agent_id": ctx.agent_id, "scope_type": ScopeType.JOB, "scope_id": ctx.job_source_key,
                "archived_at__isnull": True}
    filters = {"agent_id": ctx.agent_id, "archived_at__isnull": True}
    if scope == "all":
        return filters
    filters["owner_id"] = ctx.owner_id
    if ctx.confined:  # a guest stays in its conversation: its notes, not the owner's profile or the agent's rows
        if ctx.conversation is None:
            raise MemoryRowError("invalid_argument", "scope current needs a conversation")
        return {**filters, "scope_type": ScopeType.CONVERSATION, "scope_id": str(ctx.conversation)}
    filters["scope_type"] = [ScopeType.OWNER, ScopeType.AGENT, ScopeType.CONVERSATION]
    if scope == "current":
        visible = [ctx.owner_id, ctx.agent_id] + ([str(ctx.conversation)] if ctx.conversation else [])
        filters["scope_id"] = visible
    return filters


def _history_filters(ctx: ToolContext, scope: str) -> dict:
    filters = {"agent_id": ctx.agent_id}
    if scope == "owner":
        filters["owner_id"] = ctx.owner_id
    elif scope == "current":
        if ctx.conversation is None:
            raise MemoryRowError("invalid_argument", "scope current needs a conversation")
        filters.update(ctx.conversation.filter())
    return filters


def memory_recall(ctx: ToolContext, arguments: dict) -> ToolResult:
    """Key lookup, or full-text search over memories and/or history, in scope current, owner or all."""
    try:
        scope = _text(arguments, "scope") or "current"
        source = _text(arguments, "source") or "memories"
        limit = min(max(_int(arguments, "limit") or DEFAULT_LIMIT, 1), MAX_LIMIT)
        key, query = _text(arguments, "key"), _text(arguments, "query")
        if scope not in SCOPES:
            return refuse("invalid_argument", f"scope must be one of {', '.join(SCOPES)}")
        if source not in SOURCES:
            return refuse("invalid_argument", f"source must be one of {', '.join(SOURCES)}")
        if ctx.is_job and source != "memories":
            return refuse("forbidden", "scheduled job runs recall only their own job memories, not history")
        if scope != "current" and ctx.confined:
            return refuse(OPERATOR_ONLY, f"scope {scope} needs operator trust; with guest trust recall searches "
                                         "only this conversation (scope current)")
        if not key and not (query and query.strip()):
            return refuse("invalid_argument", "memory_recall needs key or query")
        mode = _text(arguments, "mode") or recall.default_mode()
        if mode not in recall.MODES:
            return refuse("invalid_argument", f"mode must be one of {', '.join(recall.MODES)}")
        after, before = _bound(arguments, "after"), _bound(arguments, "before")
        found: list[dict] = []
        meta = None
        if source in ("memories", "all"):
            filters = _memory_filters(ctx, scope)
            if key:
                orm = search.orm_filters(filters)
                rows = list(Memory.objects.filter(key=key.strip(), **orm).order_by("-updated_at")[:limit])
                found += [memory_row_data(r) for r in rows]
            else:
                answer = recall.recall(search.MEMORIES, query=query, filters=filters, limit=limit, mode=mode,
                                       after=after, before=before)
                found += [_explained(memory_row_data(r), r) for r in answer.rows]
                meta = answer.meta
        if source in ("history", "all") and query:
            answer = recall.recall(search.MESSAGES, query=query, filters=_history_filters(ctx, scope), limit=limit,
                                   mode=mode, after=after, before=before)
            found += [_explained(message_data(m), m) for m in answer.rows]
            meta = answer.meta if meta is None or answer.degraded else meta
    except (MemoryRowError, ConversationError) as exc:
        return refuse(getattr(exc, "code", "invalid_argument"), str(exc))
    if not found:
        return ToolResult(True, "No matching memories.", [], meta=meta)
    return ToolResult(True, "\n".join(_line(item) for item in found), found, meta=meta)


def _bound(arguments: dict, name: str):
    value = _text(arguments, name)
    if value is None or not value.strip():
        return None
    try:
        return parse_bound(value)
    except ValueError:
        raise MemoryRowError("invalid_argument", f"{name} must be an ISO date or date-time, e.g. 2023-08-01") from None


def _explained(item: dict, row) -> dict:
    return {**item, "signals": row.signals, "context": row.context}


def _line(item: dict) -> str:
    if item["type"] == "memory":
        return f"[memory #{item['id']}] ({item['category'] or 'note'}, {item['scope_type']}) {item['value']}"
    return f"[message #{item['id']} {item['conversation']} {item['role']} {item['created_at'][:16]}] {item['content']}"


def memory_forget(ctx: ToolContext, arguments: dict) -> ToolResult:
    """Archive a row by id; it leaves recall and the prompt files and can be restored."""
    try:
        memory_id = _int(arguments, "id")
        if memory_id is None:
            return refuse("invalid_argument", "memory_forget needs the id of the row to archive")
        row = admit_archive(ctx.writer(), memory_id=memory_id, reason=_text(arguments, "reason") or "forgotten")
    except (AdmissionError, MemoryRowError) as exc:
        return refuse(exc.code, str(exc))
    warnings = _rebuild_if_rendered(row, "memory_forget")
    return ToolResult(True, f"Archived memory #{row.id} (it can be restored).", memory_row_data(row), warnings)


def memory_sources_list(ctx: ToolContext, arguments: dict) -> ToolResult:
    """Memory sources of the agent: conversations and scheduled jobs that wrote rows (a job run sees its
    own; a guest its conversation's, since other sources name other chats)."""
    sources = MemorySource.objects.filter(agent_id=ctx.agent_id).order_by("source_type", "key")
    if ctx.is_job:
        sources = sources.filter(key=ctx.job_source_key)
    elif ctx.confined:
        sources = sources.filter(key=ctx.conversation.source_key) if ctx.conversation else sources.none()
    data = [{"id": s.id, "key": s.key, "source_type": s.source_type, "name": s.name,
             "description": s.description} for s in sources[:500]]
    text = "\n".join(f"{d['key']} ({d['source_type']}) {d['name']}" for d in data) or "No memory sources."
    return ToolResult(True, text, data)


TOOLS = {
    "memory_store": memory_store,
    "memory_recall": memory_recall,
    "memory_forget": memory_forget,
    "memory_sources_list": memory_sources_list,
}


def run_tool(name: str, ctx: ToolContext, arguments) -> ToolResult:
    if name not in TOOLS:
        return refuse("unknown_tool", f"unknown tool {name!r}; the tools are {', '.join(TOOLS)}")
    if not isinstance(arguments, dict):
        return refuse("invalid_argument", "arguments must be a JSON object")
    for argument, most in MAX_CHARS.items():
        value = _text(arguments, argument)
        if value is not None and len(value) > most:
            return refuse("invalid_argument", f"{argument} is {len(value):,} characters long; at most {most:,}")
    return TOOLS[name](ctx, arguments)
