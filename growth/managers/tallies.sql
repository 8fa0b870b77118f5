-- The tallies of growth_sends (per campaign, status, minute of sent_at, and whether a bounce or
-- a complaint was reported about the rows: migration 0017): the triggers of migration 0015 append each statement's net change to growth_send_tally_deltas, never waiting
-- on another writer; fold moves them into growth_send_tallies. Readers count through the view
-- growth_send_counts (tallies + deltas not folded yet), which is exact in any snapshot: a fold
-- removes its deltas and adds them to the tallies in one commit.

-- fold --
-- Up to %(limit)s of the oldest deltas into the tallies. SKIP LOCKED: two folders take disjoint
-- deltas and never wait on each other's; the upsert takes tally rows in key order, so folders
-- that meet on one tally queue up rather than deadlock. Returns the deltas folded.
WITH taken AS (
    SELECT id
      FROM growth_send_tally_deltas
     ORDER BY id
     LIMIT %(limit)s
       FOR UPDATE SKIP LOCKED
), folded AS (
    DELETE FROM growth_send_tally_deltas d
     USING taken
     WHERE d.id = taken.id
    RETURNING d.campaign_id, d.status, d.sent_minute, d.bounce_reported, d.complaint_reported,
              d.sends
), upserted AS (
    INSERT INTO growth_send_tallies (campaign_id, status, sent_minute, bounce_reported,
                                     complaint_reported, sends)
    SELECT campaign_id, status, sent_minute, bounce_reported, complaint_reported, sum(sends)
      FROM folded
     GROUP BY campaign_id, status, sent_minute, bounce_reported, complaint_reported
     ORDER BY campaign_id, status, sent_minute, bounce_reported, complaint_reported
        ON CONFLICT ON CONSTRAINT send_tally_key
        DO UPDATE SET sends = growth_send_tallies.sends + excluded.sends
    RETURNING 1
)
SELECT (SELECT count(*) FROM folded) AS deltas,
       (SELECT count(*) FROM upserted) AS tallies;

-- recount --
-- Rows per status counted over growth_sends itself, the slow way the tallies replace (the bench
-- checks its runs with it; the tallies may be switched off there).
SELECT campaign_id, status, count(*) AS sends
  FROM growth_sends
 WHERE campaign_id = ANY(%(campaign_ids)s)
 GROUP BY campaign_id, status;

-- differences --
-- Where the tallies and the rows disagree, per (campaign, status, sent minute, reported): none, unless
-- the triggers were bypassed (session_replication_role = replica, a restore with triggers off,
-- a trigger disabled by hand). %(campaign_ids)s NULL: every campaign. O(rows): an operator's
-- check (manage.py check_tallies), never a page's.
WITH tallied AS (
    SELECT campaign_id, status, sent_minute, bounce_reported, complaint_reported, sends
      FROM growth_send_counts
     WHERE (%(campaign_ids)s::bigint[] IS NULL OR campaign_id = ANY(%(campaign_ids)s))
       AND sends <> 0
), counted AS (
    SELECT campaign_id, status, date_trunc('minute', sent_at, 'UTC') AS sent_minute,
           bounce_reported, complaint_reported, count(*) AS sends
      FROM growth_sends
     WHERE (%(campaign_ids)s::bigint[] IS NULL OR campaign_id = ANY(%(campaign_ids)s))
     GROUP BY 1, 2, 3, 4, 5
)
SELECT coalesce(t.campaign_id, c.campaign_id) AS campaign_id,
       coalesce(t.status, c.status) AS status,
       coalesce(t.sent_minute, c.sent_minute) AS sent_minute,
       coalesce(t.bounce_reported, c.bounce_reported) AS bounce_reported,
       coalesce(t.complaint_reported, c.complaint_reported) AS complaint_reported,
       coalesce(t.sends, 0) AS tallied,
       coalesce(c.sends, 0) AS counted
  FROM tallied t
  FULL JOIN counted c
    ON c.campaign_id = t.campaign_id
   AND c.status = t.status
   AND c.sent_minute IS NOT DISTINCT FROM t.sent_minute
   AND c.bounce_reported = t.bounce_reported
   AND c.complaint_reported = t.complaint_reported
 WHERE t.sends IS DISTINCT FROM c.sends
 ORDER BY 1, 2, 3, 4, 5;

-- hold_writers --
-- For a repair: every INSERT, UPDATE and DELETE of growth_sends waits until the caller's
-- transaction ends (and this waits for those in progress), so the recount is of settled rows.
LOCK TABLE growth_sends IN SHARE MODE;

-- forget --
-- The campaigns' tallies and deltas, before their recount (same transaction).
WITH deltas AS (
    DELETE FROM growth_send_tally_deltas WHERE campaign_id = ANY(%(campaign_ids)s)
)
DELETE FROM growth_send_tallies WHERE campaign_id = ANY(%(campaign_ids)s);

-- retally --
-- The campaigns' tallies recounted from their rows.
INSERT INTO growth_send_tallies (campaign_id, status, sent_minute, bounce_reported,
                                 complaint_reported, sends)
SELECT campaign_id, status, date_trunc('minute', sent_at, 'UTC'), bounce_reported,
       complaint_reported, count(*)
  FROM growth_sends
 WHERE campaign_id = ANY(%(campaign_ids)s)
 GROUP BY 1, 2, 3, 4, 5;
