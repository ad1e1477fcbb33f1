"""The revision engine: hashes, numbering, idempotence, and what it refuses."""

import hashlib

import pytest

from fermix_site import generations
from resources import errors
from resources.models import Resource, ResourceRevision
from resources.services import resource_commit

pytestmark = pytest.mark.django_db


def commit(content, source="manual_edit", resource_type="soul_md", **extra):
    return resource_commit(agent_id="main", resource_type=resource_type, content=content,
                           mutation_source=source, **extra)


def test_it_records_hash_size_and_numbers_from_one(home):
    first = commit("Be kind.\n", source="seed", provenance={"template": "SOUL.md"})
    assert first.revision == 1
    assert first.parent_revision is None
    assert first.content_hash == hashlib.sha256(b"Be kind.\n").hexdigest()
    assert first.byte_size == len(b"Be kind.\n")
    assert first.mutation_source == "seed"
    assert first.provenance == {"template": "SOUL.md"}
    resource = Resource.objects.get(agent_id="main", resource_type="soul_md")
    assert resource.current_revision == 1
    assert resource.scope_id == "global"


def test_it_hashes_the_exact_utf8_bytes(home):
    revision = commit("Grüße\r\nno newline")
    assert revision.content_hash == hashlib.sha256("Grüße\r\nno newline".encode()).hexdigest()
    assert revision.byte_size == 19  # ü and ß are two bytes each


def test_it_is_a_no_op_when_the_content_equals_the_current_revision(home):
    assert commit("same\n") is not None
    assert commit("same\n") is None
    assert ResourceRevision.objects.count() == 1


def test_it_compares_with_the_current_revision_only_so_a_b_a_makes_three(home):
    numbers = [commit(text).revision for text in ("A\n", "B\n", "A\n")]
    assert numbers == [1, 2, 3]
    rows = list(ResourceRevision.objects.order_by("revision").values_list("revision", "parent_revision"))
    assert rows == [(1, None), (2, 1), (3, 2)]
    assert Resource.objects.get().current_revision == 3


def test_it_numbers_each_resource_and_scope_separately(home):
    commit("soul\n")
    assert commit("user\n", resource_type="user_md", source="extraction_rebuild").revision == 1
    one = commit("summary 1", resource_type="checkpoint", source="compaction", scope_id="telegram:1")
    other = commit("summary 2", resource_type="checkpoint", source="compaction", scope_id="telegram:2")
    assert (one.revision, other.revision) == (1, 1)


def test_it_completes_a_conversation_key_without_thread(home):
    revision = commit("summary", resource_type="checkpoint", source="compaction", scope_id="telegram:123")
    assert revision.scope_id == "telegram:123:root"
    again = commit("summary", resource_type="checkpoint", source="compaction", scope_id="telegram:123:root")
    assert again is None


@pytest.mark.parametrize("source", ["edited", "SEED", "", "rollback "])
def test_it_refuses_undocumented_mutation_sources(home, source):
    with pytest.raises(errors.InvalidMutationSource):
        commit("x", source=source)
    assert not ResourceRevision.objects.exists()


@pytest.mark.parametrize("resource_type, source", [
    ("checkpoint", "manual_edit"), ("soul_md", "compaction"), ("user_md", "soul_curation"),
    ("fermix_md", "extraction_rebuild"),
])
def test_it_refuses_a_source_that_cannot_write_that_type(home, resource_type, source):
    with pytest.raises(errors.InvalidMutationSource):
        commit("x", source=source, resource_type=resource_type, scope_id="c:1" if resource_type == "checkpoint"
               else "global")


def test_it_refuses_unknown_types_bad_agents_and_bad_scopes(home):
    with pytest.raises(errors.UnknownType):
        commit("x", resource_type="notes_md")
    with pytest.raises(errors.InvalidAgent):
        resource_commit(agent_id="../etc", resource_type="soul_md", content="x", mutation_source="manual_edit")
    with pytest.raises(errors.InvalidScope):
        commit("x", resource_type="checkpoint", source="compaction")
    with pytest.raises(errors.InvalidScope):
        commit("x", scope_id="telegram:1")


def test_it_refuses_content_the_database_cannot_store(home):
    with pytest.raises(errors.InvalidContent):
        commit("a\x00b")
    with pytest.raises(errors.InvalidContent):
        commit(b"bytes")
    with pytest.raises(errors.InvalidContent):
        commit("lone \ud800 surrogate")
    with pytest.raises(errors.InvalidContent):
        commit("x", provenance={"when": object()})
    assert not ResourceRevision.objects.exists()


def test_a_new_revision_invalidates_cached_prompts_and_a_no_op_does_not(home):
    before = generations.current(["prompt:main"])[0]
    commit("v1\n")
    after = generations.current(["prompt:main"])[0]
    assert after == before + 1
    commit("v1\n")
    assert generations.current(["prompt:main"])[0] == after


def test_checkpoints_do_not_touch_the_prompt_generation(home):
    before = generations.current(["prompt:main"])[0]
    commit("summary", resource_type="checkpoint", source="compaction", scope_id="telegram:1")
    assert generations.current(["prompt:main"])[0] == before
