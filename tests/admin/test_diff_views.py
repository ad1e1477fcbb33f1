"""The diff page's two views: unified (one column) and side by side (old left, new right)."""

import pytest
from django.urls import reverse

from fermix_site.admin_html import line_diff, side_by_side

pytestmark = [pytest.mark.django_db]


def test_side_by_side_puts_each_deleted_run_beside_the_inserted_run_after_it():
    rows = side_by_side(line_diff("a\nold 1\nold 2\nz\n", "a\nnew 1\nz\nadded\n"))
    assert [r.kind for r in rows] == ["equal", "change", "delete", "equal", "insert"]
    change, delete, insert = rows[1], rows[2], rows[4]
    assert (change.old.old_no, change.new.new_no) == (2, 2)
    assert "old" in change.old.html and "new" in change.new.html
    assert delete.new is None and "old 2" in delete.old.html
    assert insert.old is None and (insert.new.new_no, str(insert.new.html)) == (4, "added")


def test_side_by_side_escapes_both_columns():
    rows = side_by_side(line_diff("<b>x</b>\n", "<i>x</i>\n"))
    assert rows[0].old.html == "&lt;<del>b</del>&gt;x&lt;/<del>b</del>&gt;"
    assert rows[0].new.html == "&lt;<ins>i</ins>&gt;x&lt;/<ins>i</ins>&gt;"


def test_the_diff_page_links_the_two_views_and_keeps_the_revisions(console, world):
    url = reverse("admin:resources_resource_diff", args=[world.soul.pk])
    unified = console.get(url + "?a=1&b=2").content.decode()
    assert 'href="?a=1&amp;b=2&amp;view=split" id="view-split"' in unified and "fermix-diff-split" not in unified
    split = console.get(url + "?a=1&b=2&view=split").content.decode()
    assert "fermix-diff-split" in split and 'id="view-unified"' in split
    assert 'name="view" value="split"' in split  # Compare keeps the view
    assert '<td class="text old delete">Be kind<del> and brief</del>.</td>' in split
    assert '<td class="text new insert">Be kind<ins>, brief and exact</ins>.</td>' in split
