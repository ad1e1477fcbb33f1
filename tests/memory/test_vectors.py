"""Stored vectors and hybrid recall, with the `openai` embedding backend on the loopback fake provider.

The fake answers each text with a hashed bag of its words, so these tests are about the plumbing (what
is embedded, when, what is forgotten, what recall says), not about meaning: the local model's own tests
are in test_embeddings.py, its relevance in bench/recall_eval.py.
"""

import io
import threading
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta

import numpy as np
import pytest
from django.core.management import call_command
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone
from django_q.models import OrmQ

from fermix_site import generations, leases
from memory import embeddings, vectors
from memory.conversations import ConversationKey, message_append
from memory.erasure import memory_forget_owner
from memory.models import Embedding, Memory
from memory.rows import memory_archive, memory_replace
from memory.search import semantic, vector_files
from memory.tools import ToolContext, run_tool
from memory.vectors import embed_pending, pending_counts, queue_embedding
from tests.fakeprovider import EMBEDDINGS_PATH, provider_config_toml, use_config
from tests.memory_factories import fact
from tests.waiting import wait_for

pytestmark = pytest.mark.django_db
CONV = "telegram:5"


def embeddings_toml(server, model="fake-embed", dimensions=32):
    return (f'[fermix_core.embeddings]\nbackend = "openai"\nbase_url = "{server.base_url()}"\n'
            f'model = "{model}"\ndimensions = {dimensions}\n')


@pytest.fixture
def vectors_on(home, fake_provider):
    semantic.clear()
    with use_config(provider_config_toml(fake_provider) + embeddings_toml(fake_provider)):
        yield fake_provider
    semantic.clear()


def said(text, days_ago=0.0, role="user", kind="chat", owner="default", conversation=CONV):
    return message_append(agent_id="main", conversation=conversation, role=role, content=text, trust="operator",
                          kind=kind, owner_id=owner,
                          created_at=timezone.now() - timedelta(days=days_ago) if days_ago else None)


def recall(**arguments):
    ctx = ToolContext(agent_id="main", owner_id="default", trust="operator", conversation=ConversationKey.parse(CONV))
    return run_tool("memory_recall", ctx, {"source": "history", "scope": "current", **arguments})


def embedded(kind="message"):
    return sorted(Embedding.objects.filter(kind=kind).values_list("object_id", flat=True))


def test_chat_and_voice_are_embedded_with_the_model_id_and_dimension(vectors_on):
    chat, voice = said("I adopted a beagle"), said("walked him twice", kind="voice_turn")
    said("the window was compacted", kind="notice")
    row = fact("pet", "has a beagle called Biscuit", "identity")
    done = embed_pending()
    assert (done.messages, done.memories) == (2, 1)
    assert embedded() == [chat.id, voice.id] and embedded("memory") == [row.id]
    stored = Embedding.objects.get(kind="message", object_id=chat.id)
    assert (stored.model_id, stored.dimensions, len(bytes(stored.vector))) == ("openai:fake-embed/32", 32, 64)
    assert stored.conversation == "telegram:5:root" and stored.owner_id == "default"
    texts = [t for r in vectors_on.requests if r.path == EMBEDDINGS_PATH for t in r.body["input"]]
    assert "user: I adopted a beagle" in texts  # the speaker is embedded with the text
    assert embed_pending().messages == 0 and pending_counts("openai:fake-embed/32") == (0, 0)


def test_hybrid_recall_fuses_and_explains(vectors_on):
    first = said("I adopted a beagle from the rescue in Otley", days_ago=3)
    said("we had pasta for dinner", days_ago=2)
    embed_pending()
    answer = recall(query="beagle rescue", mode="hybrid")
    assert answer.meta["mode"] == "hybrid" and answer.meta["degraded"] is None
    top = answer.data[0]
    assert top["id"] == first.id
    assert top["signals"]["lexical_rank"] == 1 and top["signals"]["semantic_rank"] == 1
    assert top["signals"]["why"] == "matched: beagle, rescue"
    semantic_only = [d for d in answer.data if d["signals"]["lexical_rank"] is None and d["context"] is None]
    assert all(d["signals"]["why"] == "similar meaning" for d in semantic_only)


