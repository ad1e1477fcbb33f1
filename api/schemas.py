"""Request and response shapes of the API: what the OpenAPI document shows and what ninja validates.

Field names are the contract's (CONTRACT §6). Services validate again; these schemas exist so a bot
author gets a 422 naming the field before anything runs, and a typed document to generate clients from.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from ninja import Field, Schema
from pydantic import AfterValidator, AwareDatetime, BeforeValidator, Strict, create_model

from fermix_site.conf import ID_PATTERN, valid_id
from memory.conversations import KEY_PATTERN
from memory.tool_definitions import ToolDefinition
from memory.transcripts import DEVICE_PATTERN


def _ident(value: str) -> str:
    if not valid_id(value):
        raise ValueError("use 1-64 of A-Z a-z 0-9 _ . - (not '.' or '..')")
    return value


# The patterns are shown in the document; the services check them (with their own error codes).
Ident = Annotated[str, Field(min_length=1, max_length=64, json_schema_extra={"pattern": ID_PATTERN}),
                  AfterValidator(_ident)]
# What Python's str.strip() removes, as a class both Python and the document's regular expressions read alike.
_SPACE = "\\t-\\r\\x1c-\\x20\\x85\\xa0\\u1680\\u2000-\\u200a\\u2028\\u2029\\u202f\\u205f\\u3000"
NOT_BLANK = f"[^{_SPACE}]"  # a text with something in it once stripped
BLANK = f"^[{_SPACE}]*$"
ScopeText = Annotated[str, Field(min_length=1, max_length=600, json_schema_extra={
    "pattern": "^(?:global|" + KEY_PATTERN.strip("^$") + ")$",
    "description": "`global` for the prompt files, a conversation key for checkpoints"})]
ConversationText = Annotated[str, Field(max_length=600, json_schema_extra={
    "pattern": KEY_PATTERN, "description": "conversation key `<channel>:<chat_id>[:<thread_scope>]`"})]
Trust = Annotated[Literal["operator", "guest"], Field(
    description="who is speaking: `guest` (the default: anyone but the owner) or `operator` (the owner). A channel "
                "key may send `operator` only if it was created with `apikey_create --may-assert-operator` "
                "(else 403 `trust_not_allowed`); with guest trust the memory tools touch only this conversation")]
ChatType = Annotated[Literal["direct", "group", "channel"], Field(
    description="who is in the chat: `direct` (the owner alone with the assistant), `group` or `channel`. "
                "Remembered as the conversation's; outside a direct chat (and whenever a guest speaks) the "
                "prompt leaves USER.md out unless `[fermix_core.memory] user_md_in_groups` allows it")]
Text = Annotated[str, Field(max_length=512 * 1024)]
MAX_INT = 2**31 - 1  # every integer column is at least this wide on SQLite and PostgreSQL


def _json_integer(value):
    # JSON Schema's integer: 5 and 5.0, never `true` (pydantic would take it as 1) nor "5".
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


def json_int(lo: int, hi: int):
    """A JSON integer (see _json_integer) from lo to hi. The bounds come first, in the type itself, so that
    the document shows them as minimum and maximum, `json_int(…) | None` included (pydantic writes them
    raw in any other order)."""
    return Annotated[int, Field(ge=lo, le=hi), Strict(), BeforeValidator(_json_integer)]


Tokens = json_int(1, 1_000_000_000)


class Error(Schema):
    code: str = Field(description="stable machine-readable reason, e.g. `invalid_key`, `stale_base`")
    message: str = Field(description="what went wrong and what to do about it")


class ErrorOut(Schema):
    error: Error


WARNINGS_HELP = ("what of a committed change is not in place yet: `prompt_files_not_rebuilt` when the change "
                 "is stored but USER.md / MEMORY.md could not be rewritten (a full disk); the next rebuild "
                 "writes them")

Warnings = Annotated[list[str], Field(description=WARNINGS_HELP)]


def _iso_text(value):
    """A time in a JSON body is ISO 8601 text: a number (which pydantic would read as epoch seconds) is refused."""
    if not isinstance(value, str):
        raise ValueError("a time must be ISO 8601 text with its offset, e.g. 2023-08-01T18:30:00+01:00")
    return value


IsoTime = Annotated[AwareDatetime, BeforeValidator(_iso_text)]


# --- conversations ---------------------------------------------------------------------------------


class MessageIn(Schema):
    role: Literal["user", "assistant", "system", "tool"]
    content: Text
    sender: str = Field("", max_length=256)
    owner_id: Ident | None = None
    trust: Trust = "guest"
    kind: Literal["chat", "voice_turn", "notice", "tool"] = "chat"
    metadata: dict[str, Any] = Field(default_factory=dict)
    chat_type: ChatType | None = None
    created_at: IsoTime | None = Field(
        None, description="backfill: when it was said (ISO 8601 with its offset; operator keys only; not before the "
                          "conversation's newest message, at most 5 minutes in the future); default now")


class MessageCreated(Schema):
    id: int
    conversation: str
    created_at: datetime


class MessageOut(Schema):
    id: int
    role: str
    kind: str
    content: str
    sender: str
    trust: str
    owner_id: str
    metadata: dict[str, Any]
    created_at: datetime


class WindowOut(Schema):
    conversation: str
    messages: list[MessageOut]


class CommitIn(Schema):
    owner_id: Ident | None = None
    trust: Trust = "guest"
    chat_type: ChatType | None = None
    peak_prompt_tokens: json_int(0, 1_000_000_000) | None = Field(...,
                                           description="the turn's largest provider-reported prompt tokens; "
                                                       "null when the provider gave none")
    context_window: Tokens | None = Field(None, description="the model's context window in tokens "
                                                             "(default: the primary provider's)")


class CommitOut(Schema):
    review: str = Field(description="`queued` or `disabled` (the background review is never awaited)")
    compaction: str = Field(description="`queued`, `not_needed`, `backoff` or `disabled`: the post-delivery "
                                        "compaction runs in the background")
    compacted: bool
    notice: str | None


class PreflightIn(Schema):
    owner_id: Ident | None = None
    context_window: Tokens | None = None


class PreflightOut(Schema):
    compacted: bool
    notice: str | None


class CommandIn(Schema):
    trust: Trust = "guest"


class CompactOut(Schema):
    message: str
    compacted: bool
    messages: int = Field(0, description="how many messages the checkpoint summarises")
    revision: int | None = Field(None, description="the checkpoint resource revision written")


class ClearOut(Schema):
    cleared: int = Field(description="messages that left the window (they are kept, not deleted)")
    message: str


class TurnIn(Schema):
    content: Annotated[str, Field(min_length=1, max_length=512 * 1024)]
    sender: str = Field("", max_length=256)
    owner_id: Ident | None = None
    trust: Trust = "guest"
    chat_type: ChatType | None = None
    context_window: Tokens | None = None


class Usage(Schema):
    prompt_tokens: int
    completion_tokens: int
    peak_prompt_tokens: int
    model_calls: int
    tool_calls: int
    provider: str
    model: str


class TurnOut(Schema):
    reply: str
    notices: list[str] = Field(description="short notes for the chat, e.g. that older history was trimmed")
    usage: Usage
    message_id: int = Field(description="id of the stored reply")
    commit: CommitOut = Field(description="what the turn's commit started")
    warnings: Warnings = []


class ChatMessage(Schema):
    role: str
    content: str


class PromptOut(Schema):
    agent_id: str
    owner_id: str
    conversation: str | None
    system_messages: list[ChatMessage]
    history: list[ChatMessage]
    prompt_hash: str
    parts: list[str] = Field(description="what the system messages hold, in order; `USER.md left out: <why>` "
                                         "(group chat, channel, guest speaker) when the owner's profile was left out")
    usage: dict[str, dict[str, int]]


# --- memory ----------------------------------------------------------------------------------------


class ToolCallIn(Schema):
    conversation: ConversationText = Field(..., examples=["telegram:12345"],
                                           description="the conversation the call is made from")
    owner_id: Ident | None = None
    trust: Trust = "guest"


def tool_body(definition: ToolDefinition) -> type[ToolCallIn]:
    """The body of one tool's operation: the call's context, and the arguments typed by the tool's definition
    (memory.tool_definitions), the schema the model is given."""
    name = "".join(part.title() for part in definition.name.split("_")) + "In"
    # Arguments with a required field must be sent; a tool that needs none may leave them out.
    default = {"default_factory": dict} if not definition.required else {}
    arguments = Field(**default, description=f"the arguments of {definition.name}, as the model gives them",
                      json_schema_extra=definition.parameters)
    return create_model(name, __base__=ToolCallIn, arguments=(dict[str, Any], arguments))


class ToolOut(Schema):
    ok: bool
    result: str
    data: dict[str, Any] | list[Any]
    warnings: Warnings = []
    meta: dict[str, Any] | None = Field(None, description="memory_recall: {mode, degraded, time}: which mode ran, "
                                                          "why a weaker one did, the time spans read from the query")


class ToolDefinitionsOut(Schema):
    format: Literal["openai", "anthropic", "mcp"]
    tools: list[dict[str, Any]] = Field(description="memory_store, memory_recall, memory_forget, "
                                                    "memory_sources_list in the format asked for")


class MemoryOut(Schema):
    id: int
    key: str
    value: str
    category: str
    scope_type: str
    scope_id: str
    owner_id: str
    archived: bool
    archived_at: datetime | None
    archive_reason: str
    source_type: str
    state: Literal["live", "archived", "pending"] = Field(
        description="`pending`: a change waits for the owner's approval (see `approval`)")
    approval: dict[str, Any] | None = Field(
        description="a directive change the reviewer proposed with directive_approval on: `state` (pending, "
                    "approved, rejected), `op` (add, replace, archive), the proposed `value` and `category`, "
                    "and who decided (`by`) and when (`at`)")
    created_at: datetime
    updated_at: datetime


class MemoryListOut(Schema):
    memories: list[MemoryOut]


Category = Literal["identity", "preference", "interest", "goal", "context", "directive"]
CATEGORY_HELP = ("identity, preference, interest, goal: about the user (owner scope, USER.md); context, directive: "
                 "about the work, standing rules (agent scope, MEMORY.md)")
def _not_blank(value: str) -> str:
    if not value.strip():
        raise ValueError("must not be blank")
    return value


Reason = Annotated[str, Field(min_length=1, max_length=2000, json_schema_extra={"pattern": NOT_BLANK},
                              description="why: kept in the row's history"), AfterValidator(_not_blank)]


class MemoryEventOut(Schema):
    id: int
    action: str = Field(description="add, replace, archive, restore, resave or revert")
    before_value: str | None
    after_value: str | None
    before_category: str
    after_category: str
    actor_type: str = Field(description="reviewer, tool, operator, job, system or import")
    actor_id: str
    run_id: int | None = Field(description="the review run that made the change")
    reason: str
    created_at: datetime


class MemoryDetailOut(Schema):
    memory: MemoryOut
    history: list[MemoryEventOut] = Field(description="every change to the row, oldest first")


class MemoryPatchIn(Schema):
    model_config = {"json_schema_extra": {"anyOf": [{"required": ["value"]}, {"required": ["category"]}]}}

    value: str | None = Field(None, max_length=2000, description="the corrected fact (at most 200 characters)")
    category: Category | None = Field(None, description="a category in the row's scope (a user-profile category "
                                                        "cannot become context: archive and add instead)")
    reason: Reason


class MemoryIn(Schema):
    key: str = Field(..., min_length=1, max_length=200, json_schema_extra={"pattern": NOT_BLANK},
                     description="a short stable name, e.g. home_city; a live row with this key is replaced")
    value: str = Field(..., max_length=2000, description="the fact (at most 200 characters)")
    category: Category = Field(..., description=CATEGORY_HELP)
    owner_id: Ident | None = Field(None, description="whose row (default: the configured owner)")
    reason: str = Field("", max_length=2000)


class ArchiveIn(Schema):
    reason: str = Field("", max_length=2000)


class DecisionIn(Schema):
    reason: str = Field("", max_length=2000, description="kept in the row's history")


class MemoryChangeOut(Schema):
    memory: MemoryOut
    rendered_in: list[str] = Field(description="prompt files that show the row after the rebuild (none when "
                                               "they were not rebuilt: see `warnings`)")
    warnings: Warnings = []


class MemoryAddedOut(MemoryChangeOut):
    action: Literal["add", "replace", "resave", "unchanged"] = Field(
        description="add (a new row, 201), replace (the live row with this key, 200), resave (an archived row "
                    "with this key brought back, 200), unchanged (200)")


class ConversationOut(Schema):
    conversation: str = Field(description="the conversation key `<channel>:<chat_id>:<thread_scope>`")
    channel: str
    chat_id: str
    thread_scope: str
    owner_id: str
    created_at: datetime
    last_message_id: int | None
    last_activity_at: datetime = Field(description="when its newest message was said (its start when it has none)")


class ConversationListOut(Schema):
    conversations: list[ConversationOut] = Field(description="newest activity first")
    next_cursor: str | None = Field(description="pass as `cursor` for the next page; null on the last page")


class ReviewIn(Schema):
    conversation: ConversationText | None = None
    owner_id: Ident | None = None


class ReviewOut(Schema):
    total: int
    results: list[dict[str, Any]]


class ReviewRunOut(Schema):
    id: int
    conversation: str
    owner_id: str
    trigger: str
    status: str
    reason: str
    ops_added: int
    ops_replaced: int
    ops_archived: int
    ops_skipped: int
    input_tokens: int
    started_at: datetime
    finished_at: datetime | None
    undone_at: datetime | None


class ReviewRunListOut(Schema):
    runs: list[ReviewRunOut]


class UndoOut(Schema):
    run_id: int
    status: str
    operations_reversed: int
    warnings: Warnings = []


class MemorySourceOut(Schema):
    id: int
    key: str
    source_type: str
    name: str
    description: str


class MemorySourcesOut(Schema):
    sources: list[MemorySourceOut]


class TranscriptIn(Schema):
    device_id: str = Field(..., max_length=200, json_schema_extra={"pattern": DEVICE_PATTERN})
    owner_id: Ident | None = None
    role: Literal["user", "assistant"]
    text: Text = Field(..., json_schema_extra={"pattern": NOT_BLANK}, description="the final text (not blank)")


class TranscriptOut(Schema):
    stored: bool
    id: int | None = None
    conversation: str
    reason: str | None = None


# --- resources -------------------------------------------------------------------------------------


class RevisionOut(Schema):
    resource_type: str
    scope_id: str
    revision: int
    parent_revision: int | None
    content_hash: str
    byte_size: int
    mutation_source: str
    provenance: dict[str, Any]
    created_at: datetime


class RevisionContentOut(RevisionOut):
    content: str


class ResourceOut(Schema):
    resource_type: str
    scope_id: str
    current_revision: int
    current: RevisionOut | None
    updated_at: datetime


class ResourceListOut(Schema):
    resources: list[ResourceOut]


class RevisionListOut(Schema):
    resource_type: str
    scope_id: str
    revisions: list[RevisionOut]


class DiffOut(Schema):
    resource_type: str
    scope_id: str
    a: int
    b: int
    diff: str


class RollbackIn(Schema):
    revision: json_int(1, MAX_INT)


class RollbackOut(Schema):
    status: Literal["rolled_back", "already_at_target"]
    resource_type: str
    from_revision: int
    target_revision: int
    revision: int | None = Field(description="the new `rollback` revision; null when already at the target")
    caveat: str | None


class SoulProposalIn(Schema):
    # Which fields a mode needs, in the document too: suggest an instruction, review none, revert a revision.
    model_config = {"json_schema_extra": {"allOf": [
        {"if": {"properties": {"mode": {"const": "suggest"}}},
         "then": {"required": ["instruction"], "properties": {"instruction": {"pattern": NOT_BLANK}}}},
        {"if": {"properties": {"mode": {"const": "review"}}},
         "then": {"properties": {"instruction": {"pattern": BLANK}}}},
        {"if": {"properties": {"mode": {"const": "revert"}}},
         "then": {"required": ["revision"], "properties": {"revision": {"type": "integer"}}}},
    ]}}

    mode: Literal["review", "suggest", "revert", "reset"]
    instruction: str = Field("", max_length=4000)
    revision: json_int(1, MAX_INT) | None = Field(None, description="revert: the SOUL.md revision to restore")
    trust: Trust = "guest"


class SoulProposalOut(Schema):
    token: str
    mode: str
    status: str
    diff: str
    rationale: str
    expires_at: datetime


class SoulDecisionIn(Schema):
    trust: Trust = "guest"


class SoulDecisionOut(Schema):
    token: str
    mode: str
    status: str
    revision: int | None = Field(description="the SOUL.md revision written; null when nothing was written")
