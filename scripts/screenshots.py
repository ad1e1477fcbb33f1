"""Pictures of the console's main pages, for docs/screenshots: Debian's chromium over a seeded world.

    .venv/bin/python scripts/screenshots.py [FOLDER]      # FOLDER defaults to docs/screenshots

It runs itself under pytest for the browser tests' fixtures (tests/admin: a throw-away database, the live
server, the logged-in operator, the world with a fake model), and asserts nothing: look at the pictures.
chromium and chromium-driver come from apt-get (scripts/test-setup.sh installs them as root).
"""

import os
import sys
from datetime import timedelta
from pathlib import Path

import django
import pytest

ROOT = Path(__file__).resolve().parent.parent

if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    folder = Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "docs" / "screenshots"
    os.environ["FERMIX_SCREENSHOTS"] = str(folder.resolve())
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.settings")
    django.setup()  # the fixtures' modules, loaded before pytest-django sets Django up, import models
    fixtures = ("tests.conftest", "tests.admin.conftest", "tests.admin.test_browser")
    sys.exit(pytest.main([__file__, "-q", "-c", str(ROOT / "pytest.ini"), "--rootdir", str(ROOT),
                          *(arg for module in fixtures for arg in ("-p", module))]))

from django.urls import reverse  # noqa: E402
from django.utils import timezone  # noqa: E402

from memory.compactor import record_peak  # noqa: E402
from memory.models import Memory, ReviewRun  # noqa: E402
from memory.prompt_files import prompt_files_rebuild  # noqa: E402
from resources.models import Resource, ResourceRevision  # noqa: E402
from tests.memory_factories import fact  # noqa: E402
from tests.personas import say  # noqa: E402

pytestmark = pytest.mark.django_db(transaction=True)

SCREENSHOTS = [
    ("index", lambda w: reverse("admin:index")),
    ("dashboard", lambda w: reverse("fermix-dashboard")),
    ("messages-search", lambda w: reverse("admin:memory_message_changelist") + "?q=lisbon+morning"),
    ("memories", lambda w: reverse("admin:memory_memory_changelist")),
    ("memories-search", lambda w: reverse("admin:memory_memory_changelist") + "?q=lisbon+fado"),
    ("review-runs", lambda w: reverse("admin:memory_reviewrun_changelist")),
    ("memory-row", lambda w: reverse("admin:memory_memory_change", args=[Memory.objects.get(key="home_city").id])),
    ("resource-history", lambda w: reverse("admin:resources_resource_change", args=[w.soul.pk])),
    ("user-md-history", lambda w: reverse("admin:resources_resource_change", args=[w.user_md.pk])),
    ("diff", lambda w: reverse("admin:resources_resource_diff", args=[w.soul.pk]) + "?a=1&b=2"),
    ("rollback-preview", lambda w: reverse("admin:resources_resource_rollback",
                                           args=[Resource.objects.get(resource_type="user_md").pk, 1])),
    ("provenance", lambda w: reverse("admin:resources_resource_provenance",
                                     args=[w.user_md.pk, Resource.objects.get(pk=w.user_md.pk).current_revision])),
    ("review-run", lambda w: reverse("admin:memory_reviewrun_change", args=[w.run.pk])),
    ("settings", lambda w: reverse("fermix-settings")),
    ("memory-add", lambda w: reverse("admin:memory_memory_add")),
    ("memory-correct", lambda w: reverse("admin:memory_memory_correct",
                                         args=[Memory.objects.get(key="home_city").id])),
    ("resource-edit", lambda w: reverse("admin:resources_resource_edit", args=[w.soul.pk])),
    ("resource-edit-preview", lambda w: reverse("admin:resources_resource_edit", args=[w.soul.pk])),
    ("diff-side-by-side", lambda w: reverse("admin:resources_resource_diff", args=[w.soul.pk]) + "?a=1&b=2&view=split"),
]
WIDTH = 1280  # the narrowest screen the console is laid out for (with the navigation sidebar open)
WIDE = 1920, ("index", "messages-search", "memories", "review-runs", "resource-history")  # also taken this wide


