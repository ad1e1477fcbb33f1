"""The durable store: conversation messages, scoped memory rows and the reviewer's state.

Table and column names are the product documents' (`messages`, `memories`, `memory_sources`, …).
"""

from django.db import models
from django.db.models import Q

from memory import days


class Role(models.TextChoices):
    USER = "user"
    ASSISTANT = "assistant"
    SYSTEM = "system"
    TOOL = "tool"


class Trust(models.TextChoices):
    OPERATOR = "operator"
    GUEST = "guest"


APPROVAL_PENDING = "pending"


class ChatType(models.TextChoices):
    """Who is in the chat: the owner alone with the assistant, or other people too."""

    DIRECT = "direct"
    GROUP = "group"
    CHANNEL = "channel"


class Category(models.TextChoices):
    IDENTITY = "identity"
    PREFERENCE = "preference"
    INTEREST = "interest"
    GOAL = "goal"
    CONTEXT = "context"
    DIRECTIVE = "directive"


class ScopeType(models.TextChoices):
    OWNER = "owner"
    AGENT = "agent"
    CONVERSATION = "conversation"
    JOB = "job"


class PromoteTarget(models.TextChoices):
    USER_MD = "user_md"
    MEMORY_MD = "memory_md"
    NONE = "", "none"


def memories_generation(agent_id: str) -> str:
    """The generation every change to the agent's memory rows bumps (`fermix_site.generations`)."""
    return f"memories:{agent_id}"


class Conversation(models.Model):
    """One conversation window: where it starts now, its checkpoint and its last measured context."""

    agent_id = models.CharField(max_length=64)
    key = models.CharField(max_length=600)  # <channel>:<chat_id>:<thread_scope>
    channel = models.CharField(max_length=64)
    chat_id = models.CharField(max_length=256)
    thread_scope = models.CharField(max_length=256, default="root")
    owner_id = models.CharField(max_length=64, default="default")
    # As the latest message, commit or turn that said it; decides whether USER.md is shown (memory.prompt).
    chat_type = models.CharField(max_length=16, choices=ChatType.choices, default=ChatType.DIRECT,
                                 db_default=ChatType.DIRECT)  # rows inserted by hand (benchmarks) too
    # Messages with a smaller id have left the window (compacted or cleared) but are never deleted.
    window_start_id = models.BigIntegerField(default=0)
    checkpoint_message = models.ForeignKey(
        "Message", null=True, blank=True, on_delete=models.SET_NULL, related_name="+", db_constraint=False
    )
    # Leading system messages carried into every window after a compaction.
    pinned_message_ids = models.JSONField(default=list, blank=True)
    last_peak_prompt_tokens = models.IntegerField(null=True, blank=True)
    last_context_window = models.IntegerField(null=True, blank=True)
    compaction_failed_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        db_table = "conversations"
        constraints = [models.UniqueConstraint(fields=["agent_id", "key"], name="conversation_unique_key")]

    def __str__(self):
        return f"{self.agent_id}/{self.key}"


class Message(models.Model):
    agent_id = models.CharField(max_length=64)
    owner_id = models.CharField(max_length=64, default="default")
    channel = models.CharField(max_length=64)
    chat_id = models.CharField(max_length=256)
    thread_scope = models.CharField(max_length=256, default="root")
    sender = models.CharField(max_length=256, blank=True, default="")
    role = models.CharField(max_length=16, choices=Role.choices)
    kind = models.CharField(max_length=32, default="chat")  # chat, voice_turn, checkpoint, notice, tool
    trust = models.CharField(max_length=16, choices=Trust.choices, default=Trust.GUEST)
    content = models.TextField()
    metadata = models.JSONField(default=dict, blank=True, db_column="metadata_json")
    created_at = models.DateTimeField(db_index=False)

    class Meta:
        db_table = "messages"
        indexes = [
            models.Index(
                fields=["agent_id", "channel", "chat_id", "thread_scope", "created_at", "id"],
                name="messages_conversation_idx",
            ),
            models.Index(fields=["agent_id", "owner_id", "id"], name="messages_owner_idx"),
            # A conversation's messages from an id on (the window after its start, the reviewer's rows
            # after its cursor) without reading the conversation's whole history first.
            models.Index(fields=["agent_id", "channel", "chat_id", "thread_scope", "id"], name="messages_window_idx"),
        ]

    @property
    def conversation_key(self) -> str:
        return f"{self.channel}:{self.chat_id}:{self.thread_scope}"

    def __str__(self):
        return f"#{self.pk} {self.role}: {self.content[:60]}"


