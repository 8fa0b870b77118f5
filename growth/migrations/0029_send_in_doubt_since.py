"""growth_sends.in_doubt_since: an operator's retry of a row in doubt clears its hand-over (the
claim sends it again under its key, as the operator chose) and keeps here that an earlier
attempt's message may have arrived, for a cancel and for "resend to the rest". Nullable, no
default: adding it rewrites nothing. send_queued_in_doubt gives way to send_queued_doubt_kept,
whose condition names it too (the rows a cancel makes 'unknown'); built CONCURRENTLY before the
old one goes, as growth_sends keeps taking writes meanwhile."""

from django.contrib.postgres.operations import AddIndexConcurrently, RemoveIndexConcurrently
from django.db import migrations, models


class Migration(migrations.Migration):
    atomic = False  # CREATE INDEX CONCURRENTLY

    dependencies = [
        ('growth', '0028_campaign_sender'),
    ]

    operations = [
        migrations.AddField(
            model_name='send',
            name='in_doubt_since',
            field=models.DateTimeField(blank=True, null=True),
        ),
        AddIndexConcurrently(
            model_name='send',
            index=models.Index(models.F('campaign'),
                               condition=models.Q(('status', 'queued'),
                                                  models.Q(('handed_over_at__isnull', False),
                                                           ('in_doubt_since__isnull', False),
                                                           _connector='OR')),
                               name='send_queued_doubt_kept'),
        ),
        RemoveIndexConcurrently(
            model_name='send',
            name='send_queued_in_doubt',
        ),
    ]
