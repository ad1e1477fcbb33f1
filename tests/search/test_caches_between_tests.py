"""The process-local caches of recall start empty in every test.

A test's transaction is rolled back, so the next test reuses its message and vector ids and its
generation counters: a cache kept valid by them (the scope's vectors, by the highest vector id read and
the vectors' generation) would answer the next test with the vectors of rows it never wrote. These two
tests run in this order (one file stays in one process); the second fails when the first test's vectors
are still cached.
"""

import pytest

from memory.conversations import message_append
from memory.models import Embedding
from memory.tools import ToolContext, run_tool
from memory.vectors import embed_pending

pytestmark = pytest.mark.django_db


def said(*texts):
    return [message_append(agent_id="main", conversation="telegram:1", role="user", content=text,
                           owner_id="default", trust="operator") for text in texts]


def recall(query):
    ctx = ToolContext(agent_id="main", owner_id="default", trust="operator")
    return run_tool("memory_recall", ctx, {"query": query, "source": "history", "scope": "all"}).data


def test_first_a_scope_with_vectors_is_searched(home):
    rows = said("my sister is called Rita", "we met in the park", "the weather was fine")
    assert embed_pending().messages == 3  # the local model, as configured by default
    found = recall("sister")
    assert found[0]["id"] == rows[0].id and found[0]["signals"]["semantic_rank"] == 1


def test_then_the_same_ids_without_vectors_have_no_meaning_rank(home):
    rows = said("the weather was fine", "we met in the park", "my sister is called Rita")
    assert Embedding.objects.count() == 0  # nothing embedded in this test
    found = recall("sister")
    assert [d["id"] for d in found] == [rows[2].id]
    assert found[0]["signals"]["semantic_rank"] is None
