"""The operator console for memory: messages, memory rows, conversations, review runs.

Rows change only through the services (memory.rows, memory.reviewer), which record the per-fact
history; the admin forms are read-only and every change is a confirmed POST. Adding and correcting a
row go through admission (`memory.admission`) with operator trust, as the API's do.
"""

from __future__ import annotations

import json
import threading
from collections import defaultdict

from django.contrib import admin, messages
from django.contrib.admin.helpers import ACTION_CHECKBOX_NAME
from django.contrib.admin.views.main import (
    ALL_VAR,
    ERROR_FLAG,
    IS_FACETS_VAR,
    IS_POPUP_VAR,
    ORDER_VAR,
    PAGE_VAR,
    SEARCH_VAR,
    TO_FIELD_VAR,
    ChangeList,
)
from django.db import transaction
from django.db.models import Case, QuerySet, Value, When
from django.http import Http404, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.utils.html import format_html, format_html_join
from django.utils.safestring import mark_safe

from fermix_site.admin_html import marked_html
from fermix_site.admin_kit import (
    BigTableAdmin,
    HumanChoicesFilter,
    ReadOnlyAdmin,
    StatusColumns,
    admin_url,
    changelist_url,
    human,
    json_html,
    link,
    model_output_html,
    pre,
    short,
    status_html,
    when,
)
from fermix_site.conf import conf
from memory import search
from memory.admission import Writer, admit_add, admit_replace
from memory.compactor import context_window_for
from memory.conversations import KINDS
from memory.forms import MemoryAddForm, MemoryCorrectForm, add_refusal
from memory.models import (
    APPROVAL_PENDING,
    Category,
    Conversation,
    Memory,
    MemoryEvent,
    MemorySource,
    Message,
    ReviewOperation,
    ReviewRun,
    ReviewState,
    Role,
    ScopeType,
    Trust,
)
from memory.prompt_files import placement, prompt_files_rebuild_after_commit
from memory.provenance import batch_range
from memory.reviewer import UndoError, review_undo
from memory.rows import MemoryRowError, memory_archive, memory_decide, memory_history, memory_restore
from memory.search import MAX_LIMIT, rank, recall
from providers.models import ModelCall
from resources.models import Resource
from resources.selectors import resource_agents

BULK_LIMIT = 500  # rows one archive confirmation may list
_page = threading.local()  # one render per (agent, file) for the changelist page being built


# --- filters: lookups from small tables or fixed lists, never DISTINCT over a big one ----------------


class ValueFilter(admin.SimpleListFilter):
    """Filter on one column by exact value; subclasses say where the choices come from.

    A value given in the URL applies even when it is not among the offered choices (a conversation
    link, a channel with no conversation row).
    """

    def has_output(self):
        return True

    def queryset(self, request, queryset):
        value = self.value()
        return queryset.filter(**{self.parameter_name: value}) if value else queryset


class ConversationAgentFilter(ValueFilter):
    title, parameter_name = "agent", "agent_id"

    def lookups(self, request, model_admin):
        agents = Conversation.objects.order_by("agent_id").values_list("agent_id", flat=True).distinct()
        return [(a, a) for a in agents[:100]]


class ChannelFilter(ValueFilter):
    title, parameter_name = "channel", "channel"

    def lookups(self, request, model_admin):
        channels = Conversation.objects.order_by("channel").values_list("channel", flat=True).distinct()
        return [(c, c) for c in channels[:100]]


class KindFilter(ValueFilter):
    title, parameter_name = "kind", "kind"

    def lookups(self, request, model_admin):
        return [(k, k) for k in sorted(KINDS)]


class RoleFilter(ValueFilter):
    title, parameter_name = "role", "role"

    def lookups(self, request, model_admin):
        return Role.choices


class GuestFilter(ValueFilter):
    title, parameter_name = "guest", "trust"

    def lookups(self, request, model_admin):
        return [(Trust.GUEST, "guest"), (Trust.OPERATOR, "operator")]


class MemoryAgentFilter(ValueFilter):
    title, parameter_name = "agent", "agent_id"

    def lookups(self, request, model_admin):
        agents = Memory.objects.order_by("agent_id").values_list("agent_id", flat=True).distinct()
        return [(a, a) for a in agents[:100]]


class OwnerFilter(ValueFilter):
    title, parameter_name = "owner", "owner_id"

    def lookups(self, request, model_admin):
        # Owners are whoever talks in a conversation, plus the agent's own owner: a small table, where
        # DISTINCT over every memory row would read the whole index.
        owners = set(Conversation.objects.values_list("owner_id", flat=True).distinct()[:100])
        owners.add(conf.memory.owner_id)
        return [(o, o) for o in sorted(owners)]