class MessageDay(models.Model):
    """The ids between which an agent's messages of one UTC day lie (`memory.days`): database triggers
    keep it, and recall reads it to bound a time span's ids."""

    agent_id = models.CharField(max_length=64)
    day = models.DateField()
    first_id = models.BigIntegerField()
    last_id = models.BigIntegerField()

    class Meta:
        db_table = days.TABLE
        constraints = [models.UniqueConstraint(fields=["agent_id", "day"], name="message_days_uniq")]

    def __str__(self):
        return f"{self.agent_id} {self.day}: #{self.first_id}–#{self.last_id}"


class MemorySource(models.Model):
    """Where memory rows come from: a conversation, a scheduled job (`job:<id>`), an operator, a tool."""

    agent_id = models.CharField(max_length=64)
    source_type = models.CharField(max_length=32)
    key = models.CharField(max_length=600)
    name = models.CharField(max_length=200, blank=True, default="")
    description = models.TextField(blank=True, default="")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        db_table = "memory_sources"
        constraints = [models.UniqueConstraint(fields=["agent_id", "key"], name="memory_source_unique_key")]

    def __str__(self):
        return self.key


class Memory(models.Model):
    agent_id = models.CharField(max_length=64)
    owner_id = models.CharField(max_length=64)
    scope_type = models.CharField(max_length=16, choices=ScopeType.choices)
    scope_id = models.CharField(max_length=600)
    category = models.CharField(max_length=16, choices=Category.choices, blank=True, default="")
    key = models.CharField(max_length=200)
    value = models.TextField()
    confidence = models.FloatField(default=1.0)
    promote_target = models.CharField(max_length=16, choices=PromoteTarget.choices, blank=True, default="")
    source = models.ForeignKey(
        MemorySource, null=True, blank=True, on_delete=models.SET_NULL, db_column="source_id", related_name="+"
    )
    source_type = models.CharField(max_length=32, blank=True, default="")
    source_name = models.CharField(max_length=200, blank=True, default="")
    source_description = models.TextField(blank=True, default="")
    session_id = models.CharField(max_length=600, blank=True, default="")
    run = models.ForeignKey("ReviewRun", null=True, blank=True, on_delete=models.SET_NULL, related_name="+",
                            help_text="the review run that last wrote the row")
    source_message_id = models.BigIntegerField(null=True, blank=True)
    archived_at = models.DateTimeField(null=True, blank=True)
    archived_by = models.CharField(max_length=200, blank=True, default="")
    archive_reason = models.TextField(blank=True, default="")
    # A directive the reviewer proposed with `directive_approval` on: {"state": "pending" | "approved" |
    # "rejected", "op": "add" | "replace" | "archive", "value", "category", "reason", "by", "at"}.
    approval = models.JSONField(null=True, blank=True)
    created_at = models.DateTimeField()
    updated_at = models.DateTimeField()

    class Meta:
        db_table = "memories"
        verbose_name_plural = "memories"
        constraints = [
            models.UniqueConstraint(
                fields=["agent_id", "owner_id", "scope_type", "scope_id", "key"], name="memory_unique_key"
            )
        ]
        indexes = [
            models.Index(fields=["agent_id", "owner_id", "category", "updated_at"], name="memories_owner_idx"),
            models.Index(
                fields=["agent_id", "promote_target", "updated_at"],
                name="memories_promoted_idx",
                condition=Q(archived_at__isnull=True),
            ),
            # The prompt-file rebuild: each section's newest rows and the count of the rest, from the
            # index alone (an owner may hold tens of thousands of rows).
            models.Index(
                fields=["agent_id", "owner_id", "category", "scope_type", "updated_at"],
                name="memories_render_idx",
                condition=Q(archived_at__isnull=True),
            ),
            # The reviewer's view of an owner: the newest live rows, read in order and stopped at the limit.
            models.Index(
                fields=["agent_id", "owner_id", "updated_at"],
                name="memories_recent_idx",
                condition=Q(archived_at__isnull=True),
            ),
            # The rows a message is the source of (a message's console page): without it SQLite walked the
            # agent's every memory row.
            models.Index(
                fields=["agent_id", "source_message_id"],
                name="memories_source_message_idx",
                condition=Q(source_message_id__isnull=False),
            ),
        ]

    @property
    def is_archived(self) -> bool:
        return self.archived_at is not None

    @property
    def state(self) -> str:
        """`pending` (a change waits for the owner's approval), `archived` or `live`."""
        return "pending" if self.pending is not None else "archived" if self.is_archived else "live"

    @property
    def pending(self) -> dict | None:
        """The change waiting for the owner's approval (`memory.rows.memory_propose`), or None."""
        return self.approval if self.approval and self.approval.get("state") == APPROVAL_PENDING else None

    def __str__(self):
        return f"#{self.pk} {self.category or self.scope_type}:{self.key}"


