"""PostgreSQL: a GIN index of (chat_id, search_vector), so recall in one conversation is one index probe.

With only the vector's GIN index, a common word in one conversation is a plan choice between every
match of the word (then filtered and sorted) and every message of the conversation (each vector
rechecked); at a million messages both cost tens of milliseconds. `btree_gin` lets one GIN index hold
the scalar column beside the vector, and GIN intersects the two posting lists. `btree_gin` ships with
PostgreSQL and is a trusted extension (13+): the database owner may create it. Where it cannot be
created, the migration goes on without the index (search stays correct, only slower in one
conversation) and the `memory.W002` check says so. SQLite's mirrors index the scope columns already.
"""

import logging

from django.db import DatabaseError, migrations, transaction

log = logging.getLogger(__name__)

INDEX = "messages_chat_search_idx"


def forwards(apps, schema_editor):
    connection = schema_editor.connection
    if connection.vendor != "postgresql":
        return
    try:
        with transaction.atomic(using=connection.alias), connection.cursor() as cursor:
            cursor.execute("CREATE EXTENSION IF NOT EXISTS btree_gin")
    except DatabaseError as exc:
        log.warning("btree_gin is not available (%s); %s not created: recall in one conversation "
                    "will be slower on large tables", str(exc).strip(), INDEX)
        return
    with connection.cursor() as cursor:
        cursor.execute(f"CREATE INDEX IF NOT EXISTS {INDEX} ON messages USING gin (chat_id, search_vector)")


def backwards(apps, schema_editor):
    connection = schema_editor.connection
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute(f"DROP INDEX IF EXISTS {INDEX}")


class Migration(migrations.Migration):
    dependencies = [("memory", "0007_messages_window_idx")]
    operations = [migrations.RunPython(forwards, backwards)]
