from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ("api", "0001_initial"),
    ]

    operations = [
        migrations.AddField(
            model_name="apikey",
            name="may_assert_operator",
            field=models.BooleanField(default=False),
        ),
    ]
