"""Which account a LogEntry of /app/ is about (growth.tenant.audit)."""

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('admin', '0003_logentry_add_action_flag_choices'),
        ('growth', '0035_unique_violation_messages'),
    ]

    operations = [
        migrations.CreateModel(
            name='AccountLogEntry',
            fields=[
                ('entry', models.OneToOneField(on_delete=django.db.models.deletion.CASCADE, primary_key=True, related_name='+', serialize=False, to='admin.logentry')),
                ('email_lower', models.CharField(blank=True, max_length=320)),
                ('account', models.ForeignKey(db_index=False, on_delete=django.db.models.deletion.CASCADE, related_name='+', to='growth.account')),
            ],
            options={
                'db_table': 'growth_account_log_entries',
                'indexes': [models.Index(fields=['account', 'entry'], name='account_log_recent'), models.Index(fields=['account', 'email_lower', 'entry'], name='account_log_address')],
            },
        ),
    ]
