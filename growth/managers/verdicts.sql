-- Verdicts about sends whose outcome was in doubt ('unknown'). A status change is written in the
-- same statement as its growth_send_verdicts row: neither ever exists without the other.

-- settle_unknown --
-- unknown -> sent | failed, on evidence (one text per send). Only rows still in doubt move
-- (_settled_by_evidence, a compare-and-set): of two settles of one row (two reconcilers, an ESP
-- event and an operator) the first wins, the other changes nothing and records nothing. The rows
-- are locked in id order first, so that two settles of overlapping rows wait for each other
-- instead of deadlocking; the lock re-checks the row another settle just committed, and skips it.
-- A 'sent' row gets sent_at now(), as an operator's mark_delivered gives it (the evidence has the
-- relay's own time). The doubt is over: in_doubt_since goes, and a row queued again is no longer
-- due.
WITH given AS (
    SELECT g.id, g.evidence
      FROM unnest(%(ids)s::bigint[], %(evidence)s::text[]) AS g(id, evidence)
), locked AS (
    SELECT s.id
      FROM growth_sends s
     WHERE s.id IN (SELECT id FROM given)
       AND {{ _settled_by_evidence }}
     ORDER BY s.id
       FOR NO KEY UPDATE
), moved AS (
    UPDATE growth_sends s
       SET status = %(verdict)s::text,
           sent_at = CASE WHEN %(verdict)s::text = 'sent' THEN now() ELSE s.sent_at END,
           lease_expires_at = NULL, next_attempt_at = NULL, in_doubt_since = NULL,
           updated_at = now(),
           last_error = 'marked ' || %(verdict)s::text || ' by ' || %(decided_by)s::text
                        || ' after: ' || s.last_error
      FROM given g
     WHERE s.id = g.id
       AND s.id IN (SELECT id FROM locked)
       AND {{ _settled_by_evidence }}
    RETURNING s.id, g.evidence
)
INSERT INTO growth_send_verdicts (send_id, verdict, decided_by, evidence, decided_at)
SELECT m.id, %(verdict)s::text, %(decided_by)s::text, m.evidence, now()
  FROM moved m
RETURNING send_id;

-- _settled_by_evidence --
-- A row s that evidence about its message settles as %(verdict)s: 'unknown'; and, if the caller
-- says so (queued_again: an ESP's event, which names the message by its key) and the message
-- arrived ('sent'), a row queued again in doubt (sends._doubt_kept: by an operator's retry, or
-- after its worker was lost) that no claim holds on the wire ('sending'): sent again, it would
-- arrive twice. A row of the lease protocol in a live lease is 'queued' too; its settle then
-- finds it moved on and leaves it. Evidence that the message did not arrive leaves a row queued
-- again to go.
(s.status = 'unknown'
 OR (%(queued_again)s AND %(verdict)s::text = 'sent'
     AND s.status = 'queued' AND {{ sends._doubt_kept }}))

-- record --
-- The verdicts of status changes that another statement of the caller's transaction made (a
-- retry goes through sends.sql's retry_unknown, which locks the campaigns as it must): both
-- commit together or not at all.
INSERT INTO growth_send_verdicts (send_id, verdict, decided_by, evidence, decided_at)
SELECT g.id, %(verdict)s::text, %(decided_by)s::text, g.evidence, now()
  FROM unnest(%(ids)s::bigint[], %(evidence)s::text[]) AS g(id, evidence)
RETURNING send_id;

-- unknown_in_campaign --
-- the campaign's rows in doubt, through (campaign_id, status, sent_at)
SELECT id, subscriber_id, email, resent_in_id IS NOT NULL AS resent
  FROM growth_sends
 WHERE campaign_id = %(campaign_id)s
   AND status = 'unknown'
 ORDER BY id;

-- lock_campaign --
-- A retry of the campaign's unknown rows, step 1: the campaign first, as every other statement
-- that locks a campaign and its rows takes them (cancel, settle, recovery, retry_unknown).
SELECT id, status
  FROM growth_campaigns
 WHERE id = %(campaign_id)s
   FOR NO KEY UPDATE;

-- lock_retryable --
-- Step 2: the campaign's unknown rows that may be queued again, locked until commit. Never a row
-- a follow-up campaign took (resent_in): its recipient is that campaign's now. A follow-up that
-- takes a row meanwhile either committed first (the lock re-checks resent_in and skips the row)
-- or waits for this transaction to commit, and then sees the row as the retry left it.
SELECT id
  FROM growth_sends
 WHERE campaign_id = %(campaign_id)s
   AND status = 'unknown'
   AND resent_in_id IS NULL
 ORDER BY id
   FOR NO KEY UPDATE;
