from django.contrib import admin

from providers.models import ModelCall


@admin.register(ModelCall)
class ModelCallAdmin(admin.ModelAdmin):
    """The model call trace: read-only, newest first, no COUNT(*) over a table that only grows."""

    list_display = ("created_at", "agent_tag", "agent_id", "provider", "model", "attempt", "prompt_tokens",
                    "completion_tokens", "latency_ms", "outcome", "http_status")
    list_filter = ("outcome", "agent_tag", "provider", "kind")
    search_fields = ("=call_id", "agent_id", "conversation_key", "model", "error")
    ordering = ("-created_at", "-id")
    show_full_result_count = False
    list_per_page = 100

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False
