"""Export an agent's or an owner's data, and import it into an empty install with nothing lost.

An export is JSON Lines: a header line (`format`, `version`, `selection`), one line per row with its
primary key (Django's serializer format), and a last line with the row count, so a cut-off file is
refused rather than half read. Ids, histories, revision chains, checkpoints, review runs with their
operations and the model calls they made survive the trip: `export → import → export` gives the same
rows. Both directions stream, so memory stays flat however many messages there are. Version 1 and 2
exports (one JSON document with an `objects` list) are still read.
"""

from __future__ import annotations

import datetime
import json
import re
from collections.abc import Callable, Iterable, Iterator

from django.core import serializers
from django.core.management.color import no_style
from django.core.serializers.json import DjangoJSONEncoder
from django.core.serializers.python import Deserializer as PythonDeserializer
from django.db import IntegrityError, connection, transaction
from django.utils import timezone

from fermix_site import generations
from fermix_site.conf import conf, valid_id
from memory.errors import CodedError
from memory.models import (
    Conversation,
    Memory,
    MemoryEvent,
    MemorySource,
    Message,
    ReviewOperation,
    ReviewRun,
    ReviewState,
)
from providers.models import ModelCall
from resources.models import Resource, ResourceRevision
from resources.services import resource_sync_files

FORMAT, VERSION = "fermix-export", 3
# 1: a row named its review run as text in `run_id`, and the runs were not exported; 1 and 2 are one JSON
# document with an `objects` list, 3 is JSON Lines.
READ_VERSIONS = (1, 2, 3)
EXPORT_NAME = re.compile(r"^[A-Za-z0-9_.-]{1,100}$")
# Dependency order: a row's foreign keys point at rows earlier in this list.
MODELS = (MemorySource, Conversation, Message, ReviewRun, Memory, MemoryEvent, ReviewOperation, ReviewState,
          Resource, ResourceRevision, ModelCall)
ALLOWED = {m._meta.label_lower: m for m in MODELS}
BATCH = 1000  # rows read, written and checked for taken ids at a time

Progress = Callable[[int], None]  # called with the number of rows done so far


class PortabilityError(CodedError):
    """An export or import refused; nothing was written."""


def _selection(agent_id: str | None, owner_id: str | None) -> dict:
    if not agent_id and not owner_id:
        raise PortabilityError("invalid_selection", "name an agent (--agent) or an owner (--owner), or both")
    for name, value in (("agent", agent_id), ("owner", owner_id)):
        if value is not None and not valid_id(value):
            raise PortabilityError("invalid_selection", f"{name} id {value!r} is invalid")
    return {"agent_id": agent_id, "owner_id": owner_id}


def _querysets(agent_id: str | None, owner_id: str | None) -> list:
    scope = {"agent_id": agent_id} if agent_id else {}
    if owner_id is None:
        conversations = Conversation.objects.filter(**scope)
        messages = Message.objects.filter(**scope)
        memories = Memory.objects.filter(**scope)
        resources = Resource.objects.filter(**scope)
        revisions = ResourceRevision.objects.filter(**scope)
        sources = MemorySource.objects.filter(**scope)
        states = ReviewState.objects.filter(**scope)
    else:
        conversations = Conversation.objects.filter(owner_id=owner_id, **scope)
        keys = list(conversations.values_list("agent_id", "key"))
        messages = Message.objects.filter(owner_id=owner_id, **scope)
        memories = Memory.objects.filter(owner_id=owner_id, **scope)
        checkpoint_scopes = [key for _, key in keys]
        own_files = ["user_md", "memory_md"] if owner_id == conf.memory.owner_id else []
        agents = sorted({a for a, _ in keys} | set(memories.values_list("agent_id", flat=True)))
        resources = Resource.objects.filter(agent_id__in=agents).filter(
            resource_type__in=own_files) | Resource.objects.filter(
            agent_id__in=agents, resource_type="checkpoint", scope_id__in=checkpoint_scopes)
        revisions = ResourceRevision.objects.filter(agent_id__in=agents).filter(
            resource_type__in=own_files) | ResourceRevision.objects.filter(
            agent_id__in=agents, resource_type="checkpoint", scope_id__in=checkpoint_scopes)
        sources = MemorySource.objects.filter(
            pk__in=memories.exclude(source_id=None).values("source_id"))
        states = ReviewState.objects.filter(agent_id__in=agents, conversation_key__in=checkpoint_scopes)
    events = MemoryEvent.objects.filter(memory__in=memories)
    own_runs = (ReviewRun.objects.filter(**scope) if owner_id is None
                else ReviewRun.objects.filter(owner_id=owner_id, **scope))
    runs = (own_runs | ReviewRun.objects.filter(pk__in=memories.exclude(run=None).values("run_id"))
            | ReviewRun.objects.filter(pk__in=events.exclude(run=None).values("run_id")))
    operations = ReviewOperation.objects.filter(run__in=runs)
    calls = ModelCall.objects.filter(call_id__in=runs.exclude(model_call_id="").values("model_call_id"))
    if owner_id is None:
        calls = calls | ModelCall.objects.filter(**scope)
    else:  # the calls made for the owner's conversations: turns, compactions, reviews
        calls = calls | ModelCall.objects.filter(agent_id__in=agents, conversation_key__in=checkpoint_scopes)
    return [sources, conversations, messages, runs, memories, events, operations, states, resources, revisions,
            calls]