def test_semantic_recall_is_begun_without_waiting_for_the_query_s_vector(vectors_on):
    # recall starts semantic search before its lexical passes: the scope's vectors are read at once, and
    # the query's vector and the scores are left to a pool, so the passes run while the model answers.
    first = said("I adopted a beagle from the rescue in Otley", days_ago=3)
    said("we had pasta for dinner", days_ago=2)
    embed_pending()
    model, filters = embeddings.embedder(), {"agent_id": "main"}
    whole = semantic.neighbours(Embedding.Kind.MESSAGE, model, "beagle rescue", filters, 10)
    asked = len(vectors_on.requests_for("fake-embed"))
    gate = threading.Event()
    with ThreadPoolExecutor(max_workers=1) as pool:
        pool.submit(gate.wait, 30)  # the pool is busy until the gate opens
        finish = semantic.start(Embedding.Kind.MESSAGE, model, "rescue beagle", [filters], 10, pool)
        assert len(vectors_on.requests_for("fake-embed")) == asked  # start returned; the vector is not asked
        gate.set()  # the pool asks for the vector without being waited for
        wait_for(lambda: len(vectors_on.requests_for("fake-embed")) == asked + 1)
        found = finish()[0]
    assert len(vectors_on.requests_for("fake-embed")) == asked + 1
    assert found.degraded is None and found.hits[0].id == whole.hits[0].id == first.id


def test_unembedded_history_makes_hybrid_lexical_and_says_so(vectors_on):
    said("I adopted a beagle", days_ago=3)
    answer = recall(query="beagle")
    assert answer.meta == {"mode": "lexical", "degraded": "embeddings_incomplete", "time": []}
    assert [d["content"] for d in answer.data] == ["I adopted a beagle"]
    embed_pending()
    assert recall(query="beagle").meta["mode"] == "hybrid"


def test_a_changed_or_archived_row_loses_its_vector_and_a_live_one_gets_a_new_one(vectors_on):
    row = fact("city", "lives in Lisbon", "identity")
    embed_pending()
    before = bytes(Embedding.objects.get(kind="memory", object_id=row.id).vector)
    memory_replace(memory_id=row.id, value="lives in Porto now", actor_type="operator")
    assert embedded("memory") == []
    embed_pending()
    assert bytes(Embedding.objects.get(kind="memory", object_id=row.id).vector) != before
    memory_archive(memory_id=row.id, archived_by="operator")
    assert embedded("memory") == [] and embed_pending().memories == 0


def test_erasing_an_owner_leaves_no_vector_of_theirs(vectors_on):
    said("I adopted a beagle", owner="bo", conversation="slack:bo")
    fact("pet", "has a beagle", "identity", owner="bo")
    mine = said("my own message")
    embed_pending()
    memory_forget_owner(owner_id="bo")
    assert embedded() == [mine.id] and embedded("memory") == []


def test_a_new_model_re_embeds_everything_and_the_rebuild_drops_the_old_vectors(vectors_on, fake_provider):
    said("I adopted a beagle")
    fact("pet", "has a beagle", "identity")
    embed_pending()
    with use_config(provider_config_toml(fake_provider) + embeddings_toml(fake_provider, "fake-embed-2", 16)):
        assert pending_counts("openai:fake-embed-2/16") == (1, 1)
        out = io.StringIO()
        call_command("embeddings_rebuild", "--batch", "1", stdout=out)
        assert "1 message(s) and 1 memory row(s) to embed" in out.getvalue()
        assert "removed 2 vector(s) of other models" in out.getvalue()
    assert set(Embedding.objects.values_list("model_id", flat=True)) == {"openai:fake-embed-2/16"}


