"""send_queued_by_campaign carries each row's destination (INCLUDE), so that the lease claim's walk
past its cursor, which reads the destination (to set a paced one's rows aside), is an index-only
scan of it in id order, stopped by its LIMIT.

Without it, on a vacuumed table (where the visibility map makes an index-only scan look cheap),
the planner read that walk from send_queued_by_destination, index-only but ordered by
destination: every queued row of the campaign past the cursor, then sorted (on disk from some
100,000 rows), on every claim that took that plan. It estimates the walk's row comparison from
campaign_id alone, at about one row for the newest campaign, and then the sort looks free. At
100,000 recipients a claim took 18 ms at the front and fell with the rows left; with the
destination here, 2 ms throughout. At 1,000,000, right after a VACUUM: 128.6 ms and 500,500 rows
read a claim, against 6.3 ms and 1,001.

The new index is built CONCURRENTLY under another name, the old one dropped CONCURRENTLY, then
the new one renamed: the claim always has one of them.
"""

from django.db import migrations, models

SWAP = [
    migrations.RunSQL(
        "CREATE INDEX CONCURRENTLY send_queued_by_campaign_walk ON growth_sends "
        "(campaign_id, id) INCLUDE (destination_id) WHERE status = 'queued'",
        reverse_sql="DROP INDEX CONCURRENTLY send_queued_by_campaign_walk"),
    migrations.RunSQL(
        "DROP INDEX CONCURRENTLY send_queued_by_campaign",
        reverse_sql="CREATE INDEX CONCURRENTLY send_queued_by_campaign ON growth_sends "
                    "(campaign_id, id) WHERE status = 'queued'"),
    migrations.RunSQL(
        "ALTER INDEX send_queued_by_campaign_walk RENAME TO send_queued_by_campaign",
        reverse_sql="ALTER INDEX send_queued_by_campaign RENAME TO send_queued_by_campaign_walk"),
]


class Migration(migrations.Migration):
    atomic = False  # CREATE / DROP INDEX CONCURRENTLY

    dependencies = [
        ('growth', '0020_send_due_indexes'),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            database_operations=SWAP,
            state_operations=[
                migrations.RemoveIndex(model_name='send', name='send_queued_by_campaign'),
                migrations.AddIndex(
                    model_name='send',
                    index=models.Index(condition=models.Q(('status', 'queued')),
                                       fields=['campaign', 'id'], include=('destination_id',),
                                       name='send_queued_by_campaign'),
                ),
            ],
        ),
    ]
