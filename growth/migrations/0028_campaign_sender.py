"""growth_campaigns.from_email and from_name: the sender a campaign goes out as, its account's
taken when it starts and again when it is resumed (see Campaign). Constant defaults: adding them
rewrites nothing. Campaigns already started take their account's sender now, so that a campaign
sending during the upgrade keeps it from here on."""

from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('growth', '0027_send_lease_in_doubt_since'),
    ]

    operations = [
        migrations.AddField(
            model_name='campaign',
            name='from_email',
            field=models.CharField(blank=True, db_default='', editable=False, max_length=254),
        ),
        migrations.AddField(
            model_name='campaign',
            name='from_name',
            field=models.CharField(blank=True, db_default='', editable=False,
                                   max_length=200),
        ),
        migrations.RunSQL(
            sql="""UPDATE growth_campaigns c
                      SET from_email = a.from_email, from_name = a.from_name
                     FROM growth_accounts a
                    WHERE a.id = c.account_id
                      AND c.started_at IS NOT NULL""",
            reverse_sql=migrations.RunSQL.noop,
        ),
    ]
