"""Values read as words: coloured statuses, human labels, one date format, durations, pretty model
output, long provenance folded; and the search's switch between best match and newest first."""

import re
from datetime import timedelta

import pytest
from django.urls import reverse

from fermix_site.admin_kit import duration, human, json_html, model_output_html
from memory.models import ReviewRun
from tests.personas import say

pytestmark = [pytest.mark.django_db]

MESSAGES = reverse("admin:memory_message_changelist")


def test_statuses_are_coloured_badges_with_words_not_enum_text(console, world):
    ReviewRun.objects.create(agent_id="main", conversation_key="telegram:9:root", owner_id="default",
                             trigger="background", status="nothing_to_save", started_at=world.run.started_at)
    html = console.get(reverse("admin:memory_reviewrun_changelist")).content.decode()
    assert '<span class="fx-status fx-status-ok">ok</span>' in html
    assert '<span class="fx-status fx-status-nothing_to_save">nothing to save</span>' in html
    assert "Nothing To Save" not in html and "nothing_to_save</a>" not in html  # the filter reads as words too


def test_a_memory_row_names_its_prompt_file_not_the_enum(console, world):
    html = console.get(reverse("admin:memory_memory_change", args=[world.fact.pk])).content.decode()
    assert "Promote target:" in html
    assert "User Md" not in html and "user_md" not in html


def test_dates_have_one_format_everywhere(console, world):
    stamp = re.compile(r"\d{4}-\d\d-\d\d \d\d:\d\d")
    for url in (reverse("admin:memory_message_changelist"), reverse("admin:memory_reviewrun_changelist"),
                reverse("admin:resources_resource_change", args=[world.soul.pk])):
        html = console.get(url).content.decode()
        assert stamp.search(html), url
        assert not re.search(r"(a\.m\.|p\.m\.)", html), url


def test_review_runs_show_how_long_they_took(console, world):
    ReviewRun.objects.filter(pk=world.run.pk).update(finished_at=world.run.started_at + timedelta(seconds=3.25))
    html = console.get(reverse("admin:memory_reviewrun_changelist")).content.decode()
    assert "3.2 s" in html
    assert "3.2 s" in console.get(reverse("admin:memory_reviewrun_change", args=[world.run.pk])).content.decode()


def test_durations_read_in_the_right_unit(world):
    start = world.run.started_at
    assert [duration(start, start + timedelta(seconds=s)) for s in (0.25, 12.44, 185, 7800)] == [
        "250 ms", "12.4 s", "3 min 05 s", "2 h 10 min"]
    assert duration(start, None) == "—"


def test_the_models_output_is_pretty_printed(console, world):
    html = console.get(reverse("admin:memory_reviewrun_change", args=[world.run.pk])).content.decode()
    assert '{\n  &quot;operations&quot;: [\n    {' in html
    assert model_output_html("not json <b>") == '<pre class="fermix-pre">not json &lt;b&gt;</pre>'


def test_long_provenance_folds_and_short_stays_inline():
    assert json_html({"a": 1}) == "<code>{&quot;a&quot;: 1}</code>"
    folded = json_html({"memory_ids": list(range(40)), "note": "<x>"})
    assert folded.startswith('<details class="fx-fold"><summary>') and "&lt;x&gt;" in folded
    assert '"memory_ids"' not in folded and "&quot;memory_ids&quot;: [\n" in folded


def test_labels():
    assert [human(v) for v in ("user_md", "memory_md", "nothing_to_save", "manual_edit", "", None)] == [
        "USER.md", "MEMORY.md", "nothing to save", "manual edit", "none", "none"]


def test_search_results_best_first_by_default_and_newest_first_on_the_switch(console, home):
    strong = say("bowling bowling bowling, all night bowling")
    weak = say("we went bowling once", conversation="telegram:9")
    best = console.get(MESSAGES, {"q": "bowling"}).content.decode()
    assert best.index(f"/admin/memory/message/{strong.id}/") < best.index(f"/admin/memory/message/{weak.id}/")
    assert 'aria-current="true">best match first' in best and "order=newest" in best
    newest = console.get(MESSAGES, {"q": "bowling", "order": "newest"}).content.decode()
    assert newest.index(f"/admin/memory/message/{weak.id}/") < newest.index(f"/admin/memory/message/{strong.id}/")
    assert 'aria-current="true">newest first' in newest
    assert "<mark>bowling</mark>" in newest
    filtered = console.get(MESSAGES, {"q": "bowling", "order": "newest", "channel": "telegram"})
    assert filtered.status_code == 200 and "?e=1" not in filtered.get("Location", "")
    assert "order=newest" in re.search(r'id="changelist-filter".*?</nav>', filtered.content.decode(), re.S).group(0)


def test_revision_titles_name_the_file_and_the_source_in_words(console, world):
    diff = reverse("admin:resources_resource_diff", args=[world.soul.pk])
    html = console.get(diff, {"a": 1, "b": 2}).content.decode()
    assert re.search(r"SOUL\.md r1 \(\d{4}-\d\d-\d\d \d\d:\d\d, manual edit\)", html)
    assert "soul_md r1" not in html and "manual_edit" not in html


def test_the_order_switch_is_never_a_bad_filter(console, home):
    say("bowling")
    for params in ({"order": "newest"}, {"order": "<x>", "q": "bowling"}, {"order": "newest", "q": ""}):
        response = console.get(MESSAGES, params)
        assert response.status_code == 200 and b"?e=1" not in response.content, params
    assert console.get(reverse("admin:memory_memory_changelist"), {"order": "newest", "q": "x"}).status_code == 200
