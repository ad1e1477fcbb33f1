from django.apps import AppConfig
from django.db.models.signals import post_migrate

# The schedules Fermix defines in code: name -> (task, django-q2 Schedule type, minutes for MINUTES).
SCHEDULES = {
    "fermix-heartbeat": ("fermix_site.tasks.heartbeat", "MINUTES", 1),
    "fermix-prompt-files-rebuild": ("memory.tasks.rebuild_prompt_files_all", "HOURLY", None),
    "fermix-search-index-optimize": ("memory.tasks.optimize_search_index", "DAILY", None),
    "fermix-idempotency-prune": ("api.tasks.idempotency_records_prune", "HOURLY", None),
    "fermix-embeddings": ("memory.tasks.embed_pending_task", "MINUTES", 1),
    "fermix-vector-index": ("memory.tasks.vector_index_task", "MINUTES", 5),
}


def ensure_schedules(sender, using="default", **kwargs):
    """The schedules Fermix defines in code, created or corrected after every migrate."""
    from django_q.models import Schedule

    for name, (func, schedule_type, minutes) in SCHEDULES.items():
        Schedule.objects.using(using).update_or_create(name=name, defaults={
            "func": func, "schedule_type": getattr(Schedule, schedule_type), "minutes": minutes, "repeats": -1})


class FermixSiteConfig(AppConfig):
    name = "fermix_site"
    verbose_name = "Fermix"

    def ready(self):
        from django_q.signals import post_spawn

        from fermix_site import cluster, node
        from fermix_site.enqueue import enqueue_deferred
        from fermix_site.health import worker_spawned

        post_migrate.connect(ensure_schedules, sender=self)
        post_spawn.connect(worker_spawned, dispatch_uid="fermix-heartbeat-on-spawn")
        post_spawn.connect(node.start, dispatch_uid="fermix-node-heartbeat")
        node.on_beat(enqueue_deferred)
        cluster.install()
