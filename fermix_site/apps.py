from django.apps import AppConfig
from django.db.models.signals import post_migrate


def ensure_schedules(sender, using="default", **kwargs):
    """The schedules Fermix defines in code, created or corrected after every migrate."""
    from django_q.models import Schedule

    Schedule.objects.using(using).update_or_create(
        name="fermix-heartbeat",
        defaults={
            "func": "fermix_site.tasks.heartbeat",
            "schedule_type": Schedule.MINUTES,
            "minutes": 1,
            "repeats": -1,
        },
    )
    Schedule.objects.using(using).update_or_create(
        name="fermix-prompt-files-rebuild",
        defaults={
            "func": "memory.tasks.rebuild_prompt_files_all",
            "schedule_type": Schedule.HOURLY,
            "repeats": -1,
        },
    )
    Schedule.objects.using(using).update_or_create(
        name="fermix-search-index-optimize",
        defaults={
            "func": "memory.tasks.optimize_search_index",
            "schedule_type": Schedule.DAILY,
            "repeats": -1,
        },
    )


def worker_spawned(sender, proc_name=None, **kwargs):
    from fermix_site import health

    try:
        health.beat(proc=proc_name)
    except Exception:  # noqa: BLE001 - a heartbeat must never stop a worker from starting
        pass


class FermixSiteConfig(AppConfig):
    name = "fermix_site"
    verbose_name = "Fermix"

    def ready(self):
        from django_q.signals import post_spawn

        post_migrate.connect(ensure_schedules, sender=self)
        post_spawn.connect(worker_spawned, dispatch_uid="fermix-heartbeat-on-spawn")
