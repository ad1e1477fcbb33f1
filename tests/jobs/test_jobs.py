"""Scheduled jobs: schedules kept in step with django-q2, claimed runs, isolation, the `latest` summary."""

from datetime import timedelta

import pytest
from django.db import OperationalError, connection
from django.utils import timezone
from django_q.models import OrmQ, Schedule

from jobs import tasks
from jobs.models import JobRun, ScheduledJob
from jobs.services import (
    JobError,
    job_create,
    job_delete,
    job_run_execute,
    job_run_scheduled,
    job_run_start,
    job_update,
)
from memory.conversations import message_append
from memory.models import Memory, MemorySource
from memory.tools import ToolContext, run_tool
from resources.bootstrap import bootstrap_seed
from tests.api.model_script import Script
from tests.fakeprovider import Reply, error, provider_config_toml, tool_call, use_config
from tests.personas import error_of

pytestmark = pytest.mark.django_db


def soon(**delta):
    return timezone.now() + timedelta(**(delta or {"hours": 1}))


def new_job(**fields):
    values = {"agent_id": "main", "name": "digest", "prompt": "Write my morning digest.", "schedule_type": "cron",
              "cron": "0 8 * * *", **fields}
    return job_create(**values)


@pytest.fixture
def script(home, fake_provider):
    bootstrap_seed(agent_id="main")
    script = Script()
    fake_provider.responder = script
    with use_config(provider_config_toml(fake_provider)):
        yield script


# --- schedules -------------------------------------------------------------------------------------


def test_each_schedule_type_becomes_its_django_q2_schedule(home):
    once = new_job(schedule_type="once", run_at=soon(hours=2), cron="")
    interval = new_job(schedule_type="interval", interval_seconds=900, cron="")
    cron = new_job()
    by_job = {job.pk: Schedule.objects.get(pk=job.q_schedule_id) for job in (once, interval, cron)}
    assert (by_job[once.pk].schedule_type, by_job[once.pk].next_run) == (Schedule.ONCE, once.run_at)
    assert (by_job[interval.pk].schedule_type, by_job[interval.pk].minutes) == (Schedule.MINUTES, 15)
    assert (by_job[cron.pk].schedule_type, by_job[cron.pk].cron) == (Schedule.CRON, "0 8 * * *")
    assert by_job[cron.pk].next_run.hour == 8 and by_job[cron.pk].next_run.minute == 0
    for job, schedule in by_job.items():
        assert (schedule.func, schedule.args, schedule.repeats) == ("jobs.tasks.job_run_scheduled", repr(job), -1)


@pytest.mark.parametrize("fields, message", [
    ({"schedule_type": "once", "cron": ""}, "needs run_at"),
    ({"schedule_type": "once", "run_at": timezone.now() - timedelta(minutes=1)}, "in the past"),
    ({"schedule_type": "once", "run_at": soon().replace(tzinfo=None)}, "time zone"),
    ({"schedule_type": "interval", "interval_seconds": 90}, "whole number of minutes"),
    ({"schedule_type": "interval", "interval_seconds": 30}, "whole number of minutes"),
    ({"schedule_type": "interval"}, "whole number of minutes"),
    ({"cron": "not a cron"}, "five fields"),
    ({"cron": "0 8 * * * 30"}, "five fields"),
    ({"name": "  "}, "name"),
    ({"prompt": ""}, "prompt"),
    ({"agent_id": ".."}, "ids"),
])
def test_an_invalid_job_is_refused_and_nothing_is_written(home, fields, message):
    with pytest.raises(JobError) as refused:
        new_job(**fields)
    assert message in str(refused.value)
    assert not ScheduledJob.objects.exists() and not Schedule.objects.filter(func__startswith="jobs.").exists()


def test_every_job_has_its_memory_source(home):
    job = new_job()
    source = MemorySource.objects.get(key=f"job:{job.pk}")
    assert (source.source_type, source.name, job.memory_source_id) == ("job", "digest", source.pk)
    listed = run_tool("memory_sources_list", ToolContext(agent_id="main", owner_id="default", trust="operator"), {})
    assert [(s["key"], s["source_type"]) for s in listed.data] == [(f"job:{job.pk}", "job")]


