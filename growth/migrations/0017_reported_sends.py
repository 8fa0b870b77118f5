"""Reported bounces and complaints kept on their sends, so that the reputation figures count
them from the tallies instead of reading every event and probing its send.

growth_sends.bounce_reported and complaint_reported say that a hard bounce or a complaint about
the send was reported (an event that suppressed the address: an ESP's webhook, the bounce
mailbox). Statement triggers on growth_feedback_events keep them (growth_mark_reported, one
UPDATE per statement, however many events it wrote); the engine never writes these columns. The tallies (migration 0015)
now count by them as well, so a campaign's reported sends that were 'sent' in a window are a few
tally rows, and their status is the send's current one, as it was when the figures read the
sends themselves: a complaint that arrives while its send is still on the wire counts as a
complaint about a sent message once the worker records it.

Before: the figures read each event and its send by primary key, 40,000 x 6 us = 245 ms beside a
finished campaign of 1M rows with 4 % of them reported (measured at 1M; ~2.5 s at 10M).

Exclusive for its duration: adding the columns locks growth_sends until this migration commits,
and the backfill reads only the sends that have events.
"""

from django.db import migrations, models

REPORTED = """
-- The sends' flags, recomputed from their events: a second report of the same kind writes
-- nothing (and locks nothing); a deleted one unmarks its send only if no other says the same.
CREATE FUNCTION growth_mark_reported(sends bigint[]) RETURNS void LANGUAGE sql AS $$
    UPDATE growth_sends s
       SET bounce_reported = r.bounced, complaint_reported = r.complained
      FROM (SELECT x.id,
                   EXISTS (SELECT 1 FROM growth_feedback_events e
                            WHERE e.send_id = x.id AND e.suppressed
                              AND e.event_type = 'bounced') AS bounced,
                   EXISTS (SELECT 1 FROM growth_feedback_events e
                            WHERE e.send_id = x.id AND e.suppressed
                              AND e.event_type = 'complained') AS complained
              FROM unnest(sends) AS x(id)) AS r
     WHERE s.id = r.id
       AND (s.bounce_reported, s.complaint_reported) IS DISTINCT FROM (r.bounced, r.complained);
$$;

-- Per statement: a webhook records one event, a bulk import thousands, each in one UPDATE.
CREATE FUNCTION growth_report_sends() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        PERFORM growth_mark_reported(ARRAY(SELECT DISTINCT send_id FROM new_rows
                                            WHERE send_id IS NOT NULL));
    ELSIF TG_OP = 'DELETE' THEN
        PERFORM growth_mark_reported(ARRAY(SELECT DISTINCT send_id FROM old_rows
                                            WHERE send_id IS NOT NULL));
    ELSE
        PERFORM growth_mark_reported(ARRAY(SELECT send_id FROM new_rows WHERE send_id IS NOT NULL
                                           UNION
                                           SELECT send_id FROM old_rows WHERE send_id IS NOT NULL));
    END IF;
    RETURN NULL;
END $$;

-- A trigger with transition tables serves one event only, and takes no column list.
CREATE TRIGGER growth_feedback_events_report_insert AFTER INSERT ON growth_feedback_events
    REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION growth_report_sends();
CREATE TRIGGER growth_feedback_events_report_update AFTER UPDATE ON growth_feedback_events
    REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION growth_report_sends();
CREATE TRIGGER growth_feedback_events_report_delete AFTER DELETE ON growth_feedback_events
    REFERENCING OLD TABLE AS old_rows
    FOR EACH STATEMENT EXECUTE FUNCTION growth_report_sends();

-- The tallies, by the two columns as well (migration 0015's function, with them).
CREATE OR REPLACE FUNCTION growth_tally_sends() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        INSERT INTO growth_send_tally_deltas (campaign_id, status, sent_minute, bounce_reported,
                                              complaint_reported, sends)
        SELECT campaign_id, status, date_trunc('minute', sent_at, 'UTC'), bounce_reported,
               complaint_reported, count(*)
          FROM new_rows
         GROUP BY 1, 2, 3, 4, 5;
    ELSIF TG_OP = 'DELETE' THEN
        INSERT INTO growth_send_tally_deltas (campaign_id, status, sent_minute, bounce_reported,
                                              complaint_reported, sends)
        SELECT campaign_id, status, date_trunc('minute', sent_at, 'UTC'), bounce_reported,
               complaint_reported, -count(*)
          FROM old_rows
         GROUP BY 1, 2, 3, 4, 5;
    ELSE
        INSERT INTO growth_send_tally_deltas (campaign_id, status, sent_minute, bounce_reported,
                                              complaint_reported, sends)
        SELECT campaign_id, status, sent_minute, bounce_reported, complaint_reported, sum(sends)
          FROM (SELECT campaign_id, status, date_trunc('minute', sent_at, 'UTC') AS sent_minute,
                       bounce_reported, complaint_reported, 1 AS sends
                  FROM new_rows
                 UNION ALL
                SELECT campaign_id, status, date_trunc('minute', sent_at, 'UTC'), bounce_reported,
                       complaint_reported, -1
                  FROM old_rows) AS moved
         GROUP BY 1, 2, 3, 4, 5
        HAVING sum(sends) <> 0;
    END IF;
    RETURN NULL;
END $$;

DROP VIEW growth_send_counts;
CREATE VIEW growth_send_counts AS
SELECT campaign_id, status, sent_minute, bounce_reported, complaint_reported,
       sum(sends)::bigint AS sends
  FROM (SELECT campaign_id, status, sent_minute, bounce_reported, complaint_reported, sends
          FROM growth_send_tallies
         UNION ALL
        SELECT campaign_id, status, sent_minute, bounce_reported, complaint_reported, sends
          FROM growth_send_tally_deltas) AS both_
 GROUP BY campaign_id, status, sent_minute, bounce_reported, complaint_reported;

-- The sends reported already (the update trigger moves their tallies).
UPDATE growth_sends s
   SET bounce_reported = r.bounced, complaint_reported = r.complained
  FROM (SELECT send_id, bool_or(event_type = 'bounced') AS bounced,
               bool_or(event_type = 'complained') AS complained
          FROM growth_feedback_events
         WHERE send_id IS NOT NULL
           AND suppressed
           AND event_type IN ('bounced', 'complained')
         GROUP BY send_id) AS r
 WHERE s.id = r.send_id;
"""

