import logging

from django.apps import AppConfig
from django.db import connections
from django.db.models.signals import post_migrate

from memory import fts


def repair_search_mirrors(sender, using="default", **kwargs):
    """After every migrate: a table rebuild may have dropped FTS triggers; put them back."""
    repaired = fts.repair(connections[using])
    if repaired:
        logging.getLogger("fermix.memory").warning("re-created FTS triggers after migrate: %s", repaired)


class MemoryConfig(AppConfig):
    name = "memory"
    verbose_name = "Memory"

    def ready(self):
        from fermix_site import node, serving
        from memory import checks, embeddings  # noqa: F401 - checks registers the system checks (after the models)
        from memory.search import upkeep

        post_migrate.connect(repair_search_mirrors, sender=self)
        node.on_beat(upkeep.beat)  # each node keeps its own vector caches
        # A web worker loads the embedding model as it starts, so its first recall query does not wait.
        serving.web_worker_started.connect(embeddings.load_ahead, dispatch_uid="fermix-embedding-model-ahead")
