"""Versioned resources: prompt files and compaction checkpoints, with every revision kept."""

from django.db import models

GLOBAL_SCOPE = "global"


class ResourceType(models.TextChoices):
    IDENTITY_MD = "identity_md", "IDENTITY.md"
    FERMIX_MD = "fermix_md", "FERMIX.md"
    SOUL_MD = "soul_md", "SOUL.md"
    REALTIME_MD = "realtime_md", "REALTIME.md"
    USER_MD = "user_md", "USER.md"
    MEMORY_MD = "memory_md", "MEMORY.md"
    CHECKPOINT = "checkpoint", "checkpoint"


class MutationSource(models.TextChoices):
    SEED = "seed"
    IMPORTED = "imported"
    MANUAL_EDIT = "manual_edit"
    EXTRACTION_REBUILD = "extraction_rebuild"
    SCHEDULER_REBUILD = "scheduler_rebuild"
    COMPACTION = "compaction"
    SOUL_CURATION = "soul_curation"
    ROLLBACK = "rollback"


class Resource(models.Model):
    agent_id = models.CharField(max_length=64)
    resource_type = models.CharField(max_length=32, choices=ResourceType.choices)
    scope_id = models.CharField(max_length=600, default=GLOBAL_SCOPE)
    resource_path = models.CharField(max_length=1000, blank=True, default="")
    current_revision = models.IntegerField(default=0)  # a revision number, not a row id
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        db_table = "resources"
        constraints = [
            models.UniqueConstraint(fields=["agent_id", "resource_type", "scope_id"], name="resource_unique")
        ]

    def __str__(self):
        scope = "" if self.scope_id == GLOBAL_SCOPE else f" [{self.scope_id}]"
        return f"{self.agent_id}/{self.resource_type}{scope}"


class ResourceRevision(models.Model):
    agent_id = models.CharField(max_length=64)
    resource_type = models.CharField(max_length=32, choices=ResourceType.choices)
    scope_id = models.CharField(max_length=600, default=GLOBAL_SCOPE)
    revision = models.IntegerField()
    parent_revision = models.IntegerField(null=True, blank=True)
    content_hash = models.CharField(max_length=64)
    content = models.TextField()
    byte_size = models.IntegerField()
    mutation_source = models.CharField(max_length=32, choices=MutationSource.choices)
    provenance = models.JSONField(default=dict, blank=True, db_column="provenance_json")
    created_at = models.DateTimeField()
    # An erased owner's content is replaced by a tombstone; content_hash and byte_size keep the original's.
    redacted_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        db_table = "resource_revisions"
        constraints = [
            models.UniqueConstraint(
                fields=["agent_id", "resource_type", "scope_id", "revision"], name="resource_revision_unique"
            )
        ]

    def __str__(self):
        return f"{self.agent_id}/{self.resource_type} r{self.revision}"


class SoulProposal(models.Model):
    """A pending change to SOUL.md that the owner confirms (`apply TOKEN`) or refuses (`deny TOKEN`).

    `revert` and `reset` compute their content from a revision or the shipped template. `review` and
    `suggest` carry a model-written draft with its rationale (and the model's details in `metadata`),
    so drafting with a provider needs no schema change.
    """

    class Mode(models.TextChoices):
        REVIEW = "review"
        SUGGEST = "suggest"
        REVERT = "revert"
        RESET = "reset"

    class Status(models.TextChoices):
        PENDING = "pending"
        APPLIED = "applied"
        DENIED = "denied"
        EXPIRED = "expired"

    token = models.CharField(max_length=64, unique=True)
    agent_id = models.CharField(max_length=64)
    mode = models.CharField(max_length=16, choices=Mode.choices)
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.PENDING)
    instruction = models.TextField(blank=True, default="")
    base_hash = models.CharField(max_length=64, blank=True, default="")  # SOUL.md on disk; "" when absent
    base_revision = models.IntegerField(null=True, blank=True)
    target_revision = models.IntegerField(null=True, blank=True)  # revert: the revision to restore
    proposed_content = models.TextField()
    proposed_hash = models.CharField(max_length=64)
    diff = models.TextField(blank=True, default="")
    rationale = models.TextField(blank=True, default="")
    metadata = models.JSONField(default=dict, blank=True)  # e.g. the drafting model, its usage
    requested_by = models.CharField(max_length=200, blank=True, default="")
    applied_revision = models.IntegerField(null=True, blank=True)
    expires_at = models.DateTimeField()
    created_at = models.DateTimeField(auto_now_add=True)
    decided_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        db_table = "soul_proposals"
        indexes = [models.Index(fields=["agent_id", "created_at"], name="soul_proposal_agent")]

    def __str__(self):
        return f"{self.agent_id} soul {self.mode} ({self.status})"
