"""File-backed resources: the file and its revision change together, or not at all."""

import os

import pytest
from django.db import DatabaseError, connection, transaction

from resources import errors
from resources.models import Resource, ResourceRevision
from resources.services import (
    resource_capture_file,
    resource_file_locked,
    resource_sync_files,
    resource_write_file,
)

pytestmark = pytest.mark.django_db


def user_md(home):
    return home.home / "memory" / "main" / "USER.md"


def write(content, source="extraction_rebuild", **extra):
    return resource_write_file(agent_id="main", resource_type="user_md", content=content,
                               mutation_source=source, **extra)


def revisions(resource_type="user_md"):
    return list(ResourceRevision.objects.filter(resource_type=resource_type).order_by("revision")
                .values_list("revision", "mutation_source", "content"))


def test_it_writes_the_file_and_a_revision(home):
    revision = write("## Identity\n- Ada\n", provenance={"trigger": "review"})
    assert user_md(home).read_bytes() == b"## Identity\n- Ada\n"
    assert revision.revision == 1 and revision.provenance == {"trigger": "review"}
    assert Resource.objects.get().resource_path == str(user_md(home))


def test_it_leaves_no_temp_files_and_keeps_the_file_private(home):
    write("x\n")
    folder = user_md(home).parent
    assert os.listdir(folder) == ["USER.md"]
    assert user_md(home).stat().st_mode & 0o777 == 0o600


def test_unchanged_content_is_no_revision_but_a_missing_file_is_rewritten(home):
    write("same\n")
    user_md(home).unlink()
    assert write("same\n") is None
    assert user_md(home).read_text() == "same\n"
    assert len(revisions()) == 1


def test_a_hand_edit_is_recorded_before_it_is_overwritten(home):
    write("v1\n")
    user_md(home).write_text("v1 edited by hand\n")
    revision = write("v2\n")
    assert revisions() == [(1, "extraction_rebuild", "v1\n"), (2, "manual_edit", "v1 edited by hand\n"),
                           (3, "extraction_rebuild", "v2\n")]
    assert revision.revision == 3 and revision.parent_revision == 2


def test_a_file_unknown_to_the_registry_is_recorded_as_imported_first(home):
    user_md(home).parent.mkdir(parents=True)
    user_md(home).write_text("from an older install\n")
    write("rebuilt\n")
    assert [r[1] for r in revisions()] == ["imported", "extraction_rebuild"]


def test_if_the_transaction_fails_the_file_is_restored(home):
    write("v1\n")
    with pytest.raises(RuntimeError):
        with resource_file_locked(agent_id="main", resource_type="user_md", why="test") as locked:
            locked.write("v2\n", "extraction_rebuild", {})
            assert user_md(home).read_text() == "v2\n"
            raise RuntimeError("the commit did not happen")
    assert user_md(home).read_text() == "v1\n"
    assert revisions() == [(1, "extraction_rebuild", "v1\n")]
    assert Resource.objects.get().current_revision == 1


def test_if_the_transaction_fails_a_new_file_is_removed_again(home):
    with pytest.raises(RuntimeError):
        with resource_file_locked(agent_id="main", resource_type="user_md", why="test") as locked:
            locked.write("first\n", "extraction_rebuild", {})
            raise RuntimeError("rolled back")
    assert not user_md(home).exists()
    assert revisions() == []


def test_if_the_file_cannot_be_written_no_revision_claims_it(home):
    write("v1\n")
    with pytest.raises(OSError):
        with resource_file_locked(agent_id="main", resource_type="user_md", why="test") as locked:
            user_md(home).unlink()
            user_md(home).mkdir()  # a folder where the file should be: writing the file fails
            locked.write("v2\n", "extraction_rebuild", {})
    assert revisions() == [(1, "extraction_rebuild", "v1\n")]
    assert Resource.objects.get().current_revision == 1
    assert [p.name for p in user_md(home).parent.iterdir()] == ["USER.md"]  # no temp file left


