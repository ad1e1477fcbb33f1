"""Each fact from the message that said it: the model sees every message's id and cites the ids each
operation came from; ids outside the batch are ignored with a note; the row, its event and memory_history
name the right message, and without ids the whole batch ("from messages #a–#b")."""

import io
import json

import pytest
from django.core.management import call_command

from memory.models import Memory, MemoryEvent, ReviewOperation
from tests.memory.reviewer.conftest import review, say, sent_messages
from tests.memory_factories import fact
from tests.personas import ops

pytestmark = pytest.mark.django_db


def history(row_id) -> dict:
    out = io.StringIO()
    call_command("memory_history", str(row_id), "--json", stdout=out)
    return json.loads(out.getvalue())


def marine_biologist_conversation():
    """"works as a marine biologist" said in the first of four messages."""
    said = [say("I work as a marine biologist, mostly on coral reefs"), say("the weather is lovely"),
            say("what should I cook tonight?"), say("ok thanks")]
    return said


def test_the_model_is_shown_each_message_with_its_id_and_asked_for_the_ids(model):
    said = marine_biologist_conversation()
    model.push(ops())
    review()
    request = model.requests[0]
    assert [m["id"] for m in sent_messages(request)] == [m.id for m in said]
    assert "message_ids" in request.body["messages"][0]["content"]


def test_a_fact_points_at_the_message_that_said_it(model):
    said = marine_biologist_conversation()
    model.push(ops({"op": "add", "category": "identity", "key": "job", "value": "works as a marine biologist",
                    "message_ids": [said[0].id]}))
    review()
    row = Memory.objects.get(key="job")
    assert row.source_message_id == said[0].id  # not the batch's last message
    assert list(MemoryEvent.objects.get(memory=row).message_ids) == [said[0].id]
    assert ReviewOperation.objects.get().message_ids == [said[0].id]
    event = history(row.id)["events"][0]
    assert (event["message_ids"], event["messages"]) == ([said[0].id], f"from message #{said[0].id}")


def test_a_foreign_message_id_is_ignored_with_a_recorded_reason(model):
    said = marine_biologist_conversation()
    other = say("I live in Oslo", conversation="telegram:2")
    model.push(ops({"op": "add", "category": "identity", "key": "job", "value": "works as a marine biologist",
                    "message_ids": [other.id, said[0].id, "soon"]}))
    review()
    row = Memory.objects.get(key="job")
    assert row.source_message_id == said[0].id
    assert list(row.events.get().message_ids) == [said[0].id]
    operation = ReviewOperation.objects.get()
    assert operation.status == "applied"
    assert [n["code"] for n in operation.notes] == ["foreign_message_id"]
    assert str(other.id) in operation.notes[0]["detail"]


def test_a_replace_records_the_message_of_the_new_statement(model):
    city = fact("home_city", "lives in Lisbon", "identity")
    said = [say("big news"), say("we moved to Porto last week")]
    model.push(ops({"op": "replace", "id": city.id, "value": "lives in Porto", "message_ids": [said[1].id]}))
    review()
    city.refresh_from_db()
    assert city.source_message_id == said[1].id
    assert list(city.events.order_by("id").last().message_ids) == [said[1].id]


def test_without_ids_the_provenance_is_the_whole_batch(model):
    said = marine_biologist_conversation()
    model.push(ops({"op": "add", "category": "identity", "key": "job", "value": "works as a marine biologist"}))
    review()
    row = Memory.objects.get(key="job")
    assert row.source_message_id is None
    event = history(row.id)["events"][0]
    assert event["message_ids"] == []
    assert event["messages"] == f"from messages #{said[0].id}\u2013#{said[-1].id}"
    out = io.StringIO()
    call_command("memory_history", str(row.id), stdout=out)
    assert f"from messages #{said[0].id}\u2013#{said[-1].id}" in out.getvalue()
