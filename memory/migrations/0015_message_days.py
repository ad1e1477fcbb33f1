"""`message_days`: the ids between which each day's messages of an agent lie, kept by a trigger on
`messages` (`memory.days`), so recall reads only a time span's ids. Filled from the messages already
stored (one pass over `messages`: about a second at a million rows)."""

from django.db import migrations, models

from memory import days


def forwards(apps, schema_editor):
    with schema_editor.connection.cursor() as cursor:
        days.install(cursor, schema_editor.connection.vendor)


def backwards(apps, schema_editor):
    with schema_editor.connection.cursor() as cursor:
        days.uninstall(cursor, schema_editor.connection.vendor)


class Migration(migrations.Migration):

    dependencies = [
        ('memory', '0014_messages_span_brin'),
    ]

    operations = [
        migrations.CreateModel(
            name='MessageDay',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('agent_id', models.CharField(max_length=64)),
                ('day', models.DateField()),
                ('first_id', models.BigIntegerField()),
                ('last_id', models.BigIntegerField()),
            ],
            options={
                'db_table': 'message_days',
                'constraints': [models.UniqueConstraint(fields=('agent_id', 'day'), name='message_days_uniq')],
            },
        ),
        migrations.RunPython(forwards, backwards),
    ]
