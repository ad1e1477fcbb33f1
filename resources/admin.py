"""The operator console for versioned resources: history, content, diffs, rollback, provenance.

Rollback goes through `resources.services.resource_rollback` only, after a preview and a confirmation;
checkpoints are audit records and are never offered for rollback. A bootstrap file is edited in a text
area, previewed as a diff, then written by `resource_write_file` as a `manual_edit` revision.
"""

from __future__ import annotations

import json

from django.contrib import admin, messages
from django.http import Http404, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import path, reverse

from fermix_site.admin_html import line_diff, markdown_html, side_by_side
from fermix_site.admin_kit import (
    BigTableAdmin,
    HumanChoicesFilter,
    ReadOnlyAdmin,
    StatusColumns,
    human,
    json_html,
    short,
    when,
)
from resources.catalog import BOOTSTRAP_FILES, content_hash, display_name, rollback_caveat
from resources.errors import CheckpointRollback, ResourceError, UnknownResource, UnknownRevision
from resources.forms import BootstrapEditForm
from resources.models import MutationSource, Resource, ResourceRevision, ResourceType, SoulProposal
from resources.selectors import revision_of
from resources.services import resource_capture_file, resource_rollback, resource_write_file

HISTORY_PAGE = 200
MEMORY_FILE_TYPES = ("user_md", "memory_md")


def _revisions(resource: Resource):
    return ResourceRevision.objects.filter(agent_id=resource.agent_id, resource_type=resource.resource_type,
                                           scope_id=resource.scope_id)


def revision_or_404(resource: Resource, number) -> ResourceRevision:
    try:
        found = revision_of(agent_id=resource.agent_id, resource_type=resource.resource_type,
                            scope_id=resource.scope_id, number=int(number))
    except (TypeError, ValueError):
        found = None
    if found is None:
        raise Http404(f"{resource} has no revision {number}")
    return found


def revision_title(revision: ResourceRevision) -> str:
    """A revision as the console names it: `SOUL.md r3 (2026-11-29 20:31, rollback)`."""
    scope = "" if revision.scope_id == "global" else f" [{revision.scope_id}]"
    return (f"{display_name(revision.resource_type)}{scope} r{revision.revision} ({when(revision.created_at)}, "
            f"{human(revision.mutation_source)})")


def _current(resource: Resource) -> ResourceRevision | None:
    return revision_of(agent_id=resource.agent_id, resource_type=resource.resource_type, scope_id=resource.scope_id,
                       number=resource.current_revision)


