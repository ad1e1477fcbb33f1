"""The admin site's names, and the pages of the resource admin that need memory: where each line of a
USER.md or MEMORY.md revision came from. The console's own pages are mounted by `console.urls`."""

from __future__ import annotations

from django.contrib import admin
from django.http import Http404
from django.template.response import TemplateResponse
from django.urls import path

from memory.admin import conversation_messages_url
from memory.provenance import line_sources
from resources.admin import MEMORY_FILE_TYPES, ResourceAdmin, revision_or_404, revision_title
from resources.models import Resource

admin.site.site_header = "Fermix operator console"
admin.site.site_title = "Fermix"
admin.site.index_title = "Operator console"
admin.site.site_url = None  # there is no public site to view


class ConsoleResourceAdmin(ResourceAdmin):
    """The resource admin with the provenance page, which reads memory rows (a layer above resources)."""

    def get_urls(self):
        return [
            path("<int:pk>/revisions/<int:number>/provenance/", self.admin_site.admin_view(self.provenance_view),
                 name="resources_resource_provenance"),
            *super().get_urls(),
        ]

    def provenance_view(self, request, pk, number):
        resource = self._resource(request, pk)
        if resource.resource_type not in MEMORY_FILE_TYPES:
            raise Http404("provenance is kept for USER.md and MEMORY.md")
        revision = revision_or_404(resource, number)
        sources = line_sources(agent_id=resource.agent_id, resource_type=resource.resource_type,
                               content=revision.content)
        rows = [(source, conversation_messages_url(*source.conversation, agent_id=resource.agent_id)
                 if source.conversation else "") for source in sources]
        context = self._context(request, resource, f"Where each line of {revision_title(revision)} came from",
                                revision=revision, sources=rows)
        return TemplateResponse(request, "fermix/provenance.html", context)


admin.site.unregister(Resource)
admin.site.register(Resource, ConsoleResourceAdmin)
