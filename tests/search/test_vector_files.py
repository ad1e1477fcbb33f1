"""A node's files of large scopes' vectors: written by the process that read a scope from the database,
read by the node's next processes, brought current (what was removed dropped from them) by the first that
finds them stale and by the schedule.

Real vectors (the `openai` backend on the loopback fake provider) in the real database and real files under
FERMIX_HOME. A new process is what `semantic.clear()` leaves: no scope's vectors held. FROM_VECTORS is
lowered so that a scope of a few dozen messages counts as large.
"""

import os
import stat
import threading
from datetime import timedelta

import numpy as np
import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from fermix_site import generations, node
from fermix_site.conf import conf
from memory import embeddings
from memory.conversations import ConversationKey, message_append
from memory.erasure import memory_forget_owner
from memory.models import Embedding, Message
from memory.rows import memory_replace
from memory.search import semantic, upkeep, vector_files
from memory.tasks import vector_index_task
from memory.tools import ToolContext, run_tool
from memory.vectors import embed_pending, forget_message_vectors, vectors_generation
from tests.fakeprovider import embeddings_config_toml, provider_config_toml, use_config
from tests.memory_factories import fact
from tests.tmpfs import keeping_more_free_than

pytestmark = pytest.mark.django_db
CONV = "telegram:5"
SCOPE = {"agent_id": "main", "conversation": "telegram:5:root"}
TOPICS = ["beagle walk park", "pottery class clay", "train ticket Leeds", "knee physio run", "pasta dinner wine"]


@pytest.fixture
def files(home, fake_provider, monkeypatch):
    """Embeddings on, and a scope read with 20 or more vectors written to its file."""
    monkeypatch.setattr(vector_files, "FROM_VECTORS", 20)
    semantic.clear()
    with use_config(provider_config_toml(fake_provider) + embeddings_config_toml(fake_provider, dimensions=32)):
        yield fake_provider
    semantic.clear()


def said(n, owner="default", conversation=CONV, first=0):
    return [message_append(agent_id="main", conversation=conversation, role="user", owner_id=owner,
                           content=f"{TOPICS[i % len(TOPICS)]} number{i}", trust="operator")
            for i in range(first, first + n)]


def recall_now(query="a walk with the dog", owner="default", conversation=CONV):
    ctx = ToolContext(agent_id="main", owner_id=owner, trust="operator",
                      conversation=ConversationKey.parse(conversation))
    answer = run_tool("memory_recall", ctx, {"query": query, "scope": "current", "mode": "semantic",
                                             "source": "history"})
    assert answer.meta["mode"] == "semantic"
    return [d["id"] for d in answer.data]


def recall(query="a walk with the dog", owner="default", conversation=CONV):
    """`recall_now`, once the scope's file it may have begun to write is written."""
    found = recall_now(query, owner, conversation)
    semantic.wait_for_files()
    return found


def scope_file(scope=SCOPE):
    return vector_files.path(embeddings.embedder().model_id, "message", scope)


def newest_vector() -> int:
    return Embedding.objects.order_by("-id").values_list("id", flat=True).first()


def forget(message_id: int) -> Embedding:
    """Remove one message's vector, as an erasure of the message does; the vector removed."""
    vector = Embedding.objects.get(kind="message", object_id=message_id)
    forget_message_vectors(Message.objects.filter(pk=message_id), "main")
    return vector


def read_only_after(queries, last: int) -> bool:
    """Whether the statements that read stored vectors read only those stored after `last` (each search
    looks for new ones), so none that a file or the process already held."""
    reads = [q["sql"] for q in queries if '"embeddings"."vector"' in q["sql"]]
    return bool(reads) and all(f'"embeddings"."id" > {last}' in sql for sql in reads)


def test_a_large_scope_read_from_the_database_is_written_to_a_file_the_next_process_reads(files):
    said(30)
    embed_pending()
    first = recall()
    path = scope_file()
    assert path.exists() and stat.S_IMODE(path.stat().st_mode) == 0o600
    assert path.is_relative_to(conf.home) and not list(path.parent.glob("*.tmp"))
    semantic.clear()  # a new process
    with CaptureQueriesContext(connection) as asked:
        assert recall() == first
    assert read_only_after(asked.captured_queries, newest_vector())


