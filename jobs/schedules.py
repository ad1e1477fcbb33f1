"""Each enabled job has one django-q2 Schedule; this module keeps the two in step.

The Schedule runs `jobs.tasks.job_run_scheduled(<job id>)`. `once` is a Schedule.ONCE (django-q2
deletes it after it fires), `interval` a Schedule.MINUTES, `cron` a Schedule.CRON evaluated in UTC.
A paused job has no Schedule at all, so nothing can fire it.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from croniter import croniter
from django.utils import timezone
from django_q.models import Schedule

from jobs.models import ScheduledJob

TASK = "jobs.tasks.job_run_scheduled"
KINDS = {
    ScheduledJob.ScheduleType.ONCE: Schedule.ONCE,
    ScheduledJob.ScheduleType.INTERVAL: Schedule.MINUTES,
    ScheduledJob.ScheduleType.CRON: Schedule.CRON,
}


def schedule_name(job: ScheduledJob) -> str:
    return f"fermix-job-{job.pk}"


def next_run(job: ScheduledJob, now: datetime | None = None) -> datetime:
    """When the job would fire next if scheduled now."""
    now = now or timezone.now()
    if job.schedule_type == ScheduledJob.ScheduleType.ONCE:
        return job.run_at
    if job.schedule_type == ScheduledJob.ScheduleType.INTERVAL:
        return now + timedelta(seconds=job.interval_seconds)
    return croniter(job.cron, now).get_next(datetime)


def schedule_of(job: ScheduledJob) -> Schedule | None:
    return Schedule.objects.filter(pk=job.q_schedule_id).first() if job.q_schedule_id else None


def schedule_sync(job: ScheduledJob, *, reschedule: bool) -> None:
    """Create, update or delete the job's Schedule to match it; sets `job.q_schedule_id` (unsaved).

    `reschedule` recomputes the next run (a new job, a changed schedule, a job resumed); otherwise a
    rename or a new prompt keeps the time already planned.
    """
    existing = schedule_of(job)
    if not job.enabled:
        if existing is not None:
            existing.delete()
        job.q_schedule_id = None
        return
    fields = {
        "name": schedule_name(job),
        "func": TASK,
        "args": repr(job.pk),
        "schedule_type": KINDS[job.schedule_type],
        "minutes": job.interval_seconds // 60 if job.interval_seconds else None,
        "cron": job.cron or None,
        "repeats": -1,
    }
    if existing is None or reschedule:
        fields["next_run"] = next_run(job)
    if existing is None:
        job.q_schedule_id = Schedule.objects.create(**fields).pk
        return
    for name, value in fields.items():
        setattr(existing, name, value)
    existing.save()


def schedule_delete(job: ScheduledJob) -> None:
    if job.q_schedule_id:
        Schedule.objects.filter(pk=job.q_schedule_id).delete()
