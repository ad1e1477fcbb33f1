"""Reads of scheduled jobs and their runs, for the API and the admin."""

from __future__ import annotations

from django.db.models import QuerySet

from jobs.models import JobRun, ScheduledJob
from jobs.schedules import schedule_of


def job_list(*, agent_id: str) -> QuerySet[ScheduledJob]:
    return ScheduledJob.objects.filter(agent_id=agent_id).order_by("id")


def job_runs(*, job: ScheduledJob, limit: int = 50) -> list[JobRun]:
    """The job's runs, newest first."""
    return list(JobRun.objects.filter(job=job).order_by("-started_at", "-id")[:limit])


def job_next_run(job: ScheduledJob):
    """When django-q2 will fire the job next; None when paused or done."""
    schedule = schedule_of(job) if job.enabled else None
    return schedule.next_run if schedule else None