def test_rows_stored_after_the_file_are_read_from_the_database_beside_it(files):
    said(30)
    embed_pending()
    recall()
    newest = said(1)[0]
    embed_pending()
    semantic.clear()
    assert newest.id in recall(query=TOPICS[0] + " number0")  # found although the file does not hold it
    assert newest.id in recall(query=TOPICS[0])


def held(scope=SCOPE) -> vector_files.Stored:
    """What this process holds of a scope's vectors."""
    return semantic._cache[(embeddings.embedder().model_id, "message", tuple(sorted(scope.items())), 0)][1]


def test_a_process_maps_its_scopes_file_and_keeps_only_the_rows_after_it_in_memory(files):
    said(30)
    embed_pending()
    recall()  # read from the database, written to the file, and mapped from it: no copy of the process's own
    first = held()
    assert isinstance(first.matrix, np.memmap) and len(first.ids) == 30 and first.recent is None
    for n in range(3):  # the conversation goes on: a new message before each recall
        newest = said(1, first=30 + n)[0]
        embed_pending()
        assert recall(query=newest.content)[0] == newest.id
        now = held()
        assert now.matrix is first.matrix and len(now.recent) == n + 1  # the mapped rows are not copied
        assert now.ids.tolist() == [*first.ids.tolist(), *Message.objects.filter(pk__gt=first.ids.max()).order_by(
            "pk").values_list("pk", flat=True)]
    said(vector_files.FROM_VECTORS - 3, first=33)
    embed_pending()
    recall()  # 20 rows since the file: it is written again, with all of them, and mapped
    again = held()
    assert isinstance(again.matrix, np.memmap) and again.recent is None and len(again.ids) == 50
    assert file_vectors()[0] == list(Embedding.objects.filter(kind="message").order_by("pk").values_list(
        "pk", flat=True))


def no_room(server) -> str:
    """The configuration with more space kept free than the disk has: no cache fits."""
    return (provider_config_toml(server) + embeddings_config_toml(server, dimensions=32)
            + keeping_more_free_than(conf.home))


def test_a_scope_file_that_does_not_fit_above_the_space_kept_free_is_not_written(files, caplog):
    said(30)
    embed_pending()
    with use_config(no_room(files)):
        first = recall()
        assert not scope_file().parent.exists() or not list(scope_file().parent.iterdir())
        assert "do not fit above the" in caplog.text
        semantic.clear()
        assert recall() == first  # read from the database again
    semantic.clear()
    assert recall() == first and scope_file().exists()  # room again


def test_no_query_waits_for_a_file_and_the_rows_read_meanwhile_stay_beside_the_file(files):
    said(30)
    embed_pending()
    busy = threading.Event()
    semantic._file_writer.submit(busy.wait, 30)  # the writer is busy with another scope's file
    try:
        first = recall_now()
        assert first and not scope_file().exists()  # answered from what it read, the file still to write
        newest = said(1, first=30)[0]
        embed_pending()
        assert recall_now(query=newest.content)[0] == newest.id
    finally:
        busy.set()
    semantic.wait_for_files()
    now = held()  # the file written from the first read, mapped, and the row read since beside it
    assert isinstance(now.matrix, np.memmap) and len(now.matrix) == 30 and now.recent.shape == (1, 32)
    assert now.ids.tolist()[-1] == newest.id and file_vectors()[0] == now.keys.tolist()[:30]
    assert recall(query=newest.content)[0] == newest.id


def test_a_file_still_to_write_when_the_process_sees_a_removal_is_not_written(files):
    said(vector_files.FROM_VECTORS)  # one fewer after the removal: too few to write the scope's file again
    embed_pending()
    busy = threading.Event()
    semantic._file_writer.submit(busy.wait, 30)
    try:
        first = recall_now()
        forget(first[0])
        assert first[0] not in recall_now()  # the process holds the scope without it
    finally:
        busy.set()
    semantic.wait_for_files()
    assert not scope_file().exists()  # the file of what was read before the removal is never written


def test_a_held_scope_that_lost_vectors_is_written_again_without_them_and_held_mapped(files):
    said(30)
    embed_pending()
    first = recall()
    gone = forget(first[0])
    assert first[0] not in recall()  # no pass over the node's files has run
    now = held()
    assert isinstance(now.matrix, np.memmap) and len(now.ids) == 29 and now.recent is None  # no copy of its own
    keys, data = file_vectors()
    assert len(keys) == 29 and gone.id not in keys and bytes(gone.vector) not in data
    assert not vector_files.read(embeddings.embedder().model_id, "message", SCOPE,
                                 generations.current([vectors_generation("main", "message")]), 32).stale


