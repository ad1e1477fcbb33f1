"""Each node keeps its own vector caches: two worker nodes (`manage.py qcluster`, as deploy/fermix-worker.service
starts it), each with its own FERMIX_HOME, PostgreSQL and a Redis server of the test's own shared. Each
builds its own approximate index of the agent's vectors, and after an erasure each drops the erased vectors
from its own index, though the pass the erasure queues runs on one node only. Vectors from the `openai`
backend on the loopback fake provider; `exact_max_vectors` lowered so a few dozen messages need an index.
"""

import json

import pytest
from django.conf import settings

from fermix_site.conf import conf
from memory import embeddings
from memory.conversations import message_append
from memory.search import ann
from memory.vectors import embed_pending
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


def index_count(node: Node, model_id: str) -> int | None:
    """How many vectors the node's index of `main`'s messages holds, from its meta (None: no index yet)."""
    index = node.home / ann.index_path(model_id, "message", "main").relative_to(conf.home)
    meta = index.with_suffix(".json")
    return json.loads(meta.read_text())["count"] if meta.exists() and index.exists() else None


def test_each_node_builds_its_own_index_and_drops_erased_vectors_from_it(home, fake_provider, tmp_path):
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
            for node in nodes:
                wait_for(f"node {node.name}'s index", lambda n=node: index_count(n, model_id) == 30, timeout=SOON)
            erased = run_manage("memory_forget_owner", "bo", "--yes", env=nodes[0].env)  # queues one pass,
            assert erased.returncode == 0, erased.stderr  # which one node's cluster takes
            for node in nodes:
                wait_for(f"node {node.name}'s index without bo's vectors",
                         lambda n=node: index_count(n, model_id) == 15, timeout=SOON)
        finally:
            stop_all(nodes, redis)
