"""Each node keeps its own vector caches: two worker nodes (`manage.py qcluster`, as deploy/fermix-worker.service
starts it), each with its own FERMIX_HOME, PostgreSQL and a Redis server of the test's own shared. Each
builds its own approximate index of the agent's vectors, and after an erasure each drops the erased vectors
from its own index, though the pass the erasure queues runs on one node only. The files of scopes' vectors
that a search of node A wrote (this test's process, searching as one of node A's processes would) lose the
erased vectors too, with no search on that node after the erasure. Vectors from the `openai` backend on
the loopback fake provider; `exact_max_vectors` lowered so a few dozen messages need an index, and
`FROM_VECTORS` so a conversation of a few messages has its file.
"""

import contextlib
import json

import pytest
from django.conf import settings

from fermix_site import generations
from fermix_site.conf import conf, load
from memory import embeddings
from memory.conversations import ConversationKey, message_append
from memory.search import ann, semantic, vector_files
from memory.tools import ToolContext, run_tool
from memory.vectors import embed_pending, vectors_generation
from tests import units
from tests.api.test_story import wait_for
from tests.conftest import process_env, run_manage
from tests.fakeprovider import embeddings_config_toml, provider_config_toml, unused_port, use_config
from tests.served.test_nodes import Node, Redis, env_file, stop_all

if "postgresql" not in settings.DATABASES["default"]["ENGINE"]:
    pytest.skip("several nodes share PostgreSQL: this test runs in the PostgreSQL pass of `make test`",
                allow_module_level=True)

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

HEARTBEAT_S = 1
SOON = 60 + HEARTBEAT_S * 10 + 60  # a pass at most once a minute after a removal; a bound for a broken run only
NOTES = 8  # messages in each owner's second conversation: searched exactly, its vectors in a file of the node


@contextlib.contextmanager
def as_process_of(node: Node, monkeypatch):
    """This test's process as one of `node`'s: its FERMIX_HOME and configuration, no scope's vectors held."""
    with monkeypatch.context() as patch:
        patch.setenv("FERMIX_HOME", str(node.home))
        with conf.use(load()):
            semantic.clear()
            yield
            semantic.clear()


def notes_scope(owner: str) -> dict:
    return {"agent_id": "main", "conversation": f"web:{owner}-notes:root"}


def notes_file(model_id: str, owner: str):
    return vector_files.path(model_id, "message", notes_scope(owner))


def index_count(node: Node, model_id: str) -> int | None:
    """How many vectors the node's index of `main`'s messages holds, from its meta (None: no index yet)."""
    index = node.home / ann.index_path(model_id, "message", "main").relative_to(conf.home)
    meta = index.with_suffix(".json")
    return json.loads(meta.read_text())["count"] if meta.exists() and index.exists() else None


def test_each_node_builds_its_own_index_and_drops_erased_vectors_from_its_caches(home, fake_provider, tmp_path,
                                                                                 monkeypatch):
    monkeypatch.setattr(vector_files, "FROM_VECTORS", NOTES)
    redis = Redis(tmp_path)
    redis.start()
    config = provider_config_toml(fake_provider) + embeddings_config_toml(fake_provider, dimensions=32,
                                                                          exact_max_vectors=10)
    nodes = []
    with use_config(config):
        for owner in ("ana", "bo"):
            for i in range(15):
                message_append(agent_id="main", conversation=f"telegram:{owner}", role="user", owner_id=owner,
                               content=f"{owner} said thing number {i} about the garden", trust="operator")
            for i in range(NOTES):
                message_append(agent_id="main", conversation=f"web:{owner}-notes", role="user", owner_id=owner,
                               content=f"{owner}'s note {i} on the allotment", trust="operator")
        embed_pending()
        model_id = embeddings.embedder().model_id
        shared = {**env_file(), **process_env(REDIS_URL=redis.url), "FERMIX_MIRRORS_INTERVAL_S": HEARTBEAT_S,
                  "FERMIX_WORKERS": 1}
        for name in ("a", "b"):
            node_home = tmp_path / f"node-{name}"
            node_home.mkdir()
            (node_home / "config.toml").write_text(config)
            env = {**shared, **units.unit_environment("fermix-worker.service"), "FERMIX_HOME": str(node_home),
                   "FERMIX_NODE_NAME": name, "FERMIX_PORT": str(unused_port())}
            nodes.append(Node(name, node_home, {k: str(v) for k, v in env.items()}, "fermix-worker.service"))
        done = run_manage("migrate", "--noinput", env=nodes[0].env)
        assert done.returncode == 0, done.stderr
        for node in nodes:
            node.start()
        try:
            # No search asked for an index and no task was queued: each node's heartbeat builds its own.
            everyone = 2 * (15 + NOTES)
            for node in nodes:
                wait_for(f"node {node.name}'s index", lambda n=node: index_count(n, model_id) == everyone,
                         timeout=SOON)
            with as_process_of(nodes[0], monkeypatch):  # a search on node A writes each notes scope's file
                for owner in ("ana", "bo"):
                    ctx = ToolContext(agent_id="main", owner_id=owner, trust="operator",
                                      conversation=ConversationKey.parse(f"web:{owner}-notes"))
                    answer = run_tool("memory_recall", ctx, {"query": "the allotment", "scope": "current",
                                                             "source": "history", "mode": "semantic"})
                    assert answer.meta["mode"] == "semantic" and len(answer.data) == NOTES
                    semantic.wait_for_files()
                    assert notes_file(model_id, owner).exists()
            erased = run_manage("memory_forget_owner", "bo", "--yes", env=nodes[0].env)  # queues one pass,
            assert erased.returncode == 0, erased.stderr  # which one node's cluster takes
            for node in nodes:
                wait_for(f"node {node.name}'s index without bo's vectors",
                         lambda n=node: index_count(n, model_id) == everyone // 2, timeout=SOON)
            with as_process_of(nodes[0], monkeypatch):  # no search since: node A's own pass did this
                generation = generations.current([vectors_generation("main", "message")])
                wait_for("node A's file of bo's notes gone", lambda: not notes_file(model_id, "bo").exists(),
                         timeout=SOON)
                kept = vector_files.read(model_id, "message", notes_scope("ana"), generation, 32)
                assert kept is not None and not kept.stale and len(kept.ids) == NOTES  # brought current
        finally:
            stop_all(nodes, redis)
