"""growth_rate_limits.version: the configuration's version, which an operator's edit must name to
be saved (growth.admin.limits: a form loaded before another edit is refused, not written over it).
A constant default: adding it rewrites nothing."""

from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('growth', '0029_send_in_doubt_since'),
    ]

    operations = [
        migrations.AddField(
            model_name='ratelimit',
            name='version',
            field=models.PositiveIntegerField(db_default=1, editable=False),
        ),
    ]
