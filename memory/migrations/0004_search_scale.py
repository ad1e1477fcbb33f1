"""Search at scale.

SQLite: the FTS5 mirrors also index the scope columns (agent, owner, conversation), so scoped recall
intersects posting lists inside the index; the mirrors are re-created and rebuilt.

PostgreSQL: a `search_vector` tsvector column kept current by the database (GENERATED ALWAYS … STORED)
on messages and memories, each with a GIN index. Memory keys weigh more than values.
"""

from django.db import migrations

from memory import fts

# The mirrors as 0002 created them, for going backwards.
PREVIOUS = (
    fts.Mirror("messages_fts", "messages", ("content",)),
    fts.Mirror("memories_fts", "memories", ("key", "value")),
)

POSTGRES_FORWARDS = [
    "ALTER TABLE messages ADD COLUMN search_vector tsvector "
    "GENERATED ALWAYS AS (to_tsvector('english'::regconfig, content)) STORED",
    "CREATE INDEX messages_search_idx ON messages USING gin (search_vector)",
    "ALTER TABLE memories ADD COLUMN search_vector tsvector GENERATED ALWAYS AS ("
    "setweight(to_tsvector('english'::regconfig, replace(key, '_', ' ')), 'A') || "
    "setweight(to_tsvector('english'::regconfig, value), 'B')) STORED",
    "CREATE INDEX memories_search_idx ON memories USING gin (search_vector)",
]
POSTGRES_BACKWARDS = [
    "DROP INDEX IF EXISTS memories_search_idx",
    "ALTER TABLE memories DROP COLUMN IF EXISTS search_vector",
    "DROP INDEX IF EXISTS messages_search_idx",
    "ALTER TABLE messages DROP COLUMN IF EXISTS search_vector",
]


def _recreate(cursor, mirrors) -> None:
    for mirror in fts.MIRRORS + PREVIOUS:
        for name in mirror.triggers:
            cursor.execute(f"DROP TRIGGER IF EXISTS {name}")
        cursor.execute(f"DROP TABLE IF EXISTS {mirror.name}")
    for mirror in mirrors:
        cursor.execute(mirror.create_table)
        for sql in mirror.triggers.values():
            cursor.execute(sql)
        cursor.execute(f"INSERT INTO {mirror.name}({mirror.name}) VALUES ('rebuild')")


def forwards(apps, schema_editor):
    connection = schema_editor.connection
    with connection.cursor() as cursor:
        if connection.vendor == "sqlite":
            _recreate(cursor, fts.MIRRORS)
        elif connection.vendor == "postgresql":
            for sql in POSTGRES_FORWARDS:
                cursor.execute(sql)


def backwards(apps, schema_editor):
    connection = schema_editor.connection
    with connection.cursor() as cursor:
        if connection.vendor == "sqlite":
            _recreate(cursor, PREVIOUS)
        elif connection.vendor == "postgresql":
            for sql in POSTGRES_BACKWARDS:
                cursor.execute(sql)


class Migration(migrations.Migration):
    dependencies = [("memory", "0003_review_runs")]
    operations = [migrations.RunPython(forwards, backwards)]