class MemoryEvent(models.Model):
    """One change to a memory row, by any path: the per-fact history, kept through archive."""

    class Action(models.TextChoices):
        ADD = "add"
        REPLACE = "replace"
        ARCHIVE = "archive"
        RESTORE = "restore"
        RESAVE = "resave"  # an archived key written again: restored with the new value
        REVERT = "revert"  # put back as it was before a review run (undo)
        PROPOSE = "propose"  # a directive change waiting for the owner (directive_approval)
        APPROVE = "approve"  # the owner approved it: applied
        REJECT = "reject"  # the owner rejected it (or its review run was undone): nothing changed

    memory = models.ForeignKey(Memory, on_delete=models.CASCADE, related_name="events")
    action = models.CharField(max_length=16, choices=Action.choices)
    before_value = models.TextField(null=True, blank=True)
    after_value = models.TextField(null=True, blank=True)
    before_category = models.CharField(max_length=16, blank=True, default="")
    after_category = models.CharField(max_length=16, blank=True, default="")
    actor_type = models.CharField(max_length=32)  # reviewer, tool, operator, job, system, import
    actor_id = models.CharField(max_length=200, blank=True, default="")
    run = models.ForeignKey("ReviewRun", null=True, blank=True, on_delete=models.SET_NULL, related_name="events",
                            help_text="the review run that made the change")
    reason = models.TextField(blank=True, default="")
    message_ids = models.JSONField(default=list, blank=True,
                                   help_text="the messages the change came from, when its writer named them")
    created_at = models.DateTimeField()

    class Meta:
        db_table = "memory_events"
        ordering = ["id"]

    def __str__(self):
        return f"{self.action} #{self.memory_id}"


class ReviewState(models.Model):
    """The reviewer's per-conversation state: cursor, claim, outcome and failures."""

    agent_id = models.CharField(max_length=64)
    conversation_key = models.CharField(max_length=600)
    cursor_message_id = models.BigIntegerField(default=0)  # the last message already reviewed
    last_reviewed_at = models.DateTimeField(null=True, blank=True)
    claimed_by = models.CharField(max_length=100, blank=True, default="")
    claim_expires_at = models.DateTimeField(null=True, blank=True)
    status = models.CharField(max_length=32, blank=True, default="")
    failure_count = models.IntegerField(default=0)
    last_failure_at = models.DateTimeField(null=True, blank=True)
    last_error = models.TextField(blank=True, default="")
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        db_table = "review_states"
        constraints = [
            models.UniqueConstraint(fields=["agent_id", "conversation_key"], name="review_state_unique")
        ]

    def __str__(self):
        return f"{self.agent_id}/{self.conversation_key}"


