"""Tallies of growth_sends per (campaign, status, minute of sent_at), kept by statement-level
triggers, so that the admin, the monitor and the reports count a campaign of ten million rows
without reading them (growth.models.SendTally, growth/managers/tallies.sql).

Each trigger groups its statement's transition table(s), so a claim or a settle of 500 rows
appends two or three delta rows, whatever the batch size; an UPDATE that changes no row's
campaign, status or sent minute (a lease renewal) appends none. Deltas are only ever inserted:
concurrent writers of growth_sends never wait on one another for a counter.
"""

from django.db import migrations, models


# date_trunc(..., 'UTC'): a minute is the same minute whatever the session's TimeZone.
TALLIES = """
CREATE FUNCTION growth_tally_sends() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        INSERT INTO growth_send_tally_deltas (campaign_id, status, sent_minute, sends)
        SELECT campaign_id, status, date_trunc('minute', sent_at, 'UTC'), count(*)
          FROM new_rows
         GROUP BY 1, 2, 3;
    ELSIF TG_OP = 'DELETE' THEN
        INSERT INTO growth_send_tally_deltas (campaign_id, status, sent_minute, sends)
        SELECT campaign_id, status, date_trunc('minute', sent_at, 'UTC'), -count(*)
          FROM old_rows
         GROUP BY 1, 2, 3;
    ELSE
        INSERT INTO growth_send_tally_deltas (campaign_id, status, sent_minute, sends)
        SELECT campaign_id, status, sent_minute, sum(sends)
          FROM (SELECT campaign_id, status, date_trunc('minute', sent_at, 'UTC') AS sent_minute,
                       1 AS sends
                  FROM new_rows
                 UNION ALL
                SELECT campaign_id, status, date_trunc('minute', sent_at, 'UTC'), -1
                  FROM old_rows) AS moved
         GROUP BY 1, 2, 3
        HAVING sum(sends) <> 0;
    END IF;
    RETURN NULL;
END $$;

CREATE FUNCTION growth_untally_truncated() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM growth_send_tally_deltas;
    DELETE FROM growth_send_tallies;
    RETURN NULL;
END $$;

-- A trigger with transition tables serves one event only.
CREATE TRIGGER growth_sends_tally_insert AFTER INSERT ON growth_sends
    REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION growth_tally_sends();
CREATE TRIGGER growth_sends_tally_update AFTER UPDATE ON growth_sends
    REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION growth_tally_sends();
CREATE TRIGGER growth_sends_tally_delete AFTER DELETE ON growth_sends
    REFERENCING OLD TABLE AS old_rows
    FOR EACH STATEMENT EXECUTE FUNCTION growth_tally_sends();
CREATE TRIGGER growth_sends_tally_truncate AFTER TRUNCATE ON growth_sends
    FOR EACH STATEMENT EXECUTE FUNCTION growth_untally_truncated();

-- What every count reads: the tallies and the deltas not folded yet. A condition on
-- campaign_id reaches both tables' indexes through the GROUP BY.
CREATE VIEW growth_send_counts AS
SELECT campaign_id, status, sent_minute, sum(sends)::bigint AS sends
  FROM (SELECT campaign_id, status, sent_minute, sends FROM growth_send_tallies
         UNION ALL
        SELECT campaign_id, status, sent_minute, sends FROM growth_send_tally_deltas) AS both_
 GROUP BY campaign_id, status, sent_minute;

-- The sends already there, counted once with their writers held off (SHARE blocks every
-- INSERT, UPDATE and DELETE until this migration commits).
LOCK TABLE growth_sends IN SHARE MODE;
INSERT INTO growth_send_tallies (campaign_id, status, sent_minute, sends)
SELECT campaign_id, status, date_trunc('minute', sent_at, 'UTC'), count(*)
  FROM growth_sends
 GROUP BY 1, 2, 3;
"""

UNTALLIES = """
DROP VIEW growth_send_counts;
DROP TRIGGER growth_sends_tally_insert ON growth_sends;
DROP TRIGGER growth_sends_tally_update ON growth_sends;
DROP TRIGGER growth_sends_tally_delete ON growth_sends;
DROP TRIGGER growth_sends_tally_truncate ON growth_sends;
DROP FUNCTION growth_tally_sends();
DROP FUNCTION growth_untally_truncated();
"""


class Migration(migrations.Migration):

    dependencies = [
        ('growth', '0014_claim_by_campaign_only'),
    ]

    operations = [
        migrations.CreateModel(
            name='SendTally',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('campaign_id', models.BigIntegerField()),
                ('status', models.CharField(max_length=16)),
                ('sent_minute', models.DateTimeField(null=True)),
                ('sends', models.BigIntegerField()),
            ],
            options={
                'db_table': 'growth_send_tallies',
                'constraints': [models.UniqueConstraint(fields=('campaign_id', 'status', 'sent_minute'), name='send_tally_key', nulls_distinct=False)],
            },
        ),
        migrations.CreateModel(
            name='SendTallyDelta',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('campaign_id', models.BigIntegerField()),
                ('status', models.CharField(max_length=16)),
                ('sent_minute', models.DateTimeField(null=True)),
                ('sends', models.BigIntegerField()),
            ],
            options={
                'db_table': 'growth_send_tally_deltas',
                'indexes': [models.Index(fields=['campaign_id'], name='send_tally_delta_campaign')],
            },
        ),
        migrations.RunSQL(TALLIES, reverse_sql=UNTALLIES),
    ]
