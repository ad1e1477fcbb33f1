"""The approximate vector index: large scopes searched through it, kept current, rebuilt, never returning
what is gone.

Real vectors (the `openai` backend on the loopback fake provider: a hashed bag of each text's words) in
the real database, a real usearch index under FERMIX_HOME; `exact_max_vectors` is lowered so a scope of a
few dozen messages counts as large.
"""

import io
import json
import os
from pathlib import Path

import numpy as np
import pytest
from django.core.management import call_command
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django_q.models import OrmQ
from usearch.index import Index

from console.doctor import check_embeddings
from fermix_site import conf as conf_module
from fermix_site import node
from fermix_site.conf import ConfigError
from memory import embeddings
from memory.conversations import ConversationKey, message_append
from memory.erasure import memory_forget_owner
from memory.models import Embedding
from memory.rows import memory_archive
from memory.search import ann, semantic, upkeep
from memory.tasks import vector_index_task
from memory.tools import ToolContext, run_tool
from memory.vectors import embed_pending
from tests.fakeprovider import embeddings_config_toml, provider_config_toml, use_config
from tests.memory_factories import fact
from tests.tmpfs import keeping_more_free_than

pytestmark = pytest.mark.django_db
TOPICS = ["beagle walk park", "pottery class clay", "train ticket Leeds", "knee physio run", "pasta dinner wine",
          "deadline report boss", "garden tomato seeds", "wedding dress cousin", "chess club tournament",
          "flight hotel Porto", "piano lesson scales", "bike puncture repair"]
WORDS = "morning evening friend again maybe really quite little later today yesterday soon".split()


def config(server, exact_max: int) -> str:
    return provider_config_toml(server) + embeddings_config_toml(server, dimensions=32, exact_max_vectors=exact_max)


@pytest.fixture
def large(home, fake_provider):
    """Embeddings on, and any scope past 40 vectors searched through the index."""
    semantic.clear()
    with use_config(config(fake_provider, 40)):
        yield fake_provider
    semantic.clear()


def said(text, owner="default", conversation="telegram:5"):
    return message_append(agent_id="main", conversation=conversation, role="user", content=text, trust="operator",
                          owner_id=owner)


def history(n=120):
    """n messages over three owners, each a topic and two other words."""
    rng = np.random.default_rng(3)
    owners = ["default", "bo", "cy"]
    return [said(f"{TOPICS[i % len(TOPICS)]} {' '.join(rng.choice(WORDS, 2))} number{i}", owner=owners[i % 3],
                 conversation=f"telegram:{owners[i % 3]}") for i in range(n)]


def recall(query, scope="all", mode="semantic", source="history", limit=10):
    ctx = ToolContext(agent_id="main", owner_id="default", trust="operator",
                      conversation=ConversationKey.parse("telegram:default"))
    return run_tool("memory_recall", ctx, {"query": query, "scope": scope, "mode": mode, "source": source,
                                           "limit": limit})


def ids(answer):
    return [d["id"] for d in answer.data]


def index_file(kind="message") -> Path:
    return ann.index_path(embeddings.embedder().model_id, kind, "main")


def indexed_keys(kind="message") -> set[int]:
    return {int(k) for k in Index.restore(str(index_file(kind)), view=True).keys}


QUERIES = [*TOPICS, "a walk with the dog", "clay and a kiln", "physio for my knee", "tickets for the train",
           "tomato seeds in the garden", "report for my boss"]


def cosines(query, centred=True, **scope) -> dict[int, float]:
    """Every stored message vector's score for the query in `scope` (columns of `embeddings`), computed here
    with numpy: its cosine, less CENTRING times its cosine with the scope's mean vector when `centred`."""
    model = embeddings.embedder()
    rows = list(Embedding.objects.filter(kind="message", **scope).values_list("object_id", "vector"))
    matrix = embeddings.matrix((r[1] for r in rows), model.dimensions)
    vector = model.embed_query(query) - (semantic.CENTRING * matrix.mean(axis=0) if centred else 0)
    return {object_id: float(score) for (object_id, _), score in zip(rows, matrix @ vector, strict=True)}


