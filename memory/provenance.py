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
    message_ids: list[int] = field(default_factory=list)  # the messages that said it, when they are known
    message_range: tuple[int, int] | None = None  # else the review's batch: "from messages #a–#b"
    note: str = ""

    @property
    def conversation(self) -> tuple[str, str, str] | None:
        """The conversation the row was written in (channel, chat id, thread), as tool and reviewer rows
        record it."""
        parts = self.memory.session_id.split(":") if self.memory else []
        return (parts[0], parts[1], parts[2]) if len(parts) == 3 else None


def cited_messages(memory: Memory | None, event: MemoryEvent | None) -> list[int]:
    """The messages a row's value came from: those its writing event names, else its source message."""
    if event is not None and event.message_ids:
        return list(event.message_ids)
    return [memory.source_message_id] if memory is not None and memory.source_message_id else []


def batch_range(run: ReviewRun | None) -> tuple[int, int] | None:
    """The first and last message a review run read: where a fact came from when its messages are unknown."""
    ids = list(run.input_message_ids) if run is not None else []
    return (min(ids), max(ids)) if ids else None


def messages_label(message_ids: list[int], run: ReviewRun | None) -> str:
    """`from message #3`, `from messages #3, #5`, or the run's batch `from messages #1–#9` ('' for neither)."""
    if message_ids:
        plural = "s" if len(message_ids) > 1 else ""
        return f"from message{plural} " + ", ".join(f"#{i}" for i in message_ids)
    span = batch_range(run)
    if span is None:
        return ""
    return f"from message #{span[0]}" if span[0] == span[1] else f"from messages #{span[0]}\u2013#{span[1]}"


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
        source.message_ids = cited_messages(row, event)
        if not source.message_ids:
            source.message_range = batch_range(source.run)
        out.append(source)
    return out
