"""FTS5 mirrors of messages and memories with their triggers (SQLite; PostgreSQL search comes separately)."""

from django.db import migrations

from memory import fts


def forwards(apps, schema_editor):
    if schema_editor.connection.vendor == "sqlite":
        with schema_editor.connection.cursor() as cursor:
            fts.create_all(cursor)


def backwards(apps, schema_editor):
    if schema_editor.connection.vendor == "sqlite":
        with schema_editor.connection.cursor() as cursor:
            fts.drop_all(cursor)


class Migration(migrations.Migration):
    dependencies = [("memory", "0001_initial")]
    operations = [migrations.RunPython(forwards, backwards)]