@admin.register(Resource)
class ResourceAdmin(BigTableAdmin, ReadOnlyAdmin):
    list_display = ("name", "agent_id", "scope_id", "current_revision", "updated_at")
    list_filter = ("resource_type", "agent_id")
    search_fields = ("=scope_id",)
    ordering = ("agent_id", "resource_type", "scope_id")

    @admin.display(description="resource", ordering="resource_type")
    def name(self, obj):
        return display_name(obj.resource_type)

    def get_urls(self):
        wrap = self.admin_site.admin_view
        return [
            path("<int:pk>/revisions/<int:number>/", wrap(self.revision_view), name="resources_resource_revision"),
            path("<int:pk>/diff/", wrap(self.diff_view), name="resources_resource_diff"),
            path("<int:pk>/rollback/<int:number>/", wrap(self.rollback_view), name="resources_resource_rollback"),
            path("<int:pk>/edit/", wrap(self.edit_view), name="resources_resource_edit"),
            *super().get_urls(),
        ]

    def _resource(self, request, pk) -> Resource:
        if not self.has_view_permission(request):
            raise Http404
        resource = Resource.objects.filter(pk=pk).first()
        if resource is None:
            raise Http404("no such resource")
        return resource

    def _context(self, request, resource: Resource, title: str, **extra) -> dict:
        return {**self.admin_site.each_context(request), "opts": self.model._meta, "title": title,
                "resource": resource, "resource_name": display_name(resource.resource_type),
                "can_rollback": self._can_rollback(request, resource), "can_edit": self._can_edit(request, resource),
                "has_provenance": resource.resource_type in MEMORY_FILE_TYPES, **extra}

    def _can_rollback(self, request, resource: Resource) -> bool:
        return resource.resource_type != ResourceType.CHECKPOINT and request.user.has_perm("resources.change_resource")

    def change_view(self, request, object_id, form_url="", extra_context=None):
        """The resource page: its revisions, newest first, with links to each one, diffs and rollback."""
        resource = self._resource(request, object_id)
        rows = _revisions(resource).defer("content").order_by("-revision")
        before = request.GET.get("before")
        if before and before.isdigit():
            rows = rows.filter(revision__lt=int(before))
        page = list(rows[: HISTORY_PAGE + 1])
        older = page[HISTORY_PAGE - 1].revision if len(page) > HISTORY_PAGE else None
        revisions = [(r, human(r.mutation_source), json_html(r.provenance)) for r in page[:HISTORY_PAGE]]
        context = self._context(request, resource, f"{display_name(resource.resource_type)} — {resource}",
                                revisions=revisions, older=older)
        return TemplateResponse(request, "fermix/resource.html", context)

    def revision_view(self, request, pk, number):
        resource = self._resource(request, pk)
        revision = revision_or_404(resource, number)
        context = self._context(request, resource, revision_title(revision), revision=revision,
                                source=human(revision.mutation_source),
                                rendered=markdown_html(revision.content),
                                provenance=json.dumps(revision.provenance, indent=2, ensure_ascii=False,
                                                      sort_keys=True))
        return TemplateResponse(request, "fermix/revision.html", context)

    def diff_view(self, request, pk):
        resource = self._resource(request, pk)
        current = resource.current_revision
        a = revision_or_404(resource, request.GET.get("a") or max(current - 1, 1))
        b = revision_or_404(resource, request.GET.get("b") or current)
        context_lines = request.GET.get("context", "3")
        context_lines = int(context_lines) if context_lines.isdigit() else 3
        lines = line_diff(a.content, b.content, context=min(context_lines, 1000))
        split = request.GET.get("view") == "split"
        context = self._context(request, resource, f"{display_name(resource.resource_type)}: r{a.revision} → "
                                f"r{b.revision}", a=a, b=b, a_label=revision_title(a), b_label=revision_title(b),
                                lines=lines, split=split, rows=side_by_side(lines) if split else None,
                                numbers=list(_revisions(resource).order_by("-revision")
                                             .values_list("revision", flat=True)[:500]))
        return TemplateResponse(request, "fermix/diff.html", context)

    def rollback_view(self, request, pk, number):
        resource = self._resource(request, pk)
        if not self._can_rollback(request, resource):
            raise Http404("checkpoint revisions are audit records and cannot be rolled back")
        target = revision_or_404(resource, number)
        current = _current(resource)
        if request.method == "POST" and request.POST.get("confirm") == "yes":
            return self._rollback(request, resource, target)
        context = self._context(request, resource, f"Roll back {display_name(resource.resource_type)} to "
                                f"revision {target.revision}", target=target, current=current,
                                caveat=rollback_caveat(resource.resource_type),
                                same=current is not None and current.content_hash == target.content_hash,
                                lines=line_diff(current.content if current else "", target.content))
        return TemplateResponse(request, "fermix/rollback.html", context)

    def _rollback(self, request, resource: Resource, target: ResourceRevision):
        try:
            result = resource_rollback(agent_id=resource.agent_id, resource_type=resource.resource_type,
                                       revision=target.revision,
                                       provenance={"operator": request.user.get_username(), "via": "admin"})
        except (CheckpointRollback, UnknownResource, UnknownRevision) as exc:
            self.message_user(request, str(exc), messages.ERROR)
            return HttpResponseRedirect(reverse("admin:resources_resource_change", args=[resource.pk]))
        if result.already_at_target:
            self.message_user(request, f"{display_name(resource.resource_type)} is already at the content of "
                                       f"revision {target.revision}; nothing was written.", messages.INFO)
        else:
            self.log_change(request, resource, f"Rolled back to revision {target.revision} "
                                               f"(new revision {result.revision.revision})")
            self.message_user(request, f"Rolled back {display_name(resource.resource_type)} to revision "
                                       f"{target.revision}: new revision {result.revision.revision}.", messages.SUCCESS)
        if result.caveat:
            self.message_user(request, result.caveat, messages.WARNING)
        return HttpResponseRedirect(reverse("admin:resources_resource_change", args=[resource.pk]))

    # --- editing a bootstrap file: text area, preview diff, confirmation -----------------------------

    def _can_edit(self, request, resource: Resource) -> bool:
        # USER.md and MEMORY.md are rendered from memory rows (a hand edit is overwritten by the next
        # rebuild: correct the rows instead); checkpoints are audit records.
        return resource.resource_type in BOOTSTRAP_FILES and request.user.has_perm("resources.change_resource")

    def edit_view(self, request, pk):
        """Edit a bootstrap file: the text, then a preview diff, then *Yes, write* commits a `manual_edit`."""
        resource = self._resource(request, pk)
        if not self._can_edit(request, resource):
            raise Http404("only IDENTITY.md, FERMIX.md, SOUL.md and REALTIME.md are edited here")
        current = self._current_on_disk(resource)
        if request.method != "POST":
            form = BootstrapEditForm(initial={"content": current.content if current else "",
                                              "base_revision": resource.current_revision})
            return self._edit_page(request, resource, form, current)
        form = BootstrapEditForm(request.POST)
        if not form.is_valid():
            return self._edit_page(request, resource, form, current)
        content, base = form.cleaned_data["content"], form.cleaned_data["base_revision"]
        if "confirm" not in request.POST:  # the preview button, or Enter in a field
            return self._preview(request, resource, form, current)
        if base != resource.current_revision:
            return self._preview(request, resource, form, current, refusal=(
                f"{display_name(resource.resource_type)} changed since you opened it (now revision "
                f"{resource.current_revision}): the preview below is against the new revision; check it and "
                "confirm again."))
        if form.cleaned_data["previewed"] != content_hash(content):
            return self._preview(request, resource, form, current,
                                 refusal="The text changed after the preview: check the new diff and confirm again.")
        return self._write(request, resource, form)

    def _current_on_disk(self, resource: Resource) -> ResourceRevision | None:
        """The current revision, after recording a hand edit of the file (so the form holds what is on disk)."""
        resource_capture_file(agent_id=resource.agent_id, resource_type=resource.resource_type, why="admin_edit")
        resource.refresh_from_db()
        return _current(resource)

    def _edit_page(self, request, resource, form, current, **extra):
        name = display_name(resource.resource_type)
        context = self._context(request, resource, f"Edit {name}", form=form, current=current,
                                soul=resource.resource_type == ResourceType.SOUL_MD, **extra)
        return TemplateResponse(request, "fermix/resource_edit.html", context)

    def _preview(self, request, resource, form, current, refusal: str = ""):
        """The diff from the current revision to the submitted text, with the confirmation."""
        content = form.cleaned_data["content"]
        # A fresh form: the confirmation is against the revision current now and the text shown now.
        fresh = BootstrapEditForm(initial={"content": content, "reason": form.cleaned_data["reason"],
                                           "base_revision": resource.current_revision,
                                           "previewed": content_hash(content)})
        before = current.content if current else ""
        return self._edit_page(request, resource, fresh, current, preview=True, refusal=refusal,
                               same=before == content, lines=line_diff(before, content))

    def _write(self, request, resource, form):
        provenance = {"operator": request.user.get_username(), "via": "admin"}
        if form.cleaned_data["reason"]:
            provenance["reason"] = form.cleaned_data["reason"]
        name = display_name(resource.resource_type)
        try:
            revision = resource_write_file(agent_id=resource.agent_id, resource_type=resource.resource_type,
                                           content=form.cleaned_data["content"],
                                           mutation_source=MutationSource.MANUAL_EDIT, provenance=provenance)
        except ResourceError as exc:
            form.add_error(None, exc.message)
            return self._edit_page(request, resource, form, _current(resource))
        if revision is None:
            self.message_user(request, f"{name} already has this content; nothing was written.", messages.INFO)
        else:
            self.log_change(request, resource, f"Edited: revision {revision.revision} (manual_edit)")
            self.message_user(request, f"Wrote {name} revision {revision.revision} (manual_edit).", messages.SUCCESS)
        return HttpResponseRedirect(reverse("admin:resources_resource_change", args=[resource.pk]))


