"""send_queued_in_doubt: the queued rows whose message may have arrived (handed over before their
worker was lost), which a cancel makes 'unknown'; its confirmation page counts them here instead
of walking the campaign's queued rows. Few rows: only recovery and a release write a row that
matches. Built CONCURRENTLY: growth_sends keeps taking writes meanwhile."""

from django.contrib.postgres.operations import AddIndexConcurrently
from django.db import migrations, models


class Migration(migrations.Migration):
    atomic = False  # CREATE INDEX CONCURRENTLY

    dependencies = [
        ('growth', '0025_campaign_template_help'),
    ]

    operations = [
        AddIndexConcurrently(
            model_name='send',
            index=models.Index(models.F('campaign'),
                               condition=models.Q(('handed_over_at__isnull', False),
                                                  ('status', 'queued')),
                               name='send_queued_in_doubt'),
        ),
    ]
