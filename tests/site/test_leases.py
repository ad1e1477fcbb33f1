"""Leases: one holder at a time; a dead holder's lease frees itself; only the holder renews or frees it."""

from datetime import timedelta

import pytest
from django.utils import timezone

from fermix_site import leases
from fermix_site.models import Lease

pytestmark = pytest.mark.django_db
TTL = timedelta(minutes=1)


def test_one_holder_at_a_time_until_it_releases():
    first = leases.acquire("work", TTL)
    assert first and leases.acquire("work", TTL) is None
    assert leases.acquire("other work", TTL)  # leases are by name
    leases.release("work", first)
    second = leases.acquire("work", TTL)
    assert second and second != first


def test_an_expired_lease_is_taken_and_its_old_holder_can_neither_renew_nor_free_it():
    old = leases.acquire("work", TTL)
    Lease.objects.filter(name="work").update(expires_at=timezone.now() - timedelta(seconds=1))
    new = leases.acquire("work", TTL)
    assert new and not leases.renew("work", old, TTL)
    leases.release("work", old)
    assert Lease.objects.get(name="work").holder == new and leases.acquire("work", TTL) is None


def test_renewing_extends_the_lease():
    token = leases.acquire("work", timedelta(seconds=5))
    assert leases.renew("work", token, timedelta(hours=1))
    assert Lease.objects.get(name="work").expires_at > timezone.now() + timedelta(minutes=59)


def test_held_frees_the_lease_on_the_way_out_even_after_an_error():
    with pytest.raises(RuntimeError), leases.held("work", TTL) as token:
        assert token and leases.acquire("work", TTL) is None
        raise RuntimeError
    with leases.held("work", TTL) as again:
        assert again is not None
