"""Bootstrap files: seeding on install, capture on load, template drift."""

import shutil

import pytest

from resources.bootstrap import (
    TEMPLATE_DIR,
    bootstrap_load,
    bootstrap_seed,
    bootstrap_template,
    bootstrap_template_check,
)
from resources.catalog import content_hash
from resources.models import ResourceRevision

pytestmark = pytest.mark.django_db


def folder(home):
    return home.home / "bootstrap" / "main"


def history(resource_type):
    return list(ResourceRevision.objects.filter(resource_type=resource_type).order_by("revision")
                .values_list("mutation_source", flat=True))


def test_seeding_writes_every_bootstrap_file_as_a_seed_revision(home):
    results = bootstrap_seed(agent_id="main", agent_name="Juniper")
    assert [r.seeded for r in results] == [True] * 4
    assert sorted(p.name for p in folder(home).iterdir()) == ["FERMIX.md", "IDENTITY.md", "REALTIME.md", "SOUL.md"]
    assert "Your name is Juniper." in (folder(home) / "IDENTITY.md").read_text()
    soul = ResourceRevision.objects.get(resource_type="soul_md")
    assert soul.mutation_source == "seed"
    assert soul.content == (TEMPLATE_DIR / "SOUL.md").read_text()
    assert soul.provenance["template_hash"] == content_hash(soul.content)
    assert ResourceRevision.objects.get(resource_type="identity_md").provenance["agent_name"] == "Juniper"


def test_seeding_only_writes_files_that_do_not_exist(home):
    folder(home).mkdir(parents=True)
    (folder(home) / "SOUL.md").write_text("My own soul.\n")
    results = {r.resource_type: r for r in bootstrap_seed(agent_id="main")}
    assert results["soul_md"].seeded is False
    assert (folder(home) / "SOUL.md").read_text() == "My own soul.\n"
    assert history("soul_md") == ["imported"]  # recorded as found, never as a seed
    assert results["fermix_md"].seeded is True


def test_seeding_twice_changes_nothing(home):
    bootstrap_seed(agent_id="main")
    (folder(home) / "FERMIX.md").write_text("edited\n")
    second = bootstrap_seed(agent_id="main")
    assert [r.seeded for r in second] == [False] * 4
    assert (folder(home) / "FERMIX.md").read_text() == "edited\n"
    assert history("identity_md") == ["seed"]


def test_loading_imports_a_file_with_no_record(home):
    folder(home).mkdir(parents=True)
    (folder(home) / "FERMIX.md").write_text("rules\n")
    loaded = bootstrap_load(agent_id="main")
    assert list(loaded) == ["fermix_md"]
    assert loaded["fermix_md"].content == "rules\n" and loaded["fermix_md"].revision == 1
    assert history("fermix_md") == ["imported"]


def test_loading_captures_a_manual_edit_once(home):
    bootstrap_seed(agent_id="main")
    (folder(home) / "SOUL.md").write_text("Edited by hand.\n")
    loaded = bootstrap_load(agent_id="main")
    assert loaded["soul_md"].content == "Edited by hand.\n" and loaded["soul_md"].revision == 2
    bootstrap_load(agent_id="main")
    assert history("soul_md") == ["seed", "manual_edit"]
    edit = ResourceRevision.objects.get(resource_type="soul_md", revision=2)
    assert edit.provenance["detected_during"] == "bootstrap_load"


def test_loading_unchanged_files_records_nothing_and_keeps_prompt_order(home):
    bootstrap_seed(agent_id="main")
    loaded = bootstrap_load(agent_id="main", types=("identity_md", "soul_md", "fermix_md"))
    assert list(loaded) == ["identity_md", "soul_md", "fermix_md"]
    assert ResourceRevision.objects.count() == 4


def test_the_drift_check_passes_when_the_templates_are_unchanged(home):
    bootstrap_seed(agent_id="main")
    result = bootstrap_template_check(agent_id="main")
    assert result.drifted == [] and result.untracked == [] and result.missing == []
    assert result.current == ["FERMIX.md", "SOUL.md", "REALTIME.md"]  # IDENTITY.md is never compared


def test_the_drift_check_names_files_whose_shipped_template_changed(home, tmp_path):
    bootstrap_seed(agent_id="main")
    shipped_later = tmp_path / "templates"
    shutil.copytree(TEMPLATE_DIR, shipped_later)
    (shipped_later / "SOUL.md").write_text(bootstrap_template("soul_md") + "- A new line in a later release.\n")
    (shipped_later / "IDENTITY.md").write_text("A renamed identity template.\n")
    result = bootstrap_template_check(agent_id="main", template_dir=shipped_later)
    assert result.drifted == ["SOUL.md"]
    assert result.current == ["FERMIX.md", "REALTIME.md"]


def test_the_drift_check_compares_the_template_not_the_operators_edits(home):
    bootstrap_seed(agent_id="main")
    (folder(home) / "SOUL.md").write_text("Rewritten by the owner.\n")
    bootstrap_load(agent_id="main")
    assert bootstrap_template_check(agent_id="main").drifted == []


def test_files_seeded_before_tracking_pass_and_are_named(home):
    folder(home).mkdir(parents=True)
    for name in ("FERMIX.md", "SOUL.md"):
        (folder(home) / name).write_text(f"old {name}\n")
    bootstrap_load(agent_id="main")
    result = bootstrap_template_check(agent_id="main")
    assert result.untracked == ["FERMIX.md", "SOUL.md"]
    assert result.missing == ["REALTIME.md"]
    assert result.drifted == []
