"""memory_restore and memory_history on the command line."""

import json

import pytest
from django.core.management import CommandError, call_command

from fermix_site.conf import conf
from memory.prompt import compose_system_prompt
from memory.prompt_files import prompt_files_rebuild
from memory.rows import memory_archive, memory_upsert
from tests.memory_factories import fact

pytestmark = pytest.mark.django_db


def test_restore_brings_the_fact_back_into_the_files_and_prompt_at_once(home, capsys):
    row = fact("city", "lives in Lisbon", "identity")
    prompt_files_rebuild(agent_id="main", trigger="test")
    memory_archive(memory_id=row.id, archived_by="operator", reason="oops")
    prompt_files_rebuild(agent_id="main", trigger="test")
    assert "Lisbon" not in compose_system_prompt(agent_id="main").system_messages[-1]["content"]

    call_command("memory_restore", str(row.id))
    assert f"Restored memory #{row.id} (identity): lives in Lisbon; it is in USER.md" in capsys.readouterr().out
    assert (conf.memory_dir("main") / "USER.md").read_text() == "## Identity\n- lives in Lisbon\n"
    assert "lives in Lisbon" in compose_system_prompt(agent_id="main").system_messages[-1]["content"]


def test_restore_json_is_serialisable(home, capsys):
    row = fact("city", "lives in Lisbon", "identity")
    memory_archive(memory_id=row.id, archived_by="operator")
    call_command("memory_restore", str(row.id), "--json")
    out = json.loads(capsys.readouterr().out)
    assert out["restored"]["id"] == row.id and out["rendered_in"] == ["USER.md"]


def test_restore_refuses_unknown_and_live_rows(home):
    row = fact("city", "lives in Lisbon", "identity")
    with pytest.raises(CommandError, match="is not archived"):
        call_command("memory_restore", str(row.id))
    with pytest.raises(CommandError, match="does not exist"):
        call_command("memory_restore", "99999")


def test_history_lists_every_change(home, capsys):
    row, _ = memory_upsert(agent_id="main", owner_id="default", scope_type="owner", scope_id="default", key="city",
                           value="lives in Lisbon", category="identity", actor_type="reviewer", actor_id="run:1")
    memory_upsert(agent_id="main", owner_id="default", scope_type="owner", scope_id="default", key="city",
                  value="lives in Porto", category="identity", actor_type="reviewer", actor_id="run:2",
                  reason="moved")
    memory_archive(memory_id=row.id, archived_by="operator", reason="stale")
    call_command("memory_history", str(row.id), "--json")
    events = json.loads(capsys.readouterr().out)["events"]
    assert [(e["action"], e["actor"]) for e in events] == [("add", "reviewer:run:1"), ("replace", "reviewer:run:2"),
                                                          ("archive", "operator:operator")]
    call_command("memory_history", str(row.id))
    text = capsys.readouterr().out
    assert "'lives in Lisbon' -> 'lives in Porto'" in text and "(moved)" in text and "archived" in text
