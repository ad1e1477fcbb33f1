"""A prepared INSERT stores a row exactly as `Model.objects.create` stores it, on either database."""

from datetime import UTC, datetime

import pytest
from django.db import IntegrityError, transaction
from django.forms.models import model_to_dict

from fermix_site.statements import PreparedInsert
from memory.models import Memory, MemoryEvent, ReviewRun
from resources.models import Resource

pytestmark = [pytest.mark.django_db, pytest.mark.storage]


def stored(model, pk) -> dict:
    row = model.objects.get(pk=pk)
    return {name: value for name, value in model_to_dict(row).items() if name != "id"}


def test_json_dates_and_defaults_are_stored_as_create_stores_them():
    fields = {"agent_id": "main", "conversation_key": "telegram:1:root", "owner_id": "ana",
              "input_message_ids": [3, 5, 8], "cursor_before": 2,
              "started_at": datetime(2026, 11, 30, 1, 2, 3, 456789, tzinfo=UTC)}
    created = ReviewRun.objects.create(**fields)
    inserted = PreparedInsert(ReviewRun)(ReviewRun(**fields))
    assert inserted.pk and inserted.pk != created.pk and not inserted._state.adding
    assert stored(ReviewRun, inserted.pk) == stored(ReviewRun, created.pk)
    assert ReviewRun.objects.get(pk=inserted.pk).input_message_ids == [3, 5, 8]


def test_auto_now_fields_are_set_by_the_insert():
    resource = PreparedInsert(Resource)(Resource(agent_id="main", resource_type="user_md"))
    row = Resource.objects.get(pk=resource.pk)
    assert row.created_at is not None and row.updated_at is not None
    assert row.created_at == resource.created_at and row.scope_id == "global"


def test_foreign_keys_and_unique_keys_are_the_database_s():
    insert_memory, insert_event = PreparedInsert(Memory), PreparedInsert(MemoryEvent)
    now = datetime(2026, 11, 30, tzinfo=UTC)
    fields = {"agent_id": "main", "owner_id": "ana", "scope_type": "owner", "scope_id": "ana", "key": "city",
              "value": "lives in Lisbon", "category": "identity", "created_at": now, "updated_at": now}
    memory = insert_memory(Memory(**fields))
    event = insert_event(MemoryEvent(memory=memory, action="add", after_value=memory.value, actor_type="operator",
                                     created_at=now))
    assert MemoryEvent.objects.get(pk=event.pk).memory_id == memory.pk
    with pytest.raises(IntegrityError), transaction.atomic():
        insert_memory(Memory(**fields))  # the same unique key
    assert Memory.objects.filter(key="city").count() == 1
