"""Handing work to the task cluster without ever failing the request that asked for it.

Every background task is enqueued here. When the broker refuses (Redis stopped, a network fault), the
request's own work is already committed; the task is kept as a `DeferredTask` row in the database and
the node heartbeat (`fermix_site.node`) queues it again once the broker answers, oldest first, so a
review asked for while Redis was down runs when it is back.
"""

from __future__ import annotations

import logging

from django.db import DatabaseError, transaction
from django.utils import timezone
from django_q.tasks import async_task

from fermix_site.models import DeferredTask

log = logging.getLogger("fermix.tasks")


def enqueue(func: str, *args, keep: bool = True, **options) -> bool:
    """Queue `func(*args)` on the cluster now; False when the broker refused. A refused task is kept to
    be queued again, unless `keep` is False: work a schedule does anyway (embedding passes)."""
    try:
        async_task(func, *args, **options)
        return True
    except Exception as exc:  # noqa: BLE001 - any broker fault; the task is kept, never lost
        error = f"{type(exc).__name__}: {exc}"[:500]
        if not keep:
            log.warning("the task broker refused %s (%s); its schedule runs it later", func, error)
            return False
        log.warning("the task broker refused %s (%s); kept to be queued again", func, error)
        try:
            DeferredTask.objects.create(func=func, args=list(args), options=options, error=error,
                                        created_at=timezone.now())
        except DatabaseError:
            log.exception("could not keep the refused task %s", func)
        return False


def enqueue_after_commit(func: str, *args, keep: bool = True, **options) -> None:
    """`enqueue` once the current transaction commits (at once outside one)."""
    transaction.on_commit(lambda: enqueue(func, *args, keep=keep, **options))


def enqueue_deferred(limit: int = 500) -> int:
    """Queue the kept tasks again, oldest first, until the broker refuses; returns how many went."""
    sent = 0
    for task in DeferredTask.objects.order_by("id")[:limit]:
        try:
            async_task(task.func, *task.args, **task.options)
        except Exception as exc:  # noqa: BLE001 - still down: try again at the next beat
            log.info("the task broker still refuses tasks: %s", exc)
            break
        DeferredTask.objects.filter(pk=task.pk).delete()
        sent += 1
    if sent:
        log.info("queued %d task(s) the broker had refused", sent)
    return sent