@pytest.mark.parametrize("removed", [[], [7], [0], [59], [0, 1], [3, 17, 30, 44, 59]])
def test_the_vectors_a_scope_still_holds_are_found_by_counting_its_ids(files, removed):
    said(60)
    said(5, conversation="telegram:other")  # another scope's, among them
    embed_pending()
    model_id = embeddings.embedder().model_id
    rows = Embedding.objects.filter(kind="message", conversation="telegram:5:root").order_by("id")
    keys = np.asarray(rows.values_list("id", flat=True), dtype=np.int64)
    gone = [int(rows[i].object_id) for i in removed]
    forget_message_vectors(Message.objects.filter(pk__in=gone), "main")
    expected = np.isin(keys, np.asarray(rows.values_list("id", flat=True), dtype=np.int64))
    with CaptureQueriesContext(connection) as asked:
        kept = vector_files.still_held(model_id, "message", SCOPE, keys)
    assert kept.tolist() == expected.tolist() and int((~kept).sum()) == len(removed)
    assert len(asked.captured_queries) == (1 if len(removed) <= 1 else 2)  # the count and sum; then every id
    after = int(keys[9])  # an entry of the vectors past an index holding the first ten
    assert vector_files.still_held(model_id, "message", SCOPE, keys[10:], after).tolist() == expected[10:].tolist()


def test_a_file_that_could_not_be_written_is_tried_again_only_after_as_many_more_vectors(files, caplog):
    every = vector_files.FROM_VECTORS
    said(every)
    embed_pending()
    with use_config(no_room(files)):
        recall()
        assert caplog.text.count("do not fit above the") == 1
        for n in range(every - 1):  # a conversation going on, a recall after each message
            said(1, first=every + n)
            embed_pending()
            recall()
        assert caplog.text.count("do not fit above the") == 1  # not at every recall
    said(1, first=2 * every - 1)
    embed_pending()
    recall()  # as many vectors read since the first try: tried again, with room this time
    assert held().recent is None and len(held().ids) == 2 * every and scope_file().exists()


def test_a_stale_file_that_cannot_be_written_again_is_deleted(files):
    said(30)
    embed_pending()
    first = recall()
    vector = forget(first[0])
    semantic.clear()
    with use_config(no_room(files)):
        assert first[0] not in recall()
        assert not scope_file().exists()  # the removed vector stays in no file
    assert vector.id not in set(Embedding.objects.values_list("pk", flat=True))


def test_a_small_scope_is_not_written(files):
    said(10)
    embed_pending()
    recall()
    assert not scope_file().exists()


def test_a_file_emptied_by_an_erasure_is_deleted_where_found(files):
    said(30, owner="bo", conversation="telegram:bo")
    embed_pending()
    bo = {"agent_id": "main", "conversation": "telegram:bo:root"}
    recall(owner="bo", conversation="telegram:bo")
    assert scope_file(bo).exists()
    said(1)  # the owner's own conversation, kept
    embed_pending()
    memory_forget_owner(owner_id="bo")
    semantic.clear()
    assert recall(owner="bo", conversation="telegram:bo") == []  # the file's vectors are not used
    assert not scope_file(bo).exists()  # ...and the file, which holds none of them now, was deleted


def file_vectors(scope=SCOPE) -> tuple[list[int], bytes]:
    """The `embeddings` ids a scope's file holds, and its bytes."""
    model = embeddings.embedder()
    generation = generations.current([vectors_generation("main", "message")])
    stored = vector_files.read(model.model_id, "message", scope, generation, model.dimensions)
    return stored.keys.tolist(), scope_file(scope).read_bytes()


