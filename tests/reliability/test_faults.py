"""Faults: a full disk, a failing or hostile model, a worker killed mid-compaction. Nothing half-written."""

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from api.services import apikey_create
from fermix_site.conf import conf
from memory.compactor import compact_now
from memory.conversations import ConversationKey, message_append, window_read
from memory.models import Memory, Message, ReviewRun, ReviewState
from memory.prompt_files import prompt_files_rebuild
from memory.reviewer import review_conversation
from memory.tools import ToolContext, run_tool
from providers.models import ModelCall
from resources.bootstrap import bootstrap_seed
from resources.models import ResourceRevision
from tests.conftest import ROOT, process_env
from tests.fakeprovider import Reply, error, garbage, provider_config_toml, tool_call, use_config
from tests.memory_factories import fact
from tests.tmpfs import fill, mount_tmpfs, unmount

pytestmark = pytest.mark.django_db

ADD = json.dumps({"operations": [{"op": "add", "category": "preference", "key": "tea", "value": "likes tea"}]})


@pytest.fixture
def tiny_disk(home):
    """The agent's memory folder on a 16 KiB filesystem, full."""
    folder = conf.memory_dir("main")
    mount_tmpfs(folder, "16k")
    yield folder, fill(folder)
    unmount(folder)


def long_facts():
    """Six identity rows whose USER.md needs more room than the tiny disk has."""
    return [fact(f"k{i}", f"a fact long enough to need room on the disk, number {i} " + "y" * 120, "identity",
                 minute=i) for i in range(6)]


def test_a_full_disk_during_a_rebuild_leaves_no_partial_file_and_no_revision(tiny_disk):
    folder, filler = tiny_disk
    long_facts()
    with pytest.raises(OSError):
        prompt_files_rebuild(agent_id="main", trigger="test")
    assert sorted(p.name for p in folder.iterdir()) == ["filler"]  # no temp file, no half USER.md
    assert not ResourceRevision.objects.filter(resource_type="user_md").exists()
    filler.unlink()
    prompt_files_rebuild(agent_id="main", trigger="test")
    assert (folder / "USER.md").read_text().count("\n- ") == 6
    assert ResourceRevision.objects.filter(resource_type="user_md").count() == 1


def test_a_review_keeps_its_rows_when_the_disk_is_full_and_says_so(tiny_disk, fake_provider):
    folder, filler = tiny_disk
    long_facts()
    with use_config(provider_config_toml(fake_provider)):
        message_append(agent_id="main", conversation="telegram:1", role="user", content="I like tea",
                       trust="operator")
        fake_provider.push(Reply(text=ADD))
        result = review_conversation(agent_id="main", conversation="telegram:1", force=True)
    assert result["status"] == "ok" and Memory.objects.filter(key="tea").exists()
    assert "prompt files were not rebuilt" in ReviewRun.objects.get().reason
    assert sorted(p.name for p in folder.iterdir()) == ["filler"]


def test_a_tool_write_on_a_full_disk_keeps_its_row_and_answers_with_a_warning(tiny_disk):
    folder, _ = tiny_disk
    ctx = ToolContext(agent_id="main", owner_id="default", conversation=ConversationKey.parse("telegram:1"),
                      trust="operator")
    stored = run_tool("memory_store", ctx, {"key": "tea", "value": "likes tea", "category": "preference"})
    assert stored.ok is True and stored.warnings == ["prompt_files_not_rebuilt"]
    assert Memory.objects.filter(key="tea").exists()
    forgotten = run_tool("memory_forget", ctx, {"id": long_facts()[0].id})
    assert forgotten.ok is True and forgotten.warnings == ["prompt_files_not_rebuilt"]
    assert sorted(p.name for p in folder.iterdir()) == ["filler"]


def test_archive_restore_and_undo_on_a_full_disk_answer_200_with_a_warning(tiny_disk, client, fake_provider):
    key = apikey_create(name="ops", role="operator")[1]
    headers = {"Authorization": f"Bearer {key}"}
    row = long_facts()[0]
    archived = client.post(f"/api/v1/memories/{row.id}/archive", {"reason": "wrong"}, "application/json",
                           headers=headers)
    assert archived.status_code == 200
    assert archived.json()["warnings"] == ["prompt_files_not_rebuilt"] and archived.json()["rendered_in"] == []
    restored = client.post(f"/api/v1/memories/{row.id}/restore", headers=headers)
    assert restored.status_code == 200 and restored.json()["warnings"] == ["prompt_files_not_rebuilt"]
    with use_config(provider_config_toml(fake_provider)):
        message_append(agent_id="main", conversation="telegram:1", role="user", content="I like tea",
                       trust="operator")
        fake_provider.push(Reply(text=ADD))
        review_conversation(agent_id="main", conversation="telegram:1", force=True)
    undone = client.post(f"/api/v1/review-runs/{ReviewRun.objects.get().id}/undo", headers=headers)
    assert undone.status_code == 200 and undone.json()["warnings"] == ["prompt_files_not_rebuilt"]
    assert undone.json()["status"] == "undone" and Memory.objects.get(key="tea").archived_at is not None


