"""Erasure of an owner and the export/import round trip."""

import json

import pytest
from django.core.management import CommandError, call_command
from django.db import connection
from django.utils import timezone

from console.doctor import check_revision_hashes
from fermix_site.conf import conf
from memory import fts
from memory.conversations import message_append
from memory.erasure import memory_forget_owner
from memory.models import Conversation, Memory, MemoryEvent, Message
from memory.portability import PortabilityError, memory_export, memory_import
from memory.prompt_files import prompt_files_rebuild
from memory.rows import memory_archive
from memory.tools import ToolContext, run_tool
from resources.models import ResourceRevision
from resources.services import resource_commit
from tests.memory_factories import fact

pytestmark = pytest.mark.django_db


def populate():
    for text in ("I live in Lisbon with my cat Miso", "my sister is called Rita"):
        message_append(agent_id="main", conversation="telegram:1", role="user", content=text, owner_id="default",
                       trust="operator")
    message_append(agent_id="main", conversation="telegram:1", role="assistant", content="Noted, Miso!",
                   owner_id="default")
    message_append(agent_id="main", conversation="slack:9", role="user", content="bo talks about Miso too",
                   owner_id="bo")
    city = fact("city", "lives in Lisbon", "identity")
    fact("pet", "has a cat named Miso", "identity", minute=1)
    memory_archive(memory_id=city.id, archived_by="operator", reason="test")
    fact("city", "lives in Oslo", "identity", owner="bo")
    prompt_files_rebuild(agent_id="main", trigger="test")
    resource_commit(agent_id="main", resource_type="checkpoint", scope_id="telegram:1:root",
                    content="Ana lives in Lisbon with Miso.", mutation_source="compaction")


def search(word):
    ctx = ToolContext(agent_id="main", owner_id="default", trust="operator")
    return run_tool("memory_recall", ctx, {"query": word, "source": "all", "scope": "all"}).data


def test_erasing_an_owner_removes_their_data_and_redacts_revisions_keeping_hashes(home):
    populate()
    before = {r.pk: (r.content_hash, r.byte_size, r.revision) for r in ResourceRevision.objects.all()}
    report = memory_forget_owner(owner_id="default")
    assert (report.messages, report.memories, report.conversations) == (3, 2, 1)
    assert Message.objects.filter(owner_id="default").count() == 0
    assert Memory.objects.filter(owner_id="default").count() == 0 and MemoryEvent.objects.filter(
        memory__owner_id="default").count() == 0
    assert [d["content"] for d in search("Miso")] == ["bo talks about Miso too"]
    assert fts.integrity_check(connection) == []
    revisions = list(ResourceRevision.objects.order_by("pk"))
    assert {r.pk: (r.content_hash, r.byte_size, r.revision) for r in revisions if r.pk in before} == before
    redacted = [r for r in revisions if r.redacted_at]
    assert {r.resource_type for r in redacted} == {"user_md", "memory_md", "checkpoint"}
    assert all(r.content.startswith("[redacted: the content of owner default was erased") for r in redacted)
    assert not any("Miso" in r.content for r in revisions)
    assert (conf.memory_dir("main") / "USER.md").read_text() == ""
    assert check_revision_hashes().status == "ok"
    assert Memory.objects.filter(owner_id="bo").count() == 1 and Conversation.objects.filter(owner_id="bo").exists()


def test_erasing_another_owner_leaves_the_agents_owner_alone(home):
    populate()
    report = memory_forget_owner(owner_id="bo")
    assert (report.messages, report.memories) == (1, 1)
    assert "lives in Oslo" not in json.dumps([r.content for r in ResourceRevision.objects.all()])
    assert ResourceRevision.objects.filter(redacted_at__isnull=False).count() == 0
    assert Message.objects.filter(owner_id="default").count() == 3


def test_the_command_needs_confirmation(home, capsys):
    populate()
    with pytest.raises(CommandError, match="pass --yes"):
        call_command("memory_forget_owner", "default")
    assert Message.objects.filter(owner_id="default").count() == 3
    call_command("memory_forget_owner", "default", "--yes", "--json")
    assert json.loads(capsys.readouterr().out)["messages"] == 3
    with pytest.raises(CommandError, match="invalid"):
        call_command("memory_forget_owner", "../x", "--yes")


def _rows(document):
    return sorted((o["model"], o["pk"], json.dumps(o["fields"], sort_keys=True)) for o in document["objects"])


