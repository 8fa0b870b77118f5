"""Fewer indexes written on every claim and settle: job_id becomes a column the database computes
from (campaign, subscriber), whose unique constraint already makes it unique; the (account,
email_lower) and (account, sent_at) indexes give way to lookups through each campaign's own
indexes, (campaign, email_lower) and (campaign, status, sent_at); the unique constraint on
(campaign, subscriber) becomes (subscriber, campaign) and replaces the foreign key's index."""

import django.db.models.deletion
import django.db.models.functions.comparison
import django.db.models.functions.text
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ("growth", "0006_leaner_send_indexes"),
    ]

    operations = [
        migrations.RemoveConstraint(model_name="send", name="send_unique_subscriber"),
        migrations.AlterField(
            model_name="send",
            name="subscriber",
            field=models.ForeignKey(db_index=False, on_delete=django.db.models.deletion.PROTECT,
                                    related_name="sends", to="growth.subscriber"),
        ),
        migrations.AddConstraint(
            model_name="send",
            constraint=models.UniqueConstraint(models.F("subscriber"), models.F("campaign"),
                                               name="send_unique_subscriber"),
        ),
        migrations.RemoveConstraint(model_name="send", name="send_unique_job_id"),
        migrations.RemoveIndex(model_name="send", name="send_account_address"),
        migrations.RemoveIndex(model_name="send", name="send_sent_at"),
        migrations.RemoveIndex(model_name="send", name="send_campaign_status"),
        migrations.AddIndex(
            model_name="send",
            index=models.Index(models.F("campaign"), models.F("status"), models.F("sent_at"),
                               name="send_campaign_status"),
        ),
        # A column cannot become a generated one in place: dropped and added again (a rewrite of
        # growth_sends, whose values stay the same: the build always wrote exactly this).
        migrations.RemoveField(model_name="send", name="job_id"),
        migrations.AddField(
            model_name="send",
            name="job_id",
            field=models.GeneratedField(
                db_persist=True,
                expression=django.db.models.functions.text.Concat(
                    models.Value("campaign:"),
                    django.db.models.functions.comparison.Cast("campaign_id", models.TextField()),
                    models.Value(":"),
                    django.db.models.functions.comparison.Cast("subscriber_id", models.TextField()),
                    output_field=models.TextField(),
                ),
                output_field=models.CharField(max_length=100),
            ),
        ),
    ]
