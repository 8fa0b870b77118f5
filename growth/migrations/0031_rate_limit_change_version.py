"""growth_rate_limit_changes.version: the configuration version a change no user saved made (a
worker re-applying the SENDER_RATE_LIMIT setting), for a form loaded before it to be told who
changed the limit. Nullable, no default: adding it rewrites nothing."""

from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('growth', '0030_rate_limit_version'),
    ]

    operations = [
        migrations.AddField(
            model_name='ratelimitchange',
            name='version',
            field=models.PositiveIntegerField(blank=True, editable=False, null=True),
        ),
    ]