class CategoryFilter(ValueFilter):
    title, parameter_name = "category", "category"

    def lookups(self, request, model_admin):
        return [*Category.choices, ("", "none (conversation note)")]

    def queryset(self, request, queryset):
        if self.parameter_name in self.used_parameters:
            return queryset.filter(category=self.value() or "")
        return queryset


class ScopeTypeFilter(ValueFilter):
    title, parameter_name = "scope type", "scope_type"

    def lookups(self, request, model_admin):
        return ScopeType.choices


class ArchivedFilter(admin.SimpleListFilter):
    title, parameter_name = "archived", "archived"

    def lookups(self, request, model_admin):
        return [("no", "live"), ("yes", "archived"), ("pending", "waiting for approval")]

    def queryset(self, request, queryset):
        if self.value() in ("yes", "no"):
            return queryset.filter(archived_at__isnull=self.value() == "no")
        if self.value() == "pending":
            return queryset.filter(approval__state=APPROVAL_PENDING)
        return queryset


def _search_filters(request, names) -> dict:
    """The changelist's own filters, handed to the full-text search so it ranks within them."""
    return {name: request.GET[name] for name in names if request.GET.get(name)}


ORDER_PARAM, NEWEST = "order", "newest"  # ?order=newest: the search's results newest first
# The changelist's own parameters, which filter nothing.
CHANGELIST_PARAMS = {ALL_VAR, ERROR_FLAG, IS_FACETS_VAR, IS_POPUP_VAR, ORDER_VAR, PAGE_VAR, SEARCH_VAR, TO_FIELD_VAR,
                     ORDER_PARAM}


def _filter_params(request) -> dict:
    """The request's filters, as the changelist applies them: every parameter but its own."""
    return {name: value for name, value in request.GET.items() if name not in CHANGELIST_PARAMS}


class RecallChangeList(ChangeList):
    """The changelist of a recall search: `order` is the results' order switch, not a filter, and the
    filter, page and column links keep it."""

    def get_filters_params(self, params=None):
        lookup = super().get_filters_params(params)
        lookup.pop(ORDER_PARAM, None)
        return lookup


class RecallSearch(admin.ModelAdmin):
    """The changelist's search box runs recall as `memory_recall` does (hybrid when an embedding model is
    configured and an agent is chosen, else lexical), within the changelist's filters: best first (or
    newest first with `?order=newest`), and a "match" column with the signals (why, ranks) of each result,
    a reply marked as context, and the snippet with the matched words highlighted."""

    search_filters: tuple[str, ...] = ()
    corpus: search.Corpus
    change_list_template = "fermix/recall_change_list.html"

    def get_changelist(self, request, **kwargs):
        return RecallChangeList

    def get_search_results(self, request, queryset, search_term):
        request.recalled = {}
        if not search_term.strip():
            return queryset, False
        filters = _search_filters(request, self.search_filters)
        mode = recall.default_mode() if "agent_id" in filters else "lexical"
        answer = recall.recall(self.corpus, query=search_term, filters=filters, limit=MAX_LIMIT, mode=mode)
        request.recalled = {row.pk: row for row in answer.rows}
        if _filter_params(request) == filters:
            # Recall applied every filter of the request, so its rows are looked up by key alone. Beside the
            # filters, SQLite (which keeps no statistics) would walk the filtered column's index instead of
            # the keys: 85 ms for each of the page's two statements within an agent of 600,000 messages.
            queryset = self.get_queryset(request)
        found = queryset.filter(pk__in=list(request.recalled))
        if request.GET.get(ORDER_PARAM) == NEWEST:
            return found, False  # the changelist's own order: newest first
        order = Case(*(When(pk=pk, then=Value(n)) for n, pk in enumerate(request.recalled)), default=Value(MAX_LIMIT))
        # In recall's order, best first (the changelist orders before it searches).
        return found.annotate(recall_rank=order).order_by("recall_rank"), False

    def changelist_view(self, request, extra_context=None):
        if request.GET.get("q", "").strip():
            newest = request.GET.get(ORDER_PARAM) == NEWEST
            relevance, by_time = request.GET.copy(), request.GET.copy()
            relevance.pop(ORDER_PARAM, None)
            by_time[ORDER_PARAM] = NEWEST
            extra_context = {**(extra_context or {}), "recall_order": {
                "newest": newest, "relevance_url": f"?{relevance.urlencode()}", "newest_url": f"?{by_time.urlencode()}",
                "replies": self.corpus is search.MESSAGES}}
        return super().changelist_view(request, extra_context)

    def get_list_display(self, request):
        shown = super().get_list_display(request)
        if not request.GET.get("q", "").strip():
            return shown
        @admin.display(description="match")
        def match(obj):  # the changelist's search runs after this list is made: read its answer late
            row = getattr(request, "recalled", {}).get(obj.pk)
            return match_html(row) if row is not None else "—"

        return (*shown, match)