def test_pausing_removes_the_schedule_and_resuming_plans_the_next_run(home):
    job = new_job(schedule_type="interval", interval_seconds=3600, cron="")
    first = job.q_schedule_id
    job = job_update(job_id=job.pk, enabled=False)
    assert job.q_schedule_id is None and not Schedule.objects.filter(pk=first).exists()
    job = job_update(job_id=job.pk, enabled=True)
    assert Schedule.objects.get(pk=job.q_schedule_id).next_run > timezone.now() + timedelta(minutes=59)


def test_a_rename_keeps_the_planned_time_and_a_new_schedule_replans_it(home):
    job = new_job(schedule_type="interval", interval_seconds=3600, cron="")
    Schedule.objects.filter(pk=job.q_schedule_id).update(next_run=soon(minutes=5))
    planned = Schedule.objects.get(pk=job.q_schedule_id).next_run
    job = job_update(job_id=job.pk, name="evening digest")
    assert Schedule.objects.get(pk=job.q_schedule_id).next_run == planned
    assert MemorySource.objects.get(key=f"job:{job.pk}").name == "evening digest"
    job = job_update(job_id=job.pk, schedule_type="cron", cron="30 18 * * *")
    schedule = Schedule.objects.get(pk=job.q_schedule_id)
    assert (schedule.schedule_type, schedule.next_run.hour, schedule.next_run.minute) == (Schedule.CRON, 18, 30)
    assert job.interval_seconds is None


def test_deleting_a_job_removes_its_schedule_and_keeps_its_memories(home):
    job = new_job()
    schedule_id = job.q_schedule_id
    job_delete(job_id=job.pk)
    assert not ScheduledJob.objects.exists() and not Schedule.objects.filter(pk=schedule_id).exists()
    assert "deleted" in MemorySource.objects.get(key=f"job:{job.pk}").description


# --- runs ------------------------------------------------------------------------------------------


def test_a_run_records_its_outcome_and_the_latest_summary(script):
    job = new_job()
    script.push("job", Reply(text="Three new emails; one from the bank.", prompt_tokens=120, completion_tokens=9))
    run = job_run_execute(run_id=job_run_start(job_id=job.pk, trigger="manual").pk)
    assert (run.status, run.output, run.prompt_tokens, run.completion_tokens) == (
        "ok", "Three new emails; one from the bank.", 120, 9)
    assert run.finished_at >= run.started_at and run.error == ""
    summary = Memory.objects.get(key="latest")
    assert (summary.scope_type, summary.scope_id, summary.category, summary.value) == (
        "job", f"job:{job.pk}", "", "Three new emails; one from the bank.")
    assert summary.source.key == f"job:{job.pk}" and summary.events.get().reason == "job_run_summary"
    assert ScheduledJob.objects.get(pk=job.pk).last_run_at == run.started_at


def test_the_summary_is_one_row_replaced_each_run_and_shown_to_the_next(script):
    job = new_job()
    script.push("job", Reply(text="First digest."), Reply(text="x" * 500))
    for _ in range(2):
        job_run_execute(run_id=job_run_start(job_id=job.pk, trigger="manual").pk)
    summary = Memory.objects.get(key="latest")
    assert len(summary.value) == 200 and summary.value.endswith("…")
    second = script.requests("job")[1].body["messages"]
    assert any("The previous run's summary: First digest." in m["content"] for m in second)


def test_a_silenced_run_writes_no_summary(script):
    job = new_job(silent_marker="[QUIET]")
    script.push("job", Reply(text="[QUIET]"))
    run = job_run_execute(run_id=job_run_start(job_id=job.pk, trigger="manual").pk)
    assert run.status == "silent" and not Memory.objects.filter(key="latest").exists()


def test_a_run_is_never_finished_without_its_summary(script):
    # Whoever sees the run finished (a client polling the run, the admin) reads its summary: the two are
    # one transaction, the summary written before the run is marked finished.
    job = new_job()
    script.push("job", Reply(text="Three new emails."))
    run = job_run_start(job_id=job.pk, trigger="manual")
    outside = len(connection.atomic_blocks)
    seen = []

    def observe(execute, sql, params, many, context):
        if sql.startswith('UPDATE "job_runs"') and "finished_at" in sql:
            seen.append((Memory.objects.filter(key="latest").exists(), len(connection.atomic_blocks) > outside))
        return execute(sql, params, many, context)

    with connection.execute_wrapper(observe):
        run = job_run_execute(run_id=run.pk)
    assert run.status == "ok" and seen == [(True, True)]


