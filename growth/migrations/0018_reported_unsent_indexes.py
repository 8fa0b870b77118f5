"""The reputation figures' reported sends that are not 'sent' (in doubt, or failed when the report
came), by (campaign_id, updated_at), one partial index per kind: the tallies count the sent ones
per minute of sent_at, and these have none, so each campaign's range of these is counted
index-only. A bounce reported on a row our relay refused for good is left out of
send_bounced_unsent: it is counted once, with the refusals (send_hard_refused, migration 0016).
Few rows in a real send; built CONCURRENTLY, so that a live send is not held up.
reputation.sql's _bounced_unsent and _complained_unsent are these predicates, as its queries
write them.
"""

from django.db import migrations


class Migration(migrations.Migration):
    atomic = False  # CREATE INDEX CONCURRENTLY

    dependencies = [
        ('growth', '0017_reported_sends'),
    ]

    operations = [
        migrations.RunSQL(
            "CREATE INDEX CONCURRENTLY send_bounced_unsent ON growth_sends (campaign_id, updated_at) "
            "WHERE bounce_reported AND NOT status = 'sent' "
            "AND NOT (status = 'failed' AND growth_hard_refusal(last_error));",
            reverse_sql="DROP INDEX CONCURRENTLY send_bounced_unsent;"),
        migrations.RunSQL(
            "CREATE INDEX CONCURRENTLY send_complained_unsent ON growth_sends (campaign_id, updated_at) "
            "WHERE complaint_reported AND NOT status = 'sent';",
            reverse_sql="DROP INDEX CONCURRENTLY send_complained_unsent;"),
    ]
