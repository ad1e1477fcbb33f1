"""From a line of USER.md or MEMORY.md back to the memory row, the change that wrote it and its messages."""

from __future__ import annotations

from dataclasses import dataclass, field

from memory.models import Memory, MemoryEvent, ReviewRun
from memory.prompt_files import ELLIPSIS, line_for, render_for_agent
from memory.search import search_memories

WRITES = ("add", "replace", "resave", "revert")


@dataclass
class LineSource:
    number: int
    text: str
    section: str
    memory: Memory | None = None
    event: MemoryEvent | None = None
    run: ReviewRun | None = None
    message_ids: list[int] = field(default_factory=list)
    note: str = ""

    @property
    def conversation(self) -> tuple[str, str, str] | None:
        """The conversation the row was written in (channel, chat id, thread), as tool and reviewer rows
        record it."""
        parts = self.memory.session_id.split(":") if self.memory else []
        return (parts[0], parts[1], parts[2]) if len(parts) == 3 else None


def _matches(row: Memory, line: str) -> bool:
    return line_for(row.value) == line


def _by_search(agent_id: str, line: str) -> Memory | None:
    """A row whose value renders as this line now: full-text search narrows, the rendering decides."""
    text = line[2:].removesuffix(ELLIPSIS)
    for row in search_memories(query=text, filters={"agent_id": agent_id}, limit=20):
        if _matches(row, line):
            return row
    return None


def _by_history(agent_id: str, line: str) -> tuple[Memory | None, MemoryEvent | None]:
    """A row that held this value once (it changed since): the change that wrote the value."""
    event = (MemoryEvent.objects.filter(memory__agent_id=agent_id, after_value=line[2:], action__in=WRITES)
             .select_related("memory").order_by("-id").first())
    return (event.memory, event) if event else (None, None)


def _writer(row: Memory, value: str) -> MemoryEvent | None:
    return (MemoryEvent.objects.filter(memory=row, after_value=value, action__in=WRITES).order_by("-id").first())


def line_sources(*, agent_id: str, resource_type: str, content: str) -> list[LineSource]:
    """One entry per `- value` line of a USER.md or MEMORY.md revision, with where it came from."""
    rendered = render_for_agent(agent_id, resource_type)
    current = {}
    for row in Memory.objects.filter(pk__in=list(rendered.shown)):
        current.setdefault(line_for(row.value), row)
    out, section = [], ""
    for number, line in enumerate(content.splitlines(), start=1):
        if line.startswith("## "):
            section = line[3:]
            continue
        if not line.startswith("- "):
            continue
        source = LineSource(number, line, section)
        row = current.get(line) or _by_search(agent_id, line)
        event = _writer(row, row.value) if row else None
        if row is None:
            row, event = _by_history(agent_id, line)
            if row is not None:
                source.note = "the row's value has changed since this revision"
        if row is None:
            source.note = "no memory row holds this value any more"
            out.append(source)
            continue
        source.memory, source.event, source.run = row, event, event.run if event else None
        ids = list(source.run.input_message_ids) if source.run else []
        if row.source_message_id and row.source_message_id not in ids:
            ids.append(row.source_message_id)
        source.message_ids = ids
        out.append(source)
    return out