def test_a_summary_that_cannot_be_written_keeps_the_answer_and_the_model_is_not_asked_again(script):
    job = new_job()
    script.push("job", Reply(text="Three new emails."), Reply(text="asked twice"))
    run = job_run_start(job_id=job.pk, trigger="manual")

    def locked(execute, sql, params, many, context):
        if sql.startswith('INSERT INTO "memories"'):
            raise OperationalError("database is locked")
        return execute(sql, params, many, context)

    with connection.execute_wrapper(locked):
        run = job_run_execute(run_id=run.pk)
    assert (run.status, run.output) == ("ok", "Three new emails.") and run.finished_at
    assert run.error == "the summary was not written: OperationalError: database is locked"
    assert not Memory.objects.filter(key="latest").exists()
    assert tasks.job_run_execute(run.pk) == "ok"  # the task retried: the run is finished, nothing runs again
    assert len(script.requests("job")) == 1


def test_a_tool_that_fails_is_told_to_the_model_and_the_run_finishes(script):
    job = new_job()
    store = tool_call("memory_store", {"key": "seen", "value": "checked the inbox", "category": "directive"})
    script.push("job", store, Reply(text="Digest ready; the note was not kept."))
    refused = []

    def refuse_first_memory(execute, sql, params, many, context):
        if sql.startswith('INSERT INTO "memories"') and not refused:  # the tool's row; the summary comes later
            refused.append(sql)
            raise OperationalError("disk I/O error")
        return execute(sql, params, many, context)

    with connection.execute_wrapper(refuse_first_memory):
        run = job_run_execute(run_id=job_run_start(job_id=job.pk, trigger="manual").pk)
    assert (run.status, run.output, run.error) == ("ok", "Digest ready; the note was not kept.", "")
    told = script.requests("job")[1].body["messages"][-1]["content"]
    assert '"error": "internal_error"' in told and not Memory.objects.filter(key="seen").exists()
    assert Memory.objects.get(key="latest").value == "Digest ready; the note was not kept."


def test_a_nul_in_the_model_reply_is_dropped_not_fatal(script):
    job = new_job()
    script.push("job", Reply(text="Three new\x00 emails."))
    run = job_run_execute(run_id=job_run_start(job_id=job.pk, trigger="manual").pk)
    assert (run.status, run.output, run.error) == ("ok", "Three new emails.", "")
    assert Memory.objects.get(key="latest").value == "Three new emails."


def test_a_provider_failure_is_recorded_on_the_run(script):
    job = new_job()
    script.push("job", error(500, "upstream down"))
    run = job_run_execute(run_id=job_run_start(job_id=job.pk, trigger="manual").pk)
    assert run.status == "failed" and "upstream down" in run.error and run.finished_at


def test_a_run_is_isolated_from_chat_history_and_other_memories(script):
    message_append(agent_id="main", conversation="telegram:1", role="user", content="my secret is tangerine")
    Memory.objects.create(agent_id="main", owner_id="default", scope_type="owner", scope_id="default",
                          key="secret", value="the secret word is tangerine", category="identity",
                          created_at=timezone.now(), updated_at=timezone.now())
    job = new_job()
    script.push("job", tool_call("memory_recall", {"query": "tangerine", "scope": "all", "source": "all"}),
                tool_call("memory_recall", {"query": "tangerine"}),
                tool_call("memory_store", {"key": "seen", "value": "checked the inbox", "category": "directive"}),
                Reply(text="Done."))
    run = job_run_execute(run_id=job_run_start(job_id=job.pk, trigger="manual").pk)
    assert run.status == "ok"
    requests = script.requests("job")
    sent = requests[0].body["messages"]
    assert not any("tangerine" in m["content"] or m["content"].startswith("<memory-context>") for m in sent)
    assert sent[-1] == {"role": "user", "content": "Write my morning digest."}
    results = [requests[i].body["messages"][-1]["content"] for i in (1, 2, 3)]
    assert "scheduled job runs recall only their own job memories" in results[0]
    assert "No matching memories." in results[1]
    stored = Memory.objects.get(key="seen")
    assert (stored.scope_type, stored.scope_id) == ("job", f"job:{job.pk}")
    assert requests[0].path.endswith("/chat/completions")