def nearest(query, limit=10, **filters):
    model = embeddings.embedder()
    return semantic.neighbours("message", model, query, {"agent_id": "main", **filters}, limit).hits


def recall_of_exact(query, k=10) -> float:
    """The share of the nearest k rows of the whole agent that semantic search finds for the query that are
    among the exact k nearest (ties at the k-th score count as among them)."""
    exact = cosines(query)
    kth = sorted(exact.values(), reverse=True)[k - 1]
    found = [hit.id for hit in nearest(query, limit=k)]
    assert len(found) == k
    return sum(exact[i] >= kth - 1e-3 for i in found) / k


def test_a_large_scope_is_searched_through_the_index_and_finds_what_exact_search_finds(large):
    history()
    embed_pending()
    with use_config(config(large, 100_000)):  # exact search over the same vectors
        exact = {q: recall(q, limit=20) for q in QUERIES}
        assert all(a.meta["degraded"] is None for a in exact.values())
        assert all(recall_of_exact(q) == 1.0 for q in QUERIES)
    assert not index_file().exists()
    assert vector_index_task() == {"main:message": "built"}
    assert index_file().exists() and str(index_file()).startswith(str(ann.conf.home))
    found = {q: recall(q, limit=20) for q in QUERIES}
    assert all(a.meta == {"mode": "semantic", "degraded": None, "time": []} for a in found.values())
    assert np.mean([recall_of_exact(q) for q in QUERIES]) >= 0.95
    assert min(recall_of_exact(q) for q in QUERIES) >= 0.8


def test_filters_apply_exactly_to_the_index_candidates(large):
    rows = history()
    embed_pending()
    vector_index_task()
    owner = recall("beagle walk park", scope="owner")
    assert owner.meta["degraded"] is None and owner.data
    mine = {r.id for r in rows if r.owner_id == "default"}
    assert set(ids(owner)) <= mine
    current = recall("pottery class clay", scope="current")
    assert current.data and all(d["conversation"] == "telegram:default:root" for d in current.data)


def test_without_an_index_on_this_node_recall_says_it_is_being_built_and_asks_for_it(large):
    history(60)
    embed_pending()
    queued = OrmQ.objects.count()
    answer = recall("beagle walk park", mode="hybrid")
    assert answer.meta == {"mode": "lexical", "degraded": "vector_index_building", "time": []}
    assert answer.data  # lexical recall still answers
    assert OrmQ.objects.count() == queued + 1
    vector_index_task("main")
    assert recall("beagle walk park", mode="hybrid").meta["mode"] == "hybrid"


@pytest.mark.django_db(transaction=True)
def test_a_node_that_lacks_an_index_builds_it_at_its_next_heartbeat(large, monkeypatch):
    """The task a search queues runs on whichever node's cluster takes it; the node that lacks the index
    builds its own at its next heartbeat."""
    monkeypatch.setattr(upkeep, "AFTER_REMOVAL_S", 0.0)

    def beat():
        node.beat()
        upkeep.join()

    beat()  # the node's first pass: no scope needs an index yet
    history(60)
    embed_pending()
    beat()  # nothing asked for since: no pass
    assert not index_file().exists()
    assert recall("chess club tournament").meta["degraded"] == "vector_index_building"  # asks for one
    beat()
    assert index_file().exists() and recall("chess club tournament").meta["degraded"] is None


def test_a_process_asks_for_an_index_once_a_minute_and_a_new_process_asks_again(large):
    history(60)
    embed_pending()
    queued = OrmQ.objects.count()
    for _ in range(3):
        assert recall("beagle walk park", mode="hybrid").meta["degraded"] == "vector_index_building"
    assert OrmQ.objects.count() == queued + 1
    semantic.clear()  # what a new process holds (as each test starts)
    recall("beagle walk park", mode="hybrid")
    assert OrmQ.objects.count() == queued + 2


