"""USER.md and MEMORY.md: exact bytes for representative rows, caps, truncation, budgets, scope rules."""

import pytest
from django.db import connection

from fermix_site.conf import conf, load
from memory.models import Memory
from memory.prompt_files import prompt_files_rebuild, render, render_for_agent, why_not_rendered
from memory.rows import memory_archive
from resources.models import ResourceRevision
from tests.memory_factories import fact

pytestmark = pytest.mark.django_db


def test_user_md_has_its_sections_in_order_newest_first(home):
    fact("goal", "wants to run a marathon in 2027", "goal", minute=1)
    fact("city", "lives in Lisbon", "identity", minute=2)
    fact("name", "is called Ana", "identity", minute=5)
    fact("tea", "prefers green tea over coffee", "preference", minute=3)
    assert render_for_agent("main", "user_md").content == (
        "## Identity\n"
        "- is called Ana\n"
        "- lives in Lisbon\n"
        "\n"
        "## Preferences\n"
        "- prefers green tea over coffee\n"
        "\n"
        "## Goals\n"
        "- wants to run a marathon in 2027\n"
    )


def test_memory_md_puts_working_rules_before_context(home):
    fact("proj", "works on the Fermix memory service", "context", minute=1)
    fact("tone", "answer in plain English without emoji", "directive", minute=2)
    fact("stack", "the service is written in Django", "context", minute=3)
    assert render_for_agent("main", "memory_md").content == (
        "## Working Rules\n"
        "- answer in plain English without emoji\n"
        "\n"
        "## Context\n"
        "- the service is written in Django\n"
        "- works on the Fermix memory service\n"
    )


def test_no_rows_give_an_empty_file(home):
    assert render_for_agent("main", "user_md").content == ""
    assert render_for_agent("main", "memory_md").content == ""


def test_each_section_keeps_its_newest_rows_up_to_its_cap(home):
    for i in range(8):
        fact(f"id{i}", f"identity fact {i}", "identity", minute=i)
    for i in range(7):
        fact(f"goal{i}", f"goal {i}", "goal", minute=i)
    rendered = render_for_agent("main", "user_md")
    assert rendered.content == (
        "## Identity\n" + "".join(f"- identity fact {i}\n" for i in range(7, 1, -1))
        + "\n## Goals\n" + "".join(f"- goal {i}\n" for i in range(6, 1, -1))
    )
    assert rendered.over_cap == 4
    for i in range(12 + 3):
        fact(f"ctx{i}", f"context {i}", "context", minute=i)
    for i in range(9):
        fact(f"rule{i}", f"rule {i}", "directive", minute=i)
    memory_md = render_for_agent("main", "memory_md")
    assert memory_md.content.count("- rule ") == 8 and memory_md.content.count("- context ") == 12
    assert "- rule 0\n" not in memory_md.content and "- context 2\n" not in memory_md.content
    assert memory_md.over_cap == 4


def test_values_over_200_characters_are_cut_with_an_ellipsis(home):
    row = fact("long", "x" * 150, "identity")
    Memory.objects.filter(pk=row.pk).update(value="y" * 250 + "\nsecond line")  # imported before the limit
    assert render_for_agent("main", "user_md").content == "## Identity\n- " + "y" * 200 + "…\n"


def test_a_value_with_newlines_stays_on_one_line(home):
    fact("multi", "likes\n## Goals\n- fake", "interest")
    assert render_for_agent("main", "user_md").content == "## Interests\n- likes ## Goals - fake\n"


def test_the_token_budget_drops_rows_after_the_caps_and_counts_them(home, monkeypatch):
    for i in range(6):
        fact(f"i{i}", f"identity number {i} " + "z" * 60, "identity", minute=i)
    monkeypatch.setenv("FERMIX_MEMORY_PROMPT_USER_TOKEN_CAP", "60")
    with conf.use(load()):
        rendered = render_for_agent("main", "user_md")
    assert rendered.tokens <= 60
    assert len(rendered.shown) == 2 and len(rendered.over_budget) == 4
    assert rendered.content.startswith("## Identity\n- identity number 5 ")
    assert len(rendered.content.encode()) / 4 <= 60


def test_scope_rules_decide_what_renders(home):
    shown = [
        fact("a", "owner identity", "identity"),
        fact("b", "agent context", "context", scope_type="agent"),
        fact("c", "conversation context", "context", scope_type="conversation"),
        fact("d", "agent directive", "directive", scope_type="agent"),
    ]
    hidden = [
        fact("e", "conversation directive", "directive", scope_type="conversation"),
        fact("f", "job context", "context", scope_type="job", scope_id="job:1"),
        fact("g", "job identity", "identity", scope_type="job", scope_id="job:1"),
        fact("h", "another owner's identity", "identity", owner="bo"),
        fact("i", "a note", "", scope_type="conversation"),
    ]
    text = render_for_agent("main", "user_md").content + render_for_agent("main", "memory_md").content
    for row in shown:
        assert f"- {row.value}\n" in text and why_not_rendered(row) is None
    for row in hidden:
        assert row.value not in text and why_not_rendered(row)
    assert "never render" in why_not_rendered(hidden[0])
    assert "another" not in text


def test_rendering_is_deterministic(home):
    rows = [fact(f"k{i}", f"value {i}", "interest", minute=i % 3) for i in range(5)]
    first = render("user_md", rows, 1500).content
    assert render("user_md", list(reversed(rows)), 1500).content == first


def test_a_rebuild_writes_the_files_and_a_revision_only_when_the_content_changed(home):
    row = fact("city", "lives in Lisbon", "identity")
    prompt_files_rebuild(agent_id="main", trigger="test", memory_ids=[row.id])
    user_md = conf.memory_dir("main") / "USER.md"
    assert user_md.read_text() == "## Identity\n- lives in Lisbon\n"
    assert (conf.memory_dir("main") / "MEMORY.md").read_text() == ""
    revision = ResourceRevision.objects.get(agent_id="main", resource_type="user_md")
    assert revision.mutation_source == "extraction_rebuild"
    assert revision.provenance["trigger"] == "test" and revision.provenance["memory_ids"] == [row.id]

    prompt_files_rebuild(agent_id="main", trigger="again")
    assert ResourceRevision.objects.filter(resource_type="user_md").count() == 1

    memory_archive(memory_id=row.id, archived_by="operator")
    prompt_files_rebuild(agent_id="main", trigger="archive")
    assert user_md.read_text() == ""
    assert ResourceRevision.objects.filter(resource_type="user_md").count() == 2


def test_the_scheduled_rebuild_records_scheduler_rebuild(home):
    from django_q.models import Schedule

    from memory.tasks import rebuild_prompt_files_all

    fact("city", "lives in Lisbon", "identity")
    rebuild_prompt_files_all()
    assert ResourceRevision.objects.get(resource_type="user_md").mutation_source == "scheduler_rebuild"
    assert Schedule.objects.get(name="fermix-prompt-files-rebuild").func == "memory.tasks.rebuild_prompt_files_all"


def test_rows_of_other_owners_are_stored_but_never_rendered(home):
    fact("city", "lives in Oslo", "identity", owner="bo")
    assert render_for_agent("main", "user_md").content == ""
    assert connection.vendor in ("sqlite", "postgresql")
