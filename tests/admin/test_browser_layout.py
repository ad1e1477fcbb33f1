"""The console in Debian's chromium: every page fits 1,280 and 1,920 px with the navigation sidebar open,
the index says what needs the operator and leads there, search shows why each row is there and switches
to newest first, long provenance folds and opens, statuses and labels read as words.

The browser fixtures are test_browser's (imported below).
"""

import pytest
from django.urls import reverse
from selenium.webdriver.common.by import By

from memory.models import Memory, ReviewRun
from memory.rows import memory_propose
from resources.models import ResourceRevision
from tests.admin import test_browser
from tests.admin.test_index_attention import failing_review
from tests.admin.test_smoke import console_urls
from tests.fakeprovider import provider_config_toml, use_config
from tests.memory_factories import fact
from tests.personas import say

browser, operator = test_browser.browser, test_browser.operator  # the fixtures, under their names
pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]
WIDTHS = (1280, 1920)

# What does not fit: the page scrolls sideways, an element scrolls or clips its content sideways (a
# changelist's `.results` box), or something in the content sticks out past the window's right edge.
OVERFLOW = """
const out = [], doc = document.documentElement;
if (doc.scrollWidth > window.innerWidth) out.push(`page ${doc.scrollWidth} > ${window.innerWidth}`);
for (const el of document.querySelectorAll('#content *')) {
  const style = getComputedStyle(el);
  if (el.clientWidth <= 1 || el.tagName === 'SELECT' || el.closest('.selector')) continue;
  if (['auto', 'scroll', 'hidden'].includes(style.overflowX) && el.scrollWidth > el.clientWidth + 1)
    out.push(`${el.tagName}#${el.id}.${el.className} scrolls ${el.scrollWidth} > ${el.clientWidth}`);
  const right = el.getBoundingClientRect().right;
  if (el.getBoundingClientRect().width > 1 && right > doc.clientWidth + 1)
    out.push(`${el.tagName}#${el.id}.${el.className} ends at ${Math.round(right)} > ${doc.clientWidth}`);
}
return out.slice(0, 5);
"""


def a_lived_in_world(world):
    """The world with what makes tables wide: a long value, a long reason, long provenance, search hits."""
    fact("reading", "reads " + ", ".join(f"book{n}-with-a-long-hyphenated-title" for n in range(5)), "interest")
    ReviewRun.objects.create(agent_id="main", conversation_key="telegram:7:root", owner_id="default",
                             trigger="background", status="failed", started_at=world.run.started_at,
                             finished_at=world.run.started_at, reason="HTTP 500: " + "upstream-exploded-" * 12)
    ResourceRevision.objects.filter(resource_type="user_md").update(
        provenance={"memory_ids": list(range(1, 90)), "trigger": "admin", "operator": "operator"})
    say("Ana runs along the Tagus every morning before work")
    say("That sounds lovely.", role="assistant")


def pages(world) -> dict[str, str]:
    found = console_urls(world)
    found.update({
        "message search": reverse("admin:memory_message_changelist") + "?q=morning+tagus",
        "message search, newest first": reverse("admin:memory_message_changelist") + "?q=morning&order=newest",
        "memory search": reverse("admin:memory_memory_changelist") + "?q=book3+lisbon",
        "USER.md history": reverse("admin:resources_resource_change", args=[world.user_md.pk]),
        "review runs": reverse("admin:memory_reviewrun_changelist"),
    })
    return found


def test_every_console_page_fits_1280_and_1920_px_with_the_sidebar_open(operator, world):
    a_lived_in_world(world)
    operator.open(reverse("admin:memory_memory_changelist"))
    assert "shifted" in operator.find("#main").get_attribute("class")  # the sidebar opens by default
    assert operator.find("#nav-sidebar").is_displayed()
    problems = []
    for width in WIDTHS:
        operator.driver.set_window_size(width, 900)
        for name, url in pages(world).items():
            operator.open(url)
            problems += [(width, name, p) for p in operator.driver.execute_script(OVERFLOW)]
    assert problems == []


def test_with_the_sidebar_closed_the_lists_fit_too(operator, world):
    a_lived_in_world(world)
    operator.driver.set_window_size(1280, 900)
    operator.open(reverse("admin:memory_reviewrun_changelist"))
    operator.find("#toggle-nav-sidebar").click()
    try:
        operator.open(reverse("admin:memory_memory_changelist"))
        assert "shifted" not in operator.find("#main").get_attribute("class")
        assert operator.driver.execute_script(OVERFLOW) == []
    finally:
        operator.find("#toggle-nav-sidebar").click()  # the choice is kept in the profile's localStorage


def test_the_index_says_what_needs_you_and_leads_there(operator, world, fake_provider):
    with use_config(provider_config_toml(fake_provider)):
        run = failing_review(fake_provider, conversation="telegram:77")
        operator.open(reverse("admin:index"))
        panel = operator.find("#attention")
        assert "Needs you: 3 things" in panel.text  # the failed run, the provider, the conversation's reviewer
        assert "1 conversation(s) whose last review failed" in operator.find("#attention li[data-level=warn]").text
        bad = [li.text for li in operator.find_all("#attention li[data-level=bad]")]
        assert any("1 failed review run(s)" in t for t in bad) and any("Provider primary is failing" in t for t in bad)
        operator.click("#attention li[data-level=bad] a[href*='status__exact=failed']")
        assert operator.find_all(f"#result_list a[href*='/reviewrun/{run.pk}/change/']")
        badge = operator.find("#result_list .fx-status-failed")
        assert badge.text == "failed" and badge.value_of_css_property("background-color") == "rgba(186, 33, 33, 1)"
        assert all(b.text == "failed" for b in operator.find_all("#result_list .fx-status"))
        operator.click(f"#result_list a[href*='/reviewrun/{run.pk}/change/']")
        assert "upstream exploded" in operator.text()
        operator.open(reverse("admin:index"))
        operator.click("#attention a[href*='provider=primary']")
        assert operator.find("#result_list .fx-status-failed").text == "failed"
        operator.open(reverse("admin:index"))
        operator.click("#counts a[href$='/memory/memory/']")
        assert operator.find_all("#result_list tbody tr")


