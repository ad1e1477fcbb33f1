"""Many real processes committing at once, on SQLite and on PostgreSQL (whichever DATABASE_URL names)."""

import pytest

from resources.models import Resource, ResourceRevision
from tests.resources.processes import run_together

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

COMMIT = """
from resources.services import resource_commit
revision = resource_commit(agent_id="main", resource_type="soul_md", content={content!r},
                           mutation_source="manual_edit", provenance={{"process": {i}}})
print(revision.revision if revision else "none")
"""

WRITE = """
from resources.services import resource_write_file
revision = resource_write_file(agent_id="main", resource_type="user_md", content={content!r},
                               mutation_source="extraction_rebuild")
print(revision.revision if revision else "none")
"""


def test_eight_processes_committing_the_same_content_create_one_revision(home, tmp_path):
    outputs = run_together([COMMIT.format(content="Same words.\n", i=i) for i in range(8)], tmp_path)
    assert sorted(outputs) == ["1"] + ["none"] * 7
    assert ResourceRevision.objects.count() == 1
    assert Resource.objects.get().current_revision == 1


def test_eight_processes_committing_different_content_get_gap_free_numbers(home, tmp_path):
    contents = [f"version {i}\n" for i in range(8)]
    outputs = run_together([COMMIT.format(content=c, i=i) for i, c in enumerate(contents)], tmp_path)
    assert sorted(int(o) for o in outputs) == list(range(1, 9))
    rows = list(ResourceRevision.objects.order_by("revision"))
    assert [r.revision for r in rows] == list(range(1, 9))
    assert [r.parent_revision for r in rows] == [None, *range(1, 8)]
    assert sorted(r.content for r in rows) == sorted(contents)
    assert Resource.objects.get().current_revision == 8


def test_concurrent_file_writes_leave_the_file_equal_to_the_current_revision(home, tmp_path):
    contents = [f"- fact {i}\n" for i in range(6)] * 2  # each content written by two processes
    outputs = run_together([WRITE.format(content=c) for c in contents], tmp_path)
    numbers = sorted(int(o) for o in outputs if o != "none")
    assert numbers == list(range(1, len(numbers) + 1))
    resource = Resource.objects.get(resource_type="user_md")
    current = ResourceRevision.objects.get(resource_type="user_md", revision=resource.current_revision)
    assert (home.home / "memory" / "main" / "USER.md").read_text() == current.content