def test_the_rebuild_is_resumable(vectors_on):
    for n in range(5):
        said(f"message number {n}")
    assert embed_pending(batch=2, max_batches=1).messages == 2
    out = io.StringIO()
    call_command("embeddings_rebuild", "--batch", "2", stdout=out)
    assert "3 message(s) and 0 memory row(s) to embed" in out.getvalue()
    assert len(embedded()) == 5


def test_a_failing_embedding_server_leaves_recall_lexical(vectors_on, fake_provider):
    said("I adopted a beagle")
    embed_pending()
    toml = provider_config_toml(fake_provider) + embeddings_toml(fake_provider).replace(
        fake_provider.base_url(), "http://127.0.0.1:9/v1")
    with use_config(toml):  # the same model id, on a server that refuses connections
        answer = recall(query="beagle", mode="semantic")
        assert answer.ok and answer.meta == {"mode": "lexical", "degraded": "embeddings_failed", "time": []}
        assert [d["content"] for d in answer.data] == ["I adopted a beagle"]


def test_backend_none_is_lexical_and_queues_nothing(home):
    with use_config('[fermix_core.embeddings]\nbackend = "none"\n'):
        said("I adopted a beagle")
        queue_embedding()
        answer = recall(query="beagle")
        assert answer.meta == {"mode": "lexical", "degraded": None, "time": []}
        assert recall(query="beagle", mode="hybrid").meta["degraded"] == "embeddings_not_configured"
        assert embed_pending().batches == 0 and not Embedding.objects.exists()


def test_memory_rows_are_found_by_meaning_in_their_scope(vectors_on):
    mine = fact("pet", "has a beagle called Biscuit", "identity")
    fact("pet", "has a beagle called Rex", "identity", owner="bo")
    embed_pending()
    ctx = ToolContext(agent_id="main", owner_id="default", trust="operator", conversation=ConversationKey.parse(CONV))
    answer = run_tool("memory_recall", ctx, {"query": "beagle", "scope": "owner", "mode": "semantic"})
    assert answer.meta["mode"] == "semantic"
    assert [d["id"] for d in answer.data] == [mine.id]
    assert answer.data[0]["signals"]["semantic_rank"] == 1 and answer.data[0]["signals"]["lexical_rank"] is None
    assert Memory.objects.count() == 2


def test_one_embedding_pass_at_a_time(vectors_on):
    said("I adopted a beagle")
    token = leases.acquire(vectors.LEASE, vectors.LEASE_TTL)  # another worker's pass
    assert vectors.embed_pass() is None and embedded() == []
    leases.release(vectors.LEASE, token)
    done = vectors.embed_pass()
    assert done.messages == 1 and not done.more and leases.acquire(vectors.LEASE, vectors.LEASE_TTL)


def test_a_pass_stops_at_its_time_and_queues_the_next(vectors_on, django_capture_on_commit_callbacks):
    for n in range(3):
        said(f"message number {n}")
    queued = OrmQ.objects.count()
    with django_capture_on_commit_callbacks(execute=True):
        done = vectors.embed_pass(seconds=0)  # its time is up before the first batch
    assert (done.messages, done.more) == (0, True)
    assert OrmQ.objects.count() == queued + 1  # the rest is the next pass's
    assert vectors.embed_pass().messages == 3


def test_the_rebuild_waits_for_a_running_pass(vectors_on):
    said("I adopted a beagle")
    token = leases.acquire(vectors.LEASE, vectors.LEASE_TTL)
    tries = []

    def wait():
        tries.append(1)
        if len(tries) == 2:
            leases.release(vectors.LEASE, token)  # the worker's pass ends

    assert vectors.hold_embedding_lease(wait) and len(tries) == 2


