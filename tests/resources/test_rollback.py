"""Rollback: a new revision with the old content, the file rewritten, and what it refuses."""

import pytest

from fermix_site import generations
from resources import errors
from resources.catalog import rollback_caveat
from resources.models import Resource, ResourceRevision
from resources.services import resource_commit, resource_rollback, resource_write_file

pytestmark = pytest.mark.django_db


def soul(home):
    return home.home / "bootstrap" / "main" / "SOUL.md"


def write(content, resource_type="soul_md", source="manual_edit"):
    return resource_write_file(agent_id="main", resource_type=resource_type, content=content, mutation_source=source)


def rollback(revision, resource_type="soul_md"):
    return resource_rollback(agent_id="main", resource_type=resource_type, revision=revision)


def test_rollback_writes_a_new_revision_with_the_target_content_and_rewrites_the_file(home):
    write("one\n"), write("two\n"), write("three\n")
    result = rollback(1)
    assert result.revision.revision == 4
    assert result.revision.mutation_source == "rollback"
    assert result.revision.parent_revision == 3
    assert result.revision.provenance == {"from_revision": 3, "target_revision": 1}
    assert result.revision.content == "one\n"
    assert (result.from_revision, result.target_revision) == (3, 1)
    assert Resource.objects.get().current_revision == 4
    assert soul(home).read_text() == "one\n"


def test_rollback_round_trip_back_to_the_newest_content(home):
    write("one\n"), write("two\n")
    rollback(1)
    back = rollback(2)
    assert back.revision.revision == 4 and back.revision.content == "two\n"
    assert soul(home).read_text() == "two\n"
    history = list(ResourceRevision.objects.order_by("revision").values_list("mutation_source", "content"))
    assert history == [("manual_edit", "one\n"), ("manual_edit", "two\n"), ("rollback", "one\n"),
                       ("rollback", "two\n")]


def test_rolling_back_to_the_current_content_is_a_no_op_that_says_so(home):
    write("one\n"), write("two\n")
    rollback(1)
    before = generations.current(["prompt:main"])
    result = rollback(1)  # r3 already has r1's content
    assert result.already_at_target and result.revision is None
    assert result.from_revision == 3
    assert ResourceRevision.objects.count() == 3
    assert generations.current(["prompt:main"]) == before


def test_a_no_op_rollback_still_puts_back_a_deleted_file(home):
    write("one\n")
    soul(home).unlink()
    assert rollback(1).already_at_target
    assert soul(home).read_text() == "one\n"


def test_a_hand_edit_is_kept_in_the_history_before_the_rollback(home):
    write("one\n"), write("two\n")
    soul(home).write_text("two, edited\n")
    result = rollback(1)
    assert result.from_revision == 3
    assert list(ResourceRevision.objects.order_by("revision").values_list("mutation_source", flat=True)) == [
        "manual_edit", "manual_edit", "manual_edit", "rollback"]
    assert ResourceRevision.objects.get(revision=3).content == "two, edited\n"


def test_checkpoint_rollback_is_refused(home):
    resource_commit(agent_id="main", resource_type="checkpoint", scope_id="telegram:1", content="s1",
                    mutation_source="compaction")
    resource_commit(agent_id="main", resource_type="checkpoint", scope_id="telegram:1", content="s2",
                    mutation_source="compaction")
    with pytest.raises(errors.CheckpointRollback) as refused:
        rollback(1, resource_type="checkpoint")
    assert refused.value.code == "checkpoint_rollback" and refused.value.http_status == 409
    assert ResourceRevision.objects.count() == 2


def test_unknown_revisions_and_resources_are_refused(home):
    with pytest.raises(errors.UnknownResource):
        rollback(1)
    write("one\n")
    with pytest.raises(errors.UnknownRevision) as refused:
        rollback(7)
    assert refused.value.code == "unknown_revision" and refused.value.http_status == 404
    with pytest.raises(errors.UnknownType):
        rollback(1, resource_type="soul")


def test_rollback_of_memory_files_carries_the_rebuild_caveat(home):
    write("- likes tea\n", resource_type="user_md", source="extraction_rebuild")
    write("- likes coffee\n", resource_type="user_md", source="extraction_rebuild")
    result = rollback(1, resource_type="user_md")
    assert "USER.md is rebuilt from promoted memory rows" in result.caveat
    assert "MEMORY.md" in rollback_caveat("memory_md")
    assert rollback_caveat("soul_md") is None
    assert (home.home / "memory" / "main" / "USER.md").read_text() == "- likes tea\n"
