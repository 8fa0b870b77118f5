"""growth_send_leases.in_doubt_since: a lease taken over after a hand-over keeps when its rows were
first handed over, so that a claim can tell a receiver's forgotten key (then the rows are 'unknown',
not sent again). Nullable, no default: adding it rewrites nothing."""

from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('growth', '0026_send_queued_in_doubt'),
    ]

    operations = [
        migrations.AddField(
            model_name='sendlease',
            name='in_doubt_since',
            field=models.DateTimeField(blank=True, null=True),
        ),
    ]
