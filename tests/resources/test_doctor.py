"""doctor: structured checks, the bootstrap-templates check, JSON output and exit status."""

import dataclasses
import json
import shutil

import pytest
from django.db import connection
from django.utils import timezone

from console.doctor import check_bootstrap_templates, doctor_report, doctor_run
from fermix_site import conf as conf_module
from fermix_site.models import Heartbeat
from resources.bootstrap import TEMPLATE_DIR, bootstrap_seed, bootstrap_template
from resources.models import ResourceRevision
from tests.conftest import run_manage

pytestmark = pytest.mark.django_db


def by_name(results):
    return {r.name: r for r in results}


def test_a_seeded_install_passes_every_storage_check(home):
    bootstrap_seed(agent_id="main")
    Heartbeat.objects.create(name="qcluster", seen_at=timezone.now())
    checks = by_name(doctor_run())
    for name in ("config", "home_writable", "storage", "database", "migrations", "fts_triggers", "wal",
                 "durability", "revision_hashes", "prompt_files", "bootstrap_templates", "worker"):
        assert checks[name].status == "ok", checks[name]
    assert checks["revision_hashes"].details["checked"] == 4


def test_too_little_free_space_is_an_error_naming_the_setting(home):
    with conf_module.conf.use(dataclasses.replace(home, storage=conf_module.StorageConf(min_free_mb=10**7))):
        check = by_name(doctor_run())["storage"]
    assert check.status == "error" and "less than min_free_mb = 10000000" in check.message
    assert check.details["ok"] is False and check.details["free_bytes"] > 0


def test_a_revision_whose_content_no_longer_matches_its_hash_is_an_error(home):
    bootstrap_seed(agent_id="main")
    ResourceRevision.objects.filter(resource_type="soul_md").update(content="tampered")
    check = by_name(doctor_run())["revision_hashes"]
    assert check.status == "error"
    assert check.details["mismatched"] == ["main/soul_md r1"]
    assert doctor_report()["status"] == "error"


def test_a_prompt_file_that_differs_from_its_current_revision_warns_and_names_it(home):
    bootstrap_seed(agent_id="main")
    assert by_name(doctor_run())["prompt_files"].details == {"checked": 4}
    (conf_module.conf.bootstrap_dir("main") / "SOUL.md").write_text("edited by hand\n")
    (conf_module.conf.bootstrap_dir("main") / "FERMIX.md").unlink()
    check = by_name(doctor_run())["prompt_files"]
    assert check.status == "warning" and sorted(check.details["differ"]) == ["main/FERMIX.md", "main/SOUL.md"]


def test_template_drift_warns_and_names_the_files(home, tmp_path):
    bootstrap_seed(agent_id="main")
    later = tmp_path / "templates"
    shutil.copytree(TEMPLATE_DIR, later)
    (later / "REALTIME.md").write_text(bootstrap_template("realtime_md") + "- New advice.\n")
    check = check_bootstrap_templates(template_dir=later)
    assert check.status == "warning"
    assert "shipped template changed since seeding: main/REALTIME.md" in check.message
    assert check.details["main"]["drifted"] == ["REALTIME.md"]


def test_files_from_before_tracking_pass_and_are_named(home):
    folder = home.home / "bootstrap" / "main"
    folder.mkdir(parents=True)
    for name in ("IDENTITY.md", "FERMIX.md", "SOUL.md", "REALTIME.md"):
        (folder / name).write_text(f"hand-made {name}\n")
    check = check_bootstrap_templates()
    assert check.status == "ok"
    assert "seeded before revision tracking, nothing to compare: main/FERMIX.md, main/SOUL.md, main/REALTIME.md" \
        in check.message
    assert "IDENTITY" not in check.message


def test_missing_bootstrap_files_warn(home):
    check = check_bootstrap_templates()
    assert check.status == "warning" and "missing: main/FERMIX.md" in check.message


def test_a_cluster_not_seen_recently_warns(home):
    assert by_name(doctor_run())["worker"].status == "warning"
    Heartbeat.objects.create(name="qcluster", seen_at=timezone.now() - timezone.timedelta(minutes=10))
    worker = by_name(doctor_run())["worker"]
    assert worker.status == "warning" and "last seen" in worker.message


def test_an_unwritable_home_is_an_error(tmp_path, monkeypatch):
    not_a_folder = tmp_path / "file"
    not_a_folder.write_text("")
    monkeypatch.setenv("FERMIX_HOME", str(not_a_folder))
    with conf_module.conf.use(conf_module.load()):
        check = by_name(doctor_run())["home_writable"]
    assert check.status == "error" and "is not writable" in check.message


def test_an_invalid_config_is_an_error_naming_the_key(home):
    (home.home / "config.toml").write_text("[fermix_core.compaction]\nthreshold = 3\n")
    check = by_name(doctor_run())["config"]
    assert check.status == "error" and "fermix_core.compaction.threshold" in check.message


@pytest.mark.skipif(connection.vendor != "sqlite", reason="FTS5 triggers exist on SQLite only")
def test_missing_fts_triggers_are_an_error(home):
    with connection.cursor() as cursor:
        cursor.execute("DROP TRIGGER messages_fts_ai")
    check = by_name(doctor_run())["fts_triggers"]
    assert check.status == "error" and "messages_fts_ai" in check.message and "memory.E001" in check.message


@pytest.mark.django_db(transaction=True)
@pytest.mark.django_db(transaction=True)  # a second process reads what this test wrote
def test_the_command_prints_json_and_exits_non_zero_on_errors(home):
    bootstrap_seed(agent_id="main")
    healthy = run_manage("doctor", "--json")
    report = json.loads(healthy.stdout)
    assert healthy.returncode == 0, healthy.stderr
    assert report["status"] == "warning"  # no cluster running in this test
    assert {c["name"] for c in report["checks"]} >= {"config", "wal", "revision_hashes", "bootstrap_templates"}
    ResourceRevision.objects.filter(resource_type="fermix_md").update(content_hash="0" * 64)
    broken = run_manage("doctor")
    assert broken.returncode == 1
    assert "error    revision_hashes" in broken.stdout
    assert "1 check(s) failed: revision_hashes" in broken.stderr
