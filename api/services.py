"""API keys: created once (the key is shown once; only its hash is stored) and revoked by name."""

from __future__ import annotations

from django.db import IntegrityError, transaction
from django.utils import timezone

from api.models import ApiKey
from fermix_site.conf import valid_id


class ApiKeyError(ValueError):
    """A refused key operation; `code` names the problem."""

    def __init__(self, code: str, message: str):
        super().__init__(message)
        self.code = code


def apikey_create(*, name: str, role: str, agents: list[str] | tuple[str, ...] = (),
                  may_assert_operator: bool = False) -> tuple[ApiKey, str]:
    """Create a key; returns (row, the full key). The key is not stored and cannot be shown again.

    `may_assert_operator`: a channel key whose requests may say `"trust": "operator"` (a bot that knows
    when the owner speaks); an operator key always may, so the flag is refused for one."""
    name = (name or "").strip()
    if not name or len(name) > 100:
        raise ApiKeyError("invalid_name", "the key name must be 1-100 characters")
    if role not in ApiKey.Role.values:
        raise ApiKeyError("invalid_role", f"role must be one of {', '.join(ApiKey.Role.values)}, got {role!r}")
    if may_assert_operator and role != ApiKey.Role.CHANNEL:
        raise ApiKeyError("invalid_flag", "only a channel key is created to assert operator trust; an "
                                          "operator key always may")
    bad = [agent for agent in agents if not valid_id(agent)]
    if bad:
        raise ApiKeyError("invalid_agent", f"agent id {bad[0]!r} is invalid: use 1-64 of A-Z a-z 0-9 _ . -")
    prefix, key = ApiKey.generate()
    try:
        with transaction.atomic():
            row = ApiKey.objects.create(name=name, prefix=prefix, key_hash=ApiKey.hash(key), role=role,
                                        agents=sorted(set(agents)), may_assert_operator=may_assert_operator)
    except IntegrityError:
        if ApiKey.objects.filter(name=name).exists():
            raise ApiKeyError("name_taken", f"an API key named {name!r} already exists; pick another name "
                                            "or revoke it first") from None
        raise
    return row, key


def apikey_revoke(*, name: str) -> ApiKey:
    """Revoke a key by name; it stops working at once. Revoking twice is refused."""
    row = ApiKey.objects.filter(name=name).first()
    if row is None:
        raise ApiKeyError("not_found", f"no API key named {name!r}")
    if row.revoked_at is not None:
        raise ApiKeyError("already_revoked",
                          f"the API key {name!r} was already revoked at {row.revoked_at:%Y-%m-%d %H:%M} UTC")
    row.revoked_at = timezone.now()
    row.save(update_fields=["revoked_at"])
    return row
