"""Memory rows and their events reference the review run that wrote them by a foreign key.

Until now a row's `run_id` held the text `run:<id>` and an event named its run only in `actor_id`
(`run:<id>` with actor type `reviewer`). The new `run` fields are filled from those strings; a string
that names no existing run leaves the field empty. Backwards, `run_id` gets its `run:<id>` text again
(events keep `actor_id`, which this migration never changes). The column keeps its name, `run_id`.
"""

import django.db.models.deletion
from django.db import migrations, models

from memory import fts

BATCH = 500


def _run_number(text: str) -> int | None:
    return int(text[4:]) if text.startswith("run:") and text[4:].isdigit() else None


def fill_from_strings(apps, schema_editor):
    Memory, MemoryEvent, ReviewRun = (apps.get_model("memory", name) for name in ("Memory", "MemoryEvent", "ReviewRun"))
    known = set(ReviewRun.objects.values_list("id", flat=True))
    for text in Memory.objects.exclude(run_text="").values_list("run_text", flat=True).distinct():
        number = _run_number(text)
        if number in known:
            Memory.objects.filter(run_text=text).update(review_run_id=number)
    events = MemoryEvent.objects.filter(actor_type="reviewer", actor_id__startswith="run:")
    for text in events.values_list("actor_id", flat=True).distinct():
        number = _run_number(text)
        if number in known:
            events.filter(actor_id=text).update(run_id=number)


def repair_search_triggers(apps, schema_editor):
    """SQLite rebuilt `memories` for the new columns, which drops its FTS triggers: put them back."""
    if schema_editor.connection.vendor == "sqlite":
        fts.repair(schema_editor.connection)


def fill_strings(apps, schema_editor):
    Memory = apps.get_model("memory", "Memory")
    for number in Memory.objects.exclude(review_run=None).values_list("review_run_id", flat=True).distinct():
        Memory.objects.filter(review_run_id=number).update(run_text=f"run:{number}")


class Migration(migrations.Migration):
    dependencies = [("memory", "0008_messages_chat_search_idx")]

    operations = [
        migrations.RenameField("memory", "run_id", "run_text"),
        migrations.AddField(
            model_name="memory",
            name="review_run",
            field=models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.SET_NULL,
                                    related_name="+", to="memory.reviewrun", db_column="review_run_ref",
                                    help_text="the review run that last wrote the row"),
        ),
        migrations.AddField(
            model_name="memoryevent",
            name="run",
            field=models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.SET_NULL,
                                    related_name="events", to="memory.reviewrun",
                                    help_text="the review run that made the change"),
        ),
        migrations.RunPython(fill_from_strings, fill_strings),
        migrations.RemoveField("memory", "run_text"),
        migrations.RenameField("memory", "review_run", "run"),
        migrations.AlterField(
            model_name="memory",
            name="run",
            field=models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.SET_NULL,
                                    related_name="+", to="memory.reviewrun",
                                    help_text="the review run that last wrote the row"),
        ),
        migrations.RunPython(repair_search_triggers, repair_search_triggers),
    ]
