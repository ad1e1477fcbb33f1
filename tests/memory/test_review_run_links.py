"""A memory row and each of its events point at the review run that wrote them, by foreign key: set by
the reviewer, kept through export and import, and filled from the old `run:<id>` text by the migration
(which goes back as well)."""

import json

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor
from django.utils import timezone

from memory import fts
from memory.conversations import message_append
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
from memory.portability import memory_export, memory_import
from memory.reviewer import review_conversation
from providers.models import ModelCall
from resources.models import Resource, ResourceRevision
from tests.fakeprovider import Reply, provider_config_toml, use_config

pytestmark = [pytest.mark.django_db]


@pytest.fixture
def model(home, fake_provider):
    with use_config(provider_config_toml(fake_provider)):
        yield fake_provider


def reviewed_fact(model) -> Memory:
    message_append(agent_id="main", conversation="telegram:1", role="user", content="I live in Lisbon",
                   trust="operator")
    model.push(Reply(text=json.dumps({"operations": [
        {"op": "add", "category": "identity", "key": "home_city", "value": "lives in Lisbon"}]})))
    review_conversation(agent_id="main", conversation="telegram:1", force=True)
    return Memory.objects.get(key="home_city")


def test_the_reviewer_links_the_row_and_its_event_to_its_run(model):
    row = reviewed_fact(model)
    run = ReviewRun.objects.get()
    assert row.run == run
    assert [(e.action, e.run_id) for e in row.events.all()] == [("add", run.id)]


def test_an_export_carries_the_runs_its_rows_point_at(model):
    row = reviewed_fact(model)
    exported = memory_export(agent_id="main")
    runs = [o for o in exported["objects"] if o["model"] == "memory.reviewrun"]
    assert [o["pk"] for o in runs] == [row.run_id]
    call_id = ReviewRun.objects.get().model_call_id
    assert [o["fields"]["call_id"] for o in exported["objects"] if o["model"] == "providers.modelcall"] == [call_id]
    for model_class in (MemoryEvent, Memory, ReviewOperation, ReviewRun, MemorySource, ReviewState, Message,
                        Conversation, ResourceRevision, Resource, ModelCall):
        model_class.objects.all().delete()
    report = memory_import(exported)
    assert report["imported"]["memory.reviewrun"] == 1 and report["imported"]["memory.reviewoperation"] == 1
    assert Memory.objects.get(key="home_city").run_id == row.run_id
    # The provenance chain survives: row → run → its operation and the model call it made.
    run = ReviewRun.objects.get(pk=row.run_id)
    assert list(run.operations.values_list("memory_id", flat=True)) == [row.id]
    assert ModelCall.objects.get(call_id=run.model_call_id).agent_tag == "memory_reviewer"


def test_a_version_1_export_without_runs_still_imports(home):
    document = {"format": "fermix-export", "version": 1, "objects": [{
        "model": "memory.memory", "pk": 41, "fields": {
            "agent_id": "main", "owner_id": "default", "scope_type": "owner", "scope_id": "default",
            "category": "identity", "key": "k", "value": "lives in Lisbon", "confidence": 1.0,
            "promote_target": "user_md", "source": None, "source_type": "", "source_name": "",
            "source_description": "", "session_id": "", "run_id": "run:7", "source_message_id": None,
            "archived_at": None, "archived_by": "", "archive_reason": "",
            "created_at": "2026-01-01T00:00:00Z", "updated_at": "2026-01-01T00:00:00Z"}}]}
    memory_import(document)
    assert Memory.objects.get(pk=41).run_id is None


@pytest.mark.django_db(transaction=True)
def test_the_migration_fills_the_links_from_the_old_text_and_goes_back():
    before, after = [("memory", "0008_messages_chat_search_idx")], [("memory", "0009_review_run_foreign_keys")]
    executor = MigrationExecutor(connection)
    try:
        executor.migrate(before)
        old = executor.loader.project_state(before).apps
        now = timezone.now()
        run = old.get_model("memory", "ReviewRun").objects.create(
            agent_id="main", conversation_key="telegram:1:root", owner_id="default", trigger="now", started_at=now)
        fields = dict(agent_id="main", owner_id="default", scope_type="owner", scope_id="default",
                      category="identity", value="v", created_at=now, updated_at=now)
        OldMemory, OldEvent = old.get_model("memory", "Memory"), old.get_model("memory", "MemoryEvent")
        linked = OldMemory.objects.create(key="a", run_id=f"run:{run.id}", **fields)
        dangling = OldMemory.objects.create(key="b", run_id="run:999999", **fields)
        OldEvent.objects.create(memory=linked, action="add", actor_type="reviewer", actor_id=f"run:{run.id}",
                                created_at=now)
        OldEvent.objects.create(memory=linked, action="replace", actor_type="tool", actor_id="run:5",
                                created_at=now)

        executor = MigrationExecutor(connection)
        executor.migrate(after)
        new = executor.loader.project_state(after).apps
        NewMemory, NewEvent = new.get_model("memory", "Memory"), new.get_model("memory", "MemoryEvent")
        assert NewMemory.objects.get(pk=linked.pk).run_id == run.id
        assert NewMemory.objects.get(pk=dangling.pk).run_id is None
        assert sorted(NewEvent.objects.values_list("actor_type", "run_id")) == [("reviewer", run.id), ("tool", None)]

        executor = MigrationExecutor(connection)
        executor.migrate(before)
        back = executor.loader.project_state(before).apps.get_model("memory", "Memory")
        assert back.objects.get(pk=linked.pk).run_id == f"run:{run.id}"
        assert back.objects.get(pk=dangling.pk).run_id == ""
    finally:
        executor = MigrationExecutor(connection)
        executor.migrate(executor.loader.graph.leaf_nodes())
        fts.repair(connection)
