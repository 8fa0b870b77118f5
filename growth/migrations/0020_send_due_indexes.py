"""growth_sends's indexes of the lease protocol's rows due again behind a campaign's cursor
(retries, an operator's retry, a paced destination's rows set aside), of all destinations or of
one (growth/managers/leases.sql, claim). Built CONCURRENTLY, so that a live send is not held up,
in a migration of their own (a concurrent build cannot run in a transaction; 0019's tables can);
few rows have a next attempt.
"""

from django.contrib.postgres.operations import AddIndexConcurrently
from django.db import migrations, models


class Migration(migrations.Migration):
    atomic = False  # AddIndexConcurrently

    dependencies = [
        ('growth', '0019_send_leases'),
    ]

    operations = [
        AddIndexConcurrently(
            model_name='send',
            index=models.Index(models.F('campaign'), models.F('next_attempt_at'), condition=models.Q(('next_attempt_at__isnull', False)), name='send_due'),
        ),
        AddIndexConcurrently(
            model_name='send',
            index=models.Index(models.F('campaign'), models.F('destination_id'), models.F('next_attempt_at'), condition=models.Q(('next_attempt_at__isnull', False)), name='send_due_by_destination'),
        ),
    ]
