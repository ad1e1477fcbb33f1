"""Small builders for memory rows in tests, with explicit update times for deterministic order."""

from datetime import timedelta

from django.utils import timezone

from memory.models import Memory
from memory.rows import memory_upsert

BASE_TIME = timezone.now().replace(microsecond=0) - timedelta(days=1)


def fact(key, value, category, *, minute=0, owner="default", scope_type=None, scope_id=None, agent="main",
         actor_type="operator"):
    """Write a row through the service, then pin its update time to BASE_TIME + minute."""
    if scope_type is None:
        scope_type = "owner" if category in ("identity", "preference", "interest", "goal") else "agent"
    if scope_id is None:
        scope_id = {"owner": owner, "agent": agent}.get(scope_type, "telegram:1:root")
    row, _ = memory_upsert(agent_id=agent, owner_id=owner, scope_type=scope_type, scope_id=scope_id, key=key,
                           value=value, category=category, actor_type=actor_type)
    Memory.objects.filter(pk=row.pk).update(updated_at=BASE_TIME + timedelta(minutes=minute))
    row.refresh_from_db()
    return row
