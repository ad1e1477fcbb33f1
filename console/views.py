"""Console pages that belong to no single model: the dashboard and the web setup page."""

from __future__ import annotations

from datetime import timedelta

from django import forms
from django.contrib import admin, messages
from django.db.models import Count, F, Q, TextField
from django.db.models.functions import Cast, TruncDate
from django.http import HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import reverse
from django.utils import timezone

from console import charts, web_setup
from fermix_site.conf import ConfigError, conf
from memory.admin import context_share
from memory.models import APPROVAL_PENDING, Conversation, Memory, MemoryEvent, ReviewOperation, ReviewRun
from memory.review_ops import DUPLICATE, NEAR_DUPLICATE
from memory.rows import PROPOSED_BY
from resources.catalog import display_name
from resources.models import ResourceRevision

DAYS = 30
TOP_CONVERSATIONS = 25


def _days(now) -> list[str]:
    today = now.date()
    return [(today - timedelta(days=n)).isoformat() for n in range(DAYS - 1, -1, -1)]


def review_chart(since, days):
    rows = (ReviewRun.objects.filter(started_at__gte=since).annotate(day=TruncDate("started_at"))
            .values_list("day", "status").annotate(n=Count("id")).order_by())
    values = {(day.isoformat(), status): n for day, status, n in rows}
    series = [s for s in ReviewRun.Status.values if any(k[1] == s for k in values)]
    totals = {s: sum(n for (d, st), n in values.items() if st == s) for s in series}
    return {"svg": charts.stacked_columns(days, series, values, label="Review runs per day by outcome"),
            "legend": charts.legend(series), "totals": totals}


def memory_chart():
    rows = (Memory.objects.values_list("category", "scope_type")
            .annotate(live=Count("id", filter=Q(archived_at__isnull=True)),
                      archived=Count("id", filter=Q(archived_at__isnull=False))).order_by())
    bars, archived = [], 0
    for category, scope_type, live, gone in rows:
        archived += gone
        if live:
            bars.append((f"{category or 'note'} · {scope_type}", live))
    bars.sort(key=lambda bar: -bar[1])
    return {"svg": charts.horizontal_bars(bars, label="Live memory rows by category and scope"),
            "live": sum(n for _, n in bars), "archived": archived}


def context_chart():
    threshold = conf.compaction.threshold
    candidates = Conversation.objects.filter(last_peak_prompt_tokens__isnull=False).order_by(
        "-last_peak_prompt_tokens")[:200]
    shares = []
    for conv in candidates:
        share, _ = context_share(conv)
        if share is not None:
            shares.append((f"{conv.agent_id}/{conv.key}", share, threshold))
    shares.sort(key=lambda row: -row[1])
    top = shares[:TOP_CONVERSATIONS]
    return {"svg": charts.gauges(top, label="Last peak context per conversation against the compaction threshold"),
            "threshold": threshold, "over": sum(1 for _, s, t in shares if s >= t), "shown": len(top)}


def revision_chart(since, days):
    rows = (ResourceRevision.objects.filter(created_at__gte=since).annotate(day=TruncDate("created_at"))
            .values_list("resource_type", "day").annotate(n=Count("id")).order_by())
    series: dict[str, dict[str, int]] = {}
    for resource_type, day, n in rows:
        series.setdefault(display_name(resource_type), {})[day.isoformat()] = n
    ordered = dict(sorted(series.items()))
    return {"svg": charts.small_multiples(days, ordered, label="Revisions per resource per day")}


JUNK_DAYS = 7  # a row archived or undone this soon after it was written was probably not worth keeping


