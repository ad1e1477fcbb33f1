"""SQLite runs in WAL with IMMEDIATE transactions, a 20 s busy timeout and synchronous=NORMAL (FULL with
`[fermix_core.storage] durability = "full"`)."""

import json
import os

import pytest
from django.db import connection

from tests.conftest import run_manage, write_config

pytestmark = pytest.mark.django_db


@pytest.fixture
def sqlite_only():
    if connection.vendor != "sqlite":
        pytest.skip("SQLite settings")


def pragma(name):
    with connection.cursor() as cursor:
        cursor.execute(f"PRAGMA {name}")
        return cursor.fetchone()[0]


def test_sqlite_is_in_wal_with_normal_sync_and_a_20s_busy_timeout(sqlite_only):
    assert pragma("journal_mode") == "wal"
    assert pragma("synchronous") == 1  # NORMAL
    assert pragma("busy_timeout") == 20000
    assert connection.settings_dict["OPTIONS"]["transaction_mode"] == "IMMEDIATE"


def test_durability_full_makes_sqlite_sync_at_every_commit(tmp_path):
    write_config(tmp_path, '[fermix_core.storage]\ndurability = "full"\n')
    env = {k: v for k, v in os.environ.items() if k != "DATABASE_URL"}
    env.update(FERMIX_HOME=str(tmp_path), DJANGO_SETTINGS_MODULE="fermix_site.settings")
    result = run_manage("doctor", "--json", env=env)
    checks = {c["name"]: c for c in json.loads(result.stdout)["checks"]}
    assert checks["durability"]["details"] == {"durability": "full", "synchronous": "FULL"}
    assert checks["durability"]["status"] == "ok"


def test_the_documented_tables_exist_with_their_names():
    tables = set(connection.introspection.table_names())
    assert {"messages", "memories", "memory_sources", "scheduled_jobs", "job_runs", "resources",
            "resource_revisions", "review_states", "api_keys", "conversations", "memory_events"} <= tables
    columns = {c.name for c in connection.introspection.get_table_description(connection.cursor(), "messages")}
    assert {"id", "agent_id", "owner_id", "channel", "chat_id", "thread_scope", "sender", "role", "kind",
            "content", "metadata_json", "created_at"} <= columns
    columns = {c.name for c in connection.introspection.get_table_description(connection.cursor(), "memories")}
    assert {"id", "agent_id", "owner_id", "scope_type", "scope_id", "category", "key", "value", "confidence",
            "promote_target", "source_id", "source_type", "source_name", "source_description", "session_id",
            "run_id", "source_message_id", "archived_at", "archived_by", "archive_reason", "created_at",
            "updated_at"} <= columns


def test_the_fts_mirrors_exist_on_sqlite(sqlite_only):
    tables = set(connection.introspection.table_names())
    assert {"messages_fts", "memories_fts"} <= tables


def test_the_unique_keys_of_the_documents_are_constraints():
    with connection.cursor() as cursor:
        found = {
            tuple(c["columns"])
            for table in ("memories", "resources", "resource_revisions")
            for c in connection.introspection.get_constraints(cursor, table).values()
            if c["unique"]
        }
    assert ("agent_id", "owner_id", "scope_type", "scope_id", "key") in found
    assert ("agent_id", "resource_type", "scope_id") in found
    assert ("agent_id", "resource_type", "scope_id", "revision") in found


def test_api_keys_are_stored_hashed():
    from api.models import ApiKey

    prefix, key = ApiKey.generate()
    row = ApiKey.objects.create(name="bot", prefix=prefix, key_hash=ApiKey.hash(key), role="channel")
    stored = ApiKey.objects.get(pk=row.pk)
    assert key not in (stored.key_hash, stored.prefix) and len(stored.key_hash) == 64
    assert stored.matches(key) and not stored.matches(key + "x")
