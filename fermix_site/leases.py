"""Leases: one holder at a time, across processes and nodes, for work any worker may be asked to do.

A lease is a row of `leases` with its holder's token and an expiry. Taking it is one conditional UPDATE
(free or expired) or the INSERT of a new row; a holder that dies stops renewing it, so it frees itself
after `ttl`. Short transactions only: a lease is never held inside a transaction, it is a row saying who
works.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta

from django.db import IntegrityError, transaction
from django.db.models import Q
from django.utils import timezone

from fermix_site.models import Lease


def acquire(name: str, ttl: timedelta) -> str | None:
    """The new holder's token, or None when someone else holds `name` and it has not expired."""
    token, now = uuid.uuid4().hex, timezone.now()
    taken = Lease.objects.filter(Q(expires_at__lte=now) | Q(holder=""), name=name).update(
        holder=token, expires_at=now + ttl)
    if taken:
        return token
    try:
        with transaction.atomic():
            Lease.objects.create(name=name, holder=token, expires_at=now + ttl)
    except IntegrityError:
        return None  # held (or taken by someone else between the UPDATE and the INSERT)
    return token


def renew(name: str, token: str, ttl: timedelta) -> bool:
    """Extend the lease; False when it was lost (expired and taken by another holder)."""
    return bool(Lease.objects.filter(name=name, holder=token).update(expires_at=timezone.now() + ttl))


def release(name: str, token: str) -> None:
    Lease.objects.filter(name=name, holder=token).update(holder="", expires_at=timezone.now())


@contextmanager
def held(name: str, ttl: timedelta) -> Iterator[str | None]:
    """`with held(name, ttl) as token:` — the token, or None when another holder has it (do nothing)."""
    token = acquire(name, ttl)
    try:
        yield token
    finally:
        if token is not None:
            release(name, token)
