from django.contrib import admin

from fermix_site.admin_kit import HumanChoicesFilter, status_html
from providers.models import ModelCall


@admin.register(ModelCall)
class ModelCallAdmin(admin.ModelAdmin):
    """The model call trace: read-only, newest first, no COUNT(*) over a table that only grows."""

    list_display = ("created_at", "agent_tag", "agent_id", "provider", "model", "attempt", "tokens", "latency",
                    "outcome_badge", "http_status")
    list_filter = (("outcome", HumanChoicesFilter), "agent_tag", "provider", "kind")
    search_fields = ("=call_id", "agent_id", "conversation_key", "model", "error")
    ordering = ("-created_at", "-id")
    show_full_result_count = False
    list_per_page = 100

    @admin.display(description="tokens in / out")
    def tokens(self, obj):
        return f"{obj.prompt_tokens} / {obj.completion_tokens}"

    @admin.display(description="latency", ordering="latency_ms")
    def latency(self, obj):
        return f"{obj.latency_ms} ms"

    @admin.display(description="outcome", ordering="outcome")
    def outcome_badge(self, obj):
        return status_html(obj.outcome)

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False
