-- Reads of growth_sends as a ledger: who got what, per campaign.

-- snapshot --
-- An export's first statement: every page after it reads the database as it was then, so a
-- settle that commits mid-export shows whole or not at all (each page its own statement saw
-- one of two rows a settle moved together).
SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY;

-- campaign_page --
-- One page of a campaign's rows, after the address ``after`` (a keyset: '' for the first page),
-- in address order. It walks the unique (campaign_id, email_lower) index send_unique_address and
-- stops after ``page`` rows: no OFFSET (each page would re-read every row before it) and no
-- server-side cursor (PgBouncer's transaction mode), so every page costs the same at any depth.
-- The ESP's feedback on each send is aggregated beside it, through the send_id index of
-- growth_feedback_events: the distinct event types ('bounced; complained') and the latest
-- event's own words (the MTA's response, else the ESP's description).
SELECT s.email, s.email_lower, s.status, s.sent_at, s.attempts, s.last_error, s.job_id,
       s.provider_message_id, s.resent_in_id,
       coalesce(f.types, '') AS feedback,
       coalesce(f.detail, '') AS feedback_detail,
       f.latest_at AS feedback_at
  FROM growth_sends s
  LEFT JOIN LATERAL (
      SELECT string_agg(DISTINCT e.event_type, '; ') AS types,
             (array_agg(coalesce(nullif(e.mta_response, ''), e.description)
                        ORDER BY coalesce(e.occurred_at, e.received_at) DESC, e.id DESC)
                 FILTER (WHERE e.mta_response <> '' OR e.description <> ''))[1] AS detail,
             max(coalesce(e.occurred_at, e.received_at)) AS latest_at
        FROM growth_feedback_events e
       WHERE e.send_id = s.id
  ) f ON true
 WHERE s.campaign_id = %(campaign_id)s
   AND s.email_lower > %(after)s
 ORDER BY s.email_lower
 LIMIT %(page)s;
