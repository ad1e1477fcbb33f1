"""The resource commands, run as an operator would run them."""

import io
import tomllib

import pytest
from django.core.management import CommandError, call_command

from resources.bootstrap import bootstrap_seed, bootstrap_template
from resources.models import ResourceRevision
from resources.services import resource_commit, resource_write_file
from tests.conftest import run_manage

pytestmark = pytest.mark.django_db


def call(*args, **options):
    out, err = io.StringIO(), io.StringIO()
    call_command(*args, stdout=out, stderr=err, **options)
    return out.getvalue(), err.getvalue()


def edit(content, resource_type="soul_md", source="manual_edit"):
    return resource_write_file(agent_id="main", resource_type=resource_type, content=content, mutation_source=source)


@pytest.fixture
def seeded(home):
    bootstrap_seed(agent_id="main")
    return home


def test_list_shows_each_resource_with_its_current_revision(seeded):
    edit("Soul two.\n")
    resource_commit(agent_id="main", resource_type="checkpoint", scope_id="telegram:42", content="summary",
                    mutation_source="compaction")
    out, _ = call("resource_list")
    lines = out.splitlines()
    assert lines[1].split() == ["TYPE", "SCOPE", "REV", "SOURCE", "BYTES", "UPDATED", "(UTC)", "FILE"]
    soul = next(line for line in lines if line.startswith("soul_md"))
    assert soul.split()[:4] == ["soul_md", "global", "2", "manual_edit"]
    assert soul.endswith("bootstrap/main/SOUL.md")
    assert any(line.split()[:3] == ["checkpoint", "telegram:42:root", "1"] for line in lines)


def test_list_for_an_agent_without_resources_says_how_to_seed(home):
    out, _ = call("resource_list", "--agent", "empty")
    assert "No resources recorded for agent empty yet" in out and "fermix_setup" in out


def test_show_prints_the_exact_content_of_a_revision(seeded):
    edit("Soul two.\nno final newline")
    out, err = call("resource_show", "soul_md")
    assert out == "Soul two.\nno final newline"
    assert err.startswith("# soul_md r2 · manual_edit")
    out, _ = call("resource_show", "soul_md", "1")
    assert out == bootstrap_template("soul_md")


def test_show_and_history_of_checkpoints_need_the_conversation(home):
    for text in ("first summary", "second summary"):
        resource_commit(agent_id="main", resource_type="checkpoint", scope_id="telegram:42", content=text,
                        mutation_source="compaction")
    with pytest.raises(CommandError, match="--scope telegram"):
        call("resource_show", "checkpoint")
    out, _ = call("resource_show", "checkpoint", "1", "--scope", "telegram:42")
    assert out == "first summary"
    out, _ = call("resource_history", "checkpoint", "--scope", "telegram:42:root")
    assert "checkpoint [telegram:42:root] of agent main: 2 revision(s), current r2" in out


def test_history_lists_newest_first_marks_the_current_and_honours_limit(seeded):
    for text in ("two\n", "three\n", "four\n"):
        edit(text)
    out, _ = call("resource_history", "soul_md", "--limit", "2")
    lines = out.splitlines()
    assert lines[0] == "soul_md of agent main: 4 revision(s), current r4, showing the newest 2"
    assert lines[2].split()[:4] == ["*", "4", "3", "manual_edit"]
    assert lines[3].split()[:3] == ["3", "2", "manual_edit"]
    assert len(lines) == 4


def test_diff_is_unified_with_labels_and_context(seeded):
    edit("a\nb\nc\nd\ne\nf\ng\n")
    edit("a\nb\nc\nD\ne\nf\ng\n")
    out, _ = call("resource_diff", "soul_md", "2", "3", "--context", "1")
    lines = out.splitlines()
    assert lines[0].startswith("--- soul_md r2 (") and lines[0].endswith(" UTC, manual_edit)")
    assert lines[1].startswith("+++ soul_md r3 (")
    assert lines[2:] == ["@@ -3,3 +3,3 @@", " c", "-d", "+D", " e"]
    out, _ = call("resource_diff", "soul_md", "2", "2")
    assert out.strip() == "r2 and r2 of soul_md have identical content."


def test_unknown_types_and_revisions_are_clear_errors(seeded):
    with pytest.raises(CommandError, match="unknown resource type 'soul'; known types: identity_md"):
        call("resource_history", "soul")
    with pytest.raises(CommandError, match="soul_md has no revision 9 for agent main"):
        call("resource_show", "soul_md", "9")
    with pytest.raises(CommandError, match="fermix_md has a single global scope"):
        call("resource_history", "fermix_md", "--scope", "telegram:1")


def test_rollback_with_yes_writes_and_reports(seeded):
    edit("Soul two.\n")
    out, _ = call("resource_rollback", "soul_md", "1", "--yes")
    assert "-Soul two." in out
    assert "Rolled back soul_md: new revision r3 has the content of r1 (previous r2)" in out
    assert (seeded.home / "bootstrap" / "main" / "SOUL.md").read_text() == bootstrap_template("soul_md")


def test_rollback_to_the_current_content_says_so(seeded):
    out, _ = call("resource_rollback", "soul_md", "1", "--yes")
    assert out.strip() == "soul_md is already at the content of r1 (current revision r1); nothing was written."


