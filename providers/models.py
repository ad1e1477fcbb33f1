"""One row per model call attempt, so an operator can see what every agent asked of which provider."""

from django.db import models
from django.utils import timezone


class ModelCall(models.Model):
    class Outcome(models.TextChoices):
        OK = "ok"
        FAILED = "failed"
        # The attempt failed and the chain went on (to the next provider, or to a retry).
        FALLBACK = "fallback"

    call_id = models.CharField(max_length=32, help_text="Shared by every attempt of one chat() call.")
    agent_id = models.CharField(max_length=64)
    agent_tag = models.CharField(max_length=64, help_text="memory_reviewer, compactor, soul_curation, turn, job…")
    conversation_key = models.CharField(max_length=255, blank=True, default="")
    provider = models.CharField(max_length=64)
    kind = models.CharField(max_length=16)
    model = models.CharField(max_length=200)
    attempt = models.PositiveSmallIntegerField(default=0, help_text="0 is the first attempt of the call.")
    prompt_tokens = models.IntegerField(default=0)
    completion_tokens = models.IntegerField(default=0)
    latency_ms = models.IntegerField(default=0)
    outcome = models.CharField(max_length=16, choices=Outcome.choices)
    http_status = models.PositiveSmallIntegerField(null=True, blank=True)
    error = models.TextField(blank=True, default="")
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        db_table = "model_calls"
        indexes = [
            models.Index(fields=["created_at"], name="model_calls_created"),
            models.Index(fields=["agent_tag", "created_at"], name="model_calls_tag_created"),
            models.Index(fields=["agent_id", "created_at"], name="model_calls_agent_created"),
        ]

    def __str__(self):
        return f"{self.agent_tag} → {self.provider}/{self.model} ({self.outcome})"