def match_html(row) -> str:
    """Why a recalled row is there: context or the signals' why and ranks, then its snippet."""
    signals = row.signals
    named = (("words", "lexical_rank"), ("meaning", "semantic_rank"))
    ranks = ", ".join(f"{name} {signals[key]}" for name, key in named if signals.get(key) is not None)
    label = format_html('<strong class="fx-context">context: reply</strong> · {}', signals["why"]) if (
        row.context == "reply") else format_html("{}", signals["why"] or "—")
    return format_html('{}{}<br><span class="fx-snippet">{}</span>', label,
                       format_html(" <small>({})</small>", ranks) if ranks else "",
                       marked_html(row.snippet, rank.MARK_START, rank.MARK_END))


# --- messages ---------------------------------------------------------------------------------------


def conversation_messages_url(channel: str, chat_id: str, thread_scope: str, agent_id: str | None = None) -> str:
    params = {"channel": channel, "chat_id": chat_id, "thread_scope": thread_scope}
    if agent_id:
        params["agent_id"] = agent_id
    return changelist_url(Message, **params)


@admin.register(Message)
class MessageAdmin(RecallSearch, BigTableAdmin, ReadOnlyAdmin):
    list_display = ("id", "created_at", "conversation", "role", "kind", "sender", "trust", "excerpt")
    list_display_links = ("id", "excerpt")
    list_filter = (ConversationAgentFilter, ChannelFilter, KindFilter, RoleFilter, GuestFilter)
    search_fields = ("content",)  # shows the box; the search itself is get_search_results
    search_help_text = f"Full-text search: any of the words, best {MAX_LIMIT} matches within the filters."
    fields = ("id", "agent_id", "owner_id", "conversation", "sender", "role", "kind", "trust", "created_at",
              "content_block", "metadata_block", "memories_from_it")
    readonly_fields = fields

    @admin.display(description="conversation")
    def conversation(self, obj):
        url = conversation_messages_url(obj.channel, obj.chat_id, obj.thread_scope, obj.agent_id)
        return link(url, obj.conversation_key)

    @admin.display(description="content")
    def excerpt(self, obj):
        return short(obj.content, 100)

    @admin.display(description="content")
    def content_block(self, obj):
        return pre(obj.content)

    @admin.display(description="metadata")
    def metadata_block(self, obj):
        return json_html(obj.metadata)

    @admin.display(description="memory rows from this message")
    def memories_from_it(self, obj):
        rows = Memory.objects.filter(agent_id=obj.agent_id, source_message_id=obj.id).order_by("-id")[:50]
        return format_html_join(", ", '<a href="{}">#{} {}</a>', ((admin_url(m), m.id, m.key) for m in rows)) or "—"

    search_filters = ("agent_id", "channel", "chat_id", "thread_scope", "kind", "role", "trust", "owner_id")
    corpus = search.MESSAGES


# --- memory rows ------------------------------------------------------------------------------------


def rebuild_after(request, rows: list[Memory]) -> None:
    """Re-render USER.md and MEMORY.md of every agent whose rows changed."""
    by_agent = defaultdict(list)
    for row in rows:
        by_agent[row.agent_id].append(row.id)
    for agent_id, ids in by_agent.items():
        rebuild = prompt_files_rebuild_after_commit(agent_id=agent_id, trigger="admin", memory_ids=ids,
                                                    extra_provenance={"operator": request.user.get_username()})
        if rebuild.error:
            messages.warning(request, f"Saved, but {agent_id}'s USER.md and MEMORY.md were not rebuilt "
                                      f"({rebuild.error}); the next rebuild writes them.")


def actor_html(event: MemoryEvent) -> str:
    """Who made a change, linked to the review run when the reviewer did."""
    actor = f"{event.actor_type}:{event.actor_id}" if event.actor_id else event.actor_type
    if event.run_id:
        return link(reverse("admin:memory_reviewrun_change", args=[event.run_id]), actor)
    return format_html("{}", actor)