def test_a_stale_file_is_brought_current_by_the_first_process_to_find_it(files):
    said(30)
    embed_pending()
    first = recall()
    gone = Message.objects.get(pk=first[0])
    vector = forget(gone.pk)
    semantic.clear()  # a new process finds the file stale
    with CaptureQueriesContext(connection) as asked:
        held = recall()
    assert gone.pk not in held and held[:5] == first[1:6]  # the removed vector is not used...
    assert read_only_after(asked.captured_queries, newest_vector())  # ...and no vector read from the database
    keys, data = file_vectors()
    assert len(keys) == 29 and vector.id not in keys and bytes(vector.vector) not in data  # nor left in the file
    assert not vector_files.read(embeddings.embedder().model_id, "message", SCOPE,
                                 generations.current([vectors_generation("main", "message")]), 32).stale
    semantic.clear()  # the next process reads the file as it now is...
    with CaptureQueriesContext(connection) as asked:
        assert recall() == held
    assert read_only_after(asked.captured_queries, newest_vector())
    scope_file().unlink()
    semantic.clear()  # ...which is what the database gives
    assert recall() == held


def test_the_schedule_brings_stale_files_current_and_sweeps_abandoned_temporary_ones(files):
    said(30)
    embed_pending()
    recall()
    path = scope_file()
    abandoned = path.with_name(path.name + ".123.tmp")
    abandoned.write_bytes(b"half")
    os.utime(abandoned, (0, 0))
    assert vector_index_task() == {"scope_files_removed": 1}  # the abandoned one; the file is current
    assert path.exists() and not abandoned.exists()
    said(1)
    embed_pending()
    memory_forget_owner(owner_id="nobody")  # removes nothing: the files stay current
    assert vector_index_task() == {}
    first = Message.objects.filter(agent_id="main").order_by("id").first()
    vector = forget(first.pk)
    assert bytes(vector.vector) in path.read_bytes()
    assert vector_index_task() == {"scope_files_refreshed": 1}
    keys, data = file_vectors()
    assert len(keys) == 29 and vector.id not in keys and bytes(vector.vector) not in data
    assert vector_index_task() == {}  # current now
    vector_files.write("another-model", "message", SCOPE, (0,), vector_files.read(
        embeddings.embedder().model_id, "message", SCOPE, generations.current([vectors_generation("main", "message")]),
        32))
    assert vector_index_task() == {"scope_files_removed": 1}  # no search reads another model's file


def test_a_changed_memory_row_leaves_the_message_vectors_held(files):
    said(30)
    row = fact("pet", "has a beagle", "identity")
    embed_pending()
    recall()
    memory_replace(memory_id=row.id, value="has two beagles", actor_type="operator")
    with CaptureQueriesContext(connection) as asked:
        recall()
    assert read_only_after(asked.captured_queries, newest_vector())  # the message vectors were not dropped
    assert scope_file().exists()


def test_a_damaged_file_is_not_read_and_is_deleted(files):
    said(30)
    embed_pending()
    first = recall()
    path = scope_file()
    path.write_bytes(path.read_bytes()[:-100])  # cut short
    semantic.clear()
    assert recall() == first
    assert path.exists()  # deleted, then written again from the database
    path.write_bytes(b"not a vectors file at all")
    semantic.clear()
    assert recall() == first
    assert vector_files.read(embeddings.embedder().model_id, "message", SCOPE, (0,), 32) is not None


def test_a_time_span_and_the_rest_share_one_search_of_the_scope(files):
    said(30)
    embed_pending()
    model = embeddings.embedder()
    rows = list(Message.objects.filter(agent_id="main").order_by("id").values_list("id", flat=True))
    Message.objects.filter(id__in=rows[:10]).update(created_at=timezone.now() - timedelta(days=40))
    base = {"agent_id": "main", "channel": "telegram", "chat_id": "5", "thread_scope": "root"}
    span = {**base, "created_at__lt": timezone.now() - timedelta(days=30)}
    one = [semantic.neighbours("message", model, "a walk with the dog", f, 20) for f in (span, base)]
    with CaptureQueriesContext(connection) as queries:
        both = semantic.neighbours_each("message", model, "a walk with the dog", [span, base], 20)
    assert both == one
    assert {h.id for h in both[0].hits} <= set(rows[:10]) and len(both[1].hits) == 20
    assert sum("FROM \"embeddings\"" in q["sql"] for q in queries.captured_queries) <= 1
    with pytest.raises(ValueError):
        semantic.neighbours_each("message", model, "a walk", [base, {"agent_id": "main", "owner_id": "x"}], 20)


