"""Scheduled jobs and their runs. Each job reads and writes only its own job-scoped memories."""

from django.db import models


class ScheduledJob(models.Model):
    class ScheduleType(models.TextChoices):
        ONCE = "once"
        INTERVAL = "interval"
        CRON = "cron"

    agent_id = models.CharField(max_length=64)
    owner_id = models.CharField(max_length=64, default="default")
    name = models.CharField(max_length=200)
    prompt = models.TextField()
    schedule_type = models.CharField(max_length=16, choices=ScheduleType.choices)
    run_at = models.DateTimeField(null=True, blank=True)
    interval_seconds = models.IntegerField(null=True, blank=True)
    cron = models.CharField(max_length=100, blank=True, default="")
    enabled = models.BooleanField(default=True)
    silent_marker = models.CharField(max_length=100, blank=True, default="[SILENT]")
    memory_source = models.ForeignKey(
        "memory.MemorySource", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    q_schedule_id = models.BigIntegerField(null=True, blank=True)
    last_run_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        db_table = "scheduled_jobs"

    def __str__(self):
        return f"{self.agent_id}/{self.name}"


class JobRun(models.Model):
    class Status(models.TextChoices):
        RUNNING = "running"
        OK = "ok"
        SILENT = "silent"
        FAILED = "failed"

    class Trigger(models.TextChoices):
        SCHEDULE = "schedule"
        MANUAL = "manual"

    job = models.ForeignKey(ScheduledJob, on_delete=models.CASCADE, related_name="runs")
    agent_id = models.CharField(max_length=64)
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.RUNNING)
    trigger = models.CharField(max_length=16, choices=Trigger.choices, default=Trigger.SCHEDULE)
    started_at = models.DateTimeField()
    finished_at = models.DateTimeField(null=True, blank=True)
    prompt_tokens = models.IntegerField(default=0)
    completion_tokens = models.IntegerField(default=0)
    output = models.TextField(blank=True, default="")
    error = models.TextField(blank=True, default="")

    class Meta:
        db_table = "job_runs"
        constraints = [
            # The claim: inserting a second running row of a job fails, whichever process tries.
            models.UniqueConstraint(fields=["job"], condition=models.Q(status="running"), name="job_run_one_running")
        ]
        indexes = [models.Index(fields=["job", "-started_at"], name="job_runs_job_idx")]

    def __str__(self):
        return f"{self.job_id} run #{self.pk}"