@admin.register(Memory)
class MemoryAdmin(RecallSearch, BigTableAdmin):
    list_display = ("id", "key", "value_excerpt", "category", "scope_type", "owner_id", "state", "rendered",
                    "updated_at")
    list_display_links = ("id", "key")
    list_filter = (MemoryAgentFilter, OwnerFilter, CategoryFilter, ScopeTypeFilter, ArchivedFilter)
    search_fields = ("value",)
    search_help_text = f"Full-text search over keys and values: best {MAX_LIMIT} matches within the filters."
    actions = ("archive_selected", "restore_selected", "approve_selected", "reject_selected")
    raw_id_fields = ("source",)
    fields = ("id", "agent_id", "owner_id", "scope_type", "scope_id", "category", "key", "value_block",
              "confidence", "promote_target_label", "state", "rendered_detail", "provenance", "history", "created_at",
              "updated_at")
    readonly_fields = fields
    change_form_template = "admin/memory/memory/change_form.html"

    def has_add_permission(self, request):
        return self.has_archive_permission(request)  # the add page is admission's form (`add_view`)

    def has_delete_permission(self, request, obj=None):
        return False  # rows are archived, never deleted

    def has_change_permission(self, request, obj=None):
        return False  # the form is read-only; archive and restore are actions

    def has_archive_permission(self, request):
        return request.user.has_perm("memory.change_memory")

    search_filters = ("agent_id", "owner_id", "category", "scope_type")
    corpus = search.MEMORIES

    @admin.display(description="value")
    def value_excerpt(self, obj):
        return short(obj.value, 90)

    @admin.display(description="value")
    def value_block(self, obj):
        return pre(obj.value)

    @admin.display(description="state")
    def state(self, obj):
        pending = obj.pending
        if pending is not None:
            proposed = {"add": "add it", "archive": "archive it"}.get(pending["op"]) or format_html(
                "change it to “{}” ({})", pending.get("value", ""), pending.get("category", ""))
            return format_html('<strong class="fx-pending">waiting for approval</strong>: {}', proposed)
        if obj.archived_at is None:
            return "live"
        return format_html("archived {} by {}: {}", when(obj.archived_at), obj.archived_by,
                           obj.archive_reason or "no reason given")

    @admin.display(description="promote target")
    def promote_target_label(self, obj):
        return human(obj.promote_target)

    @admin.display(description="prompt file")
    def rendered(self, obj):
        renders = getattr(_page, "renders", None)
        where, why = placement(obj, renders if renders is not None else {})
        return where or format_html('<span class="fermix-muted" title="{}">not rendered</span>', why)

    @admin.display(description="rendered in")
    def rendered_detail(self, obj):
        where, why = placement(obj, {})
        return where or format_html("not rendered: {}", why)

    @admin.display(description="provenance")
    def provenance(self, obj):
        parts = []
        if obj.source_id:
            parts.append(format_html("source: {} ({})", obj.source.key, obj.source.source_type))
        elif obj.source_type:
            parts.append(format_html("source: {} {}", obj.source_type, obj.source_name))
        if obj.session_id:
            try:
                channel, chat_id, thread = obj.session_id.split(":", 2)
                parts.append(format_html("conversation: {}", link(
                    conversation_messages_url(channel, chat_id, thread, obj.agent_id), obj.session_id)))
            except ValueError:
                parts.append(format_html("session: {}", obj.session_id))
        if obj.run_id:
            url = reverse("admin:memory_reviewrun_change", args=[obj.run_id])
            parts.append(format_html("written by {}", link(url, f"review run {obj.run_id}")))
        if obj.source_message_id:
            url = reverse("admin:memory_message_change", args=[obj.source_message_id])
            parts.append(format_html("from {}", link(url, f"message #{obj.source_message_id}")))
        elif batch_range(obj.run):  # the review did not say which of its messages: all of them
            first, last = batch_range(obj.run)
            parts.append(format_html("from messages {}–{}",
                                     link(reverse("admin:memory_message_change", args=[first]), f"#{first}"),
                                     link(reverse("admin:memory_message_change", args=[last]), f"#{last}")))
        return format_html_join(mark_safe("<br>"), "{}", ((p,) for p in parts)) or "—"

    @admin.display(description="history (every change to this row)")
    def history(self, obj):
        events = list(memory_history(memory_id=obj.id))
        rows = format_html_join(
            "", "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            ((when(e.created_at), e.action, actor_html(e),
              short(e.before_value or "", 120) if e.before_value is not None else "—",
              short(e.after_value or "", 120), e.reason or "") for e in events))
        return format_html(
            '<table class="fermix-table"><thead><tr><th>when</th><th>change</th><th>by</th><th>before</th>'
            "<th>after</th><th>reason</th></tr></thead><tbody>{}</tbody></table>", rows)

    def changelist_view(self, request, extra_context=None):
        # The page renders after this returns (TemplateResponse): the cache lives until the next page.
        _page.renders = {}
        return super().changelist_view(request, extra_context)

    # --- archive and restore: the services, then the prompt files -----------------------------------

    def _archive(self, request, rows: list[Memory], reason: str) -> int:
        done = []
        for row in rows:
            try:
                memory_archive(memory_id=row.id, archived_by=f"operator:{request.user.get_username()}",
                               reason=reason, actor_type="operator", actor_id=request.user.get_username())
            except MemoryRowError as exc:
                self.message_user(request, f"#{row.id}: {exc}", messages.WARNING)
                continue
            self.log_change(request, row, f"Archived: {reason}")
            done.append(row)
        if done:
            rebuild_after(request, done)
        return len(done)

    def _restore(self, request, rows: list[Memory]) -> int:
        done = []
        for row in rows:
            try:
                memory_restore(memory_id=row.id, actor_type="operator", actor_id=request.user.get_username())
            except MemoryRowError as exc:
                self.message_user(request, f"#{row.id}: {exc}", messages.WARNING)
                continue
            self.log_change(request, row, "Restored")
            done.append(row)
        if done:
            rebuild_after(request, done)
        return len(done)

    def _confirm_archive(self, request, rows, *, single: bool, error: str = ""):
        context = {
            **self.admin_site.each_context(request),
            "title": "Archive memory rows",
            "opts": self.model._meta,
            "rows": rows,
            "single": single,
            "error": error,
            "reason": request.POST.get("reason", ""),
            "action_checkbox_name": ACTION_CHECKBOX_NAME,
        }
        return TemplateResponse(request, "fermix/memory_archive_confirm.html", context)

    @admin.action(description="Archive selected memory rows…", permissions=["archive"])
    def archive_selected(self, request, queryset: QuerySet):
        rows = list(queryset.order_by("-id")[: BULK_LIMIT + 1])
        if len(rows) > BULK_LIMIT:
            self.message_user(request, f"Select at most {BULK_LIMIT} rows to archive at once.", messages.ERROR)
            return None
        if request.POST.get("post") == "yes":
            reason = request.POST.get("reason", "").strip()
            if not reason:
                return self._confirm_archive(request, rows, single=False, error="Give a reason for the archive.")
            done = self._archive(request, rows, reason)
            self.message_user(request, f"Archived {done} memory row(s); USER.md and MEMORY.md rebuilt.",
                              messages.SUCCESS)
            return None
        return self._confirm_archive(request, rows, single=False)

    @admin.action(description="Restore selected memory rows", permissions=["archive"])
    def restore_selected(self, request, queryset: QuerySet):
        rows = list(queryset.filter(archived_at__isnull=False).order_by("-id")[:BULK_LIMIT])
        done = self._restore(request, rows)
        self.message_user(request, f"Restored {done} memory row(s); USER.md and MEMORY.md rebuilt.",
                          messages.SUCCESS)

    @admin.action(description="Approve the selected rows' waiting changes", permissions=["archive"])
    def approve_selected(self, request, queryset: QuerySet):
        self._decide(request, queryset, approve=True)

    @admin.action(description="Reject the selected rows' waiting changes", permissions=["archive"])
    def reject_selected(self, request, queryset: QuerySet):
        self._decide(request, queryset, approve=False)

    def _decide(self, request, queryset: QuerySet, *, approve: bool) -> None:
        rows, done = list(queryset.filter(approval__state=APPROVAL_PENDING).order_by("id")[:BULK_LIMIT]), []
        for row in rows:
            row = memory_decide(memory_id=row.id, approve=approve, actor_id=request.user.get_username(),
                                reason=f"{'approved' if approve else 'rejected'} in the console")
            self.log_change(request, row, "Approved" if approve else "Rejected")
            done.append(row)
        if done:
            rebuild_after(request, done)
        verb = "Approved" if approve else "Rejected"
        self.message_user(request, f"{verb} {len(done)} waiting change(s)" + (
            "; USER.md and MEMORY.md rebuilt." if done else ": none of the selected rows had one."),
            messages.SUCCESS if done else messages.WARNING)

    def get_urls(self):
        wrap = self.admin_site.admin_view
        return [
            path("<int:memory_id>/archive/", wrap(self.archive_view), name="memory_memory_archive"),
            path("<int:memory_id>/restore/", wrap(self.restore_view), name="memory_memory_restore"),
            path("<int:memory_id>/correct/", wrap(self.correct_view), name="memory_memory_correct"),
            *super().get_urls(),
        ]

    def _row_for_change(self, request, memory_id: int) -> Memory:
        if not self.has_archive_permission(request):
            raise Http404
        row = Memory.objects.filter(pk=memory_id).first()
        if row is None:
            raise Http404("no such memory row")
        return row

    def archive_view(self, request, memory_id: int):
        row = self._row_for_change(request, memory_id)
        if request.method == "POST":
            reason = request.POST.get("reason", "").strip()
            if not reason:
                return self._confirm_archive(request, [row], single=True, error="Give a reason for the archive.")
            if self._archive(request, [row], reason):
                self.message_user(request, f"Archived memory row #{row.id}; USER.md and MEMORY.md rebuilt.",
                                  messages.SUCCESS)
            return HttpResponseRedirect(admin_url(row))
        return self._confirm_archive(request, [row], single=True)

    def restore_view(self, request, memory_id: int):
        row = self._row_for_change(request, memory_id)
        if request.method == "POST":
            if self._restore(request, [row]):
                self.message_user(request, f"Restored memory row #{row.id}; USER.md and MEMORY.md rebuilt.",
                                  messages.SUCCESS)
            return HttpResponseRedirect(admin_url(row))
        context = {**self.admin_site.each_context(request), "title": "Restore a memory row",
                   "opts": self.model._meta, "row": row}
        return TemplateResponse(request, "fermix/memory_restore_confirm.html", context)

    def render_change_form(self, request, context, *args, obj=None, **kwargs):
        context["can_archive"] = obj is not None and self.has_archive_permission(request)
        return super().render_change_form(request, context, *args, obj=obj, **kwargs)

    # --- add and correct: admission with operator trust, then the prompt files ------------------------

    def _writer(self, request, *, agent_id: str, owner_id: str) -> Writer:
        """The operator at the console: admission's operator column, as the API's operator key."""
        return Writer(kind="operator", agent_id=agent_id, owner_id=owner_id, trust=Trust.OPERATOR,
                      actor_id=request.user.get_username())

    def _write_page(self, request, form, title: str, row: Memory | None = None):
        context = {**self.admin_site.each_context(request), "title": title, "opts": self.model._meta,
                   "form": form, "row": row}
        return TemplateResponse(request, "fermix/memory_write.html", context)

    def add_view(self, request, form_url="", extra_context=None):
        """Add a row through admission (`admit_add`), as `POST /agents/{agent}/memories` does."""
        if not self.has_add_permission(request):
            raise Http404
        agents = sorted({*resource_agents(), conf.memory.agent_id})
        initial = {"agent_id": conf.memory.agent_id, "owner_id": conf.memory.owner_id}
        form = MemoryAddForm(request.POST or None, initial=initial, agents=agents)
        if request.method != "POST" or not form.is_valid():
            return self._write_page(request, form, "Add a memory row")
        data = form.cleaned_data
        try:
            with transaction.atomic():  # a refusal leaves nothing behind
                row, action = admit_add(self._writer(request, agent_id=data["agent_id"], owner_id=data["owner_id"]),
                                        key=data["key"], value=data["value"], category=data["category"],
                                        reason=data["reason"])
        except MemoryRowError as exc:
            add_refusal(form, exc)
            return self._write_page(request, form, "Add a memory row")
        if action == "unchanged":
            self.message_user(request, f"Memory row #{row.id} already holds this; nothing changed.", messages.INFO)
        else:
            self.log_change(request, row, f"{action}: {data['reason']}")
            rebuild_after(request, [row])
            said = {"add": "Added", "replace": "Replaced the live row with this key:",
                    "resave": "Brought back the archived row with this key:"}.get(action, action)
            self.message_user(request, f"{said} memory row #{row.id} ({row.scope_type} scope); USER.md and "
                                       "MEMORY.md rebuilt.", messages.SUCCESS)
        return HttpResponseRedirect(admin_url(row))

    def correct_view(self, request, memory_id: int):
        """Correct a row's value or category through admission (`admit_replace`), as `PATCH /memories/{id}`."""
        row = self._row_for_change(request, memory_id)
        form = MemoryCorrectForm(request.POST or None, initial={"value": row.value, "category": row.category})
        if not row.category:  # a conversation note stays a note unless a category is chosen
            form.fields["category"].choices = [("", "none (a conversation note)"), *Category.choices]
        title = f"Correct memory row #{row.id}"
        if request.method != "POST" or not form.is_valid():
            return self._write_page(request, form, title, row)
        data = form.cleaned_data
        category = None if data["category"] == row.category else data["category"]
        try:
            with transaction.atomic():
                corrected = admit_replace(self._writer(request, agent_id=row.agent_id, owner_id=row.owner_id),
                                          memory_id=row.id, value=data["value"], category=category,
                                          reason=data["reason"])
        except MemoryRowError as exc:
            add_refusal(form, exc)
            return self._write_page(request, form, title, row)
        if corrected.updated_at == row.updated_at:
            self.message_user(request, f"Memory row #{row.id} already holds this; nothing changed.", messages.INFO)
        else:
            self.log_change(request, corrected, f"Corrected: {data['reason']}")
            rebuild_after(request, [corrected])
            self.message_user(request, f"Corrected memory row #{row.id}; USER.md and MEMORY.md rebuilt.",
                              messages.SUCCESS)
        return HttpResponseRedirect(admin_url(row))