def test_it_never_writes_outside_fermix_home(home, tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    (home.home / "memory").symlink_to(outside, target_is_directory=True)
    with pytest.raises(errors.UnsafePath):
        write("escape\n")
    assert list(outside.iterdir()) == []
    assert revisions() == []


def test_checkpoints_are_not_files(home):
    with pytest.raises(errors.InvalidContent):
        resource_write_file(agent_id="main", resource_type="checkpoint", content="x", mutation_source="compaction")


def test_capture_records_only_what_changed(home):
    write("v1\n")
    assert resource_capture_file(agent_id="main", resource_type="user_md") is None
    user_md(home).write_bytes(b"v1\r\nwindows line ends\r\n")
    captured = resource_capture_file(agent_id="main", resource_type="user_md")
    assert captured.mutation_source == "manual_edit"
    assert captured.content == "v1\r\nwindows line ends\r\n"  # bytes kept exactly, no newline translation
    assert resource_capture_file(agent_id="main", resource_type="user_md") is None


def test_inside_an_outer_transaction_the_revision_rolls_back_and_the_next_read_records_the_file(home):
    with pytest.raises(RuntimeError), transaction.atomic():
        write("v1\n")
        raise RuntimeError
    assert revisions() == []
    # The outer commit is out of the file's reach; the file is picked up by the next capture instead.
    assert resource_capture_file(agent_id="main", resource_type="user_md").mutation_source == "imported"


def test_sync_records_every_edited_or_unknown_file_and_nothing_else(home):
    write("v1\n")
    resource_write_file(agent_id="main", resource_type="soul_md", content="soul\n", mutation_source="seed")
    assert resource_sync_files(agent_id="main") == []
    user_md(home).write_text("v1 by hand\n")
    (home.home / "bootstrap" / "main" / "FERMIX.md").write_text("never recorded\n")
    recorded = resource_sync_files(agent_id="main")
    assert [(r.resource_type, r.mutation_source) for r in recorded] == [("fermix_md", "imported"),
                                                                        ("user_md", "manual_edit")]
    assert resource_sync_files(agent_id="main") == []


SQLITE_GUARD = [
    "CREATE TABLE commit_guard_parent (id INTEGER PRIMARY KEY)",
    "CREATE TABLE commit_guard (parent_id INTEGER REFERENCES commit_guard_parent (id) DEFERRABLE INITIALLY DEFERRED)",
    "CREATE TRIGGER commit_guard_trigger AFTER INSERT ON resource_revisions WHEN new.content = 'refused at commit\n' "
    "BEGIN INSERT INTO commit_guard (parent_id) VALUES (999); END",
]
SQLITE_UNGUARD = ["DROP TRIGGER IF EXISTS commit_guard_trigger", "DROP TABLE IF EXISTS commit_guard",
                  "DROP TABLE IF EXISTS commit_guard_parent"]
POSTGRES_GUARD = [
    "CREATE FUNCTION commit_guard() RETURNS trigger AS $$ BEGIN "
    "IF NEW.content = E'refused at commit\\n' THEN RAISE EXCEPTION 'refused at commit'; END IF; RETURN NEW; END "
    "$$ LANGUAGE plpgsql",
    "CREATE CONSTRAINT TRIGGER commit_guard_trigger AFTER INSERT ON resource_revisions "
    "DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION commit_guard()",
]
POSTGRES_UNGUARD = ["DROP TRIGGER IF EXISTS commit_guard_trigger ON resource_revisions",
                    "DROP FUNCTION IF EXISTS commit_guard()"]


@pytest.fixture
def fails_at_commit():
    """A deferred check that makes COMMIT itself fail for one content (checked only at commit time)."""
    guard, unguard = (SQLITE_GUARD, SQLITE_UNGUARD) if connection.vendor == "sqlite" else (
        POSTGRES_GUARD, POSTGRES_UNGUARD)
    with connection.cursor() as cursor:
        for sql in guard:
            cursor.execute(sql)
    yield "refused at commit\n"
    with connection.cursor() as cursor:
        for sql in unguard:
            cursor.execute(sql)


@pytest.mark.django_db(transaction=True)
def test_if_the_commit_itself_fails_the_file_is_restored(home, fails_at_commit):
    write("v1\n")
    with pytest.raises(DatabaseError):
        write(fails_at_commit)
    assert user_md(home).read_text() == "v1\n"
    assert revisions() == [(1, "extraction_rebuild", "v1\n")]
    assert Resource.objects.get().current_revision == 1