class ExactJSONEncoder(DjangoJSONEncoder):
    """Times to the microsecond. Django's encoder cuts them to milliseconds, so an export would lose the
    rest, and a time with 1-999 µs would come back written differently (`…:00.000` read back as `…:00`)."""

    def default(self, o):
        if isinstance(o, datetime.datetime | datetime.time):
            return o.isoformat().replace("+00:00", "Z")
        return super().default(o)


def export_lines(*, agent_id: str | None = None, owner_id: str | None = None,
                 progress: Progress | None = None) -> Iterator[str]:
    """The export of the selection, line by line (each without its newline), read from the database in
    batches: the header, one line per row, then `{"rows": N}`."""
    selection = _selection(agent_id, owner_id)
    yield json.dumps({"format": FORMAT, "version": VERSION, "exported_at": timezone.now().isoformat(),
                      "selection": selection})
    done = 0
    for queryset in _querysets(agent_id, owner_id):
        for batch in _batched(queryset.order_by("pk").iterator(chunk_size=BATCH), BATCH):
            for row in serializers.serialize("python", batch):
                yield json.dumps(row, cls=ExactJSONEncoder, ensure_ascii=False)
            done += len(batch)
            if progress:
                progress(done)
    yield json.dumps({"rows": done})


def export_size(*, agent_id: str | None = None, owner_id: str | None = None) -> int:
    """How many rows the export of the selection holds (for a progress bar)."""
    _selection(agent_id, owner_id)
    return sum(queryset.count() for queryset in _querysets(agent_id, owner_id))


def memory_export(*, agent_id: str | None = None, owner_id: str | None = None) -> dict:
    """The export as one document in memory, `objects` holding every row: for small selections and tests."""
    lines = export_lines(agent_id=agent_id, owner_id=owner_id)
    header = json.loads(next(lines))
    objects = [json.loads(line) for line in lines][:-1]
    return {**header, "objects": objects}


def _batched(iterable: Iterable, size: int) -> Iterator[list]:
    batch = []
    for item in iterable:
        batch.append(item)
        if len(batch) == size:
            yield batch
            batch = []
    if batch:
        yield batch


def export_path(name: str):
    """Exports are written only under `$FERMIX_HOME/exports/`."""
    if not EXPORT_NAME.fullmatch(name) or name in {".", ".."}:
        raise PortabilityError("invalid_name", "the output name may hold only A-Z a-z 0-9 _ . - (no folders)")
    folder = conf.home / "exports"
    folder.mkdir(mode=0o700, exist_ok=True)
    return folder / name


def _check_header(header) -> int:
    if not isinstance(header, dict) or header.get("format") != FORMAT:
        raise PortabilityError("invalid_document", "this is not a Fermix export (format is not fermix-export)")
    if header.get("version") not in READ_VERSIONS:
        raise PortabilityError("invalid_document", f"unsupported export version {header.get('version')!r}")
    return header["version"]


def _row(row) -> dict:
    if not isinstance(row, dict) or row.get("model") not in ALLOWED or not isinstance(row.get("fields"), dict):
        raise PortabilityError("invalid_document", f"objects must be rows of {', '.join(sorted(ALLOWED))}")
    return row