def test_a_small_scope_stays_exact_and_builds_no_index(large):
    history(30)
    embed_pending()
    assert recall("beagle walk park").meta["degraded"] is None
    assert vector_index_task() == {} and not index_file().exists()


def test_vectors_stored_after_the_build_are_found_and_folded_in(large, monkeypatch):
    history(60)
    embed_pending()
    vector_index_task()
    late = said("harpsichord recital tonight", owner="bo", conversation="telegram:bo")
    embed_pending()
    assert ids(recall("harpsichord recital"))[0] == late.id  # searched exactly beside the index
    assert vector_index_task() == {"main:message": "current"}
    monkeypatch.setattr(ann, "FOLD_EVERY", 1)
    assert vector_index_task() == {"main:message": "extended"}
    assert late.id in {e.object_id for e in Embedding.objects.filter(pk__in=indexed_keys())}
    assert ids(recall("harpsichord recital"))[0] == late.id


@pytest.mark.skipif(connection.vendor != "sqlite", reason="SQLite's query plan (PostgreSQL plans by statistics)")
def test_the_vectors_stored_after_the_build_are_sought_by_id_in_the_agents_index(large):
    history(60)
    embed_pending()
    vector_index_task()
    fact("pet", "has a beagle", "identity")  # another kind's vector after the index: not read for this one
    late = said("harpsichord recital tonight", owner="bo", conversation="telegram:bo")
    embed_pending()
    semantic.clear()
    with CaptureQueriesContext(connection) as queries:
        assert ids(recall("harpsichord recital"))[0] == late.id
    reads = [q["sql"] for q in queries.captured_queries if '"embeddings"."vector"' in q["sql"]
             and '"embeddings"."id" >' in q["sql"]]
    assert len(reads) == 1 and '"embeddings"."conversation"' not in reads[0]
    with connection.cursor() as cursor:  # not the agent's every vector, nor every vector stored after the index
        cursor.execute("EXPLAIN QUERY PLAN " + reads[0])
        plan = " ".join(str(row[-1]) for row in cursor.fetchall())
    assert "embeddings_agent_idx (model_id=? AND kind=? AND agent_id=? AND id>?)" in plan, plan


def test_erased_rows_are_never_returned_and_leave_the_file_with_the_next_pass(
        large, django_capture_on_commit_callbacks):
    history()
    embed_pending()
    vector_index_task()
    bo_keys = set(Embedding.objects.filter(owner_id="bo").values_list("pk", flat=True))
    assert bo_keys <= indexed_keys()
    before = {q: recall(q) for q in QUERIES}
    queued = OrmQ.objects.count()
    with django_capture_on_commit_callbacks(execute=True):
        memory_forget_owner(owner_id="bo")
    assert OrmQ.objects.count() == queued + 1  # erasure asks for the rebuild at once
    assert any(d["conversation"] == "telegram:bo:root" for d in before["pottery class clay"].data)
    for q in QUERIES:  # the file still holds bo's vectors: every candidate is checked in the database
        answer = recall(q)
        assert answer.meta["degraded"] is None
        assert all(d["conversation"] != "telegram:bo:root" for d in answer.data)
    assert vector_index_task() == {"main:message": "built"}
    assert not bo_keys & indexed_keys()
    assert indexed_keys() == set(Embedding.objects.filter(kind="message").values_list("pk", flat=True))


def vectors_read(asked) -> list[str]:
    return [q["sql"] for q in asked.captured_queries if '"embeddings"."vector"' in q["sql"]]


def no_room(server) -> str:
    """The configuration with more space kept free than the disk has: no cache fits."""
    return config(server, 40) + keeping_more_free_than(ann.conf.home)