@admin.register(MemoryEvent)
class MemoryEventAdmin(BigTableAdmin, ReadOnlyAdmin):
    list_display = ("id", "created_at", "memory_link", "action", "actor", "after_excerpt", "reason")
    list_filter = ("action", "actor_type")
    raw_id_fields = ("memory",)

    @admin.display(description="memory row")
    def memory_link(self, obj):
        return link(reverse("admin:memory_memory_change", args=[obj.memory_id]), f"#{obj.memory_id}")

    @admin.display(description="by")
    def actor(self, obj):
        return actor_html(obj)

    @admin.display(description="after")
    def after_excerpt(self, obj):
        return short(obj.after_value or "", 80)


@admin.register(MemorySource)
class MemorySourceAdmin(ReadOnlyAdmin):
    list_display = ("key", "source_type", "name", "agent_id", "created_at")
    list_filter = ("source_type",)
    search_fields = ("key", "name")


# --- conversations and compaction checkpoints -------------------------------------------------------


def context_share(conv: Conversation) -> tuple[float | None, int | None]:
    """(last peak prompt tokens / context window, the window) for a conversation."""
    window = context_window_for(conv, None)
    if not conv.last_peak_prompt_tokens or not window:
        return None, window
    return conv.last_peak_prompt_tokens / window, window


