"""API keys: shown once, stored as a SHA-256 hash, found by an indexed prefix, compared in constant time."""

import hashlib
import hmac
import secrets

from django.db import models

KEY_PREFIX = "fmx_"


class ApiKey(models.Model):
    class Role(models.TextChoices):
        OPERATOR = "operator"
        CHANNEL = "channel"

    name = models.CharField(max_length=100, unique=True)
    prefix = models.CharField(max_length=16, unique=True)
    key_hash = models.CharField(max_length=64)
    role = models.CharField(max_length=16, choices=Role.choices)
    agents = models.JSONField(default=list, blank=True)  # empty: every agent
    # A channel key speaks for a bot, so by default its requests are guests' whatever they say; a bot
    # that knows who the owner is (a DM with the owner's account) is created to vouch for them.
    may_assert_operator = models.BooleanField(default=False)
    created_at = models.DateTimeField(auto_now_add=True)
    revoked_at = models.DateTimeField(null=True, blank=True)
    last_used_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        db_table = "api_keys"
        verbose_name = "API key"

    def __str__(self):
        return f"{self.name} ({self.role})"

    @staticmethod
    def hash(key: str) -> str:
        return hashlib.sha256(key.encode()).hexdigest()

    @staticmethod
    def generate() -> tuple[str, str]:
        """Return (prefix, full key); the prefix is the first 12 characters of the key."""
        key = KEY_PREFIX + secrets.token_urlsafe(32)
        return key[:12], key

    def matches(self, key: str) -> bool:
        return hmac.compare_digest(self.key_hash, self.hash(key))

    def allows_agent(self, agent_id: str) -> bool:
        return not self.agents or agent_id in self.agents


class IdempotencyRecord(models.Model):
    """What one `Idempotency-Key` of one API key on one endpoint was answered, for 24 hours.

    A message append stores its record in the transaction of the message, done. A turn stores it
    `running` with its user message (a claim, `claimed_by` the attempt), and `done` with the answer in
    the transaction of the reply; a turn that failed after storing its message is `failed`, and a retry
    resumes it from that message.
    """

    class State(models.TextChoices):
        RUNNING = "running"
        FAILED = "failed"
        DONE = "done"

    api_key = models.ForeignKey(ApiKey, on_delete=models.CASCADE, related_name="+")
    # sha256 of endpoint and key: the unique index stays small whatever the conversation key holds.
    scope = models.CharField(max_length=64)
    endpoint = models.TextField()
    key = models.CharField(max_length=200)
    request_hash = models.CharField(max_length=64)
    state = models.CharField(max_length=16, choices=State.choices)
    status = models.PositiveSmallIntegerField(null=True, blank=True)
    response = models.JSONField(null=True, blank=True)
    message_id = models.BigIntegerField(null=True, blank=True)
    claimed_by = models.CharField(max_length=400, blank=True)  # host, boot id, pid, start time, attempt
    claimed_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(db_index=True)

    class Meta:
        db_table = "api_idempotency_records"
        constraints = [models.UniqueConstraint(fields=["api_key", "scope"], name="api_idempotency_key_scope")]

    def __str__(self):
        return f"{self.endpoint} {self.key!r} ({self.state})"