def test_an_index_that_does_not_fit_above_the_space_kept_free_is_not_written(large, caplog):
    history(60)
    embed_pending()
    with use_config(no_room(large)):
        with CaptureQueriesContext(connection) as asked:
            assert vector_index_task() == {"main:message": "no_room"}
        assert not vectors_read(asked)  # known before building it, not after: nothing built to be dropped
        assert "vector index of main's message vectors not written" in caplog.text
        assert not list(index_file().parent.glob("*.usearch*"))  # no index, meta or part of one
        answer = recall("beagle walk park", mode="hybrid")
        assert answer.meta["degraded"] == "vector_index_building" and answer.data  # lexical, and says so
    assert vector_index_task() == {"main:message": "built"}  # room again
    assert recall("beagle walk park", mode="hybrid").meta["mode"] == "hybrid"


def test_an_index_holding_erased_vectors_is_deleted_when_its_rebuild_does_not_fit(large):
    history(90)  # 60 left after the erasure: still past 40
    embed_pending()
    vector_index_task()
    memory_forget_owner(owner_id="bo")
    with use_config(no_room(large)):
        assert vector_index_task() == {"main:message": "no_room"}
        assert not list(index_file().parent.glob("*.usearch*"))  # bo's vectors left the disk all the same
        assert recall("beagle walk park", mode="hybrid").meta["degraded"] == "vector_index_building"


def test_an_index_that_still_serves_is_kept_when_the_vectors_since_do_not_fit(large, monkeypatch):
    monkeypatch.setattr(ann, "FOLD_EVERY", 5)
    history(60)
    embed_pending()
    vector_index_task()
    held = indexed_keys()
    for i in range(6):
        said(f"{TOPICS[i]} later{i}")
    embed_pending()
    with use_config(no_room(large)):
        with CaptureQueriesContext(connection) as asked:
            assert vector_index_task() == {"main:message": "no_room"}
        assert not vectors_read(asked)
        assert indexed_keys() == held  # the file is as it was, and searched with the new vectors beside it
        assert recall("beagle walk park later0").meta["degraded"] is None
    assert vector_index_task() == {"main:message": "extended"}


def test_archived_memory_rows_are_never_returned(large):
    rows = [fact(f"fact_{i}", f"{TOPICS[i % len(TOPICS)]} detail {i}", "preference") for i in range(50)]
    embed_pending()
    assert vector_index_task() == {"main:memory": "built"}
    target = rows[1]  # pottery class clay
    assert target.id in ids(recall("pottery class clay", scope="owner", source="memories"))
    memory_archive(memory_id=target.id, archived_by="operator")
    answer = recall("pottery class clay", scope="owner", source="memories")
    assert answer.meta["degraded"] is None and target.id not in ids(answer)
    assert vector_index_task() == {"main:memory": "built"}  # a vector it held is gone: built anew


def test_a_removed_index_file_is_built_again(large):
    history(60)
    embed_pending()
    vector_index_task()
    expected = ids(recall("chess club tournament"))
    os.unlink(index_file())
    assert recall("chess club tournament").meta["degraded"] == "vector_index_building"
    assert vector_index_task() == {"main:message": "built"}
    assert ids(recall("chess club tournament")) == expected


