"""Resources: history, content rendered and sanitised, diffs, rollback with preview and confirmation."""

import pytest
from django.urls import reverse

from fermix_site.admin_html import line_diff, markdown_html
from resources.catalog import rollback_caveat
from resources.models import Resource, ResourceRevision
from tests.admin.conftest import soul_write

pytestmark = [pytest.mark.django_db]


def test_the_resource_page_lists_revisions_with_source_size_hash_parent_and_provenance(console, world):
    html = console.get(reverse("admin:resources_resource_change", args=[world.soul.pk])).content.decode()
    first, second = ResourceRevision.objects.filter(resource_type="soul_md").order_by("revision")
    assert "r1</a>" in html and "r2</a> (current)" in html
    assert first.content_hash[:12] in html and second.content_hash[:12] in html
    assert f"{second.byte_size} B" in html and "manual edit" in html
    assert "roll back to this…" in html


def test_a_revision_shows_rendered_markdown_and_the_raw_text(console, world):
    url = reverse("admin:resources_resource_revision", args=[world.soul.pk, 1])
    html = console.get(url).content.decode()
    assert "<h1>Soul</h1>" in html
    assert "# Soul\n\nBe kind and brief." in html


def test_markdown_is_sanitised():
    html = markdown_html('# T\n\n<script>alert(1)</script>\n\n<img src=x onerror="alert(2)">\n\n'
                         '[x](javascript:alert(3)) <a href="https://example.org" onclick="alert(4)">ok</a>')
    assert "<h1>T</h1>" in html
    for bad in ("<script", "onerror", "javascript:", "onclick", "<img"):
        assert bad not in html


def test_the_diff_is_line_mode_with_character_highlights_and_escaped():
    lines = line_diff("a\nkeep <b>this</b>\nz\n", "a\nkeep <i>this</i>\nz\n")
    kinds = [line.kind for line in lines]
    assert kinds == ["equal", "delete", "insert", "equal"]
    assert lines[1].html == "keep &lt;<del>b</del>&gt;this&lt;/<del>b</del>&gt;"
    assert lines[2].html == "keep &lt;<ins>i</ins>&gt;this&lt;/<ins>i</ins>&gt;"
    assert (lines[1].old_no, lines[2].new_no) == (2, 2)


def test_long_unchanged_runs_fold_into_one_line():
    old = "".join(f"line {i}\n" for i in range(50))
    new = old.replace("line 25\n", "line twenty-five\n")
    lines = line_diff(old, new, context=3)
    assert [line.kind for line in lines].count("skip") == 2
    assert sum(1 for line in lines if line.kind == "equal") == 6


def test_the_diff_page_compares_any_two_revisions(console, world):
    soul_write("# Soul\n\nBe kind, brief and exact. <script>x()</script>\n")
    url = reverse("admin:resources_resource_diff", args=[world.soul.pk])
    html = console.get(url, {"a": 1, "b": 3}).content.decode()
    assert "<ins>" in html and "<del>" in html
    assert "&lt;script&gt;x()&lt;/script&gt;" in html and "<script>x()" not in html


def test_rollback_previews_then_needs_a_confirmation(console, world):
    url = reverse("admin:resources_resource_rollback", args=[world.soul.pk, 1])
    html = console.get(url).content.decode()
    assert "Yes, roll back to revision 1" in html and "<del>" in html
    assert ResourceRevision.objects.filter(resource_type="soul_md").count() == 2
    console.post(url)  # no confirmation field: nothing happens
    assert ResourceRevision.objects.filter(resource_type="soul_md").count() == 2
    response = console.post(url, {"confirm": "yes"})
    assert response.status_code == 302
    newest = ResourceRevision.objects.filter(resource_type="soul_md").order_by("-revision").first()
    first = "# Soul\n\nBe kind and brief.\n"
    assert (newest.revision, newest.mutation_source, newest.content) == (3, "rollback", first)
    assert newest.provenance["target_revision"] == 1 and newest.provenance["via"] == "admin"
    assert (world.soul.resource_path and open(world.soul.resource_path).read()) == "# Soul\n\nBe kind and brief.\n"


def test_user_md_rollback_shows_the_caveat(console, world):
    from memory.prompt_files import prompt_files_rebuild
    from tests.memory_factories import fact

    fact("drink", "prefers coffee now", "preference", minute=9)
    prompt_files_rebuild(agent_id="main")
    user_md = Resource.objects.get(resource_type="user_md")
    html = console.get(reverse("admin:resources_resource_rollback", args=[user_md.pk, 1])).content.decode()
    assert rollback_caveat("user_md").replace("'", "&#x27;") in html
    response = console.post(reverse("admin:resources_resource_rollback", args=[user_md.pk, 1]), {"confirm": "yes"},
                            follow=True)
    assert "rebuilt from promoted memory rows" in response.content.decode()


def test_checkpoints_are_never_offered_for_rollback(console, world):
    html = console.get(reverse("admin:resources_resource_change", args=[world.checkpoint.pk])).content.decode()
    assert "roll back" not in html and "cannot be rolled back" in html
    url = reverse("admin:resources_resource_rollback", args=[world.checkpoint.pk, 1])
    assert console.get(url).status_code == 404
    assert console.post(url, {"confirm": "yes"}).status_code == 404
    assert ResourceRevision.objects.filter(resource_type="checkpoint").count() == 1
