-- Reads for the live monitor of campaigns: what an operator's page polls every few seconds.
-- Both run by the database's clock (now()), so that "the last minute" and the durations agree
-- with the sent_at the workers' settles wrote, whatever the web server's clock says. Minutes are
-- UTC minutes, as the tallies' sent_minute is.

-- snapshot --
-- Per campaign: its state, its rows per send status and how many it sent in its last whole
-- minute, all from its tallies (tallies.sql: a few rows a campaign, whatever its size).
-- rate_window: the seconds that minute covers; a campaign younger than a whole minute is rated
-- over the seconds it has run, so that its early rate is not diluted by time it was not running.
WITH clock AS (
    SELECT now() AS as_of, date_trunc('minute', now(), 'UTC') AS this_minute
), windows AS (
    SELECT c.id, c.status, c.started_at, c.finished_at,
           c.started_at > clock.this_minute - interval '1 minute' AS young,
           CASE WHEN c.started_at > clock.this_minute - interval '1 minute'
                THEN date_trunc('minute', c.started_at, 'UTC')
                ELSE clock.this_minute - interval '1 minute' END AS first_minute,
           CASE WHEN c.started_at > clock.this_minute - interval '1 minute'
                THEN 'infinity'::timestamptz ELSE clock.this_minute END AS past_minute
      FROM growth_campaigns c, clock
     WHERE c.id = ANY(%(campaign_ids)s)
), on_the_wire AS MATERIALIZED (  -- the lease protocol's, counted 'queued' by the tallies
    {{ leases._on_the_wire }}
), counted AS (
    SELECT k.campaign_id, k.status, sum(k.sends)::bigint AS sends,
           sum(k.sends) FILTER (WHERE k.status = 'sent' AND k.sent_minute >= w.first_minute
                                  AND k.sent_minute < w.past_minute)::bigint AS last_minute
      FROM (SELECT campaign_id, status, sent_minute, sends
              FROM growth_send_counts
             WHERE campaign_id = ANY(%(campaign_ids)s)  -- into the view's GROUP BY
            UNION ALL
            SELECT campaign_id, status, NULL, sends FROM on_the_wire
           ) k
      JOIN windows w ON w.id = k.campaign_id
     GROUP BY k.campaign_id, k.status
    HAVING sum(k.sends) <> 0
)
SELECT w.id AS campaign_id, w.status, w.started_at, w.finished_at, clock.as_of,
       coalesce(array_agg(k.status) FILTER (WHERE k.status IS NOT NULL), '{}') AS statuses,
       coalesce(array_agg(k.sends) FILTER (WHERE k.status IS NOT NULL), '{}') AS sends,
       coalesce(sum(k.last_minute), 0)::bigint AS sent_last_minute,
       CASE WHEN w.young THEN greatest(1, extract(epoch FROM clock.as_of - w.started_at))
            ELSE 60 END::float AS rate_window
  FROM windows w
 CROSS JOIN clock
  LEFT JOIN counted k ON k.campaign_id = w.id
 GROUP BY w.id, w.status, w.started_at, w.finished_at, w.young, clock.as_of;

-- series --
-- Sent per minute for the campaign's chart: its last hour of sending (up to now, or up to its
-- finish), one row a minute, an empty minute as 0 (generate_series), from the campaign's
-- tallies of sent rows (one a minute). No row for a campaign never started.
WITH span AS (
    SELECT greatest(date_trunc('minute', started_at, 'UTC'),
                    date_trunc('minute', coalesce(finished_at, now()), 'UTC')
                        - interval '59 minutes') AS first,
           date_trunc('minute', coalesce(finished_at, now()), 'UTC') AS last
      FROM growth_campaigns
     WHERE id = %(campaign_id)s
       AND started_at IS NOT NULL
), sent AS (
    SELECT sent_minute, sum(sends)::bigint AS sends
      FROM growth_send_counts
     WHERE campaign_id = %(campaign_id)s
       AND status = 'sent'
       AND sent_minute >= (SELECT first FROM span)
     GROUP BY sent_minute
)
SELECT m.minute, coalesce(sent.sends, 0) AS sends
  FROM span
 CROSS JOIN generate_series(span.first, span.last, interval '1 minute') AS m(minute)
  LEFT JOIN sent ON sent.sent_minute = m.minute
 ORDER BY m.minute;
