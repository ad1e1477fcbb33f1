"""PostgreSQL: a GIN index of (owner_id, search_vector), so recall over one owner's conversations reads
only the owner's matches of a word.

With the vector's GIN index alone, a pass over one owner chose between intersecting the word's bitmap with
the owner's whole btree index (42,236 entries and 6–9 ms for the largest owner at a million messages) and
reading every match of the word in every conversation to filter it (2,276 heap blocks, 11.7 ms, for a
word in 2,276 rows of which 78 are the owner's). In one GIN index the two posting lists are intersected
before the heap is read: that pass reads the owner's 78 matches, 1.3 ms. As for `messages_chat_search_idx`
(migration 0008), `btree_gin` holds the scalar column; where it cannot be created the migration goes on
without the index (recall stays correct, only slower over an owner) and `memory.W002` says so. Building
it at a million messages took 8 s (writes to `messages` wait for it).
"""

import logging

from django.db import DatabaseError, migrations, transaction

log = logging.getLogger(__name__)

INDEX = "messages_owner_search_idx"


def forwards(apps, schema_editor):
    connection = schema_editor.connection
    if connection.vendor != "postgresql":
        return
    try:
        with transaction.atomic(using=connection.alias), connection.cursor() as cursor:
            cursor.execute("CREATE EXTENSION IF NOT EXISTS btree_gin")
    except DatabaseError as exc:
        log.warning("btree_gin is not available (%s); %s not created: recall over one owner "
                    "will be slower on large tables", str(exc).strip(), INDEX)
        return
    with connection.cursor() as cursor:
        cursor.execute(f"CREATE INDEX IF NOT EXISTS {INDEX} ON messages USING gin (owner_id, search_vector)")


def backwards(apps, schema_editor):
    connection = schema_editor.connection
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute(f"DROP INDEX IF EXISTS {INDEX}")


class Migration(migrations.Migration):
    dependencies = [("memory", "0015_message_days")]
    operations = [migrations.RunPython(forwards, backwards)]