def memory_import(document) -> dict:
    """Read an export held in memory (`memory_export`'s document, or a version 1 or 2 file) in one transaction."""
    version = _check_header(document)
    objects = document.get("objects")
    if not isinstance(objects, list):
        raise PortabilityError("invalid_document", "the export has no list of objects")
    if version == 1:
        for row in objects:
            if isinstance(row, dict) and row.get("model") == "memory.memory" and isinstance(row.get("fields"), dict):
                row["fields"].pop("run_id", None)
    order = {label: i for i, label in enumerate(ALLOWED)}
    rows = sorted((_row(o) for o in objects), key=lambda o: order[o["model"]])
    return _import_rows(rows)


def memory_import_lines(lines: Iterable[str], *, progress: Progress | None = None) -> dict:
    """Read a version 3 export line by line, in one transaction; refused, with nothing written, if any of
    its ids is taken, a line is not a row, or the file ends before its last line."""
    lines = (line for line in lines if line.strip())
    _check_header(_json_line(next(lines, "")))
    expected = None

    def rows():
        nonlocal expected
        for line in lines:
            if expected is not None:
                raise PortabilityError("invalid_document", "the export goes on after its last line")
            value = _json_line(line)
            if isinstance(value, dict) and set(value) == {"rows"}:
                expected = value["rows"]
                continue
            yield _row(value)

    return _import_rows(rows(), progress=progress, check_end=lambda n: _check_end(expected, n))


def _json_line(line: str):
    try:
        return json.loads(line)
    except ValueError as exc:
        raise PortabilityError("invalid_document", f"a line is not JSON: {exc}") from None


def _check_end(expected, imported: int) -> None:
    if expected is None:
        raise PortabilityError("invalid_document", "the export is cut off: its last line (the row count) is missing")
    if expected != imported:
        raise PortabilityError("invalid_document", f"the export says {expected} rows but holds {imported}")


def _import_rows(rows: Iterable[dict], *, progress: Progress | None = None, check_end=None) -> dict:
    counts: dict[str, int] = {}
    agents: set[str] = set()
    with transaction.atomic():
        done = 0
        for batch in _same_model_batches(rows):
            model = ALLOWED[batch[0]["model"]]
            _refuse_taken(model, [row["pk"] for row in batch])
            agents.update(row["fields"]["agent_id"] for row in batch if row["fields"].get("agent_id"))
            _insert(model, batch)
            counts[model._meta.label_lower] = counts.get(model._meta.label_lower, 0) + len(batch)
            done += len(batch)
            if progress:
                progress(done)
        if check_end:
            check_end(done)
        with connection.cursor() as cursor:
            for sql in connection.ops.sequence_reset_sql(no_style(), list(MODELS)):
                cursor.execute(sql)
        for agent in agents:
            generations.bump(f"memories:{agent}", f"prompt:{agent}")
    _write_missing_files(agents)
    return {"imported": counts, "agents": sorted(agents)}


def _same_model_batches(rows: Iterable[dict]) -> Iterator[list[dict]]:
    batch: list[dict] = []
    for row in rows:
        if batch and (row["model"] != batch[0]["model"] or len(batch) == BATCH):
            yield batch
            batch = []
        batch.append(row)
    if batch:
        yield batch


def _refuse_taken(model, pks: list) -> None:
    taken = list(model._base_manager.filter(pk__in=pks).values_list("pk", flat=True)[:5])
    if taken:
        raise PortabilityError("not_empty", f"this install already holds rows with the export's ids "
                               f"({model._meta.label_lower} ids {taken}): import into an empty install")


def _insert(model, batch: list[dict]) -> None:
    try:
        objects = [item.object for item in PythonDeserializer(batch)]
    except serializers.base.DeserializationError as exc:
        raise PortabilityError("invalid_document", f"a row could not be read: {exc}") from None
    fields = model._meta.local_concrete_fields
    size = connection.ops.bulk_batch_size(fields, objects) or len(objects)
    try:
        for start in range(0, len(objects), size):
            # What Model.save_base(raw=True) does for one row, for many: `raw` keeps the exported values of
            # auto_now fields, which bulk_create would overwrite with the time of the import.
            model._base_manager._insert(objects[start:start + size], fields=fields, raw=True)
    except IntegrityError as exc:
        raise PortabilityError("invalid_document", f"a {model._meta.label_lower} row could not be written: "
                               f"{exc}") from None


def _write_missing_files(agents) -> None:
    """Bring this node's copies of each imported agent's prompt files in line with their revisions."""
    for agent_id in sorted(agents):
        resource_sync_files(agent_id=agent_id, why="import")
