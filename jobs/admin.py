"""Scheduled jobs and their runs, read-only: jobs change through their API and services."""

from django.contrib import admin
from django.utils.html import format_html_join

from fermix_site.admin_kit import BigTableAdmin, ReadOnlyAdmin, admin_url, changelist_url, link, pre, short
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
        return f"once at {obj.run_at:%Y-%m-%d %H:%M}" if obj.run_at else "once"

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
            ((admin_url(r), r.pk, r.started_at.strftime("%Y-%m-%d %H:%M"), r.status, short(r.error or r.output, 100))
             for r in runs)) or "no runs yet"


@admin.register(JobRun)
class JobRunAdmin(BigTableAdmin, ReadOnlyAdmin):
    list_display = ("id", "started_at", "job", "agent_id", "status", "prompt_tokens", "completion_tokens",
                    "outcome")
    list_filter = ("status", "agent_id")
    list_select_related = ("job",)
    raw_id_fields = ("job",)
    fields = ("job", "agent_id", "status", "started_at", "finished_at", "prompt_tokens", "completion_tokens",
              "output_block", "error_block")
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