def test_waiting_directive_changes_lead_from_the_index_to_the_rows(operator, world):
    memory_propose(op="add", agent_id="main", owner_id="default", scope_type="agent", scope_id="main",
                   key="rule", value="answer in one paragraph", category="directive", actor_type="reviewer")
    with use_config("[fermix_core.memory]\ndirective_approval = true\n"):
        operator.open(reverse("admin:index"))
        warn = operator.find("#attention li[data-level=warn]")
        assert "1 directive change(s) waiting for your approval" in warn.text
        operator.click("#attention li[data-level=warn] a")
    assert "archived=pending" in operator.driver.current_url
    assert "waiting for approval" in operator.find("#result_list").text
    assert "answer in one paragraph" in operator.find("#result_list").text


def test_search_marks_the_words_and_the_context_and_switches_to_newest_first(operator, world):
    hit = say("She runs along the river every morning")
    reply = say("Which river?", role="assistant")
    newer = say("morning swim in the river, then morning coffee, every morning", conversation="telegram:9")
    operator.open(reverse("admin:memory_message_changelist"))
    operator.find("#searchbar").send_keys("river morning")
    operator.click("#changelist-search input[type=submit]")
    assert {m.text.lower() for m in operator.find_all("#result_list mark")} >= {"river", "morning"}
    rows = {int(r.find_element(By.CSS_SELECTOR, ".field-id a").text): r
            for r in operator.find_all("#result_list tbody tr")}
    context_row, hit_row = rows[reply.id], rows[hit.id]
    assert "context: reply" in context_row.text and f"reply to #{hit.id}" in context_row.text
    tint = context_row.find_element(By.CSS_SELECTOR, "td").value_of_css_property("background-color")
    assert tint != hit_row.find_element(By.CSS_SELECTOR, "td").value_of_css_property("background-color")
    best = [int(e.text) for e in operator.find_all("#result_list .field-id a")]
    assert best.index(hit.id) < best.index(reply.id)  # a reply comes after what it answers
    assert operator.find("#recall-order .fx-current").text == "best match first"

    operator.click("#recall-order a[href*='order=newest']")
    newest = [int(e.text) for e in operator.find_all("#result_list .field-id a")]
    assert newest == sorted(newest, reverse=True) and newer.id == newest[0]
    assert operator.find("#recall-order .fx-current").text == "newest first"
    operator.click("#changelist-filter a[href*='role=user']")  # a filter keeps the order
    assert "order=newest" in operator.driver.current_url
    assert [int(e.text) for e in operator.find_all("#result_list .field-id a")] == sorted(
        [hit.id, newer.id, world.message.id], reverse=True)

    operator.open(reverse("admin:memory_memory_changelist"))
    operator.find("#searchbar").send_keys("green tea")
    operator.click("#changelist-search input[type=submit]")
    assert {m.text for m in operator.find_all("#result_list mark")} == {"green", "tea"}
    assert "matched: tea, green" in operator.find("#result_list").text


def test_long_provenance_folds_and_opens_and_model_output_is_indented(operator, world):
    a_lived_in_world(world)
    operator.open(reverse("admin:resources_resource_change", args=[world.user_md.pk]))
    fold = operator.find("#revisions details.fx-fold")
    assert fold.get_attribute("open") is None and not fold.find_element(By.CSS_SELECTOR, "pre").is_displayed()
    fold.find_element(By.CSS_SELECTOR, "summary").click()
    assert fold.find_element(By.CSS_SELECTOR, "pre").is_displayed()
    assert '"memory_ids": [\n    1,\n    2,' in fold.find_element(By.CSS_SELECTOR, "pre").text
    operator.click("#revisions a.rollback-link")
    assert operator.find("#confirm-rollback")  # the link is on screen and leads to the preview

    operator.open(reverse("admin:memory_reviewrun_change", args=[world.run.pk]))
    output = operator.find(".field-output_block pre").text
    assert output.startswith('{\n  "operations": [\n    {')


def test_labels_dates_and_statuses_read_as_words(operator, world):
    operator.open(reverse("admin:memory_memory_change", args=[Memory.objects.get(key="home_city").pk]))
    assert operator.find(".field-promote_target_label .readonly").text == "USER.md"
    operator.open(reverse("admin:memory_reviewrun_changelist"))
    badge = operator.find("#result_list .fx-status-ok")
    assert badge.text == "ok" and badge.value_of_css_property("background-color") == "rgba(61, 122, 42, 1)"
    started = operator.find("#result_list td.field-started_at").text
    assert len(started) == 16 and started[4] == "-" and started[13] == ":"  # 2026-12-01 19:40
    assert operator.find("#result_list td.field-took").text.endswith(("ms", "s"))
    operator.click("#changelist-filter a[href*='status__exact=nothing_to_save']")
    assert "nothing to save" in operator.find("#changelist-filter").text
