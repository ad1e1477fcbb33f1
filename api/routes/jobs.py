"""Scheduled jobs: channel keys may read them; creating, changing, pausing, deleting and running one
needs an operator key (a job spends model calls unattended and writes memory on its own)."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Literal

from ninja import Field, Query, Router, Schema, Status
from pydantic import StrictBool

from api import schemas as s
from fermix_site.enqueue import enqueue_after_commit
from jobs import selectors, services
from jobs.models import JobRun, ScheduledJob

router = Router(tags=["jobs"])
Prompt = Annotated[str, Field(min_length=1, max_length=20_000)]
Schedule = Literal["once", "interval", "cron"]


class JobIn(Schema):
    name: str = Field(..., min_length=1, max_length=200)
    prompt: Prompt
    schedule_type: Schedule
    run_at: datetime | None = Field(None, description="once: when to run (ISO 8601 with a time zone)")
    interval_seconds: s.json_int(60, s.MAX_INT) | None = Field(None,
                                         description="interval: a whole number of minutes, in seconds")
    cron: str | None = Field(None, max_length=100, description="cron: five fields, UTC")
    owner_id: s.Ident | None = None
    enabled: StrictBool = True
    silent_marker: str = Field("[SILENT]", max_length=100)


class JobPatch(Schema):
    name: str | None = Field(None, min_length=1, max_length=200)
    prompt: Prompt | None = None
    schedule_type: Schedule | None = None
    run_at: datetime | None = None
    interval_seconds: s.json_int(60, s.MAX_INT) | None = None
    cron: str | None = Field(None, max_length=100)
    enabled: StrictBool | None = None
    silent_marker: str | None = Field(None, max_length=100)


class JobOut(Schema):
    id: int
    agent_id: str
    owner_id: str
    name: str
    prompt: str
    schedule_type: str
    run_at: datetime | None
    interval_seconds: int | None
    cron: str
    enabled: bool
    silent_marker: str
    memory_source: str
    next_run_at: datetime | None
    last_run_at: datetime | None
    created_at: datetime
    updated_at: datetime


class JobListOut(Schema):
    jobs: list[JobOut]


class JobRunOut(Schema):
    id: int
    job_id: int
    status: str
    trigger: str
    started_at: datetime
    finished_at: datetime | None
    prompt_tokens: int
    completion_tokens: int
    output: str
    error: str


class JobRunListOut(Schema):
    runs: list[JobRunOut]


class Deleted(Schema):
    deleted: bool

JOBS = "/agents/{agent}/jobs"


def job_out(job: ScheduledJob) -> dict:
    return {"id": job.id, "agent_id": job.agent_id, "owner_id": job.owner_id, "name": job.name, "prompt": job.prompt,
            "schedule_type": job.schedule_type, "run_at": job.run_at, "interval_seconds": job.interval_seconds,
            "cron": job.cron, "enabled": job.enabled, "silent_marker": job.silent_marker,
            "memory_source": services.source_key(job), "next_run_at": selectors.job_next_run(job),
            "last_run_at": job.last_run_at, "created_at": job.created_at, "updated_at": job.updated_at}


def run_out(run: JobRun) -> dict:
    return {"id": run.id, "job_id": run.job_id, "status": run.status, "trigger": run.trigger,
            "started_at": run.started_at, "finished_at": run.finished_at, "prompt_tokens": run.prompt_tokens,
            "completion_tokens": run.completion_tokens, "output": run.output, "error": run.error}


@router.get(JOBS, response=JobListOut, summary="List scheduled jobs")
def jobs(request, agent: str):
    """The agent's jobs, oldest first, with when each fires next."""
    return {"jobs": [job_out(job) for job in selectors.job_list(agent_id=agent)]}


@router.post(JOBS, response={201: JobOut}, summary="Create a scheduled job")
def job_create(request, agent: str, payload: JobIn):
    """Create a job (operator key): `once` at `run_at`, every `interval_seconds`, or on a `cron` line (UTC)."""
    request.auth.require_operator("creating a scheduled job")
    job = services.job_create(agent_id=agent, **payload.dict())
    return Status(201, job_out(job))


@router.get(JOBS + "/{job_id}", response=JobOut, summary="Get a scheduled job")
def job(request, agent: str, job_id: int):
    return job_out(services.job_get(job_id=job_id, agent_id=agent))


@router.patch(JOBS + "/{job_id}", response=JobOut, summary="Change or pause a scheduled job")
def job_update(request, agent: str, job_id: int, payload: JobPatch):
    """Change a job (operator key); `{"enabled": false}` pauses it, `{"enabled": true}` resumes it."""
    request.auth.require_operator("changing a scheduled job")
    job = services.job_update(job_id=job_id, agent_id=agent, **payload.dict(exclude_unset=True))
    return job_out(job)


@router.delete(JOBS + "/{job_id}", response=Deleted, summary="Delete a scheduled job")
def job_delete(request, agent: str, job_id: int):
    """Delete a job and its runs (operator key); what it stored in memory stays."""
    request.auth.require_operator("deleting a scheduled job")
    services.job_delete(job_id=job_id, agent_id=agent)
    return {"deleted": True}


class RunQuery(Schema):
    wait: bool = Field(False, description="run in this request and answer with the finished run")


@router.post(JOBS + "/{job_id}/run", response={200: JobRunOut, 202: JobRunOut}, summary="Run a scheduled job now")
def job_run(request, agent: str, job_id: int, query: Query[RunQuery]):
    """Run the job now (operator key): queued for a worker (202), or with `?wait=true` in this request (200).

    A job that is already running answers 409.
    """
    request.auth.require_operator("running a scheduled job")
    run = services.job_run_start(job_id=job_id, agent_id=agent, trigger=JobRun.Trigger.MANUAL)
    if query.wait:
        return Status(200, run_out(services.job_run_execute(run_id=run.pk)))
    enqueue_after_commit("jobs.tasks.job_run_execute", run.pk)
    return Status(202, run_out(run))


class RunsQuery(Schema):
    limit: int = Field(50, ge=1, le=500)


@router.get(JOBS + "/{job_id}/runs", response=JobRunListOut, summary="List a job's runs")
def job_runs(request, agent: str, job_id: int, query: Query[RunsQuery]):
    """The job's runs, newest first: status, timing, tokens, output, error."""
    job = services.job_get(job_id=job_id, agent_id=agent)
    return {"runs": [run_out(run) for run in selectors.job_runs(job=job, limit=query.limit)]}
