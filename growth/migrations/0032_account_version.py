"""growth_accounts.version: the version of what the account's change form shows, which an
editor's save must name to be saved (growth.admin.account_edits: a form loaded before another
save is refused, not written over it). A constant default: adding it rewrites nothing."""

from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('growth', '0031_rate_limit_change_version'),
    ]

    operations = [
        migrations.AddField(
            model_name='account',
            name='version',
            field=models.PositiveIntegerField(db_default=1, editable=False),
        ),
    ]
