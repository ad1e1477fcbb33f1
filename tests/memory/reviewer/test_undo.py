"""Undoing a run: reversed as one unit, once, and refused when a row changed since."""

import pytest

from fermix_site.conf import conf
from memory.models import Memory, ReviewRun
from memory.reviewer import UndoError, review_undo
from tests.memory.reviewer.conftest import moving_to_porto, review, say
from tests.personas import ops

pytestmark = pytest.mark.django_db


def test_undo_reverses_a_run_as_one_unit(model):
    city, pet = moving_to_porto(model)
    review()
    run = ReviewRun.objects.get()
    user_md = conf.memory_dir("main") / "USER.md"
    assert "Porto" in user_md.read_text() and "jazz" in user_md.read_text()
    assert review_undo(run_id=run.id, actor="operator:ana") == {"run_id": run.id, "status": "undone",
                                                                "operations_reversed": 3, "warnings": []}
    assert Memory.objects.get(pk=city.id).value == "lives in Lisbon"
    assert Memory.objects.get(pk=pet.id).archived_at is None
    assert Memory.objects.get(key="music").archived_at is not None
    assert user_md.read_text() == "## Identity\n- lives in Lisbon\n- has a dog\n"
    from resources.models import ResourceRevision
    latest = ResourceRevision.objects.filter(resource_type="user_md").order_by("-revision").first()
    assert latest.provenance["undo"] is True and latest.mutation_source == "extraction_rebuild"
    with pytest.raises(UndoError) as excinfo:
        review_undo(run_id=run.id, actor="operator:ana")
    assert excinfo.value.code == "already_undone"


def test_undo_is_refused_when_a_row_changed_since(model):
    from memory.rows import memory_replace

    say("I love jazz")
    model.push(ops({"op": "add", "category": "interest", "key": "music", "value": "loves jazz"}))
    review()
    memory_replace(memory_id=Memory.objects.get().id, value="loves bebop", actor_type="operator")
    with pytest.raises(UndoError) as excinfo:
        review_undo(run_id=ReviewRun.objects.get().id, actor="operator")
    assert excinfo.value.code == "conflict"
    assert Memory.objects.get().value == "loves bebop"