def test_export_then_import_into_an_empty_install_loses_nothing(home, django_db_blocker):
    populate()
    exported = memory_export(agent_id="main")
    models = {o["model"] for o in exported["objects"]}
    assert {"memory.message", "memory.memory", "memory.memoryevent", "memory.conversation",
            "resources.resource", "resources.resourcerevision"} <= models
    json.dumps(exported)  # serialisable as it is
    # Empty the install, then read the export back.
    for model in ("resources.resourcerevision", "resources.resource", "memory.memoryevent", "memory.memory",
                  "memory.reviewstate", "memory.message", "memory.conversation", "memory.memorysource"):
        from django.apps import apps
        apps.get_model(model).objects.all().delete()
    report = memory_import(exported)
    assert report["agents"] == ["main"] and report["imported"]["memory.message"] == 4
    assert _rows(memory_export(agent_id="main")) == _rows(exported)
    assert [d["content"] for d in search("sister")][0] == "my sister is called Rita"  # indexed again
    with pytest.raises(PortabilityError) as excinfo:
        memory_import(exported)
    assert excinfo.value.code == "not_empty"
    assert Message.objects.count() == 4


def test_an_owner_export_holds_only_that_owner(home):
    populate()
    exported = memory_export(owner_id="bo")
    messages = [o for o in exported["objects"] if o["model"] == "memory.message"]
    assert [m["fields"]["content"] for m in messages] == ["bo talks about Miso too"]
    owners = {o["fields"].get("owner_id") for o in exported["objects"] if "owner_id" in o["fields"]}
    assert owners == {"bo"}


@pytest.mark.parametrize("document, code", [
    ({"format": "other"}, "invalid_document"),
    ({"format": "fermix-export", "version": 99, "objects": []}, "invalid_document"),
    ({"format": "fermix-export", "version": 1, "objects": [{"model": "auth.user", "pk": 1, "fields": {}}]},
     "invalid_document"),
])
def test_import_refuses_foreign_documents(home, document, code):
    with pytest.raises(PortabilityError) as excinfo:
        memory_import(document)
    assert excinfo.value.code == code


def test_export_command_writes_only_under_fermix_home(home, capsys):
    populate()
    call_command("memory_export", "--agent", "main", "--output", "main.json")
    path = conf.home / "exports" / "main.json"
    lines = path.read_text().splitlines()
    assert json.loads(lines[0])["selection"] == {"agent_id": "main", "owner_id": None}
    assert json.loads(lines[-1]) == {"rows": len(lines) - 2}
    with pytest.raises(CommandError, match="no folders"):
        call_command("memory_export", "--agent", "main", "--output", "../../etc/x.json")
    with pytest.raises(CommandError, match="agent id '../x' is invalid"):
        call_command("memory_export", "--agent", "../x")


def test_export_defaults_to_the_configured_agent(home, capsys):
    populate()
    call_command("memory_export")
    lines = capsys.readouterr().out.splitlines()
    assert json.loads(lines[0])["selection"] == {"agent_id": conf.memory.agent_id, "owner_id": None}
    call_command("memory_export", "--owner", "bo")
    assert json.loads(capsys.readouterr().out.splitlines()[0])["selection"] == {"agent_id": None, "owner_id": "bo"}


def test_a_redacted_revision_cannot_be_rolled_back_to(home):
    from resources.errors import RedactedRevision
    from resources.services import resource_rollback

    populate()
    memory_forget_owner(owner_id="default")
    with pytest.raises(RedactedRevision):
        resource_rollback(agent_id="main", resource_type="user_md", revision=1)



def test_an_export_keeps_times_to_the_microsecond(home):
    populate()
    # 0.5 ms: Django's encoder would write `.000`, read back as a time with no fraction at all.
    rita = Message.objects.filter(content="my sister is called Rita")
    rita.update(created_at=timezone.now().replace(microsecond=500))
    exported = memory_export(agent_id="main")
    written = next(o["fields"]["created_at"] for o in exported["objects"]
                   if o["model"] == "memory.message" and o["fields"]["content"] == "my sister is called Rita")
    assert written.endswith(".000500Z")
    Message.objects.all().delete()
    memory_import({**exported, "objects": [o for o in exported["objects"] if o["model"] == "memory.message"]})
    assert Message.objects.get(content="my sister is called Rita").created_at.microsecond == 500