UNREPORTED = """
DROP TRIGGER growth_feedback_events_report_insert ON growth_feedback_events;
DROP TRIGGER growth_feedback_events_report_update ON growth_feedback_events;
DROP TRIGGER growth_feedback_events_report_delete ON growth_feedback_events;
DROP FUNCTION growth_report_sends();
DROP FUNCTION growth_mark_reported(bigint[]);
DROP VIEW growth_send_counts;
CREATE VIEW growth_send_counts AS
SELECT campaign_id, status, sent_minute, sum(sends)::bigint AS sends
  FROM (SELECT campaign_id, status, sent_minute, sends FROM growth_send_tallies
         UNION ALL
        SELECT campaign_id, status, sent_minute, sends FROM growth_send_tally_deltas) AS both_
 GROUP BY campaign_id, status, sent_minute;
CREATE OR REPLACE FUNCTION growth_tally_sends() RETURNS trigger LANGUAGE plpgsql AS $$
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
"""

# Going back folds the reported tallies into the plain ones first, so the old key stays unique.
MERGE_TALLIES = """
LOCK TABLE growth_sends IN SHARE MODE;
CREATE TEMP TABLE growth_tallies_merged ON COMMIT DROP AS
SELECT campaign_id, status, sent_minute, sum(sends) AS sends
  FROM growth_send_tallies GROUP BY 1, 2, 3;
DELETE FROM growth_send_tallies;
INSERT INTO growth_send_tallies (campaign_id, status, sent_minute, sends)
SELECT campaign_id, status, sent_minute, sends FROM growth_tallies_merged;
"""


class Migration(migrations.Migration):

    dependencies = [
        ('growth', '0016_hard_refusals'),
    ]

    operations = [
        migrations.RemoveConstraint(model_name='sendtally', name='send_tally_key'),
        migrations.AddField(
            model_name='send', name='bounce_reported',
            field=models.BooleanField(db_default=False, editable=False)),
        migrations.AddField(
            model_name='send', name='complaint_reported',
            field=models.BooleanField(db_default=False, editable=False)),
        migrations.AddField(
            model_name='sendtally', name='bounce_reported',
            field=models.BooleanField(db_default=False)),
        migrations.AddField(
            model_name='sendtally', name='complaint_reported',
            field=models.BooleanField(db_default=False)),
        migrations.AddField(
            model_name='sendtallydelta', name='bounce_reported',
            field=models.BooleanField(db_default=False)),
        migrations.AddField(
            model_name='sendtallydelta', name='complaint_reported',
            field=models.BooleanField(db_default=False)),
        migrations.RunSQL(migrations.RunSQL.noop, reverse_sql=MERGE_TALLIES),
        migrations.AddConstraint(
            model_name='sendtally',
            constraint=models.UniqueConstraint(
                fields=('campaign_id', 'status', 'sent_minute', 'bounce_reported',
                        'complaint_reported'),
                name='send_tally_key', nulls_distinct=False)),
        migrations.AddIndex(
            model_name='feedbackevent',
            index=models.Index(models.F('campaign'), models.F('event_type'),
                               models.F('received_at'), condition=models.Q(('suppressed', True)),
                               name='feedback_campaign_news')),
        migrations.RunSQL(REPORTED, reverse_sql=UNREPORTED),
    ]