def test_rollback_of_user_md_prints_the_rebuild_caveat(home):
    edit("- tea\n", resource_type="user_md", source="extraction_rebuild")
    edit("- coffee\n", resource_type="user_md", source="extraction_rebuild")
    out, _ = call("resource_rollback", "user_md", "1", "--yes")
    assert out.count("USER.md is rebuilt from promoted memory rows") == 1
    assert out.index("rebuilt from promoted memory rows") < out.index("Rolled back user_md")


@pytest.mark.django_db(transaction=True)
def test_rollback_asks_for_confirmation_and_a_no_writes_nothing(seeded):
    edit("Soul two.\n")
    refused = run_manage("resource_rollback", "soul_md", "1", input="n\n")
    assert refused.returncode == 1
    assert "Write the content of r1 to SOUL.md as a new revision? [y/N]" in refused.stdout
    assert "rollback cancelled; nothing was written" in refused.stderr
    assert ResourceRevision.objects.filter(resource_type="soul_md").count() == 2
    accepted = run_manage("resource_rollback", "soul_md", "1", input="y\n")
    assert accepted.returncode == 0, accepted.stderr
    assert ResourceRevision.objects.filter(resource_type="soul_md").count() == 3


@pytest.mark.django_db(transaction=True)
def test_rollback_of_a_checkpoint_and_of_an_unknown_type_exit_non_zero(home):
    resource_commit(agent_id="main", resource_type="checkpoint", scope_id="telegram:1", content="s",
                    mutation_source="compaction")
    for extra in ([], ["--scope", "telegram:1"]):
        checkpoint = run_manage("resource_rollback", "checkpoint", "1", "--yes", *extra)
        assert checkpoint.returncode == 1
        assert "checkpoint revisions are audit and history records only" in checkpoint.stderr
    unknown = run_manage("resource_show", "nonsense")
    assert unknown.returncode == 1 and "unknown resource type 'nonsense'" in unknown.stderr


def test_setup_without_input_writes_defaults_and_seeds_missing_files(home):
    out, _ = call("fermix_setup", "--noinput")
    config = tomllib.loads((home.home / "config.toml").read_text())
    assert config["fermix_core"]["memory"]["review_interval_hours"] == 24
    assert config["fermix_core"]["compaction"]["threshold"] == 0.85
    assert out.count("seeded  ") == 4
    again, _ = call("fermix_setup", "--noinput")
    assert again.count("kept    ") == 4 and "wrote" not in again


def test_setup_without_input_leaves_an_existing_config_alone(home):
    (home.home / "config.toml").write_text("# mine\n[fermix_core.memory]\nreview_interval_hours = 6\n")
    call("fermix_setup", "--noinput")
    assert (home.home / "config.toml").read_text() == "# mine\n[fermix_core.memory]\nreview_interval_hours = 6\n"


@pytest.mark.django_db(transaction=True)
def test_setup_wizard_asks_validates_and_writes(home):
    (home.home / "config.toml").write_text('[fermix_core.memory]\nowner_id = "ada"\n')
    done = run_manage("fermix_setup", "--agent", "juniper", input="Juniper\n-3\n6\n0.9\n")
    assert done.returncode == 0, done.stderr
    assert "review interval (hours) must be from 0 to 8760" in done.stderr  # -3 was asked again
    config = tomllib.loads((home.home / "config.toml").read_text())
    assert config["fermix_core"]["memory"] == {"owner_id": "ada", "review_interval_hours": 6}
    assert config["fermix_core"]["compaction"] == {"threshold": 0.9}
    identity = (home.home / "bootstrap" / "juniper" / "IDENTITY.md").read_text()
    assert "Your name is Juniper." in identity


def test_setup_wizard_keeps_comments_and_other_tables(home, monkeypatch):
    text = ('# mine\n[fermix_core.memory]\nowner_id = "ada"  # the owner\nreview_interval_hours = 24  # daily\n\n'
            '[my_tools]\nanything = "kept"\n')
    (home.home / "config.toml").write_text(text)
    answers = iter(["Juniper", "6", "0.9"])
    monkeypatch.setattr("builtins.input", lambda prompt: next(answers))
    call("fermix_setup")
    assert (home.home / "config.toml").read_text() == text.replace(
        "# daily\n\n", "# daily\n\n[fermix_core.compaction]\nthreshold = 0.9\n\n").replace("= 24", "= 6")


@pytest.mark.django_db(transaction=True)
def test_soul_command_proposes_and_applies_by_token(seeded):
    edit("Soul two.\n")
    proposed = run_manage("soul", "revert", "1")
    assert proposed.returncode == 0, proposed.stderr
    assert "+++ SOUL.md r1" in proposed.stdout
    token = proposed.stdout.split("python manage.py soul apply ")[1].split()[0]
    applied = run_manage("soul", "apply", token)
    assert applied.returncode == 0, applied.stderr
    assert "Applied: SOUL.md is now r3 (the content of r1)" in applied.stdout
    again = run_manage("soul", "apply", token)
    assert again.returncode == 1 and "already applied" in again.stderr


def test_commands_record_a_hand_edit_before_showing_the_history(seeded):
    (seeded.home / "bootstrap" / "main" / "SOUL.md").write_text("Edited in an editor.\n")
    out, err = call("resource_history", "soul_md")
    assert "recorded SOUL.md as found on disk: r2 (manual_edit)" in err
    assert out.splitlines()[2].split()[:4] == ["*", "2", "1", "manual_edit"]
    _, err = call("resource_history", "soul_md")
    assert err == ""
