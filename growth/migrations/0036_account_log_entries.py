"""The trail of what a tenant's member does in /app/ (growth.tenant.audit): each change on its
account, with its own copy of who, when and what, and a link to the admin's LogEntry of it."""

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
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('email_lower', models.CharField(blank=True, max_length=320)),
                ('username', models.CharField(max_length=150)),
                ('action_time', models.DateTimeField()),
                ('action_flag', models.PositiveSmallIntegerField()),
                ('change_message', models.TextField()),
                ('account', models.ForeignKey(db_index=False, on_delete=django.db.models.deletion.CASCADE, related_name='+', to='growth.account')),
                ('entry', models.OneToOneField(null=True, on_delete=django.db.models.deletion.SET_NULL, related_name='+', to='admin.logentry')),
            ],
            options={
                'db_table': 'growth_account_log_entries',
                'indexes': [models.Index(fields=['account', 'action_time', 'id'], name='account_log_recent'), models.Index(fields=['account', 'email_lower', 'action_time', 'id'], name='account_log_address')],
            },
        ),
    ]
