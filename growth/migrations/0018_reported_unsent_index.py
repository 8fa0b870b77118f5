"""The reputation figures' reported sends that are not 'sent' (in doubt, or failed when their
bounce came), by (campaign_id, updated_at): the tallies count the sent ones by minute of sent_at,
and these have none. Few rows; built CONCURRENTLY, so that a live send is not held up."""

from django.contrib.postgres.operations import AddIndexConcurrently
from django.db import migrations, models


class Migration(migrations.Migration):
    atomic = False  # CREATE INDEX CONCURRENTLY

    dependencies = [
        ('growth', '0017_reported_sends'),
    ]

    operations = [
        AddIndexConcurrently(
            model_name='send',
            index=models.Index(
                models.F('campaign'), models.F('updated_at'),
                condition=models.Q(models.Q(('bounce_reported', True),
                                            ('complaint_reported', True), _connector='OR'),
                                   models.Q(('status', 'sent'), _negated=True)),
                name='send_reported_unsent')),
    ]
