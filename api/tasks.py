"""django-q2 tasks of the API. Thin: they call a service."""

from api import idempotency


def idempotency_records_prune():
    """Hourly: Idempotency-Key records older than 24 h no longer count, so they are deleted."""
    return idempotency.records_prune()
