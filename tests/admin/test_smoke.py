"""Every console URL answers 200 for staff and sends anonymous visitors to the login page."""

import pytest
from django.contrib import admin
from django.urls import URLPattern, URLResolver, reverse

from memory.models import Conversation, Memory, MemoryEvent, MemorySource, Message, ReviewState
from providers.models import ModelCall
from resources.models import ResourceRevision

pytestmark = [pytest.mark.django_db]


def _names(patterns, prefix=""):
    for pattern in patterns:
        if isinstance(pattern, URLResolver):
            yield from _names(pattern.url_patterns, prefix)
        elif isinstance(pattern, URLPattern) and pattern.name:
            yield pattern.name


def console_urls(world) -> dict[str, str]:
    """name -> URL for every page of the console, with real rows for the ones that take an id."""
    urls = {"admin:index": reverse("admin:index"), "fermix-dashboard": reverse("fermix-dashboard"),
            "fermix-settings": reverse("fermix-settings")}
    for model in admin.site._registry:
        opts = model._meta
        base = f"admin:{opts.app_label}_{opts.model_name}"
        urls[f"{base}_changelist"] = reverse(f"{base}_changelist")
        urls[f"admin:app_list:{opts.app_label}"] = reverse("admin:app_list", args=[opts.app_label])
        obj = model._default_manager.order_by("pk").first()
        if obj is not None:
            urls[f"{base}_change"] = reverse(f"{base}_change", args=[obj.pk])
            urls[f"{base}_history"] = reverse(f"{base}_history", args=[obj.pk])
    urls["admin:api_apikey_add"] = reverse("admin:api_apikey_add")
    soul, user_md, checkpoint = world.soul, world.user_md, world.checkpoint
    urls.update({
        "admin:memory_memory_archive": reverse("admin:memory_memory_archive", args=[world.fact.pk]),
        "admin:memory_memory_restore": reverse("admin:memory_memory_restore", args=[world.fact.pk]),
        "admin:memory_memory_correct": reverse("admin:memory_memory_correct", args=[world.fact.pk]),
        "admin:memory_memory_add": reverse("admin:memory_memory_add"),
        "admin:resources_resource_edit": reverse("admin:resources_resource_edit", args=[soul.pk]),
        "admin:memory_reviewrun_undo": reverse("admin:memory_reviewrun_undo", args=[world.run.pk]),
        "admin:resources_resource_revision": reverse("admin:resources_resource_revision", args=[soul.pk, 1]),
        "admin:resources_resource_diff": reverse("admin:resources_resource_diff", args=[soul.pk]) + "?a=1&b=2",
        "admin:resources_resource_rollback": reverse("admin:resources_resource_rollback", args=[soul.pk, 1]),
        "admin:resources_resource_provenance": reverse("admin:resources_resource_provenance",
                                                       args=[user_md.pk, user_md.current_revision]),
        "checkpoint revision": reverse("admin:resources_resource_revision", args=[checkpoint.pk, 1]),
    })
    return urls


def test_every_console_page_answers_200_for_staff(console, world):
    for model in (Conversation, Memory, MemoryEvent, MemorySource, Message, ReviewState, ModelCall,
                  ResourceRevision):
        assert model.objects.exists(), model  # each registered table has a row to open
    for name, url in console_urls(world).items():
        response = console.get(url, follow=False)
        if name.endswith("_change") and response.status_code == 302:
            response = console.get(response["Location"])  # a revision opens on its resource page
        assert response.status_code == 200, (name, url, response.status_code)


def test_every_console_page_sends_anonymous_visitors_to_the_login_page(client, world):
    for name, url in console_urls(world).items():
        response = client.get(url)
        assert response.status_code == 302, (name, url)
        assert response["Location"].startswith(reverse("admin:login")), (name, url)


def test_the_smoke_list_covers_every_console_url_we_define(world):
    ours = ("memory_", "resources_", "jobs_", "api_", "providers_", "fermix-")
    defined = {n for n in _names(admin.site.get_urls()) if n.startswith(ours)}
    defined |= {n for n in _names(__import__("console.urls").urls.urlpatterns)}
    visited = {name.removeprefix("admin:") for name in console_urls(world)}
    missing = {n for n in defined if n not in visited and not n.endswith(("_delete", "_add"))}
    assert missing == set()


def test_a_logged_in_user_who_is_not_staff_is_sent_to_the_login_page_too(client, world):
    from django.contrib.auth import get_user_model

    user = get_user_model().objects.create_user("member", "m@example.com", "member-password-1", is_staff=False)
    client.force_login(user)
    for name, url in console_urls(world).items():
        response = client.get(url)
        assert response.status_code == 302 and response["Location"].startswith(reverse("admin:login")), (name, url)
    assert client.post(reverse("fermix-settings"), {"review_interval_hours": "1"}).status_code == 302