@admin.register(Conversation)
class ConversationAdmin(BigTableAdmin, ReadOnlyAdmin):
    list_display = ("key", "agent_id", "owner_id", "last_peak_prompt_tokens", "context", "checkpoint",
                    "updated_at")
    list_filter = (ConversationAgentFilter, ChannelFilter)
    search_fields = ("=key", "chat_id")
    raw_id_fields = ("checkpoint_message",)
    fields = ("agent_id", "key", "owner_id", "context", "window_start_id", "checkpoint", "checkpoints",
              "links", "review", "compaction_failed_at", "created_at", "updated_at")
    readonly_fields = fields

    @admin.display(description="peak context vs compaction threshold")
    def context(self, obj):
        share, window = context_share(obj)
        threshold = conf.compaction.threshold
        if share is None:
            return format_html("no measurement yet (threshold {}%)", round(threshold * 100))
        over = " — over the threshold" if share >= threshold else ""
        return format_html("{}% of {} tokens (threshold {}%){}", round(share * 100, 1), window,
                           round(threshold * 100), over)

    @admin.display(description="checkpoint message")
    def checkpoint(self, obj):
        if not obj.checkpoint_message_id:
            return "—"
        return link(reverse("admin:memory_message_change", args=[obj.checkpoint_message_id]),
                    f"#{obj.checkpoint_message_id}")

    @admin.display(description="checkpoint revisions")
    def checkpoints(self, obj):
        resource = Resource.objects.filter(agent_id=obj.agent_id, resource_type="checkpoint", scope_id=obj.key).first()
        if resource is None:
            return "none yet"
        return link(admin_url(resource), f"checkpoint resource, current revision {resource.current_revision}")

    @admin.display(description="browse")
    def links(self, obj):
        channel, chat_id, thread = obj.key.split(":", 2)
        return format_html(
            '{} · {} · {}',
            link(conversation_messages_url(channel, chat_id, thread, obj.agent_id), "messages"),
            link(changelist_url(ReviewRun, agent_id=obj.agent_id, conversation_key=obj.key), "review runs"),
            link(changelist_url(Memory, agent_id=obj.agent_id, scope_id=obj.key), "conversation-scoped rows"),
        )

    @admin.display(description="reviewer state")
    def review(self, obj):
        state = ReviewState.objects.filter(agent_id=obj.agent_id, conversation_key=obj.key).first()
        if state is None:
            return "never reviewed"
        return format_html("cursor at message #{}, last reviewed {}, status {}, failures {} {}",
                           state.cursor_message_id, when(state.last_reviewed_at) if state.last_reviewed_at else "never",
                           status_html(state.status) if state.status else "—",
                           state.failure_count, state.last_error[:200])