@admin.register(ResourceRevision)
class ResourceRevisionAdmin(BigTableAdmin, ReadOnlyAdmin):
    list_display = ("id", "created_at", "resource", "revision", "parent_revision", "source", "byte_size",
                    "short_hash", "scope_id")
    list_filter = ("resource_type", ("mutation_source", HumanChoicesFilter), "agent_id")
    search_fields = ("=scope_id", "=content_hash")

    def get_queryset(self, request):
        return super().get_queryset(request).defer("content")

    @admin.display(description="resource")
    def resource(self, obj):
        return display_name(obj.resource_type)

    @admin.display(description="mutation source", ordering="mutation_source")
    def source(self, obj):
        return human(obj.mutation_source)

    @admin.display(description="hash")
    def short_hash(self, obj):
        return obj.content_hash[:12]

    def change_view(self, request, object_id, form_url="", extra_context=None):
        """A revision opens on its resource's revision page (rendered content, raw, provenance)."""
        revision = ResourceRevision.objects.filter(pk=object_id).defer("content").first()
        resource = revision and Resource.objects.filter(
            agent_id=revision.agent_id, resource_type=revision.resource_type, scope_id=revision.scope_id).first()
        if resource is None:
            raise Http404("no such revision")
        return HttpResponseRedirect(reverse("admin:resources_resource_revision", args=[resource.pk, revision.revision]))


@admin.register(SoulProposal)
class SoulProposalAdmin(StatusColumns, ReadOnlyAdmin):
    list_display = ("created_at", "agent_id", "mode", "status_badge", "requested_by", "rationale_excerpt",
                    "expires_at")
    list_filter = (("status", HumanChoicesFilter), "mode")
    exclude = ("token",)  # a pending token confirms the change; it stays out of the console

    @admin.display(description="rationale")
    def rationale_excerpt(self, obj):
        return short(obj.rationale, 80)
