"""Shared pieces of the operator console: cheap counts for big tables, read-only admins, safe HTML.

Everything shown here may have come from a user or a model, so every helper escapes (format_html,
escape) or sanitises (nh3) and none marks raw input safe.
"""

from __future__ import annotations

from functools import cached_property
from urllib.parse import urlencode

from django.contrib import admin
from django.core.paginator import Paginator
from django.db import connection
from django.db.models import QuerySet
from django.urls import reverse
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