def _preview_an_edit(operator):
    editor = operator.find("#id_content")
    editor.clear()
    editor.send_keys("# Soul\n\nBe kind, brief, exact and warm.\nAsk before guessing.\n")
    operator.find("#id_reason").send_keys("a warmer tone")
    operator.click("#preview-edit")


def _refuse_a_long_value(operator):
    operator.find("#id_key").send_keys("essay")
    operator.find("#id_value").send_keys("likes " + "very " * 40 + "long answers")
    operator.find("#id_reason").send_keys("told me on the phone")
    operator.click("#save-memory")


# Pages that show something only after a step in the browser: what to do once the page is open.
STEPS = {"resource-edit-preview": _preview_an_edit, "memory-add": _refuse_a_long_value}


def _history_for_the_dashboard():
    """A month of review outcomes and revisions, so the dashboard has something to draw."""
    now = timezone.now()
    statuses = ("ok", "ok", "nothing_to_save", "ok", "failed", "nothing_to_save", "ok")
    for day in range(1, 29):
        for n in range(day % 4 + 1):
            status = statuses[(day + n) % len(statuses)]
            started = now - timedelta(days=day, minutes=n * 7)
            ReviewRun.objects.create(agent_id="main", conversation_key="telegram:42:root", owner_id="default",
                                     trigger="background", status=status, started_at=started,
                                     finished_at=started + timedelta(seconds=1.5 + 2.3 * ((day + n) % 5)),
                                     reason="HTTP 502 from primary: upstream timed out after 60 s; retried with "
                                            "a backoff" if status == "failed" else "")
    revisions = list(ResourceRevision.objects.order_by("id"))
    for i, revision in enumerate(revisions):
        ResourceRevision.objects.filter(pk=revision.pk).update(
            created_at=now - timedelta(days=(len(revisions) - i) * 3))


def test_screenshots(operator, world):
    folder = os.environ.get("FERMIX_SCREENSHOTS", ROOT / "docs" / "screenshots")
    for i, (key, value, category) in enumerate([
            ("name", "is called Ana", "identity"), ("job", "works as a structural engineer", "identity"),
            ("music", "listens to fado and jazz", "interest"), ("marathon", "training for the Porto marathon",
                                                                "goal"),
            ("style", "answer in short paragraphs, no emoji", "directive"),
            ("project", "is renovating a flat in Alfama", "context")]):
        fact(key, value, category, minute=10 + i)
    prompt_files_rebuild(agent_id="main")
    for chat, peak in (("telegram:42", 96_000), ("telegram:7", 61_000), ("discord:3", 115_000),
                       ("realtime:kitchen", 20_000)):
        say("hello", conversation=chat)
        record_peak(agent_id="main", conversation=chat, peak_prompt_tokens=peak, context_window=128_000)
    say("Do you know a good fado bar in Lisbon?")
    say("Try the one in Alfama, near the flat.", role="assistant")
    _history_for_the_dashboard()
    Path(folder).mkdir(parents=True, exist_ok=True)
    for name, url in SCREENSHOTS:
        _shoot(operator, url(world), Path(folder) / f"{name}.png", WIDTH, name)
        if name in WIDE[1]:
            _shoot(operator, url(world), Path(folder) / f"{name}-{WIDE[0]}.png", WIDE[0], name)


def _shoot(operator, url, path, width, name=None):
    operator.driver.set_window_size(width, 1000)
    operator.open(url)
    if name in STEPS:
        STEPS[name](operator)
    height = operator.driver.execute_script("return document.body.scrollHeight")
    operator.driver.set_window_size(width, min(max(height + 40, 700), 2400))
    operator.driver.save_screenshot(str(path))
