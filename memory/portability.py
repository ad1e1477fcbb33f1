"""Export an agent's or an owner's data as JSON, and import it into an empty install with nothing lost.

The document holds every row with its primary key (Django's serializer format), so ids, histories,
revision chains and checkpoints survive the trip: `export → import → export` gives the same objects.
"""

from __future__ import annotations

import datetime
import json
import re
from itertools import groupby

from django.apps import apps
from django.core import serializers
from django.core.management.color import no_style
from django.core.serializers.json import DjangoJSONEncoder
from django.db import connection, transaction
from django.utils import timezone

from fermix_site import generations
from fermix_site.conf import conf, valid_id
from memory.errors import CodedError
from memory.models import Conversation, Memory, MemoryEvent, MemorySource, Message, ReviewRun, ReviewState
from resources import files
from resources.catalog import is_file_backed
from resources.models import Resource, ResourceRevision

FORMAT, VERSION = "fermix-export", 2
READ_VERSIONS = (1, 2)  # 1: a row named its review run as text in `run_id`, and the runs were not exported
EXPORT_NAME = re.compile(r"^[A-Za-z0-9_.-]{1,100}$")
# Dependency order: a row's foreign keys point at rows earlier in this list.
MODELS = (MemorySource, Conversation, Message, ReviewRun, Memory, MemoryEvent, ReviewState, Resource, ResourceRevision)


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
    runs = (ReviewRun.objects.filter(pk__in=memories.exclude(run=None).values("run_id"))
            | ReviewRun.objects.filter(pk__in=events.exclude(run=None).values("run_id")))
    return [sources, conversations, messages, runs, memories, events, states, resources, revisions]


class ExactJSONEncoder(DjangoJSONEncoder):
    """Times to the microsecond. Django's encoder cuts them to milliseconds, so an export would lose the
    rest, and a time with 1-999 µs would come back written differently (`…:00.000` read back as `…:00`)."""

    def default(self, o):
        if isinstance(o, datetime.datetime | datetime.time):
            return o.isoformat().replace("+00:00", "Z")
        return super().default(o)


def memory_export(*, agent_id: str | None = None, owner_id: str | None = None) -> dict:
    """The selected rows as one JSON-serialisable document."""
    selection = _selection(agent_id, owner_id)
    objects = []
    for queryset in _querysets(agent_id, owner_id):
        objects += json.loads(serializers.serialize("json", queryset.order_by("pk"), cls=ExactJSONEncoder))
    return {"format": FORMAT, "version": VERSION, "exported_at": timezone.now().isoformat(),
            "selection": selection, "objects": objects}


def export_path(name: str):
    """Exports are written only under `$FERMIX_HOME/exports/`."""
    if not EXPORT_NAME.fullmatch(name) or name in {".", ".."}:
        raise PortabilityError("invalid_name", "the output name may hold only A-Z a-z 0-9 _ . - (no folders)")
    folder = conf.home / "exports"
    folder.mkdir(mode=0o700, exist_ok=True)
    return folder / name


def _check(document) -> list[dict]:
    if not isinstance(document, dict) or document.get("format") != FORMAT:
        raise PortabilityError("invalid_document", "this is not a Fermix export (format is not fermix-export)")
    if document.get("version") not in READ_VERSIONS:
        raise PortabilityError("invalid_document", f"unsupported export version {document.get('version')!r}")
    objects = document.get("objects")
    if document["version"] == 1 and isinstance(objects, list):
        for row in objects:
            if isinstance(row, dict) and row.get("model") == "memory.memory" and isinstance(row.get("fields"), dict):
                row["fields"].pop("run_id", None)
    allowed = {m._meta.label_lower for m in MODELS}
    if not isinstance(objects, list) or not all(isinstance(o, dict) and o.get("model") in allowed for o in objects):
        raise PortabilityError("invalid_document", f"objects must be rows of {', '.join(sorted(allowed))}")
    return objects


def _conflicts(objects: list[dict]) -> list[str]:
    conflicts = []
    for label, rows in groupby(sorted(objects, key=lambda o: o["model"]), key=lambda o: o["model"]):
        model = apps.get_model(label)
        pks = [row["pk"] for row in rows]
        taken = list(model.objects.filter(pk__in=pks).values_list("pk", flat=True)[:5])
        if taken:
            conflicts.append(f"{label} ids {taken}")
    return conflicts


def memory_import(document) -> dict:
    """Read an export into this install in one transaction; refused if any of its ids is taken."""
    objects = _check(document)
    order = {m._meta.label_lower: i for i, m in enumerate(MODELS)}
    objects = sorted(objects, key=lambda o: order[o["model"]])
    counts: dict[str, int] = {}
    with transaction.atomic():
        conflicts = _conflicts(objects)
        if conflicts:
            raise PortabilityError("not_empty", "this install already holds rows with the export's ids ("
                                   + "; ".join(conflicts) + "): import into an empty install")
        try:
            for item in serializers.deserialize("json", json.dumps(objects)):
                item.save()
                label = item.object._meta.label_lower
                counts[label] = counts.get(label, 0) + 1
        except serializers.base.DeserializationError as exc:
            raise PortabilityError("invalid_document", f"a row could not be read: {exc}") from None
        with connection.cursor() as cursor:
            for sql in connection.ops.sequence_reset_sql(no_style(), list(MODELS)):
                cursor.execute(sql)
        agents = {o["fields"].get("agent_id") for o in objects if o["fields"].get("agent_id")}
        for agent in agents:
            generations.bump(f"memories:{agent}", f"prompt:{agent}")
    _write_missing_files(agents)
    return {"imported": counts, "agents": sorted(agents)}


def _write_missing_files(agents) -> None:
    """Put each file-backed resource's current revision on disk where no file is yet."""
    for resource in Resource.objects.filter(agent_id__in=agents):
        if not is_file_backed(resource.resource_type):
            continue
        path = files.resource_file_path(agent_id=resource.agent_id, resource_type=resource.resource_type)
        current = ResourceRevision.objects.filter(
            agent_id=resource.agent_id, resource_type=resource.resource_type, scope_id=resource.scope_id,
            revision=resource.current_revision, redacted_at__isnull=True).first()
        if current is not None and not path.exists():
            files.write_atomic(path, current.content.encode("utf-8"))