def test_memory_recall_says_when_a_row_waits_for_its_vector_and_stops_once_it_has_one(vectors_on):
    def memories():
        return recall(query="beagle", source="memories", scope="all").meta

    fact("pet", "has a beagle", "identity")
    embed_pending()
    assert memories() == {"mode": "hybrid", "degraded": None, "time": []}
    fact("sport", "plays squash on fridays", "interest")  # written long ago (the factory's time), no vector
    assert memories() == {"mode": "lexical", "degraded": "embeddings_incomplete", "time": []}
    with CaptureQueriesContext(connection) as asked:  # nothing changed: the process's answer, not the scan
        assert memories()["degraded"] == "embeddings_incomplete"
    assert not [q for q in asked.captured_queries if "EXISTS" in q["sql"].upper() and "memories" in q["sql"]]
    embed_pending()  # a new vector: the kept answer is not used again
    assert memories() == {"mode": "hybrid", "degraded": None, "time": []}


def test_a_dated_question_asks_once_whether_memory_rows_wait_for_their_vectors(vectors_on):
    """A time span's rows are among the rest's: while none of the rest waits, the span is not asked apart
    (an anti-join over the scope's live rows, and each span a new one); when a row waits, the span is asked."""
    def anti_joins(asked):
        return [q for q in asked.captured_queries if "EXISTS" in q["sql"].upper() and "memories" in q["sql"]]

    yesterday = timezone.now() - timedelta(days=1)
    pet = fact("pet", "has a beagle", "identity")
    Memory.objects.filter(pk=pet.pk).update(updated_at=yesterday)
    embed_pending()
    question = "what did I say about the beagle yesterday?"
    with CaptureQueriesContext(connection) as asked:
        answer = recall(query=question, source="memories", scope="all")
    assert (answer.meta["mode"], answer.meta["degraded"], len(answer.meta["time"])) == ("hybrid", None, 1)
    assert [d["id"] for d in answer.data] == [pet.id]
    assert anti_joins(asked) == []  # the rest is the agent's live rows, counted; the span not asked apart

    model = embeddings.embedder()
    rest = {"agent_id": "main", "archived_at__isnull": True}
    span = {**rest, "updated_at__gte": yesterday - timedelta(hours=1)}
    old = fact("sport", "plays squash on fridays", "interest", minute=-10_000)  # a week before, no vector
    assert [n.degraded for n in semantic.neighbours_each("memory", model, "beagle", [span, rest], 5)] == [
        None, "embeddings_incomplete"]
    new = fact("book", "reading Piranesi", "interest")
    Memory.objects.filter(pk=new.pk).update(updated_at=yesterday)  # inside the span, no vector
    assert [n.degraded for n in semantic.neighbours_each("memory", model, "beagle", [span, rest], 5)] == [
        "embeddings_incomplete", "embeddings_incomplete"]
    answer = recall(query=question, source="memories", scope="all")
    assert (answer.meta["mode"], answer.meta["degraded"]) == ("lexical", "embeddings_incomplete")
    assert old.id != new.id


def test_after_a_memory_row_changes_the_agent_s_rows_are_counted_not_anti_joined(vectors_on):
    """Over all conversations, whether memory rows wait for their vectors is answered by counting the agent's
    live rows against the vectors held: every change forgets the kept answer, and the anti-join (a probe of
    `embeddings` for each live row) was most of the next query's time at a million messages."""
    def memories():
        with CaptureQueriesContext(connection) as asked:
            meta = recall(query="beagle", source="memories", scope="all").meta
        return meta, [q for q in asked.captured_queries if "EXISTS" in q["sql"].upper() and "memories" in q["sql"]]

    rows = [fact(f"fact {n}", f"a beagle fact number {n}", "identity", minute=n) for n in range(5)]
    embed_pending()
    assert memories() == ({"mode": "hybrid", "degraded": None, "time": []}, [])
    memory_replace(memory_id=rows[2].id, value="a beagle called Biscuit", actor_type="operator")
    assert embedded("memory") == sorted(r.id for r in rows if r != rows[2])  # it waits, changed just now
    assert memories() == ({"mode": "hybrid", "degraded": None, "time": []}, [])
    Memory.objects.filter(pk=rows[2].id).update(updated_at=timezone.now() - timedelta(hours=1))
    generations.clear_all()  # a new process, an hour later: the row has waited past the grace
    meta, asked = memories()  # the count disagrees, and the anti-join says which row waits since when
    assert meta == {"mode": "lexical", "degraded": "embeddings_incomplete", "time": []} and len(asked) == 1
    embed_pending()
    assert memories() == ({"mode": "hybrid", "degraded": None, "time": []}, [])