class ReviewRun(models.Model):
    """One run of the background reviewer over one conversation: input, model call, outcome."""

    class Status(models.TextChoices):
        RUNNING = "running"
        OK = "ok"
        NOTHING_TO_SAVE = "nothing_to_save"
        FAILED = "failed"
        UNDONE = "undone"

    agent_id = models.CharField(max_length=64)
    conversation_key = models.CharField(max_length=600)
    owner_id = models.CharField(max_length=64)
    trigger = models.CharField(max_length=32)  # background, now, compaction
    status = models.CharField(max_length=32, choices=Status.choices, default=Status.RUNNING)
    reason = models.TextField(blank=True, default="")
    input_message_ids = models.JSONField(default=list, blank=True)
    input_tokens = models.IntegerField(default=0)
    cursor_before = models.BigIntegerField(default=0)
    cursor_after = models.BigIntegerField(null=True, blank=True)
    model_call_id = models.CharField(max_length=64, blank=True, default="")
    output = models.TextField(blank=True, default="")
    ops_added = models.IntegerField(default=0)
    ops_replaced = models.IntegerField(default=0)
    ops_archived = models.IntegerField(default=0)
    ops_skipped = models.IntegerField(default=0)
    started_at = models.DateTimeField()
    finished_at = models.DateTimeField(null=True, blank=True)
    undone_at = models.DateTimeField(null=True, blank=True)
    undone_by = models.CharField(max_length=200, blank=True, default="")

    class Meta:
        db_table = "review_runs"
        indexes = [models.Index(fields=["agent_id", "conversation_key", "started_at"], name="review_runs_conv_idx")]

    @property
    def input_messages(self) -> int:
        return len(self.input_message_ids)

    def __str__(self):
        return f"review #{self.pk} {self.conversation_key} {self.status}"


class ReviewOperation(models.Model):
    """One operation the model proposed in a review run: applied (with the row's prior state) or skipped."""

    run = models.ForeignKey(ReviewRun, on_delete=models.CASCADE, related_name="operations")
    index = models.IntegerField()
    op = models.CharField(max_length=16)
    status = models.CharField(max_length=16)  # applied, skipped
    code = models.CharField(max_length=40, blank=True, default="")  # why it was skipped: `unchanged`, `question`, …
    reason = models.TextField(blank=True, default="")
    notes = models.JSONField(default=list, blank=True)  # [{code, detail}]: repairs and ignored ids of an operation
    message_ids = models.JSONField(default=list, blank=True)  # the batch's messages the operation came from
    memory = models.ForeignKey(Memory, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    action = models.CharField(max_length=16, blank=True, default="")  # the row change: add, replace, resave, …
    proposed = models.JSONField(default=dict)
    before_value = models.TextField(null=True, blank=True)
    before_category = models.CharField(max_length=16, blank=True, default="")
    before_archived = models.BooleanField(null=True)
    after_value = models.TextField(null=True, blank=True)

    class Meta:
        db_table = "review_operations"
        ordering = ["run", "index"]

    def __str__(self):
        return f"{self.op} ({self.status})"


class Embedding(models.Model):
    """One message's or memory row's vector under one embedding model, in the database so every node
    reads the same. The scope columns are copied from the row (`conversation` is a message's conversation
    key; a memory row's is empty), so a scope's vectors are read without a join."""

    class Kind(models.TextChoices):
        MESSAGE = "message"
        MEMORY = "memory"

    kind = models.CharField(max_length=8, choices=Kind.choices)
    object_id = models.BigIntegerField()
    agent_id = models.CharField(max_length=64)
    owner_id = models.CharField(max_length=64)
    conversation = models.CharField(max_length=600, blank=True, default="")
    model_id = models.CharField(max_length=200)
    dimensions = models.PositiveSmallIntegerField()
    vector = models.BinaryField()
    created_at = models.DateTimeField()

    class Meta:
        db_table = "embeddings"
        constraints = [models.UniqueConstraint(fields=["kind", "object_id", "model_id"], name="embeddings_object_uniq")]
        indexes = [
            models.Index(fields=["model_id", "kind", "agent_id", "conversation", "id"], name="embeddings_conv_idx"),
            models.Index(fields=["model_id", "kind", "agent_id", "owner_id", "id"], name="embeddings_owner_idx"),
            # An agent's vectors stored after its approximate index was built, sought by id.
            models.Index(fields=["model_id", "kind", "agent_id", "id"], name="embeddings_agent_idx"),
        ]

    def __str__(self):
        return f"{self.kind} #{self.object_id} ({self.model_id})"