def test_one_run_at_a_time(home):
    job = new_job()
    job_run_start(job_id=job.pk, trigger="manual")
    with pytest.raises(JobError) as busy:
        job_run_start(job_id=job.pk, trigger="schedule")
    assert (busy.value.code, busy.value.http_status) == ("busy", 409)
    assert job_run_scheduled(job_id=job.pk) is None  # the schedule skips, it does not queue up


def test_a_run_abandoned_by_a_dead_worker_does_not_block_the_job(home):
    job = new_job()
    stale = job_run_start(job_id=job.pk, trigger="manual")
    JobRun.objects.filter(pk=stale.pk).update(started_at=timezone.now() - timedelta(days=1))
    job_run_start(job_id=job.pk, trigger="manual")
    stale.refresh_from_db()
    assert stale.status == "failed" and stale.error.startswith("abandoned")


def test_a_finished_run_is_not_run_again_by_a_retried_task(script):
    job = new_job()
    run = job_run_start(job_id=job.pk, trigger="manual")
    assert tasks.job_run_execute(run.pk) == "ok"
    assert tasks.job_run_execute(run.pk) == "ok" and len(script.requests("job")) == 1


def test_the_scheduled_task_runs_the_job_and_a_once_job_is_then_done(script):
    job = new_job(schedule_type="once", run_at=soon(), cron="")
    assert tasks.job_run_scheduled(job.pk) == "ok"
    job.refresh_from_db()
    assert (job.enabled, job.q_schedule_id) == (False, None)
    assert JobRun.objects.get(job=job).trigger == "schedule"
    assert tasks.job_run_scheduled(job.pk) == "skipped"  # paused or done: nothing runs
    assert tasks.job_run_scheduled(999) == "skipped"  # deleted


# --- over the API ----------------------------------------------------------------------------------


JOBS = "/agents/main/jobs"


def test_jobs_over_the_api(script, operator, bot, django_capture_on_commit_callbacks):
    created = operator.post(JOBS, {"name": "digest", "prompt": "Digest.", "schedule_type": "interval",
                                   "interval_seconds": 3600})
    assert created.status_code == 201
    job = created.json()
    assert job["memory_source"] == f"job:{job['id']}" and job["next_run_at"] and job["enabled"] is True
    assert [j["id"] for j in bot.get(JOBS).json()["jobs"]] == [job["id"]]
    paused = operator.patch(f"{JOBS}/{job['id']}", {"enabled": False}).json()
    assert paused["enabled"] is False and paused["next_run_at"] is None
    script.push("job", Reply(text="All quiet."))
    run = operator.post(f"{JOBS}/{job['id']}/run", {}, wait="true")
    assert run.status_code == 200 and run.json()["status"] == "ok" and run.json()["trigger"] == "manual"
    with django_capture_on_commit_callbacks(execute=True):
        queued = operator.post(f"{JOBS}/{job['id']}/run", {})
    assert queued.status_code == 202 and queued.json()["status"] == "running"
    assert OrmQ.objects.count() == 1  # handed to the django-q2 broker for a worker
    assert error_of(operator.post(f"{JOBS}/{job['id']}/run", {})) == (409, "busy")
    runs = bot.get(f"{JOBS}/{job['id']}/runs").json()["runs"]
    assert [r["status"] for r in runs] == ["running", "ok"]
    assert error_of(operator.patch(f"{JOBS}/{job['id']}", {"cron": "nope", "schedule_type": "cron"})) == (
        400, "invalid_schedule")
    assert error_of(operator.get(f"/agents/other/jobs/{job['id']}")) == (404, "not_found")
    assert operator.delete(f"{JOBS}/{job['id']}").json() == {"deleted": True}
    assert error_of(bot.get(f"{JOBS}/{job['id']}")) == (404, "not_found")