# --- the reviewer: runs, their operations, undo -----------------------------------------------------


class ReviewOperationInline(admin.TabularInline):
    model = ReviewOperation
    fields = ("index", "op", "status_badge", "code_label", "action", "memory_link", "before", "after", "messages",
              "reason", "notes_text")
    readonly_fields = fields
    extra = 0
    can_delete = False

    def has_add_permission(self, request, obj=None):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    @admin.display(description="memory row")
    def memory_link(self, obj):
        if not obj.memory_id:
            return "—"
        return link(reverse("admin:memory_memory_change", args=[obj.memory_id]), f"#{obj.memory_id}")

    @admin.display(description="status")
    def status_badge(self, obj):
        return status_html(obj.status)

    @admin.display(description="code")
    def code_label(self, obj):
        return human(obj.code) if obj.code else "—"

    @admin.display(description="messages")
    def messages(self, obj):
        return ", ".join(f"#{i}" for i in obj.message_ids) or "—"

    @admin.display(description="notes")
    def notes_text(self, obj):
        return "; ".join(f"{human(n.get('code'))}: {n.get('detail')}" for n in obj.notes if isinstance(n, dict)) or "—"

    @admin.display(description="before")
    def before(self, obj):
        return short(obj.before_value or "", 100) if obj.before_value is not None else "—"

    @admin.display(description="after")
    def after(self, obj):
        return short(obj.after_value or "", 100) or short(json.dumps(obj.proposed, ensure_ascii=False), 100)


