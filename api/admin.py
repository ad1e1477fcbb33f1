"""API keys: create (the key is shown once, on the page that created it) and revoke; nothing else."""

from django import forms
from django.contrib import admin, messages
from django.contrib.admin.helpers import ACTION_CHECKBOX_NAME
from django.template.response import TemplateResponse
from django.utils import timezone

from api.models import ApiKey
from api.services import ApiKeyError, apikey_create, apikey_revoke
from fermix_site.admin_kit import ReadOnlyAdmin


class ApiKeyForm(forms.Form):
    name = forms.CharField(max_length=100, help_text="A name to revoke it by, e.g. telegram-bot.")
    role = forms.ChoiceField(choices=ApiKey.Role.choices,
                             help_text="channel: bots; operator: everything, including memory changes.")
    agents = forms.CharField(required=False, help_text="Agent ids, separated by commas or spaces. Empty: every agent.")
    may_assert_operator = forms.BooleanField(
        required=False, label="May assert operator trust",
        help_text="Channel keys: requests may send \"trust\": \"operator\" (a bot that knows when the owner "
                  "speaks). Without it they always speak as guests.")

    def clean_agents(self):
        return [a for a in self.cleaned_data["agents"].replace(",", " ").split() if a]


@admin.register(ApiKey)
class ApiKeyAdmin(ReadOnlyAdmin):
    list_display = ("name", "role", "may_assert_operator", "prefix", "agent_list", "created_at", "last_used_at",
                    "revoked_at")
    list_filter = ("role", "may_assert_operator")
    search_fields = ("name", "=prefix")
    fields = ("name", "role", "may_assert_operator", "prefix", "agent_list", "created_at", "last_used_at",
              "revoked_at")
    readonly_fields = fields
    actions = ("revoke_selected",)

    def has_add_permission(self, request):
        return request.user.has_perm("api.add_apikey")

    def has_revoke_permission(self, request):
        return request.user.has_perm("api.change_apikey")

    @admin.display(description="agents")
    def agent_list(self, obj):
        return ", ".join(obj.agents) if obj.agents else "every agent"

    def add_view(self, request, form_url="", extra_context=None):
        """Create a key and show it on this response only: it is stored as a hash and never shown again."""
        if not self.has_add_permission(request):
            return self.changelist_view(request)
        form = ApiKeyForm(request.POST or None)
        created = key = None
        if request.method == "POST" and form.is_valid():
            try:
                created, key = apikey_create(name=form.cleaned_data["name"], role=form.cleaned_data["role"],
                                             agents=form.cleaned_data["agents"],
                                             may_assert_operator=form.cleaned_data["may_assert_operator"])
            except ApiKeyError as exc:
                form.add_error(None, str(exc))
            else:
                self.log_addition(request, created, "Created")
        context = {**self.admin_site.each_context(request), "opts": self.model._meta, "form": form,
                   "created": created, "key": key, "title": "New API key" if created is None else "API key created"}
        response = TemplateResponse(request, "fermix/apikey_add.html", context)
        response["Cache-Control"] = "no-store"
        return response

    @admin.action(description="Revoke selected API keys…", permissions=["revoke"])
    def revoke_selected(self, request, queryset):
        keys = list(queryset.filter(revoked_at__isnull=True).order_by("name"))
        if request.POST.get("post") != "yes":
            context = {**self.admin_site.each_context(request), "opts": self.model._meta, "keys": keys,
                       "title": "Revoke API keys", "action_checkbox_name": ACTION_CHECKBOX_NAME}
            return TemplateResponse(request, "fermix/apikey_revoke_confirm.html", context)
        for key in keys:
            try:
                apikey_revoke(name=key.name)
            except ApiKeyError as exc:
                self.message_user(request, str(exc), messages.WARNING)
                continue
            self.log_change(request, key, f"Revoked at {timezone.now():%Y-%m-%d %H:%M} UTC")
        self.message_user(request, f"Revoked {len(keys)} API key(s); they stop working at once.", messages.SUCCESS)
        return None
