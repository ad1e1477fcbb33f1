"""Does the service need its operator? The console index's answer, read from what the service has already
recorded: review runs, the reviewer's failures, directive changes waiting for approval, each provider's
last model call, jobs, and the free space under FERMIX_HOME. Rendering it makes no network call, and
the queries over tables that only grow read a bounded number of rows (the newest by primary key). The one
exception is the count of directive changes waiting for approval, made only when approval is on: a scan
of the memory rows' approval column, like the dashboard's.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from django.urls import reverse
from django.utils import timezone

from fermix_site.admin_kit import changelist_url, table_estimate, when
from fermix_site.conf import conf
from fermix_site.storage import storage_state
from jobs.models import JobRun
from memory.models import APPROVAL_PENDING, Conversation, Memory, Message, ReviewRun, ReviewState
from providers.models import ModelCall
from resources.models import Resource

RECENT_DAYS = 7  # failures this recent need a look
RECENT_ROWS = 2_000  # the newest review runs and job runs read for it
RECENT_CALLS = 500  # the newest model calls read for each provider's last outcome
EXACT_BELOW = 10_000  # tables estimated smaller than this are counted exactly
DOWN = (ModelCall.Outcome.FAILED, ModelCall.Outcome.FALLBACK)

OK, WARN, BAD = "ok", "warn", "bad"


@dataclass(frozen=True)
class ProviderOutcome:
    """A provider's last recorded model call: `outcome` is ok, failed, fallback, or "" (none recorded)."""

    provider: str
    model: str
    outcome: str
    at: datetime | None
    error: str
    http_status: int | None
    configured: bool

    @property
    def down(self) -> bool:
        return self.outcome in DOWN


def last_model_call_outcomes(*, recent: int = RECENT_CALLS) -> list[ProviderOutcome]:
    """The outcome of each provider's last model call among the newest `recent` ones, configured providers
    first (in chain order; one with no recent call has outcome ""), then any other provider seen."""
    latest: dict[str, ModelCall] = {}
    calls = ModelCall.objects.order_by("-created_at", "-id").only(
        "provider", "model", "outcome", "created_at", "error", "http_status")[:recent]
    for call in calls:
        latest.setdefault(call.provider, call)
    configured = [p.name for p in conf.provider_chain]
    out = []
    for name in [*configured, *(n for n in latest if n not in configured)]:
        call = latest.get(name)
        out.append(ProviderOutcome(
            provider=name, model=call.model if call else "", outcome=call.outcome if call else "",
            at=call.created_at if call else None, error=(call.error if call else "")[:300],
            http_status=call.http_status if call else None, configured=name in configured))
    return out


@dataclass(frozen=True)
class Item:
    """One line of the index's "needs you" list: `level` is ok, warn or bad."""

    level: str
    text: str
    url: str = ""
    detail: str = ""


def _recent(model, time_field: str, since: datetime) -> list[str]:
    """The statuses of the newest RECENT_ROWS rows of `model` started since `since` (read by primary key)."""
    rows = model.objects.order_by("-id").values_list("status", time_field)[:RECENT_ROWS]
    return [status for status, at in rows if at is not None and at >= since]


def review_items(since: datetime) -> list[Item]:
    failed = _recent(ReviewRun, "started_at", since).count(ReviewRun.Status.FAILED)
    failing = ReviewState.objects.filter(failure_count__gt=0).values("pk")[:RECENT_ROWS].count()
    runs = changelist_url(ReviewRun, status__exact=ReviewRun.Status.FAILED)
    items = [Item(BAD if failed else OK, f"{failed} failed review run(s) in the last {RECENT_DAYS} days"
                  if failed else f"No failed review runs in the last {RECENT_DAYS} days", runs if failed else "")]
    if failing:
        items.append(Item(WARN, f"{failing} conversation(s) whose last review failed (it is retried with a backoff)",
                          changelist_url(ReviewState)))
    return items


def approval_items() -> list[Item]:
    if not conf.memory.directive_approval:
        return []
    pending = Memory.objects.filter(approval__state=APPROVAL_PENDING).count()
    url = changelist_url(Memory, archived="pending")
    if pending:
        return [Item(WARN, f"{pending} directive change(s) waiting for your approval", url)]
    return [Item(OK, "No directive changes waiting for approval")]


def provider_items() -> list[Item]:
    outcomes = last_model_call_outcomes()
    if not outcomes:
        return [Item(WARN, "No model provider is configured: reviews and compaction cannot run",
                     detail="fermix_setup or [fermix_core.providers] in config.toml")]
    items = []
    for p in outcomes:
        calls = changelist_url(ModelCall, provider=p.provider)
        if p.down:
            status = f"HTTP {p.http_status}: " if p.http_status else ""
            items.append(Item(BAD, f"Provider {p.provider} is failing: its last call ({p.outcome}) at "
                                   f"{when(p.at)}", calls, f"{status}{p.error}"))
        elif p.outcome:
            items.append(Item(OK, f"Provider {p.provider}: last call ok at {when(p.at)}",
                              calls))
        else:
            items.append(Item(OK, f"Provider {p.provider}: no recent calls"))
    return items


def job_items(since: datetime) -> list[Item]:
    failed = _recent(JobRun, "started_at", since).count(JobRun.Status.FAILED)
    if not failed:
        return []
    return [Item(BAD, f"{failed} failed job run(s) in the last {RECENT_DAYS} days",
                 changelist_url(JobRun, status__exact=JobRun.Status.FAILED))]


def disk_items() -> list[Item]:
    state = storage_state()
    floor = conf.storage.min_free_bytes
    free = state.get("free_bytes")
    if free is None:
        return [Item(BAD, "The free space under FERMIX_HOME cannot be read", detail=state.get("error", ""))]
    text = f"{_size(free)} free under FERMIX_HOME (writes are refused below {_size(floor)})"
    if not state["ok"]:
        return [Item(BAD, "Disk full: " + text)]
    return [Item(WARN if free < 10 * floor else OK, text)]


def _size(n: int) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1024 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TB"


def _count(model) -> tuple[int, str]:
    """(rows, "" or "about"): exact for a small table, else the estimate that reads no rows."""
    estimate = table_estimate(model)
    if estimate < EXACT_BELOW:
        return model.objects.count(), ""
    return estimate, "about"


def counts() -> list[dict]:
    shown = ((Message, "messages"), (Memory, "memory rows"), (Conversation, "conversations"),
             (ReviewRun, "review runs"), (Resource, "resources"))
    return [{"label": label, "n": n, "approximate": approximate, "url": changelist_url(model)}
            for model, label in shown for n, approximate in [_count(model)]]


def attention(now: datetime | None = None) -> dict:
    """The index's summary: the counts, and each thing that needs (or does not need) the operator."""
    since = (now or timezone.now()) - timedelta(days=RECENT_DAYS)
    items = [*review_items(since), *approval_items(), *provider_items(), *job_items(since), *disk_items()]
    needs = [i for i in items if i.level != OK]
    return {"counts": counts(), "items": sorted(items, key=lambda i: (i.level == OK, i.level != BAD)),
            "needs_you": len(needs), "dashboard_url": reverse("fermix-dashboard")}
