"""Scheduled jobs and their runs, read-only: jobs change through their API and services."""

from django.contrib import admin
from django.utils.html import format_html_join

from fermix_site.admin_kit import (
    BigTableAdmin,
    HumanChoicesFilter,
    ReadOnlyAdmin,
    StatusColumns,
    admin_url,
    changelist_url,
    link,
    pre,
    short,
    status_html,
    when,
)
from jobs.models import JobRun, ScheduledJob


@admin.register(ScheduledJob)
class ScheduledJobAdmin(ReadOnlyAdmin):
    list_display = ("name", "agent_id", "owner_id", "schedule", "enabled", "last_run_at", "runs_link")
    list_filter = ("enabled", "schedule_type", "agent_id")
    search_fields = ("name",)
    raw_id_fields = ("memory_source",)
    fields = ("name", "agent_id", "owner_id", "schedule", "enabled", "prompt_block", "silent_marker",
              "memory_source", "last_run_at", "recent_runs", "created_at", "updated_at")
    readonly_fields = fields

    @admin.display(description="schedule")
    def schedule(self, obj):
        if obj.schedule_type == ScheduledJob.ScheduleType.CRON:
            return f"cron {obj.cron}"
        if obj.schedule_type == ScheduledJob.ScheduleType.INTERVAL:
            return f"every {obj.interval_seconds} s"
        return f"once at {when(obj.run_at)}" if obj.run_at else "once"

    @admin.display(description="runs")
    def runs_link(self, obj):
        return link(changelist_url(JobRun, job=obj.pk), "runs")

    @admin.display(description="prompt")
    def prompt_block(self, obj):
        return pre(obj.prompt)

    @admin.display(description="recent runs")
    def recent_runs(self, obj):
        runs = obj.runs.order_by("-started_at")[:20]
        return format_html_join(
            "", '<div><a href="{}">#{}</a> {} {} — {}</div>',
            ((admin_url(r), r.pk, when(r.started_at), status_html(r.status), short(r.error or r.output, 100))
             for r in runs)) or "no runs yet"


@admin.register(JobRun)
class JobRunAdmin(StatusColumns, BigTableAdmin, ReadOnlyAdmin):
    list_display = ("id", "started_at", "took", "job", "agent_id", "status_badge", "prompt_tokens",
                    "completion_tokens", "outcome")
    list_filter = (("status", HumanChoicesFilter), "agent_id")
    list_select_related = ("job",)
    raw_id_fields = ("job",)
    fields = ("job", "agent_id", "status_badge", "started_at", "finished_at", "took", "prompt_tokens",
              "completion_tokens", "output_block", "error_block")
    readonly_fields = fields


    @admin.display(description="output or error")
    def outcome(self, obj):
        return short(obj.error or obj.output, 100)

    @admin.display(description="output")
    def output_block(self, obj):
        return pre(obj.output)

    @admin.display(description="error")
    def error_block(self, obj):
        return pre(obj.error) if obj.error else "—"
