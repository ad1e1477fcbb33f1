"""Shared pieces of the operator console: cheap counts for big tables, read-only admins, safe HTML.

Everything shown here may have come from a user or a model, so every helper escapes (format_html,
escape) or sanitises (nh3) and none marks raw input safe.
"""

from __future__ import annotations

import json
from datetime import datetime
from functools import cached_property
from urllib.parse import urlencode

from django.contrib import admin
from django.core.paginator import Paginator
from django.db import connection
from django.db.models import QuerySet
from django.urls import reverse
from django.utils import formats, timezone
from django.utils.html import format_html
from django.utils.text import Truncator

from fermix_site import queries


def table_estimate(model) -> int:
    """Rows in the model's table, estimated without reading it: planner statistics or the highest id.

    Messages and memories are never deleted (only archived), so the highest id is close to the count.
    """
    return queries.table_estimate(connection, model._meta.db_table)


class EstimatedCountPaginator(Paginator):
    """A paginator that never counts a whole big table.

    Unfiltered: the table estimate (exact COUNT only when the table is small). Filtered or searched:
    COUNT over at most `cap` + 1 rows, so a filter that matches most of a million rows costs no more
    than reading ten thousand index entries. `approximate` tells the page how to word the number.
    """

    cap = 10_000

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.approximate = ""  # "", "about" or "more than"

    @cached_property
    def count(self) -> int:
        rows = self.object_list
        if not isinstance(rows, QuerySet):
            return len(rows)
        if not rows.query.where:
            estimate = table_estimate(rows.model)
            if estimate > self.cap:
                self.approximate = "about"
                return estimate
        counted = rows.order_by()[: self.cap + 1].count()
        if counted > self.cap:
            self.approximate = "more than"
            return self.cap
        return counted


class BigTableAdmin(admin.ModelAdmin):
    """Changelist settings for tables that only grow: no COUNT(*), no facets, newest first."""

    paginator = EstimatedCountPaginator
    show_full_result_count = False
    show_facets = admin.ShowFacets.NEVER
    list_per_page = 100
    ordering = ("-id",)


class ReadOnlyAdmin(admin.ModelAdmin):
    """An audit view: rows are written by the services, never by a form."""

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False


def short(text: str, chars: int = 80) -> str:
    """One line of at most `chars` characters (escaped later by the admin like any string)."""
    return Truncator(" ".join((text or "").split())).chars(chars)


def admin_url(obj, view: str = "change") -> str:
    opts = obj._meta
    return reverse(f"admin:{opts.app_label}_{opts.model_name}_{view}", args=[obj.pk])


def changelist_url(model, **params) -> str:
    opts = model._meta
    url = reverse(f"admin:{opts.app_label}_{opts.model_name}_changelist")
    return f"{url}?{urlencode(params)}" if params else url


def link(url: str, text) -> str:
    return format_html('<a href="{}">{}</a>', url, text)


def pre(text: str) -> str:
    """Multi-line text as an escaped, wrapped block."""
    return format_html('<pre class="fermix-pre">{}</pre>', text or "")


# --- how values read: labels, dates, durations, statuses, JSON -----------------------------------

# Enum values whose words are not plain English once the underscores go.
LABELS = {"user_md": "USER.md", "memory_md": "MEMORY.md", "identity_md": "IDENTITY.md", "fermix_md": "FERMIX.md",
          "soul_md": "SOUL.md", "realtime_md": "REALTIME.md", "": "none"}
GOOD, QUIET, BAD, BUSY = "ok", "nothing_to_save", "failed", "running"
STATUS_CLASSES = {  # the colour of each status value: green, blue, red, amber, grey
    "ok": GOOD, "applied": GOOD, "silent": QUIET, "nothing_to_save": QUIET, "failed": BAD, "denied": BAD,
    "fallback": BUSY, "running": BUSY, "pending": BUSY, "undone": "undone", "expired": "undone", "skipped": "undone",
}
FOLD_CHARS = 80  # JSON longer than this shows its start and opens on a click


def human(value) -> str:
    """An enum value as a reader says it: user_md → USER.md, nothing_to_save → nothing to save."""
    value = "" if value is None else str(value)
    return LABELS.get(value, value.replace("_", " "))


def when(moment: datetime | None) -> str:
    """The console's one date format (settings.FORMAT_MODULE_PATH), in the site's time zone."""
    if moment is None:
        return "—"
    if timezone.is_aware(moment):
        moment = timezone.localtime(moment)
    return formats.date_format(moment, "DATETIME_FORMAT")


def duration(start: datetime | None, end: datetime | None) -> str:
    """How long something took: 850 ms, 12.4 s, 3 min 05 s, 2 h 10 min; "—" while it runs."""
    if start is None or end is None:
        return "—"
    seconds = max((end - start).total_seconds(), 0.0)
    if seconds < 1:
        return f"{round(seconds * 1000)} ms"
    if seconds < 60:
        return f"{seconds:.1f} s"
    minutes, seconds = divmod(round(seconds), 60)
    if minutes < 60:
        return f"{minutes} min {seconds:02d} s"
    return f"{minutes // 60} h {minutes % 60:02d} min"


def status_html(value: str, label: str | None = None) -> str:
    """A status as a coloured badge (ok green, nothing to save blue, failed red, running amber)."""
    css = STATUS_CLASSES.get(value, "other")
    return format_html('<span class="fx-status fx-status-{}">{}</span>', css, label or human(value))


class StatusColumns:
    """The `status_badge` and `took` columns of an admin over rows with `status` (and, for `took`,
    `started_at` and `finished_at`): one definition for review runs, job runs, states and proposals."""

    @admin.display(description="status", ordering="status")
    def status_badge(self, obj):
        return status_html(obj.status) if obj.status else "—"

    @admin.display(description="took")
    def took(self, obj):
        return duration(obj.started_at, obj.finished_at)


def json_html(data, *, fold: int = FOLD_CHARS) -> str:
    """JSON, indented and escaped; when long, folded to its one-line form until clicked."""
    if data in (None, "", {}, []):
        return "—"
    flat = json.dumps(data, ensure_ascii=False, sort_keys=True)
    if len(flat) <= fold:
        return format_html("<code>{}</code>", flat)
    pretty = json.dumps(data, indent=2, ensure_ascii=False, sort_keys=True)
    return format_html('<details class="fx-fold"><summary><code>{}</code></summary>{}</details>',
                       Truncator(flat).chars(fold // 2), pre(pretty))


def model_output_html(text: str) -> str:
    """A model's answer: indented when it is JSON (as the reviewer's is), else as written."""
    try:
        data = json.loads(text)
    except (TypeError, ValueError):
        return pre(text)
    if not isinstance(data, (dict, list)):
        return pre(text)
    return pre(json.dumps(data, indent=2, ensure_ascii=False))


class HumanChoicesFilter(admin.ChoicesFieldListFilter):
    """A choices filter whose choices read as words (`human`), not as enum text."""

    def choices(self, changelist):
        labels = {str(title): human(value) for value, title in self.field.flatchoices}
        for choice in super().choices(changelist):
            yield {**choice, "display": labels.get(str(choice["display"]), choice["display"])}