def quality_chart(since, days):
    """The reviewer's operations per day, applied or skipped by code; duplicates caught; rows archived or
    undone within a week of being written (a proxy for junk); directive changes waiting for approval."""
    operations = ReviewOperation.objects.filter(run__started_at__gte=since)
    rows = (operations.annotate(day=TruncDate("run__started_at")).values_list("day", "status", "code")
            .annotate(n=Count("id")).order_by())
    values: dict[tuple[str, str], int] = {}
    for day, status, code, n in rows:
        name = "applied" if status == "applied" else f"skipped: {code or 'unknown'}"
        values[(day.isoformat(), name)] = values.get((day.isoformat(), name), 0) + n
    totals: dict[str, int] = {}
    for (_, name), n in values.items():
        totals[name] = totals.get(name, 0) + n
    series = sorted(totals, key=lambda name: (name != "applied", -totals[name], name))
    duplicates = (operations.filter(code=DUPLICATE).count()
                  + operations.filter(status="applied").annotate(text=Cast("notes", TextField()))
                  .filter(text__contains=NEAR_DUPLICATE).count())
    soon = timedelta(days=JUNK_DAYS)
    archived_soon = (Memory.objects.filter(archived_at__gte=since, archived_at__lte=F("created_at") + soon)
                     .exclude(archived_by=PROPOSED_BY).count())
    undone_soon = MemoryEvent.objects.filter(action=MemoryEvent.Action.REVERT, created_at__gte=since,
                                             created_at__lte=F("memory__created_at") + soon).count()
    return {"svg": charts.stacked_columns(days, series, values, label="Reviewer operations per day by outcome"),
            "legend": charts.legend(series), "totals": totals, "duplicates": duplicates,
            "junk": archived_soon + undone_soon, "junk_days": JUNK_DAYS,
            "pending": Memory.objects.filter(approval__state=APPROVAL_PENDING).count()}


def dashboard(request):
    """Pictures of the last 30 days: reviews, the reviewer's quality, memory rows, context use, revisions."""
    now = timezone.now()
    days = _days(now)
    since = now - timedelta(days=DAYS)
    context = {
        **admin.site.each_context(request),
        "title": "Dashboard",
        "days": DAYS,
        "reviews": review_chart(since, days),
        "quality": quality_chart(since, days),
        "memory": memory_chart(),
        "context_use": context_chart(),
        "revisions": revision_chart(since, days),
    }
    return TemplateResponse(request, "fermix/dashboard.html", context)


class SettingsForm(forms.Form):
    review_interval_hours = forms.CharField(label=web_setup.KNOBS[0].label, help_text=web_setup.KNOBS[0].help)
    threshold = forms.CharField(label=web_setup.KNOBS[1].label, help_text=web_setup.KNOBS[1].help)

    def _parsed(self, name: str, knob: web_setup.Knob):
        try:
            return knob.parse(self.cleaned_data[name].strip())
        except ConfigError as exc:
            raise forms.ValidationError(str(exc)) from None

    def clean_review_interval_hours(self):
        return self._parsed("review_interval_hours", web_setup.KNOBS[0])

    def clean_threshold(self):
        return self._parsed("threshold", web_setup.KNOBS[1])


def settings_page(request):
    """The setup wizard's knobs, validated with the start-up parsers and written to config.toml."""
    current = conf.get()
    can_change = request.user.is_superuser
    initial = {"review_interval_hours": f"{current.memory.review_interval_hours:g}",
               "threshold": f"{current.compaction.threshold:g}"}
    form = SettingsForm(request.POST if request.method == "POST" else None, initial=initial)
    if request.method == "POST" and can_change and form.is_valid():
        try:
            path = web_setup.write_settings({
                "memory.review_interval_hours": form.cleaned_data["review_interval_hours"],
                "compaction.threshold": form.cleaned_data["threshold"],
            })
        except ConfigError as exc:
            form.add_error(None, str(exc))
        else:
            conf.reload()
            messages.success(request, f"Saved to {path}; every process uses the new values within a second.")
            return HttpResponseRedirect(reverse("fermix-settings"))
    elif request.method == "POST" and not can_change:
        messages.error(request, "Only a superuser can change the settings.")
    context = {
        **admin.site.each_context(request),
        "title": "Settings",
        "form": form,
        "can_change": can_change,
        "config_path": current.config_path,
        "overridden": web_setup.overridden_by_environment(),
        "current": current,
    }
    return TemplateResponse(request, "fermix/settings.html", context)
