"""The lease protocol's tables (docs/one-write-per-recipient.md, growth/managers/leases.sql): a
cursor per campaign and a lease per claim. A campaign built with SENDER_PROTOCOL=leases gets its
cursor with its recipient list, and runs on the lease protocol because it has one; the others,
those built before included, stay on the row protocol. growth_sends's indexes of the rows due
again behind a cursor: 0020.
"""

import django.contrib.postgres.fields
import django.db.models.deletion
import django.db.models.functions.datetime
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('growth', '0018_reported_unsent_indexes'),
    ]

    operations = [
        migrations.CreateModel(
            name='SendCursor',
            fields=[
                ('campaign', models.OneToOneField(on_delete=django.db.models.deletion.CASCADE, primary_key=True, related_name='+', serialize=False, to='growth.campaign')),
                ('claimed_to', models.BigIntegerField(db_default=0)),
            ],
            options={
                'db_table': 'growth_send_cursors',
            },
        ),
        migrations.CreateModel(
            name='SendLease',
            fields=[
                ('id', models.BigAutoField(primary_key=True, serialize=False)),
                ('worker_id', models.CharField(blank=True, max_length=200, null=True)),
                ('expires_at', models.DateTimeField(blank=True, null=True)),
                ('send_ids', django.contrib.postgres.fields.ArrayField(base_field=models.BigIntegerField(), size=None)),
                ('handed_over_at', models.DateTimeField(blank=True, null=True)),
                ('takeovers', models.PositiveIntegerField(db_default=0)),
                ('created_at', models.DateTimeField(db_default=django.db.models.functions.datetime.Now())),
            ],
            options={
                'db_table': 'growth_send_leases',
            },
        ),
        migrations.AddField(
            model_name='sendlease',
            name='campaign',
            field=models.ForeignKey(db_index=False, on_delete=django.db.models.deletion.CASCADE, related_name='+', to='growth.campaign'),
        ),
        migrations.AddIndex(
            model_name='sendlease',
            index=models.Index(models.F('campaign'), models.F('id'), condition=models.Q(('worker_id__isnull', True)), name='send_lease_free'),
        ),
        migrations.AddIndex(
            model_name='sendlease',
            index=models.Index(models.F('expires_at'), condition=models.Q(('worker_id__isnull', False)), name='send_lease_expiry'),
        ),
    ]