def test_the_file_holds_the_sum_and_the_ids_of_its_vectors_and_one_of_a_format_before_is_replaced(files):
    said(30)
    embed_pending()
    first = recall()
    model = embeddings.embedder()
    rows = Embedding.objects.filter(kind="message", conversation="telegram:5:root").values_list("vector", flat=True)
    generation, _ = semantic._cache[next(iter(semantic._cache))]
    stored = vector_files.read(model.model_id, "message", SCOPE, generation, model.dimensions)
    assert stored.total.tolist() == pytest.approx(embeddings.matrix(rows, model.dimensions).sum(axis=0).tolist(),
                                                  abs=1e-3)
    keys = Embedding.objects.filter(kind="message", conversation="telegram:5:root").order_by("id")
    assert stored.keys.tolist() == list(keys.values_list("id", flat=True))
    assert stored.ids.tolist() == list(keys.values_list("object_id", flat=True))
    path = scope_file()
    for before in (b"FERMIX-VECTORS-1", b"FERMIX-VECTORS-2"):  # without the sum; without the ids
        path.write_bytes(path.read_bytes().replace(vector_files.MAGIC, before, 1))
        assert vector_files.read(model.model_id, "message", SCOPE, generation, model.dimensions) is None
        assert not path.exists()
        semantic.clear()
        assert recall() == first and path.exists()  # written again from the database


def recall_rows(query, source="memories"):
    ctx = ToolContext(agent_id="main", owner_id="default", trust="operator",
                      conversation=ConversationKey.parse(CONV))
    answer = run_tool("memory_recall", ctx, {"query": query, "scope": "all", "mode": "semantic", "source": source,
                                             "limit": 50})
    assert answer.meta["mode"] == "semantic"
    semantic.wait_for_files()
    return [d["id"] for d in answer.data]


def test_a_held_scope_loses_only_the_vectors_removed_and_reads_none_again(files):
    rows = [fact(f"topic{i}", f"{TOPICS[i % len(TOPICS)]} number{i}", "context") for i in range(30)]
    embed_pending()
    assert len(recall_rows("a walk with the dog")) == 30
    memory_replace(memory_id=rows[0].id, value="collects old stamps", actor_type="operator")  # its vector goes
    with CaptureQueriesContext(connection) as asked:
        held = recall_rows("a walk with the dog")
    assert read_only_after(asked.captured_queries, newest_vector())  # the others were not read again
    semantic.clear()  # a new process brings the scope's file current: the same answer, no vector read again
    with CaptureQueriesContext(connection) as asked:
        assert recall_rows("a walk with the dog") == held and len(held) == 29 and rows[0].id not in held
    assert read_only_after(asked.captured_queries, newest_vector())
    vector_files.path(embeddings.embedder().model_id, "memory", {"agent_id": "main"}).unlink()
    semantic.clear()  # the database's answer
    assert recall_rows("a walk with the dog") == held
    embed_pending()  # the row's new vector, stored after the others
    assert recall_rows("collects old stamps")[0] == rows[0].id


def test_an_erasure_leaves_none_of_its_vectors_in_a_process_that_held_them(files):
    said(20, owner="bo", conversation="telegram:bo")
    said(20)
    embed_pending()
    bo = set(Message.objects.filter(owner_id="bo").values_list("id", flat=True))
    assert bo & set(recall_rows("a walk with the dog", source="history"))  # every conversation's vectors held
    memory_forget_owner(owner_id="bo")
    with CaptureQueriesContext(connection) as asked:
        held = recall_rows("a walk with the dog", source="history")
    assert read_only_after(asked.captured_queries, newest_vector())
    assert held and not bo & set(held)
    semantic.clear()  # a new process: the file written before the erasure is used only without its vectors
    assert recall_rows("a walk with the dog", source="history") == held