@pytest.mark.parametrize("damage", ["overwritten", "cut short"])
def test_a_damaged_index_file_is_not_read_and_is_built_again(large, damage):
    history(60)
    embed_pending()
    vector_index_task()
    expected = ids(recall("chess club tournament"))
    semantic.clear()  # a process that has not mapped the file yet
    path = index_file()
    data = bytearray(path.read_bytes())
    if damage == "overwritten":
        data[len(data) // 2:len(data) // 2 + 64] = os.urandom(64)
    else:
        data = data[:len(data) // 2]
    path.write_bytes(bytes(data))
    assert recall("chess club tournament").meta["degraded"] == "vector_index_building"
    assert vector_index_task() == {"main:message": "built"}
    assert ids(recall("chess club tournament")) == expected


def bytes_read() -> int:
    """What this process has read through read() calls so far (a mapped file's pages are not counted)."""
    return int(dict(line.split(": ") for line in Path("/proc/self/io").read_text().splitlines())["rchar"])


def test_an_index_file_is_read_whole_to_check_it_only_when_it_is_not_the_file_built(large):
    history(60)
    embed_pending()
    vector_index_task()
    path = index_file()
    expected = ids(recall("chess club tournament"))

    def read_to_open() -> int:
        semantic.clear()  # a process that has not mapped the file yet
        before = bytes_read()
        assert ids(recall("chess club tournament")) == expected
        return bytes_read() - before

    as_built = read_to_open()

    def hashed() -> bool:
        """Whether a new process's first search read the file whole (to hash it) beside what it reads anyway."""
        more = read_to_open() - as_built
        assert more >= path.stat().st_size or abs(more) < path.stat().st_size // 2
        return more >= path.stat().st_size

    assert not hashed() and path.stat().st_size > 0
    os.utime(path)  # the same bytes, touched: not known to be the file built any more
    assert hashed() and hashed()  # checked whole again in each new process, until the schedule's pass...
    assert vector_index_task() == {"main:message": "current"}  # ...finds it whole and records it as it is now
    assert not hashed()
    path.write_bytes(path.read_bytes())  # the same bytes, written again (a restored copy): checked, recorded
    assert hashed() and vector_index_task() == {"main:message": "current"} and not hashed()


def test_the_command_builds_rebuilds_and_removes_indexes_no_scope_needs(large):
    history(60)
    embed_pending()
    out = io.StringIO()
    call_command("vector_index_rebuild", "--threads", "1", stdout=out)
    assert "1 scope(s) past 40 vectors" in out.getvalue() and "main message: built (60 vectors)" in out.getvalue()
    out = io.StringIO()
    call_command("vector_index_rebuild", "--rebuild", stdout=out)
    assert "main message: built" in out.getvalue()
    with use_config(config(large, 100_000)):
        out = io.StringIO()
        call_command("vector_index_rebuild", stdout=out)
        assert "main message: removed" in out.getvalue() and not index_file().exists()


def test_doctor_reports_a_large_scope_without_an_index(large):
    history(60)
    embed_pending()
    check = check_embeddings()
    assert check.status == "warning" and "no vector index on this node for main message" in check.message
    assert "run `python manage.py vector_index_rebuild`" in check.message
    with use_config(no_room(large)):
        assert vector_index_task() == {"main:message": "no_room"}
        check = check_embeddings()
        assert check.status == "warning" and "no vector index on this node for main message" in check.message
        assert "they do not fit on this disk above [fermix_core.storage] min_free_mb" in check.message
    vector_index_task()
    check = check_embeddings()
    assert check.status == "ok" and "1 vector index(es)" in check.message
    assert check.details["vector_indexes"][0]["vectors"] == 60


def test_nothing_is_written_outside_fermix_home(large, tmp_path, monkeypatch):
    outside = tmp_path / "outside"
    outside.mkdir()
    monkeypatch.setenv("HOME", str(outside))
    monkeypatch.setenv("TMPDIR", str(outside))
    monkeypatch.chdir(outside)
    history(60)
    embed_pending()
    vector_index_task()
    recall("beagle walk park")
    vector_index_task()
    assert list(outside.iterdir()) == []
    cache = ann.conf.home / "cache" / "vectors" / "main"
    assert sorted(p.suffix for p in cache.iterdir()) == [".json", ".lock", ".usearch"]
    assert (index_file().stat().st_mode & 0o777) == 0o600



def test_exact_max_vectors_is_read_and_checked(tmp_path):
    (tmp_path / "config.toml").write_text("[fermix_core.embeddings]\nexact_max_vectors = 5000\n", encoding="utf-8")
    assert conf_module.load({"FERMIX_HOME": str(tmp_path)}).embeddings.exact_max_vectors == 5000
    assert conf_module.load({"FERMIX_HOME": str(tmp_path), "FERMIX_EMBEDDINGS_EXACT_MAX_VECTORS": "200"}
                            ).embeddings.exact_max_vectors == 200
    (tmp_path / "config.toml").write_text("[fermix_core.embeddings]\nexact_max_vectors = 5\n", encoding="utf-8")
    with pytest.raises(ConfigError, match="exact_max_vectors must be from 10 to 10000000"):
        conf_module.load({"FERMIX_HOME": str(tmp_path)})


def test_without_usearch_a_large_scope_is_lexical_and_says_why_and_small_ones_stay_exact(large, monkeypatch):
    history(60)
    embed_pending()
    with use_config(config(large, 100_000)):
        with_usearch = recall("beagle walk park", limit=20)
    monkeypatch.setattr(ann, "Index", None)  # as if the package were not installed
    answer = recall("beagle walk park", mode="hybrid")
    assert answer.meta == {"mode": "lexical", "degraded": "vector_index_unavailable", "time": []} and answer.data
    with use_config(config(large, 100_000)):  # exact search needs no usearch: numpy scores the same
        assert ids(recall("beagle walk park", limit=20)) == ids(with_usearch)



def test_a_search_over_several_conversations_is_centred_on_their_mean_and_one_conversation_is_not(large):
    history(60)
    for i in range(30):  # a word most messages share: the mean leans towards it
        said(f"today today today note{i}", owner=["default", "bo", "cy"][i % 3],
             conversation=f"telegram:{['default', 'bo', 'cy'][i % 3]}")
    embed_pending()
    conversation = {"channel": "telegram", "chat_id": "default", "thread_scope": "root"}
    with use_config(config(large, 100_000)):  # exact search
        for query in ("today pottery class", "beagle walk today", "knee physio run"):
            for filters, scope, centred in (({}, {}, True), ({"owner_id": "bo"}, {"owner_id": "bo"}, True),
                                            (conversation, {"conversation": "telegram:default:root"}, False)):
                expected = cosines(query, centred, agent_id="main", **scope)
                hits = nearest(query, **filters)
                assert [h.score for h in hits] == pytest.approx(sorted(expected.values(), reverse=True)[:10], abs=2e-3)
                assert all(h.score == pytest.approx(expected[h.id], abs=2e-3) for h in hits)
        # The centring moves the answer: without it, the mean's word would lead.
        assert cosines("today pottery class", True, agent_id="main") != cosines("today pottery class", False,
                                                                             agent_id="main")
        plain = sorted((s, i) for i, s in cosines("today pottery class", False, agent_id="main").items())[-10:]
        assert [h.id for h in nearest("today pottery class")] != [i for _, i in reversed(plain)]


def test_the_index_keeps_the_sum_of_its_vectors_and_one_built_without_it_is_built_again(large, monkeypatch):
    history(60)
    embed_pending()
    vector_index_task()
    model = embeddings.embedder()

    def stored_sum():
        rows = Embedding.objects.filter(kind="message", agent_id="main").values_list("vector", flat=True)
        return embeddings.matrix(rows, model.dimensions).sum(axis=0)

    assert ann.read_meta(index_file()).total == pytest.approx(stored_sum().tolist(), abs=1e-3)
    said("harpsichord recital tonight", owner="bo", conversation="telegram:bo")
    embed_pending()
    monkeypatch.setattr(ann, "FOLD_EVERY", 1)
    assert vector_index_task() == {"main:message": "extended"}
    assert ann.read_meta(index_file()).total == pytest.approx(stored_sum().tolist(), abs=1e-3)
    meta_file = index_file().with_suffix(".json")
    older = {k: v for k, v in json.loads(meta_file.read_text()).items() if k != "total"}
    meta_file.write_text(json.dumps(older))  # an index built before the sum was kept
    assert ann.read_meta(index_file()).total is None
    assert recall("harpsichord recital").meta["degraded"] is None  # searched meanwhile, uncentred
    assert vector_index_task() == {"main:message": "built"}
    assert ann.read_meta(index_file()).total == pytest.approx(stored_sum().tolist(), abs=1e-3)
