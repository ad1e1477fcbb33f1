"""The memory tools as a model is offered them: one definition, rendered in the format each caller speaks.

    definitions("openai")     # [{"type": "function", "function": {name, description, parameters}}, …]
    definitions("anthropic")  # [{name, description, input_schema}, …]
    definitions("mcp")        # [{name, title, description, inputSchema, annotations}, …]

The turn runner hands the OpenAI form to the provider chain (each provider adapter turns it into its own
wire format, with the same functions used here), `GET /agents/{agent}/tools` answers any of the three, and
the MCP server lists the MCP form. An MCP call comes from outside any turn, so its form also names the
`agent` and the `conversation` the call is made from (CALL_CONTEXT); the rest is the same schema.
"""

from __future__ import annotations

from dataclasses import dataclass

from fermix_site.conf import ID_PATTERN
from memory.conversations import KEY_PATTERN
from memory.models import Category
from memory.rows import MAX_VALUE_CHARS
from memory.search import recall
from memory.tools import MAX_CHARS, MAX_LIMIT, SCOPES, SOURCES
from providers import anthropic, openai

FORMATS = ("openai", "anthropic", "mcp")


@dataclass(frozen=True)
class ToolDefinition:
    name: str
    title: str
    description: str
    properties: dict
    required: tuple[str, ...] = ()
    read_only: bool = False
    destructive: bool = False

    @property
    def parameters(self) -> dict:
        """The arguments as a JSON Schema object (draft 2020-12, the subset every provider accepts)."""
        schema: dict = {"type": "object", "properties": self.properties, "additionalProperties": False}
        if self.required:
            schema["required"] = list(self.required)
        return schema


CATEGORY_HELP = ("Give a category only for a lasting fact: identity, preference, interest or goal for facts about "
                 "the user (shown in USER.md), context for facts about the work or situation (MEMORY.md), "
                 "directive for a standing rule the owner set (operator only). Leave it out for a note that "
                 "matters only in this conversation.")

TOOLS = (
    ToolDefinition(
        name="memory_store", title="Remember a fact",
        description=(
            "Save one short fact so it is remembered later. Without a category it is a note for this "
            "conversation only; with a category it becomes long-term memory shown in future conversations. "
            "Before adding, recall by key or query: if the fact is already stored but wrong or outdated, give "
            f"its id and the new value to correct it instead of adding a duplicate. At most {MAX_VALUE_CHARS} "
            "characters per value; store separate facts separately. Do not store secrets or passing chit-chat."),
        properties={
            "key": {"type": "string", "maxLength": MAX_CHARS["key"],
                    "description": "a short stable name for the fact in snake_case, e.g. home_city, coffee_order"},
            "value": {"type": "string",
                      "description": "the fact as one declarative sentence about the user or the work, e.g. "
                                     "'Lives in Lisbon since 2021'"},
            "category": {"type": "string", "enum": list(Category.values), "description": CATEGORY_HELP},
            "id": {"type": "integer", "minimum": 1,
                   "description": "to correct a stored memory: its id (from memory_recall); give value too"},
            "reason": {"type": "string", "maxLength": MAX_CHARS["reason"],
                       "description": "why it is stored or changed (optional)"},
        },
        required=("value",),
    ),
    ToolDefinition(
        name="memory_recall", title="Look up memories", read_only=True,
        description=(
            "Look up what is remembered: a memory by its key, or a search of memories and/or past conversation "
            "messages by words or a natural-language question. Use it before answering something that depends "
            "on what the user said earlier, and before storing, to find an existing memory to correct. Time "
            "words in the query (\"yesterday\", \"last week\", \"in August 2023\") narrow the search to that "
            "time. Each result carries its id and why it matched."),
        properties={
            "query": {"type": "string", "maxLength": MAX_CHARS["query"],
                      "description": "words or a question, e.g. 'where does the user live'"},
            "key": {"type": "string", "maxLength": MAX_CHARS["key"],
                    "description": "the exact key of a memory, e.g. home_city"},
            "scope": {"type": "string", "enum": list(SCOPES), "default": "current",
                      "description": "current: this conversation and the user's and agent's long-term memory; "
                                     "owner: everything about the user; all: every conversation"},
            "source": {"type": "string", "enum": list(SOURCES), "default": "memories",
                       "description": "memories (stored facts), history (past messages) or all"},
            "limit": {"type": "integer", "minimum": 1, "maximum": MAX_LIMIT, "default": 10,
                      "description": "the most results to return"},
            "mode": {"type": "string", "enum": list(recall.MODES),
                     "description": "hybrid (words and meaning; the default when embeddings are configured), "
                                    "lexical (words only) or semantic (meaning only)"},
            "after": {"type": "string", "description": "only what was said at or after this ISO date or time, "
                                                       "e.g. 2023-08-01"},
            "before": {"type": "string", "description": "only what was said before this ISO date or time"},
        },
    ),
    ToolDefinition(
        name="memory_forget", title="Forget a memory", destructive=True,
        description=(
            "Archive a memory that is wrong, outdated, or that the user asked to forget. It stops being "
            "recalled and shown; the operator can restore it. Find its id with memory_recall first."),
        properties={
            "id": {"type": "integer", "minimum": 1, "description": "the id of the memory to archive"},
            "reason": {"type": "string", "maxLength": MAX_CHARS["reason"],
                       "description": "why, e.g. 'the user moved' (kept in the memory's history)"},
        },
        required=("id",),
    ),
    ToolDefinition(
        name="memory_sources_list", title="List memory sources", read_only=True,
        description="List where memories come from: the conversations and scheduled jobs that stored them.",
        properties={},
    ),
)

# What an MCP call names that a turn already knows: which agent's memory, and the conversation it speaks from
# (guest trust is confined to it; notes are stored in it; recall's `current` scope means it).
CALL_CONTEXT = {
    "agent": {"type": "string", "pattern": ID_PATTERN, "description": "the agent whose memory to use, e.g. main"},
    "conversation": {"type": "string", "pattern": KEY_PATTERN, "maxLength": 600,
                     "description": "the conversation this call is made from, as `<channel>:<chat_id>`, e.g. "
                                    "telegram:12345 or desktop:me"},
}


def _bare(tool: ToolDefinition) -> dict:
    return {"name": tool.name, "description": tool.description, "parameters": tool.parameters}


def mcp_tool(tool: ToolDefinition) -> dict:
    """An MCP `Tool`: the arguments plus CALL_CONTEXT, and the behaviour hints MCP clients show."""
    schema = tool.parameters
    schema = {**schema, "properties": {**CALL_CONTEXT, **schema["properties"]},
              "required": ["agent", "conversation", *schema.get("required", [])]}
    return {"name": tool.name, "title": tool.title, "description": tool.description, "inputSchema": schema,
            "annotations": {"title": tool.title, "readOnlyHint": tool.read_only,
                            "destructiveHint": tool.destructive, "idempotentHint": tool.read_only,
                            "openWorldHint": False}}


def definitions(format: str = "openai") -> list[dict]:
    """The memory tools in `format` (one of FORMATS); a ValueError for any other."""
    if format == "openai":  # also the neutral form the provider chain takes
        return [openai.tool_definition(_bare(tool)) for tool in TOOLS]
    if format == "anthropic":
        return [anthropic.tool_definition(_bare(tool)) for tool in TOOLS]
    if format == "mcp":
        return [mcp_tool(tool) for tool in TOOLS]
    raise ValueError(f"format must be one of {', '.join(FORMATS)}")