def test_the_counted_answer_is_the_anti_join_s_or_unknown():
    """`_oldest_waiting_counted` gives when the oldest waiting row was changed, as the anti-join does, or says
    it cannot tell (a row changed before the grace waits), never another answer."""
    now = timezone.now()
    whole = {"agent_id": "main", "archived_at__isnull": True}
    rows = [fact(f"fact {n}", f"value {n}", "identity", minute=n) for n in range(4)]
    held = np.array([r.id for r in rows])
    old = now - vectors.GRACE
    assert semantic._oldest_waiting_counted(whole, held, old) is None
    Memory.objects.filter(pk=rows[1].id).update(updated_at=now)  # changed now, its vector gone
    assert semantic._oldest_waiting_counted(whole, held[held != rows[1].id], old) == now
    assert semantic._oldest_waiting_counted(whole, held, old) is None  # changed now, embedded again
    assert semantic._oldest_waiting_counted(whole, held[held != rows[0].id], old) is semantic.UNKNOWN
    fact("other", "another agent's row", "identity", agent="other")
    assert semantic._oldest_waiting_counted(whole, held, old) is None
    assert semantic._whole_agent(whole) and not semantic._whole_agent({**whole, "owner_id": "default"})
    assert not semantic._whole_agent({**whole, "archived_at__isnull": False})


@pytest.mark.skipif(semantic.numkong is None, reason="numkong is not installed (it comes with usearch)")
def test_exact_scores_are_the_float32_dot_products_of_the_float16_rows_and_the_best_come_first(monkeypatch):
    rng = np.random.default_rng(3)
    matrix = rng.standard_normal((5_000, 384)).astype(np.float16)
    vector = rng.standard_normal(384).astype(np.float32)
    expected = matrix.astype(np.float32) @ vector.astype(np.float16).astype(np.float32)
    np.testing.assert_allclose(semantic._scores(matrix, vector), expected, rtol=1e-5, atol=1e-4)
    entry = vector_files.Stored(np.arange(100, 5_100), matrix, 0, 0, matrix.sum(axis=0, dtype=np.float32),
                                np.arange(1, 5_001))
    best = semantic._best(entry, vector, 50)
    assert [pk for pk, _ in best] == [100 + i for i in np.argsort(-expected, kind="stable")[:50]]
    # Without numkong, numpy's float32 products give the same order.
    monkeypatch.setattr(semantic, "numkong", None)
    assert [pk for pk, _ in semantic._best(entry, vector, 50)] == [pk for pk, _ in best]


@pytest.mark.skipif(semantic.numkong is None, reason="numkong is not installed (it comes with usearch)")
@pytest.mark.parametrize("rows", [9_999, 10_000, 20_011])
def test_a_large_scope_is_scored_in_parts_on_several_threads_with_the_same_scores(monkeypatch, rows):
    rng = np.random.default_rng(rows)
    matrix = rng.standard_normal((rows, 64)).astype(np.float16)
    vector = rng.standard_normal(64).astype(np.float32)
    whole = semantic._dot(matrix, vector.astype(np.float16)[None, :])
    monkeypatch.setattr(semantic, "_SCORE_PARTS", 3)  # as on a machine of three cores or more
    parted = semantic._scores(matrix, vector)
    assert parted.shape == (rows,)
    np.testing.assert_array_equal(parted, whole)  # each row's product is the same, in the same place
    if rows >= 2 * semantic.SCORE_PART_ROWS:
        assert any(t.name.startswith("fermix-scores") for t in threading.enumerate())