@admin.register(ReviewRun)
class ReviewRunAdmin(StatusColumns, BigTableAdmin, ReadOnlyAdmin):
    list_display = ("id", "started_at", "took", "conversation_key", "agent_id", "trigger", "status_badge", "ops",
                    "reason_excerpt")
    list_filter = (("status", HumanChoicesFilter), "trigger", ConversationAgentFilter)
    search_fields = ("=conversation_key",)
    inlines = (ReviewOperationInline,)
    fields = ("agent_id", "conversation_key", "owner_id", "trigger", "status_badge", "reason", "ops", "input",
              "model_call", "output_block", "started_at", "finished_at", "took", "undone_at", "undone_by")
    readonly_fields = fields
    change_form_template = "admin/memory/reviewrun/change_form.html"


    @admin.display(description="added / replaced / archived / skipped")
    def ops(self, obj):
        return f"{obj.ops_added} / {obj.ops_replaced} / {obj.ops_archived} / {obj.ops_skipped}"

    @admin.display(description="reason")
    def reason_excerpt(self, obj):
        return short(obj.reason, 80)

    @admin.display(description="input messages")
    def input(self, obj):
        ids = obj.input_message_ids or []
        links = format_html_join(" ", '<a href="{}">#{}</a>',
                                 ((reverse("admin:memory_message_change", args=[i]), i) for i in ids[:200]))
        return format_html("{} message(s), {} tokens: {}", len(ids), obj.input_tokens, links) if ids else "—"

    @admin.display(description="model call")
    def model_call(self, obj):
        if not obj.model_call_id:
            return "—"

        return link(changelist_url(ModelCall, q=obj.model_call_id), obj.model_call_id)

    @admin.display(description="model output")
    def output_block(self, obj):
        return model_output_html(obj.output) if obj.output else "—"

    def get_urls(self):
        return [
            path("<int:run_id>/undo/", self.admin_site.admin_view(self.undo_view), name="memory_reviewrun_undo"),
            *super().get_urls(),
        ]

    def undo_view(self, request, run_id: int):
        run = ReviewRun.objects.filter(pk=run_id).first()
        if run is None or not request.user.has_perm("memory.change_memory"):
            raise Http404("no such review run")
        if request.method == "POST":
            try:
                result = review_undo(run_id=run.id, actor=f"operator:{request.user.get_username()}")
            except UndoError as exc:
                self.message_user(request, f"Not undone ({exc.code}): {exc}", messages.ERROR)
            else:
                self.log_change(request, run, "Undone")
                files = "not rebuilt (see the log)" if result["warnings"] else "rebuilt"
                self.message_user(request, f"Undid review run {run.id}: {result['operations_reversed']} "
                                           f"operation(s) reversed; USER.md and MEMORY.md {files}.", messages.SUCCESS)
            return HttpResponseRedirect(admin_url(run))
        context = {**self.admin_site.each_context(request), "title": f"Undo review run {run.id}",
                   "opts": self.model._meta, "run": run,
                   "operations": run.operations.filter(status="applied").order_by("index")}
        return TemplateResponse(request, "fermix/review_undo_confirm.html", context)


@admin.register(ReviewState)
class ReviewStateAdmin(StatusColumns, ReadOnlyAdmin):
    list_display = ("conversation_key", "agent_id", "cursor_message_id", "last_reviewed_at", "status_badge",
                    "failure_count", "last_failure_at")
    list_filter = ("status",)
    search_fields = ("=conversation_key",)