def test_after_an_erasure_and_the_pass_it_queues_no_file_of_the_node_holds_its_vectors(files):
    said(20, owner="bo", conversation="telegram:bo", first=100)
    said(20)
    rows = [fact(f"topic{i}", f"{TOPICS[i % len(TOPICS)]} number{i + 200}", "identity", owner=owner)
            for i, owner in enumerate(["bo"] * 20 + ["default"] * 20)]
    embed_pending()
    recall_rows("a walk with the dog", source="history")  # the agent's files of both kinds written
    recall_rows("a walk with the dog")
    recall(owner="bo", conversation="telegram:bo")
    others = {bytes(v) for v in Embedding.objects.exclude(owner_id="bo").values_list("vector", flat=True)}
    erased = {bytes(v) for v in Embedding.objects.filter(owner_id="bo").values_list("vector", flat=True)} - others
    assert len(erased) >= 30 and len(rows) == 40  # (the fake provider maps a few texts alike)

    def files_holding() -> list:
        found = [p for p in (conf.home / "cache" / "vectors").rglob("*") if p.is_file()]
        assert len(found) >= 2
        return [p.name for p in found if any(v in p.read_bytes() for v in erased)]

    assert len(files_holding()) == 3  # the agent's messages and memory rows, and bo's conversation
    memory_forget_owner(owner_id="bo")
    assert vector_index_task() == {"scope_files_removed": 1, "scope_files_refreshed": 2}  # the pass it queues
    assert files_holding() == []
    semantic.clear()  # and a new process reads the files as they are now: what the database gives
    assert recall_rows("a walk with the dog", source="history") and recall_rows("a walk with the dog")


def test_two_threads_writing_one_scopes_file_at_once_leave_one_whole_file(home):
    def stored(count: int, value: float) -> vector_files.Stored:
        ids = np.arange(count, dtype=np.int64)
        matrix = np.full((count, 32), value, dtype=np.float16)
        return vector_files.Stored(ids, matrix, count, count, matrix.sum(axis=0, dtype=np.float32), ids + 1)

    written = [stored(20_000, 0.25), stored(30_000, 0.5)]
    start, found = threading.Barrier(2), []

    def write(one):
        start.wait()
        for _ in range(50):
            vector_files.write("m", "message", SCOPE, (1,), one)
            found.append(vector_files.read("m", "message", SCOPE, (1,), 32))

    threads = [threading.Thread(target=write, args=(one,)) for one in written]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for each in found + [vector_files.read("m", "message", SCOPE, (1,), 32)]:  # whole each time it was read
        assert each is not None and not each.stale
        one = next(w for w in written if len(w.ids) == len(each.ids))
        assert np.array_equal(each.matrix, one.matrix) and np.array_equal(each.keys, one.keys)
    assert not list(vector_files.path("m", "message", SCOPE).parent.glob("*.tmp"))


@pytest.mark.django_db(transaction=True)
def test_each_node_brings_its_own_files_current_at_its_heartbeat_after_a_removal(files, monkeypatch):
    """The pass an erasure queues runs on one node; every node's heartbeat runs it for its own files."""
    monkeypatch.setattr(upkeep, "AFTER_REMOVAL_S", 0.0)
    said(30)
    embed_pending()
    recall()
    path = scope_file()
    abandoned = path.with_name(path.name + ".1-2.tmp")

    def beat():
        node.beat()  # every part of the node's heartbeat, this one among them
        upkeep.join()

    beat()  # the node's first pass: nothing to do
    abandoned.write_bytes(b"half")
    os.utime(abandoned, (0, 0))
    beat()  # nothing removed since, and the last pass is recent: no pass
    assert abandoned.exists()
    first = Message.objects.filter(agent_id="main").order_by("id").first()
    vector = forget(first.pk)
    beat()  # a removal: this node's pass, with no task run
    keys, data = file_vectors()
    assert len(keys) == 29 and vector.id not in keys and bytes(vector.vector) not in data
    assert not abandoned.exists()


@pytest.mark.django_db(transaction=True)
def test_a_node_runs_its_pass_at_most_once_a_minute_after_removals_and_every_five_minutes(files, monkeypatch):
    said(30)
    embed_pending()
    recall()
    path = scope_file()
    upkeep.beat()
    upkeep.join()
    forget_message_vectors(Message.objects.filter(pk=Message.objects.order_by("id").first().pk), "main")
    upkeep.beat()
    upkeep.join()
    assert vector_files.read(embeddings.embedder().model_id, "message", SCOPE,
                             generations.current([vectors_generation("main", "message")]), 32).stale  # not yet
    monkeypatch.setattr(upkeep, "EVERY_S", 0.0)  # five minutes later, a removal or none
    upkeep.beat()
    upkeep.join()
    keys, _ = file_vectors()
    assert len(keys) == 29 and path.exists()