def test_a_turn_whose_tool_call_cannot_rebuild_the_files_says_so(tiny_disk, client, fake_provider):
    key = apikey_create(name="bot", role="channel", may_assert_operator=True)[1]
    bootstrap_seed(agent_id="main")
    long_facts()
    with use_config(provider_config_toml(fake_provider)):
        fake_provider.push(tool_call("memory_store", {"key": "tea", "value": "likes tea", "category": "preference"}),
                           Reply(text="Noted."))
        answer = client.post("/api/v1/agents/main/conversations/telegram:1/turns",
                             {"content": "I like tea", "trust": "operator"}, "application/json",
                             headers={"Authorization": f"Bearer {key}"})
    assert answer.status_code == 200, answer.content
    assert answer.json()["reply"] == "Noted." and answer.json()["warnings"] == ["prompt_files_not_rebuilt"]
    assert Memory.objects.filter(key="tea").exists()


@pytest.mark.parametrize("reply, reason", [
    (error(500, "upstream exploded"), "500"),
    (garbage(), "ProviderError"),
    (Reply(text="ok", size=9 * 1024 * 1024), "ProviderError"),
    (Reply(text=ADD, delay=3), "ProviderError"),
    (Reply(text="I am not going to follow your format."), "UnparseableOutput"),
    (Reply(text="x" * 300_000), "UnparseableOutput"),
], ids=["500", "garbage", "enormous", "timeout", "prose", "huge-prose"])
def test_a_failing_model_fails_the_run_visibly_and_the_retry_completes(home, fake_provider, reply, reason):
    with use_config(provider_config_toml(fake_provider, llm_buffered_ms=1000)):
        message_append(agent_id="main", conversation="telegram:1", role="user", content="I like tea",
                       trust="operator")
        fake_provider.push(reply)
        failed = review_conversation(agent_id="main", conversation="telegram:1", force=True)
        assert failed["status"] == "failed" and Memory.objects.count() == 0
        state = ReviewState.objects.get()
        assert (state.failure_count, state.cursor_message_id, state.claimed_by) == (1, 0, "")
        run = ReviewRun.objects.get()
        assert run.status == "failed" and reason in run.reason
        assert ModelCall.objects.filter(agent_tag="memory_reviewer").exists()
        fake_provider.push(Reply(text=ADD))
        retried = review_conversation(agent_id="main", conversation="telegram:1", force=True)
    assert retried["status"] == "ok" and Memory.objects.get().value == "likes tea"
    assert ReviewState.objects.get().failure_count == 0


COMPACT = """
import django; django.setup()
from memory.compactor import compact_now
compact_now(agent_id="main", conversation="telegram:1")
"""


@pytest.mark.django_db(transaction=True)
@pytest.mark.slow
def test_a_worker_killed_mid_compaction_leaves_the_window_whole(home, fake_provider):
    with use_config(provider_config_toml(fake_provider)):
        for i in range(4):
            message_append(agent_id="main", conversation="telegram:1", role="user", content=f"message {i}")
        fake_provider.push(Reply(text="A summary.", delay=60))
        worker = subprocess.Popen([sys.executable, "-c", COMPACT], cwd=ROOT, start_new_session=True,
                                  env=process_env(FERMIX_HOME=conf.home))
        deadline = time.monotonic() + 60
        while not fake_provider.requests and time.monotonic() < deadline:
            time.sleep(0.1)
        assert fake_provider.requests, "the compaction never asked the model"
        os.killpg(worker.pid, signal.SIGKILL)
        worker.wait(timeout=10)
        assert [m.content for m in window_read(agent_id="main", conversation="telegram:1")] == [
            f"message {i}" for i in range(4)]
        assert not Message.objects.filter(kind="checkpoint").exists()
        assert not ResourceRevision.objects.filter(resource_type="checkpoint").exists()
        fake_provider.push(Reply(text="A summary."))
        assert compact_now(agent_id="main", conversation="telegram:1")["compacted"] is True
    assert [m.kind for m in window_read(agent_id="main", conversation="telegram:1")] == ["checkpoint"]
