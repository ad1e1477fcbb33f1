"""Everything a user or a model wrote is escaped or sanitised on every console page that shows it."""

import pytest
from django.urls import reverse

from memory.models import Memory
from memory.prompt_files import prompt_files_rebuild
from resources.models import Resource
from tests.admin.conftest import HOSTILE, soul_write
from tests.memory_factories import fact
from tests.personas import say

pytestmark = [pytest.mark.django_db]


def assert_inert(html: str):
    assert "<script>window.__xss" not in html
    assert "<img src=x onerror" not in html and 'onerror="window' not in html


def test_hostile_values_are_shown_as_text_everywhere(console, world):
    row = fact("evil", HOSTILE, "identity", minute=30)
    message = say(HOSTILE)
    prompt_files_rebuild(agent_id="main")
    soul_write("# Soul\n\n" + HOSTILE + "\n")
    soul = Resource.objects.get(resource_type="soul_md")
    user_md = Resource.objects.get(resource_type="user_md")
    pages = [
        reverse("admin:memory_memory_changelist"),
        reverse("admin:memory_memory_change", args=[row.id]),
        reverse("admin:memory_memory_archive", args=[row.id]),
        reverse("admin:memory_message_changelist"),
        reverse("admin:memory_message_change", args=[message.id]),
        reverse("admin:memory_memoryevent_changelist"),
        reverse("admin:resources_resource_revision", args=[soul.pk, soul.current_revision]),
        reverse("admin:resources_resource_diff", args=[soul.pk]) + f"?a=1&b={soul.current_revision}",
        reverse("admin:resources_resource_rollback", args=[soul.pk, 1]),
        reverse("admin:resources_resource_revision", args=[user_md.pk, user_md.current_revision]),
        reverse("admin:resources_resource_provenance", args=[user_md.pk, user_md.current_revision]),
        reverse("fermix-dashboard"),
    ]
    for url in pages:
        html = console.get(url).content.decode()
        assert_inert(html)
    raw = console.get(pages[6]).content.decode()
    assert "&lt;script&gt;window.__xss = 1&lt;/script&gt;" in raw  # the raw view shows the text itself
    assert Memory.objects.get(pk=row.id).value == HOSTILE
