"""Scheduled jobs: create, change, pause, delete, and run them.

A job is a prompt the agent answers on a schedule, alone: each run has its own conversation key
(`job:<id>:run-<run id>`), sees no chat history, and its memory tools read and write only the job's
own rows (scope `job`, source `job:<id>`). A run is claimed by inserting its `running` row (a partial
unique index allows one per job), so two workers, or a worker and an operator's "run now", never run
the same job at once. A successful run that is not silenced leaves a one-line summary in the job's
memory under the key `latest`, which the next run is shown.
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta

from croniter import croniter
from django.db import IntegrityError, transaction
from django.utils import timezone
from django_q.conf import Conf

from fermix_site.conf import conf, valid_id
from jobs.models import JobRun, ScheduledJob
from jobs.schedules import schedule_delete, schedule_sync
from memory.admission import Writer, admit_add
from memory.conversations import ConversationKey
from memory.models import MemorySource, ScopeType, Trust
from memory.prompt import compose_system_prompt
from memory.rows import MAX_VALUE_CHARS, memory_lookup
from memory.tools import ToolContext
from memory.turn_runner import answer_with_tools
from providers.errors import ProviderError

logger = logging.getLogger("fermix.jobs")

AGENT_TAG = "job"
SUMMARY_KEY = "latest"
MAX_MINUTES = 32767  # django-q2 keeps an interval's minutes in a PositiveSmallIntegerField
Type = ScheduledJob.ScheduleType
Status = JobRun.Status


class JobError(ValueError):
    """A refused job operation; `code` and `http_status` tell the API what to answer."""

    http_status = 400

    def __init__(self, code: str, message: str, *, http_status: int | None = None):
        super().__init__(message)
        self.code = code
        if http_status is not None:
            self.http_status = http_status


def source_key(job: ScheduledJob) -> str:
    return f"job:{job.pk}"


def job_get(*, job_id: int, agent_id: str | None = None) -> ScheduledJob:
    """One job; JobError `not_found` (404) when it does not exist or belongs to another agent."""
    job = ScheduledJob.objects.filter(pk=job_id).first()
    if job is None or (agent_id is not None and job.agent_id != agent_id):
        raise JobError("not_found", f"scheduled job {job_id} does not exist", http_status=404)
    return job


# --- validation ------------------------------------------------------------------------------------


def _check_text(job: ScheduledJob) -> None:
    if not valid_id(job.agent_id) or not valid_id(job.owner_id):
        raise JobError("invalid_id", "agent and owner ids use 1-64 of A-Z a-z 0-9 _ . - (not '.' or '..')")
    if not job.name.strip() or len(job.name) > 200:
        raise JobError("invalid_name", "name must be 1-200 characters")
    if not job.prompt.strip() or "\x00" in job.prompt:
        raise JobError("invalid_prompt", "prompt must be non-empty text")
    if len(job.silent_marker) > 100:
        raise JobError("invalid_silent_marker", "silent_marker must be at most 100 characters")


def _check_schedule(job: ScheduledJob, now: datetime) -> None:
    """Each schedule type needs exactly its own field; the others are cleared."""
    if job.schedule_type not in Type.values:
        raise JobError("invalid_schedule", f"schedule_type must be one of {', '.join(Type.values)}")
    if job.schedule_type == Type.ONCE:
        job.interval_seconds, job.cron = None, ""
        if job.run_at is None:
            raise JobError("invalid_schedule", "a once job needs run_at, e.g. 2026-12-01T09:00:00Z")
        if timezone.is_naive(job.run_at):
            raise JobError("invalid_schedule", "run_at needs a time zone, e.g. 2026-12-01T09:00:00Z")
        if job.enabled and job.run_at <= now:
            raise JobError("invalid_schedule", "run_at is in the past; give a future time")
    elif job.schedule_type == Type.INTERVAL:
        job.run_at, job.cron = None, ""
        seconds = job.interval_seconds
        if not isinstance(seconds, int) or seconds < 60 or seconds % 60 or seconds > MAX_MINUTES * 60:
            raise JobError("invalid_schedule", f"interval_seconds must be a whole number of minutes in seconds "
                                               f"(60, 120, …), at most {MAX_MINUTES * 60}")
    else:
        job.run_at, job.interval_seconds = None, None
        job.cron = " ".join((job.cron or "").split())
        if len(job.cron.split()) != 5 or not croniter.is_valid(job.cron):
            raise JobError("invalid_schedule", "cron must be five fields (minute hour day month weekday, in UTC), "
                                               "e.g. `0 8 * * 1-5`")


# --- create, change, delete ------------------------------------------------------------------------


def job_create(
    *,
    agent_id: str,
    name: str,
    prompt: str,
    schedule_type: str,
    run_at: datetime | None = None,
    interval_seconds: int | None = None,
    cron: str = "",
    owner_id: str | None = None,
    enabled: bool = True,
    silent_marker: str = "[SILENT]",
) -> ScheduledJob:
    """Create a job, its memory source `job:<id>` and (when enabled) its django-q2 Schedule."""
    job = ScheduledJob(agent_id=agent_id, owner_id=owner_id or conf.memory.owner_id, name=name.strip(),
                       prompt=prompt, schedule_type=schedule_type, run_at=run_at, interval_seconds=interval_seconds,
                       cron=cron or "", enabled=enabled, silent_marker=silent_marker)
    _check_text(job)
    _check_schedule(job, timezone.now())
    with transaction.atomic():
        job.save()
        job.memory_source = MemorySource.objects.create(
            agent_id=agent_id, source_type="job", key=source_key(job), name=job.name,
            description=f"scheduled job {job.pk}: {job.prompt[:180]}",
        )
        schedule_sync(job, reschedule=True)
        job.save(update_fields=["memory_source", "q_schedule_id"])
    return job


SCHEDULE_FIELDS = {"schedule_type", "run_at", "interval_seconds", "cron"}
REQUIRED = {"name", "prompt", "enabled", "silent_marker", "schedule_type"}
EDITABLE = SCHEDULE_FIELDS | REQUIRED


def job_update(*, job_id: int, agent_id: str | None = None, **changes) -> ScheduledJob:
    """Change a job; `enabled=False` pauses it (its Schedule is removed), `enabled=True` resumes it."""
    unknown = set(changes) - EDITABLE
    if unknown:
        raise JobError("invalid_field", f"{sorted(unknown)[0]} cannot be changed")
    missing = sorted(name for name in REQUIRED if name in changes and changes[name] is None)
    if missing:
        raise JobError("invalid_field", f"{missing[0]} cannot be null; leave it out to keep it")
    with transaction.atomic():
        job = ScheduledJob.objects.select_for_update().filter(pk=job_id).first()
        if job is None or (agent_id is not None and job.agent_id != agent_id):
            raise JobError("not_found", f"scheduled job {job_id} does not exist", http_status=404)
        resumed = changes.get("enabled") is True and not job.enabled
        for field, value in changes.items():
            setattr(job, field, value.strip() if field == "name" else value)
        if job.cron is None:
            job.cron = ""
        _check_text(job)
        _check_schedule(job, timezone.now())
        schedule_sync(job, reschedule=resumed or bool(SCHEDULE_FIELDS & set(changes)))
        job.save()
        if "name" in changes and job.memory_source_id:
            MemorySource.objects.filter(pk=job.memory_source_id).update(name=job.name)
    return job


def job_delete(*, job_id: int, agent_id: str | None = None) -> None:
    """Delete a job, its Schedule and its runs. Its job-scoped memories and source stay (memory is
    archived, never deleted), so what it learned remains searchable by the operator."""
    with transaction.atomic():
        job = job_get(job_id=job_id, agent_id=agent_id)
        schedule_delete(job)
        if job.memory_source_id:
            MemorySource.objects.filter(pk=job.memory_source_id).update(
                description=f"scheduled job {job.pk} (deleted {timezone.now():%Y-%m-%d %H:%M} UTC)")
        job.delete()


# --- runs ------------------------------------------------------------------------------------------


def _expire_abandoned(job: ScheduledJob, now: datetime) -> None:
    """A `running` row older than the task timeout belongs to a worker that died: close it."""
    cutoff = now - timedelta(seconds=Conf.TIMEOUT or 3600)
    JobRun.objects.filter(job=job, status=Status.RUNNING, started_at__lt=cutoff).update(
        status=Status.FAILED, finished_at=now, error="abandoned: the worker running it stopped")


def job_run_start(*, job_id: int, trigger: str, agent_id: str | None = None) -> JobRun:
    """Claim a run of the job: a `running` row, or JobError `busy` (409) when one is already running."""
    job = job_get(job_id=job_id, agent_id=agent_id)
    now = timezone.now()
    _expire_abandoned(job, now)
    try:
        with transaction.atomic():
            run = JobRun.objects.create(job=job, agent_id=job.agent_id, trigger=trigger, started_at=now)
    except IntegrityError:
        raise JobError("busy", f"scheduled job {job.pk} is already running; wait for that run to finish",
                       http_status=409) from None
    ScheduledJob.objects.filter(pk=job.pk).update(last_run_at=now)
    return run


def _summary(text: str) -> str:
    line = " ".join(text.split()) or "(empty reply)"
    return line if len(line) <= MAX_VALUE_CHARS else line[: MAX_VALUE_CHARS - 1] + "…"


def _instructions(job: ScheduledJob, now: datetime) -> str:
    previous = memory_lookup(agent_id=job.agent_id, owner_id=job.owner_id, scope_type=ScopeType.JOB,
                             scope_id=source_key(job), key=SUMMARY_KEY)
    lines = [
        f"You are running the scheduled job \"{job.name}\" ({source_key(job)}) at {now:%Y-%m-%d %H:%M} UTC.",
        "Nobody is chatting with you and there is no conversation history. Your memory tools see only this "
        "job's own memories; store there what the next run should know.",
    ]
    if previous is not None:
        lines.append(f"The previous run's summary: {previous.value}")
    if job.silent_marker:
        lines.append(f"If there is nothing worth reporting, reply with exactly {job.silent_marker}")
    return "\n".join(lines)


def _messages(job: ScheduledJob, now: datetime) -> list[dict]:
    # The agent's standing prompt without its memory-context block: a job reads only its own memories.
    composed = compose_system_prompt(agent_id=job.agent_id)
    standing = [m for m, part in zip(composed.system_messages, composed.parts, strict=True)
                if part != "memory-context"]
    return [*standing, {"role": "system", "content": _instructions(job, now)},
            {"role": "user", "content": job.prompt}]


def _finish(run: JobRun, **fields) -> JobRun:
    fields["finished_at"] = timezone.now()
    JobRun.objects.filter(pk=run.pk).update(**fields)
    run.refresh_from_db()
    return run


def job_run_execute(*, run_id: int) -> JobRun:
    """Run a claimed run to its end: ask the model, record the outcome, write the `latest` summary."""
    run = JobRun.objects.select_related("job").get(pk=run_id)
    if run.status != Status.RUNNING:
        return run  # already finished: a retried task must not run the job twice
    job, now = run.job, timezone.now()
    conversation = ConversationKey("job", str(job.pk), f"run-{run.pk}")
    ctx = ToolContext(agent_id=job.agent_id, owner_id=job.owner_id, conversation=conversation,
                      trust=Trust.OPERATOR, job_source_key=source_key(job), actor_id=f"job_run:{run.pk}")
    try:
        loop = answer_with_tools(messages=_messages(job, now), ctx=ctx, agent_tag=AGENT_TAG,
                                 conversation_key=str(conversation))
    except ProviderError as exc:
        return _finish(run, status=Status.FAILED, error=str(exc)[:4000])
    except Exception as exc:
        _finish(run, status=Status.FAILED, error=f"{type(exc).__name__}: {exc}"[:4000])
        raise
    silent = bool(job.silent_marker) and job.silent_marker in loop.text
    outcome = dict(status=Status.SILENT if silent else Status.OK, output=loop.text,
                   prompt_tokens=loop.prompt_tokens, completion_tokens=loop.completion_tokens)
    try:
        # One transaction: whoever sees the run finished sees its summary too.
        with transaction.atomic():
            if not silent:
                writer = Writer(kind="job", agent_id=job.agent_id, owner_id=job.owner_id, trust=Trust.OPERATOR,
                                job_source_key=source_key(job), actor_id=f"job_run:{run.pk}")
                admit_add(writer, key=SUMMARY_KEY, value=_summary(loop.text), source=job.memory_source,
                          reason="job_run_summary")
            return _finish(run, **outcome)
    except Exception as exc:
        # The model has answered: the run keeps its answer and says what went wrong; asking again would
        # run the job twice.
        logger.exception("the summary of job run %s was not written", run.pk)
        return _finish(run, **outcome, error=f"the summary was not written: {type(exc).__name__}: {exc}"[:4000])


def job_run_scheduled(*, job_id: int) -> JobRun | None:
    """What the Schedule fires: claim and run the job, unless it was paused, deleted or is still running."""
    job = ScheduledJob.objects.filter(pk=job_id).first()
    if job is None or not job.enabled:
        return None
    try:
        run = job_run_start(job_id=job.pk, trigger=JobRun.Trigger.SCHEDULE)
    except JobError as exc:
        logger.warning("skipping a scheduled run of job %s: %s", job_id, exc)
        return None
    if job.schedule_type == Type.ONCE:
        # django-q2 deleted the ONCE schedule when it fired; the job is done once it has run.
        ScheduledJob.objects.filter(pk=job.pk).update(enabled=False, q_schedule_id=None)
    return job_run_execute(run_id=run.pk)
