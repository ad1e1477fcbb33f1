"""Infrastructure rows shared by every app: cache generations and worker heartbeats."""

from django.db import models


class Generation(models.Model):
    """A counter bumped in the same transaction as a write, so every process's cache can tell it is stale.

    A cached value is stored with the generation it was built from; a reader compares that number with
    this row (one primary-key lookup) before serving it. Works with a per-process cache as well as a
    shared one, which is why a second process's append, archive or compaction is seen at once.
    """

    name = models.CharField(max_length=300, primary_key=True)
    value = models.BigIntegerField(default=0)

    class Meta:
        db_table = "cache_generations"


class Heartbeat(models.Model):
    """The last time a process of a kind (the django-q2 cluster) was seen alive."""

    name = models.CharField(max_length=100, primary_key=True)
    seen_at = models.DateTimeField()
    detail = models.JSONField(default=dict)

    class Meta:
        db_table = "heartbeats"


class Lease(models.Model):
    """One holder at a time for work that every worker may be asked to do (`fermix_site.leases`)."""

    name = models.CharField(max_length=100, primary_key=True)
    holder = models.CharField(max_length=64)
    expires_at = models.DateTimeField()

    class Meta:
        db_table = "leases"


class DeferredTask(models.Model):
    """A task the broker refused (Redis stopped): queued again by the node heartbeat once it answers."""

    func = models.CharField(max_length=200)
    args = models.JSONField(default=list)
    options = models.JSONField(default=dict)  # django-q2's task_name, group …
    error = models.CharField(max_length=500, blank=True, default="")
    created_at = models.DateTimeField()

    class Meta:
        db_table = "deferred_tasks"
