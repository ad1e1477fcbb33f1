"""PostgreSQL: a BRIN index of messages' ids and times, so a recall pass reads only the pages of its span.

A GIN index hands over every row holding a word, in no useful order, and each is then fetched from the
heap to be filtered and sorted: a word in 1,800 of a million messages costs 1,800 heap blocks when only
its newest 80 are wanted. Messages are appended in id and time order, so a summary of each 32 pages
(about 100 kB at a million messages) narrows the GIN bitmap to the pages of an id window or a time span
before the heap is read. `autosummarize` summarises each range as it fills, so the newest pages are not
read whole until the next vacuum.

The id is indexed as `id + 0`, the form only an index pass writes (`memory.search.postgres._ids`): a
summary of plain `id` also answers `id = ANY(…)`, and the planner, taking it for selective, chose it over
the primary key to rank 240 candidates of one conversation (24,000 blocks, 690 ms instead of 8).
"""

from django.db import migrations

INDEX = "messages_span_brin"


def forwards(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(f"CREATE INDEX IF NOT EXISTS {INDEX} ON messages USING brin ((id + 0), created_at) "
                              "WITH (pages_per_range = 32, autosummarize = on)")


def backwards(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(f"DROP INDEX IF EXISTS {INDEX}")


class Migration(migrations.Migration):
    dependencies = [("memory", "0013_directive_approval")]
    operations = [migrations.RunPython(forwards, backwards)]
